"""The timeline figure: for one dataset, one representative run per design (the serial run, and each
parallel design at its largest rank count), every rank's first steps of the last epoch on one time
axis, from the runs' timeline.json (mpinet.engine.timeline). A rank that arrives late at every
Allreduce, or a parameter server applying its workers' updates one after another, is seen here."""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from mpinet.analysis.figures import save_png
from mpinet.analysis.style import DESIGN_ORDER, design_name, wrapped
from mpinet.layout import TIMELINE_FILE

STEPS_SHOWN = 6  # per design: enough to see the pattern repeat, few enough to read each phase
PHASE_COLORS = {
    "compute": "#1f77b4",
    "wait": "#d62728",
    "exchange": "#2ca02c",
    "receive": "#ff7f0e",
    "apply": "#9467bd",
    "send": "#17becf",
}
PHASE_NAMES = {
    "compute": "compute (forward, backward)",
    "wait": "wait for the slowest rank",
    "exchange": "exchange (moving bytes)",
    "receive": "server: receive gradients",
    "apply": "server: apply one worker's update",
    "send": "server: send weights",
}


def representative_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Per design, at its largest rank count, the run whose median epoch time is the group's median
    (the lower middle one of an even count), among the runs that recorded a timeline (every run has
    its file, a declared output of training; one restored without a trace holds no events)."""
    has = runs["run_dir"].map(lambda d: bool(json.loads((Path(d) / TIMELINE_FILE).read_text())["traceEvents"]))
    runs = runs[has]
    picked = []
    for _, g in runs.groupby("algorithm", sort=False):
        top = g[g["ranks"] == g["ranks"].max()].sort_values(["median_epoch_s", "run_dir"])
        picked.append(top.iloc[(len(top) - 1) // 2])
    return pd.DataFrame(picked).sort_values("algorithm", key=lambda s: s.map(DESIGN_ORDER)) if picked else runs.iloc[:0]


def lanes(trace: dict, steps: int = STEPS_SHOWN) -> dict[int, list[tuple[str, float, float]]]:
    """Per rank (tid), its (phase, start ms, length ms) spans of the first `steps` steps of a trace."""
    out: dict[int, list] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") == "step" or e["args"].get("step", 1) > steps:
            continue
        out.setdefault(e["tid"], []).append((e["cat"], e["ts"] / 1000, e["dur"] / 1000))
    return out


def timeline_figure(runs: pd.DataFrame, title: str, path) -> dict:
    """Draw the representative runs' lanes, one block of rows per design; returns the figure's texts."""
    chosen = representative_runs(runs)
    rows = []  # (label, spans)
    for _, run in chosen.iterrows():
        trace = json.loads((Path(run["run_dir"]) / TIMELINE_FILE).read_text())
        for tid, spans in sorted(lanes(trace).items()):
            role = " (server)" if any(p in ("apply", "send") for p, _, _ in spans) else ""
            rows.append((f"{design_name(run['algorithm'], run.get('trained_as'))}, rank {tid}{role}", spans))
    fig = Figure(figsize=(11, 1.6 + 0.32 * max(len(rows), 3)))
    ax = fig.subplots()
    for i, (_, spans) in enumerate(rows):
        for phase in PHASE_COLORS:
            bars = [(start, length) for p, start, length in spans if p == phase]
            if bars:
                ax.broken_barh(bars, (i - 0.38, 0.76), facecolors=PHASE_COLORS[phase], edgecolor="none")
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(f"milliseconds from the start of the last epoch (its first {STEPS_SHOWN} steps)")
    ax.set_ylabel("design, rank")
    shown = [p for p in PHASE_COLORS if any(p == q for _, spans in rows for q, _, _ in spans)]
    if shown:
        handles = [Patch(color=PHASE_COLORS[p], label=PHASE_NAMES[p]) for p in shown]
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(
            0.5,
            0.5,
            "no run of this dataset recorded a timeline (runs trained before mpinet 0.5.0)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    trained = chosen["trained_as"] if "trained_as" in chosen else [None] * len(chosen)
    names = [design_name(a, t) for a, t in zip(chosen["algorithm"], trained)]
    label = ", ".join(f"{n} on {r}" for n, r in zip(names, chosen["ranks"]))
    full = f"{title}: per-rank timeline of one run per design ({label or 'none'})"
    fig.suptitle(wrapped(full, fig.get_figwidth()), fontsize=10)
    fig.tight_layout()
    save_png(fig, path)
    legend = [PHASE_NAMES[p] for p in shown]
    return {
        "title": full,
        "xlabels": [ax.get_xlabel()],
        "ylabels": [ax.get_ylabel()],
        "legend": legend,
        "rows": [label for label, _ in rows],
        "figure": fig,  # for tests that measure where its texts landed (style.finish returns it too)
    }


def summary(trace: dict) -> pd.DataFrame:
    """Per rank and phase of a trace: spans, total and mean milliseconds (what Perfetto's slice
    aggregation shows), steps left out."""
    rows = [
        {"rank": e["tid"], "phase": e["cat"], "ms": e["dur"] / 1000}
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") != "step"
    ]
    if not rows:
        return pd.DataFrame(columns=["rank", "phase", "spans", "total_ms", "mean_ms"])
    g = pd.DataFrame(rows).groupby(["rank", "phase"], sort=True)["ms"]
    return pd.DataFrame({"spans": g.size(), "total_ms": g.sum(), "mean_ms": g.mean()}).reset_index()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mpinet.analysis.timelines",
        description="Summarize a run's timeline.json: per rank and phase, how many spans and how many "
        "milliseconds (open the file in https://ui.perfetto.dev to see every span).",
    )
    p.add_argument("timeline", help="a run's timeline.json (results/runs/<dataset>/.../timeline.json)")
    args = p.parse_args(argv)
    try:
        trace = json.loads(Path(args.timeline).read_text())
        table = summary(trace)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(
            f"mpinet.analysis.timelines: error: {args.timeline}: not a timeline ({type(e).__name__}: {e})",
            file=sys.stderr,
        )
        return 1
    about = trace.get("otherData", {})
    print(
        f"{about.get('algorithm', '?')} on {about.get('ranks', '?')} rank(s), epoch {about.get('epoch', '?')}, "
        f"{about.get('steps_recorded', '?')} steps recorded"
    )
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
