"""A study's state at a glance: which experiments are done, running, failed or missing (make
status, and the failures printed when a run fails), and the study name a config file gets."""

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mpinet import MpinetError
from mpinet.engine.checkpoint import record_path
from mpinet.layout import METRICS_FILE, RECORD_FILE, runs_table, study_dir

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
        # a pooled run that finished; a failed neighbour's retry removed its outputs (mpinet.engine.checkpoint)
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


def _checkpoint_epoch(path: Path) -> int:
    import numpy as np

    try:
        with np.load(path) as ck:
            return int(ck["epoch"])
    except (OSError, ValueError, KeyError):
        return 0


def stale_runs(runs_csv: Path, engine: str) -> list[str]:
    """The metrics files of a study's runs timed by another engine than `engine` (runs.csv's timed_by):
    what `make retime` has Snakemake train again."""
    try:
        runs = pd.read_csv(runs_csv)
    except (OSError, ValueError) as e:
        raise MpinetError(f"{runs_csv}: cannot read it ({type(e).__name__}); run the study first (make run)") from None
    engines = runs["timed_by"] if "timed_by" in runs else pd.Series("", index=runs.index)
    return [str(Path(d) / METRICS_FILE) for d in runs.loc[engines.astype(str) != engine, "run_dir"]]


def main(argv=None) -> int:
    """python -m mpinet.study.status study|stale CONFIG: the study name a config file gets, or the runs
    its last tables say another engine timed (for the Makefile)."""
    import argparse

    import yaml

    from mpinet.fingerprints import NUMERICS

    p = argparse.ArgumentParser(
        prog="python -m mpinet.study.status",
        description="study: the study name of a config file; stale: the metrics files of its runs timed by "
        "another engine than this one, for snakemake --forcerun (make retime)",
    )
    p.add_argument("what", choices=["study", "stale"])
    p.add_argument("config", help="a study's config file, e.g. config/intel.yaml")
    a = p.parse_args(argv)
    try:
        with open(a.config) as f:
            study = study_name(yaml.safe_load(f) or {}, [a.config])
    except OSError as e:
        print(f"error: {a.config}: {e.strerror}", file=sys.stderr)
        return 1
    if a.what == "study":
        print(study)
        return 0
    try:
        print(" ".join(stale_runs(runs_table(study_dir(study)), NUMERICS.code_hash())))
    except MpinetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
