"""What SLURM's accounting (sacct) says of each run that ran on SLURM: how long its allocation
queued, how long its job step ran, how busy it kept the CPUs it held and its largest resident set.
Where there is nothing to say, the `slurm_accounting` column says why (not run on SLURM, no sacct
here, the job not in the accounting database, a step too short for SLURM's sampling)."""

import shutil
import subprocess
import time
from datetime import datetime

import numpy as np
import pandas as pd

SACCT_FIELDS = ("JobID", "State", "Submit", "Start", "End", "ElapsedRaw", "TotalCPU", "CPUTimeRAW", "MaxRSS")
COLUMNS = (
    "slurm_job_id",  # the run's job (its allocation)
    "slurm_step_id",  # its training step in that job (two integers, not "<job>.<step>": a table
    # reader would take 180.10 for the number 180.1)
    "slurm_state",
    "slurm_queue_wait_s",  # the allocation's start - its submission
    "slurm_elapsed_s",  # the step's wall time as SLURM counted it
    "slurm_cpu_efficiency",  # the step's CPU time / (elapsed x CPUs it held)
    "slurm_maxrss_mb",  # the step's largest resident set of one task
    "slurm_accounting",  # ok, or why the other columns are empty
)
NOT_SAMPLED = "ok; MaxRSS not sampled (the step was shorter than SLURM's sampling period)"
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


def job_step(meta: dict) -> str | None:
    """'<job>.<step>' of a run that ran as a SLURM job step (run.json's slurm block), else None."""
    slurm = meta.get("slurm") or {}
    job, step = slurm.get("SLURM_JOB_ID"), slurm.get("SLURM_STEP_ID")
    return f"{job}.{step}" if job and step not in (None, "") else None


def parse_sacct(text: str) -> dict[str, dict]:
    """sacct -n -P -o SACCT_FIELDS output -> {job id or job.step: {field: value}}."""
    rows = {}
    for line in text.splitlines():
        values = line.split("|")
        if len(values) == len(SACCT_FIELDS):
            rows[values[0]] = dict(zip(SACCT_FIELDS, values))
    return rows


def seconds(text: str) -> float:
    """sacct's [DD-][HH:]MM:SS[.mmm] as seconds (NaN when empty)."""
    if not text:
        return np.nan
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    h, m, s = parts
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def megabytes(text: str) -> float:
    """sacct's MaxRSS (1234K, 12M, 1.5G; plain numbers are bytes) in MB, NaN when not sampled."""
    if not text:
        return np.nan
    scale = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}
    unit = text[-1].upper()
    return float(text[:-1]) * scale[unit] if unit in scale else float(text) / 2**20


def account(step: str | None, rows: dict[str, dict], reason: str | None = None) -> dict:
    """A run's COLUMNS from sacct's rows; `reason` when sacct could not be asked at all."""
    job_id, _, step_id = (step or "").partition(".")
    ids = {"slurm_job_id": int(job_id) if job_id else pd.NA, "slurm_step_id": int(step_id) if step_id else pd.NA}
    empty = dict.fromkeys(COLUMNS, np.nan) | ids | {"slurm_state": ""}
    if step is None:
        return empty | {"slurm_accounting": "not run on SLURM"}
    if reason:
        return empty | {"slurm_accounting": reason}
    mine, allocation = rows.get(step), rows.get(job_id)
    if mine is None or allocation is None:
        return empty | {"slurm_accounting": "not in SLURM's accounting"}
    cpu_time = float(mine["CPUTimeRAW"] or "nan")
    rss = megabytes(mine["MaxRSS"])
    wait = (_time(allocation["Start"]) - _time(allocation["Submit"])).total_seconds()
    return {
        **ids,
        "slurm_state": mine["State"].split()[0],
        "slurm_queue_wait_s": wait,
        "slurm_elapsed_s": float(mine["ElapsedRaw"] or "nan"),
        "slurm_cpu_efficiency": seconds(mine["TotalCPU"]) / cpu_time if cpu_time > 0 else np.nan,
        "slurm_maxrss_mb": rss,
        # SLURM samples memory every JobAcctGatherFrequency seconds (30 by default): a shorter step has none
        "slurm_accounting": "ok"
        if not np.isnan(rss)
        else "ok; MaxRSS not sampled (step shorter than SLURM's sampling)",
    }


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def query(steps: list[str], wait_s: float = 30.0) -> tuple[dict[str, dict], str | None]:
    """sacct's rows for these job steps and their allocations, waiting up to wait_s for steps that
    ended a moment ago to reach a final state; (rows, None) or ({}, why not)."""
    if not steps:
        return {}, None
    if shutil.which("sacct") is None:
        return {}, "no accounting here (sacct not found)"
    jobs = sorted({s.split(".")[0] for s in steps})
    deadline = time.monotonic() + wait_s
    while True:
        cmd = ["sacct", "-n", "-P", "-j", ",".join(jobs), "-o", ",".join(SACCT_FIELDS)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return {}, f"sacct failed ({type(e).__name__})"
        if p.returncode != 0:
            return {}, f"sacct failed: {(p.stderr.strip().splitlines() or ['no message'])[-1]}"
        rows = parse_sacct(p.stdout)
        settled = all(rows.get(s, {}).get("State", "").split(" ")[0] in FINAL_STATES for s in steps)
        if settled or time.monotonic() > deadline:
            return rows, None
        time.sleep(2)


def accounting_table(runs: list[tuple[str, dict]]) -> pd.DataFrame:
    """(run_dir, run.json) pairs -> one row per run: run_dir and COLUMNS."""
    steps = [job_step(meta) for _, meta in runs]
    rows, reason = query([s for s in steps if s])
    table = [{"run_dir": d, **account(s, rows, reason)} for (d, _), s in zip(runs, steps)]
    out = pd.DataFrame(table, columns=["run_dir", *COLUMNS])
    return out.astype({"slurm_job_id": "Int64", "slurm_step_id": "Int64"})  # integers, empty where none
