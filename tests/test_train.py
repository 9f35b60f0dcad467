import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
from conftest import env, run_train, train_cmd, train_patched, train_with_a_slow_rank, weights, write_dataset

from mpinet import MpinetError
from mpinet.datasets import dataset
from mpinet.engine.checkpoint import Store
from mpinet.engine.comm import Comm
from mpinet.engine.designs import EXCHANGES
from mpinet.engine.loop import train
from mpinet.engine.mpilib import library
from mpinet.engine.options import Options, check_options
from mpinet.launch.launcher import mpiexec_argv

F64 = ("--dtype", "float64")


def _args(data, out, *extra):
    return ("--data", data, "--out", out, "--epochs", 3, "--learning-rate", 0.5, *F64, *extra)


def test_serial_trains_in_process_without_mpi(small_dataset):
    result = train(dataset.load(small_dataset), Options(epochs=30, learning_rate=0.5), Comm(None))
    assert result.metrics[-1]["train_loss"] < result.metrics[0]["train_loss"]
    assert result.metrics[-1]["test_accuracy"] > 0.6
    assert result.confusion.sum() == 30


def test_serial_cli_never_loads_mpi(small_dataset, tmp_path):
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"  # any import of mpi4py now fails
        "from mpinet.train import main\n"
        f"sys.exit(main(['--data', '{small_dataset}', '--out', '{tmp_path / 'o'}', '--epochs', '2']))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60)
    assert p.returncode == 0, p.stderr
    metrics = pd.read_csv(tmp_path / "o" / "metrics.csv")
    assert list(metrics["epoch"]) == [1, 2]


def test_outputs_are_tidy_and_complete(small_dataset, tmp_path):
    run_train(None, *_args(small_dataset, tmp_path / "o"))
    m = pd.read_csv(tmp_path / "o" / "metrics.csv")
    assert list(m.columns[:5]) == ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy"]
    assert {"time_s", "compute_s", "comm_s", "bytes_sent"} <= set(m.columns)
    c = pd.read_csv(tmp_path / "o" / "confusion.csv", index_col=0)
    assert list(c.columns) == ["c0", "c1", "c2"] and c.to_numpy().sum() == 30
    meta = json.loads((tmp_path / "o" / "run.json").read_text())
    assert meta["options"]["dtype"] == "float64" and meta["ranks"] == 1 and meta["hosts"]
    assert meta["blas"] and meta["blas"][0]["num_threads"] == 1
    assert meta["fused_update"] is True  # serial, with numpy's OpenBLAS
    # the first layer's plan and the machine facts it came from (Iris-sized: one GEMM)
    ((host, plan),) = meta["first_layer"].items()
    assert host in meta["hosts"] and plan["l2_bytes"] > 0 and plan["first_layer"] == "W @ x.T"


@pytest.mark.mpi
@pytest.mark.parametrize(
    "extra,fused",
    [
        (("--algorithm", "allreduce"), False),
        (("--sync-every", "2"), True),
        (("--algorithm", "allgather"), True),
        (("--algorithm", "sharded"), True),
        (("--algorithm", "node"), True),
    ],
)
def test_run_json_says_whether_the_update_was_fused(small_dataset, tmp_path, extra, fused):
    """Allreduce sends the gradient, so it keeps the separate update; local SGD's own steps fold it,
    and Allgather folds it into the GEMM over the gathered factors."""
    extra = extra if extra[0] == "--algorithm" else ("--algorithm", "allreduce", *extra)
    from mpinet.fingerprints import NUMERICS

    run_train(2, *_args(small_dataset, tmp_path / "o", *extra))
    meta = json.loads((tmp_path / "o" / "run.json").read_text())
    assert meta["fused_update"] is fused
    assert meta["timed_by"] == NUMERICS.code_hash()  # the engine that timed it: this code


@pytest.mark.mpi
# each design's exchange under every MPI make test builds (each_mpi), in one case that splits unevenly:
# the other cases check the design's bookkeeping, which no MPI library changes
@pytest.mark.parametrize(
    "ranks,shuffle", [(2, "samples"), (3, "samples"), pytest.param(3, "batches", marks=pytest.mark.each_mpi)]
)
def test_allreduce_matches_serial_with_p_times_the_batch(tmp_path, ranks, shuffle):
    data = write_dataset(tmp_path / "d", n_train=61, n_test=10)  # 61: the last global batch is partial
    run_train(None, *_args(data, tmp_path / "s", "--batch-size", 4 * ranks, "--shuffle", shuffle))
    run_train(ranks, *_args(data, tmp_path / "a", "--batch-size", 4, "--algorithm", "allreduce", "--shuffle", shuffle))
    serial, allreduce = weights(tmp_path / "s"), weights(tmp_path / "a")
    assert np.abs(serial - allreduce).max() < 1e-10
    assert not np.allclose(serial, weights_after_zero_epochs(data, tmp_path))  # training moved the weights
    ms, ma = pd.read_csv(tmp_path / "s" / "metrics.csv"), pd.read_csv(tmp_path / "a" / "metrics.csv")
    for col in ("train_loss", "train_accuracy", "test_loss", "test_accuracy"):
        assert np.allclose(ms[col], ma[col], rtol=0, atol=1e-10), col


@pytest.mark.mpi
@pytest.mark.parametrize(
    "ranks,shuffle,extra",
    [
        (2, "batches", ()),
        pytest.param(3, "samples", (), marks=pytest.mark.each_mpi),
        (2, "samples", ("--faithful", "true", "--learning-rate", 0.001)),
    ],
)
def test_allgather_matches_serial_with_p_times_the_batch(tmp_path, ranks, shuffle, extra):
    """The first layer's gradient rebuilt from every rank's gathered inputs and errors is the global
    batch's: the same result as serial on P x the batch, a partial last batch included."""
    sent = _same_as_serial(tmp_path, "allgather", ranks, ("--shuffle", shuffle, *extra))
    # a rank sends its 4 rows of inputs and errors (4 x 230 values) and the small layers' gradient,
    # not the first layer's 200 x 30 weight gradient; rank 0 sends its first layer once an epoch
    steps, small = -(-61 // (4 * ranks)), 30 + 30 * 20 + 20 + 20 * 3 + 3
    assert sent <= steps * 8 * (4 * 230 + small) + 8 * 200 * 30 < (steps + 1) * 8 * 200 * 30


@pytest.mark.mpi
@pytest.mark.parametrize(
    "ranks,shuffle,extra",
    [
        (2, "batches", ()),
        pytest.param(3, "samples", ("--hidden", 31, 20), marks=pytest.mark.each_mpi),  # 31 units: 11, 10 and 10
        (2, "batches", ("--train-samples", 45)),  # a subset: its global batches are gathered from the file
        (2, "samples", ("--faithful", "true", "--learning-rate", 0.001)),
    ],
)
def test_sharded_first_layer_matches_serial_with_p_times_the_batch(tmp_path, ranks, shuffle, extra):
    """Each rank steps only its units' rows of the first layer, on the whole global batch; the
    weights gathered at the end are serial's on P x the batch, a partial last batch included."""
    sent = _same_as_serial(tmp_path, "sharded", ranks, ("--shuffle", shuffle, *extra))
    # no gradient and no input row is sent: the units' outputs for the global batch, and once an
    # epoch the rank's rows of the first layer (and rank 0's small layers)
    steps, units = -(-61 // (4 * ranks)), -(-30 // ranks) + 1  # a rank's units, at most
    small = units * ranks + units * ranks * 20 + 20 + 20 * 3 + 3
    assert sent <= steps * 8 * units * 4 * ranks + 8 * (units * 200 + small) < steps * 8 * 200 * 30 / 5


@pytest.mark.mpi
@pytest.mark.parametrize(
    "ranks,shuffle,extra",
    [
        (1, "batches", ()),
        (2, "batches", ()),
        # 3 slices of the flat buffer, unequal: one more value in the first ones
        pytest.param(3, "samples", (), marks=pytest.mark.each_mpi),
        (2, "samples", ("--faithful", "true", "--learning-rate", 0.001)),
        (3, "batches", ("--train-samples", 45)),  # a subset: its global batches are gathered from the file
    ],
)
def test_node_shared_weights_match_serial_with_p_times_the_batch(tmp_path, ranks, shuffle, extra):
    """One copy of the weights per node: each rank steps its columns of the first layer from every
    rank's output errors and its columns of the global batch's rows, and its slice of the rest from the
    ranks' gradient segments; serial's weights on P x the batch, a partial last batch included. A rank
    hands the node its rows' errors and the small layers' gradient, never the first layer's."""
    sent = _same_as_serial(tmp_path, "node", ranks, ("--shuffle", shuffle, *extra))
    n, rest = 45 if "--train-samples" in extra else 61, 30 + 30 * 20 + 20 + 20 * 3 + 3
    first_slots = [min(4 * ranks, n - start) for start in range(0, n, 4 * ranks)]  # rank 0's rows: the most
    rows = sum(-(-g // ranks) for g in first_slots)
    assert sent == (0 if ranks == 1 else len(first_slots) * 8 * rest + rows * 8 * 30)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [None, 1, 2])
def test_auto_trains_with_the_design_its_trial_chose_and_gives_its_weights(tmp_path, ranks):
    """auto times each candidate's first steps on the run's data and ranks, then trains afresh with the
    fastest: the weights of that design run directly, bit for bit; run.json names it and every
    candidate's time a step. One rank: serial, with no trial."""
    data = write_dataset(tmp_path / "d", n_train=61, n_test=10, dim=200)
    run_train(ranks, *_args(data, tmp_path / "auto", "--algorithm", "auto"))
    meta = json.loads((tmp_path / "auto" / "run.json").read_text())
    assert meta["options"]["algorithm"] == "auto"
    if ranks == 2:  # a grid of 2 ranks is one group (sharded) or one shard (allreduce): not timed twice
        assert set(meta["auto_trial_step_s"]) == {"allreduce", "node", "allgather", "sharded"}
        assert all(t > 0 for t in meta["auto_trial_step_s"].values())
        assert meta["design"] == min(meta["auto_trial_step_s"], key=meta["auto_trial_step_s"].get)
    else:
        assert meta["design"] == "serial" and "auto_trial_step_s" not in meta
    run_train(ranks if ranks != 1 else None, *_args(data, tmp_path / "chosen", "--algorithm", meta["design"]))
    assert weights(tmp_path / "auto").tobytes() == weights(tmp_path / "chosen").tobytes()


@pytest.mark.mpi
def test_auto_decides_once_per_experiment_and_every_launch_trains_that_design(tmp_path):
    """The first launch of an auto experiment records its choice beside the experiment's runs; its other
    launches (another repeat, another seed) train that design without trials and give the first's
    weights; a recorded choice is what trains, whatever a trial would pick."""
    data = write_dataset(tmp_path / "d", n_train=61, n_test=10, dim=200)
    experiment = tmp_path / "runs" / "algorithm~auto" / "ranks~2"
    first, second = experiment / "seed~1" / "repeat~1", experiment / "seed~1" / "repeat~2"
    run_train(2, *_args(data, first, "--algorithm", "auto"))
    record = json.loads((experiment / "auto_choice.json").read_text())
    meta = json.loads((first / "run.json").read_text())
    assert meta["design"] == record["design"] and not meta["auto_choice"]["reused"]
    assert meta["auto_trials_s"] == record["trials_s"] > 0 and set(record["trial_step_s"]) >= {"allreduce", "node"}
    run_train(2, *_args(data, second, "--algorithm", "auto"))
    again = json.loads((second / "run.json").read_text())
    assert again["design"] == record["design"] and again["auto_choice"]["reused"] and again["auto_trials_s"] == 0
    assert weights(first).tobytes() == weights(second).tobytes()
    forced = tmp_path / "forced" / "algorithm~auto" / "ranks~2"
    forced.mkdir(parents=True)
    (forced / "auto_choice.json").write_text(json.dumps({"design": "allgather", "trials_s": 0.5}))
    run_train(2, *_args(data, forced / "seed~1" / "repeat~1", "--algorithm", "auto"))
    run_train(2, *_args(data, tmp_path / "allgather", "--algorithm", "allgather"))
    assert json.loads((forced / "seed~1" / "repeat~1" / "run.json").read_text())["design"] == "allgather"
    assert weights(forced / "seed~1" / "repeat~1").tobytes() == weights(tmp_path / "allgather").tobytes()


def test_an_auto_choice_is_kept_at_the_experiment_level_of_a_study_s_run_path():
    from mpinet.layout import auto_choice_path

    run = "results/runs/iris/algorithm~auto/ranks~2/batch_size~4/seed~3/repeat~2"
    assert str(auto_choice_path(run)) == "results/runs/iris/algorithm~auto/ranks~2/batch_size~4/auto_choice.json"
    assert auto_choice_path("/tmp/my-run") is None  # a hand-started run decides alone


def test_auto_chooses_among_the_designs_the_options_allow():
    from mpinet.engine.planner import candidates

    assert candidates(Options(), 2, 61, 3) == ["allreduce", "node", "allgather", "sharded", "grid"]
    assert candidates(Options(batch_size=4), 3, 61, 3) == ["allreduce", "node", "allgather", "sharded", "grid"]
    with pytest.raises(MpinetError, match="sync_every"):
        check_options(Options(algorithm="auto", sync_every=2), 2, 61, 3)


# The trainer with MPI_Comm_split_type answered by a split of its own: "nodes" of one machine, so
# the node design's hierarchical path (leaders gather the errors and sum the small layers) runs here
FAKE_NODES = """
import sys
from mpi4py import MPI
import mpinet.train as cli
from mpinet.engine.comm import Comm

class World:
    def __init__(self, comm):
        self._comm = comm
    def __getattr__(self, name):
        return getattr(self._comm, name)
    def Split_type(self, kind, key=0):  # node {node_of}
        return self._comm.Split({node_of}, key)

cli.world = lambda: Comm(World(MPI.COMM_WORLD))
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.mpi
@pytest.mark.each_mpi
@pytest.mark.parametrize(
    "ranks,node_of",
    [(4, "self._comm.Get_rank() // 2"), (5, "self._comm.Get_rank() % 2")],  # blocks; interleaved, 3 and 2
)
def test_node_design_across_nodes_matches_serial(tmp_path, ranks, node_of):
    """Ranks on several nodes: each node's ranks step their shared copy from every node's rows (the
    leaders gather the errors and sum the small layers), which is serial's step on the global batch."""
    data = write_dataset(tmp_path / "d", n_train=61, n_test=10, dim=200)
    run_train(None, *_args(data, tmp_path / "s", "--batch-size", 4 * ranks))
    script = tmp_path / "fake_nodes.py"
    script.write_text(FAKE_NODES.format(node_of=node_of))
    args = _args(data, tmp_path / "o", "--batch-size", 4, "--algorithm", "node")
    cmd = [*mpiexec_argv(ranks), sys.executable, str(script), *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env())
    assert p.returncode == 0, p.stderr[-3000:]
    assert np.abs(weights(tmp_path / "s") - weights(tmp_path / "o")).max() < 1e-10


@pytest.mark.mpi
def test_node_design_updates_its_columns_in_cache_sized_blocks_as_one_gemm_would(tmp_path):
    """20000 inputs on 2 ranks: each rank's 10000 columns of the global batch are turned into values
    and multiplied in blocks of at most half an L2 (8192 columns of 8 float64 rows on a 1 MiB L2),
    which is serial's update on the global batch to rounding."""
    data = write_dataset(tmp_path / "d", n_train=30, n_test=10, dim=20000)
    extra = ("--hidden", 6, 4, "--epochs", 2)
    run_train(None, *_args(data, tmp_path / "s", "--batch-size", 8, *extra))
    run_train(2, *_args(data, tmp_path / "o", "--batch-size", 4, "--algorithm", "node", *extra))
    assert np.abs(weights(tmp_path / "s") - weights(tmp_path / "o")).max() < 1e-10


@pytest.mark.mpi
def test_node_shared_weights_are_the_same_bits_run_to_run(tmp_path):
    """The node's sum runs in a fixed order (node rank order) in numpy, not in the MPI library: two
    runs give the same bytes, in float32 too."""
    data = write_dataset(tmp_path / "d", n_train=61, n_test=10, dim=200)
    for name in ("a", "b"):
        args = ("--data", data, "--out", tmp_path / name, "--epochs", 3, "--batch-size", 2, "--algorithm", "node")
        run_train(3, *args)
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert a.dtype == np.float32 and a.tobytes() == b.tobytes()


def _same_as_serial(tmp_path, design: str, ranks: int, extra: tuple) -> int:
    """Train `design` on `ranks` ranks of batch 4 and serial on batch 4 x ranks (61 rows of 200 inputs:
    the last global batch is partial); check they give the same weights and metrics; return the
    design's most bytes sent in an epoch."""
    data = write_dataset(tmp_path / "d", n_train=61, n_test=10, dim=200)
    run_train(None, *_args(data, tmp_path / "s", "--batch-size", 4 * ranks, *extra))
    run_train(ranks, *_args(data, tmp_path / "o", "--batch-size", 4, "--algorithm", design, *extra))
    serial, other = weights(tmp_path / "s"), weights(tmp_path / "o")
    assert np.abs(serial - other).max() < 1e-10
    assert not np.allclose(serial[: 200 * 30], weights_after_zero_epochs(data, tmp_path)[: 200 * 30])
    ms, mo = pd.read_csv(tmp_path / "s" / "metrics.csv"), pd.read_csv(tmp_path / "o" / "metrics.csv")
    for col in ("train_loss", "train_accuracy", "test_loss", "test_accuracy"):
        assert np.allclose(ms[col], mo[col], rtol=0, atol=1e-10), col
    return int(mo["bytes_sent"].max())


@pytest.mark.mpi
def test_allgather_in_float32_matches_allreduce_to_rounding(tmp_path):
    data = write_dataset(tmp_path / "d", n_train=40, n_test=10)
    args = ("--data", data, "--epochs", 2, "--learning-rate", 0.5, "--batch-size", 4)
    run_train(2, *args, "--out", tmp_path / "r", "--algorithm", "allreduce")
    run_train(2, *args, "--out", tmp_path / "g", "--algorithm", "allgather")
    r, g = weights(tmp_path / "r"), weights(tmp_path / "g")
    assert r.dtype == g.dtype == np.float32
    assert np.abs(r - g).max() < 1e-5 * max(1.0, np.abs(r).max())


def weights_after_zero_epochs(data, tmp_path):
    from mpinet.engine.model import Net, init_params

    a = dataset.load(data)
    return init_params(Net((a.train_x.shape[1], 30, 20, 3), dtype=np.dtype(np.float64)), 1)


@pytest.mark.mpi
@pytest.mark.each_mpi
def test_paramserver_with_p_workers_matches_allreduce_on_p_ranks(tmp_path):
    data = write_dataset(tmp_path / "d", n_train=50, n_test=10)
    run_train(2, *_args(data, tmp_path / "a", "--algorithm", "allreduce"))
    run_train(3, *_args(data, tmp_path / "p", "--algorithm", "paramserver"))
    assert np.abs(weights(tmp_path / "a") - weights(tmp_path / "p")).max() < 1e-10
    meta = json.loads((tmp_path / "p" / "run.json").read_text())
    assert meta["ranks"] == 3 and meta["data_ranks"] == 2
    # the library this environment's mpi4py loads, by name (MPICH here, Open MPI in make test-mpi)
    expected = {"mpich": "MPICH", "openmpi": "Open MPI", "intel": "Intel(R) MPI"}[library().family]
    assert expected in meta["mpi"]["library"] and meta["mpi"]["family"] == library().family


@pytest.mark.mpi
def test_local_sgd_with_sync_every_one_is_the_gradient_allreduce(tmp_path):
    data = write_dataset(tmp_path / "d", n_train=96, n_test=10)  # 12 steps of 2 x 4 samples
    run_train(2, *_args(data, tmp_path / "k1", "--algorithm", "allreduce", "--sync-every", 1))
    run_train(2, *_args(data, tmp_path / "k4", "--algorithm", "allreduce", "--sync-every", 4))
    k1, k4 = weights(tmp_path / "k1"), weights(tmp_path / "k4")
    assert not np.allclose(k1, k4)  # a different algorithm...
    assert np.abs(k1 - k4).max() < 0.5  # ...that still lands nearby
    m4 = pd.read_csv(tmp_path / "k4" / "metrics.csv")
    m1 = pd.read_csv(tmp_path / "k1" / "metrics.csv")
    assert m4["bytes_sent"].iloc[0] * 4 == m1["bytes_sent"].iloc[0]  # a quarter of the exchanges


@pytest.mark.mpi
def test_same_seed_gives_bit_identical_results(tmp_path):
    data = write_dataset(tmp_path / "d")
    for name in ("one", "two"):
        run_train(3, *_args(data, tmp_path / name, "--algorithm", "paramserver", "--dtype", "float32"))
    assert np.array_equal(weights(tmp_path / "one"), weights(tmp_path / "two"))
    run_train(3, *_args(data, tmp_path / "other", "--algorithm", "paramserver", "--seed", 2))
    assert not np.array_equal(weights(tmp_path / "one"), weights(tmp_path / "other"))


@pytest.mark.mpi
@pytest.mark.each_mpi
def test_wrong_rank_count_fails_fast(small_dataset, tmp_path):
    p = run_train(  # a job that waited for a third rank would hang: run_train's timeout fails the test
        2, *_args(small_dataset, tmp_path / "o", "--algorithm", "allreduce", "--expect-ranks", 3), check=False
    )
    assert p.returncode != 0
    assert "communicator has 2 rank(s) but --expect-ranks is 3" in p.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.mpi
@pytest.mark.each_mpi
def test_paramserver_on_one_rank_is_a_clear_error(small_dataset, tmp_path):
    p = run_train(1, *_args(small_dataset, tmp_path / "o", "--algorithm", "paramserver"), check=False)
    assert p.returncode == 1
    assert "paramserver needs at least 2 ranks" in p.stderr


@pytest.mark.mpi
@pytest.mark.each_mpi
@pytest.mark.timeout(120)
def test_a_rank_that_raises_ends_the_job_instead_of_hanging(small_dataset, tmp_path):
    # rank 1 gets a dataset whose labels are corrupt; rank 0 would wait for it in Allreduce for ever
    code = (
        "import sys, numpy as np\n"
        "from mpi4py import MPI\n"
        "from mpinet import train as cli\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "    cli.train = lambda *a, **k: (_ for _ in ()).throw(RuntimeError('rank 1 broke'))\n"
        f"sys.exit(cli.main(['--data', '{small_dataset}', '--out', '{tmp_path / 'o'}', "
        "'--algorithm', 'allreduce', '--epochs', '1000']))\n"
    )
    p = subprocess.run(
        [*mpiexec_argv(2), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )
    assert p.returncode != 0  # a hang would run into the timeout above and fail the test
    assert "rank 1 broke" in p.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.mpi
@pytest.mark.each_mpi
@pytest.mark.timeout(120)
def test_a_killed_rank_ends_the_job(tmp_path):
    data = write_dataset(tmp_path / "d", n_train=2000, n_test=100, dim=50)
    proc = subprocess.Popen(
        train_cmd(2, "--data", data, "--out", tmp_path / "o", "--algorithm", "allreduce", "--epochs", 100000),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    # both ranks are training once rank 0 logs its first epoch (an Allreduce with the other rank each
    # step), however long a loaded machine takes to get there
    for line in proc.stderr:
        if "epoch 1/" in line:
            break
    ranks = [c for c in psutil.Process(proc.pid).children(recursive=True) if "mpinet.train" in c.cmdline()]
    assert len(ranks) == 2
    ranks[-1].kill()
    proc.wait(timeout=60)  # a hang raises here
    assert proc.returncode != 0


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm,ranks", [("serial", None), ("allreduce", 2), ("paramserver", 3)])
def test_iris_reaches_093_test_accuracy_with_default_hyperparameters(iris_dataset, tmp_path, algorithm, ranks):
    run_train(ranks, "--data", iris_dataset, "--out", tmp_path / "o", "--algorithm", algorithm, timeout=300)
    m = pd.read_csv(tmp_path / "o" / "metrics.csv")
    assert len(m) == 100
    assert m["test_accuracy"].iloc[-1] >= 0.93


@pytest.mark.parametrize(
    "opts,ranks,message",
    [
        (Options(batch_size=0), 1, "batch_size must be a positive integer, got 0"),
        (Options(learning_rate=-0.1), 1, "learning_rate must be positive, got -0.1"),
        (Options(algorithm="allreduce"), 100, "100 training ranks but only 60 training samples"),
        (Options(algorithm="paramserver"), 1, "paramserver needs at least 2 ranks"),
        (Options(algorithm="gossip"), 1, "algorithm: unknown 'gossip'"),
        (Options(sync_every=2), 1, "applies to allreduce only"),
    ],
)
def test_bad_options_are_refused_with_the_reason(opts, ranks, message):
    with pytest.raises(MpinetError, match=message):
        check_options(opts, ranks, n_train=60)


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda d: np.save(d / "train_y.npy", np.zeros(59, dtype=np.int64)), "train_x has 60 rows but train_y has 59"),
        (
            lambda d: np.save(d / "test_y.npy", np.full(30, 7, dtype=np.int64)),
            r"test_y\[0\] = 7 is outside the 3 classes",
        ),
        (lambda d: _nan_row(d / "train_x.npy", 17), "train_x row 17 holds NaN"),
        (
            lambda d: np.save(d / "test_x.npy", np.load(d / "test_x.npy").astype(np.int64)),
            "test_x holds int64 features; expected float values or uint8 pixels",
        ),
        (
            lambda d: np.save(d / "train_x.npy", np.zeros((60, 5), dtype=np.uint8)),
            "train_x holds 5 uint8 features; expected RGB pixels",
        ),
    ],
)
def test_bad_arrays_give_a_one_line_error(small_dataset, tmp_path, damage, message):
    damage(small_dataset)
    p = run_train(None, "--data", small_dataset, "--out", tmp_path / "o", check=False)
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpinet.train: error:")
    assert pytest.importorskip("re").search(message, lines[0])
    assert not (tmp_path / "o").exists()


def _nan_row(path, row):
    x = np.load(path)
    x[row, 2] = np.nan
    np.save(path, x)


def test_divergence_stops_with_the_epoch(small_dataset, tmp_path):
    p = run_train(
        None, *_args(small_dataset, tmp_path / "o", "--learning-rate", "1e300", "--loss", "xent"), check=False
    )
    assert p.returncode == 1
    assert "training diverged in epoch 1" in p.stderr
    assert not (tmp_path / "o").exists()


def test_help_describes_every_option_and_names_every_design():
    """Every flag the parser defines is in --help with a help text of its own; the description names
    every design of the engine (mpinet.engine.options.ALGORITHMS), not a list typed beside it."""
    from mpinet.engine.options import ALGORITHMS
    from mpinet.train import parser

    p = subprocess.run([sys.executable, "-m", "mpinet.train", "--help"], capture_output=True, text=True, env=env())
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    flags = [a for a in parser()._actions if a.option_strings and a.dest != "help"]
    assert len(flags) > 20
    for action in flags:
        assert action.option_strings[-1] in p.stdout and action.help and len(action.help) > 10, action.dest
    assert all(f" {design}" in text for design in ALGORITHMS)


@pytest.mark.mpi
@pytest.mark.each_mpi
@pytest.mark.timeout(300)
def test_sigterm_then_rerun_resumes_to_the_uninterrupted_result(tmp_path):
    data = write_dataset(tmp_path / "d", n_train=3000, n_test=100, dim=200)
    args = ["--data", data, "--algorithm", "allreduce", "--epochs", 12, *F64, "--batch-size", 2]
    run_train(2, *args, "--out", tmp_path / "ref", timeout=240)
    args += ["--checkpoint-seconds", 0]
    ck = tmp_path / "ck" / "checkpoint.npz"
    proc = subprocess.Popen(
        train_cmd(2, *args, "--out", tmp_path / "o", "--checkpoint", ck),
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    deadline = time.monotonic() + 120
    while not ck.exists() and time.monotonic() < deadline:  # an epoch saved (the file appears whole)
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert ck.exists() and not (tmp_path / "o").exists()
    with np.load(ck) as c:
        done = int(c["epoch"])
    assert 1 <= done < 12, err

    p = run_train(2, *args, "--out", tmp_path / "o", "--checkpoint", ck, timeout=240)
    assert f"resuming from checkpoint {ck} after epoch {done}" in p.stderr
    assert np.array_equal(weights(tmp_path / "o"), weights(tmp_path / "ref"))
    m, ref = pd.read_csv(tmp_path / "o" / "metrics.csv"), pd.read_csv(tmp_path / "ref" / "metrics.csv")
    cols = ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy"]
    assert m[cols].equals(ref[cols])
    assert json.loads((tmp_path / "o" / "run.json").read_text())["resumed_from_epoch"] == done
    assert not ck.parent.exists()  # a finished run removes its checkpoint, sidecar and their folder


def test_batch_shuffle_reads_rows_without_copying():
    from mpinet.engine.loop import _rows

    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    buf32, buf64 = np.empty((3, 4), np.float32), np.empty((3, 4), np.float64)
    view = _rows(x, np.arange(4, 7), buf32)
    assert np.shares_memory(view, x) and view.tolist() == x[4:7].tolist()
    converted = _rows(x, np.arange(4, 7), buf64)
    assert converted.dtype == np.float64 and np.array_equal(converted, x[4:7])


def _serial(data, epochs, ck, seconds=0.0, log=None):
    opts = Options(algorithm="serial", hidden=(8,), epochs=epochs, dtype="float64")
    return train(dataset.load(data), opts, Comm(None), Store(ck, seconds, log or (lambda m: None)) if ck else None, log)


def _stop_after(epochs: int):
    """A log function that raises once `epochs` epochs were logged: a run killed mid-training."""

    def log(msg):
        if msg.startswith(f"epoch {epochs}/"):
            raise KeyboardInterrupt

    return log


def test_a_checkpoint_of_other_data_is_not_resumed(tmp_path):
    data = write_dataset(tmp_path / "d", seed=0)
    ck = tmp_path / "ck" / "checkpoint.npz"
    with pytest.raises(KeyboardInterrupt):
        _serial(data, 6, ck, log=_stop_after(3))
    assert ck.exists()
    other = write_dataset(tmp_path / "d", seed=5)  # same shapes and classes, other values
    messages = []
    result = _serial(other, 6, ck, log=messages.append)
    assert result.resumed_from_epoch == 0
    assert any("written for other data; starting from epoch 1" in m for m in messages), messages
    assert np.array_equal(result.params, _serial(other, 6, None).params)


def test_a_resumed_run_equals_an_uninterrupted_one_and_keeps_every_epoch(tmp_path):
    data = write_dataset(tmp_path / "d")
    ck = tmp_path / "ck" / "checkpoint.npz"
    with pytest.raises(KeyboardInterrupt):
        _serial(data, 8, ck, log=_stop_after(5))
    (ck.parent / ".checkpoint.npz.tmp.npz").write_bytes(b"half-written by a killed writer")
    result = _serial(data, 8, ck)
    assert result.resumed_from_epoch == 4  # epoch 5 raised before its checkpoint
    assert [r["epoch"] for r in result.metrics] == list(range(1, 9))
    assert np.array_equal(result.params, _serial(data, 8, None).params)
    assert not (ck.parent / ".checkpoint.npz.tmp.npz").exists()


def test_each_epoch_names_the_engine_that_timed_it_across_a_resume(tmp_path):
    """A checkpoint's rows say which engine timed them; a run resumed from another engine's epochs is
    timed by both (run.json's timed_by joins them), so its speedup is never one engine's."""
    from mpinet.engine.checkpoint import timed_by
    from mpinet.fingerprints import NUMERICS

    data = write_dataset(tmp_path / "d")
    ck = tmp_path / "ck" / "checkpoint.npz"
    with pytest.raises(KeyboardInterrupt):
        _serial(data, 6, ck, log=_stop_after(3))
    sidecar = ck.with_name(ck.name + ".metrics.jsonl")
    rows = [json.loads(line) for line in sidecar.read_text().splitlines()]
    assert {r["timed_by"] for r in rows} == {NUMERICS.code_hash()}
    # the same epochs as an engine before an upgrade timed them (the same numbers: resumed)
    sidecar.write_text("".join(json.dumps({**r, "timed_by": "older"}) + "\n" for r in rows))
    result = _serial(data, 6, ck)
    assert result.resumed_from_epoch == 2
    assert timed_by(result.metrics) == f"older+{NUMERICS.code_hash()}"
    assert timed_by(_serial(data, 2, None).metrics) == NUMERICS.code_hash()


def test_checkpoints_are_spaced_by_the_interval(tmp_path):
    data = write_dataset(tmp_path / "d")
    ck = tmp_path / "ck" / "checkpoint.npz"
    with pytest.raises(KeyboardInterrupt):
        _serial(data, 50, ck, seconds=3600, log=_stop_after(40))
    assert not ck.exists()  # no epoch ended an hour after the start
    _serial(data, 3, ck, seconds=3600)
    with np.load(ck) as c:
        assert int(c["epoch"]) == 3  # the last epoch is always saved


def test_a_batch_size_beyond_the_data_is_full_batch_without_huge_buffers(small_dataset):
    a = dataset.load(small_dataset)
    huge = train(a, Options(algorithm="serial", hidden=(4,), epochs=2, batch_size=10**12), Comm(None))
    full = train(a, Options(algorithm="serial", hidden=(4,), epochs=2, batch_size=len(a.train_y)), Comm(None))
    assert np.array_equal(huge.params, full.params)


@pytest.mark.mpi
def test_the_wait_for_a_slow_rank_is_told_apart_from_moving_bytes_in_the_metrics_and_the_timeline(
    small_dataset, tmp_path
):
    """Rank 1 computes 30 ms longer every step (far above this machine's noise): rank 0 waits for it
    in every Allreduce, which the metrics split from moving bytes and the timeline draws (one run for
    both)."""
    from test_timeline import check_trace

    train_with_a_slow_rank(small_dataset, tmp_path / "o", epochs=3)
    spans = check_trace(json.loads((tmp_path / "o" / "timeline.json").read_text()))
    by = {(e["tid"], e["cat"]): [] for e in spans}
    for e in spans:
        by[(e["tid"], e["cat"])].append(e["dur"] / 1e6)
    assert min(by[(1, "compute")]) > 0.025  # the slow rank
    assert np.median(by[(0, "wait")]) > 0.025 and len(by[(0, "wait")]) == 60 // 4  # every step
    assert sum(by.get((1, "wait"), [0])) < 0.2 * sum(by[(0, "wait")])  # the slow rank hardly waits
    m = pd.read_csv(tmp_path / "o" / "metrics.csv")
    steps = 60 // 4  # 60 samples, a global batch of 2 x 2
    assert (m["wait_max_s"] > 0.8 * steps * 0.03).all(), m  # rank 0 sat out rank 1's extra compute
    assert np.allclose(m["wait_s"], m["wait_max_s"] / 2, rtol=0.25)  # the mean over both: rank 1 hardly waited
    assert (m["transfer_s"] < m["wait_s"]).all() and (m["transfer_s"] >= 0).all()
    assert np.allclose(m["wait_s"] + m["transfer_s"], m["comm_s"])
    assert (m["transfer_max_s"] <= m["comm_s"] * 2 + 1e-9).all()


# every MPI design on the fewest ranks that make it a design of its own (grid: 2 groups x 2 shards;
# paramserver: the server and 2 workers), rank 1 training in each
PACED_RANKS = {"allreduce": 2, "node": 2, "allgather": 2, "sharded": 2, "grid": 4, "paramserver": 3}


def test_the_paced_designs_are_every_mpi_design():
    assert set(PACED_RANKS) == set(EXCHANGES) - {"serial"}


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", PACED_RANKS)
def test_a_paced_rank_s_delay_lands_in_compute_and_the_others_wait_for_it(small_dataset, tmp_path, algorithm):
    """Rank 1 sleeps before every step's compute: its delay must come out as its compute, as every other
    training rank's wait (for sharded and grid inside their compute's gather, for node at its barrier,
    for the workers at the server), and as no transfer, each within 10 % of the delay it took."""
    ranks, out, delay = PACED_RANKS[algorithm], tmp_path / "o", 0.15
    patch = (
        "import atexit\n"
        "from mpinet.engine import loop\n"
        "paced = [0.0]\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "    fast = loop._Run.compute\n"
        "    def slow(*a):\n"
        "        t = time.perf_counter()\n"
        f"        time.sleep({delay})\n"
        "        paced[0] += time.perf_counter() - t  # what it slept, oversleeping on a busy machine included\n"
        "        return fast(*a)\n"
        "    loop._Run.compute = slow\n"
        f"    atexit.register(lambda: open('{tmp_path}/paced', 'w').write(str(paced[0])))\n"
    )
    train_patched(
        ranks, patch, "--data", small_dataset, "--out", out, "--algorithm", algorithm, "--epochs", 1, "--batch-size", 6
    )
    paced = float((tmp_path / "paced").read_text())
    m = pd.read_csv(out / "metrics.csv").iloc[0]
    trains = ranks - (algorithm == "paramserver")  # means over the ranks that train
    expected = {
        "wait_max_s": paced,  # the fast ranks sat it out
        "wait_s": paced * (trains - 1) / trains,
        "compute_s": paced / trains,  # and the tiny steps' own compute, far under 10 %
        "transfer_max_s": 0.0,
    }
    for column, value in expected.items():
        assert abs(m[column] - value) < 0.1 * paced, (column, m[column], value, paced, m.to_dict())


@pytest.mark.mpi
def test_node_counts_its_update_as_compute_and_its_barriers_as_communication(small_dataset, tmp_path):
    """node's first-layer update runs inside its exchange: a delay put into that update on every rank
    lands in compute_s, not in comm_s (the split rule of every other design: kernels are compute)."""
    delay, steps = 0.05, 60 // 4  # 60 samples, a global batch of 2 x 2
    patch = (
        "from mpinet.engine import nodeshared\n"
        "update = nodeshared.NodeShared._update_columns\n"
        f"nodeshared.NodeShared._update_columns = lambda *a: (time.sleep({delay}), update(*a))[1]\n"
    )
    args = ("--data", small_dataset, "--out", tmp_path / "o", "--algorithm", "node", "--epochs", 2, "--batch-size", 2)
    train_patched(2, patch, *args)
    m = pd.read_csv(tmp_path / "o" / "metrics.csv")
    assert (m["compute_s"] >= steps * delay).all(), m  # every step's delayed update, on every rank
    assert (m["comm_s"] < steps * delay / 2).all(), m  # the barriers and writes alone


@pytest.mark.mpi
def test_node_shares_its_update_by_claims_so_a_slow_rank_takes_fewer_blocks_and_moves_no_weight(tmp_path):
    """node's ranks claim the first layer's column blocks as they go (nodeshared.Claims): with rank 1
    slowed on every block it claims, rank 0 takes most of them, every block is taken once a step,
    and the weights are the same bytes as an unslowed run's (each block is one GEMM over all rows,
    whichever rank runs it)."""
    data = write_dataset(tmp_path / "wide", dim=48)

    def run(out, delay):
        patch = (
            "import atexit, json\n"
            "from mpinet.engine import nodeshared\n"
            "rank, taken, rounds = MPI.COMM_WORLD.Get_rank(), [], []\n"
            "init, take = nodeshared.NodeShared.__init__, nodeshared.Claims.take\n"
            "def small_blocks(self, *a):\n"
            "    init(self, *a)\n"
            "    self.block_bytes = 4 * 8 * 4  # 4 rows of float64, 4 columns a block: 12 blocks\n"
            "def slow(self, count):\n"
            "    rounds.append(count)\n"
            "    for item in take(self, count):\n"
            f"        time.sleep({delay} * rank)\n"
            "        taken.append(item)\n"
            "        yield item\n"
            "nodeshared.NodeShared.__init__, nodeshared.Claims.take = small_blocks, slow\n"
            f"atexit.register(lambda: open(f'{out}.{{rank}}.json', 'w').write(json.dumps([taken, rounds])))\n"
        )
        args = ("--data", data, "--out", out, "--algorithm", "node", "--epochs", 2, "--batch-size", 2)
        args += ("--dtype", "float64")
        train_patched(2, patch, *args)
        return [json.loads(Path(f"{out}.{r}.json").read_text()) for r in (0, 1)]

    even = run(tmp_path / "even", 0.0)
    slowed = run(tmp_path / "slowed", 0.03)
    (taken0, rounds), (taken1, _) = slowed
    assert set(rounds) == {12} and len(rounds) == 2 * 60 // 4  # a round of 12 blocks every step
    assert len(taken0) + len(taken1) == sum(rounds)  # every block once
    assert sorted(taken0 + taken1) == sorted(list(range(12)) * len(rounds))
    assert len(taken0) > 3 * len(taken1), (len(taken0), len(taken1))  # the fast rank took most
    assert len(even[0][0]) + len(even[1][0]) == sum(rounds)
    assert np.array_equal(weights(tmp_path / "slowed"), weights(tmp_path / "even"))


def test_a_serial_run_waits_for_nobody(small_dataset, tmp_path):
    run_train(None, *_args(small_dataset, tmp_path / "s"))
    m = pd.read_csv(tmp_path / "s" / "metrics.csv")
    assert (m[["wait_s", "wait_max_s", "transfer_s", "comm_s"]] == 0).all().all()


GRID = """
import sys
import mpinet.engine.grid as grid
import mpinet.train as cli

grid.grid_shape = lambda ranks, sizes, batch, itemsize: ({groups}, ranks // {groups})
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.mpi
@pytest.mark.parametrize(
    "ranks,groups,extra",
    [
        pytest.param(4, 2, ("--shuffle", "samples"), marks=pytest.mark.each_mpi),  # 2 groups of 2 shards
        (3, 3, ("--shuffle", "batches")),  # 3 groups of 1: data-parallel, as allreduce
        (2, 1, ("--shuffle", "samples")),  # 1 group of 2: sharded
        (4, 2, ("--shuffle", "batches", "--train-samples", 45, "--hidden", 31, 20)),  # a subset; 16 + 15 units
        (4, 2, ("--shuffle", "samples", "--faithful", "true", "--learning-rate", 0.001)),
    ],
)
def test_process_grid_matches_serial_with_p_times_the_batch(tmp_path, ranks, groups, extra):
    """G groups of S shards: each group runs sharded on its slots' rows, the groups sum their gradients of
    the shards' rows and of the small layers; serial's weights on P x the batch in every shape,
    a partial last batch included. run.json records the shape."""
    data = write_dataset(tmp_path / "d", n_train=61, n_test=10, dim=200)
    run_train(None, *_args(data, tmp_path / "s", "--batch-size", 4 * ranks, *extra))
    script = tmp_path / "grid.py"
    script.write_text(GRID.format(groups=groups))
    args = _args(data, tmp_path / "o", "--batch-size", 4, "--algorithm", "grid", *extra)
    p = subprocess.run(
        [*mpiexec_argv(ranks), sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env(),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert np.abs(weights(tmp_path / "s") - weights(tmp_path / "o")).max() < 1e-10
    ms, mo = pd.read_csv(tmp_path / "s" / "metrics.csv"), pd.read_csv(tmp_path / "o" / "metrics.csv")
    for col in ("train_loss", "train_accuracy", "test_loss", "test_accuracy"):
        assert np.allclose(ms[col], mo[col], rtol=0, atol=1e-10), col
    meta = json.loads((tmp_path / "o" / "run.json").read_text())
    assert meta["grid"] == {"groups": groups, "shards": ranks // groups}
    assert meta["fused_update"] is (groups == 1)  # one group steps in backward, as sharded


def test_the_grid_shape_moves_the_fewest_bytes():
    """The engine's grid: of every G x S = P, the shape whose rank moves the fewest bytes a step. The Intel
    net (8.1 MB first layer) on 16 ranks: small batches split the units further (fewer weights a rank),
    large ones reduce across more groups (fewer rows a rank reads)."""
    from mpinet.engine.grid import grid_shape, step_bytes

    intel = (67500, 30, 20, 6)
    for ranks, batch in [(16, 4), (16, 32), (4, 8), (2, 4), (7, 4)]:
        g, s = grid_shape(ranks, intel, batch, 4)
        assert g * s == ranks
        shapes = [d for d in range(1, ranks + 1) if ranks % d == 0]
        assert step_bytes(ranks, s, intel, batch, 4) == min(step_bytes(ranks, d, intel, batch, 4) for d in shapes)
    assert grid_shape(16, intel, 4, 4)[1] > grid_shape(16, intel, 32, 4)[1] > 1
    assert grid_shape(4, (4, 10, 3), 1000, 8) == (4, 1)  # tiny weights, many rows: data-parallel
    assert grid_shape(4, (10**6, 100, 3), 1, 4) == (1, 4)  # huge weights, one row: sharded
