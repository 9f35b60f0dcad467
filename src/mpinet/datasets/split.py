"""The seeded, stratified train/test split of a dataset that comes without a test set."""

import numpy as np

from mpinet import MpinetError


def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded per-class split; every class with at least 2 samples lands in both splits. Returns sorted index arrays."""
    if not 0 < test_fraction < 1:
        raise MpinetError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(test_fraction * len(idx)))
        k = min(max(k, 1), len(idx) - 1) if len(idx) >= 2 else 0
        test.append(idx[:k])
        train.append(idx[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))
