"""Intervals that carry the noise: a bootstrap over launches and epochs, and a launch-level test
of whether two result sets differ.

A run's epoch times are not independent samples of the machine: two launches of the same
experiment differ by up to 20 % on a shared machine while each is steady within a few percent. So
the bootstrap resamples at both levels (launches with replacement, then each chosen launch's
epochs with replacement) and an interval from one launch says it only covers that launch's epochs.
The A/B test (`compare_launches`) treats each launch as one observation, so many epochs of one
launch cannot fake significance.
"""

import math

import numpy as np

LEVEL = 0.95
REPLICATES = 1000
SEED = 0  # fixed: the tables come out the same on every aggregation


def bootstrap_medians(launches: list[np.ndarray], replicates: int = REPLICATES, seed: int = SEED) -> np.ndarray:
    """Median epoch time of `replicates` two-level bootstrap samples: launches drawn with replacement,
    then each drawn launch's epochs with replacement, pooled. launches: each launch's epoch times."""
    rng = np.random.default_rng(seed)
    launches = [np.asarray(t, dtype=float) for t in launches if len(t)]
    if not launches:
        return np.full(replicates, np.nan)
    epochs = max(len(t) for t in launches)
    # launches of one experiment have the same epochs; pad a short one by repeating its own times
    table = np.stack([np.resize(t, epochs) for t in launches])
    n = len(launches)
    out = np.empty(replicates)
    chunk = max(1, (4 << 20) // (n * epochs))  # replicates per pass: at most 4 M draws in memory
    for start in range(0, replicates, chunk):
        k = min(chunk, replicates - start)
        which = rng.integers(0, n, size=(k, n))
        rows = rng.integers(0, epochs, size=(k, n, epochs))
        out[start : start + k] = np.median(table[which[:, :, None], rows].reshape(k, -1), axis=1)
    return out


def interval(replicates: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates (NaN, NaN when there are none)."""
    r = np.asarray(replicates, dtype=float)
    r = r[np.isfinite(r)]
    if not len(r):
        return math.nan, math.nan
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(r, [tail, 100 - tail])
    return float(low), float(high)


# Student's t quantile t(0.975, df) for df = 1..30; beyond, the normal 1.96 is within 2 %.
_T975 = tuple(
    float(t)
    for t in (
        "12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 "
        "2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042"
    ).split()
)


def t975(df: float) -> float:
    """t(0.975, df), linearly interpolated between integer degrees of freedom (Welch's df is fractional)."""
    if not df >= 1:
        return math.inf
    if df >= len(_T975):
        return 1.96 + (_T975[-1] - 1.96) * len(_T975) / df
    lo = int(df)
    frac = df - lo
    return _T975[lo - 1] + frac * (_T975[min(lo, len(_T975) - 1)] - _T975[lo - 1])


def compare_launches(a: np.ndarray, b: np.ndarray) -> dict:
    """B ÷ A of a per-launch measure (each launch one observation): the ratio of geometric means with
    its 95 % interval from Welch's t on the logarithms, and whether the interval excludes 1. Fewer
    than 2 launches on either side cannot be told from launch noise: the interval is NaN."""
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    ratio = float(np.exp(lb.mean() - la.mean())) if len(la) and len(lb) else math.nan
    out = {"ratio": ratio, "ratio_ci_low": math.nan, "ratio_ci_high": math.nan, "launches_a": len(la)}
    out["launches_b"] = len(lb)
    if len(la) < 2 or len(lb) < 2:
        return {**out, "differs": False}
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        return {**out, "ratio_ci_low": ratio, "ratio_ci_high": ratio, "differs": ratio != 1}
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1)) if va + vb > 0 else math.inf
    half = t975(df) * se
    low, high = ratio * math.exp(-half), ratio * math.exp(half)
    return {**out, "ratio_ci_low": low, "ratio_ci_high": high, "differs": not (low <= 1 <= high)}
