"""Time limits for SLURM: how many minutes a training job asks for, from what is known about it.

A limit that says nothing about the job (the same 30 minutes for a 1-second and a 1-hour run) keeps
the scheduler from backfilling it, and a pool of 8 such runs asks for 4 hours. The estimate, best
source first:

1. the same experiment's earlier epochs (its checkpoint, when a run was interrupted): the median
   epoch (training + evaluation) times the epochs still to run;
2. the calibrated cost model (mpinet.analysis.costmodel), from the study's earlier runs.csv and commbench.csv:
   compute per sample measured by 1-rank runs of the same configuration (read between the batches
   they ran, costmodel.per_sample_at), plus the exchanges;
3. an uncalibrated bound from the network's size: 6 floating-point operations per parameter and
   training sample (forward, backward, update) at UNCALIBRATED_FLOPS, and PER_STEP_S of Python per
   step, whichever is larger (small networks are bound by the steps, large ones by the arithmetic).

The request is STARTUP_S plus SAFETY times the estimate, in whole minutes, at least FLOOR_MINUTES.
A job that still runs out is retried and resumes from its checkpoint; the retry asks for twice as much.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mpinet.analysis import costmodel
from mpinet.engine.options import data_ranks
from mpinet.layout import runs_table
from mpinet.study.experiments import hidden_text

SAFETY = 3.0  # times the estimate: epoch times on a shared node drift by 20-25 %, first epochs are slower
STARTUP_S = 20.0  # Snakemake's job start inside an allocation, srun, imports, loading the data
FLOOR_MINUTES = 1  # per experiment; a pool asks for the sum of its members
UNCALIBRATED_FLOPS = 2e9  # per rank: a quarter of what one core sustains in the large-batch GEMMs here
PER_STEP_S = 5e-4  # Python and numpy call overhead per step, several times what the engine spends


@dataclass(frozen=True)
class Estimate:
    epoch_s: float  # one epoch: training and evaluation
    epochs: int  # still to run
    source: str  # "earlier epochs", "cost model" or "uncalibrated"

    def minutes(self, attempt: int = 1) -> int:
        """The request in whole minutes (doubled on every retry)."""
        seconds = STARTUP_S + SAFETY * self.epoch_s * self.epochs
        return max(FLOOR_MINUTES, math.ceil(seconds / 60)) * 2 ** max(0, attempt - 1)


def from_checkpoint(checkpoint: Path, epochs: int) -> Estimate | None:
    """From an interrupted run's saved epochs (the checkpoint's metrics sidecar), or None."""
    sidecar = checkpoint.with_name(f"{checkpoint.name}.metrics.jsonl")
    try:
        rows = [json.loads(line) for line in sidecar.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    times = [r["time_s"] + r.get("eval_s", 0.0) for r in rows if "time_s" in r]
    if not times:
        return None
    return Estimate(float(np.median(times)), max(0, epochs - len(rows)), "earlier epochs")


def from_model(row: dict, shape: dict, runs: pd.DataFrame, link: costmodel.Link | None) -> Estimate | None:
    """From the calibrated cost model: `runs` is a study's runs.csv, `shape` the data's sizes
    (train_samples trained on, test_samples, features, classes). None without a 1-rank run of the
    same configuration at some batch."""
    if runs is None or runs.empty or link is None:
        return None
    run = {**row, **shape, "hidden": hidden_text(row["hidden"])}
    # a time limit, not a result: every engine's 1-rank runs count
    compute = costmodel.fit_compute(runs.assign(timed_by="any"))
    per_sample = costmodel.per_sample_at(compute, (*(run[k] for k in costmodel.COMPUTE_KEYS), "any"))
    if per_sample is None or not np.isfinite(per_sample):
        return None
    sizes = costmodel.layer_sizes(shape["features"], run["hidden"], shape["classes"])
    itemsize = np.dtype(row["dtype"]).itemsize
    work = costmodel.Work(shape["train_samples"], int(row["batch_size"]), per_sample, sizes, itemsize)
    train = costmodel.epoch_seconds(row["algorithm"], int(row["ranks"]), work, link, int(row["sync_every"]))
    # evaluation: a forward pass (a third of a training step's work) over the test set, split over the ranks
    evaluate = per_sample / 3 * shape["test_samples"] / int(row["ranks"])
    return Estimate(train + evaluate, int(row["epochs"]), "cost model")


def uncalibrated(row: dict, shape: dict) -> Estimate:
    """The bound from the network's size and the step count alone."""
    size = costmodel.n_params(shape["features"], row["hidden"], shape["classes"])
    ranks = int(row["ranks"])
    workers = max(1, data_ranks(row["algorithm"], ranks))
    samples = shape["train_samples"]
    steps = math.ceil(samples / (int(row["batch_size"]) * workers))
    # the parameter server's rank 0 applies every worker's update in turn
    serial_steps = steps * (workers if row["algorithm"] == "paramserver" and ranks > 1 else 1)
    train = max(6 * size * samples / workers / UNCALIBRATED_FLOPS, serial_steps * PER_STEP_S)
    evaluate = 2 * size * shape["test_samples"] / ranks / UNCALIBRATED_FLOPS
    return Estimate(train + evaluate, int(row["epochs"]), "uncalibrated")


def estimate(row, shape, checkpoint: Path | None, runs, link) -> Estimate:
    """The best estimate there is for one experiment (a row of the experiment table)."""
    if checkpoint is not None and (e := from_checkpoint(checkpoint, int(row["epochs"]))):
        return e
    return from_model(row, shape, runs, link) or uncalibrated(row, shape)


def request(row: dict, data_dir: Path, checkpoint: Path | None, runs, link, attempt: int = 1) -> int:
    """Minutes to ask SLURM for one experiment: its best estimate (estimate) at its data's size."""
    return estimate(row, data_shape(data_dir, row), checkpoint, runs, link).minutes(attempt)


def expected_seconds(row: dict, data_dir: Path, checkpoint: Path | None, runs, link) -> float:
    """What one experiment's best estimate expects it to take, without request's safety factor: the
    order a packed allocation starts its steps of one width in (longest first)."""
    e = estimate(row, data_shape(data_dir, row), checkpoint, runs, link)
    return e.epoch_s * e.epochs


def data_shape(data_dir: Path, row: dict) -> dict:
    """The sizes the estimate needs, from a prepared dataset's arrays (read as memory maps)."""
    from mpinet.engine.options import data_ranks

    train_y = np.load(Path(data_dir) / "train_y.npy", mmap_mode="r")
    test_y = np.load(Path(data_dir) / "test_y.npy", mmap_mode="r")
    train_x = np.load(Path(data_dir) / "train_x.npy", mmap_mode="r")
    classes = json.loads((Path(data_dir) / "classes.json").read_text())
    workers = data_ranks(row["algorithm"], int(row["ranks"]))
    per_rank = int(row.get("samples_per_rank") or 0)
    n = per_rank * workers if per_rank else int(row.get("train_samples") or 0) or len(train_y)
    return {
        "train_samples": min(n, len(train_y)),
        "test_samples": len(test_y),
        "features": int(train_x.shape[1]),
        "classes": len(classes),
    }


def calibration(study_dir: Path) -> tuple[pd.DataFrame | None, costmodel.Link | None]:
    """A study's earlier runs.csv and the link fitted to its commbench.csv, where they exist."""
    runs_csv, bench_csv = runs_table(study_dir), Path(study_dir) / "metrics/commbench.csv"
    try:
        runs = pd.read_csv(runs_csv)
        bench = pd.read_csv(bench_csv)
        link = costmodel.measured_link(bench, "ping-pong")
    except (OSError, ValueError, KeyError, IndexError, pd.errors.EmptyDataError):
        return None, None
    return runs, link
