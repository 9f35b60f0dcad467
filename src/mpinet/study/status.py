"""A study's state at a glance: which experiments are done, running, failed or missing (make
status, and the failures printed when a run fails), each by a short label, a dataset whose fetch or
preparation failed with its error line, and the study name a config file gets."""

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mpinet import MpinetError
from mpinet.engine.checkpoint import record_path
from mpinet.layout import METRICS_FILE, RECORD_FILE, runs_table, study_dir
from mpinet.study.experiments import COLUMNS, DEFAULTS

RUNNING_WITHIN_S = 120  # a job whose log grew this recently counts as running
STATES = ("done", "running", "failed", "missing")  # the order of the count line
# Always in a label: what every experiment has (`repeat` only where a dataset's experiments have several).
LABELLED = ("dataset", "algorithm", "ranks", "batch_size", "seed", "repeat")
SHORT = {"learning_rate": "lr"}  # a column's name in a label, where the key is long
ERROR = re.compile(r"^(mpinet\.\w+: )?error: ")  # the one-line error of our command lines


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
    """The one-line error (mpinet.train's, mpinet.datacli's) in a log, or the log's last line after a traceback."""
    lines = log.read_text(errors="replace").splitlines()
    for line in lines:
        if ERROR.match(line):
            return line.strip()
    if any(line.startswith("Traceback") for line in lines) or any("stopped by SIG" in line for line in lines):
        return next((x.strip() for x in reversed(lines) if x.strip()), "")
    return ""


def status_table(experiments: list[Experiment], table=None, data_logs: dict | None = None, prepared=()) -> str:
    """One line per experiment by its label (experiment_labels of `table`, the experiments' rows in the
    same order; their names without it) and a count per state. A dataset whose fetch or preparation
    failed comes first with its error line (data_errors of `data_logs` and `prepared`), and the
    experiments it holds back are failed, not missing."""
    labels = experiment_labels(table) if table is not None else [e.name for e in experiments]
    datasets = [e.name.split("/")[0] for e in experiments]
    broken = data_errors(sorted(set(datasets)), data_logs or {}, prepared)
    rows = [("failed", job, error) for job, error in broken.values()]
    for e, label, dataset in zip(experiments, labels, datasets, strict=True):
        s, detail = state(e)
        if dataset in broken and s not in ("done", "running"):
            s, detail = "failed", f"not run: {broken[dataset][0]} failed (above)"
        rows.append((s, label, detail))
    width = max((len(label) for _, label, _ in rows), default=10)
    lines = [f"{'STATE':<8} {'EXPERIMENT':<{width}}  DETAIL"]
    lines += [f"{s:<8} {label:<{width}}  {d}".rstrip() for s, label, d in rows]
    counts = pd.Series([s for s, *_ in rows[len(broken) :]]).value_counts()
    summary = ", ".join(f"{counts[s]} {s}" for s in STATES if s in counts) + f" of {len(experiments)} experiments"
    if broken:
        summary += "; " + ", ".join(job for job, _ in broken.values()) + " failed"
    lines.append(summary)
    return "\n".join(lines)


def experiment_labels(table: pd.DataFrame) -> list[str]:
    """A short label per experiment row: dataset, design, ranks, batch and seed, the repeat where a
    dataset's experiments have several, and every other option that differs among a dataset's
    experiments (`lr=0.01`; a switch by its name, `faithful`, where it is not the default)."""
    groups = table.groupby("dataset", sort=False)
    shown = {d: [c for c in COLUMNS if rows[c].astype(str).nunique() > 1] for d, rows in groups}
    return [_label(row, shown[row["dataset"]]) for _, row in table.iterrows()]


def data_errors(datasets: list[str], logs: dict[str, str], prepared=()) -> dict[str, tuple[str, str]]:
    """{dataset: (job, its error line and log)} for each dataset whose job failed: a log of it
    (`logs`: job -> its log's path with `{dataset}`, e.g. prepare -> logs/data/prepare_{dataset}.log)
    holds an error and its prepared files (`prepared`: paths with `{dataset}`) are not all there. Of
    a dataset's failed jobs, the newest log's."""
    errors = {}
    for d in datasets:
        if prepared and all(Path(p.replace("{dataset}", d)).exists() for p in prepared):
            continue
        failed = []
        for job, pattern in logs.items():
            log = Path(pattern.replace("{dataset}", d))
            if log.is_file() and (line := error_line(log)):
                failed.append((log.stat().st_mtime, f"{job} {d}", f"{line} ({log})"))
        if failed:
            _, job, error = max(failed)
            errors[d] = (job, error)
    return errors


def failures(experiments: list[Experiment]) -> str:
    """The failed experiments by name with their one-line error; '' if none."""
    failed = [(e, d) for e in experiments for s, d in [state(e, now=float("inf"))] if s == "failed"]
    return "\n".join(f"failed: {e.name}: {d}" for e, d in failed)


def _label(row: pd.Series, shown: list[str]) -> str:
    """One experiment's label: its fixed parts, then the options in `shown` (what sets it apart)."""
    ranks = int(row["ranks"])
    parts = [str(row["dataset"]), str(row["algorithm"]), f"{ranks} rank{'s' if ranks != 1 else ''}"]
    parts += [f"batch {row['batch_size']}", f"seed {row['seed']}"]
    if "repeat" in shown:
        parts.append(f"repeat {row['repeat']}")
    parts += [_option(c, row[c]) for c in shown if c not in LABELLED]
    return " ".join(p for p in parts if p)


def _option(column: str, value) -> str:
    """An option in a label: `lr=0.01`; a switch by its name where it is not the default (`faithful`,
    `no-standardize`), a count whose default 0 means off only where it is on (`train_samples=60`)."""
    default = DEFAULTS.get(column)
    if isinstance(default, bool):
        return "" if value == default else column if value else f"no-{column}"
    if default == 0 and value == 0:
        return ""
    name = SHORT.get(column, column)
    return f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"


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


def yaml_problem(e) -> str:
    """A YAML parse error in one line: where (1-based line and column) and what, as PyYAML says it."""
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"not valid YAML ({where}{getattr(e, 'problem', None) or e})"


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
    except yaml.YAMLError as e:  # Snakemake's own message names neither the file nor the line
        print(f"error: {a.config}: {yaml_problem(e)}", file=sys.stderr)
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
