"""Paths a user takes through the workflow, each in its own copy of the repository: an interrupted
run resumed, a data or training error on the console, a folder source edited, two studies sharing
runs, the status and leftovers views, timing isolation off. (tests/test_workflow.py holds the one
shared small study and `make run`; the two files run side by side in `make test`.)"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import env, paced
from test_errors import data_refusal
from test_workflow import (
    EPOCHS_PACED,
    NO_FIGURES,
    RUNS_ONLY,
    SNAKEMAKE,
    TINY,
    copy_env,
    copy_repo,
    planned,
    snakemake,
    write_config,
)

pytestmark = pytest.mark.workflow


@pytest.mark.timeout(600)
def test_interrupted_experiment_resumes_and_finished_ones_are_kept(tmp_path):
    wd = copy_repo(tmp_path)
    cfg = {
        "datasets": {"iris": TINY["datasets"]["iris"]},
        "experiments": [
            {"dataset": "iris", "algorithm": "serial", "epochs": 2, "seed": 1},
            # paced (conftest.paced): 14 steps of 10 ms or more an epoch, about 18 s whatever the
            # machine's load; a checkpoint after 10 s, then SIGTERM
            {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "epochs": EPOCHS_PACED, "seed": 1},
        ],
    }
    write_config(wd, cfg)
    cmd = [*SNAKEMAKE, "--cores", "2", "--configfile", "config/test.yaml", "--keep-going", *RUNS_ONLY]
    e = paced(copy_env(wd), 0.01)
    proc = subprocess.Popen(cmd, cwd=wd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
    # the Allreduce run's checkpoint: the serial run writes one too, for the moment before it ends
    checkpoints = wd / "results" / "checkpoints" / "iris" / "algorithm~allreduce"
    deadline = time.monotonic() + 300
    while not list(checkpoints.rglob("checkpoint.npz")) and time.monotonic() < deadline:
        time.sleep(0.2)
    ck = next(checkpoints.rglob("checkpoint.npz"))
    # what SLURM does at a time limit: SIGTERM to the job's processes (here: the MPI launcher)
    # the training job's launcher, not the microbenchmark's (commbench runs beside training jobs)
    launcher = next(
        p
        for p in _children(proc.pid)
        if _cmdline(p)[:1] and _cmdline(p)[0].endswith("mpiexec") and "mpinet.train" in _cmdline(p)
    )
    os.kill(launcher, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        _kill_tree(proc)  # a test that fails must not leave ranks running beside the next tests
    assert proc.returncode != 0, out
    assert ck.exists()
    serial_metrics = next((wd / "results/runs/iris/algorithm~serial").rglob("metrics.csv"))
    assert serial_metrics.exists()
    jobs = planned(wd, *RUNS_ONLY)
    assert jobs.get("train_mpi") == 1 and "train_single" not in jobs
    snakemake(wd, *RUNS_ONLY, timeout=600)
    log = next((wd / "logs/train/iris/algorithm~allreduce").rglob("*.log")).read_text()
    assert "resuming from checkpoint" in log, log[:3000]
    assert not ck.exists()
    metrics = pd.read_csv(next((wd / "results/runs/iris/algorithm~allreduce").rglob("metrics.csv")))
    assert metrics["epoch"].tolist() == list(range(1, EPOCHS_PACED + 1))


def _children(pid):
    import psutil

    return [c.pid for c in psutil.Process(pid).children(recursive=True)]


def _kill_tree(proc: subprocess.Popen) -> None:
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        child.kill()
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _cmdline(pid):
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        return []


def test_data_error_through_snakemake_is_one_line_and_leaves_nothing(tmp_path):
    from mpinet.datasets.synthetic import make_archive

    wd = copy_repo(tmp_path / "wd")
    raw = tmp_path / "photos"
    from mpinet.datasets.fetch import fetch

    fetch(str(make_archive(tmp_path / "a.zip", 4, 2, 0, 16)), raw)
    bad = raw / "seg_train" / "seg_train" / "forest" / "00001.jpg"
    bad.write_bytes(b"\xff\xd8 not really a jpeg")
    cfg = {
        "datasets": {"photos": {"source": str(raw), "format": "images", "image_size": 16}},
        "experiments": [{"dataset": "photos", "epochs": 1}],
    }
    write_config(wd, cfg)
    line = data_refusal(snakemake(wd, check=False, timeout=300), wd)
    assert "forest/00001.jpg: cannot decode image" in line
    assert not (wd / "resources/data/photos").exists()
    assert "cannot decode image" in (wd / "logs/data/prepare_photos.log").read_text()


@pytest.mark.timeout(600)
def test_editing_a_folder_source_reruns_fetch_prepare_and_training(tmp_path, synthetic_zip):
    from mpinet.datasets.fetch import fetch

    wd = copy_repo(tmp_path / "wd")
    folder = fetch(str(synthetic_zip), tmp_path / "photos")
    cfg = {
        "datasets": {"photos": {"source": str(folder), "format": "images", "image_size": 8}},
        "experiments": [{"dataset": "photos", "algorithm": "serial", "batch_size": 8, "epochs": 2}],
    }
    write_config(wd, cfg)
    snakemake(wd, *RUNS_ONLY)
    assert planned(wd, *RUNS_ONLY) == {}
    forest = folder / "seg_train" / "seg_train" / "forest"
    first = sorted(forest.glob("*.jpg"))[0]
    time.sleep(1.1)  # a new modification time on file systems with 1 s resolution
    first.write_bytes(sorted(forest.glob("*.jpg"))[1].read_bytes())  # overwritten with other pixels
    jobs = planned(wd, *RUNS_ONLY)
    assert jobs.get("fetch") == 1 and jobs.get("prepare") == 1 and jobs.get("train_single") == 1, jobs
    snakemake(wd, *RUNS_ONLY)
    (forest / "added.jpg").write_bytes(first.read_bytes())  # a file added
    assert planned(wd, *RUNS_ONLY).get("fetch") == 1
    snakemake(wd, *RUNS_ONLY)
    (folder / "seg_train" / "seg_train" / ".DS_Store").write_bytes(b"\0")  # metadata is not data
    assert planned(wd, *RUNS_ONLY) == {}


def test_a_training_error_reaches_the_console_not_only_the_log(tmp_path):
    wd = copy_repo(tmp_path)
    cfg = {
        "datasets": {"iris": TINY["datasets"]["iris"]},
        "experiments": [
            {"dataset": "iris", "algorithm": a, "ranks": r, "learning_rate": 1e300, "loss": "xent", "epochs": 2}
            for a, r in (("serial", 1), ("allreduce", 2))
        ]
        # not prepared when the DAG is built, so the training job itself refuses the size
        + [{"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "train_samples": 5000, "epochs": 2}],
    }
    write_config(wd, cfg)
    p = snakemake(wd, "--keep-going", check=False, timeout=300)
    assert p.returncode != 0
    lines = [x for x in (p.stdout + p.stderr).splitlines() if x.startswith("mpinet.train: error: training diverged")]
    assert len(lines) == 2, p.stderr[-3000:]
    lines = [x for x in (p.stdout + p.stderr).splitlines() if x.startswith("mpinet.train: error: train_samples")]
    assert len(lines) == 1 and "train_samples 5000 is more than the" in lines[0], p.stderr[-3000:]


def _iris(**experiment):
    return {
        "datasets": {"iris": TINY["datasets"]["iris"]},
        "experiments": [{"dataset": "iris", "epochs": 3, **experiment}],
    }


@pytest.mark.timeout(900)
def test_two_studies_keep_their_own_tables_and_share_their_runs(tmp_path):
    wd = copy_repo(tmp_path)
    write_config(wd, _iris(algorithm=["serial", "allreduce"], ranks=[1, 2]), name="alpha.yaml")
    write_config(wd, _iris(algorithm="serial", learning_rate=[0.3, 0.1]), name="beta.yaml")
    run = [*SNAKEMAKE, "--cores", "2", *NO_FIGURES, "--configfile"]
    a = subprocess.run([*run, "config/alpha.yaml"], cwd=wd, capture_output=True, text=True, env=copy_env(wd))
    assert a.returncode == 0, a.stderr[-3000:]
    assert "Aggregating the metrics of 3 runs" in a.stdout + a.stderr  # a count, not every path
    assert "Study alpha (results/alpha/)" in a.stdout  # the summary at the end
    alpha = {p: p.stat().st_mtime_ns for p in (wd / "results/alpha").rglob("*") if p.is_file()}
    assert len(pd.read_csv(wd / "results/alpha/metrics/runs.csv")) == 3
    b = subprocess.run([*run, "config/beta.yaml"], cwd=wd, capture_output=True, text=True, env=copy_env(wd))
    assert b.returncode == 0, b.stderr[-3000:]
    assert len(re.findall(r"\(Rule: train_single\)", b.stdout + b.stderr)) == 1  # lr 0.3 came from alpha
    assert {p: p.stat().st_mtime_ns for p in (wd / "results/alpha").rglob("*") if p.is_file()} == alpha
    assert len(pd.read_csv(wd / "results/beta/metrics/runs.csv")) == 2
    assert list(json.loads((wd / "results/beta/datasets.json").read_text())) == ["iris"]  # not the default's too
    for study in ("alpha", "beta"):
        dry = subprocess.run(
            [*run, f"config/{study}.yaml", "-n"], cwd=wd, capture_output=True, text=True, env=copy_env(wd)
        )
        assert "Nothing to be done" in dry.stdout + dry.stderr
    assert not (wd / "results/checkpoints").exists()  # finished runs leave no checkpoint tree


@pytest.mark.timeout(600)
def test_status_names_a_failed_experiment_and_leftovers_are_listed_then_removed(tmp_path):
    wd = copy_repo(tmp_path)
    (wd / ".venv").symlink_to(Path(sys.executable).parents[1])  # make's targets use the test's venv
    cfg = _iris(algorithm="serial", learning_rate=[0.3, 1e300], loss="xent")
    write_config(wd, cfg)
    p = snakemake(wd, "--keep-going", *RUNS_ONLY, check=False)
    assert p.returncode != 0
    # the failure listed by name at the end of the run, and by the status view
    failed = [x for x in p.stdout.splitlines() if x.startswith("failed: iris/") and "learning_rate~1e+300" in x]
    assert failed and "training diverged in epoch 1" in failed[0], p.stdout[-3000:]
    status = subprocess.run(
        ["make", "-s", "status", "CONFIG=config/test.yaml"], cwd=wd, capture_output=True, text=True, env=env()
    )
    lines = status.stdout.splitlines()
    # one short label per experiment: what sets the two apart is their learning rate
    assert any(
        x.startswith("failed ") and "iris serial 1 rank" in x and "lr=1e+300" in x and "diverged" in x for x in lines
    ), status
    assert any(x.startswith("done ") and "lr=0.3" in x for x in lines) and not any("~" in x for x in lines), status
    assert lines[-1] == "1 done, 1 failed of 2 experiments"

    write_config(wd, _iris(algorithm="serial", learning_rate=0.1))  # lr 0.3 is no longer in any study
    snakemake(wd, *RUNS_ONLY)
    left = subprocess.run(
        ["make", "-s", "leftovers", "CONFIG=config/test.yaml"], cwd=wd, capture_output=True, text=True, env=env()
    )
    listed = [x for x in left.stdout.splitlines() if x.startswith("leftover: ")]
    assert len(listed) == 1 and "learning_rate~0.3/" in listed[0], left.stdout
    gone = subprocess.run(
        ["make", "-s", "leftovers", "CONFIG=config/test.yaml", "REMOVE=1"],
        cwd=wd,
        capture_output=True,
        text=True,
        env=copy_env(wd),
    )
    assert "removed 1 run directories" in gone.stdout
    assert not list((wd / "results/runs").rglob("learning_rate~0.3"))
    assert list((wd / "results/runs").rglob("learning_rate~0.1"))  # the study's own run is kept


def test_with_isolation_off_runs_are_recorded_shared_and_their_speedups_flagged(tmp_path):
    wd = copy_repo(tmp_path)
    write_config(wd, {**_iris(algorithm=["serial", "allreduce"], ranks=[1, 2]), "isolate_timing": False})
    snakemake(wd, *NO_FIGURES)
    for meta in (wd / "results/runs").rglob("run.json"):
        assert json.loads(meta.read_text())["timing"]["isolation"] == "shared"
    runs = pd.read_csv(wd / "results/test/metrics/runs.csv")
    assert not runs["speedup_isolated"].any() and runs["speedup"].notna().all()


@pytest.mark.timeout(600)
def test_leftovers_keep_every_recorded_study_and_stop_at_a_config_they_cannot_read(tmp_path):
    wd = copy_repo(tmp_path)
    (wd / ".venv").symlink_to(Path(sys.executable).parents[1])
    make = ["make", "-s", "leftovers", "CONFIG=config/test.yaml"]

    def leftovers(*extra):
        return subprocess.run([*make, *extra], cwd=wd, capture_output=True, text=True, env=copy_env(wd))

    write_config(wd, _iris(algorithm="serial", learning_rate=0.2), name="b.yaml")
    b = [*SNAKEMAKE, "--cores", "2", "--configfile", "config/b.yaml", *RUNS_ONLY]
    subprocess.run(b, cwd=wd, check=True, env=copy_env(wd))
    write_config(wd, _iris(algorithm="serial", learning_rate=0.1))
    snakemake(wd, *RUNS_ONLY)
    b_run = next((wd / "results/runs").glob("iris/**/learning_rate~0.2/**/run.json")).parent

    # a typo in study b and another in c: a line naming each file, nothing listed or removed, b's run there
    broken = _iris(algorithm="seriall", learning_rate=0.2)
    write_config(wd, broken, name="b.yaml")
    write_config(wd, _iris(algorithm="serial", ranks=0), name="c.yaml")
    p = leftovers("REMOVE=1")
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: config/")]
    assert p.returncode != 0 and len(errors) == 2, p.stdout + p.stderr
    assert "config/b.yaml: experiments[0].algorithm: 'seriall'" in errors[0] and "config/c.yaml" in errors[1]
    assert "leftover:" not in p.stdout and "removed" not in p.stdout and b_run.exists()

    # b's config kept outside config/: its recorded run list (results/b/runs.txt) still keeps its run
    (wd / "config/b.yaml").rename(tmp_path / "b.yaml")
    (wd / "config/c.yaml").unlink()
    p = leftovers()
    assert p.returncode == 0 and "no leftover run directories" in p.stdout, p.stdout + p.stderr

    # study test drops lr 0.1: that run, and only it, is a leftover, removed with its size printed
    write_config(wd, _iris(algorithm="serial", learning_rate=0.05))
    snakemake(wd, *RUNS_ONLY)
    p = leftovers("REMOVE=1")
    removed = [x for x in p.stdout.splitlines() if x.startswith("removed: ")]
    assert len(removed) == 1 and "learning_rate~0.1/" in removed[0] and removed[0].endswith("KB)"), p.stdout
    assert b_run.exists() and not list((wd / "results/runs").glob("iris/**/learning_rate~0.1/**/run.json"))


def test_every_design_gets_a_training_job(tmp_path):
    """The training rules' wildcard constraints come from the engine's ALGORITHMS: a dry run plans
    each design on 1 rank (all but the parameter server) and on 2 (all but serial)."""
    from mpinet.engine.options import ALGORITHMS

    wd = copy_repo(tmp_path)
    sweep = {**TINY["experiments"][0], "algorithm": list(ALGORITHMS), "ranks": [1, 2], "seed": 1}
    write_config(wd, {**TINY, "datasets": {"iris": TINY["datasets"]["iris"]}, "experiments": [sweep]})
    jobs = planned(wd)
    assert jobs["train_single"] == len(ALGORITHMS) - 1 and jobs["train_mpi"] == len(ALGORITHMS) - 1
