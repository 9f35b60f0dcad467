"""Communication for the designs: with mpinet.engine.nodeshared, the modules that move training data between ranks.

(Beside it, mpinet.commbench is the MPI microbenchmark behind the cost model; elsewhere mpi4py is
imported for provenance only: the library version in run.json, and the launcher's probe in a
subprocess.)

`Comm` wraps MPI.COMM_WORLD (or nothing, for `serial`), uses only buffer-based
(uppercase) calls on numpy arrays, and counts the seconds and payload bytes each rank
spends in them, so the training loop reports compute and communication separately.

The exchanges (`GradientAllreduce`, `FactorAllgather`, `LocalSGD`, `ParameterServer`) are what a training step
ends with, chosen once before the loop (mpinet.engine.designs), the way Horovod hides its
communication behind `optimizer.step()`: the loop computes an lr-scaled gradient and calls
`exchange.step`, whatever the design. Where no rank needs another's gradient (serial, local
SGD's own steps) `updates_in_backward` says so and backward steps the weights itself.

Why one Allreduce of the whole flat gradient after backprop, with no bucketing and no overlap
of communication with computation (as PyTorch DDP does): 99.98 % of the Intel network's
2.7 M parameters are the first layer's weights (67,500 x 40), and backprop computes that
layer's gradient last, so there is nothing large to send early; splitting the buffer would
only add messages. Overlap would pay off for a network whose large layers are near the output,
or for many layers of similar size: then reduce each layer's slice of the flat buffer with a
nonblocking Iallreduce as soon as backprop finishes it, and wait before the update.
"""

import os
import time
from dataclasses import dataclass

import numpy as np

from mpinet.engine import blas
from mpinet.engine.model import Net

PS_GRAD_TAG = 1  # worker -> server: the lr-scaled gradient of one step
PS_WEIGHTS_TAG = 2  # server -> worker: the main weights after the update


class Comm:
    """A communicator with timing; `Comm(None)` is the one-process stand-in that never loads MPI."""

    def __init__(self, mpi_comm=None):
        self.mpi = mpi_comm
        self.rank = mpi_comm.Get_rank() if mpi_comm is not None else 0
        self.size = mpi_comm.Get_size() if mpi_comm is not None else 1
        self.seconds = 0.0  # time spent inside MPI calls
        self.bytes_sent = 0  # payload bytes this rank handed to MPI sends and reductions

    def sum_inplace(self, buf: np.ndarray) -> None:
        """Element-wise sum of buf over all ranks, in place (one MPI_Allreduce)."""
        if self.mpi is None:
            return
        from mpi4py import MPI

        t = time.perf_counter()
        self.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        self.seconds += time.perf_counter() - t
        self.bytes_sent += buf.nbytes

    def sum_untimed(self, buf: np.ndarray) -> None:
        """Like sum_inplace, for bookkeeping (metrics) that is not part of the training exchange."""
        if self.mpi is not None:
            from mpi4py import MPI

            self.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def max_untimed(self, buf: np.ndarray) -> None:
        """Element-wise maximum of buf over all ranks, in place, for bookkeeping (not timed)."""
        if self.mpi is not None:
            from mpi4py import MPI

            self.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)

    def max(self, value: float) -> float:
        if self.mpi is None:
            return value
        from mpi4py import MPI

        buf = np.array([value], dtype=np.float64)
        self.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        return float(buf[0])

    def bcast(self, buf: np.ndarray, root: int = 0, timed: bool = False) -> None:
        """buf from rank `root` on every rank, in place; `timed`: part of the training exchange, its
        seconds and bytes counted."""
        if self.mpi is None or self.size == 1:
            return
        t = time.perf_counter()
        self.mpi.Bcast(buf, root=root)
        if timed:
            self.seconds += time.perf_counter() - t
            self.bytes_sent += buf.nbytes if self.rank == root else 0

    def server_step(self, params: np.ndarray, inbox: np.ndarray, serve: list | None = None) -> None:
        """Parameter server: receive every worker's gradient, update the main weights, send them back.

        inbox: float[workers, n_params]. All receives are posted at once, so a slow worker
        never holds up the others' messages; applying them in rank order after they all arrived
        keeps the result deterministic. `serve`, when given, gets [what, worker, start, end]
        (perf_counter) for each gradient's arrival, each update applied and the weights sent.
        """
        from mpi4py import MPI

        t = time.perf_counter()
        reqs = [self.mpi.Irecv(inbox[w - 1], source=w, tag=PS_GRAD_TAG) for w in range(1, self.size)]
        if serve is None:
            MPI.Request.Waitall(reqs)
        else:  # the same messages, one at a time, to see who arrived when
            for _ in reqs:
                w = MPI.Request.Waitany(reqs) + 1
                serve.append(["receive", w, t, time.perf_counter()])
        self.seconds += time.perf_counter() - t
        for w, grad in enumerate(inbox, start=1):  # in rank order, so the result is deterministic
            a = time.perf_counter() if serve is not None else 0.0
            params -= grad
            if serve is not None:
                serve.append(["apply", w, a, time.perf_counter()])
        t = time.perf_counter()
        reqs = [self.mpi.Isend(params, dest=w, tag=PS_WEIGHTS_TAG) for w in range(1, self.size)]
        MPI.Request.Waitall(reqs)
        if serve is not None:
            serve.append(["send", 0, t, time.perf_counter()])
        self.seconds += time.perf_counter() - t
        self.bytes_sent += params.nbytes * (self.size - 1)

    def gather_rows(self, send: np.ndarray, recv: np.ndarray, counts: list[int]) -> np.ndarray:
        """Every rank's rows of `send`, stacked in rank order into the first sum(counts) rows of
        recv (one MPI_Allgatherv; counts: each rank's row count, known to every rank)."""
        total = sum(counts)
        if self.mpi is None:
            recv[:total] = send
            return recv[:total]
        width = recv.shape[1]
        sizes = [c * width for c in counts]
        offsets = [sum(sizes[:r]) for r in range(len(sizes))]
        t = time.perf_counter()
        self.mpi.Allgatherv(np.ascontiguousarray(send), [recv, sizes, offsets, _mpi_type(recv.dtype)])
        self.seconds += time.perf_counter() - t
        self.bytes_sent += send.nbytes
        return recv[:total]

    def worker_step(self, params: np.ndarray, grads: np.ndarray) -> None:
        """Parameter-server worker: send the step's gradient to rank 0, receive the new weights."""
        t = time.perf_counter()
        self.mpi.Send(grads, dest=0, tag=PS_GRAD_TAG)
        self.mpi.Recv(params, source=0, tag=PS_WEIGHTS_TAG)
        self.seconds += time.perf_counter() - t
        self.bytes_sent += grads.nbytes

    def gather_strings(self, value: str) -> list[str]:
        """Every rank's value, on every rank (small strings; pickled lowercase call is fine here)."""
        return self.gather_objects(value)

    def gather_objects(self, value) -> list:
        """Every rank's small picklable value, on every rank, in rank order (bookkeeping, not timed)."""
        return [value] if self.mpi is None else self.mpi.allgather(value)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now; used when one rank fails so that no rank waits for ever."""
        if self.mpi is not None and self.size > 1:
            self.mpi.Abort(code)


def _mpi_type(dtype):
    from mpi4py import MPI

    return MPI.FLOAT if np.dtype(dtype) == np.float32 else MPI.DOUBLE


def even_split(total: int, parts: int) -> list[int]:
    """total split into `parts` near-equal counts, the larger ones first (np.array_split's split)."""
    q, r = divmod(total, parts)
    return [q + (i < r) for i in range(parts)]


def world() -> Comm:
    """MPI.COMM_WORLD, initialising MPI on first use (mpi4py is imported only here)."""
    _drop_stale_pmi()
    from mpi4py import MPI

    return Comm(MPI.COMM_WORLD)


def mpi_library_version() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version().strip().splitlines()[0]


def _drop_stale_pmi() -> None:
    """Forget a PMI connection whose file descriptor an intermediate process closed.

    Under SLURM a 1-rank job runs inside `srun -n 1`, whose PMI socket (PMI_FD) Snakemake's
    job step does not pass on to the shell command; MPICH would fail in MPI_Init trying
    to use it. Without the PMI variables it starts as a singleton, which is what we want.
    """
    fd = os.environ.get("PMI_FD")
    if fd is None:
        return
    try:
        os.fstat(int(fd))
    except (OSError, ValueError):
        for key in [k for k in os.environ if k.startswith("PMI_")]:
            del os.environ[key]


@dataclass
class Factors:
    """What a step's first-layer update is made of (FactorAllgather, mpinet.engine.nodeshared)."""

    x: np.ndarray  # this rank's input rows, [rows, inputs]
    d: np.ndarray  # their scaled output errors of the first layer, [rows, units]
    counts: list[int]  # every training rank's row count in the global batch, in rank order
    x_all: np.ndarray  # the training file's features (a memory map's plain view)
    rows: np.ndarray  # the global batch's rows in that file, in rank order


class Exchange:
    """What the loop asks of every design's exchange; the defaults are the plain data-parallel ones."""

    trains = True  # this rank trains on data (a parameter server's rank 0 does not)
    updates_in_backward = False  # backward steps the weights itself: there is no gradient to send
    gathers_first_layer = False  # step() wants the first layer's gradient as factors (FactorAllgather)
    shards_first_layer = False  # the step's first layer is computed across the ranks (ShardedFirstLayer)
    # what a rank holds, for the memory a job asks for (mpinet.launch.slurm.mem_per_cpu_mb):
    global_batch_rows = False  # every rank's rows of a step (buffers of ranks x batch rows)
    reads_all_rows = False  # every training row, not only its shard

    @classmethod
    def create(cls, comm: Comm, sizes: tuple[int, ...], batch: int, dtype, sync_every: int) -> "Exchange":
        """This design's exchange for this rank (sizes: the net's layer sizes; batch: a rank's rows)."""
        return cls(comm)

    def hold(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The weights this rank trains (starting as `params`) and its gradient buffer: private
        arrays, or memory the design shares (mpinet.engine.nodeshared)."""
        return params, np.zeros_like(params)

    def share(self, params: np.ndarray) -> None:
        """Rank 0's weights on every rank, before the first step."""
        self.comm.bcast(params)

    def step(self, params: np.ndarray, grads: np.ndarray, k: int, steps: int, serve=None, factors=None) -> None:
        """End a training step: combine the ranks' updates and step the weights."""

    def finish(self, params: np.ndarray) -> None:
        """End an epoch: after it every rank holds all the weights (for evaluation and the outputs)."""

    def close(self) -> None:
        """Release what the exchange holds beyond Python's reach (every rank, once, after training)."""


class GradientAllreduce(Exchange):
    """Sum the ranks' lr-scaled gradients (already divided by the global batch) and step: the
    result is serial SGD on the whole global batch. With `Comm(None)` it is plain serial SGD."""

    def __init__(self, comm: Comm):
        self.comm = comm
        # serial: backward applies the update itself (mpinet.engine.blas), there is nothing to exchange
        self.updates_in_backward = comm.mpi is None

    def step(self, params: np.ndarray, grads: np.ndarray, k: int, steps: int, serve=None, factors=None) -> None:
        if not self.updates_in_backward:
            self.comm.sum_inplace(grads)
            params -= grads


class FactorAllgather(Exchange):
    """The global batch's gradient step as `GradientAllreduce` takes it, with the wide first layer's
    weight gradient sent as its factors: a rank's gradient of it is d.T @ x (d: its rows' output
    errors, [rows, units]; x: its input rows), so instead of reducing units x inputs numbers, the
    ranks gather every rank's d and x (rows x (units + inputs) each) and each rank subtracts
    D.T @ X over the whole global batch from its weights, the update folded into that GEMM as
    serial does (mpinet.engine.blas). The rest of the buffer (the first layer's bias and the small
    layers) is summed by one Allreduce. Fewer bytes whenever the global batch is smaller than about
    the first layer's width (sufficient factors: Xie et al., 2016); the result is serial SGD on the
    global batch, to rounding."""

    gathers_first_layer = True
    global_batch_rows = True

    @classmethod
    def create(cls, comm, sizes, batch, dtype, sync_every):
        return cls(comm, sizes, batch, dtype)

    def __init__(self, comm: Comm, sizes: tuple[int, ...], batch: int, dtype):
        self.comm = comm
        n_in, units = sizes[0], sizes[1]
        self.first = n_in * units  # the first layer's weights lead the flat buffer
        rows = batch * comm.size
        self.x = np.empty((rows, n_in), dtype=dtype)
        self.d = np.empty((rows, units), dtype=dtype)

    def step(self, params: np.ndarray, grads: np.ndarray, k: int, steps: int, serve=None, factors=None) -> None:
        """factors: the step's Factors."""
        x, d, counts = factors.x, factors.d, factors.counts
        xs = self.comm.gather_rows(x, self.x, counts)
        ds = self.comm.gather_rows(d, self.d, counts)
        rest = slice(self.first, None)
        self.comm.sum_inplace(grads[rest])
        w = params[: self.first].reshape(ds.shape[1], xs.shape[1])
        if not blas.subtract_product(w, ds, xs):
            w -= ds.T @ xs
        params[rest] -= grads[rest]

    def finish(self, params: np.ndarray) -> None:
        # every rank stepped the first layer itself: rank 0's weights, so that ranks whose BLAS
        # kernels round differently (mixed nodes) cannot drift apart for longer than an epoch
        self.comm.bcast(params[: self.first], timed=True)


class LocalSGD(Exchange):
    """Every rank steps on its own slice; every `every` steps (and at the epoch's end) the
    weights are averaged over the ranks."""

    updates_in_backward = True  # each rank's own step; only the averaging is an exchange

    @classmethod
    def create(cls, comm, sizes, batch, dtype, sync_every):
        return cls(comm, sync_every)

    def __init__(self, comm: Comm, every: int):
        self.comm, self.every = comm, every

    def step(self, params: np.ndarray, grads: np.ndarray, k: int, steps: int, serve=None, factors=None) -> None:
        if (k + 1) % self.every == 0 or k == steps - 1:
            self.comm.sum_inplace(params)
            params *= params.dtype.type(1.0 / self.comm.size)


class ParameterServer(Exchange):
    """Rank 0 holds the main weights and does not train: it applies every worker's update and
    sends the weights back; a worker sends its gradient and receives the new weights."""

    @classmethod
    def create(cls, comm, sizes, batch, dtype, sync_every):
        return cls(comm, Net(sizes).n_params, dtype)

    def __init__(self, comm: Comm, n_params: int, dtype):
        self.comm = comm
        self.trains = comm.rank != 0
        self.inbox = None if self.trains else np.empty((comm.size - 1, n_params), dtype=dtype)

    def step(self, params: np.ndarray, grads: np.ndarray, k: int, steps: int, serve=None, factors=None) -> None:
        """`serve`: a list the server appends what it did when (Comm.server_step), or None."""
        if self.trains:
            self.comm.worker_step(params, grads)
        else:
            self.comm.server_step(params, self.inbox, serve)


class ShardedFirstLayer(Exchange):
    """The global batch's step as serial takes it, with the wide first layer's weights split by
    units across the ranks: each rank steps only the rows of W for its units and no gradient travels.

    Every rank reads the whole global batch's rows (X) from the memory-mapped training file, which
    every rank maps anyway (on one node they are one page cache): here the ranks divide the first
    layer's weights, not the data. Each computes its units' pre-activations for all the rows
    (W_r @ X.T) and the ranks gather those (units x rows, small); every rank then runs the small
    layers forward and backward on the global batch itself, stepping them identically, and steps
    only its own rows of W (W_r -= D_r.T @ X, folded into the GEMM). Each rank passes over 1/P of W;
    at the epoch's end the ranks gather W's rows (finish), so every rank holds all the weights for
    evaluation and the outputs. The result is serial SGD on the global batch, to rounding."""

    updates_in_backward = True
    shards_first_layer = True
    global_batch_rows = True
    reads_all_rows = True

    @classmethod
    def create(cls, comm, sizes, batch, dtype, sync_every):
        return cls(comm, sizes, batch, dtype)

    def __init__(self, comm: Comm, sizes: tuple[int, ...], batch: int, dtype):
        self.comm = comm
        self.n_in, units = sizes[0], sizes[1]
        self.shares = even_split(units, comm.size)  # each rank's units
        start = sum(self.shares[: comm.rank])
        self.mine = slice(start, start + self.shares[comm.rank])
        self.zt = np.empty(units * batch * comm.size, dtype=dtype)  # the gathered [units, rows]

    def gather_first(self, mine_t: np.ndarray) -> np.ndarray:
        """The whole first layer's [units, rows] from every rank's [its units, rows]."""
        rows = mine_t.shape[1]
        out = self.zt[: sum(self.shares) * rows].reshape(-1, rows)
        return self.comm.gather_rows(mine_t.reshape(-1, rows), out, self.shares)

    def finish(self, params: np.ndarray) -> None:
        w = params[: sum(self.shares) * self.n_in].reshape(-1, self.n_in)
        self.comm.gather_rows(np.array(w[self.mine]), w, self.shares)
        # every rank stepped the rest itself: rank 0's, as in FactorAllgather.finish
        self.comm.bcast(params[w.size :], timed=True)
