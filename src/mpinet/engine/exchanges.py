"""The designs: one class each, holding a training step from the rows it reads to the weights it
leaves (mpinet.engine.designs names them; mpinet.engine.nodeshared holds `node`).

The loop hands every design the same `Step` (which rows of the file make the global batch, this rank's
slot of them, the gradient's scale) and asks two things, the way Horovod hides its communication
behind `optimizer.step()`: `compute(run, step)`, the forward and backward pass on the rows the design
reads, and `step(params, grads, step)`, the exchange that combines the ranks' work and steps the
weights. The loop never asks which design it has. `run` is the rank's model and reader
(mpinet.engine.loop._Run: net, layers, gradient views, workspace, `read(rows)`).

Why one Allreduce of the whole flat gradient after backprop, with no bucketing and no overlap
of communication with computation (as PyTorch DDP does): 99.98 % of the Intel network's
2.7 M parameters are the first layer's weights (67,500 x 40), and backprop computes that
layer's gradient last, so there is nothing large to send early; splitting the buffer would
only add messages. Overlap would pay off for a network whose large layers are near the output,
or for many layers of similar size: then reduce each layer's slice of the flat buffer with a
nonblocking Iallreduce as soon as backprop finishes it, and wait before the update.
"""

from dataclasses import dataclass

import numpy as np

from mpinet.engine import blas
from mpinet.engine.comm import Comm, even_split
from mpinet.engine.model import Net, backward, first_layer_units, forward, loss_and_correct


@dataclass
class Step:
    """One training step as the loop hands it to a design."""

    k: int  # its index in the epoch
    steps: int  # the epoch's steps
    batch: np.ndarray  # the global batch: indices of the rows trained on
    mine: np.ndarray  # this rank's slot of it (empty on a rank that does not train)
    counts: list[int]  # every training rank's rows of it, in rank order
    scale: float  # the factor on a rank's summed gradient that makes the update the right one


@dataclass
class Factors:
    """What a step's first-layer update is made of (FactorAllgather, mpinet.engine.nodeshared)."""

    x: np.ndarray  # this rank's input rows, [rows, inputs]
    d: np.ndarray  # their scaled output errors of the first layer, [rows, units]
    counts: list[int]  # every training rank's row count in the global batch, in rank order
    x_all: np.ndarray  # the training file's features (a memory map's plain view)
    rows: np.ndarray  # the global batch's rows in that file, in rank order


class Exchange:
    """A data-parallel design: each rank computes the lr-scaled gradient of its slot of the global
    batch; `step` combines them. The defaults are what most designs share."""

    trains = True  # this rank trains on data (a parameter server's rank 0 does not)
    updates_in_backward = False  # backward steps the weights itself: there is no gradient to send
    fused_update = False  # the update is folded into a GEMM (run.json's fused_update, where the BLAS allows)
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

    def workspace_rows(self, rows: int) -> int:
        """The rows a step's activations hold, for a rank's batch of `rows`."""
        return rows

    def share(self, params: np.ndarray) -> None:
        """Rank 0's weights on every rank, before the first step."""
        self.comm.bcast(params)

    def compute(self, run, step: Step) -> tuple[float, int, int]:
        """(loss, correct, rows) of this rank's slot, and its scaled gradient in run.grads (zero when the
        slot is empty) or, where no gradient is sent, the update applied to the weights."""
        x, y = run.read(step.mine)
        return self._backprop(run, x, y, step.scale)

    def _backprop(self, run, x: np.ndarray, y: np.ndarray, scale: float, first: bool = True) -> tuple[float, int, int]:
        """Forward and backward on x, y (first=False: without the first layer's weight gradient)."""
        if not len(y):
            if not self.updates_in_backward:
                run.grads.fill(0)
            return 0.0, 0, 0
        out = forward(run.net, run.layers, x, run.ws)
        loss, correct = loss_and_correct(run.net, out, y)
        backward(run, x, y, scale, update=self.updates_in_backward, first=first)
        return loss, correct, len(y)

    def step(self, params: np.ndarray, grads: np.ndarray, step: Step, serve=None) -> None:
        """End a training step: combine the ranks' updates and step the weights."""

    def finish(self, params: np.ndarray) -> None:
        """End an epoch: after it every rank holds all the weights (for evaluation and the outputs)."""

    def close(self) -> None:
        """Release what the exchange holds beyond Python's reach (every rank, once, after training)."""

    def same_as(self) -> str | None:
        """The other design whose step this one's is, on this layout (a grid of one group: sharded)."""
        return None

    def describe(self) -> dict:
        """What run.json records of how this design laid its ranks out, where it chooses (a grid's shape)."""
        return {}


class GradientAllreduce(Exchange):
    """Sum the ranks' lr-scaled gradients (already divided by the global batch) and step: the
    result is serial SGD on the whole global batch. With `Comm(None)` it is plain serial SGD."""

    def __init__(self, comm: Comm):
        self.comm = comm
        # serial: backward applies the update itself (mpinet.engine.blas), there is nothing to exchange
        self.updates_in_backward = self.fused_update = comm.mpi is None

    def step(self, params: np.ndarray, grads: np.ndarray, step: Step, serve=None) -> None:
        if not self.updates_in_backward:
            self.comm.sum_inplace(grads)
            params -= grads


class FirstLayerFactors(Exchange):
    """A design that updates the wide first layer from its gradient's factors (Dᵀ·X) instead of the
    gradient: backward leaves that layer's weight gradient out and `step` gets the factors."""

    fused_update = True

    @classmethod
    def create(cls, comm, sizes, batch, dtype, sync_every):
        return cls(comm, sizes, batch, dtype)

    def compute(self, run, step: Step) -> tuple[float, int, int]:
        x, y = run.read(step.mine)
        sums = self._backprop(run, x, y, step.scale, first=False)
        self.factors = Factors(x, run.ws.delta[0][: len(x)], step.counts, run.arrays.train_x, run.file_rows(step))
        return sums


class FactorAllgather(FirstLayerFactors):
    """The global batch's gradient step as `GradientAllreduce` takes it, with the wide first layer's
    weight gradient sent as its factors: a rank's gradient of it is d.T @ x (d: its rows' output
    errors, [rows, units]; x: its input rows), so instead of reducing units x inputs numbers, the
    ranks gather every rank's d and x (rows x (units + inputs) each) and each rank subtracts
    D.T @ X over the whole global batch from its weights, the update folded into that GEMM as
    serial does (mpinet.engine.blas). The rest of the buffer (the first layer's bias and the small
    layers) is summed by one Allreduce. Fewer bytes whenever the global batch is smaller than about
    the first layer's width (sufficient factors: Xie et al., 2016); the result is serial SGD on the
    global batch, to rounding."""

    global_batch_rows = True

    def __init__(self, comm: Comm, sizes: tuple[int, ...], batch: int, dtype):
        self.comm = comm
        n_in, units = sizes[0], sizes[1]
        self.first = n_in * units  # the first layer's weights lead the flat buffer
        rows = batch * comm.size
        self.x = np.empty((rows, n_in), dtype=dtype)
        self.d = np.empty((rows, units), dtype=dtype)

    def step(self, params: np.ndarray, grads: np.ndarray, step: Step, serve=None) -> None:
        f = self.factors
        xs = self.comm.gather_rows(f.x, self.x, f.counts)
        ds = self.comm.gather_rows(f.d, self.d, f.counts)
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

    updates_in_backward = fused_update = True  # each rank's own step; only the averaging is an exchange

    @classmethod
    def create(cls, comm, sizes, batch, dtype, sync_every):
        return cls(comm, sync_every)

    def __init__(self, comm: Comm, every: int):
        self.comm, self.every = comm, every

    def step(self, params: np.ndarray, grads: np.ndarray, step: Step, serve=None) -> None:
        if (step.k + 1) % self.every == 0 or step.k == step.steps - 1:
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

    def compute(self, run, step: Step) -> tuple[float, int, int]:
        return super().compute(run, step) if self.trains else (0.0, 0, 0)

    def step(self, params: np.ndarray, grads: np.ndarray, step: Step, serve=None) -> None:
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

    updates_in_backward = fused_update = True
    global_batch_rows = True
    reads_all_rows = True

    @classmethod
    def create(cls, comm, sizes, batch, dtype, sync_every):
        return cls(comm, sizes, batch, dtype)

    def __init__(self, comm: Comm, sizes: tuple[int, ...], batch: int, dtype, group: Comm | None = None):
        """`group`: the consecutive ranks that split the units and read their slots' rows (all of them
        here; one group of mpinet.engine.grid.ProcessGrid)."""
        self.comm = comm
        self.group = group or comm
        self.n_in, units = sizes[0], sizes[1]
        self.shares = even_split(units, self.group.size)  # each rank's units
        start = sum(self.shares[: self.group.rank])
        self.mine = slice(start, start + self.shares[self.group.rank])
        self.zt = np.empty(units * batch * self.group.size, dtype=dtype)  # the gathered [units, rows]

    def workspace_rows(self, rows: int) -> int:
        return rows * self.group.size  # the rest of the net runs on the group's whole batch

    def compute(self, run, step: Step) -> tuple[float, int, int]:
        """This rank's units of the first layer computed for the group's rows of the global batch and
        gathered, the rest of the net forward and backward on them (stepping the small layers and this
        rank's rows of the first layer, or with a gradient to send, writing it); the loss and hits of
        this rank's slot of the rows."""
        first = run.my_slot - self.group.rank  # the group's first slot
        ends = np.cumsum([0, *step.counts]).tolist()
        x, y = run.read(step.batch[ends[first] : ends[first + self.group.size]])
        if not len(y):  # a grid's group whose slots of a partial last batch are empty: nothing to add
            run.grads.fill(0)
            return 0.0, 0, 0
        zt = self.gather_first(first_layer_units(run.layers[0][0][self.mine], x, run.ws))
        out = forward(run.net, run.layers, x, run.ws, first_t=zt)
        mine = slice(ends[run.my_slot] - ends[first], ends[run.my_slot + 1] - ends[first])
        loss, correct = loss_and_correct(run.net, out[mine], y[mine])
        update = self.updates_in_backward
        backward(run, x, y, step.scale, update=update, first=self.mine)
        return loss, correct, mine.stop - mine.start

    def gather_first(self, mine_t: np.ndarray) -> np.ndarray:
        """The whole first layer's [units, rows] from every rank's [its units, rows]."""
        rows = mine_t.shape[1]
        out = self.zt[: sum(self.shares) * rows].reshape(-1, rows)
        return self.group.gather_rows(mine_t.reshape(-1, rows), out, self.shares)

    def finish(self, params: np.ndarray) -> None:
        w = params[: sum(self.shares) * self.n_in].reshape(-1, self.n_in)
        self.group.gather_rows(np.array(w[self.mine]), w, self.shares)
        # every rank stepped the rest itself: rank 0's, as in FactorAllgather.finish
        self.comm.bcast(params[w.size :], timed=True)
