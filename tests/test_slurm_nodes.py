"""MPI jobs across nodes: the local cluster in its multi-node mode (`local-cluster.sh start --nodes 3`:
partition `nodes` of three network namespaces with their own hostname, address and slurmd, beside
localhost in `debug`), driven through the profile with `slurm_partition: nodes`.

`make test` starts these beside tests/test_slurm.py (pytest-xdist, two workers, a file on one), so they
need the cluster in that mode already (CI starts it so); run alone, the module switches the cluster
to it and back. Its last test (marker restarts_cluster, run after all others) stops the cluster,
checks nothing is left, and starts it again.
"""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, env
from test_slurm import (
    CONFIG,
    FAST_POLLING,
    STEP_DELAY,
    _act_when,
    _interrupt_after_first_checkpoint,
    _since,
    _training_job,
    copy_for_nodes,
    on_slurm,
    sacct_jobs,
    wait_for_cluster,
)
from test_slurm import LONG as SINGLE_NODE_LONG
from test_workflow import NO_FIGURES, SNAKEMAKE, copy_env, copy_repo, planned, write_config

from mpinet.commbench import rank_counts

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

SCRIPT = REPO / "tests/slurm/local-cluster.sh"
NODE_TMP = "/var/tmp/mpinet-node-tmp"  # the nodes' own TmpFS (a mount point in each node's namespace)
NODES = 3
DATASETS = {"iris": {"source": "bundled:iris", "format": "csv"}}
F64 = {"dataset": "iris", "hidden": [8], "dtype": "float64", "epochs": 40}
SPREAD = [
    {**F64, "algorithm": "allreduce", "ranks": 2, "nodes": 2},
    {**F64, "algorithm": "paramserver", "ranks": 3, "nodes": 3},
    # hybrid: 2 BLAS threads per rank, one rank per node
    {**F64, "algorithm": "allreduce", "ranks": 2, "nodes": 2, "blas_threads": 2, "seed": 5},
    # one copy of the weights per node, the leaders exchanging across nodes: 2 ranks on each of 2
    {**F64, "algorithm": "node", "ranks": 4, "nodes": 2},
]
# paced by STEP_DELAY (conftest.paced): about 20 s, a checkpoint (every 10 s) before the kill
LONG = {**F64, "algorithm": "allreduce", "ranks": 2, "nodes": 2, "epochs": 140, "seed": 3}


def cluster_script(*args, timeout=300):
    p = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"local-cluster.sh {' '.join(args)} failed:\n{p.stdout}\n{p.stderr[-3000:]}"
    return p


def node_count() -> int:
    """Nodes in the partition `nodes` (0 when the cluster runs localhost alone)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "nodes", "-o", "%N"], capture_output=True, text=True).stdout
    return len(set(out.split()))


@pytest.fixture(scope="module", autouse=True)
def nodes():
    wait_for_cluster()
    before = node_count()
    if before == NODES:
        yield
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):  # switching would restart the cluster under the other worker
        reason = f"the local cluster runs without {NODES} nodes; start it with: local-cluster.sh start --nodes {NODES}"
        pytest.fail(reason) if os.environ.get("CI") == "true" else pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("switching the local cluster to several nodes needs root")
    cluster_script("start", "--nodes", str(NODES))
    yield
    cluster_script("start", "--nodes", str(before or 1))


@pytest.fixture(scope="module")
def spread_run(tmp_path_factory):
    """The SPREAD experiments on SLURM and the same ones locally under mpiexec."""
    wd = copy_for_nodes(tmp_path_factory.mktemp("nodes"))
    write_config(wd, {"datasets": DATASETS, "experiments": SPREAD})
    since = _since()
    on_slurm(wd, *NO_FIGURES)  # the runs, the microbenchmark and runs.csv are what these tests read
    local = copy_repo(tmp_path_factory.mktemp("local"))
    write_config(local, {"datasets": DATASETS, "experiments": SPREAD})
    # those runs alone (their weights are compared): no microbenchmark, tables or figures
    weights = [str(p.relative_to(wd)) for p in (wd / "results/runs").rglob("weights.npz")]
    cmd = [*SNAKEMAKE, "--cores", "2", *weights, "--configfile", "config/test.yaml"]  # --configfile takes several
    subprocess.run(cmd, cwd=local, check=True, env=copy_env(local), capture_output=True, timeout=600)
    return wd, local, since


def run_of(wd, algorithm, seed=1) -> Path:
    return next(p for p in (wd / "results/runs").glob(f"**/algorithm~{algorithm}/**/seed~{seed}/repeat~1"))


def params(run: Path) -> np.ndarray:
    with np.load(run / "weights.npz") as w:
        return w["params"]


@pytest.mark.parametrize("algorithm,ranks", [("allreduce", 2), ("paramserver", 3)])
def test_ranks_run_on_as_many_hosts_as_nodes_asked_and_give_the_local_weights(spread_run, algorithm, ranks):
    wd, local, since = spread_run
    run = run_of(wd, algorithm)
    meta = json.loads((run / "run.json").read_text())
    expected = [f"node{i}" for i in range(1, ranks + 1)]
    assert meta["hosts"] == expected and meta["nodes"] == ranks  # each rank's own hostname
    assert meta["slurm"]["SLURM_STEP_NUM_NODES"] == str(ranks)
    # the bundled cluster's task prolog picks MPICH's OFI network module; the run says so
    assert meta["environment"]["MPIR_CVAR_CH4_NETMOD"] == "ofi" and meta["environment"]["FI_PROVIDER"] == "tcp"
    job = sacct_jobs(wd, since).set_index("job").loc[meta["slurm"]["SLURM_JOB_ID"]]
    assert job["state"] == "COMPLETED"
    assert job["nnodes"] == str(ranks)  # --nodes reached sbatch
    mine, theirs = params(run), params(local / run.relative_to(wd))
    assert mine.dtype == np.float64
    np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-10)
    runs = pd.read_csv(wd / "results/test/metrics/runs.csv")
    assert runs[(runs["algorithm"] == algorithm) & (runs["blas_threads"] == 1)]["nodes"].tolist() == [ranks]


def test_the_node_design_shares_a_node_s_weights_and_exchanges_across_nodes_as_on_one(spread_run):
    """Two ranks on each of two nodes: each node's ranks step one shared copy, the leaders gather the
    errors and sum the small layers across the nodes; the weights are those of the 4 ranks on one node."""
    wd, local, _ = spread_run
    run = run_of(wd, "node")
    meta = json.loads((run / "run.json").read_text())
    assert meta["hosts"] == ["node1", "node2"] and meta["nodes"] == 2 and meta["ranks"] == 4
    np.testing.assert_allclose(params(run), params(local / run.relative_to(wd)), rtol=0, atol=1e-10)


def test_a_two_thread_rank_gets_two_cpus_on_its_node(spread_run):
    wd, _, since = spread_run
    meta = json.loads((run_of(wd, "allreduce", seed=5) / "run.json").read_text())
    assert meta["hosts"] == ["node1", "node2"] and meta["blas_threads"] == 2
    assert meta["affinity"] == [[0, 1], [0, 1]]  # srun --cpus-per-task=2 under task/affinity + task/cgroup
    assert [b["num_threads"] for b in meta["blas"]] == [2]
    assert "--cpus-per-task=2" in meta["mpi"]["launcher"]
    pools = sacct_jobs(wd, since)
    assert (pools["comment"] == "rule_train-mpi-t2-n2_train_mpi").sum() == 1  # its own pool


def test_the_microbenchmark_spans_the_studys_nodes(spread_run):
    wd, _, since = spread_run
    jobs = sacct_jobs(wd, since)
    # pooled with the 3-node runs it measures for
    bench = jobs[jobs["comment"].str.contains("commbench")]
    assert len(bench) == 1 and bench["comment"].iloc[0].startswith(f"rule_train-mpi-t1-n{NODES}_")
    assert bench["nnodes"].iloc[0] == str(NODES)
    # on the study's largest rank count (mpinet's get_bench_ranks), across its widest experiment's nodes
    # (the Allreduce and the copy also on 1, 2, 4, ... of them: mpinet.commbench.rank_counts)
    widest = max(e["ranks"] for e in SPREAD)
    ranks = set(pd.read_csv(wd / "results/test/metrics/commbench.csv")["ranks"])
    assert max(ranks) == widest and ranks == set(rank_counts(widest))


def test_more_nodes_than_the_partition_has_are_refused_before_submission(tmp_path):
    wd = copy_for_nodes(tmp_path)
    write_config(wd, {"datasets": DATASETS, "experiments": [{**F64, "algorithm": "allreduce", "ranks": 4, "nodes": 4}]})
    since = _since()
    p = on_slurm(wd, check=False, timeout=120)
    assert p.returncode != 0
    assert f"4 ranks on 4 nodes, but SLURM partition 'nodes' gives a job at most {NODES} nodes" in p.stdout + p.stderr
    assert sacct_jobs(wd, since).empty


def _kill_ranks_on_one_node(job: str) -> tuple[str, float]:
    """SIGKILL the job's training ranks on its second node (not the batch host): the node's share of
    the job dies at once, as in a crash. Returns the node and the time of the kill."""
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], capture_output=True, text=True).stdout.strip()
    hosts = subprocess.run(["scontrol", "show", "hostnames", out], capture_output=True, text=True).stdout.split()
    node = hosts[1]
    pids = subprocess.run(["ip", "netns", "pids", f"mpinet-{node}"], capture_output=True, text=True).stdout.split()
    ranks = [p for p in pids if b"mpinet.train" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert ranks, f"no training rank of job {job} on {node}"
    for pid in ranks:
        os.kill(int(pid), signal.SIGKILL)
    return node, time.time()


def test_a_node_losing_its_ranks_ends_the_job_and_the_retry_resumes_bit_identically(spread_run, tmp_path):
    wd, _, _ = spread_run
    write_config(wd, {"datasets": DATASETS, "experiments": [*SPREAD, LONG]})
    plan = planned(wd)
    assert plan.get("train_mpi") == 1 and "train_single" not in plan  # the finished experiments stay
    since = _since()
    # latency-wait 10: a failed pool's retry waits that long for the logs of members that never started
    polling = [*FAST_POLLING, "--latency-wait", "10"]
    out, returncode, (node, killed) = _interrupt_after_first_checkpoint(
        wd, _kill_ranks_on_one_node, NO_FIGURES, polling, delay=STEP_DELAY
    )
    assert returncode == 0, out[-3000:]
    jobs = sacct_jobs(wd, since)
    train = jobs[jobs["comment"].str.startswith("rule_train")]
    # only the long experiment's pool was submitted: twice, the first attempt failed, the retry finished
    assert len(train) == 2 and (train["comment"] == "rule_train-mpi-t1-n2_train_mpi").all(), jobs
    assert train["state"].tolist() == ["FAILED", "COMPLETED"], jobs
    ended = datetime.fromisoformat(train["end"].iloc[0]).timestamp()
    assert ended - killed < 60, f"the job ran on for {ended - killed:.0f} s after its ranks on {node} died"
    run = run_of(wd, "allreduce", seed=3)
    meta = json.loads((run / "run.json").read_text())
    assert meta["resumed_from_epoch"] > 0 and meta["nodes"] == 2
    assert pd.read_csv(run / "metrics.csv")["epoch"].tolist() == list(range(1, LONG["epochs"] + 1))

    local = copy_repo(tmp_path)
    write_config(local, {"datasets": DATASETS, "experiments": [LONG]})
    weights = str(run.relative_to(wd) / "weights.npz")  # that run alone, no tables or plots
    cmd = [*SNAKEMAKE, "--cores", "2", weights, "--configfile", "config/test.yaml"]  # --configfile takes several
    subprocess.run(cmd, cwd=local, check=True, env=copy_env(local), capture_output=True, timeout=600)
    assert np.array_equal(params(run), params(local / run.relative_to(wd)))  # bit-identical


def test_the_nodes_benchmark_times_one_node_against_two():
    cmd = [sys.executable, str(REPO / "benchmarks/nodes.py"), "--train", "64", "--epochs", "2", "--repeats", "1"]
    cmd += ["--partition", "nodes"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env())
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in p.stdout.splitlines() if line[:5].strip() in ("1", "2")}
    # which nodes SLURM gives depends on what the other test module holds at the time
    ours = {f"node{i}" for i in range(1, NODES + 1)}
    one, two = rows["1"][1].split(","), rows["2"][1].split(",")
    assert len(one) == 1 and len(set(two)) == 2 and set(one + two) <= ours, (one, two)
    assert all(float(rows[n][2]) > 0 for n in rows) and "two nodes / one node:" in p.stdout


# One partition's job, not a multi-node one: here so the two test modules take about as long.
@pytest.mark.timeout(900)
def test_a_job_past_its_time_limit_is_retried_and_resumed(tmp_path):
    wd = copy_for_nodes(tmp_path)
    # paced by STEP_DELAY (conftest.paced) until SLURM has ended the first attempt: about 95 s of
    # training, whatever the machine's load, so SLURM ends it after its minute (and up to 30 s more,
    # its check's period) in the middle; the retry then finishes at full speed
    epochs = 640
    write_config(wd, {"datasets": CONFIG["datasets"], "experiments": [{**SINGLE_NODE_LONG, "epochs": epochs}]})
    # one minute for the first attempt, ten for the retry; the pool's microbenchmark adds none
    limit = ["--set-resources", "train_mpi:runtime=1 if attempt == 1 else 10", "commbench:runtime=0"]
    since = _since()

    def timed_out():
        """SLURM ended the first attempt at its time limit"""
        return "TIMEOUT" in set(_training_job(wd, since)["state"])

    args = (*limit, "--latency-wait", "10", *NO_FIGURES)
    out, returncode, _ = _act_when(wd, timed_out, lambda job: None, args, wait=400, delay=STEP_DELAY)
    assert returncode == 0, out[-3000:]
    jobs = _training_job(wd, since)
    assert jobs["state"].tolist() == ["TIMEOUT", "COMPLETED"], (jobs, out[-2000:])
    meta = json.loads(next((wd / "results/runs").rglob("run.json")).read_text())
    assert meta["resumed_from_epoch"] > 0
    metrics = pd.read_csv(next((wd / "results/runs").rglob("metrics.csv")))
    assert metrics["epoch"].tolist() == list(range(1, epochs + 1))


@pytest.mark.restarts_cluster
def test_stop_leaves_no_namespace_link_hosts_line_or_daemon_and_start_comes_back():
    stop = cluster_script("stop").stderr
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    daemons = subprocess.run(
        ["pgrep", "-a", "-f", "^[^ ]*(slurmd|slurmctld|slurmdbd|munged|mariadbd)( |$)"], capture_output=True, text=True
    ).stdout
    left = {
        "namespaces": namespaces.strip(),
        "links": [line for line in links.splitlines() if "mpinet" in line or "veth-node" in line],
        "hosts lines": [line for line in Path("/etc/hosts").read_text().splitlines() if "mpinet" in line],
        "daemons": daemons.strip(),
        "files": [
            f for f in ("/etc/slurm/slurm.conf", "/etc/slurm/mpinet-task-prolog.sh", NODE_TMP) if Path(f).exists()
        ],
    }
    assert not any(left.values()), f"{left}\nstop said:\n{stop}"
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True)
    assert status.returncode != 0 and "slurmctld: stopped" in status.stdout
    cluster_script("stop")  # idempotent
    cluster_script("start", "--nodes", str(NODES))
    again = cluster_script("start", "--nodes", str(NODES)).stderr  # idempotent: nothing restarted
    assert "stopped" not in again and "cluster up" in again, again
    assert node_count() == NODES
    status = cluster_script("status").stdout
    assert "slurmd on node3: running" in status, status
    addresses = subprocess.run(
        ["ip", "-n", "mpinet-node2", "-br", "addr", "show", "eth0"], capture_output=True, text=True
    )
    assert "10.213.7.12/24" in addresses.stdout, addresses
