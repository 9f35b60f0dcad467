"""The 95 % intervals of a study's runs: per experiment, a two-level bootstrap of its launches and of each
speedup's base (mpinet.analysis.confidence), and whether its launches settled."""

import numpy as np
import pandas as pd

from mpinet.analysis.baselines import base_runs
from mpinet.analysis.confidence import SEED, bootstrap_medians, interval
from mpinet.study.config import MEASURES


def timed_epochs(epochs: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each run's epoch times that its statistics use (epoch 1 left out when there are more)."""
    out = {}
    for run_dir, g in epochs.groupby("run_dir", sort=False):
        out[run_dir] = (g[g["epoch"] > 1] if len(g) > 1 else g)["time_s"].to_numpy()
    return out


def add_intervals(runs: pd.DataFrame, timed: dict, group: list[str]) -> pd.DataFrame:
    """<measure>_ci_low/_ci_high for every measure a reference may check (mpinet.study.config.MEASURES),
    ci_launches (the launches an interval covers; with 1 it covers only that launch's epochs) and
    unsettled, per group of runs: a two-level bootstrap (mpinet.analysis.confidence) of the group's
    launches and of each base's, independently."""
    serial = base_runs(runs)
    # serial runs by their own key (a run's base at its batch per rank or at its global batch), and by
    # the best serial experiment's (any batch and seed)
    by_key = serial.groupby("_baseline")["run_dir"].agg(list).to_dict()
    by_experiment = serial.groupby(["_best", "batch_size", "seed"])["run_dir"].agg(list).to_dict()
    values = []
    for _, rows in runs.groupby(group, sort=False, dropna=False):
        launches = [timed[d] for d in rows["run_dir"]]
        # an auto run is charged its experiment's trials, spread over its epochs (baselines.charged_epoch_s)
        mine = bootstrap_medians(launches, seed=SEED + 1) + _trials_per_epoch(rows.iloc[0])
        first = rows.iloc[0]
        best = (first["_best"], first["best_serial_batch"], first["best_serial_seed"])
        own = set(rows["run_dir"])
        ratio = _over(timed, by_key.get(first["_baseline"], []), mine, own)
        same_updates = _over(timed, by_key.get(first["_global_baseline"], []), mine, own)
        weak, p = first["samples_per_rank"] > 0, first["ranks"]
        cis = {
            "median_epoch_s": interval(mine),
            "speedup": interval(ratio * np.nan if weak else ratio),
            "efficiency": interval(ratio * np.nan if weak else ratio / p),
            "weak_efficiency": interval(ratio if weak else ratio * np.nan),
            "global_speedup": interval(same_updates),
            "global_efficiency": interval(same_updates / p),
            "best_serial_speedup": interval(_over(timed, by_experiment.get(best, []), mine, own)),
        }
        row = {f"{m}_ci_{end}": v for m in MEASURES for end, v in zip(("low", "high"), cis[m])}
        row |= {"ci_launches": len(rows), "unsettled": unsettled(launches)}
        values += [(i, row) for i in rows.index]
    table = pd.DataFrame([v for _, v in values], index=[i for i, _ in values])
    return runs.join(table)


def _trials_per_epoch(run: pd.Series) -> float:
    trials = run.get("auto_trials_s", np.nan)
    return 0.0 if pd.isna(trials) else float(trials) / int(run["epochs"])


def _over(timed: dict, dirs: list[str], mine: np.ndarray, own: set[str]) -> np.ndarray:
    """A base's bootstrap replicates (its runs' launches and epochs) over a group's (NaN: no base);
    a group that is its own base (serial over itself) is 1 in every replicate, not two draws of it."""
    if not dirs:
        return mine * np.nan
    if set(dirs) == own:
        return np.ones_like(mine)
    return bootstrap_medians([timed[d] for d in dirs], seed=SEED) / mine


def unsettled(launches: list[np.ndarray]) -> bool:
    """Whether launches of one experiment disagree beyond their own intervals: two launches whose
    epoch-only 95 % intervals of the median do not overlap, so the launch, not the epochs, decides
    the number (more launches, or a quieter machine, settle it)."""
    if len(launches) < 2:
        return False
    bounds = [interval(bootstrap_medians([t], seed=SEED + 2)) for t in launches if len(t)]
    return bool(bounds) and max(lo for lo, _ in bounds) > min(hi for _, hi in bounds)
