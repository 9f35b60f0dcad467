"""The on-disk form of a preprocessed dataset, shared by the preprocessing and training steps.

A dataset directory holds feature arrays and int64 label arrays as .npy files (memory-mappable),
`classes.json` (class names, index = label) and `summary.json`. Features are float32 values, or
uint8 pixels (images that are not standardized), which become values batch by batch
(mpinet.datasets.pixels).
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mpinet import MpinetError
from mpinet.datasets import pixels

FILES = ("train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy", "classes.json", "summary.json")


@dataclass
class Arrays:
    """Training and test arrays of one dataset; x: float32 or uint8 pixels [n, features], y: int64[n]."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    classes: list[str]
    fingerprint: str = ""  # sha256 of the arrays and class names: what a checkpoint must match


def load(directory: str | Path, check_values: bool = True) -> Arrays:
    """Open a dataset directory memory-mapped and check it is consistent."""
    d = Path(directory)
    for name in FILES[:5]:
        if not (d / name).is_file():
            raise MpinetError(f"{d / name}: missing; expected a dataset written by the preprocessing step")
    try:
        arrays = Arrays(
            *(np.load(d / f, mmap_mode="r") for f in FILES[:4]),
            classes=json.loads((d / "classes.json").read_text()),
        )
    except ValueError as e:
        raise MpinetError(f"{d}: unreadable array file ({e})") from None
    arrays.fingerprint = _recorded_fingerprint(d) or fingerprint(d)
    check(arrays, str(d), check_values)
    return arrays


def check(a: Arrays, where: str, check_values: bool = True) -> None:
    """Raise MpinetError naming the problem if the arrays do not form a usable dataset."""
    for split in ("train", "test"):
        x, y = getattr(a, f"{split}_x"), getattr(a, f"{split}_y")
        if x.ndim != 2 or y.ndim != 1:
            raise MpinetError(f"{where}: {split}_x must be 2-D and {split}_y 1-D, got {x.shape} and {y.shape}")
        if not (np.issubdtype(x.dtype, np.floating) or x.dtype == np.uint8):  # values, or pixels
            raise MpinetError(f"{where}: {split}_x holds {x.dtype} features; expected float values or uint8 pixels")
        if x.dtype == np.uint8 and x.shape[1] % pixels.CHANNELS:
            raise MpinetError(f"{where}: {split}_x holds {x.shape[1]} uint8 features; expected RGB pixels (3 each)")
        if len(x) != len(y):
            raise MpinetError(f"{where}: {split}_x has {len(x)} rows but {split}_y has {len(y)} labels")
        if len(x) == 0:
            raise MpinetError(f"{where}: the {split} split is empty")
        if not np.issubdtype(y.dtype, np.integer):
            raise MpinetError(f"{where}: {split}_y must hold integer labels, got {y.dtype}")
        bad = (np.asarray(y) < 0) | (np.asarray(y) >= len(a.classes))
        if bad.any():
            raise MpinetError(
                f"{where}: {split}_y[{int(np.argmax(bad))}] = {int(y[np.argmax(bad)])} is outside the "
                f"{len(a.classes)} classes of classes.json"
            )
        if check_values:
            row = first_nonfinite_row(x)
            if row is not None:
                raise MpinetError(f"{where}: {split}_x row {row} holds NaN or infinite features")
    if a.train_x.shape[1] != a.test_x.shape[1]:
        raise MpinetError(f"{where}: train_x has {a.train_x.shape[1]} features but test_x has {a.test_x.shape[1]}")
    if len(a.classes) < 2:
        raise MpinetError(f"{where}: classes.json lists {len(a.classes)} class; at least 2 are needed")


SUBSET_SEED = 20240  # one fixed seed: every design, rank count and seed trains on the same subset


def subset_rows(train_y: np.ndarray, n: int, n_classes: int) -> np.ndarray:
    """Row indices (ascending, so the memory map is read in file order) of the first n samples of
    one fixed, class-stratified ranking of the training set: every class's rows in a seeded random
    order, interleaved by their position within the class (the j-th of a class's m rows ranks at
    j / m). Every class is in any subset of at least n_classes rows, each class's share tracks its
    share of the data, and a smaller subset lies inside every larger one."""
    y = np.asarray(train_y)
    key = np.empty(len(y))
    for c in range(n_classes):
        rows = np.flatnonzero(y == c)
        rng = np.random.default_rng([SUBSET_SEED, c])
        key[rng.permutation(rows)] = np.arange(len(rows)) / max(len(rows), 1)
    ranking = np.lexsort((y, key))  # by position within the class, ties by class
    return np.sort(ranking[:n])


def prepared_size(directory: str | Path) -> tuple[int, int] | None:
    """(training samples, classes) of a prepared dataset from its summary.json, or None if not prepared."""
    try:
        summary = json.loads((Path(directory) / "summary.json").read_text())
        return sum(summary["counts"]["train"].values()), len(summary["classes"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def features(stored: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Stored feature rows as the trainer sees them, written into out (float32 or float64, the same
    shape) and returned: float32 copied or cast; pixels as pixels.to_values makes them."""
    if stored.dtype == np.uint8:
        return pixels.to_values(stored, out)
    out[...] = stored
    return out


def first_nonfinite_row(x: np.ndarray, chunk_bytes: int = 32 << 20) -> int | None:
    """Index of the first row holding NaN or inf, or None (pixels are always finite).

    A memory map is read through its file in chunks instead of through the mapping, so the
    scan leaves no pages of the whole dataset resident in this process.
    """
    if np.issubdtype(x.dtype, np.integer):
        return None
    rows = max(1, chunk_bytes // max(1, x.itemsize * x.shape[1]))
    filename = getattr(x, "filename", None)
    if filename is None:
        chunks = ((s, x[s : s + rows]) for s in range(0, len(x), rows))
    else:
        chunks = _file_chunks(filename, x, rows)
    for start, c in chunks:
        ok = np.isfinite(c).all(axis=1)
        if not ok.all():
            return start + int(np.argmin(ok))
    return None


def _file_chunks(filename, x: np.ndarray, rows: int):
    buf = np.empty((rows, x.shape[1]), dtype=x.dtype)
    with open(filename, "rb") as f:
        f.seek(x.offset)
        for start in range(0, len(x), rows):
            n = min(rows, len(x) - start)
            f.readinto(memoryview(buf[:n]).cast("B"))
            yield start, buf[:n]


def fingerprint(directory: str | Path) -> str:
    """sha256 over the four array files and classes.json, each its name and its bytes."""
    digest = ContentDigest()
    for name in FILES[:5]:
        digest.add_file(Path(directory) / name)
    return digest.hexdigest()


class ContentDigest:
    """fingerprint()'s sha256 fed piece by piece, the files in FILES' order: a writer that hashes rows
    as it writes them (images) ends where reading the finished files would."""

    def __init__(self):
        self._h = hashlib.sha256()
        self._files = 0

    def start(self, name: str) -> None:
        """The next file begins; its bytes follow through update()."""
        if name != FILES[self._files]:
            raise ValueError(f"content digest: {name} out of order; expected {FILES[self._files]}")
        self._files += 1
        self._h.update(name.encode() + b"\0")

    def update(self, data) -> None:
        self._h.update(data)

    def add_file(self, path: Path) -> None:
        """A whole file, read in 8 MB chunks."""
        self.start(path.name)
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                self._h.update(chunk)

    def hexdigest(self) -> str:
        if self._files != 5:
            raise ValueError(f"content digest: {self._files} of the 5 files fed")
        return self._h.hexdigest()


def _recorded_fingerprint(d: Path) -> str | None:
    """The fingerprint preprocessing wrote, if summary.json is newer than every array file."""
    summary = d / "summary.json"
    try:
        recorded = json.loads(summary.read_text()).get("fingerprint")
        newest = max((d / name).stat().st_mtime_ns for name in FILES[:5])
        fresh = summary.stat().st_mtime_ns >= newest
    except (OSError, ValueError, AttributeError):
        return None
    return recorded if fresh and isinstance(recorded, str) else None


def value_stats(x: np.ndarray) -> dict:
    """min, max, mean and std of a (memory-mapped) array's features as trained on, read in chunks
    (float64 sums of float32 rows; pixels from their exact counts)."""
    if x.dtype == np.uint8:
        counts = pixels.no_counts()
        for start in range(0, len(x), 1024):
            pixels.add_counts(counts, pixels.channel_counts(np.asarray(x[start : start + 1024])))
        return pixels.value_stats(counts, x.size // pixels.CHANNELS)
    lo, hi, s, ss = np.inf, -np.inf, 0.0, 0.0
    for start in range(0, len(x), 1024):
        c = np.asarray(x[start : start + 1024])
        lo, hi = min(lo, float(c.min())), max(hi, float(c.max()))
        s += float(c.sum(axis=1, dtype=np.float64).sum())
        ss += float(np.einsum("ij,ij->i", c, c).sum(dtype=np.float64))  # per-row dot products: no temporaries
    n = x.size
    mean = s / n
    return {"min": lo, "max": hi, "mean": mean, "std": float(np.sqrt(max(ss / n - mean**2, 0)))}
