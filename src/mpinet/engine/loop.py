"""The epoch loop shared by every design (mpinet.engine.designs).

A step reads as nanoGPT's does: the loop picks the step's rows (`Step`), the design computes on the
rows it reads (`exchange.compute`) and ends the step with its exchange (`exchange.step`); the loop
never asks which design it has. `auto` is resolved first (mpinet.engine.planner).

It writes no file: the command line (mpinet.train) hands it a checkpoint store and writes the
run's outputs, so this module and what it imports are exactly what decides a run's numbers (the
numerics fingerprint, mpinet.fingerprints).

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

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from mpinet import MpinetError
from mpinet.datasets import dataset, pixels
from mpinet.engine import planner
from mpinet.engine.comm import Comm, even_split
from mpinet.engine.designs import AUTO, exchange_for
from mpinet.engine.exchanges import Step
from mpinet.engine.model import (
    Net,
    Workspace,
    forward,
    init_params,
    layer_views,
    loss_and_correct,
)
from mpinet.engine.options import Options, check_options, data_ranks, train_size

METRIC_COLUMNS = (
    "epoch",
    "train_loss",
    "train_accuracy",
    "test_loss",
    "test_accuracy",
    "time_s",
    "compute_s",
    "comm_s",
    "wait_s",
    "wait_max_s",
    "transfer_s",
    "transfer_max_s",
    "eval_s",
    "bytes_sent",
    "step_p50_s",
    "step_p95_s",
    "cpu_share",
)
EVAL_BATCH = 1024
# the steps of the last epoch a run's timeline records (a bounded sample: the file stays small
# whatever the run's length)
TIMELINE_STEPS = 40


@dataclass
class Result:
    params: np.ndarray  # float[n_params], the final weights (identical on every rank)
    net: Net
    metrics: list[dict] = field(default_factory=list)  # one row per epoch, METRIC_COLUMNS
    confusion: np.ndarray | None = None  # int64[classes, classes]: rows true, columns predicted
    resumed_from_epoch: int = 0
    # every rank's record of the last epoch's first TIMELINE_STEPS steps (rank 0; None when the
    # last epoch was not trained in this launch): a list of StepTrace.as_dict()
    timeline: list[dict] | None = None
    first_layer: str = ""  # this rank's plan of the first layer's GEMM (mpinet.engine.model.first_layer_plan)
    design: str = ""  # the design trained with: opts.algorithm, or what auto chose
    trial_step_s: dict = field(default_factory=dict)  # auto's candidates' seconds a step (mpinet.engine.planner)
    trials_s: float = 0.0  # auto's seconds choosing in this launch (its trials; 0 when it reused a choice)
    fused: bool = False  # the update folded into a GEMM (Exchange.fused_update)
    layout: dict = field(default_factory=dict)  # how the design laid its ranks out (Exchange.describe)


def train(arrays: dataset.Arrays, opts: Options, comm: Comm, store=None, log=None, chosen: str = "") -> Result:
    """Train on `arrays` with the design in opts.algorithm over `comm`; every rank calls this.

    `store` (rank 0's mpinet.engine.checkpoint.Store, or None) resumes the run from a checkpoint of this
    very run and is offered the weights after every epoch. `chosen`: for `auto`, the design already
    chosen (choose_design, here or by an earlier launch of the experiment; every rank passes the same).
    """
    log = log or (lambda msg: None)
    check_options(opts, comm.size, len(arrays.train_y), len(arrays.classes))
    arrays = _plain(arrays)
    trials, trials_s = {}, 0.0
    if opts.algorithm == AUTO:
        if not chosen:
            chosen, trials, trials_s = choose_design(arrays, opts, comm)
        steps = ", ".join(f"{d} {1e3 * t:.3f} ms" for d, t in trials.items())
        log(f"auto trains {chosen}" + (f" (a step: {steps})" if trials else ""))
        opts = replace(opts, algorithm=chosen)
    run = _Run.start(arrays, opts, comm)
    result = Result(run.params, run.net, first_layer=run.ws.plan.describe(), design=opts.algorithm)
    result.trial_step_s, result.trials_s = trials, trials_s
    result.fused, result.layout = run.exchange.fused_update, run.exchange.describe()
    start_epoch = 0
    if store is not None and comm.rank == 0:
        start_epoch, result.metrics = store.resume(opts, arrays, comm.size, run.params)
        result.resumed_from_epoch = start_epoch
    start_epoch = int(comm.max(float(start_epoch)))  # rank 0 alone reads the file
    run.exchange.share(run.params)  # identical weights everywhere, whatever a rank's RNG or file did

    for epoch in range(start_epoch + 1, opts.epochs + 1):
        if epoch == opts.epochs:  # the timeline's epoch: its ranks start together on one time axis
            comm.max_untimed(np.zeros(1))
            run.trace = StepTrace(comm.rank, run.exchange.trains, TIMELINE_STEPS)
        sums, times = run.train_epoch(epoch)
        # evaluation on the whole test set, and the epoch's metrics reduced over the ranks
        t0 = time.perf_counter()
        test_sums, confusion = run.evaluate()
        times.eval_s = time.perf_counter() - t0
        comm.sum_untimed(sums)
        row = _epoch_row(epoch, sums, test_sums, times, comm, run.exchange.trains)
        if not all(math.isfinite(row[c]) for c in ("train_loss", "test_loss")):
            if store is not None and comm.rank == 0:
                store.discard()
            raise MpinetError(
                f"training diverged in epoch {epoch}: loss is {row['train_loss']}; "
                f"lower learning_rate (now {opts.learning_rate}) or use loss xent"
            )
        result.metrics.append(row)
        result.confusion = confusion
        log(_progress(row, opts.epochs))
        # checkpoint: the store decides whether one is due
        if store is not None and comm.rank == 0:
            store.offer(run.params, epoch, result.metrics, last=epoch == opts.epochs)
    if result.confusion is None:  # resumed after the last epoch: evaluate once for the matrix
        _, result.confusion = run.evaluate()
    if run.trace is not None:
        result.timeline = comm.gather_objects(run.trace.as_dict())
    result.params = np.array(run.params)  # this rank's own copy: a design's shared memory is released
    run.exchange.close()
    return result


def choose_design(arrays: dataset.Arrays, opts: Options, comm: Comm) -> tuple[str, dict, float]:
    """`auto`'s choice on these ranks (mpinet.engine.planner): the design, each candidate's seconds a
    step, and the seconds choosing took (the slowest rank's). On one rank: serial, without trials."""
    t0 = time.perf_counter()
    design, trials = planner.choose(_plain(arrays), opts, comm, _Run.start)
    return design, trials, comm.max(time.perf_counter() - t0)


def _plain(arrays: dataset.Arrays) -> dataset.Arrays:
    """Plain ndarray views of the memory maps: every slice of an np.memmap runs Python code
    (memmap.__array_finalize__), about 20 a step at batch 4."""
    return replace(arrays, **{k: np.asarray(getattr(arrays, k)) for k in ("train_x", "train_y", "test_x", "test_y")})


@dataclass
class EpochTimes:
    """One rank's times of an epoch (seconds; perf_counter), and its counters before it."""

    train_s: float  # training, this rank
    waited_s: float  # of which waiting in exchanges for the slowest rank to arrive
    comm_before: float  # Comm.seconds before the epoch
    bytes_before: int  # Comm.bytes_sent before the epoch
    step_p50_s: float  # the median step (each step's slowest rank)
    step_p95_s: float  # and its tail
    cpu_s: float = 0.0  # CPU seconds this rank's process got while training (all its threads)
    eval_s: float = 0.0  # evaluating the test set after it


@dataclass
class StepTrace:
    """When one rank's first `limit` steps of an epoch computed, waited for the slowest rank and moved
    bytes, in seconds from the epoch's start; and, on a parameter server, when it served whom."""

    rank: int
    trains: bool
    limit: int
    steps: list = field(default_factory=list)  # [start, arrived at the exchange, left it, waited]
    serve: list = field(default_factory=list)  # [step, what, worker, start, end] (Comm.server_step)

    def record(self, t0: float, arrivals: np.ndarray, ends: np.ndarray, waits: np.ndarray) -> None:
        """The traced steps from their exchange's arrival and departure times (perf_counter)."""
        start = t0
        for arrived, done, wait in zip(arrivals.tolist(), ends.tolist(), waits.tolist()):
            self.steps.append([start - t0, arrived - t0, done - t0, wait])
            start = done
        self.serve = [[k, what, worker, a - t0, b - t0] for k, what, worker, a, b in self.serve]

    def as_dict(self) -> dict:
        return {"rank": self.rank, "trains": self.trains, "steps": self.steps, "serve": self.serve}


@dataclass
class _Run:
    """One rank's share of a run: the network, its weights and gradient with their per-layer views,
    the exchange, which rows this rank trains on, and the preallocated step buffers."""

    arrays: dataset.Arrays
    opts: Options
    comm: Comm
    net: Net
    params: np.ndarray
    grads: np.ndarray
    layers: list
    grad_layers: list
    exchange: object
    n_data: int  # ranks that train
    my_slot: int  # this rank's slot among them
    n: int  # rows trained on
    subset: np.ndarray | None  # their indices into the memory map, or None for all rows
    ws: Workspace
    xbuf: np.ndarray
    trace: StepTrace | None = None  # set for the epoch whose steps the timeline records

    @classmethod
    def start(cls, arrays: dataset.Arrays, opts: Options, comm: Comm) -> "_Run":
        dt = np.dtype(opts.dtype)
        sizes = (arrays.train_x.shape[1], *opts.hidden, len(arrays.classes))
        net = Net(sizes, opts.loss, opts.standardize, dt, opts.faithful)
        n_data = data_ranks(opts.algorithm, comm.size)
        my_slot = comm.rank - (comm.size - n_data)  # the ranks that train are the last n_data
        # the rows trained on: all, or a subset (indices into the memory map; nothing is copied on disk)
        n = train_size(opts, n_data, len(arrays.train_y))
        subset = None if n == len(arrays.train_y) else dataset.subset_rows(arrays.train_y, n, len(arrays.classes))
        # buffers for the rows a rank can hold in one step: a batch_size beyond the data allocates no more
        rows = min(opts.batch_size, math.ceil(n / n_data))
        exchange = exchange_for(opts.algorithm, opts.sync_every, comm, sizes, rows, dt)
        params, grads = exchange.hold(init_params(net, opts.seed))
        ws = Workspace(net, exchange.workspace_rows(rows))
        xbuf = np.empty((ws.batch, net.sizes[0]), dtype=dt)
        views = layer_views(net, params), layer_views(net, grads)
        return cls(arrays, opts, comm, net, params, grads, *views, exchange, n_data, my_slot, n, subset, ws, xbuf)

    def read(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Features and labels of these rows of the ones trained on (indices into the subset, if any)."""
        rows = rows if self.subset is None else self.subset[rows]
        return _rows_of(self.arrays, rows, self.xbuf, self.opts.shuffle, self.subset is None)

    def file_rows(self, step: Step) -> np.ndarray:
        """The global batch's rows in the training file, each rank's slot in the order read() reads it."""
        rows = step.batch if self.subset is None else self.subset[step.batch]
        if self.opts.shuffle == "samples" or self.subset is not None:
            rows = np.concatenate([np.sort(slot) for slot in np.split(rows, np.cumsum(step.counts)[:-1])])
        return rows

    def _step(self, order: np.ndarray, k: int, steps: int) -> Step:
        """Step k of the epoch whose order of rows or batch starts is `order`."""
        global_batch = self.opts.batch_size * self.n_data
        batch = _global_batch(order, k, global_batch, self.n, self.opts.shuffle)
        mine = _slot(batch, self.my_slot, self.n_data) if self.exchange.trains else batch[:0]
        counts = even_split(len(batch), self.n_data)
        return Step(k, steps, batch, mine, counts, _step_scale(self.opts, len(batch), len(mine)))

    def compute(self, step: Step) -> tuple[float, int, int]:
        """A step's forward and backward, on the rows its design reads (the seam tests/paced slows)."""
        return self.exchange.compute(self, step)

    def steps(self) -> int:
        """Steps an epoch: global batches of batch_size rows a training rank."""
        return math.ceil(self.n / (self.opts.batch_size * self.n_data))

    def time_steps(self, limit: int) -> tuple[int, float]:
        """(steps, seconds) of this rank training the first `limit` steps of an epoch (auto's trials)."""
        steps = min(limit, self.steps())
        return steps, self.train_epoch(0, steps)[1].train_s

    def train_epoch(self, epoch: int, limit: int | None = None) -> tuple[np.ndarray, "EpochTimes"]:
        """One pass over the rows (or its first `limit` steps): this rank's (loss, correct, rows) sums
        and its times."""
        opts, comm = self.opts, self.comm
        global_batch = opts.batch_size * self.n_data
        steps = min(self.steps(), limit or math.inf)
        # this epoch's order: a permutation of rows or of whole batches, the same on every rank
        rng = np.random.default_rng([opts.seed, epoch])
        order = rng.permutation(self.n) if opts.shuffle == "samples" else rng.permutation(steps) * global_batch
        sums = np.zeros(3)  # training loss, correct predictions, samples: this rank's share
        comm_before, bytes_before = comm.seconds, comm.bytes_sent
        # per communicating step, the compute since the last exchange (its wall time less the time
        # spent communicating in it: sharded and grid gather inside compute): the slowest rank's sets the wait
        computed, talked = np.zeros(steps), np.zeros(steps, dtype=bool)
        arrivals, ends = np.empty(steps), np.empty(steps)  # when each step reached its exchange, and left it
        traced = min(steps, self.trace.limit) if self.trace is not None else 0
        t0, cpu0 = time.perf_counter(), time.process_time()
        left, comm_left = t0, comm.seconds
        for k in range(steps):
            step = self._step(order, k, steps)
            sums += self.compute(step)
            # exchange: combine the ranks' updates and step (Allreduce, Allgather, local SGD or the server)
            before, arrived = comm.seconds, time.perf_counter()
            serve = [] if k < traced else None  # what a parameter server did when, in traced steps
            self.exchange.step(self.params, self.grads, step, serve)
            done = time.perf_counter()
            if comm.seconds != comm_left:  # the step talked, in its compute or its exchange
                computed[k], talked[k] = arrived - left - (before - comm_left), True
                left, comm_left = done, comm.seconds
            arrivals[k], ends[k] = arrived, done
            if serve:
                self.trace.serve += [[k, *entry] for entry in serve]
        self.exchange.finish(self.params)  # every rank holds all the weights again
        t_train, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        waits, step_times = _slowest(comm, computed, talked, np.diff(ends, prepend=t0))
        if traced:
            self.trace.record(t0, arrivals[:traced], ends[:traced], waits[:traced])
        p50, p95 = np.percentile(step_times, [50, 95]) if steps else (0.0, 0.0)
        times = EpochTimes(t_train, float(waits.sum()), comm_before, bytes_before, float(p50), float(p95), cpu)
        return sums, times

    def evaluate(self):
        a = self.arrays
        return _evaluate(self.net, self.layers, a.test_x, a.test_y, self.comm, self.ws.batch)


def _progress(row: dict, epochs: int) -> str:
    return (
        f"epoch {row['epoch']}/{epochs} train_loss={row['train_loss']:.4f} "
        f"train_acc={row['train_accuracy']:.3f} test_acc={row['test_accuracy']:.3f} "
        f"time={row['time_s']:.3f}s comm={row['comm_s']:.3f}s"
    )


def _step_scale(opts: Options, global_rows: int, my_rows: int) -> float:
    """The factor on a rank's summed gradient that makes the exchange's update the right one."""
    if opts.faithful:
        return opts.learning_rate  # the original summed its updates over the batch and the ranks
    if opts.sync_every == 1:
        return opts.learning_rate / global_rows  # an average over the whole global batch once summed
    return opts.learning_rate / max(my_rows, 1)  # local SGD: every rank steps on its own slice


def _rows_of(arrays: dataset.Arrays, rows: np.ndarray, xbuf: np.ndarray, shuffle: str, whole: bool):
    """Features and labels of the given training rows: copied in file order, or a zero-copy view
    (contiguous batches of the whole set; a subset's batch is not contiguous in the file)."""
    if shuffle == "samples" or not whole:
        rows = np.sort(rows)  # sequential reads of the memory map
        return _gather(arrays.train_x, rows, xbuf), np.asarray(arrays.train_y[rows])
    return _rows(arrays.train_x, rows, xbuf), np.asarray(arrays.train_y[rows])


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
    """Copy the given rows of a (memory-mapped) array into a contiguous buffer of the training dtype
    (pixels as their values)."""
    if x_all.dtype == np.uint8:
        return pixels.rows_to_values(x_all, rows, buf)
    out = buf[: len(rows)]
    for i, r in enumerate(rows):  # row by row: 3x faster than np.take for long rows, and casts on the fly
        out[i] = x_all[r]
    return out


def _rows(x_all: np.ndarray, rows: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """Consecutive rows of x_all: a view when the dtype matches (no copy), else their values in buf."""
    view = x_all[rows[0] : rows[-1] + 1] if len(rows) else x_all[:0]
    if view.dtype == buf.dtype:
        return view
    return dataset.features(view, buf[: len(rows)])


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


def _slowest(comm: Comm, computed: np.ndarray, talked: np.ndarray, durations: np.ndarray):
    """Per step, the seconds this rank sat in the exchange waiting for the slowest rank to arrive, and
    the step's duration on the slowest rank (one reduction for both). From timestamps alone (no
    barrier): ranks leave an exchange together, so a rank that computed c while the slowest
    computed max(c) waits max(c) - c before any byte can move."""
    both = np.concatenate([computed, durations])
    comm.max_untimed(both)
    slowest, step_times = both[: len(computed)], both[len(computed) :]
    return np.where(talked, slowest - computed, 0.0), step_times


def _epoch_row(epoch, sums, test_sums, times: EpochTimes, comm: Comm, trains: bool):
    t_train, t_eval, waited, p50, p95 = times.train_s, times.eval_s, times.waited_s, times.step_p50_s, times.step_p95_s
    comm_s = comm.seconds - times.comm_before
    waited = min(waited, comm_s)  # a wait is spent inside the exchange's time
    per_rank = np.array([(t_train - comm_s) * trains, comm_s * trains, trains, waited * trains], dtype=np.float64)
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
        # comm_s = waiting for the slowest rank + moving the bytes; mean and max over training ranks
        "wait_s": per_rank[3] / per_rank[2],
        "wait_max_s": comm.max(waited * trains),
        "transfer_s": (per_rank[1] - per_rank[3]) / per_rank[2],
        "transfer_max_s": comm.max((comm_s - waited) * trains),
        "eval_s": comm.max(t_eval),
        "bytes_sent": int(comm.max(float(comm.bytes_sent - times.bytes_before))),
        # the epoch's step times (each step's slowest rank): its median and its tail
        "step_p50_s": float(p50),
        "step_p95_s": float(p95),
        # the least CPU a rank got while training, as a share of the wall time: below about 0.9 another
        # process held its core (a contended run; ranks that wait in MPI poll, so waiting is not idling)
        "cpu_share": -comm.max(-times.cpu_s / t_train) if t_train > 0 else math.nan,
    }
