"""The SLURM profile against a real SLURM cluster on localhost (tests/slurm/local-cluster.sh start).

Outside CI these skip when no cluster answers; with CI=true a missing cluster fails them.
"""

import json
import os
import shutil
import subprocess
import time
from datetime import datetime

import pandas as pd
import pytest
import yaml
from conftest import env
from test_workflow import SNAKEMAKE, copy_repo, planned, write_config

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

CONFIG = {
    "datasets": {"iris": {"source": "data/iris.csv", "format": "csv"}},
    "experiments": [
        {"dataset": "iris", "algorithm": ["serial", "allreduce", "paramserver"], "ranks": [1, 2], "epochs": 4},
    ],
}
FAST_POLLING = ["--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "2"]


def _cluster_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    try:
        p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == 0 and any(s in p.stdout for s in ("idle", "mixed", "allocated"))


@pytest.fixture(scope="module", autouse=True)
def cluster():
    if not _cluster_up():
        reason = "no SLURM cluster answers; start one with: bash tests/slurm/local-cluster.sh start"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def on_slurm(wd, *args, timeout=420, check=True):
    """snakemake with the SLURM profile; SIGINT at the limit (SIGTERM would be ignored while jobs run)."""
    cmd = ["timeout", "-s", "INT", "-k", "30", str(timeout), *SNAKEMAKE, "--profile", "profiles/slurm"]
    cmd += ["--configfile", "config/test.yaml", *FAST_POLLING, *args]
    p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=timeout + 60, env=env())
    if check and p.returncode != 0:
        raise AssertionError(f"snakemake on SLURM failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}")
    return p


def sacct_jobs(since: str) -> pd.DataFrame:
    p = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-S", since, "-o", "JobID,State,NTasks,Comment%200"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split("|") for line in p.stdout.splitlines() if line.strip()]
    return pd.DataFrame(rows, columns=["job", "state", "ntasks", "comment"])


def _since() -> str:
    time.sleep(1)
    return datetime.now().strftime("%Y-%m-%dT%H:%M:%S")


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    wd = copy_repo(tmp_path_factory.mktemp("slurm"))
    write_config(wd, CONFIG)
    since = _since()
    on_slurm(wd)
    return wd, since


def test_every_experiment_is_a_slurm_job_with_srun_ranks(slurm_run):
    wd, since = slurm_run
    jobs = sacct_jobs(since)
    train = jobs[jobs["comment"].str.startswith("rule_train")]
    assert len(train) == 4 and (train["state"] == "COMPLETED").all(), jobs
    assert sorted(train["comment"].str.extract(r"rule_(train_\w+?)_wildcards")[0]) == [
        "train_mpi",
        "train_mpi",
        "train_single",
        "train_single",
    ]
    assert not jobs["comment"].str.contains("rule_aggregate|rule_plots|rule_fetch").any()  # localrules
    for meta_path in (wd / "results/runs/iris").rglob("run.json"):
        meta = json.loads(meta_path.read_text())
        assert meta["slurm"]["SLURM_JOB_ID"] in set(train["job"])
        assert int(meta["slurm"]["SLURM_STEP_NUM_TASKS"]) == meta["ranks"]  # srun started exactly these ranks
        assert meta["slurm"]["SLURM_MPI_TYPE"] == "pmi2"


def test_results_equal_a_local_run_with_the_same_seeds(slurm_run, tmp_path):
    wd, _ = slurm_run
    local = copy_repo(tmp_path)
    write_config(local, CONFIG)
    subprocess.run(
        [*SNAKEMAKE, "--cores", "2", "--configfile", "config/test.yaml"],
        cwd=local,
        check=True,
        env=env(),
        capture_output=True,
    )
    cols = ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy"]
    runs = sorted((wd / "results/runs").rglob("metrics.csv"))
    assert len(runs) == 4
    for m in runs:
        a = pd.read_csv(m)[cols]
        b = pd.read_csv(local / m.relative_to(wd))[cols]
        pd.testing.assert_frame_equal(a, b, rtol=1e-6)


def test_second_invocation_has_nothing_to_do_and_one_change_submits_only_its_jobs(slurm_run):
    wd, _ = slurm_run
    p = on_slurm(wd, "-n")
    assert "Nothing to be done" in p.stdout + p.stderr
    cfg = yaml.safe_load(yaml.safe_dump(CONFIG))
    cfg["experiments"].append({"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "epochs": 4, "seed": 7})
    write_config(wd, cfg)
    assert planned(wd).get("train_mpi") == 1
    since = _since()
    on_slurm(wd)
    jobs = sacct_jobs(since)
    assert len(jobs) == 1 and "train_mpi" in jobs["comment"].iloc[0] and "_7" in jobs["comment"].iloc[0]


def test_a_failing_training_job_is_reported_promptly(tmp_path):
    wd = copy_repo(tmp_path)
    cfg = yaml.safe_load(yaml.safe_dump(CONFIG))
    cfg["experiments"] = [
        {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "learning_rate": 1e300, "loss": "xent"}
    ]
    write_config(wd, cfg)
    t = time.monotonic()
    p = on_slurm(wd, check=False, timeout=300)
    elapsed = time.monotonic() - t
    assert p.returncode != 0 and elapsed < 150, (elapsed, p.stderr[-2000:])
    assert "Error in rule train_mpi" in p.stdout + p.stderr
    log = next((wd / "logs/train").rglob("*.log")).read_text()
    assert "training diverged in epoch 1" in log


def test_a_job_that_can_never_fit_is_rejected_at_submission(tmp_path):
    wd = copy_repo(tmp_path)
    cfg = yaml.safe_load(yaml.safe_dump(CONFIG))
    cpus = os.cpu_count()
    cfg["experiments"] = [{"dataset": "iris", "algorithm": "allreduce", "ranks": cpus + 1}]
    write_config(wd, cfg)
    t = time.monotonic()
    p = on_slurm(wd, check=False, timeout=300)
    assert p.returncode != 0 and time.monotonic() - t < 120
    assert "More processors requested than permitted" in p.stdout + p.stderr
