"""A/B comparison of two result sets (`make compare A=results/x B=results/y`): first what differs in
where they ran (mpinet.analysis.environment), then the experiments both hold, B ÷ A of epoch time,
speedup and the 95th percentile of the step time (the tail) with a 95 % interval, and a verdict that
knows the direction and the launch noise. Each launch (repeat) is one observation
(mpinet.analysis.confidence.compare_launches), so the many epochs of one launch cannot fake significance."""

import argparse
import sys
from pathlib import Path

import pandas as pd

from mpinet import MpinetError
from mpinet.analysis.environment import differences, read_environment
from mpinet.analysis.figures import save_png
from mpinet.files import atomic_path
from mpinet.layout import runs_table
from mpinet.study.experiments import COLUMNS
from mpinet.study.status import experiment_labels

KEYS = ["dataset", *(c for c in COLUMNS if c != "repeat")]
# B ÷ A of these runs.csv measures: (measure, column prefix). The speedup is throughput scaling (serial
# at the same batch per rank as base); the others divide serial at the same global batch, and the best
# serial run of each side's study.
RATIOS = (
    ("speedup", "speedup_ratio"),
    ("global_speedup", "global_speedup_ratio"),
    ("best_serial_speedup", "best_serial_ratio"),
    ("p95_step_s", "tail_ratio"),
)
VERDICTS = ("faster", "slower", "no difference detected")
UNMATCHED_LISTED = 5  # experiments of one side only named on the console, the rest in compare.csv


def runs_path(results: str | Path) -> Path:
    """runs.csv of a study's results directory (results/<study>), or the CSV itself."""
    path = Path(results)
    return path if path.suffix == ".csv" else runs_table(path)


def read_runs(results: str | Path) -> pd.DataFrame:
    """runs.csv of a study's results directory (results/<study>, or the CSV itself)."""
    path = runs_path(results)
    try:
        runs = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise MpinetError(f"{path}: cannot read it ({type(e).__name__}); expected a study's results/<study>") from None
    missing = [k for k in [*KEYS, "median_epoch_s", "speedup"] if k not in runs]
    if missing:
        raise MpinetError(f"{path}: column(s) {', '.join(missing)} missing; expected runs.csv of mpinet 0.3 or later")
    return runs


def compare(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """One row per experiment of A or B: launches on each side, B ÷ A of the epoch time and of the
    speedup with their intervals, and the verdict (only in A / only in B when unmatched)."""
    from mpinet.analysis.confidence import compare_launches

    both = pd.concat([a.assign(_side="A"), b.assign(_side="B")], ignore_index=True)
    name = _names(both)
    rows = []
    for key, g in both.assign(experiment=name).groupby(KEYS, sort=True, dropna=False):
        sides = {s: part for s, part in g.groupby("_side")}
        row = {**dict(zip(KEYS, key)), "experiment": g["experiment"].iloc[0]}
        if len(sides) < 2:
            rows.append({**row, "verdict": f"only in {next(iter(sides))}"})
            continue
        time = compare_launches(sides["A"]["median_epoch_s"].to_numpy(), sides["B"]["median_epoch_s"].to_numpy())
        # whether B ÷ A compares one engine on two machines or two engines (an upgrade's change)
        engines = [set(sides[s].get("timed_by", pd.Series(["unknown"])).astype(str)) for s in "AB"]
        row["same_engine"] = engines[0] == engines[1]
        row.update(
            launches_a=time["launches_a"],
            launches_b=time["launches_b"],
            time_ratio=time["ratio"],
            time_ratio_ci_low=time["ratio_ci_low"],
            time_ratio_ci_high=time["ratio_ci_high"],
            verdict=_verdict(time),
        )
        for measure, prefix in RATIOS:
            row.update(_ratio(sides, measure, prefix, compare_launches))
        for side in "AB":  # each side's base: the serial run the speedup divides, per sample
            base = sides[side].get("serial_s_per_sample", pd.Series(dtype=float))
            row[f"base_s_per_sample_{side.lower()}"] = base.median()
        rows.append(row)
    columns = [*KEYS, "experiment", "launches_a", "launches_b", "time_ratio", "time_ratio_ci_low"]
    columns += ["time_ratio_ci_high", "base_s_per_sample_a", "base_s_per_sample_b"]
    columns += [f"{prefix}{end}" for _, prefix in RATIOS for end in ("", "_ci_low", "_ci_high")]
    if not any(not str(r.get("verdict", "")).startswith("only in") for r in rows):
        raise MpinetError(
            "the two result sets have no experiment in common (same dataset and keys); nothing to compare"
        )
    return pd.DataFrame(rows).reindex(columns=[*columns, "verdict"])


def _ratio(sides: dict, measure: str, prefix: str, compare_launches) -> dict:
    """B ÷ A of one runs.csv measure with its interval, where both sides have it (an older runs.csv
    has no step percentiles)."""
    a, b = (sides[s][measure].dropna() if measure in sides[s] else pd.Series(dtype=float) for s in ("A", "B"))
    if not (len(a) and len(b)):
        return {}
    r = compare_launches(a.to_numpy(), b.to_numpy())
    return {prefix: r["ratio"], f"{prefix}_ci_low": r["ratio_ci_low"], f"{prefix}_ci_high": r["ratio_ci_high"]}


def _verdict(time: dict) -> str:
    """Lower epoch time is better: B is faster when the whole interval of B ÷ A lies below 1."""
    if not time["differs"]:
        return "no difference detected"
    return "faster" if time["ratio"] < 1 else "slower"


def _names(runs: pd.DataFrame) -> pd.Series:
    """'iris allreduce 2 ranks batch 32 seed 1 lr=0.1': make status's labels (what tells the experiments
    of both sides apart), a launch's repeat left out (launches of one experiment are its observations)."""
    return pd.Series(experiment_labels(runs.assign(repeat=1)), index=runs.index)


def text_table(table: pd.DataFrame) -> str:
    """The console form: experiment, launches, B ÷ A of time and speedup with intervals, verdict."""

    def ci(r, m):
        if pd.isna(r.get(m)):
            return "-"
        if pd.isna(r.get(f"{m}_ci_low")):
            return f"{r[m]:.3f}*"
        return f"{r[m]:.3f} [{r[f'{m}_ci_low']:.3f}, {r[f'{m}_ci_high']:.3f}]"

    lines = []
    for _, r in table.iterrows():
        if str(r["verdict"]).startswith("only in"):
            continue
        lines.append(
            {
                "experiment": r["experiment"],
                "launches A/B": f"{int(r['launches_a'])}/{int(r['launches_b'])}",
                "epoch time B/A": ci(r, "time_ratio"),
                "base µs/sample A; B": _base(r),  # each side's own, not a ratio like the B/A columns
                "speedup B/A (same batch/rank)": ci(r, "speedup_ratio"),
                "over best serial B/A": ci(r, "best_serial_ratio"),
                "p95 step B/A": ci(r, "tail_ratio"),
                "verdict": r["verdict"],
            }
        )
    if lines:
        shown = pd.DataFrame(lines)
        width = shown["experiment"].str.len().max()
        out = shown.to_string(index=False, justify="left", formatters={"experiment": lambda e: e.ljust(width)})
        out = "\n".join(line.rstrip() for line in out.splitlines())
        if shown.map(lambda v: str(v).endswith("*")).any().any():
            out += "\n*: one launch on a side, so no interval (more launches with `repeats`)"
    else:
        out = "no experiment is in both result sets"
    unmatched = table[table["verdict"].astype(str).str.startswith("only in")]
    for verdict, rows in unmatched.groupby("verdict", sort=True):
        names = list(rows["experiment"])
        listed = names if len(names) <= UNMATCHED_LISTED else [*names[:UNMATCHED_LISTED], "..."]
        out += f"\n{verdict}: {len(names)} experiment(s) (compare.csv lists them): {'; '.join(listed)}"
    return out


def _base(r) -> str:
    """Each side's serial base in microseconds a sample ('-' where a runs.csv predates it)."""
    a, b = (r.get(f"base_s_per_sample_{s}") for s in "ab")
    return "-" if pd.isna(a) or pd.isna(b) else f"{1e6 * a:.3g}; {1e6 * b:.3g}"


def figure(table: pd.DataFrame, path, title: str):
    """B ÷ A of the epoch time per matched experiment with its interval, coloured by verdict; returns
    the Figure (tests measure where its texts landed)."""
    from matplotlib.figure import Figure

    matched = table[~table["verdict"].astype(str).str.startswith("only in")].reset_index(drop=True)
    # constrained: the experiments' labels and the legend below get the room they need
    fig = Figure(figsize=(9, 1.6 + 0.35 * max(1, len(matched))), layout="constrained")
    ax = fig.subplots()
    colors = {"faster": "#2ca02c", "slower": "#d62728", "no difference detected": "#7f7f7f"}
    for i, r in matched.iterrows():
        lo, hi = r["time_ratio_ci_low"], r["time_ratio_ci_high"]
        err = [[r["time_ratio"] - lo], [hi - r["time_ratio"]]] if pd.notna(lo) else None
        ax.errorbar(r["time_ratio"], i, xerr=err, fmt="o", color=colors[r["verdict"]], capsize=3)
    for verdict, color in colors.items():
        ax.plot([], [], "o", color=color, label=verdict)
    ax.axvline(1.0, ls="--", color="grey")
    ax.set_yticks(range(len(matched)), matched["experiment"], fontsize=7)
    ax.set_ylim(len(matched) - 0.4, -0.6)  # first experiment on top, room above and below
    xlabel = "epoch time B / A (< 1: B is faster)\n95 % interval, launches as the unit (none with one launch on a side)"
    ax.set_xlabel(xlabel, fontsize=9)
    fig.legend(fontsize=7, loc="outside lower center", ncols=len(colors))
    fig.suptitle(title, fontsize=10)
    save_png(fig, path)
    return fig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mpinet.analysis.compare",
        description="Compare two result sets of the same experiments (e.g. MPICH vs Open MPI, two machines, "
        "before and after an update): first what differs in where they ran, then per experiment B / A of the "
        "epoch time, the speedup and the 95th-percentile step time, with a verdict.",
    )
    p.add_argument("a", help="result set A: a study's results directory (results/<study>) or its runs.csv")
    p.add_argument("b", help="result set B, the same")
    p.add_argument("--out", default="results/compare", help="directory for compare.csv and compare.png")
    args = p.parse_args(argv)
    try:
        table = compare(read_runs(args.a), read_runs(args.b))
    except MpinetError as e:
        print(f"mpinet.analysis.compare: error: {e}", file=sys.stderr)
        return 1
    a_env, b_env = (read_environment(runs_path(x).with_name("environment.csv")) for x in (args.a, args.b))
    differ = differences(a_env, b_env)
    print("where they ran:", "the same (every field of environment.csv)" if not differ else "")
    for line in differ:
        print(f"  {line}")
    print()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "compare.csv") as tmp:
        table.to_csv(tmp, index=False)
    figure(table, out / "compare.png", f"B = {args.b} vs A = {args.a}")
    print(text_table(table))
    print(f"\nwritten: {out / 'compare.csv'}, {out / 'compare.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
