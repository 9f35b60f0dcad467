"""What a study measured, in words: the summary table printed at the end of a run and the report's
front page (its headline numbers and reference verdicts), both from runs.csv."""

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from mpinet.analysis.baselines import CLEAN_CPU_SHARE, has_speedup, notes, quotable, reason_kinds, serial_runs
from mpinet.analysis.costmodel import held_out_error, left_out_reasons
from mpinet.analysis.environment import environment_rst
from mpinet.analysis.references import breach_lines, verdict_line
from mpinet.study.experiments import varying


def end_of_run(runs_csv, references_csv, study: str, study_dir: str) -> str:
    """What a run prints when it ends: the summary table and the references' verdicts."""
    text = f"\nStudy {study} ({study_dir}/):\n{summary_table(runs_csv)}\n"
    if mixed := mixed_lines(pd.read_csv(runs_csv)):
        text += "\n" + "\n".join(mixed) + "\n"
    checked = pd.read_csv(references_csv)
    if len(checked):
        lines = [*breach_lines(checked), f"references: {verdict_line(checked)}"]
        text += "\n" + "\n".join(lines) + "\n"
    return text


def summary_table(runs_csv: str | Path) -> str:
    """Per dataset, design and ranks: final accuracy, median epoch time, the step times' tail (p95 ÷
    p50), speedup, time to target, and how many seeds reached the target."""
    runs = pd.read_csv(runs_csv)
    runs["design"] = _design_shown(runs)  # auto's runs as what they trained: "auto → node"
    # placed on several hosts counts as a variant: a configuration's runs on 1 and on 2 nodes are two rows
    placed = ["nodes"] if "nodes" in runs and runs["nodes"].nunique() > 1 else []
    g = runs.groupby(["dataset", *varying(runs), *placed, "design", "ranks"], sort=True)
    table = pd.DataFrame(
        {
            "runs": g.size(),  # its seeds × launches (an interval's own launches: the * note)
            "final_acc": g["final_test_accuracy"].mean().round(3),
            "epoch_s": _digits(g["median_epoch_s"].median(), 4),
            "speedup": g["speedup"].median().round(2),
            "speedup_95ci": _ci_column(runs, g, "speedup"),
            "to_target_s": g["time_to_target_s"].median().round(2),
            "reached": g["time_to_target_s"].apply(lambda s: f"{s.notna().sum()}/{len(s)}"),
        }
    )
    if "p95_step_s" in runs and runs["p95_step_s"].notna().any():
        # the tail: how much slower the slow steps (p95) are than the typical one (p50)
        table.insert(3, "step_p95/p50", (g["p95_step_s"].median() / g["median_step_s"].median()).round(2))
    if "global_speedup" in runs:  # 0.10.0: the base's time, the fixed-global-batch axis, the best serial run
        at = table.columns.get_loc("speedup_95ci") + 1
        table.insert(at, "base_us", g["serial_s_per_sample"].median().map(_micro))
        table.insert(at + 1, "global_speedup", g["global_speedup"].median().round(2))
        table.insert(at + 2, "over_best_serial", g["best_serial_speedup"].median().round(2))
    if "weak_efficiency" in runs and runs["weak_efficiency"].notna().any():
        table.insert(3, "weak_eff", g["weak_efficiency"].median().round(2))  # samples_per_rank sweeps
        table.insert(4, "weak_eff_95ci", _ci_column(runs, g, "weak_efficiency"))
    if "global_speedup" in runs and fixed_global_batch(runs).any():  # beside ranks: what the ranks share
        table.insert(0, "global_batch", g["global_batch"].median().astype("Int64"))
    text = table.reset_index().to_string(index=False, na_rep="-")
    if table.filter(like="_95ci").apply(lambda c: c.str.endswith("*")).any(axis=None):  # a starred cell shown
        text += "\n*: one launch; its interval covers only that launch's epochs (more with `repeats`)"
    if "global_speedup" in runs:
        text += (
            "\nspeedup: over serial at the same batch per rank (base_us: its µs a sample); global_speedup: over "
            "serial at the same global batch; over_best_serial: over the study's fastest serial run, per sample"
        )
    if "global_batch" in table:
        text += "\nglobal_batch: the batch per rank times the ranks that train"
    if "contention" in runs and (runs["contention"] == "contended").any():
        n = int((runs["contention"] == "contended").sum())
        text += (
            f"\ncontended: {n} run(s) whose slowest rank got less than {CLEAN_CPU_SHARE:.0%} of a core (another "
            "process, or more ranks than cores; runs.csv's contention)"
        )
    return text


def fixed_global_batch(runs: pd.DataFrame) -> pd.Series:
    """The runs measured on the fixed-global-batch axis: several ranks sharing a global batch whose
    serial run the study has (a sweep's `global_batch:` plans them)."""
    return (runs["global_batch"] != runs["batch_size"]) & runs["global_speedup"].notna()


def _digits(values: pd.Series, n: int) -> pd.Series:
    """Values to n significant digits, '-' where missing (the table's na_rep sees only NaN, not 'nan')."""
    return values.map(lambda v: "-" if pd.isna(v) else f"{v:.{n}g}")


def _ci_column(runs: pd.DataFrame, g, measure: str) -> pd.Series:
    """'[low, high]' of a measure's 95 % interval per row of the summary (the widest over its runs),
    '*' after it when it comes from a single launch."""
    if f"{measure}_ci_low" not in runs:
        return pd.Series("-", index=g.size().index)
    low, high = g[f"{measure}_ci_low"].min(), g[f"{measure}_ci_high"].max()
    single = g["ci_launches"].max() == 1
    text = "[" + low.map("{:.2f}".format) + ", " + high.map("{:.2f}".format) + "]" + single.map({True: "*", False: ""})
    return text.where(low.notna(), "-")


# The two scaling axes of the headline: (name, speedup column, its base's seconds per sample).
AXES = (
    ("batch per rank fixed", "speedup", "serial_s_per_sample"),
    ("global batch fixed", "global_speedup", "global_serial_s_per_sample"),
)
HEAD = ("dataset", "variant", "axis", "design", "ranks", "batch/rank (global)", "speedup [95 %]")
HEAD += ("base: serial µs/sample", "over best serial [95 %]", "accuracy (serial)")


def headline_rst(
    runs_csv, description: str, study: str, references: pd.DataFrame | None = None, environment=None
) -> str:
    """The report's front page: the study's headline numbers first (per dataset, variant and scaling
    axis, the best speedup of each design that may be quoted, with its base's time per sample and the
    speedup over the study's best serial run), what was left out and why, the references' verdicts,
    where it ran (mpinet.analysis.environment), then the description. Renders for every study shape."""
    runs = pd.read_csv(runs_csv)
    rows = headline_rows(runs)
    lines = [f"Study **{study}**: headline numbers", ""]
    if rows:
        lines += _list_table(HEAD, rows)
    else:
        lines += ["No speedup to quote: " + _why_none(runs)]
        if best_left := left_out_rows(runs):  # a busy laptop still sees a number, marked for what it is
            lines += [
                "",
                "**Not quotable**: the best of the runs left out, per dataset and axis, with why they were "
                "left out (their numbers are not the study's result):",
                "",
                *_list_table((*HEAD, "not quotable because"), best_left),
            ]
    note = (
        "Per scaling axis, the best speedup of each design among the runs that may be quoted (timed alone, "
        "not contended, more than one rank, not superlinear), the median over seeds and launches, with its "
        "95 % bootstrap interval over launches and epochs (one launch: over its epochs only). *Batch per rank "
        "fixed* divides serial at the run's batch per rank (the global batch grows with the ranks); *global "
        "batch fixed* divides serial at the run's global batch, whose updates the run does exactly. *Over best "
        "serial* divides the study's fastest serial run at any batch, per sample. The scaling figures show "
        "every point, the spread and the cost model."
    )
    where = environment_rst(environment) if environment is not None and len(environment) else []
    mixed = mixed_lines(runs)
    mixed = (
        [f"**Timings of several engines**: {mixed[0]}:", "", *(f"- {m.strip()}" for m in mixed[1:]), ""]
        if mixed
        else []
    )
    left = _left_out(runs)
    model = [_model_line(runs), ""] if "model_error" in runs else []
    parts = [*lines, "", note, "", *left, *model, *mixed, *_references_rst(references), *where, description]
    return "\n".join(parts)


def _model_line(runs: pd.DataFrame) -> str:
    """How near the cost model came to the runs it was not fitted on (costmodel.held_out_error)."""
    e = held_out_error(runs)
    parts = []
    if e["left_out"]:
        parts.append(
            f" {e['left_out']} more on several ranks {'is' if e['left_out'] == 1 else 'are'} not scored "
            f"({left_out_reasons(e)}): "
            "the model prices a core per rank on a quiet machine."
        )
    if e["unpriced"]:
        parts.append(
            f" {e['unpriced']} on several ranks could not be priced: no 1-rank run of their configuration "
            "to fit the model on."
        )
    left = "".join(parts)
    if not e["cells"]:
        return f"**Cost model**: not scored.{left}" if left else "**Cost model**: not scored: no run on several ranks."
    spread = (
        f"{100 * e['low']:+.0f} %" if e["cells"] == 1 else f"from {100 * e['low']:+.0f} to {100 * e['high']:+.0f} %"
    )
    over = f"median absolute error **{100 * e['median_abs']:.0f} %** over the {e['cells']} runs"
    if e["cells"] == 1:
        over = f"absolute error **{100 * e['median_abs']:.0f} %** on the one run"
    return (
        f"**Cost model** (fitted on the 1-rank runs and this machine's link): {over} on several ranks it "
        f"was not fitted on (predicted ÷ measured − 1: {spread}; runs.csv's model_error).{left}"
    )


def headline_rows(runs: pd.DataFrame) -> list[tuple]:
    """The headline table's rows: per dataset, variant (batch_size aside: a column of its own), axis
    and design, the quotable run group (design, ranks, batch) with the best median speedup."""
    return [_cells(best) for best in _best_per_design(runs, quotable(runs))]


def left_out_rows(runs: pd.DataFrame) -> list[tuple]:
    """Per dataset, variant and axis, the best run group of all those left out of the headline (any
    design), in the headline's cells and the kinds of reason its runs were left out for."""
    left = ~serial_runs(runs) & has_speedup(runs) & (notes(runs) != "")
    best = {}
    for found in _best_per_design(runs, left):
        where = (found.dataset, found.variant, found.axis)
        if where not in best or found.value > best[where].value:
            best[where] = found
    rows = []
    for found in best.values():
        reasons = sorted({kind for n in notes(found.group) for kind in reason_kinds(n)})
        rows.append((*_cells(found), "; ".join(reasons)))
    return rows


class Best(NamedTuple):
    """One design's best run group on one axis of a dataset's variant (a row of the headline)."""

    dataset: str
    variant: str
    axis: str
    column: str  # the axis's speedup column
    base: str  # its base's seconds per sample
    medians: pd.Series  # the group's medians (the widest interval over its runs)
    serial_accuracy: float
    design: str
    group: pd.DataFrame  # the group's runs

    @property
    def value(self) -> float:
        return self.medians[self.column]


def _best_per_design(runs: pd.DataFrame, allowed: pd.Series):
    """Per dataset, variant, axis and design, among the allowed runs, the (ranks, batch) group with the
    best median speedup (Best)."""
    columns = [c for c in varying(runs) if c != "batch_size"]
    for key, d in runs.groupby(["dataset", *columns], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        variant = ", ".join(f"{c}={v}" for c, v in zip(columns, key[1:])) or "-"
        serial_acc = d.loc[d["algorithm"] == "serial", "final_test_accuracy"].median()
        for axis, column, base in AXES:
            if column not in d:
                continue
            timed = d[allowed[d.index] & d[column].notna()]
            for design, g in timed.groupby(_design_shown(timed), sort=False):
                m = _best_group(g, column)
                group = g[(g["ranks"] == m["ranks"]) & (g["batch_size"] == m["batch_size"])]
                yield Best(key[0], variant, axis, column, base, m, serial_acc, design, group)


def _cells(found: Best) -> tuple:
    """One row of the headline's table (HEAD)."""
    m, column = found.medians, found.column
    over = m.get("best_serial_speedup")
    over = f"{over:.2f}{_ci(m, 'best_serial_speedup')}" if over is not None and pd.notna(over) else "-"
    return (
        found.dataset,
        found.variant,
        found.axis,
        found.design,
        int(m["ranks"]),
        _batch(m),
        f"{m[column]:.2f}{_ci(m, column)}",
        _micro(m.get(found.base)),
        over,
        f"{m['final_test_accuracy']:.3f} ({found.serial_accuracy:.3f})",
    )


def _list_table(head: tuple, rows: list[tuple]) -> list[str]:
    """An RST list-table of a header and rows."""
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in [head, *rows]:
        lines += [f"   {'*' if i == 0 else ' '} - {cell}" for i, cell in enumerate(row)]
    return lines


def _design_shown(runs: pd.DataFrame) -> pd.Series:
    """The design as the headline names it: auto with what it trained ("auto → node")."""
    if "trained_as" not in runs:
        return runs["algorithm"]
    return runs["algorithm"].where(runs["algorithm"] != "auto", "auto → " + runs["trained_as"].astype(str))


def _best_group(g: pd.DataFrame, column: str) -> pd.Series:
    """Of one design's runs, the (ranks, batch) group with the best median: medians of the measures,
    the widest interval over its runs."""
    by = g.groupby(["ranks", "batch_size"])
    medians = by[[c for c in g.columns if pd.api.types.is_numeric_dtype(g[c])]].median()
    for c in [c for c in g.columns if c.endswith("_ci_low")]:
        medians[c] = by[c].min()
    for c in [c for c in g.columns if c.endswith("_ci_high") or c == "ci_launches"]:
        medians[c] = by[c].max()
    return medians.reset_index(drop=True).loc[medians[column].reset_index(drop=True).idxmax()]


def _batch(row: pd.Series) -> str:
    glob = row.get("global_batch")
    return f"{int(row['batch_size'])}" + (f" ({int(glob)})" if pd.notna(glob) else "")


def _micro(seconds) -> str:
    """Seconds as microseconds, three significant digits and no exponent."""
    if seconds is None or pd.isna(seconds):
        return "-"
    v = 1e6 * seconds
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def _ci(row: pd.Series, measure: str) -> str:
    low, high = row.get(f"{measure}_ci_low"), row.get(f"{measure}_ci_high")
    if low is None or pd.isna(low):
        return ""
    one = " (one launch)" if row.get("ci_launches") == 1 else ""
    return f" [{low:.2f}, {high:.2f}]{one}"


def _why_none(runs: pd.DataFrame) -> str:
    """Why a study's front page has no speedup to quote, in one sentence."""
    if not (runs["algorithm"] != "serial").any():
        return "the study ran serial only."
    if "speedup" not in runs or not has_speedup(runs).any():
        return "the study has no serial run at the batch and data of its other runs (add `serial` on 1 rank)."
    return "every speedup was left out (below)."


def _left_out(runs: pd.DataFrame) -> list[str]:
    """The runs whose measured speedups the headline leaves out, counted by reason."""
    if "speedup_note" not in runs:
        return []
    left = runs[(notes(runs) != "") & has_speedup(runs)]
    if left.empty:
        return []
    reasons = pd.Series([r for n in left["speedup_note"] for r in reason_kinds(n)]).value_counts()
    said = "; ".join(f"{why} ({n})" for why, n in reasons.items())
    several = f" (a run may have several, so the counts add up to more than {len(left)})"
    return [
        f"**Left out of the headline**: {len(left)} run(s) with a speedup, counted by reason"
        f"{several if reasons.sum() > len(left) else ''}: {said} (each run's reasons: runs.csv's speedup_note).",
        "",
    ]


def _references_rst(references: pd.DataFrame | None) -> list[str]:
    """The references' verdicts for the front page: every breach by name, with its interval."""
    if references is None or references.empty:
        return []
    head = f"**References**: {verdict_line(references)}."
    return [head, "", *(f"- **{line}**" for line in breach_lines(references)), ""]


def mixed_lines(runs: pd.DataFrame) -> list[str]:
    """The experiments whose timings come from more than one engine, one line each (the summary and
    the report's front page), with what retimes them."""
    if "timing_mixed" not in runs or not runs["timing_mixed"].any():
        return []
    mixed = runs[runs["timing_mixed"].astype(bool)]
    cols = ["dataset", *(c for c in varying(runs) if c in mixed), "algorithm", "ranks"]
    names = sorted({", ".join(f"{c}={r[c]}" for c in cols) for _, r in mixed.iterrows()})
    engines = sorted(set(runs["timed_by"].astype(str)))
    head = (
        f"timings of {len(engines)} engines ({', '.join(engines)}): the speedups of {len(names)} "
        f"experiment(s) are left out; `make retime` retrains their older runs with this engine (the same weights)"
    )
    return [head, *(f"  {n}" for n in names)]
