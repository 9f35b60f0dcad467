"""SLURM's accounting of a run (mpinet.analysis.accounting) from sacct's own output, collected on the
bundled cluster (tests/slurm/local-cluster.sh, SLURM 22.05, jobacct_gather/linux)."""

import math

import pytest

from mpinet.analysis.accounting import account, accounting_table, job_step, megabytes, parse_sacct, seconds

# sacct -n -P -o JobID,State,Submit,Start,End,ElapsedRaw,TotalCPU,CPUTimeRAW,MaxRSS of a pool of two
# 1-rank steps and a 3-rank step long enough for a memory sample
SACCT = """\
152|COMPLETED|2026-12-03T11:23:29|2026-12-03T11:23:43|2026-12-03T11:23:51|8|00:05.751|32|
152.batch|COMPLETED|2026-12-03T11:23:43|2026-12-03T11:23:43|2026-12-03T11:23:51|8|00:02.675|32|
152.0|COMPLETED|2026-12-03T11:23:46|2026-12-03T11:23:46|2026-12-03T11:23:50|4|00:03.075|8|
153|CANCELLED by 0|2026-12-03T11:23:29|2026-12-03T11:23:40|2026-12-03T11:24:28|48|00:44.100|288|
153.1|COMPLETED|2026-12-03T11:23:51|2026-12-03T11:23:51|2026-12-03T11:24:26|35|00:32.984|105|201220K
"""


def test_sacct_times_and_sizes_are_read_in_their_own_units():
    assert seconds("00:05.751") == pytest.approx(5.751)
    assert seconds("1-02:03:04") == 86400 + 2 * 3600 + 3 * 60 + 4
    assert seconds("02:03:04.5") == pytest.approx(7384.5)
    assert math.isnan(seconds(""))
    assert megabytes("201220K") == pytest.approx(196.50, abs=0.01)
    assert megabytes("1.5G") == 1536 and megabytes("12M") == 12 and megabytes(str(2**20)) == 1
    assert math.isnan(megabytes(""))


def test_a_step_gets_its_allocations_queue_wait_and_its_own_time_cpu_and_memory():
    rows = parse_sacct(SACCT)
    assert set(rows) == {"152", "152.batch", "152.0", "153", "153.1"}
    a = account("153.1", rows)
    assert a["slurm_queue_wait_s"] == 11  # the allocation: submitted 11:23:29, started 11:23:40
    assert a["slurm_elapsed_s"] == 35 and a["slurm_state"] == "COMPLETED"
    assert a["slurm_cpu_efficiency"] == pytest.approx(32.984 / 105)
    assert a["slurm_maxrss_mb"] == pytest.approx(201220 / 1024) and a["slurm_accounting"] == "ok"
    short = account("152.0", rows)  # four seconds: before SLURM's first memory sample
    assert math.isnan(short["slurm_maxrss_mb"]) and "not sampled" in short["slurm_accounting"]
    assert short["slurm_cpu_efficiency"] == pytest.approx(3.075 / 8) and short["slurm_queue_wait_s"] == 14


def test_every_run_without_accounting_says_why():
    assert account(None, {})["slurm_accounting"] == "not run on SLURM"
    assert account("9.0", {}, "no accounting here (sacct not found)")["slurm_accounting"].startswith("no accounting")
    assert account("9.0", parse_sacct(SACCT))["slurm_accounting"] == "not in SLURM's accounting"


def test_a_runs_step_comes_from_its_record():
    assert job_step({"slurm": {"SLURM_JOB_ID": "153", "SLURM_STEP_ID": "1"}}) == "153.1"
    assert job_step({"slurm": {}}) is None and job_step({}) is None
    table = accounting_table([("results/runs/a", {"slurm": {}})])  # asks sacct nothing
    assert table.to_dict("records")[0]["slurm_accounting"] == "not run on SLURM"
    a = account("153.10", {})  # step 10: two integers, never the number 153.1 a CSV reader would make
    assert (a["slurm_job_id"], a["slurm_step_id"]) == (153, 10)
