"""The scaling figures: speedup, parallel efficiency (strong and weak) and final accuracy against
the rank count, with the cost model's lines and the original's Intel timings; and where an epoch's
time goes (compute, moving bytes, waiting)."""

import math
import re

import numpy as np
import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import ScalarFormatter

from mpinet.analysis.baselines import quotable
from mpinet.analysis.costmodel import COMPUTE_KEYS
from mpinet.analysis.style import (
    DESIGN_ORDER,
    DESIGNS,
    figure_legend,
    finish,
    labelled,
    ranks_text,
    subplots,
    variant_names,
)
from mpinet.study.experiments import variant_values, varying

# The original Go project's hand-typed Intel timings (goai/plot/resultstopng.go; units and epoch
# counts never recorded), by our name of each design (its Allreduce, its Send/Recv parameter server):
# processes -> time. Drawn on the Intel scaling figure as its speedup
# relative to its own first point (7 processes), for comparison only: other hardware, summed updates.
ORIGINAL_INTEL = {
    "allreduce": {7: 90, 8: 74, 10: 74, 12: 69, 16: 59, 20: 60, 25: 47, 30: 44},
    "paramserver": {7: 203, 8: 149, 10: 118, 12: 120, 16: 111, 20: 113, 25: 138, 30: 140},
}


BARS_PER_PANEL = 16  # time_split's bars side by side: the figure stays under 1,800 px wide
THROUGHPUT = "throughput scaling: batch per rank fixed, the global batch grows"
FIXED_GLOBAL = "fixed global batch: the updates of serial at that batch"


def scaling(
    runs: pd.DataFrame,
    title: str,
    path,
    original: bool = False,
    model: pd.DataFrame | None = None,
    where: str | None = None,
) -> dict:
    """Throughput scaling (speedup and parallel efficiency against serial at the same batch per rank,
    with the ideal lines), the fixed-global-batch speedup when the study has serial runs at its runs'
    global batches, weak scaling when it sweeps samples_per_rank, and the final accuracy each design
    reached. Bars: the 95 % bootstrap interval over launches and epochs (the widest over seeds); hollow
    markers: left out of the headline (runs.csv's speedup_note: not timed alone, contended, superlinear,
    1 rank); x: more ranks than cores. `model` adds the cost model's lines, `original` the original
    project's Intel numbers, `where` a line under the figure saying on what it ran."""
    table = labelled(runs)
    variants = sorted(table["variant"].unique())
    df = table[table["algorithm"] != "serial"].dropna(subset=["speedup"])
    for column in ("weak_efficiency", "global_speedup"):  # tables without weak or fixed-global runs
        if column not in table:
            table[column] = np.nan
    weak = table[table["algorithm"] != "serial"].dropna(subset=["weak_efficiency"])
    fixed = table[table["algorithm"] != "serial"].dropna(subset=["global_speedup"])
    fig, axes, (speed, eff, weak_ax, global_ax, acc) = _panels(bool(len(weak)), bool(len(fixed)))
    _accuracy_panel(acc, table, variants)
    if df.empty:
        for ax in (speed, eff):
            note = "no speedup to draw:\nthe study has no\nmatching serial run"
            ax.text(0.5, 0.5, note, ha="center", va="center", fontsize=9, transform=ax.transAxes)
    else:
        _speedup_panels((speed, eff), df, variants)
    # the two panels share the scaling axis, not the measure: each title names its own
    axis, detail = THROUGHPUT.split(": ", 1)
    for ax, measure in ((speed, "speedup"), (eff, "efficiency")):
        ax.set_title(f"{measure}, {axis}:\n{detail}", fontsize=9)
    ranks = {*runs["ranks"]}
    with_model = model is not None and len(model) > 0
    if with_model:
        _model_panels(model, (speed, eff), weak_ax, global_ax, ranks)
        ranks |= {4, 8, 16, 32}
    if original:
        _original_markers(speed)
        ranks |= set(ORIGINAL_INTEL["allreduce"])
    shown = [ax for ax in (speed, eff, weak_ax, global_ax, acc) if ax is not None]
    speeds = [ax for ax in (speed, global_ax) if ax is not None]
    _scaling_axes(shown, speeds, sorted(ranks), wide=original or with_model)
    if weak_ax is not None:
        _weak_panel(weak_ax, weak, variants)
    if global_ax is not None:
        _global_panel(global_ax, fixed)
    foot = 0.0
    if where:
        fig.text(0.01, 0.005, f"ran on: {where}", fontsize=7, color="#555555", ha="left", va="bottom")
        foot = 0.25  # inches
    bottom = figure_legend(fig, shown, foot)  # one legend for every panel: a design looks the same in each
    return finish(fig, shown, f"{title}: scaling of the per-epoch time", path, legend=False, bottom=bottom)


def _panels(weak: bool, fixed: bool):
    """The figure and its panels: speedup, efficiency, weak (or None), fixed global batch (or None),
    accuracy; one row up to three panels, else two rows (the figure stays under 1,800 px wide)."""
    n = 3 + weak + fixed
    cols = n if n <= 3 else math.ceil(n / 2)
    rows = 1 if n <= 3 else 2
    fig, grid = subplots(rows, cols, figsize=(5.4 * cols, 4.6 * rows), squeeze=False)
    flat = list(grid.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    speed, eff = flat[0], flat[1]
    weak_ax = flat[2] if weak else None
    global_ax = flat[2 + weak] if fixed else None
    return fig, flat[:n], (speed, eff, weak_ax, global_ax, flat[n - 1])


def _global_panel(ax, fixed: pd.DataFrame) -> None:
    """Speedup over serial at the run's global batch, one line per design, variant (its batch per
    rank aside) and global batch that was run on more than one rank count."""
    others = [c for c in varying(fixed) if c != "batch_size"]
    values = pd.DataFrame({c: variant_values(fixed, c) for c in others}, index=fixed.index)
    named = variant_names(values) if others else pd.Series("", index=fixed.index)
    glob = "global batch " + fixed["global_batch"].astype(int).astype(str)
    fixed = fixed.assign(
        variant=(named + ", ").where(named != "", "") + glob,
        global_speedup_lo=fixed.get("global_speedup_ci_low", fixed["global_speedup"]),
        global_speedup_hi=fixed.get("global_speedup_ci_high", fixed["global_speedup"]),
    )
    points = fixed.assign(_quoted=quotable(fixed)).groupby(["design", "algorithm", "variant", "ranks"], sort=True)
    points = points.agg(
        mid=("global_speedup", "median"),
        lo=("global_speedup_lo", "min"),
        hi=("global_speedup_hi", "max"),
        quoted=("_quoted", "all"),
        over=("oversubscribed", "any"),
    ).reset_index()
    points = points[points.groupby(["algorithm", "variant"])["ranks"].transform("nunique") > 1]
    _lines_with_bars(ax, points, sorted(fixed["variant"].unique()))
    _mark_left_out(ax, points)
    ax.set_title(FIXED_GLOBAL, fontsize=9)
    ax.set_ylabel("speedup over serial at the same global batch")


def time_split(runs: pd.DataFrame, title: str, path) -> dict:
    """Median epoch time split into compute, moving bytes and waiting for the slowest rank, per
    design and rank count (tables without the split draw communication as one part): one panel per
    variant, another past BARS_PER_PANEL bars, the legend under the panels."""
    runs = runs.copy()
    split = "median_wait_s" in runs and runs["median_wait_s"].notna().any()
    if split:
        runs["median_transfer_s"] = runs["median_transfer_s"].fillna(runs["median_comm_s"])
        runs["median_wait_s"] = runs["median_wait_s"].fillna(0.0)
    parts = ["median_compute_s", *(("median_transfer_s", "median_wait_s") if split else ("median_comm_s",))]
    g = labelled(runs).groupby(["variant", "design", "algorithm", "ranks"], sort=False)[parts]
    df = g.mean().reset_index()
    order = ["variant", "algorithm", "design", "ranks"]
    # variants in natural order (batch 8 before 12: the numbers as numbers), designs in DESIGNS' order
    natural = {v: i for i, v in enumerate(sorted(df["variant"].unique(), key=_natural_key))}
    by = {"variant": natural, "algorithm": DESIGN_ORDER}
    df = df.sort_values(order, key=lambda c: c.map(by[c.name]) if c.name in by else c)
    panels = [
        (variant, part.iloc[i : i + BARS_PER_PANEL])
        for variant, part in df.groupby("variant", sort=False)
        for i in range(0, len(part), BARS_PER_PANEL)
    ] or [("", df)]
    most = max(len(part) for _, part in panels)
    fig, grid = subplots(len(panels), 1, figsize=(max(6, 0.9 * most + 1.4), 0.6 + 2.7 * len(panels)), squeeze=False)
    axes = list(grid.flat)
    top = max(float(df[parts].sum(axis=1).max() * 1e3), 1e-9) if len(df) else 1.0
    for ax, (variant, part) in zip(axes, panels):
        _split_bars(ax, part, parts)
        ax.set_title(variant, fontsize=9)
        ax.set_ylim(0, top * 1.05)  # one scale in every panel
    entries = {SPLIT_STYLES[p][0]: Patch(facecolor="#8c8c8c", **SPLIT_STYLES[p][1]) for p in parts}
    bottom = figure_legend(fig, [], entries=entries)  # under the panels: it never covers a bar
    return finish(fig, axes, f"{title}: where an epoch's time goes", path, legend=False, bottom=bottom)


def _natural_key(text: str) -> list:
    """'batch_size=8' before 'batch_size=12': the digits compared as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


SPLIT_STYLES = {  # a part of the epoch: its legend label and how its bar segment is drawn
    "median_compute_s": ("compute (solid, in the design's colour)", {}),
    "median_comm_s": ("communication (hatched)", {"alpha": 0.4, "hatch": "//"}),
    "median_transfer_s": ("communication: moving bytes (hatched)", {"alpha": 0.4, "hatch": "//"}),
    "median_wait_s": ("communication: waiting for the slowest rank (dotted)", {"alpha": 0.2, "hatch": ".."}),
}


def _split_bars(ax, df: pd.DataFrame, parts: list[str]) -> None:
    """One stacked bar per design and rank count, labelled with both on lines of their own."""
    x = np.arange(len(df))
    colors = [DESIGNS[a].color for a in df["algorithm"]]
    bottom = np.zeros(len(df))
    for part in parts:
        label, style = SPLIT_STYLES[part]
        ax.bar(x, df[part] * 1e3, bottom=bottom, color=colors, label=label, **style)
        bottom = bottom + df[part].to_numpy() * 1e3  # a new array: bar() keeps the one it was given
    names = df["design"].str.replace(" → ", " →\n")  # auto → node: a line each
    labels = [f"{d}\n{ranks_text(r)}" for d, r in zip(names, df["ranks"])]
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_xlim(-0.6, max(len(df), 4) - 0.4)  # a lone bar stays a bar's width, not the panel's
    ax.set_ylabel("time per epoch and rank (ms)")


def _bars(df: pd.DataFrame, measure: str) -> pd.DataFrame:
    """<measure>_lo/_hi: the 95 % bootstrap interval over launches and epochs where the table has
    it, else (tables from before intervals) the ratio at the epoch-time quartiles."""
    if f"{measure}_ci_low" in df:
        return df.assign(**{f"{measure}_lo": df[f"{measure}_ci_low"], f"{measure}_hi": df[f"{measure}_ci_high"]})
    half = df["iqr_epoch_s"].fillna(0) / 2
    return df.assign(
        **{
            f"{measure}_lo": df["serial_epoch_s"] / (df["median_epoch_s"] + half),
            f"{measure}_hi": df["serial_epoch_s"] / (df["median_epoch_s"] - half).clip(lower=1e-12),
        }
    )


def _weak_panel(ax, weak: pd.DataFrame, variants: list[str]) -> None:
    """Weak-scaling efficiency: the 1-rank epoch time with K samples over the P-rank one with P·K."""
    weak = _bars(weak, "weak_efficiency").assign(_quoted=quotable(weak))
    points = weak.groupby(["design", "algorithm", "variant", "ranks"], sort=True).agg(
        mid=("weak_efficiency", "median"),
        lo=("weak_efficiency_lo", "min"),
        hi=("weak_efficiency_hi", "max"),
        quoted=("_quoted", "all"),
        over=("oversubscribed", "any"),
    )
    _lines_with_bars(ax, points.reset_index(), variants)
    _mark_left_out(ax, points.reset_index())
    per_rank = ", ".join(str(k) for k in sorted(weak["samples_per_rank"].unique()))
    ax.set_title(f"weak scaling: {per_rank} samples per training rank fixed", fontsize=9)
    ax.set_ylabel("weak-scaling efficiency (t1(K) / tP(P·K))")
    ax.set_ylim(bottom=0)


def _mark_left_out(ax, points: pd.DataFrame) -> None:
    """The throughput panels' marks on another panel's points: hollow where the headline leaves the
    cell out (quoted False), x where it had more ranks than cores (over)."""
    left = points[~points["quoted"].astype(bool)]
    ax.plot(left["ranks"], left["mid"], "o", color="grey", markerfacecolor="white", ls="none", zorder=3)
    over = points[points["over"].astype(bool)]
    ax.plot(over["ranks"], over["mid"], "x", color="black", markersize=9, ls="none", zorder=4)


def _series(design: str, variant: str, variants: list[str]) -> tuple[str, str]:
    """A design's legend label and line style; variants of one design differ by style."""
    label = design if not variant else f"{design} ({variant})"
    return label, ("-", "--", ":", "-.")[variants.index(variant) % 4]


def _lines_with_bars(ax, points: pd.DataFrame, variants: list[str]) -> None:
    """One line per design and variant over the rank counts: mid with bars from lo to hi."""
    for (design, algorithm, variant), line in points.groupby(["design", "algorithm", "variant"]):
        label, style = _series(design, variant, variants)
        ax.errorbar(
            line["ranks"],
            line["mid"],
            yerr=[line["mid"] - line["lo"], line["hi"] - line["mid"]],
            color=DESIGNS[algorithm].color,
            ls=style,
            marker="o",
            capsize=3,
            label=label,
        )


def _accuracy_panel(ax, table: pd.DataFrame, variants: list[str]) -> None:
    """What the speed cost: final test accuracy of every design, serial included, at each rank count."""
    acc = table.groupby(["design", "algorithm", "variant", "ranks"])["final_test_accuracy"]
    _lines_with_bars(ax, acc.agg(mid="median", lo="min", hi="max").reset_index(), variants)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("final test accuracy (median, min to max over seeds)")


def _speedup_panels(axes, df: pd.DataFrame, variants: list[str]) -> None:
    """Measured speedup and efficiency: median point, bars at the 95 % interval, markers
    for runs not timed alone (hollow) and for more ranks than cores (x)."""
    df = _bars(df, "speedup").assign(_quoted=quotable(df))
    df = df.assign(efficiency_lo=df["speedup_lo"] / df["ranks"], efficiency_hi=df["speedup_hi"] / df["ranks"])
    for ax, y in zip(axes, ("speedup", "efficiency")):
        points = df.groupby(["design", "algorithm", "variant", "ranks"], sort=True).agg(
            mid=(y, "median"),
            lo=(f"{y}_lo", "min"),
            hi=(f"{y}_hi", "max"),
            isolated=("_quoted", "all"),
            over=("oversubscribed", "any"),
        )
        for (design, algorithm, variant), line in points.reset_index().groupby(["design", "algorithm", "variant"]):
            color = DESIGNS[algorithm].color
            label, style = _series(design, variant, variants)
            ax.errorbar(
                line["ranks"],
                line["mid"],
                yerr=[line["mid"] - line["lo"], line["hi"] - line["mid"]],
                color=color,
                ls=style,
                marker="none",
                capsize=3,
                label=label,
            )
            for alone, face in ((True, color), (False, "white")):
                part = line[line["isolated"] == alone]
                ax.plot(part["ranks"], part["mid"], "o", color=color, markerfacecolor=face, ls="none")
            over = line[line["over"]]
            ax.plot(over["ranks"], over["mid"], "x", color="black", markersize=9, ls="none")
    if not df["_quoted"].all():
        label = "left out of the headline (speedup_note)"
        axes[0].plot([], [], "o", color="grey", markerfacecolor="white", ls="none", label=label)
    if df["oversubscribed"].any():
        axes[0].plot([], [], "x", color="black", ls="none", label="more ranks than cores")


def _model_panels(model: pd.DataFrame, strong: tuple, weak_ax, global_ax, measured: set) -> None:
    """The model's lines in the throughput panels (`strong`), the weak-scaling panel and the fixed
    global batch's (where drawn)."""
    scaled = model["scaling"] if "scaling" in model else pd.Series("strong", index=model.index)
    # one legend entry per design for all its lines (a label differing by panel would be two)
    mine = model[(model["link"] == "measured here") & (scaled != "global")]
    several = bool((mine.groupby(["algorithm", "ranks"]).size() > 1).any())
    note = "; a line per batch and training set" if several else ""
    keys = [*COMPUTE_KEYS, "sync_every", "trained_samples", "samples_per_rank"]
    _model_lines(strong, model[scaled == "strong"], ("speedup", "efficiency"), keys, measured, note)
    if weak_ax is not None:  # a weak line's training set grows with its ranks
        weak = [k for k in keys if k != "trained_samples"]
        _model_lines([weak_ax], model[scaled == "weak"], ("weak_efficiency",), weak, measured, note)
    if global_ax is not None:  # a global line's batch per rank shrinks as its ranks grow, at each count dividing it
        fixed = [*(k for k in keys if k != "batch_size"), "global_batch"]
        _model_lines([global_ax], model[scaled == "global"], ("speedup",), fixed, measured, note, every=True)


def _model_lines(axes, model: pd.DataFrame, measures, keys, measured: set, note: str, every: bool = False) -> None:
    """The cost model with this machine's alpha and beta, to 32 ranks: a line per configuration (keys)
    under the measured points, through the powers of two and the rank counts measured (between them
    MPI's collectives switch algorithms at every power of two, and a line through every count zig-zags);
    `every`: through every count the model has (a fixed global batch's few divisors)."""
    mine = model[model["link"] == "measured here"]
    configs = mine.groupby([k for k in keys if k in mine])
    shown = mine["ranks"].isin({1 << k for k in range(8)} | measured) | every
    for i, (_, config) in enumerate(configs):
        for algorithm, line in config[shown.loc[config.index]].groupby("algorithm"):
            for ax, y in zip(axes, measures):
                ax.plot(
                    line["ranks"],
                    line[y],
                    ls="-.",
                    lw=1,
                    color=DESIGNS[algorithm].color,
                    alpha=0.6,
                    label=f"model: {DESIGNS[algorithm].name} (MPI timed here{note})" if i == 0 else None,
                )


def _original_markers(ax) -> None:
    """The original's Intel timings as speedups relative to its own first point."""
    for (design, times), marker in zip(ORIGINAL_INTEL.items(), ("^", "v")):
        first = min(times)
        ax.plot(
            list(times),
            [times[first] / t for t in times.values()],
            marker,
            color="grey",
            ls=":",
            label=f"original Go {design}: speedup vs its own {first} processes (its hardware, summed updates)",
        )


def _scaling_axes(axes, speeds, ranks: list[int], wide: bool) -> None:
    """Ideal lines, labels and rank ticks; `speeds` are the speedup panels (ideal y = x), the panels
    between the first and the last the efficiencies (ideal 1); wide (up to 32 ranks): log axes."""
    if wide:
        for ax in axes:  # 1 to 32 processes: log axes keep the small rank counts readable
            ax.set_xscale("log", base=2)
        for ax in speeds:
            ax.set_yscale("log", base=2)
            ax.yaxis.set_major_formatter(ScalarFormatter())
    for ax in speeds:
        ax.plot(ranks, ranks, ls="--", color="grey", label="ideal")
    for ax in axes[1:-1]:
        if ax not in speeds:  # efficiencies, throughput and weak
            ax.axhline(1.0, ls="--", color="grey", label="ideal")
    axes[0].set_ylabel("speedup over serial at the same batch per rank")
    axes[1].set_ylabel("parallel efficiency (speedup / processes)")
    # on log axes, ticks closer than 15 % would collide
    ticks = [r for i, r in enumerate(ranks) if not wide or i == 0 or math.log2(r / ranks[i - 1]) > 0.2]
    for ax in axes:
        ax.set_xlabel("MPI processes (ranks)")
        ax.set_xticks(ticks, [str(r) for r in ticks])
        ax.minorticks_off()
