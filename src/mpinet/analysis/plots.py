"""Figures from the metrics tables (seaborn, PNG). One curve per configuration, seeds averaged with a band."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure  # the object API draws without pyplot, so no display backend is chosen
from matplotlib.ticker import ScalarFormatter

from mpinet import MpinetError
from mpinet.analysis.costmodel import COMPUTE_KEYS
from mpinet.analysis.environment import read_environment, short_form
from mpinet.analysis.figures import NAMES, save_png
from mpinet.analysis.timelines import timeline_figure
from mpinet.study.experiments import variant_values, varying

DESIGN_COLORS = {
    "serial": "#4d4d4d",
    "allreduce": "#1f77b4",
    "allgather": "#2ca02c",
    "sharded": "#9467bd",
    "paramserver": "#d62728",
}
DESIGN_NAMES = {
    "serial": "serial",
    "allreduce": "Allreduce",
    "allgather": "Allgather (factors)",
    "sharded": "sharded first layer",
    "paramserver": "parameter server (Send/Recv)",
}
SHORT_NAMES = {
    "serial": "serial",
    "allreduce": "Allreduce",
    "allgather": "Allgather",
    "sharded": "sharded",
    "paramserver": "Send/Recv PS",
}
DESIGN_ORDER = {a: i for i, a in enumerate(DESIGN_COLORS)}
MAX_VARIANT_ROWS = 6
# The original Go project's hand-typed Intel timings (goai/plot/resultstopng.go; units and epoch
# counts never recorded): processes -> time. Drawn on the Intel scaling figure as its speedup
# relative to its own first point (7 processes), for comparison only: other hardware, summed updates.
ORIGINAL_INTEL = {
    "Allreduce": {7: 90, 8: 74, 10: 74, 12: 69, 16: 59, 20: 60, 25: 47, 30: 44},
    "Send/Recv": {7: 203, 8: 149, 10: 118, 12: 120, 16: 111, 20: 113, 25: 138, 30: 140},
}


def training_curves(epochs: pd.DataFrame, title: str, path) -> dict:
    """Training loss and test accuracy per epoch, by design and rank count (the original's Loss/Accuracy figures).

    One row of panels per variant (other swept parameters), at most MAX_VARIANT_ROWS.
    """
    df = _label(epochs)
    variants, title = _shown_variants(df["variant"], title)
    fig, grid = _subplots(len(variants), 2, figsize=(12, 4.2 * len(variants)), squeeze=False)
    for row, variant in zip(grid, variants):
        part = df[df["variant"] == variant]
        _loss_and_accuracy(row, part, variant, hue="design", style="ranks", palette=_palette(df))
        row[0].get_legend().remove()  # one legend per row
    axes = list(grid.flat)
    return _finish(fig, axes, f"{title}: training curves (mean over seeds, band: min to max)", path)


def _shown_variants(variants: pd.Series, title: str) -> tuple[list[str], str]:
    """The first MAX_VARIANT_ROWS variants, and the title naming those left out (on stderr too)."""
    every = sorted(variants.unique())
    shown, left = every[:MAX_VARIANT_ROWS], every[MAX_VARIANT_ROWS:]
    if not left:
        return shown, title
    note = f"{len(left)} more variants not shown: {'; '.join(left)}"
    print(f"{title}: {note}", file=sys.stderr)
    return shown, f"{title}\n({note})"


def _loss_and_accuracy(axes, part: pd.DataFrame, title: str, **style) -> None:
    """Training loss (log scale) and test accuracy per epoch on a pair of axes; band: the seeds'
    min to max, never a band beyond what any seed reached."""
    for ax, y, label in (
        (axes[0], "train_loss", "training loss (mean per sample)"),
        (axes[1], "test_accuracy", "test accuracy"),
    ):
        sns.lineplot(data=part, x="epoch", y=y, errorbar=("pi", 100), ax=ax, **style)
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.set_title(title, fontsize=9)
    axes[0].set_yscale("log")
    axes[1].set_ylim(0, 1.02)


def data_size(epochs: pd.DataFrame, title: str, path) -> dict:
    """The original's data-size comparison (its 220 vs 14,000 images): training loss and test accuracy
    per epoch for each training-set size, one column per design (at its largest rank count), seeds
    averaged with a min-to-max band. Weak-scaling runs, whose size follows their ranks, are left out."""
    df = _label(epochs)
    if "samples_per_rank" in df:
        df = df[df["samples_per_rank"] == 0]
    # the other swept parameters (faithful, lr, ...) tell curves of one size apart by line style
    others = [c for c in varying(df) if c not in ("train_samples", "samples_per_rank")]
    df = df.assign(variant=df[others].apply(_variant_name, axis=1) if others else "")
    widest = df.groupby("algorithm")["ranks"].transform("max")
    df = df[df["ranks"] == widest].sort_values("algorithm", key=lambda c: c.map(DESIGN_ORDER))
    designs = list(dict.fromkeys(df["algorithm"]))
    fig, grid = _subplots(2, max(1, len(designs)), figsize=(5.5 * max(1, len(designs)), 8), squeeze=False)
    sizes = sorted(df["train_samples"].unique())
    if len(sizes) < 2:
        for ax in grid.flat:
            ax.text(0.5, 0.5, "one training-set size:\nsweep train_samples for this figure", ha="center", va="center")
    palette = dict(zip(sizes, sns.color_palette("viridis", len(sizes))))
    for column, algorithm in zip(grid.T, designs):
        part = df[df["algorithm"] == algorithm]
        part = part.assign(samples=part["train_samples"].map("{:,} samples".format))
        _loss_and_accuracy(
            column,
            part,
            f"{DESIGN_NAMES[algorithm]}, {_ranks(int(part['ranks'].iloc[0]))}",
            hue="samples",
            style="variant" if others else None,
            hue_order=[f"{n:,} samples" for n in sizes if n in set(part["train_samples"])],
            palette={f"{n:,} samples": c for n, c in palette.items()},
        )
    axes = list(grid.flat)
    return _finish(fig, axes, f"{title}: loss and accuracy by training-set size (band: min to max over seeds)", path)


def scaling(
    runs: pd.DataFrame,
    title: str,
    path,
    original: bool = False,
    model: pd.DataFrame | None = None,
    where: str | None = None,
) -> dict:
    """Strong scaling (speedup and parallel efficiency against the 1-rank serial run on the same
    data, with the ideal lines), weak scaling when the study sweeps samples_per_rank, and the final
    accuracy each design reached. Bars: the 95 % bootstrap interval over launches and epochs (the
    widest over seeds); hollow markers: a run or its baseline was not timed alone;
    x: more ranks than cores. `model` adds the cost model's lines, `original` the original
    project's Intel numbers, `where` a line under the figure saying on what it ran."""
    labelled = _label(runs)
    variants = sorted(labelled["variant"].unique())
    df = labelled[labelled["algorithm"] != "serial"].dropna(subset=["speedup"])
    if "weak_efficiency" not in labelled:  # a table without weak-scaling runs
        labelled["weak_efficiency"] = np.nan
    weak = labelled[labelled["algorithm"] != "serial"].dropna(subset=["weak_efficiency"])
    n_panels = 4 if len(weak) else 3
    fig, axes = _subplots(1, n_panels, figsize=(5.7 * n_panels, 4.5))
    _accuracy_panel(axes[-1], labelled, variants)
    if df.empty:
        for ax in axes[:2]:
            ax.text(0.5, 0.5, "no speedup to draw:\nthe study has no matching serial run", ha="center", va="center")
    else:
        _speedup_panels(axes[:2], df, variants)
    for ax in axes[:2]:
        ax.set_title("strong scaling: training set and batch per rank fixed", fontsize=9)
    ranks = {*runs["ranks"]}
    with_model = model is not None and len(model) > 0
    if with_model:
        scaled = model["scaling"] if "scaling" in model else pd.Series("strong", index=model.index)
        _model_lines(axes[:2], model[scaled == "strong"], ("speedup", "efficiency"))
        if len(weak):
            _model_lines(axes[2:3], model[scaled == "weak"], ("weak_efficiency",))
        ranks |= {4, 8, 16, 32}
    if original:
        _original_markers(axes[0])
        ranks |= set(ORIGINAL_INTEL["Allreduce"])
    _scaling_axes(fig, axes, sorted(ranks), wide=original or with_model, legend=not df.empty)
    if len(weak):
        _weak_panel(axes[2], weak, variants)
    held = "per-epoch time (the global batch grows with ranks)"
    if where:
        fig.text(0.01, 0.005, f"ran on: {where}", fontsize=7, color="#555555", ha="left", va="bottom")
    # _scaling_axes placed the legends
    return _finish(fig, axes, f"{title}: scaling of the {held}", path, legend=False, bottom=0.05 if where else 0)


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
    weak = _bars(weak, "weak_efficiency")
    points = weak.groupby(["design", "algorithm", "variant", "ranks"], sort=True).agg(
        mid=("weak_efficiency", "median"), lo=("weak_efficiency_lo", "min"), hi=("weak_efficiency_hi", "max")
    )
    _lines_with_bars(ax, points.reset_index(), variants)
    per_rank = ", ".join(str(k) for k in sorted(weak["samples_per_rank"].unique()))
    ax.set_title(f"weak scaling: {per_rank} samples per training rank fixed", fontsize=9)
    ax.set_ylabel("weak-scaling efficiency (t1(K) / tP(P·K))")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1)  # below, as the others


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
            color=DESIGN_COLORS[algorithm],
            ls=style,
            marker="o",
            capsize=3,
            label=label,
        )


def _accuracy_panel(ax, labelled: pd.DataFrame, variants: list[str]) -> None:
    """What the speed cost: final test accuracy of every design, serial included, at each rank count."""
    acc = labelled.groupby(["design", "algorithm", "variant", "ranks"])["final_test_accuracy"]
    _lines_with_bars(ax, acc.agg(mid="median", lo="min", hi="max").reset_index(), variants)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("final test accuracy (median, min to max over seeds)")


def _speedup_panels(axes, df: pd.DataFrame, variants: list[str]) -> None:
    """Measured speedup and efficiency: median point, bars at the 95 % interval, markers
    for runs not timed alone (hollow) and for more ranks than cores (x)."""
    df = _bars(df, "speedup")
    df = df.assign(efficiency_lo=df["speedup_lo"] / df["ranks"], efficiency_hi=df["speedup_hi"] / df["ranks"])
    for ax, y in zip(axes, ("speedup", "efficiency")):
        points = df.groupby(["design", "algorithm", "variant", "ranks"], sort=True).agg(
            mid=(y, "median"),
            lo=(f"{y}_lo", "min"),
            hi=(f"{y}_hi", "max"),
            isolated=("speedup_isolated", "all"),
            over=("oversubscribed", "any"),
        )
        for (design, algorithm, variant), line in points.reset_index().groupby(["design", "algorithm", "variant"]):
            color = DESIGN_COLORS[algorithm]
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
    if not df["speedup_isolated"].all():
        axes[0].plot([], [], "o", color="grey", markerfacecolor="white", ls="none", label="not timed alone")
    if df["oversubscribed"].any():
        axes[0].plot([], [], "x", color="black", ls="none", label="more ranks than cores")


def _model_lines(axes, model: pd.DataFrame, measures: tuple[str, ...]) -> None:
    """The cost model with this machine's alpha and beta, to 32 ranks: lines under the measured points."""
    mine = model[model["link"] == "measured here"]
    keys = [*COMPUTE_KEYS, "sync_every", "train_samples", "samples_per_rank"]
    configs = mine.groupby(
        [k for k in keys if k in mine and (k != "train_samples" or measures[0] != "weak_efficiency")]
    )
    for i, (_, config) in enumerate(configs):
        for algorithm, line in config.groupby("algorithm"):
            for ax, y in zip(axes, measures):
                ax.plot(
                    line["ranks"],
                    line[y],
                    ls="-.",
                    lw=1,
                    color=DESIGN_COLORS[algorithm],
                    alpha=0.6,
                    label=f"model: {DESIGN_NAMES[algorithm]} (alpha, beta measured here)" if i == 0 else None,
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


def _scaling_axes(fig, axes, ranks: list[int], wide: bool, legend: bool) -> None:
    """Ideal lines, labels, rank ticks and legends; wide (up to 32 ranks): log axes, legends below."""
    if wide:
        for ax in axes:  # 1 to 32 processes: log axes keep the small rank counts readable
            ax.set_xscale("log", base=2)
        axes[0].set_yscale("log", base=2)
        axes[0].yaxis.set_major_formatter(ScalarFormatter())
    axes[0].plot(ranks, ranks, ls="--", color="grey", label="ideal")
    for ax in axes[1:-1]:  # efficiencies, strong and weak
        ax.axhline(1.0, ls="--", color="grey", label="ideal")
    axes[0].set_ylabel("speedup over serial (median epoch time)")
    axes[1].set_ylabel("parallel efficiency (speedup / processes)")
    # on log axes, ticks closer than 15 % would collide
    ticks = [r for i, r in enumerate(ranks) if not wide or i == 0 or math.log2(r / ranks[i - 1]) > 0.2]
    if wide and legend:
        fig.set_figheight(7)
    for ax in axes:
        ax.set_xlabel("MPI processes (ranks)")
        ax.set_xticks(ticks, [str(r) for r in ticks])
        ax.minorticks_off()
        if legend and wide:  # many entries: below the panel, so no line hides behind them
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1)
        elif legend:
            ax.legend(fontsize=8, loc="best")


def time_split(runs: pd.DataFrame, title: str, path) -> dict:
    """Median epoch time split into compute, moving bytes and waiting for the slowest rank, per
    design and rank count (tables without the split draw communication as one part)."""
    runs = runs.copy()
    split = "median_wait_s" in runs and runs["median_wait_s"].notna().any()
    if split:
        runs["median_transfer_s"] = runs["median_transfer_s"].fillna(runs["median_comm_s"])
        runs["median_wait_s"] = runs["median_wait_s"].fillna(0.0)
    parts = ["median_compute_s", *(("median_transfer_s", "median_wait_s") if split else ("median_comm_s",))]
    g = _label(runs).groupby(["variant", "algorithm", "ranks"], sort=False)[parts]
    df = g.mean().reset_index()
    order = ["variant", "algorithm", "ranks"]
    df = df.sort_values(order, key=lambda c: c.map(DESIGN_ORDER) if c.name == "algorithm" else c)
    # one parameter per line, so a bar's label never runs into its neighbour's
    labels = [
        "\n".join([SHORT_NAMES[a], _ranks(r), *filter(None, v.split(", "))])
        for v, a, r in zip(df["variant"], df["algorithm"], df["ranks"])
    ]
    fig, ax = _subplots(figsize=(max(6, 1.3 * len(df)), 4.5))
    x = np.arange(len(df))
    colors = [DESIGN_COLORS[a] for a in df["algorithm"]]
    styles = {
        "median_compute_s": ("compute", {}),
        "median_comm_s": ("communication (hatched)", {"alpha": 0.4, "hatch": "//"}),
        "median_transfer_s": ("communication: moving bytes (hatched)", {"alpha": 0.4, "hatch": "//"}),
        "median_wait_s": ("communication: waiting for the slowest rank (dotted)", {"alpha": 0.2, "hatch": ".."}),
    }
    bottom, handles = np.zeros(len(df)), []
    for part in parts:
        label, style = styles[part]
        bars = ax.bar(x, df[part] * 1e3, bottom=bottom, color=colors, label=label, **style)
        handles.append(bars.patches[0])
        bottom = bottom + df[part].to_numpy() * 1e3  # a new array: bar() keeps the one it was given
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("time per epoch and rank (ms)")
    ax.set_ylim(0, max(bottom.max(), 1e-9) * 1.12)  # room above the tallest bar for the legend
    ax.legend(handles=handles, labels=[styles[p][0] for p in parts], fontsize=8)
    return _finish(fig, [ax], f"{title}: where an epoch's time goes", path)


def time_to_accuracy(epochs: pd.DataFrame, title: str, path, target: float | None = None) -> dict:
    """Test accuracy against cumulative training time (fair across global batch sizes); seeds averaged.

    One panel per variant (other swept parameters), at most MAX_VARIANT_ROWS.
    """
    df = _label(epochs).sort_values(["run_dir", "epoch"])
    df["elapsed_s"] = df.groupby("run_dir")["time_s"].cumsum()
    keys = ["variant", "design", "algorithm", "ranks", "epoch"]
    mean = df.groupby(keys, sort=False)[["elapsed_s", "test_accuracy"]].mean().reset_index()
    variants, title = _shown_variants(mean["variant"], title)
    fig, grid = _subplots(1, len(variants), figsize=(8 * len(variants), 4.5), squeeze=False, sharey=True)
    axes = list(grid.flat)
    for ax, variant in zip(axes, variants):
        part = mean[mean["variant"] == variant]
        sns.lineplot(
            data=part,
            x="elapsed_s",
            y="test_accuracy",
            hue="design",
            style="ranks",
            palette=_palette(df),
            sort=False,
            estimator=None,
            ax=ax,
        )
        if target is not None:
            ax.axhline(target, ls=":", color="grey", label=f"target {target:g}")
        ax.set_title(variant, fontsize=9)
        ax.set_xlabel("training wall-clock time (s)")
        ax.set_ylabel("test accuracy (mean over seeds)")
        ax.set_ylim(0, 1.02)
    return _finish(fig, axes, f"{title}: time to accuracy", path)


def confusion(confusion_csv, title: str, path) -> dict:
    """Heatmap of a run's final confusion matrix (rows true class, columns predicted)."""
    m = pd.read_csv(confusion_csv, index_col=0)
    fig, ax = _subplots(figsize=(1.2 * len(m) + 3, 0.9 * len(m) + 2.5))
    sns.heatmap(m, annot=True, fmt="d", cmap="Blues", cbar_kws={"label": "test samples"}, ax=ax)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    return _finish(fig, [ax], title, path, legend=False)


def class_counts(summary_json, title: str, path) -> dict:
    """Samples per class in each split of a preprocessed dataset."""
    s = json.loads(Path(summary_json).read_text())
    df = pd.DataFrame(
        [{"split": sp, "class": c, "samples": n} for sp, cs in s["counts"].items() for c, n in cs.items()]
    )
    fig, ax = _subplots(figsize=(max(6, 1.1 * len(s["classes"]) + 2), 4.5))
    sns.barplot(data=df, x="class", y="samples", hue="split", ax=ax)
    ax.set_xlabel("class")
    ax.set_ylabel("samples")
    kind = " (SYNTHETIC images)" if s.get("synthetic") else ""
    return _finish(fig, [ax], f"{title}{kind}: samples per class", path)


def best_run(runs: pd.DataFrame, dataset: str) -> pd.Series:
    """The dataset's run with the highest final test accuracy (ties: the fastest)."""
    r = runs[runs["dataset"] == dataset].sort_values(["final_test_accuracy", "median_epoch_s"], ascending=[False, True])
    return r.iloc[0]


def plot_dataset(
    dataset: str,
    epochs_csv,
    runs_csv,
    summary_json,
    confusions: list,
    out: dict,
    target: float | None = None,
    model_csv=None,
    environment_csv=None,
) -> dict:
    """Every figure of one dataset (mpinet.analysis.figures); confusions are its runs' confusion.csv
    files, out maps figure name -> PNG path. Returns each figure's texts."""
    if set(out) != set(NAMES):
        raise MpinetError(f"the figures asked for ({', '.join(sorted(out))}) are not the table's ({', '.join(NAMES)})")
    epochs = pd.read_csv(epochs_csv)
    runs = pd.read_csv(runs_csv)
    e, r = epochs[epochs["dataset"] == dataset], runs[runs["dataset"] == dataset]
    model = None
    if model_csv is not None:
        model = pd.read_csv(model_csv)
        model = model[model["dataset"] == dataset] if len(model) else model
    # every figure of generated data says so, so no one mistakes it for the real photographs
    name = f"{dataset} (synthetic data)" if json.loads(Path(summary_json).read_text()).get("synthetic") else dataset
    environment = read_environment(environment_csv) if environment_csv is not None else None
    where = short_form(environment) if environment is not None else None
    texts = {
        "curves": training_curves(e, name, out["curves"]),
        "data_size": data_size(e, name, out["data_size"]),
        "scaling": scaling(r, name, out["scaling"], original=dataset == "intel", model=model, where=where),
        "time_split": time_split(r, name, out["time_split"]),
        "timeline": timeline_figure(r, name, out["timeline"]),
        "time_to_accuracy": time_to_accuracy(e, name, out["time_to_accuracy"], target),
        "class_counts": class_counts(summary_json, name, out["class_counts"]),
    }
    best = best_run(runs, dataset)
    matrix = next((Path(c) for c in confusions if Path(c).parent == Path(best["run_dir"])), None)
    if matrix is None:
        raise MpinetError(f"{best['run_dir']}: the best run's confusion.csv is not among the inputs")
    texts["confusion"] = confusion(
        matrix,
        f"{name}: confusion matrix of the best run ({DESIGN_NAMES[best['algorithm']]}, {_ranks(best['ranks'])}, "
        f"seed {best['seed']}, test accuracy {best['final_test_accuracy']:.3f})",
        out["confusion"],
    )
    return texts


def _subplots(*grid, figsize, **kw):
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*grid, **kw)


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def _label(df: pd.DataFrame) -> pd.DataFrame:
    """Add a readable design name and the variant: the other parameters the sweeps vary, as 'lr=0.3, …'."""
    df = df.copy()
    df["design"] = df["algorithm"].map(DESIGN_NAMES)
    columns = varying(df)  # each value set of the parameters the sweeps vary is its own curve
    df["variant"] = ""
    if columns:
        values = pd.DataFrame({c: variant_values(df, c) for c in columns})
        df["variant"] = values.apply(_variant_name, axis=1)
    return df


def _variant_name(values: pd.Series) -> str:
    """'lr=0.3, hidden=30-20': the values that set a variant apart (samples_per_rank 0 is off, not a value)."""
    shown = {c: v for c, v in values.items() if pd.notna(v) and not (c == "samples_per_rank" and v == 0)}
    return ", ".join(f"{c}={v:g}" if isinstance(v, float) else f"{c}={v}" for c, v in shown.items())


def _palette(df: pd.DataFrame) -> dict:
    return {DESIGN_NAMES[a]: c for a, c in DESIGN_COLORS.items() if a in set(df["algorithm"])}


def _finish(fig, axes, title: str, path, legend: bool = True, bottom: float = 0) -> dict:
    """Title, save atomically and close; returns the figure's texts (title, axis labels, legend entries).
    `bottom`: the share of the figure's height kept free below the axes (for a footnote)."""
    fig.suptitle(title, fontsize=11)
    if legend:
        for ax in axes:
            if ax.get_legend() is not None:  # redraw, so lines added after seaborn's legend appear too
                ax.legend(fontsize=8, loc="best")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    texts = {
        "title": title,
        "xlabels": [ax.get_xlabel() for ax in axes],
        "ylabels": [ax.get_ylabel() for ax in axes],
        "legend": sorted({t.get_text() for ax in axes if ax.get_legend() for t in ax.get_legend().get_texts()}),
        # every labelled line's plotted points, so tests check the data drawn and not pixels
        "lines": {
            line.get_label(): [(float(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata())]
            for ax in axes[:1]
            for line in ax.get_lines()
            if not line.get_label().startswith("_")
        },
    }
    save_png(fig, path)
    return texts
