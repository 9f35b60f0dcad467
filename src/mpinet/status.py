"""A study's state at a glance: which experiments are done, running, failed or missing, and the
summary printed at the end of a run."""

import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mpinet.checkpoint import record_path
from mpinet.layout import RECORD_FILE

RUNNING_WITHIN_S = 120  # a job whose log grew this recently counts as running


def study_name(config: dict, configfiles: list) -> str:
    """The config's `study`, else its file's name (config/intel.yaml -> intel), else 'default'."""
    if config.get("study"):
        return str(config["study"])
    if configfiles:
        return Path(configfiles[-1]).stem
    return "default"


@dataclass
class Experiment:
    name: str  # <dataset>/<grid path>, as under results/runs/
    run_dir: Path
    log: Path
    checkpoint: Path


def state(e: Experiment, now: float | None = None) -> tuple[str, str]:
    """(state, detail): done, running, failed (with the error line) or missing."""
    now = time.time() if now is None else now
    if (e.run_dir / RECORD_FILE).exists():
        return "done", ""
    if record_path(e.checkpoint).exists():
        # a pooled run that finished; a failed neighbour's retry removed its outputs (mpinet.checkpoint)
        return "missing", "finished; its outputs come back from its final checkpoint on the next run"
    if e.log.exists():
        error = error_line(e.log)
        if error:
            return "failed", error
        saved = f"checkpoint after epoch {_checkpoint_epoch(e.checkpoint)}" if e.checkpoint.exists() else ""
        if now - e.log.stat().st_mtime < RUNNING_WITHIN_S:
            return "running", saved
        if saved:
            return "failed", f"interrupted; resumes from its {saved}"
    return "missing", ""


def error_line(log: Path) -> str:
    """The trainer's one-line error in a log, or the log's last line after a traceback."""
    lines = log.read_text(errors="replace").splitlines()
    for line in lines:
        if "error:" in line and line.startswith(("mpinet.train:", "error:")):
            return line.strip()
    if any(line.startswith("Traceback") for line in lines) or any("stopped by SIG" in line for line in lines):
        return next((x.strip() for x in reversed(lines) if x.strip()), "")
    return ""


def status_table(experiments: list[Experiment]) -> str:
    """One line per experiment and a count per state."""
    rows = [(e, *state(e)) for e in experiments]
    width = max((len(e.name) for e, *_ in rows), default=10)
    lines = [f"{'STATE':<8} {'EXPERIMENT':<{width}}  DETAIL"]
    lines += [f"{s:<8} {e.name:<{width}}  {d}".rstrip() for e, s, d in rows]
    counts = pd.Series([s for _, s, _ in rows]).value_counts()
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(rows)} experiments")
    return "\n".join(lines)


def failures(experiments: list[Experiment]) -> str:
    """The failed experiments by name with their one-line error; '' if none."""
    failed = [(e, d) for e in experiments for s, d in [state(e, now=float("inf"))] if s == "failed"]
    return "\n".join(f"failed: {e.name}: {d}" for e, d in failed)


def summary_table(runs_csv: str | Path) -> str:
    """Per dataset, design and ranks: final accuracy, median epoch time, speedup, time to target, and
    how many seeds reached the target."""
    from mpinet.experiments import varying

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


def headline_rst(runs_csv, description: str, study: str, references: pd.DataFrame | None = None) -> str:
    """The report's front page: the study's headline numbers first (per dataset and variant, the
    best speedup of each design timed alone, and what it cost in accuracy), then the description."""
    from mpinet.experiments import varying

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
    return "\n".join([*lines, "", note, "", *_references_rst(references), description])


def _references_rst(references: pd.DataFrame | None) -> list[str]:
    """The references' verdicts for the front page: every breach by name, with its interval."""
    if references is None or references.empty:
        return []
    from mpinet.references import breach_lines

    breaches = breach_lines(references)
    ok = int((references["status"] == "ok").sum())
    head = f"**References**: {len(references)} checked, {len(breaches)} breached, {ok} within their band."
    return [head, "", *(f"- **{line}**" for line in breaches), ""]


def _headline_ci(row) -> str:
    if "speedup_ci_low" not in row or pd.isna(row["speedup_ci_low"]):
        return ""
    one = " (one launch)" if row["ci_launches"] == 1 else ""
    return f" [{row['speedup_ci_low']:.2f}, {row['speedup_ci_high']:.2f}]{one}"


def _checkpoint_epoch(path: Path) -> int:
    import numpy as np

    try:
        with np.load(path) as ck:
            return int(ck["epoch"])
    except (OSError, ValueError, KeyError):
        return 0


def main(argv=None) -> int:
    """python -m mpinet.status study CONFIG: the study name a config file gets (for the Makefile)."""
    import argparse

    import yaml

    p = argparse.ArgumentParser(prog="python -m mpinet.status", description="The study name of a config file.")
    p.add_argument("what", choices=["study"])
    p.add_argument("config", help="a study's config file, e.g. config/intel.yaml")
    a = p.parse_args(argv)
    with open(a.config) as f:
        print(study_name(yaml.safe_load(f) or {}, [a.config]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
