"""A calibrated cost model of an epoch: compute measured per sample, communication as α + β·bytes.

Compute: the seconds per training sample at each batch size, fitted from the measured 1-rank
runs (their per-epoch compute time over their samples; per-step overhead is included, as it is
paid per sample at a given batch size). A rank with D training ranks beside it handles n / D
samples.

Communication: one message of m bytes costs α + β·m, with α and β fitted by least squares to a
ping-pong between two ranks (mpinet.commbench, which the workflow runs once per study where the
training runs). The same benchmark times the Allreduce on 2, 4, ... and all its ranks; at those
counts the model takes it as timed, and elsewhere prices it as below, scaled by the timed/priced
ratio at the nearest timed count (allreduce_seconds). Collectives are built from messages the way
MPICH 5 does them:
its default selection (src/mpi/coll/coll_selection.json) uses recursive doubling for Allreduce
messages of at most 8 bytes or fewer elements than the largest power of two p' <= P ranks, and
otherwise Rabenseifner's reduce-scatter + allgather: 2·log2(p')·α + 2·(p'−1)/p'·m·β; when P is not a
power of two, P − p' ranks first hand their data to a partner and get the result back
(2·(α + m·β) more). An Allgather of m bytes in all: recursive doubling or Bruck below 512 KiB
(⌈log2 P⌉·α), the ring above ((P−1)·α), and (P−1)/P·m·β either way. The parameter server's rank 0
receives P−1 gradients and sends P−1 weight vectors one after another in every step: 2·(P−1)·(α + m·β).

The small-batch designs change the compute too, by the share of a sample's multiply-adds in the
first layer (forward, weight gradient; input gradients from the second layer on): `allgather`'s
ranks each apply the first layer's update for the whole global batch, `sharded`'s each run the
first layer for their 1/P of its units and the rest of the net on the whole global batch, and
`grid`'s as `sharded` in a group of S with the groups' gradients reduced as `allreduce`'s. `node`
computes as `allreduce` and reduces through shared memory (node_step_seconds): priced as one
node's, whatever the link.

Ranks on one node share its memory system, so on P ranks every design's compute slows by what the
share of a step that streams memory loses (contention): commbench times a copy on 1, 2, 4, ... ranks
at once, and that share is the 1-rank step's rows and first-layer passes at the 1-rank copy rate.

Beyond one node, `INTERCONNECTS` holds α and β of common networks (typical values, see each
`source`); predictions with them keep the compute measured here.
"""

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from mpinet import MpinetError
from mpinet.analysis.baselines import launch_clean, launch_faults
from mpinet.engine.designs import AUTO, possible
from mpinet.engine.grid import ROW_PASSES, WEIGHT_PASSES, grid_shape
from mpinet.engine.model import Net
from mpinet.engine.options import ALGORITHMS, COMPUTE_OPTIONS, data_ranks
from mpinet.study.experiments import global_batches, hidden_sizes


@dataclass(frozen=True)
class Timed:
    """An operation's seconds as measured at growing sizes: read between them on log-log axes, and
    past the largest as its time per byte."""

    nbytes: tuple[float, ...]
    seconds: tuple[float, ...]

    def at(self, nbytes: float) -> float:
        if nbytes >= self.nbytes[-1]:
            return self.seconds[-1] * nbytes / self.nbytes[-1]
        return float(np.exp(np.interp(np.log(max(nbytes, 1.0)), np.log(self.nbytes), np.log(self.seconds))))


@dataclass(frozen=True)
class Link:
    """How ranks exchange bytes: α and β of one message; where commbench measured them, the
    Allreduce at each rank count, and each rank's copy rate with that many ranks copying at once
    (a node's ranks share its memory system: the compute they do slows too)."""

    alpha: float  # seconds per message
    beta: float  # seconds per byte
    source: str = ""
    # MPI_Allreduce as timed at these rank counts (commbench); the formula prices the others
    allreduce_at: dict[int, Timed] = field(default_factory=dict, hash=False, compare=False)
    # bytes per second each rank streams (read + write) with k ranks copying at once
    stream_at: dict[int, float] = field(default_factory=dict, hash=False, compare=False)

    def message(self, nbytes: float) -> float:
        return self.alpha + self.beta * nbytes


INTERCONNECTS = {
    "10 GbE (TCP)": Link(
        30e-6,
        1 / 1.15e9,
        "typical MPI-over-TCP figures on 10 GbE: ~30 µs one-way latency (osu_latency), ~1.15 GB/s "
        "of the 1.25 GB/s line rate (osu_bw)",
    ),
    "InfiniBand HDR": Link(
        1.2e-6,
        1 / 23e9,
        "NVIDIA ConnectX-6 HDR, 200 Gb/s = 25 GB/s line rate; typical MPI results ~1.2 µs latency and "
        "~23 GB/s bandwidth (osu_latency / osu_bw)",
    ),
}


def fit_link(nbytes, seconds, source: str = "") -> Link:
    """α and β of seconds = α + β·bytes: α from the small messages (<= 1 KiB, where the bytes cost
    nothing measurable), β by least squares on what the large ones (>= 64 KiB) cost beyond α. A
    plain least-squares line would let the large messages' noise decide α, often below zero."""
    x = np.asarray(nbytes, dtype=float)
    y = np.asarray(seconds, dtype=float)
    small, large = x <= 1024, x >= 65536
    alpha = float(np.median(y[small])) if small.any() else 0.0
    if large.sum() >= 2:
        beta = float(np.dot(x[large], y[large] - alpha) / np.dot(x[large], x[large]))
    else:
        beta = float(np.polyfit(x, y, 1)[0])
    if not beta > 0:
        # no bandwidth can be told from such a fit, and every prediction would divide by it
        raise MpinetError(
            f"the link fitted to {len(x)} message sizes up to {int(x.max()) if len(x) else 0} bytes has "
            f"β = {beta:.3g} s/byte (no time per byte beyond the latency): measure with larger messages"
        )
    return Link(max(alpha, 0.0), beta, source)


def scored(runs: pd.DataFrame) -> pd.Series:
    """The runs an error statistic of the model counts (runs.csv's columns): one it was not fitted on
    and could price, whose launch was clean (baselines.launch_clean: timed alone, every rank with a core
    of its own). The model prices a core per rank on a quiet machine: what a busy one adds is not its error."""
    return ~fitted(runs) & runs["model_error"].notna() & launch_clean(runs)


def held_out_error(runs: pd.DataFrame) -> dict:
    """The model's error (model_error) over the scored runs: how many, the median absolute error, the
    lowest and highest; how many other priced runs on more ranks were left out, and for what (a run may
    count under several reasons); how many on more ranks it could not price (no 1-rank run to fit on)."""
    counted = scored(runs)
    errors = runs.loc[counted, "model_error"]
    several = ~fitted(runs)
    priced = several & runs["model_error"].notna()
    left = priced & ~counted
    faults = launch_faults(runs[left]).sum()
    found = {
        "cells": len(errors),
        "left_out": int(left.sum()),
        "reasons": {reason: int(n) for reason, n in faults.items() if n},
        "unpriced": int((several & ~priced).sum()),
    }
    if errors.empty:
        return found
    return found | {
        "median_abs": float(errors.abs().median()),
        "low": float(errors.min()),
        "high": float(errors.max()),
    }


def left_out_reasons(e: dict) -> str:
    """held_out_error's reasons as text: "14 on more ranks than cores, 14 contended, counted per reason"."""
    text = ", ".join(f"{n} {reason}" for reason, n in e["reasons"].items())
    return text + ", counted per reason" if sum(e["reasons"].values()) > e["left_out"] else text


def fitted(runs: pd.DataFrame) -> pd.Series:
    """The runs the model is fitted on (their compute per sample is its input): the 1-rank runs, serial or
    a design on 1 rank. Its error on them is 0 by construction, so no error statistic counts them."""
    return runs["ranks"] == 1


def fit_compute(runs: pd.DataFrame) -> dict:
    """Seconds of compute per training sample, by COMPUTE_KEYS (the dataset and every option that
    decides compute time), from the fitted runs (serial or a design on 1 rank): median over them."""
    one = _with_table_columns(runs[fitted(runs)])
    per_sample = one["median_compute_s"] / one["trained_samples"]
    return per_sample.groupby([one[k] for k in FIT_KEYS]).median().to_dict()


COMPUTE_KEYS = ["dataset", *COMPUTE_OPTIONS]
# and the engine that timed them: one engine's 1-rank runs never predict another's (runs.csv's timed_by)
FIT_KEYS = [*COMPUTE_KEYS, "timed_by"]
_BATCH = FIT_KEYS.index("batch_size")


def per_sample_at(compute: dict, key: tuple) -> float | None:
    """Seconds of compute per sample for a FIT_KEYS key (a fit_compute table): as fitted at its batch.
    At a batch no 1-rank run measured (a fixed global batch's G/P a rank), a step's seconds read on
    the line between the nearest fitted batches below and above it (a step pays a fixed overhead
    plus its samples); below or above every fitted batch, the nearest one's seconds per sample. None
    when no batch of that configuration was fitted."""
    if key in compute:
        return compute[key]
    batch, rest = key[_BATCH], key[:_BATCH] + key[_BATCH + 1 :]
    fitted_at = {k[_BATCH]: v for k, v in compute.items() if k[:_BATCH] + k[_BATCH + 1 :] == rest}
    below = [b for b in fitted_at if b < batch]
    above = [b for b in fitted_at if b > batch]
    if not below or not above:
        return fitted_at[max(below) if below else min(above)] if fitted_at else None
    lo, hi = max(below), min(above)
    step = np.interp(batch, [lo, hi], [fitted_at[lo] * lo, fitted_at[hi] * hi])
    return float(step / batch)


def _with_table_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """runs with the columns the model reads that older tables lack: timed_by (one unnamed engine)
    and trained_samples (runs.csv before 0.9.0 held the samples trained on under train_samples)."""
    if "timed_by" not in runs:
        runs = runs.assign(timed_by="unknown")
    return runs if "trained_samples" in runs else runs.assign(trained_samples=runs["train_samples"])


def measured_link(bench: pd.DataFrame, source: str = "ping-pong here") -> Link:
    """The link a commbench.csv measured: α and β of its ping-pong, and its Allreduce at every rank
    count it timed (a table from before 0.9.0 timed it at one count; one with neither column, none)."""
    link = Link(float(bench["alpha_s"].iloc[0]), float(bench["beta_s_per_byte"].iloc[0]), source)
    if not {"allreduce_s", "ranks", "bytes"} <= set(bench):
        return link
    timed, stream = {}, {}
    for ranks, rows in bench.sort_values("bytes").groupby("ranks"):
        reduced = rows[rows["allreduce_s"] > 0]
        if ranks >= 2 and len(reduced) >= 2:
            timed[int(ranks)] = Timed(tuple(reduced["bytes"] * 1.0), tuple(reduced["allreduce_s"] * 1.0))
        largest = rows.iloc[-1]  # the copy's rate from the largest buffer: past the caches
        if "stream_s" in rows and largest["stream_s"] > 0:
            stream[int(ranks)] = 2 * float(largest["bytes"]) / float(largest["stream_s"])
    return replace(link, allreduce_at=timed, stream_at=stream if 1 in stream else {})


def contention(ranks: int, work: "Work", link: Link) -> float:
    """How much slower a rank computes with `ranks` ranks at once than alone: the share of a 1-rank
    step that streams memory (its rows and first-layer passes, mpinet.engine.grid's counts, at the
    1-rank copy rate; at most all of it) slows by the drop of each rank's copy rate. Between timed
    counts the rate is interpolated; past the largest it stays (more ranks than the benchmark had
    are more nodes like its own, as the link's α and β are). No copy timings (a preset link, an
    older commbench.csv): 1."""
    if ranks < 2 or not link.stream_at:
        return 1.0
    counts = sorted(link.stream_at)
    alone = link.stream_at[1]
    rate = float(np.interp(ranks, counts, [link.stream_at[k] for k in counts]))  # held past the ends
    n_in, units = work.sizes[0], work.sizes[1]
    streamed = (ROW_PASSES * work.batch_size * n_in + WEIGHT_PASSES * n_in * units) * work.itemsize
    share = min(1.0, streamed / alone / (work.per_sample_s * work.batch_size))
    return 1 - share + share * alone / rate


def allreduce_seconds(ranks: int, nbytes: float, itemsize: int, link: Link) -> float:
    """One MPI_Allreduce of nbytes over `ranks` ranks: as timed at that count where the link holds
    a timing; elsewhere MPICH's algorithm priced by α and β, times what the timing at the nearest
    count below (or above) cost beyond that price. Ranks on one node share its memory system, which
    the ping-pong's α and β do not see (on a 16-core node, 6x at 16 ranks)."""
    formula = _mpich_allreduce(ranks, nbytes, itemsize, link)
    if ranks < 2 or not link.allreduce_at:
        return formula
    if ranks in link.allreduce_at:
        return link.allreduce_at[ranks].at(nbytes)
    below = [k for k in link.allreduce_at if k < ranks]
    k = max(below) if below else min(link.allreduce_at)
    priced = _mpich_allreduce(k, nbytes, itemsize, link)
    return formula * link.allreduce_at[k].at(nbytes) / priced if priced > 0 else formula


def _mpich_allreduce(ranks: int, nbytes: float, itemsize: int, link: Link) -> float:
    """One MPI_Allreduce of nbytes over `ranks` ranks, with MPICH's algorithm for that size."""
    if ranks < 2:
        return 0.0
    pof2 = 1 << (ranks.bit_length() - 1)
    extra = 2 * link.message(nbytes) if ranks > pof2 else 0.0
    steps = int(math.log2(pof2))
    if nbytes <= 8 or nbytes // itemsize < pof2:  # recursive doubling
        return steps * link.message(nbytes) + extra
    return 2 * steps * link.alpha + 2 * (pof2 - 1) / pof2 * nbytes * link.beta + extra


def allgather_seconds(ranks: int, nbytes: float, link: Link) -> float:
    """One MPI_Allgather(v) gathering nbytes in all over `ranks` ranks."""
    if ranks < 2:
        return 0.0
    messages = math.ceil(math.log2(ranks)) if nbytes < ALLGATHER_LONG else ranks - 1
    return messages * link.alpha + (ranks - 1) / ranks * nbytes * link.beta


ALLGATHER_LONG = 512 << 10  # MPICH's MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE: the ring from here on


def node_step_seconds(ranks: int, rest_bytes: float, link: Link) -> float:
    """The `node` design's exchange of a step on one node (mpinet.engine.nodeshared): two barriers (a
    dissemination barrier each, ⌈log2 P⌉ messages) and each rank's pass over its slice of every rank's
    gradient of the small layers (rest_bytes in all); its share of the first layer's update is compute
    (a rank's own gradient's flops) and no byte of the first layer travels."""
    return 2 * math.ceil(math.log2(ranks)) * link.alpha + rest_bytes * link.beta


def bcast_seconds(ranks: int, nbytes: float, link: Link) -> float:
    """One MPI_Bcast of nbytes: a binomial tree, log2 P whole messages (once an epoch here)."""
    return math.ceil(math.log2(ranks)) * link.message(nbytes) if ranks > 1 else 0.0


def first_layer_share(sizes: tuple[int, ...]) -> float:
    """The first layer's weight gradient's share of a sample's multiply-adds (forward, weight
    gradients, and input gradients from the second layer on); its forward has the same share."""
    macs = [a * b for a, b in zip(sizes[:-1], sizes[1:])]
    return macs[0] / (2 * sum(macs) + sum(macs[1:]))


def paramserver_step_seconds(ranks: int, nbytes: float, link: Link) -> float:
    """Rank 0's share of one step: P−1 gradients in, P−1 weight vectors out, one after another."""
    return 2 * (ranks - 1) * link.message(nbytes)


@dataclass(frozen=True)
class Work:
    """What an epoch computes: samples trained on, per-rank batch, measured seconds per sample, the
    net's layer sizes and bytes per value."""

    samples: int
    batch_size: int
    per_sample_s: float
    sizes: tuple[int, ...]
    itemsize: int


def epoch_seconds(algorithm: str, ranks: int, work: Work, link: Link, sync_every: int = 1) -> float:
    """Predicted seconds of one epoch (compute + communication) of one design on `ranks` ranks."""
    if algorithm == AUTO:  # the engine times its candidates and trains with the fastest
        return min(epoch_seconds(d, ranks, work, link) for d in possible(AUTO, ranks))
    work = replace(work, per_sample_s=work.per_sample_s * contention(ranks, work, link))
    samples, batch_size, per_sample_s, sizes, itemsize = (
        work.samples,
        work.batch_size,
        work.per_sample_s,
        work.sizes,
        work.itemsize,
    )
    nbytes = Net(sizes).n_params * itemsize
    if ranks == 1:  # serial, or a design on one rank: nothing to exchange
        return per_sample_s * samples
    workers = data_ranks(algorithm, ranks)
    steps = math.ceil(samples / (batch_size * workers))
    if algorithm == "paramserver":  # workers compute a step, then rank 0 serves them in turn
        return steps * (per_sample_s * batch_size + paramserver_step_seconds(ranks, nbytes, link))
    rows, first = batch_size * ranks, sizes[0] * sizes[1] * itemsize  # the global batch; W's bytes
    share = first_layer_share(sizes)
    if algorithm == "allgather":  # every rank updates W for the whole global batch
        compute = per_sample_s * (batch_size + (rows - batch_size) * share)
        gathers = allgather_seconds(ranks, rows * sizes[0] * itemsize, link)
        gathers += allgather_seconds(ranks, rows * sizes[1] * itemsize, link)
        step = compute + gathers + allreduce_seconds(ranks, nbytes - first, itemsize, link)
        return steps * step + bcast_seconds(ranks, first, link)
    if algorithm == "sharded":  # 1/P of the first layer, the rest of the net on the global batch
        compute = per_sample_s * rows * (2 * share / ranks + 1 - 2 * share)
        step = compute + allgather_seconds(ranks, rows * sizes[1] * itemsize, link)
        return steps * step + allgather_seconds(ranks, first, link) + bcast_seconds(ranks, nbytes - first, link)
    if algorithm == "grid":  # sharded within groups of S ranks, the groups' gradients reduced
        groups, shards = grid_shape(ranks, sizes, batch_size, itemsize)
        group_rows = batch_size * shards
        compute = per_sample_s * group_rows * (2 * share / shards + 1 - 2 * share)
        step = compute + allgather_seconds(shards, group_rows * sizes[1] * itemsize, link)
        step += allreduce_seconds(groups, first / shards, itemsize, link)
        step += allreduce_seconds(groups, nbytes - first, itemsize, link)
        return steps * step + allgather_seconds(shards, first, link) + bcast_seconds(ranks, nbytes - first, link)
    if algorithm == "node":  # allreduce's compute; the first layer's update shared, not sent
        first = sizes[0] * sizes[1] * itemsize
        return per_sample_s * samples / ranks + steps * node_step_seconds(ranks, nbytes - first, link)
    syncs = steps if sync_every == 1 else math.ceil(steps / sync_every)  # allreduce
    return per_sample_s * samples / ranks + syncs * allreduce_seconds(ranks, nbytes, itemsize, link)


def n_params(features: int, hidden: str, classes: int) -> int:
    """Parameters of the net a run trained (hidden as '30-20')."""
    return Net(layer_sizes(features, hidden, classes)).n_params


def layer_sizes(features: int, hidden: str, classes: int) -> tuple[int, ...]:
    """The layer sizes of the net a run trained (hidden as '30-20')."""
    return (int(features), *hidden_sizes(hidden), int(classes))


def _work(run, compute: dict) -> Work | None:
    """A run's Work, or None when no 1-rank run measured its compute."""
    per_sample = per_sample_at(compute, tuple(run.get(k, "unknown") for k in FIT_KEYS))
    if per_sample is None:
        return None
    sizes = layer_sizes(run["features"], run["hidden"], run["classes"])
    return Work(run["trained_samples"], run["batch_size"], per_sample, sizes, np.dtype(run["dtype"]).itemsize)


def predict(runs: pd.DataFrame, links: dict, rank_counts) -> pd.DataFrame:
    """Predicted epoch time of the designs the runs ran (the original's two when they ran only
    serial) at every rank count, for each configuration the runs measured at a batch a 1-rank run
    measured too, and each link (name -> Link): throughput scaling ("strong": speedup and efficiency
    at the run's batch per rank on its training set), weak scaling for samples_per_rank runs (the
    1-rank epoch with K samples over the P-rank epoch with K per training rank), and each fixed global
    batch G the runs split over ranks and a 1-rank run measured ("global": at every P whose training
    ranks divide G, G/P a rank, against the 1-rank epoch at G)."""
    compute = fit_compute(runs)
    rows = []
    runs = _with_table_columns(runs)
    keys = [*FIT_KEYS, "sync_every", "features", "classes", "trained_samples", "samples_per_rank"]
    weak_runs = runs["samples_per_rank"] > 0 if "samples_per_rank" in runs else pd.Series(False, index=runs.index)
    # one strong configuration per training set; one weak one per samples_per_rank
    configs = runs.assign(trained_samples=runs["trained_samples"].where(~weak_runs, 0)).drop_duplicates(
        subset=[k for k in keys if k in runs]
    )
    axes = [(c, "weak" if c.get("samples_per_rank", 0) else "strong") for _, c in configs.iterrows()]
    axes += [(c, "global") for _, c in _global_axes(runs[~weak_runs], compute).iterrows()]
    for c, scaling in axes:
        # a line per batch a 1-rank run measured (a global axis's base is one): no line from a reading between
        if tuple(c.get(k, "unknown") for k in FIT_KEYS) not in compute or (work := _work(c, compute)) is None:
            continue
        per_rank = int(c.get("samples_per_rank", 0) or 0)
        designs = _designs(runs[runs["dataset"] == c["dataset"]])
        serial = epoch_seconds("serial", 1, replace(work, samples=per_rank or work.samples), Link(0, 0))
        for name, link in links.items():
            for algorithm in designs:
                for p in rank_counts:
                    if algorithm == "paramserver" and p < 2:
                        continue
                    workers = data_ranks(algorithm, p)
                    at = work
                    if scaling == "global":  # G/P a rank, or no such run
                        if c["batch_size"] % workers:
                            continue
                        at = _work({**c.to_dict(), "batch_size": c["batch_size"] // workers}, compute)
                    samples = per_rank * workers if per_rank else work.samples
                    t = epoch_seconds(algorithm, p, replace(at, samples=samples), link, c["sync_every"])
                    rows.append(
                        {
                            **{k: c[k] for k in FIT_KEYS},
                            "batch_size": at.batch_size,
                            "global_batch": at.batch_size * workers,
                            "sync_every": c["sync_every"],
                            "scaling": scaling,
                            "trained_samples": samples,
                            "samples_per_rank": per_rank,
                            "link": name,
                            "algorithm": algorithm,
                            "ranks": p,
                            "epoch_s": t,
                            "speedup": np.nan if per_rank else serial / t,
                            "efficiency": np.nan if per_rank else serial / t / p,
                            "weak_efficiency": serial / t if per_rank else np.nan,
                        }
                    )
    # with no 1-rank run to fit the compute to, there is nothing to predict: an empty table, with its columns
    return pd.DataFrame(rows, columns=MODEL_COLUMNS)


def _global_axes(runs: pd.DataFrame, compute: dict) -> pd.DataFrame:
    """One row per fixed global batch G the runs hold, its batch_size set to G: a run whose training
    ranks split G, of a configuration a 1-rank run measured at G (the axis's base)."""
    runs = runs.assign(global_batch=global_batches(runs))
    split = runs[runs["global_batch"] > runs["batch_size"]]
    keys = [*FIT_KEYS, "sync_every", "features", "classes", "trained_samples"]
    axes = split.assign(batch_size=split["global_batch"]).drop_duplicates(subset=[k for k in keys if k in runs])
    based = [tuple(r[k] for k in FIT_KEYS) in compute for _, r in axes.iterrows()]
    return axes[pd.Series(based, index=axes.index, dtype=bool)]


def _designs(runs: pd.DataFrame) -> list[str]:
    """The designs to predict for a dataset: those its runs ran, or the original's two when they
    ran only serial."""
    ran = set(runs["algorithm"])
    return [a for a in ALGORITHMS if a != "serial" and a in ran] or ["allreduce", "paramserver"]


MODEL_COLUMNS = [
    *FIT_KEYS,
    "global_batch",
    "sync_every",
    "scaling",
    "trained_samples",
    "samples_per_rank",
    "link",
    "algorithm",
    "ranks",
    "epoch_s",
    "speedup",
    "efficiency",
    "weak_efficiency",
]


def predicted_epochs(runs: pd.DataFrame, link: Link) -> pd.Series:
    """The model's epoch time of every measured run (NaN where no 1-rank run measured its compute)."""
    runs = _with_table_columns(runs)
    compute = fit_compute(runs)
    out = []
    for _, r in runs.iterrows():
        work = _work(r, compute)
        out.append(np.nan if work is None else epoch_seconds(r["algorithm"], r["ranks"], work, link, r["sync_every"]))
    return pd.Series(out, index=runs.index, dtype=float)


def model_error(runs: pd.DataFrame, link: Link, predicted: pd.Series | None = None) -> pd.Series:
    """predicted ÷ measured − 1 of the median epoch time (the one sign convention: + when the model
    predicts too slow) of every run the model was not fitted on; NaN on the fitted ones. `predicted`:
    predicted_epochs(runs, link), where the caller has them."""
    predicted = predicted_epochs(runs, link) if predicted is None else predicted
    return (predicted / runs["median_epoch_s"] - 1).where(~fitted(runs))


# --- the microbenchmark -------------------------------------------------------------------


def collectives(library: str) -> str:
    """Which library's collective selection the model's Allreduce follows, for a run's MPI library."""
    from mpinet.engine.mpilib import family_of

    if family_of(library) in ("mpich", "unknown"):
        return "MPICH 5 selection"
    return f"MPICH 5 selection; not modelled: {library} (its tuned decision rules differ)"
