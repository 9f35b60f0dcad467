"""How the figures look: one row per design of the engine (its colour and names), and what every
figure shares (its axes, the design and variant of each row of a table, its title and texts)."""

import math
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure  # the object API draws without pyplot, so no display backend is chosen

from mpinet.analysis.figures import save_png
from mpinet.study.experiments import variant_values, varying


@dataclass(frozen=True)
class Design:
    color: str
    name: str  # legends and titles
    short: str  # under a bar, where the full name would run into its neighbour's
    timeline: str  # a timeline row's label


# in the engine's order (mpinet.engine.options.ALGORITHMS; a test ties them), which is also the order drawn
DESIGNS = {
    "serial": Design("#4d4d4d", "serial", "serial", "serial"),
    "allreduce": Design("#1f77b4", "Allreduce", "Allreduce", "Allreduce"),
    "node": Design("#17becf", "one copy per node (shared memory)", "node shm", "node shared"),
    "allgather": Design("#2ca02c", "Allgather (factors)", "Allgather", "Allgather"),
    "sharded": Design("#9467bd", "sharded first layer", "sharded", "sharded first layer"),
    "grid": Design("#8c564b", "process grid (groups x shards)", "grid", "process grid"),
    "paramserver": Design("#d62728", "parameter server (Send/Recv)", "Send/Recv PS", "parameter server"),
    "auto": Design("#ff7f0e", "auto (fastest of a trial)", "auto", "auto"),
}
DESIGN_ORDER = {a: i for i, a in enumerate(DESIGNS)}


def subplots(*grid, figsize, **kw):
    """A figure and its axes, drawn without pyplot."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*grid, **kw)


def ranks_text(n: int) -> str:
    """'1 rank', '2 ranks'."""
    return f"{n} rank" if n == 1 else f"{n} ranks"


def labelled(df: pd.DataFrame) -> pd.DataFrame:
    """Add a readable design name and the variant: the other parameters the sweeps vary, as 'lr=0.3, …'."""
    df = df.copy()
    df["design"] = df["algorithm"].map({a: d.name for a, d in DESIGNS.items()})
    if "trained_as" in df:  # auto drawn as what it trained: "auto → node"
        auto = df["algorithm"] == "auto"
        df.loc[auto, "design"] = "auto → " + df.loc[auto, "trained_as"].astype(str)
    columns = varying(df)  # each value set of the parameters the sweeps vary is its own curve
    df["variant"] = ""
    if columns:
        values = pd.DataFrame({c: variant_values(df, c) for c in columns})
        df["variant"] = values.apply(variant_name, axis=1)
    return df


def variant_name(values: pd.Series) -> str:
    """'lr=0.3, hidden=30-20': the values that set a variant apart (samples_per_rank 0 is off, not a value)."""
    shown = {c: v for c, v in values.items() if pd.notna(v) and not (c == "samples_per_rank" and v == 0)}
    return ", ".join(f"{c}={v:g}" if isinstance(v, float) else f"{c}={v}" for c, v in shown.items())


def design_palette(df: pd.DataFrame) -> dict:
    """Design name -> colour, for the designs of a table."""
    return {d.name: d.color for a, d in DESIGNS.items() if a in set(df["algorithm"])}


def figure_legend(fig, axes, foot: float = 0.0) -> float:
    """One legend under all the panels, from every panel's labelled lines (each label once, in the
    order drawn), above a footnote `foot` inches high; the figure grows by the legend's height.
    Returns the share of the figure's height below the panels, for finish()."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    height = fig.get_figheight()
    if not entries:
        return foot / height
    ncol = 2 if max(len(label) for label in entries) > 45 else 3
    legend = 0.15 + 0.16 * math.ceil(len(entries) / ncol)  # inches: a row of 7-point text and its gap
    fig.set_figheight(height + legend)
    fig.legend(
        list(entries.values()),
        list(entries),
        loc="lower center",
        bbox_to_anchor=(0.5, foot / (height + legend)),
        ncol=ncol,
        fontsize=7,
        frameon=False,
    )
    return (foot + legend) / (height + legend)


def finish(fig, axes, title: str, path, legend: bool = True, bottom: float = 0) -> dict:
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
        "legend": sorted(
            {t.get_text() for ax in axes if ax.get_legend() for t in ax.get_legend().get_texts()}
            | {t.get_text() for legend in fig.legends for t in legend.get_texts()}
        ),
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
