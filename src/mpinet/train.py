"""Training: the epoch loop shared by the serial, Allreduce and parameter-server designs, and its CLI.

Sample order: in epoch e every rank draws the same random order from the seed pair
(seed, e). Step k takes the next global batch of b * D rows (D = ranks that train) and
rank i trains on the i-th of D equal slices of it, read from the memory-mapped array. The
averaged update of a step is therefore exactly the gradient of the whole global batch, so
`allreduce` on P ranks with batch b equals `serial` with batch b * P, and the parameter
server with P workers equals `allreduce` on P ranks.

`shuffle` picks what the random order permutes: `samples` (every epoch a fresh permutation
of the rows; each rank copies its rows into a contiguous buffer) or `batches` (the rows stay
in the order preprocessing stored them, which is already a seeded random order, and the
order of the contiguous global batches is shuffled; a rank's slice is then a view into the
memory map, with no copy at all).
"""

import argparse
import csv
import hashlib
import json
import math
import os
import platform
import resource
import signal
import socket
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from mpinet import MpinetError, __version__, dataset
from mpinet.comm import Comm, exchange_for, mpi_library_version, world
from mpinet.model import LOSSES, Net, Workspace, backward, forward, init_params, layer_views, loss_and_correct

ALGORITHMS = ("serial", "allreduce", "paramserver")
SHUFFLES = ("samples", "batches")
DTYPES = ("float32", "float64")
METRIC_COLUMNS = (
    "epoch",
    "train_loss",
    "train_accuracy",
    "test_loss",
    "test_accuracy",
    "time_s",
    "compute_s",
    "comm_s",
    "eval_s",
    "bytes_sent",
)
EVAL_BATCH = 1024
# one-at-a-time: the workflow ran no other training job beside this one (local runs);
# exclusive-node: SLURM gave the job whole nodes; shared: neither; unknown: started by hand
ISOLATION = ("one-at-a-time", "exclusive-node", "shared", "unknown")
# Settings that change timings without changing a number: BLAS kernels, and MPICH's network module
# and transport (a run across nodes over TCP and one over InfiniBand are different measurements)
RECORDED_ENVIRONMENT = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "MPIR_CVAR_CH4_NETMOD",
    "FI_PROVIDER",
    "FI_TCP_IFACE",
    "UCX_TLS",
    "UCX_NET_DEVICES",
)
SLURM_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NODELIST",
    "SLURM_MPI_TYPE",
    "SLURM_CLUSTER_NAME",
)


def _option(default, help: str, choices: tuple[str, ...] | None = None):
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class Options:
    """Everything that decides a run's result (and so its checkpoint's validity).

    The one definition of the training options: the CLI (parse_args), the experiment grid's
    columns and defaults and the workflow's command lines (mpinet.experiments) are derived from
    these fields. Their order is the run path's order (the grid puts `ranks` after algorithm).
    """

    algorithm: str = _option("serial", "training design", ALGORITHMS)
    blas_threads: int = _option(1, "BLAS threads per rank (ranks x threads is the cores a run uses)")
    batch_size: int = _option(4, "samples per step per training rank")
    learning_rate: float = _option(0.3, "SGD step size, for gradients averaged over the global batch")
    epochs: int = _option(100, "passes over the training set")
    hidden: tuple[int, ...] = _option((30, 20), "hidden layer sizes")
    loss: str = _option("l2", "l2 on one-hot labels or softmax cross-entropy", LOSSES)
    standardize: bool = _option(True, "standardize each sample's hidden pre-activations (true/false)")
    dtype: str = _option("float32", "floating-point type of the computation", DTYPES)
    sync_every: int = _option(
        1, "allreduce only: 1 averages gradients every step; k > 1 averages weights every k steps (local SGD)"
    )
    shuffle: str = _option(
        "samples",
        "per epoch, permute single samples (copies each batch) or whole contiguous batches (zero-copy)",
        SHUFFLES,
    )
    faithful: bool = _option(
        False, "reproduce the original Go project's numerics and summed updates, bugs included (true/false)"
    )
    seed: int = _option(1, "seeds the initial weights and the sample order")


@dataclass
class Result:
    params: np.ndarray  # float[n_params], the final weights (identical on every rank)
    net: Net
    metrics: list[dict] = field(default_factory=list)  # one row per epoch, METRIC_COLUMNS
    confusion: np.ndarray | None = None  # int64[classes, classes]: rows true, columns predicted
    resumed_from_epoch: int = 0


class Impossible(MpinetError):
    """Options that are each valid but cannot go together (serial on 2 ranks, ...): a sweep drops them."""


def check_options(opts: Options, ranks: int, n_train: int) -> None:
    """Raise MpinetError naming the option if a run with these options cannot work."""
    if opts.algorithm not in ALGORITHMS:
        raise MpinetError(f"algorithm: unknown '{opts.algorithm}'; expected one of {', '.join(ALGORITHMS)}")
    if opts.algorithm == "serial" and ranks != 1:
        raise Impossible(f"algorithm serial runs on 1 rank, not {ranks}; use allreduce or paramserver")
    if opts.algorithm == "paramserver" and ranks < 2:
        raise Impossible("algorithm paramserver needs at least 2 ranks (rank 0 is the server), got 1")
    if opts.batch_size < 1:
        raise MpinetError(f"batch_size must be a positive integer, got {opts.batch_size}")
    if opts.blas_threads < 1:
        raise MpinetError(f"blas_threads must be at least 1, got {opts.blas_threads}")
    if not (opts.learning_rate > 0 and math.isfinite(opts.learning_rate)):
        raise MpinetError(f"learning_rate must be positive, got {opts.learning_rate}")
    if opts.epochs < 1:
        raise MpinetError(f"epochs must be at least 1, got {opts.epochs}")
    if not opts.hidden or min(opts.hidden) < 1:
        raise MpinetError(f"hidden must list positive layer sizes, got {list(opts.hidden)}")
    if opts.loss not in LOSSES:
        raise MpinetError(f"loss: unknown '{opts.loss}'; expected one of {', '.join(LOSSES)}")
    if opts.dtype not in DTYPES:
        raise MpinetError(f"dtype: unknown '{opts.dtype}'; expected one of {', '.join(DTYPES)}")
    if opts.shuffle not in SHUFFLES:
        raise MpinetError(f"shuffle: unknown '{opts.shuffle}'; expected one of {', '.join(SHUFFLES)}")
    if opts.sync_every < 1:
        raise MpinetError(f"sync_every must be at least 1, got {opts.sync_every}")
    if opts.sync_every > 1 and opts.algorithm != "allreduce":
        raise Impossible(f"sync_every > 1 (local SGD) applies to allreduce only, not {opts.algorithm}")
    if opts.faithful and (opts.loss != "l2" or opts.sync_every != 1):
        raise Impossible("faithful reproduces the original: it needs loss l2 and sync_every 1")
    workers = data_ranks(opts.algorithm, ranks)
    if workers > n_train:
        raise MpinetError(f"{workers} training ranks but only {n_train} training samples; use fewer ranks")


def data_ranks(algorithm: str, ranks: int) -> int:
    """How many ranks train on data: all of them, except the parameter server's rank 0."""
    return ranks - 1 if algorithm == "paramserver" else ranks


def train(
    arrays: dataset.Arrays,
    opts: Options,
    comm: Comm,
    checkpoint: Path | None = None,
    log=None,
    checkpoint_seconds: float = 0.0,
) -> Result:
    """Train on `arrays` with the design in opts.algorithm over `comm`; every rank calls this.

    A checkpoint is written after an epoch once checkpoint_seconds have passed since the last
    one (0: after every epoch), so very short epochs do not spend their time writing files.
    """
    log = log or (lambda msg: None)
    check_options(opts, comm.size, len(arrays.train_y))
    dt = np.dtype(opts.dtype)
    sizes = (arrays.train_x.shape[1], *opts.hidden, len(arrays.classes))
    net = Net(sizes, opts.loss, opts.standardize, dt, opts.faithful)
    params = init_params(net, opts.seed)
    grads = np.zeros_like(params)
    layers, grad_layers = layer_views(net, params), layer_views(net, grads)

    exchange = exchange_for(opts.algorithm, opts.sync_every, comm, net.n_params, dt)
    n_data = data_ranks(opts.algorithm, comm.size)
    my_slot = comm.rank - 1 if opts.algorithm == "paramserver" else comm.rank
    # buffers for the rows a rank can hold in one step: a batch_size beyond the data allocates no more
    ws = Workspace(net, min(opts.batch_size, math.ceil(len(arrays.train_y) / n_data)))
    xbuf = np.empty((ws.batch, net.sizes[0]), dtype=dt)

    result = Result(params, net)
    signature = _signature(opts, arrays, comm.size)
    start_epoch = 0
    if checkpoint is not None and comm.rank == 0:
        start_epoch = _load_checkpoint(checkpoint, signature, params, result, log)
    start_epoch = int(comm.max(float(start_epoch)))  # rank 0 alone reads the file
    last_save, saved_rows = time.monotonic(), len(result.metrics)
    comm.bcast(params)  # identical weights everywhere, whatever a rank's RNG or file did

    n = len(arrays.train_y)
    global_batch = opts.batch_size * n_data
    steps = math.ceil(n / global_batch)
    for epoch in range(start_epoch + 1, opts.epochs + 1):
        # this epoch's order: a permutation of rows or of whole batches, the same on every rank
        rng = np.random.default_rng([opts.seed, epoch])
        order = rng.permutation(n) if opts.shuffle == "samples" else rng.permutation(steps) * global_batch
        sums = np.zeros(3)  # training loss, correct predictions, samples: this rank's share
        comm_before, bytes_before = comm.seconds, comm.bytes_sent
        t0 = time.perf_counter()
        for k in range(steps):
            if exchange.trains:
                # the rows of step k: this rank's slot of the k-th global batch
                batch = _global_batch(order, k, global_batch, n, opts.shuffle)
                mine = _slot(batch, my_slot, n_data)
                x, y = _rows_of(arrays, mine, xbuf, opts.shuffle)
                # forward and backward: the loss on those rows and the lr-scaled gradient, in grads
                scale = _step_scale(opts, len(batch), len(mine))
                sums += _gradient(net, layers, grad_layers, grads, x, y, ws, scale)
            # exchange: combine the ranks' updates and step (Allreduce, local SGD or the server)
            exchange.step(params, grads, k, steps)
        t_train = time.perf_counter() - t0

        # evaluation on the whole test set, and the epoch's metrics reduced over the ranks
        t0 = time.perf_counter()
        test_sums, confusion = _evaluate(net, layers, arrays.test_x, arrays.test_y, comm, ws.batch)
        t_eval = time.perf_counter() - t0
        comm.sum_untimed(sums)
        row = _epoch_row(epoch, sums, test_sums, t_train, t_eval, comm, comm_before, bytes_before, exchange.trains)
        if not all(math.isfinite(row[c]) for c in ("train_loss", "test_loss")):
            if checkpoint is not None and comm.rank == 0:
                remove_checkpoint(checkpoint)
            raise MpinetError(
                f"training diverged in epoch {epoch}: loss is {row['train_loss']}; "
                f"lower learning_rate (now {opts.learning_rate}) or use loss xent"
            )
        result.metrics.append(row)
        result.confusion = confusion
        log(
            f"epoch {epoch}/{opts.epochs} train_loss={row['train_loss']:.4f} "
            f"train_acc={row['train_accuracy']:.3f} test_acc={row['test_accuracy']:.3f} "
            f"time={row['time_s']:.3f}s comm={row['comm_s']:.3f}s"
        )
        # checkpoint, at most every checkpoint_seconds (and after the last epoch)
        due = time.monotonic() - last_save >= checkpoint_seconds or epoch == opts.epochs
        if checkpoint is not None and comm.rank == 0 and due:
            _save_checkpoint(checkpoint, signature, params, epoch, result.metrics[saved_rows:])
            last_save, saved_rows = time.monotonic(), len(result.metrics)
    if result.confusion is None:  # resumed after the last epoch: evaluate once for the matrix
        _, result.confusion = _evaluate(net, layers, arrays.test_x, arrays.test_y, comm, ws.batch)
    return result


def _step_scale(opts: Options, global_rows: int, my_rows: int) -> float:
    """The factor on a rank's summed gradient that makes the exchange's update the right one."""
    if opts.faithful:
        return opts.learning_rate  # the original summed its updates over the batch and the ranks
    if opts.sync_every == 1:
        return opts.learning_rate / global_rows  # an average over the whole global batch once summed
    return opts.learning_rate / max(my_rows, 1)  # local SGD: every rank steps on its own slice


def _rows_of(arrays: dataset.Arrays, rows: np.ndarray, xbuf: np.ndarray, shuffle: str):
    """Features and labels of the given training rows: copied in file order, or a zero-copy view."""
    if shuffle == "samples":
        rows = np.sort(rows)  # sequential reads of the memory map
        return _gather(arrays.train_x, rows, xbuf), np.asarray(arrays.train_y[rows])
    return _rows(arrays.train_x, rows, xbuf), np.asarray(arrays.train_y[rows])


def _gradient(net, layers, grad_layers, grads, x, y, ws, scale) -> tuple[float, int, int]:
    """(loss, correct, rows) of x and the scaled gradient in grads (zero when the slot is empty)."""
    if not len(y):
        grads.fill(0)
        return 0.0, 0, 0
    out = forward(net, layers, x, ws)
    loss, correct = loss_and_correct(net, out, y)
    backward(net, layers, grad_layers, x, y, ws, scale)
    return loss, correct, len(y)


def _global_batch(order: np.ndarray, k: int, size: int, n: int, shuffle: str) -> np.ndarray:
    """Row indices of step k's global batch; `order` is this epoch's permutation of rows or of batch starts."""
    if shuffle == "samples":
        return order[k * size : (k + 1) * size]
    return np.arange(order[k], min(order[k] + size, n))


def _slot(batch: np.ndarray, slot: int, slots: int) -> np.ndarray:
    """The slot-th of `slots` near-equal consecutive slices of batch (np.array_split's split)."""
    q, r = divmod(len(batch), slots)
    start = slot * q + min(slot, r)
    return batch[start : start + q + (slot < r)]


def _gather(x_all: np.ndarray, rows: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """Copy the given rows of a (memory-mapped) array into a contiguous buffer of the training dtype."""
    out = buf[: len(rows)]
    for i, r in enumerate(rows):  # row by row: 3x faster than np.take for long rows, and casts on the fly
        out[i] = x_all[r]
    return out


def _rows(x_all: np.ndarray, rows: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """Consecutive rows of x_all: a view when the dtype matches (no copy), else converted into buf."""
    view = x_all[rows[0] : rows[-1] + 1] if len(rows) else x_all[:0]
    if view.dtype == buf.dtype:
        return view
    out = buf[: len(rows)]
    out[...] = view
    return out


def _evaluate(net, layers, x_all, y_all, comm: Comm, batch: int):
    """Loss sum, correct count and count over the full test set, split across all ranks; and the confusion matrix."""
    rows = _slot(np.arange(len(y_all)), comm.rank, comm.size)
    k = net.sizes[-1]
    ws = Workspace(net, max(batch, min(EVAL_BATCH, len(rows))))
    buf = np.empty((ws.batch, net.sizes[0]), dtype=net.dtype)
    sums = np.zeros(3 + k * k)  # loss, correct, count, then the flattened confusion matrix
    confusion = sums[3:].reshape(k, k)
    for start in range(0, len(rows), ws.batch):
        idx = rows[start : start + ws.batch]
        y = np.asarray(y_all[idx])
        out = forward(net, layers, _gather(x_all, idx, buf), ws)
        loss, correct = loss_and_correct(net, out, y)
        sums[:3] += (loss, correct, len(idx))
        np.add.at(confusion, (y, np.argmax(out, axis=1)), 1)
    comm.sum_untimed(sums)
    return sums[:3], sums[3:].reshape(k, k).astype(np.int64)


def _epoch_row(epoch, sums, test_sums, t_train, t_eval, comm: Comm, comm_before, bytes_before, trains: bool):
    comm_s = comm.seconds - comm_before
    per_rank = np.array([(t_train - comm_s) * trains, comm_s * trains, trains], dtype=np.float64)
    comm.sum_untimed(per_rank)  # means over the ranks that train
    return {
        "epoch": epoch,
        "train_loss": sums[0] / sums[2],
        "train_accuracy": sums[1] / sums[2],
        "test_loss": test_sums[0] / test_sums[2],
        "test_accuracy": test_sums[1] / test_sums[2],
        "time_s": comm.max(t_train),
        "compute_s": per_rank[0] / per_rank[2],
        "comm_s": per_rank[1] / per_rank[2],
        "eval_s": comm.max(t_eval),
        "bytes_sent": int(comm.max(float(comm.bytes_sent - bytes_before))),
    }


# --- checkpoints ------------------------------------------------------------------------


def _signature(opts: Options, arrays: dataset.Arrays, ranks: int) -> str:
    """What a checkpoint must match to be resumed: options, rank count, the data's content
    fingerprint and the code that computes the numbers."""
    return json.dumps(
        {
            "options": asdict(opts),
            "ranks": ranks,
            "data": arrays.fingerprint,
            "code": code_fingerprint(),
        },
        sort_keys=True,
    )


# The modules whose code decides a run's numbers (the training rules declare the same ones as inputs).
TRAINING_MODULES = ("__init__.py", "comm.py", "dataset.py", "model.py", "train.py")


def code_fingerprint() -> str:
    """sha256 over the training modules: a checkpoint written by other code is never resumed."""
    h = hashlib.sha256()
    for name in TRAINING_MODULES:
        h.update(name.encode() + b"\0" + (Path(__file__).parent / name).read_bytes())
    return h.hexdigest()


# The checkpoint is weights + epoch + signature (rewritten whole, a constant cost per save) and a
# sidecar of metric rows that only grows by appending, so saving costs the same in every epoch.


def _metrics_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.metrics.jsonl")


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp.npz")  # one fixed name: a killed writer leaves at most one


def _save_checkpoint(path: Path, signature: str, params: np.ndarray, epoch: int, new_rows: list[dict]) -> None:
    """Append the metric rows since the last save, then replace the weights atomically. The sample
    order needs no saved RNG state: it is drawn afresh from (seed, epoch) in every epoch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(_metrics_path(path), "a") as f:
        f.writelines(json.dumps(row) + "\n" for row in new_rows)
    tmp = _tmp_path(path)
    np.savez(tmp, params=params, epoch=epoch, signature=signature)
    os.replace(tmp, path)


def _load_checkpoint(path: Path, signature: str, params: np.ndarray, result: Result, log) -> int:
    """Resume from path if it belongs to this very run; otherwise clear it and start at epoch 1."""
    _tmp_path(path).unlink(missing_ok=True)  # left by a writer killed mid-save
    if not path.exists():
        _metrics_path(path).unlink(missing_ok=True)
        return 0
    try:
        with np.load(path) as ck:
            theirs, saved, epoch = str(ck["signature"]), ck["params"], int(ck["epoch"])
        rows = [json.loads(line) for line in _metrics_path(path).read_text().splitlines()[:epoch]]
    except (OSError, ValueError, KeyError) as e:
        log(f"checkpoint {path} is unreadable ({e}); starting from epoch 1")
        theirs, rows = None, []
    if theirs != signature or len(rows) != epoch or saved.shape != params.shape:
        if theirs is not None and theirs != signature:
            log(f"checkpoint {path} was written {_difference(theirs, signature)}; starting from epoch 1")
        path.unlink(missing_ok=True)
        _metrics_path(path).unlink(missing_ok=True)
        return 0
    params[...] = saved
    result.metrics = rows
    _metrics_path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))  # drop rows past the epoch
    result.resumed_from_epoch = epoch
    log(f"resuming from checkpoint {path} after epoch {epoch}")
    return epoch


def _difference(theirs: str, ours: str) -> str:
    """Which part of the signature changed, in words."""
    try:
        a, b = json.loads(theirs), json.loads(ours)
    except ValueError:
        return "by another version"
    changed = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    words = {"data": "for other data", "code": "by other code", "options": "with other options"}
    words["ranks"] = "on other ranks"
    return " and ".join(words.get(k, k) for k in changed) or "by another run"


def remove_checkpoint(path: Path) -> None:
    """Delete the checkpoint's files and the folders that held only them, up to a `checkpoints` folder."""
    for p in (path, _metrics_path(path), _tmp_path(path)):
        p.unlink(missing_ok=True)
    folder = path.parent.absolute()
    while folder != folder.parent:
        try:
            folder.rmdir()  # only succeeds while empty
        except OSError:
            break
        if folder.name == "checkpoints":
            break
        folder = folder.parent


# --- outputs ----------------------------------------------------------------------------


def write_outputs(out: Path, result: Result, opts: Options, arrays: dataset.Arrays, meta: dict) -> None:
    """metrics.csv, confusion.csv, weights.npz and run.json (last), each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    tag = f".tmp{os.getpid()}"
    tmp = out / f"metrics.csv{tag}"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        w.writeheader()
        w.writerows(result.metrics)
    os.replace(tmp, out / "metrics.csv")
    tmp = out / f"confusion.csv{tag}"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["true\\predicted", *arrays.classes])
        for name, row in zip(arrays.classes, result.confusion):
            w.writerow([name, *row.tolist()])
    os.replace(tmp, out / "confusion.csv")
    tmp = out / f"weights{tag}.npz"
    np.savez(tmp, params=result.params, sizes=np.array(result.net.sizes))
    os.replace(tmp, out / "weights.npz")
    dataset.write_json(out / "run.json", {"options": asdict(opts), **meta})


def run_metadata(comm: Comm, opts: Options, data_dir: str, arrays: dataset.Arrays) -> dict:
    """Provenance for run.json; called on every rank (host names are gathered)."""
    from threadpoolctl import threadpool_info

    hosts = comm.gather_strings(f"{socket.gethostname()} {os.cpu_count() or 1}")
    cores = dict(h.rsplit(" ", 1) for h in hosts)  # host -> its CPUs
    meta = {
        "ranks": comm.size,
        "data_ranks": data_ranks(opts.algorithm, comm.size),
        "hosts": sorted(cores),  # each rank's own host name: where the ranks really ran
        "nodes": len(cores),
        "cores": sum(int(n) for n in cores.values()),  # on all the hosts the ranks ran on
        "data": {
            "path": str(data_dir),
            "train_samples": len(arrays.train_y),
            "test_samples": len(arrays.test_y),
            "features": int(arrays.train_x.shape[1]),
            "classes": arrays.classes,
        },
        "mpinet": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": [
            {k: i.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            for i in threadpool_info()
            if i.get("user_api") == "blas"
        ],
        "blas_threads": opts.blas_threads,
        "environment": {k: os.environ[k] for k in RECORDED_ENVIRONMENT if k in os.environ},
        # set by srun in every task it starts: shows the ranks came from SLURM, and how many
        "slurm": {k: os.environ[k] for k in SLURM_VARIABLES if k in os.environ},
    }
    if comm.mpi is not None:
        import mpi4py

        meta["mpi"] = {"library": mpi_library_version(), "mpi4py": mpi4py.__version__}
    return meta


# --- command line -----------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m mpinet.train",
        description=(
            "Train the fully connected sigmoid network on a preprocessed dataset. "
            "serial runs as one plain process; allreduce and paramserver run under an MPI "
            "launcher, e.g. `mpiexec -n 3 python -m mpi4py -m mpinet.train --algorithm "
            "paramserver --expect-ranks 3 ...` or `srun --mpi=pmi2 -n 3 ...`."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--data", required=True, help="dataset directory written by the preprocessing step")
    p.add_argument("--out", required=True, help="directory for metrics.csv, confusion.csv, weights.npz, run.json")
    for f in fields(Options):
        kw = {"default": f.default, "help": f.metadata["help"], "type": f.type, "choices": f.metadata["choices"]}
        if f.type is bool:
            kw["type"] = _boolean
        elif f.name == "hidden":
            kw.update(type=int, nargs="+", default=list(f.default))
        p.add_argument(option_flag(f.name), **kw)
    p.add_argument(
        "--isolation",
        choices=ISOLATION,
        default="unknown",
        help="recorded in run.json: how the launcher kept other training jobs off this job's cores",
    )
    p.add_argument(
        "--expect-ranks",
        type=int,
        default=None,
        help="fail at once unless the MPI communicator has exactly this many ranks",
    )
    p.add_argument("--checkpoint", default=None, help="checkpoint file, written after epochs and resumed from")
    p.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=10.0,
        help="write the checkpoint after the first epoch that ends this long after the last one (0: every epoch)",
    )
    return p.parse_args(argv)


def options_from_args(a: argparse.Namespace) -> Options:
    return Options(**{f.name: tuple(a.hidden) if f.name == "hidden" else getattr(a, f.name) for f in fields(Options)})


def option_flag(name: str) -> str:
    """An option's command-line flag: batch_size -> --batch-size."""
    return "--" + name.replace("_", "-")


def main(argv=None) -> int:
    args = parse_args(argv)
    opts = options_from_args(args)
    comm = Comm(None) if opts.algorithm == "serial" else world()
    log = _logger(comm)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupted(comm, args.checkpoint))
    try:
        expected = args.expect_ranks if args.expect_ranks is not None else comm.size
        if comm.size != expected:
            raise MpinetError(
                f"the MPI communicator has {comm.size} rank(s) but --expect-ranks is {expected}; start "
                f"the job with `mpiexec -n {expected}` or `srun --mpi=pmi2 -n {expected}` (a launcher "
                "without MPI support starts independent 1-rank copies)"
            )
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=max(1, opts.blas_threads), user_api="blas"):
            arrays = dataset.load(args.data, check_values=comm.rank == 0)
            log(
                f"{opts.algorithm} on {comm.size} rank(s): {len(arrays.train_y)} training samples, "
                f"{len(arrays.test_y)} test samples, {arrays.train_x.shape[1]} features"
            )
            t0 = time.perf_counter()
            started, load_start = _now(), os.getloadavg()[0]
            ck = Path(args.checkpoint) if args.checkpoint else None
            result = train(arrays, opts, comm, ck, log, args.checkpoint_seconds)
            meta = run_metadata(comm, opts, args.data, arrays)
            meta["train_seconds"] = time.perf_counter() - t0
            # whether anything else could have run beside this job, and how busy the machine was
            meta["timing"] = {
                "isolation": args.isolation,
                "start": started,
                "end": _now(),
                "load1_start": load_start,
                "load1_end": os.getloadavg()[0],
            }
            meta["resumed_from_epoch"] = result.resumed_from_epoch
            meta["peak_rss_mb"] = comm.max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # max over ranks
            if comm.rank == 0:
                write_outputs(Path(args.out), result, opts, arrays, meta)
                if ck is not None:
                    remove_checkpoint(ck)
                log(f"wrote {args.out}")
        return 0
    except MpinetError as e:
        print(f"mpinet.train: error: {e}", file=sys.stderr, flush=True)
        comm.abort(1)
        return 1
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        comm.abort(1)
        return 1


def _now() -> str:
    from datetime import datetime

    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def _boolean(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "yes", "1", "on"):
        return True
    if t in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _logger(comm: Comm):
    def log(msg: str) -> None:
        if comm.rank == 0:
            print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    return log


def _interrupted(comm: Comm, checkpoint):
    """SLURM's time limit, scancel and preemption send SIGTERM: leave at once, keeping the
    last complete checkpoint (it is only ever replaced atomically)."""

    def handler(signum, frame):
        if comm.rank == 0:
            kept = f"; checkpoint {checkpoint} is kept for the rerun" if checkpoint else ""
            print(f"mpinet.train: stopped by {signal.Signals(signum).name}{kept}", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    return handler


if __name__ == "__main__":
    sys.exit(main())
