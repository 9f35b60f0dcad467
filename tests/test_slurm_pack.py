"""make slurm-pack on the local cluster's partition `nodes` (three namespaced nodes of 2 CPUs): a
sweep of 1- and 2-node experiments side by side in one allocation of 3 nodes, each training its own
job step on whole nodes; then a step cancelled mid-run, which leaves the others running and which
the command run again finishes alone.

`make test` runs this file beside tests/test_slurm.py and tests/test_slurm_nodes.py (pytest-xdist,
--dist loadfile); like the latter it needs the cluster started with --nodes 3.
"""

import json
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from conftest import paced
from test_slurm import STEP_DELAY, _since, sacct_jobs
from test_slurm_nodes import nodes  # noqa: F401 (the module's cluster of 3 nodes, autouse)
from test_workflow import SNAKEMAKE, copy_env, copy_repo, write_config

from mpinet.analysis import allocation

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

DATASETS = {"iris": {"source": "bundled:iris", "format": "csv"}}
TINY = {"dataset": "iris", "hidden": [8], "epochs": 40}
# 12 experiments: 6 of one node (a 2-rank run fills a node's 2 CPUs), 6 of two (asked, or 4 ranks)
SWEEP = [
    {**TINY, "algorithm": "serial", "ranks": 1, "seed": [1, 2, 3]},
    {**TINY, "algorithm": "allreduce", "ranks": 2, "seed": [1, 2, 3]},
    {**TINY, "algorithm": "allreduce", "ranks": 2, "nodes": 2, "seed": [4, 5, 6]},
    {**TINY, "algorithm": "allreduce", "ranks": 4, "seed": [1, 2, 3]},
]
WIDTH = {("serial", 1): 1, ("allreduce", 2): 1, ("allreduce", 4): 2}  # nodes per step; seeds 4-6 ask for 2
PACK = [sys.executable, "-m", "mpinet.launch.pack", "--configfile", "config/test.yaml", "--partition", "nodes"]


def run_pack(wd, *args, env=None, timeout=600):
    p = subprocess.run([*PACK, *args], cwd=wd, capture_output=True, text=True, env=env or copy_env(wd), timeout=timeout)
    return p


def steps_of(wd) -> pd.DataFrame:
    return pd.read_csv(wd / "results/test/metrics/steps.csv", dtype=str, keep_default_na=False)


def runs_of(wd) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((wd / "results/runs").rglob("run.json"))]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    wd = copy_repo(tmp_path_factory.mktemp("pack"))
    write_config(wd, {"datasets": DATASETS, "experiments": SWEEP})
    since = _since()
    # paced (conftest.paced): each run lasts seconds whatever the machine's load, so steps overlap
    p = run_pack(wd, "--nodes", "3", env=paced(copy_env(wd), STEP_DELAY))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return wd, since, p


def test_the_sweep_runs_in_one_allocation_of_three_nodes_each_step_on_whole_nodes_of_its_own(packed):
    wd, since, p = packed
    jobs = sacct_jobs(wd, since)
    train_jobs = jobs[~jobs["comment"].str.startswith("rule_")]  # the data is prepared here, not on SLURM
    assert train_jobs["comment"].tolist() == ["pack_test"] and train_jobs["nnodes"].tolist() == ["3"], jobs
    assert "estimated makespan" in p.stdout and "on 3 nodes" in p.stdout
    steps = steps_of(wd)
    trainings = steps[steps["name"].str.startswith("iris/")]
    assert len(trainings) == 12 and (trainings["state"] == "COMPLETED").all(), trainings
    assert allocation.shared_nodes(steps) == []  # no two steps on one node at once
    assert allocation.most_at_once(steps) >= 2
    for s in trainings.itertuples():
        parts = dict(x.split("~", 1) for x in s.name.split("/")[1:])
        width = 2 if int(parts["seed"]) >= 4 else WIDTH[(parts["algorithm"], int(parts["ranks"]))]
        assert len(s.nodes.split()) == width, s


def test_each_run_records_its_step_s_nodes_and_exclusive_node_isolation(packed):
    wd, _, _ = packed
    steps = steps_of(wd).set_index("step")
    runs = runs_of(wd)
    assert len(runs) == 12
    for meta in runs:
        assert meta["timing"]["isolation"] == "exclusive-node"
        slurm = meta["slurm"]
        step = steps.loc[slurm["SLURM_STEP_ID"]]
        assert step["job"] == slurm["SLURM_JOB_ID"]
        assert allocation.expand_hostlist(slurm["SLURM_STEP_NODELIST"]) == step["nodes"].split()
        assert set(meta["hosts"]) <= set(step["nodes"].split())


def test_the_report_draws_the_allocation_from_its_steps(packed):
    wd, _, _ = packed
    target = "results/test/plots/allocation.png"
    cmd = [*SNAKEMAKE, target, "--cores", "1", "--configfile", "config/test.yaml"]  # the target first
    p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, env=copy_env(wd), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (wd / target).stat().st_size > 0


# paced until the cancel (conftest.paced with a file): the long 2-node run and a 1-node run fill the
# 3 nodes at once; the long one checkpoints after 10 s and is cancelled then, the other (400 paced
# epochs, about 2 minutes) is still running when it comes
LONG = {**TINY, "algorithm": "allreduce", "ranks": 2, "nodes": 2, "epochs": 200, "seed": 9}
OTHERS = {**TINY, "algorithm": "serial", "ranks": 1, "epochs": 400, "seed": 1}


def _pack_job(wd: Path) -> str | None:
    queue = subprocess.run(["squeue", "-h", "-o", "%i|%k|%Z"], capture_output=True, text=True).stdout
    return next((i for i, c, d in (r.split("|") for r in queue.splitlines()) if c == "pack_test"), None)


def _long_step(job: str) -> str | None:
    """JOB.STEP of the long run's step while it runs."""
    out = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i|%j"], capture_output=True, text=True).stdout
    return next((i for i, name in (r.split("|", 1) for r in out.splitlines()) if "seed~9/" in name), None)


def test_a_cancelled_step_leaves_the_others_running_and_a_second_run_finishes_only_it(tmp_path):
    wd = copy_repo(tmp_path)
    write_config(wd, {"datasets": DATASETS, "experiments": [LONG, OTHERS]})
    pacing = wd / ".pacing"
    pacing.touch()
    proc = subprocess.Popen(
        [*PACK, "--nodes", "3"],
        cwd=wd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=paced(copy_env(wd), STEP_DELAY, pacing),
    )
    try:
        deadline, step = time.monotonic() + 400, None
        while step is None or not list((wd / "results/checkpoints").rglob("seed~9/**/checkpoint.npz")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=60)
            job = _pack_job(wd)
            step = _long_step(job) if job else None
            time.sleep(0.5)
        subprocess.run(["scancel", step], check=True)
        cancelled = time.time()
        time.sleep(3)  # the others still paced a moment after the cancel: they outlive it
        pacing.unlink()
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=120)
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    failed = [line for line in err.splitlines() if line.startswith("failed: ")]
    assert len(failed) == 1 and "seed~9/" in failed[0], err[-3000:]
    steps = steps_of(wd)
    first = steps[steps["name"].str.startswith("iris/")]
    killed = first[first["name"].str.contains("seed~9/")]
    assert killed["state"].tolist() == ["CANCELLED"], first
    others = first[~first["name"].str.contains("seed~9/")]
    assert len(others) == 1 and (others["state"] == "COMPLETED").all(), first
    ends = [datetime.fromisoformat(e).timestamp() for e in others["end"]]  # sacct's local time
    assert all(e > cancelled for e in ends), "the other step was not running when the long one was cancelled"
    assert len(runs_of(wd)) == 1

    again = run_pack(wd, "--nodes", "3")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "1 experiments of study test" in again.stdout
    steps = steps_of(wd)
    second = steps[(steps["job"] != killed["job"].iloc[0]) & (steps["step"] != "allocation")]
    assert second["name"].str.contains("seed~9/").tolist() == [True], steps  # only what was missing
    (long_run,) = [m for m in runs_of(wd) if m["options"]["seed"] == 9]
    assert long_run["resumed_from_epoch"] > 0 and long_run["timing"]["isolation"] == "exclusive-node"
