"""What a study measured, in words: the summary table printed at the end of a run and the report's
front page (its headline numbers and reference verdicts), both from runs.csv."""

from pathlib import Path

import pandas as pd

from mpinet.analysis.environment import environment_rst
from mpinet.analysis.references import breach_lines
from mpinet.study.experiments import varying


def end_of_run(runs_csv, references_csv, study: str, study_dir: str) -> str:
    """What a run prints when it ends: the summary table and the references' verdicts."""
    text = f"\nStudy {study} ({study_dir}/):\n{summary_table(runs_csv)}\n"
    if mixed := mixed_lines(pd.read_csv(runs_csv)):
        text += "\n" + "\n".join(mixed) + "\n"
    checked = pd.read_csv(references_csv)
    if len(checked):
        lines = breach_lines(checked) or [f"references: all {len(checked)} within their band or undecided"]
        text += "\n" + "\n".join(lines) + "\n"
    return text


def summary_table(runs_csv: str | Path) -> str:
    """Per dataset, design and ranks: final accuracy, median epoch time, the step times' tail (p95 ÷
    p50), speedup, time to target, and how many seeds reached the target."""
    runs = pd.read_csv(runs_csv)
    g = runs.groupby(["dataset", *varying(runs), "algorithm", "ranks"], sort=True)
    table = pd.DataFrame(
        {
            "launches": g.size(),
            "final_acc": g["final_test_accuracy"].mean().round(3),
            "epoch_s": g["median_epoch_s"].median().map(lambda v: f"{v:.4g}"),
            "speedup": g["speedup"].median().round(2),
            "speedup_95ci": _ci_column(runs, g, "speedup"),
            "to_target_s": g["time_to_target_s"].median().round(2),
            "reached": g["time_to_target_s"].apply(lambda s: f"{s.notna().sum()}/{len(s)}"),
        }
    )
    if "p95_step_s" in runs and runs["p95_step_s"].notna().any():
        # the tail: how much slower the slow steps (p95) are than the typical one (p50)
        table.insert(3, "step_p95/p50", (g["p95_step_s"].median() / g["median_step_s"].median()).round(2))
    if "weak_efficiency" in runs and runs["weak_efficiency"].notna().any():
        table.insert(3, "weak_eff", g["weak_efficiency"].median().round(2))  # samples_per_rank sweeps
        table.insert(4, "weak_eff_95ci", _ci_column(runs, g, "weak_efficiency"))
    text = table.reset_index().to_string(index=False, na_rep="-")
    if "ci_launches" in runs and (runs["ci_launches"] == 1).any():
        text += "\n*: one launch; its interval covers only that launch's epochs (more with `repeats`)"
    return text


def _ci_column(runs: pd.DataFrame, g, measure: str) -> pd.Series:
    """'[low, high]' of a measure's 95 % interval per row of the summary (the widest over its runs),
    '*' after it when it comes from a single launch."""
    if f"{measure}_ci_low" not in runs:
        return pd.Series("-", index=g.size().index)
    low, high = g[f"{measure}_ci_low"].min(), g[f"{measure}_ci_high"].max()
    single = g["ci_launches"].max() == 1
    text = "[" + low.map("{:.2f}".format) + ", " + high.map("{:.2f}".format) + "]" + single.map({True: "*", False: ""})
    return text.where(low.notna(), "-")


def headline_rst(
    runs_csv, description: str, study: str, references: pd.DataFrame | None = None, environment=None
) -> str:
    """The report's front page: the study's headline numbers first (per dataset and variant, the
    best speedup of each design timed alone, and what it cost in accuracy), the references' verdicts,
    where it ran (mpinet.analysis.environment), then the description."""

    runs = pd.read_csv(runs_csv)
    columns = varying(runs)
    lines = [f"Study **{study}**: headline numbers", "", ".. list-table::", "   :header-rows: 1", ""]
    lines += ["   * - dataset", "     - variant", "     - design", "     - ranks", "     - speedup", "     - accuracy"]
    for key, d in runs.groupby(["dataset", *columns]):
        key = key if isinstance(key, tuple) else (key,)
        variant = ", ".join(f"{c}={v}" for c, v in zip(columns, key[1:])) or "-"
        serial_acc = d.loc[d["algorithm"] == "serial", "final_test_accuracy"].median()
        timed = d[(d["algorithm"] != "serial") & d["speedup_isolated"].astype(bool)]
        cis = [c for c in ("speedup_ci_low", "speedup_ci_high", "ci_launches") if c in timed]
        by = timed.groupby(["algorithm", "ranks"])
        best = by[["speedup", "final_test_accuracy"]].median()
        if cis:
            best = best.join(by[cis].agg({"speedup_ci_low": "min", "speedup_ci_high": "max", "ci_launches": "max"}))
        best = best.reset_index()
        for algorithm, g in best.groupby("algorithm"):
            if g["speedup"].notna().any():
                row = g.loc[g["speedup"].idxmax()]
                lines += [
                    f"   * - {key[0]}",
                    f"     - {variant}",
                    f"     - {algorithm}",
                    f"     - {int(row['ranks'])}",
                    f"     - {row['speedup']:.2f}{_headline_ci(row)}",
                    f"     - {row['final_test_accuracy']:.3f} (serial {serial_acc:.3f})",
                ]
    note = (
        "The best speedup of each design among the runs timed alone (median over seeds and launches) "
        "with its 95 % bootstrap interval over launches and epochs (one launch: over its epochs only), "
        "and its final test accuracy beside the serial run's. The scaling figures show every point, "
        "the spread and the cost model."
    )
    where = environment_rst(environment) if environment is not None and len(environment) else []
    mixed = mixed_lines(runs)
    mixed = (
        [f"**Timings of several engines**: {mixed[0]}:", "", *(f"- {m.strip()}" for m in mixed[1:]), ""]
        if mixed
        else []
    )
    return "\n".join([*lines, "", note, "", *mixed, *_references_rst(references), *where, description])


def _references_rst(references: pd.DataFrame | None) -> list[str]:
    """The references' verdicts for the front page: every breach by name, with its interval."""
    if references is None or references.empty:
        return []
    breaches = breach_lines(references)
    ok = int((references["status"] == "ok").sum())
    head = f"**References**: {len(references)} checked, {len(breaches)} breached, {ok} within their band."
    return [head, "", *(f"- **{line}**" for line in breaches), ""]


def _headline_ci(row) -> str:
    if "speedup_ci_low" not in row or pd.isna(row["speedup_ci_low"]):
        return ""
    one = " (one launch)" if row["ci_launches"] == 1 else ""
    return f" [{row['speedup_ci_low']:.2f}, {row['speedup_ci_high']:.2f}]{one}"


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
