"""How the figures look: one row per design of the engine (its colour and names), and what every
figure shares (its axes, the design and variant of each row of a table, its title and texts)."""

import math
import textwrap
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure  # the object API draws without pyplot, so no display backend is chosen
from matplotlib.ticker import MaxNLocator

from mpinet.analysis.figures import save_png
from mpinet.study.experiments import variant_values, varying


@dataclass(frozen=True)
class Design:
    color: str
    name: str  # every legend, title, bar and timeline row; the report and the CLI say the same (the config's key)


# in the engine's order (mpinet.engine.options.ALGORITHMS; a test ties them), which is also the order drawn
DESIGNS = {a: Design(c, a) for a, c in (
    ("serial", "#4d4d4d"),
    ("allreduce", "#1f77b4"),
    ("node", "#17becf"),
    ("allgather", "#2ca02c"),
    ("sharded", "#9467bd"),
    ("grid", "#8c564b"),
    ("paramserver", "#d62728"),
    ("auto", "#ff7f0e"),
)}  # fmt: skip
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
    trained = df["trained_as"] if "trained_as" in df else pd.Series(None, index=df.index, dtype=object)
    df["design"] = [design_name(a, t) for a, t in zip(df["algorithm"], trained)]
    columns = varying(df)  # each value set of the parameters the sweeps vary is its own curve
    df["variant"] = ""
    if columns:
        values = pd.DataFrame({c: variant_values(df, c) for c in columns})
        df["variant"] = variant_names(values)
    return df


def variant_names(values: pd.DataFrame) -> pd.Series:
    """variant_name of every row, worked out once per distinct row: an epochs table repeats its
    run's values on each of its epochs (a Python call per row was a tenth of a study's plotting)."""
    if values.empty:
        return pd.Series("", index=values.index, dtype=object)
    group = values.groupby(list(values.columns), dropna=False, sort=False).ngroup()
    first = ~group.duplicated()
    return group.map(dict(zip(group[first], values[first].apply(variant_name, axis=1))))


def design_name(algorithm: str, trained_as=None) -> str:
    """The design's one name (DESIGNS); auto as what it trained: 'auto → node'."""
    if algorithm == "auto" and isinstance(trained_as, str) and trained_as:
        return f"auto → {trained_as}"
    return DESIGNS[algorithm].name


def variant_name(values: pd.Series) -> str:
    """'lr=0.3, hidden=30-20': the values that set a variant apart (samples_per_rank 0 is off, not a
    value; train_samples 0 is the whole training set: 'all')."""
    shown = {c: v for c, v in values.items() if pd.notna(v) and not (c == "samples_per_rank" and v == 0)}
    shown = {c: "all" if c == "train_samples" and v == 0 else v for c, v in shown.items()}
    return ", ".join(f"{c}={v:g}" if isinstance(v, float) else f"{c}={v}" for c, v in shown.items())


def design_palette(df: pd.DataFrame) -> dict:
    """Design name (labelled's `design`, auto's 'auto → node' included) -> colour, for a table's designs."""
    return {name: DESIGNS[a].color for name, a in zip(df["design"], df["algorithm"])}


def whole_epochs(ax) -> None:
    """Ticks at whole epochs only on an epoch x axis (never 2.5)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def wrapped(title: str, width_in: float) -> str:
    """A title's lines wrapped to a figure `width_in` inches wide at 11 points, so none leaves the canvas."""
    return "\n".join(textwrap.fill(line, width=int(10.5 * width_in)) for line in title.split("\n"))


def figure_legend(fig, axes, foot: float = 0.0, entries: dict | None = None) -> float:
    """One legend under all the panels, from every panel's labelled lines (each label once, in the
    order drawn) or `entries` (label -> handle), above a footnote `foot` inches high; the figure grows
    by the legend's height. Returns the share of the figure's height below the panels, for finish()."""
    entries = dict(entries or {})
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
        bbox_to_anchor=(fig.get_figwidth() / 2, foot),  # in inches: it stays put when a long title grows the figure
        bbox_transform=fig.dpi_scale_trans,
        ncol=ncol,
        fontsize=7,
        frameon=False,
    )
    return (foot + legend) / (height + legend)


def finish(fig, axes, title: str, path, legend: bool = True, bottom: float = 0) -> dict:
    """Title and save atomically; returns the figure's texts (title, axis labels, legend entries) and,
    as `figure`, the drawn Figure itself, for tests that measure where its texts landed.
    `bottom`: the share of the figure's height kept free below the axes (for a footnote)."""
    title = wrapped(title, fig.get_figwidth())
    # a title of several lines grows the figure, not shrinks the panels
    lines, height = title.count("\n") + 1, fig.get_figheight()
    fig.set_figheight(height + 0.18 * (lines - 1))
    bottom = bottom * height / fig.get_figheight()
    fig.suptitle(title, fontsize=11, y=1 - 0.1 / fig.get_figheight())  # 0.1 inch from the top, however tall
    if legend:
        for ax in axes:
            if ax.get_legend() is not None:  # redraw, so lines added after seaborn's legend appear too
                ax.legend(fontsize=8, loc="best")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    # tight_layout keeps too little room for a suptitle above several rows: the title's lines and a panel title's
    fig.subplots_adjust(top=min(fig.subplotpars.top, 1 - (0.4 + 0.18 * lines) / fig.get_figheight()))
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
    return {**texts, "figure": fig}
