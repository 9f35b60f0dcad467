"""The training options: one dataclass that the CLI, the experiment grid and the workflow's command
lines derive from, and the checks that say which values (and combinations) can run."""

import math
from dataclasses import dataclass, field, fields

from mpinet import MpinetError
from mpinet.engine.designs import AUTO, EXCHANGES
from mpinet.engine.model import LOSSES

ALGORITHMS = (*EXCHANGES, AUTO)  # the designs and auto, in the order tables and figures show them
SHUFFLES = ("samples", "batches")
DTYPES = ("float32", "float64")


def _option(default, *, help: str, choices: tuple[str, ...] | None = None):
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class Options:
    """Everything that decides a run's result (and so its checkpoint's validity).

    The one definition of the training options: the CLI (parse_args), the experiment grid's
    columns and defaults and the workflow's command lines (mpinet.study.experiments) are derived from
    these fields. Their order is the run path's order (the grid puts `ranks` after algorithm).
    """

    algorithm: str = _option("serial", help="training design", choices=ALGORITHMS)
    blas_threads: int = _option(1, help="BLAS threads per rank (ranks x threads is the cores a run uses)")
    batch_size: int = _option(4, help="samples per step per training rank")
    learning_rate: float = _option(0.3, help="SGD step size, for gradients averaged over the global batch")
    epochs: int = _option(100, help="passes over the training set")
    train_samples: int = _option(
        0,
        help="train on a seeded, class-stratified subset of this many training samples (0: all); "
        "the test set stays whole",
    )
    samples_per_rank: int = _option(
        0, help="weak scaling: train on this many samples per training rank (0: off; excludes train_samples)"
    )
    hidden: tuple[int, ...] = _option((30, 20), help="hidden layer sizes")
    loss: str = _option("l2", help="l2 on one-hot labels or softmax cross-entropy", choices=LOSSES)
    standardize: bool = _option(True, help="standardize each sample's hidden pre-activations (true/false)")
    dtype: str = _option("float32", help="floating-point type of the computation", choices=DTYPES)
    sync_every: int = _option(
        1, help="allreduce only: 1 averages gradients every step; k > 1 averages weights every k steps (local SGD)"
    )
    shuffle: str = _option(
        "samples",
        help="per epoch, permute single samples (copies each batch) or whole contiguous batches (zero-copy)",
        choices=SHUFFLES,
    )
    faithful: bool = _option(
        False, help="reproduce the original Go project's numerics and summed updates, bugs included (true/false)"
    )
    seed: int = _option(1, help="seeds the initial weights and the sample order")


# The options that leave a step's compute time alone, and why: they change only the numbers
# (learning_rate, seed), the run's length (epochs), how much data it trains on (train_samples,
# samples_per_rank: times are compared per sample) or the exchange (algorithm, sync_every). Every
# other option, one added later included, is a COMPUTE_OPTION: it separates a run's serial baseline
# and the cost model's compute per sample.
NOT_COMPUTE = ("algorithm", "learning_rate", "epochs", "train_samples", "samples_per_rank", "sync_every", "seed")
COMPUTE_OPTIONS = tuple(f.name for f in fields(Options) if f.name not in NOT_COMPUTE)


class Impossible(MpinetError):
    """Options that are each valid but cannot go together (serial on 2 ranks, ...): a sweep drops them,
    and says so unless the drop is `obvious` (a sweep's serial and paramserver over its rank counts)."""

    def __init__(self, message: str, obvious: bool = False):
        super().__init__(message)
        self.obvious = obvious


def check_options(opts: Options, ranks: int, n_train: int | None, n_classes: int = 0) -> None:
    """Raise MpinetError naming the option if a run with these options cannot work. n_train and
    n_classes are the data's sizes; None (the grid, before any data exists) checks the rest."""
    if opts.algorithm not in ALGORITHMS:
        raise MpinetError(f"algorithm: unknown '{opts.algorithm}'; expected one of {', '.join(ALGORITHMS)}")
    if opts.algorithm == "serial" and ranks != 1:
        raise Impossible(f"algorithm serial runs on 1 rank, not {ranks}; use allreduce or paramserver", obvious=True)
    if opts.algorithm == "paramserver" and ranks < 2:
        raise Impossible("algorithm paramserver needs at least 2 ranks (rank 0 is the server), got 1", obvious=True)
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
        # a sweep's serial baseline beside its local SGD runs is dropped without a word
        raise Impossible(
            f"sync_every > 1 (local SGD) applies to allreduce only, not {opts.algorithm}",
            obvious=opts.algorithm == "serial",
        )
    if opts.faithful and (opts.loss != "l2" or opts.sync_every != 1):
        raise Impossible("faithful reproduces the original: it needs loss l2 and sync_every 1")
    _check_size(opts, data_ranks(opts.algorithm, ranks), n_train, n_classes)


def _check_size(opts: Options, workers: int, n_train: int | None, n_classes: int) -> None:
    """The training set's size: the subset asked for fits the data, every class and every training rank."""
    for key in ("train_samples", "samples_per_rank"):
        if getattr(opts, key) < 0:
            raise MpinetError(f"{key} must be 0 or a positive integer, got {getattr(opts, key)}")
    if opts.train_samples and opts.samples_per_rank:
        raise Impossible("train_samples and samples_per_rank exclude each other (one fixes the total, one the share)")
    n = train_size(opts, workers, n_train)
    what = _size_key(opts, workers)
    if n_train is not None and n > n_train:
        raise MpinetError(f"{what} is more than the {n_train} training samples of the data")
    if (opts.train_samples or opts.samples_per_rank) and n_classes and n < n_classes:
        raise MpinetError(f"{what} cannot hold a sample of each of the data's {n_classes} classes")
    if n is not None and workers > n:
        if what:
            raise MpinetError(f"{what} gives fewer samples than the {workers} training ranks")
        raise MpinetError(f"{workers} training ranks but only {n} training samples; use fewer ranks")


def _size_key(opts: Options, workers: int) -> str:
    if opts.samples_per_rank:
        k = opts.samples_per_rank
        return f"samples_per_rank {k} x {workers} training ranks = {k * workers}"
    return f"train_samples {opts.train_samples}" if opts.train_samples else ""


def train_size(opts: Options, workers: int, n_train: int | None) -> int | None:
    """How many training samples a run trains on: its subset, or all n_train (None: not known yet)."""
    if opts.samples_per_rank:
        return opts.samples_per_rank * workers
    return opts.train_samples or n_train


def data_ranks(algorithm: str, ranks: int) -> int:
    """How many ranks train on data: all of them, except the parameter server's rank 0."""
    return ranks - 1 if algorithm == "paramserver" else ranks


def option_flag(name: str) -> str:
    """An option's command-line flag: batch_size -> --batch-size."""
    return "--" + name.replace("_", "-")
