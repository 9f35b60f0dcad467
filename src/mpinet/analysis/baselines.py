"""What every speedup divides by, and which speedups a headline may quote.

Two scaling axes (Hoefler and Belli, SC15, rule 1: name the base and give its absolute time):
- `speedup`, throughput scaling: serial at the run's batch per rank ÷ the run, so the global batch
  grows with the ranks and a P-rank run does P-fold fewer updates than its base;
- `global_speedup`, a fixed global batch: serial at the run's global batch (per-rank batch × training
  ranks) ÷ the run, which does exactly serial's updates (distributed == serial), so the ratio is
  parallelization alone.
Beside both, `best_serial_speedup` divides by the study's fastest serial run at any batch (seconds per
sample), so no speedup comes only from a slow base. Every base is a serial run on the same data and
model, timed by the same engine.
"""

import numpy as np
import pandas as pd

from mpinet.engine.options import COMPUTE_OPTIONS
from mpinet.study.experiments import global_batches

# A run's serial base: same data, every option that decides compute time, same seed.
BASELINE_KEYS = ["dataset", *COMPUTE_OPTIONS, "seed"]
# A slowest rank with less of a core than this while training shared its core (runs.csv's contention).
CLEAN_CPU_SHARE = 0.9
# An efficiency above this is superlinear: flagged and never quoted as a headline.
SUPERLINEAR = 1.1


def baseline_key(runs: pd.DataFrame, batch: str = "batch_size", seed: bool = True) -> pd.Series:
    """Which serial runs are each run's base: the same data, model and seed, the batch in column
    `batch` (the run's per-rank batch, or its global batch), and the same training set (strong
    scaling) or the same samples per rank (weak scaling). seed=False: any seed."""
    samples = runs["trained_samples"].where(runs["samples_per_rank"] == 0, 0)
    keys = runs[[*BASELINE_KEYS, "samples_per_rank"]].assign(samples=samples, batch_size=runs[batch])
    if not seed:
        keys = keys.drop(columns="seed")
    return keys.astype(str).agg("|".join, axis=1) + "|" + runs["timed_by"].astype(str)


def serial_runs(runs: pd.DataFrame) -> pd.Series:
    """Which runs are serial baselines."""
    return (runs["algorithm"] == "serial") & (runs["ranks"] == 1)


def add_bases(runs: pd.DataFrame, experiment: list[str]) -> pd.DataFrame:
    """runs with both axes' bases and speedups, the best serial run's, and the keys behind them
    (_baseline, _global_baseline, _best: removed by the caller once the intervals are drawn).

    Every time a speedup divides is pooled alike, the mean of its launches' median epochs: a base's
    over its serial runs (the clean ones where it has any: base_runs), a run's over the launches of its
    experiment (the columns `experiment`) that are as clean as it is (_clean: launch_clean), so those
    launches share their speedups and serial's over itself is 1."""
    runs = base_keys(runs.assign(global_batch=global_batches(runs)))
    weak = runs["samples_per_rank"] > 0
    runs["charged_epoch_s"] = charged_epoch_s(runs)
    runs["s_per_sample"] = runs["charged_epoch_s"] / runs["trained_samples"]
    runs["_clean"] = launch_clean(runs)
    pooled = runs.groupby([*experiment, "_clean"], sort=False, dropna=False)["charged_epoch_s"].transform("mean")
    serial = base_runs(runs)
    g = serial.groupby("_baseline")
    base = pd.DataFrame({"serial_epoch_s": g["median_epoch_s"].mean(), "serial_isolated": g["isolated"].all()})
    base["serial_cpu_share"] = g["cpu_share"].min()
    # a base's time per sample is of the samples it trained itself: in a weak-scaling sweep a P-rank
    # run trains P-fold its base's samples, so dividing by the run's would shrink the base P-fold
    per_sample = serial.assign(_per_sample=serial["median_epoch_s"] / serial["trained_samples"])
    base["serial_s_per_sample"] = per_sample.groupby("_baseline")["_per_sample"].mean()
    runs = runs.merge(base, left_on="_baseline", right_index=True, how="left")
    ratio = runs["serial_epoch_s"] / pooled
    runs["speedup"] = ratio.where(~weak)
    # weak scaling: epoch time of 1 rank with K samples / epoch time of P ranks with P·K samples
    runs["weak_efficiency"] = ratio.where(weak)
    same_updates = runs["_global_baseline"].map(g["median_epoch_s"].mean())
    runs["global_serial_s_per_sample"] = runs["_global_baseline"].map(base["serial_s_per_sample"])
    runs["global_speedup"] = same_updates / pooled
    runs["global_efficiency"] = runs["global_speedup"] / runs["ranks"]
    return _add_best_serial(runs, serial, pooled / runs["trained_samples"])


def launch_clean(runs: pd.DataFrame) -> pd.Series:
    """Whether a launch's own conditions let its time be quoted: timed alone, a core for every rank,
    and no rank's core taken while it trained (a run recorded before CPU time was kept counts as clean)."""
    return ~launch_faults(runs).any(axis=1)


def launch_faults(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run, each condition that keeps its time from being quoted (a column each, named as a reader
    says it). Reads runs.csv's contention where a table has it, else the CPU share it is made from."""
    if "contention" in runs:
        taken = runs["contention"] == "contended"
    else:
        taken = runs["cpu_share"] < CLEAN_CPU_SHARE
    return pd.DataFrame(
        {
            "not timed alone": ~runs["isolated"].astype(bool),
            "on more ranks than cores": runs["oversubscribed"].astype(bool),
            "contended": taken.astype(bool),
        },
        index=runs.index,
    )


def base_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The serial runs a base pools: per base, its clean launches where it has any, else all of them."""
    serial = runs[serial_runs(runs)]
    clean = launch_clean(serial)
    key = serial["_baseline"]
    return serial[clean | ~clean.groupby(key).transform("any")]


def charged_epoch_s(runs: pd.DataFrame) -> pd.Series:
    """The epoch time a speedup divides by: the median epoch, plus for an `auto` run its experiment's
    trials spread over its epochs (what choosing cost is part of what auto costs); runs recorded before
    0.10.0 kept no trial time and are charged none."""
    trials = runs["auto_trials_s"] if "auto_trials_s" in runs else pd.Series(np.nan, index=runs.index)
    return runs["median_epoch_s"] + trials.fillna(0.0) / runs["epochs"]


def base_keys(runs: pd.DataFrame) -> pd.DataFrame:
    """runs with the keys of their bases: _baseline (serial at the run's batch per rank),
    _global_baseline (at its global batch) and _best (serial at any batch and seed); weak-scaling
    runs have only the first."""
    weak = runs["samples_per_rank"] > 0
    return runs.assign(
        _baseline=baseline_key(runs),
        _global_baseline=baseline_key(runs, "global_batch").where(~weak),
        _best=baseline_key(runs.assign(_any=0), "_any", seed=False).where(~weak),
    )


def _add_best_serial(runs: pd.DataFrame, serial: pd.DataFrame, s_per_sample: pd.Series) -> pd.DataFrame:
    """best_serial_batch, best_serial_seed and best_serial_s_per_sample: the study's fastest serial
    experiment on the same data and model at any batch and seed (the mean over its launches), and
    the speedup over it of each run's experiment (its seconds a sample pooled alike)."""
    per_experiment = serial.groupby(["_best", "batch_size", "seed"])["s_per_sample"].mean()
    best = per_experiment.reset_index().sort_values("s_per_sample", kind="stable").drop_duplicates("_best")
    best = best.set_index("_best")
    runs["best_serial_batch"] = runs["_best"].map(best["batch_size"]).astype("Int64")
    runs["best_serial_seed"] = runs["_best"].map(best["seed"]).astype("Int64")
    runs["best_serial_s_per_sample"] = runs["_best"].map(best["s_per_sample"])
    runs["best_serial_speedup"] = runs["best_serial_s_per_sample"] / s_per_sample
    return runs


def cpu_contention(cpu_share: pd.Series) -> pd.Series:
    """Per run, `clean`, `contended` (its slowest rank got less than CLEAN_CPU_SHARE of a core while
    training) or `unknown` (recorded before CPU time was kept)."""
    out = np.where(cpu_share < CLEAN_CPU_SHARE, "contended", "clean")
    return pd.Series(np.where(cpu_share.isna(), "unknown", out), index=cpu_share.index)


def speedup_notes(runs: pd.DataFrame) -> pd.Series:
    """Per run, why its speedups are not quoted as a headline (empty: they may be): not timed alone,
    run or base contended, more ranks than cores, an MPI run on 1 rank, or superlinear."""
    reasons = [
        (~runs["isolated"].astype(bool) | (runs["serial_isolated"] == False), "not timed alone"),  # noqa: E712 (NaN: no base)
        (runs["contention"] == "contended", "contended"),
        (runs["serial_cpu_share"] < CLEAN_CPU_SHARE, "its serial base contended"),
        (runs["oversubscribed"].astype(bool), "more ranks than cores"),
        ((runs["ranks"] == 1) & (runs["algorithm"] != "serial"), "an MPI run on 1 rank"),
    ]
    notes = [[] for _ in range(len(runs))]
    for mask, why in reasons:
        for i in np.flatnonzero(mask.to_numpy()):
            notes[i].append(why)
    efficiencies = runs[["efficiency", "global_efficiency"]].max(axis=1).to_numpy()
    for i, eff in enumerate(efficiencies):
        if eff > SUPERLINEAR:
            notes[i].append(f"superlinear: efficiency {eff:.3f} > {SUPERLINEAR} (a slow or contended base?)")
    serial = serial_runs(runs).to_numpy()
    return pd.Series(["" if s else "; ".join(n) for n, s in zip(notes, serial)], index=runs.index)


def notes(runs: pd.DataFrame) -> pd.Series:
    """runs.csv's speedup_note as text ("" where a table read back has it empty)."""
    if "speedup_note" not in runs:
        return pd.Series("", index=runs.index)
    return runs["speedup_note"].astype(object).where(runs["speedup_note"].notna(), "")


def has_speedup(runs: pd.DataFrame) -> pd.Series:
    """The runs with a speedup on either axis (a fixed-global-batch run may have no serial base at
    its batch per rank, only at its global batch)."""
    measured = runs["speedup"].notna()
    return measured | runs["global_speedup"].notna() if "global_speedup" in runs else measured


def reason_kinds(note: str) -> list[str]:
    """A speedup_note's reasons without their values ("superlinear: efficiency 1.23 > 1.1 ..." is
    "superlinear"), so that runs left out for one reason count as one reason."""
    return [reason.split(":")[0] for reason in note.split("; ") if reason]


def quotable(runs: pd.DataFrame) -> pd.Series:
    """The runs whose speedups a headline, a best speedup or a reference check may use."""
    measured = ~serial_runs(runs) & has_speedup(runs)
    if "speedup_note" in runs:
        return measured & (notes(runs) == "")
    if "speedup_isolated" in runs:  # a runs.csv from before 0.10.0: timed alone is all it knows
        return measured & runs["speedup_isolated"].astype(bool)
    return measured
