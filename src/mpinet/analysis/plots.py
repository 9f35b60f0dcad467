"""Every figure of a dataset (plot_dataset), and the training curves: loss and accuracy per epoch,
by training-set size and against time. One curve per configuration, seeds averaged with a band."""

import json
import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import seaborn as sns

from mpinet import MpinetError
from mpinet.analysis.environment import read_environment, short_form
from mpinet.analysis.figures import NAMES
from mpinet.analysis.scaling import scaling, time_split
from mpinet.analysis.style import (
    DESIGN_ORDER,
    design_name,
    design_palette,
    figure_legend,
    finish,
    labelled,
    ranks_text,
    subplots,
    variant_names,
    whole_epochs,
)
from mpinet.analysis.timelines import timeline_figure
from mpinet.study.experiments import varying

MAX_VARIANT_ROWS = 6
SERIAL = design_name("serial")
PANEL_COLUMNS = 3  # designs (data_size) side by side before a figure wraps to another row


@dataclass
class FigureInputs:
    """What one dataset's figures read, by the names the plots rule gives them."""

    epochs: str | Path  # the study's epochs.csv
    runs: str | Path  # runs.csv
    summary: str | Path  # the prepared dataset's summary.json
    confusions: list  # its runs' confusion.csv files
    model: str | Path | None = None  # model.csv: the cost model's lines
    environment: str | Path | None = None  # environment.csv: where the runs ran


def plot_dataset(dataset: str, inputs: FigureInputs, out: dict, target: float | None = None) -> dict:
    """Every figure of one dataset (mpinet.analysis.figures); out maps figure name -> PNG path.
    Returns each figure's texts."""
    if set(out) != set(NAMES):
        raise MpinetError(f"the figures asked for ({', '.join(sorted(out))}) are not the table's ({', '.join(NAMES)})")
    epochs_csv, runs_csv, summary_json, confusions = inputs.epochs, inputs.runs, inputs.summary, inputs.confusions
    model_csv, environment_csv = inputs.model, inputs.environment
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
        f"{name}: confusion matrix of the best run ({design_name(best['algorithm'], best.get('trained_as'))}, "
        f"{ranks_text(best['ranks'])}, "
        f"seed {best['seed']}, test accuracy {best['final_test_accuracy']:.3f})",
        out["confusion"],
    )
    return texts


def training_curves(epochs: pd.DataFrame, title: str, path) -> dict:
    """Training loss and test accuracy per epoch, by design and rank count (the original's Loss/Accuracy figures).

    One row of panels per variant (other swept parameters), at most MAX_VARIANT_ROWS.
    """
    df = labelled(epochs)
    variants, title = _shown_variants(df["variant"], title)
    fig, grid = subplots(len(variants), 2, figsize=(12, 4.2 * len(variants)), squeeze=False)
    for row, variant in zip(grid, variants):
        part = df[df["variant"] == variant]
        _loss_and_accuracy(row, part, variant, hue="design", style="ranks", palette=design_palette(df))
        row[0].get_legend().remove()  # one legend per row
    axes = list(grid.flat)
    what = "mean over seeds, band: min to max; serial also wide beneath"
    return finish(fig, axes, f"{title}: training curves ({what})", path)


def data_size(epochs: pd.DataFrame, title: str, path) -> dict:
    """The original's data-size comparison (its 220 vs 14,000 images): training loss and test accuracy
    per epoch for each training-set size, one column per design (at its largest rank count; past
    PANEL_COLUMNS designs a second row), seeds averaged with a min-to-max band. Weak-scaling runs,
    whose size follows their ranks, are left out."""
    df = labelled(epochs)
    if "samples_per_rank" in df:
        df = df[df["samples_per_rank"] == 0]
    # the other swept parameters (faithful, lr, ...) tell curves of one size apart by line style
    others = [c for c in varying(df) if c not in ("train_samples", "samples_per_rank")]
    df = df.assign(variant=variant_names(df[others]) if others else "")
    widest = df.groupby("design")["ranks"].transform("max")
    df = df[df["ranks"] == widest].sort_values("algorithm", key=lambda c: c.map(DESIGN_ORDER), kind="stable")
    designs = list(dict.fromkeys(df["design"]))
    fig, pairs = _panel_pairs(len(designs))
    sizes = sorted(df["trained_samples"].unique())
    names = [f"{n:,} samples" for n in sizes]
    palette = dict(zip(names, sns.color_palette("viridis", len(sizes))))
    # one colour per size and one line style per variant in every panel, so one legend under them
    # all reads for each (a legend in each panel covered its curves)
    order = {"hue_order": names, **({"style_order": list(dict.fromkeys(df["variant"]))} if others else {})}
    for pair, design in zip(pairs, designs):
        part = df[df["design"] == design]
        part = part.assign(samples=part["trained_samples"].map(dict(zip(sizes, names))))
        panel = f"{design}, {ranks_text(int(part['ranks'].iloc[0]))}"
        style = "variant" if others else None
        _loss_and_accuracy(pair, part, panel, hue="samples", style=style, palette=palette, **order)
    axes = [ax for pair in pairs for ax in pair]
    # seaborn's section headings left out: '60 samples' and 'batch_size=8' say what they are
    entries = {
        lab: h for ax in axes for h, lab in zip(*ax.get_legend_handles_labels()) if lab not in ("samples", "variant")
    }
    bottom = figure_legend(fig, [], entries=entries)
    for ax in axes:
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    # said once, under the title: the study trained one size, so each panel holds one curve per variant
    note = "\n(one training-set size: sweep train_samples to compare sizes)" if len(sizes) < 2 else ""
    what = f"{title}: loss and accuracy by training-set size (band: min to max over seeds){note}"
    return finish(fig, axes, what, path, legend=False, bottom=bottom)


def time_to_accuracy(epochs: pd.DataFrame, title: str, path, target: float | None = None) -> dict:
    """Test accuracy against cumulative training time (fair across global batch sizes); seeds averaged.

    One panel per variant (other swept parameters), at most MAX_VARIANT_ROWS.
    """
    df = labelled(epochs).sort_values(["run_dir", "epoch"])
    df["elapsed_s"] = df.groupby("run_dir")["time_s"].cumsum()
    keys = ["variant", "design", "algorithm", "ranks", "epoch"]
    mean = df.groupby(keys, sort=False)[["elapsed_s", "test_accuracy"]].mean().reset_index()
    variants, title = _shown_variants(mean["variant"], title)
    cols = min(2, len(variants))  # two panels a row: the figure stays under 1,800 px wide
    rows = math.ceil(len(variants) / cols)
    fig, grid = subplots(rows, cols, figsize=(8 * cols, 4.5 * rows), squeeze=False, sharey=True)
    axes = list(grid.flat)[: len(variants)]
    for ax in list(grid.flat)[len(variants) :]:
        ax.set_visible(False)
    for ax, variant in zip(axes, variants):
        part = mean[mean["variant"] == variant]
        sns.lineplot(
            data=part,
            x="elapsed_s",
            y="test_accuracy",
            hue="design",
            style="ranks",
            palette=design_palette(df),
            sort=False,
            estimator=None,
            ax=ax,
        )
        # the target said on the axis, not in the legend, where it would read as one more rank count
        target_note = ""
        if target is not None:
            ax.axhline(target, ls=":", color="grey")
            target_note = f"; dotted: target {target:g}"
        ax.set_title(variant, fontsize=9)
        ax.set_xlabel("training wall-clock time (s)")
        ax.set_ylabel(f"test accuracy (mean over seeds{target_note})")
        ax.set_ylim(0, 1.02)
    return finish(fig, axes, f"{title}: time to accuracy", path)


def confusion(confusion_csv, title: str, path) -> dict:
    """Heatmap of a run's final confusion matrix (rows true class, columns predicted)."""
    m = pd.read_csv(confusion_csv, index_col=0)
    fig, ax = subplots(figsize=(1.2 * len(m) + 3, 0.9 * len(m) + 2.5))
    sns.heatmap(m, annot=True, fmt="d", cmap="Blues", cbar_kws={"label": "test samples"}, ax=ax)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    return finish(fig, [ax], title, path, legend=False)


def class_counts(summary_json, title: str, path) -> dict:
    """Samples per class in each split of a preprocessed dataset."""
    s = json.loads(Path(summary_json).read_text())
    df = pd.DataFrame(
        [{"split": sp, "class": c, "samples": n} for sp, cs in s["counts"].items() for c, n in cs.items()]
    )
    fig, ax = subplots(figsize=(max(6, 1.1 * len(s["classes"]) + 2), 4.5))
    sns.barplot(data=df, x="class", y="samples", hue="split", ax=ax)
    ax.set_xlabel("class")
    ax.set_ylabel("samples")
    # the title names generated data already (plot_dataset); how a table was read, wrapped to the
    # figure's width: a wrong guess of `auto` shows here
    read = "\n" + textwrap.fill(how_read(s["table"]), width=int(10 * fig.get_figwidth())) if "table" in s else ""
    return finish(fig, [ax], f"{title}: samples per class{read}", path)


def how_read(table: dict) -> str:
    """How a table was read (its summary's `table`), in one line for a figure."""
    parts = [f"table read as {table.get('format', 'delimited text')}"]
    if "separator" in table:
        parts.append(f"separator {table['separator']!r}, {'a' if table['header'] else 'no'} header")
    if table.get("decimal") == ",":
        parts.append("decimal comma")
    found = table.get("found") or []
    if found:
        parts.append(f"({' and '.join(found)} found by auto)")
    parts.append(f"label '{table['label_column']}'")
    if table.get("id_columns"):
        parts.append(f"ids left out: {', '.join(table['id_columns'])}")
    dropped = {k: n for k, n in table.get("rows_dropped_missing", {}).items() if n}
    if dropped:
        each = ", ".join(f"{k} {n}" for k, n in dropped.items())
        parts.append(f"{sum(dropped.values())} rows with missing values dropped ({each})")
    return "; ".join(parts)


def best_run(runs: pd.DataFrame, dataset: str) -> pd.Series:
    """The dataset's run with the highest final test accuracy (ties: the fastest)."""
    r = runs[runs["dataset"] == dataset].sort_values(["final_test_accuracy", "median_epoch_s"], ascending=[False, True])
    return r.iloc[0]


def _panel_pairs(n: int):
    """A figure of n loss-over-accuracy panel pairs, PANEL_COLUMNS side by side at most (the figure
    stays under 1,800 px wide); the pairs, the cells no pair uses hidden."""
    cols = min(PANEL_COLUMNS, max(1, n))
    rows = math.ceil(max(1, n) / cols)
    fig, grid = subplots(2 * rows, cols, figsize=(max(6.5, 5.2 * cols), 7.6 * rows), squeeze=False)
    pairs = [(grid[2 * (i // cols), i % cols], grid[2 * (i // cols) + 1, i % cols]) for i in range(rows * cols)]
    for top, low in pairs[n:]:
        top.set_visible(False)
        low.set_visible(False)
    return fig, pairs[:n]


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
    # the seeds' mean, min and max per curve and epoch in one vectorized groupby: seaborn's own
    # aggregation applies a Python function per epoch and curve (most of a 100-epoch study's plotting)
    # (every caller gives a hue and its palette; the style column, when given, splits a hue's curves)
    keys = [k for k in (style["hue"], style.get("style")) if k]
    for ax, y, label in (
        (axes[0], "train_loss", "training loss (mean per sample)"),
        (axes[1], "test_accuracy", "test accuracy"),
    ):
        # sort=False: the curves in the order they first appear, as seaborn's legend would list them
        band = part.groupby([*keys, "epoch"], sort=False, observed=True)[y].agg(["mean", "min", "max"]).reset_index()
        # labelled first: seaborn then skips its own labelling, which works out every tick label to
        # decide whether to show the axis label
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        sns.lineplot(data=band.rename(columns={"mean": y}), x="epoch", y=y, estimator=None, ax=ax, **style)
        # serial also wide and pale beneath: a design that repeats its numbers (allreduce on 1 rank,
        # distributed == serial) would otherwise hide it, and another colour over it would blend
        for _, curve in band[band[style["hue"]] == SERIAL].groupby(keys, sort=False):
            curve = curve.sort_values("epoch")
            ax.plot(curve["epoch"], curve["mean"], color=style["palette"][SERIAL], lw=6, alpha=0.25, zorder=1)
        for key, curve in band.groupby(keys, sort=False):
            curve = curve.sort_values("epoch")
            color = style["palette"][key[0]]
            ax.fill_between(curve["epoch"], curve["min"], curve["max"], color=color, alpha=0.2, linewidth=0)
        whole_epochs(ax)
        ax.set_title(title, fontsize=9)
    axes[0].set_yscale("log")
    axes[1].set_ylim(0, 1.02)
