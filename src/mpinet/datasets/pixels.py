"""Image features from uint8 pixels: the values trained on, and their statistics.

A pixel's value is pixel * PIXEL_SCALE in float32, then, for a standardized dataset, minus its
channel's mean and times its inverse std in float32: the operations mpinet 0.6 applied. Images
that are not standardized are stored as their pixels (a quarter of float32's bytes to write,
hash, cache and map) and become values batch by batch, as fast as float32 rows are copied;
standardized images are stored as float32 values, since three more passes per read would cost
a training step up to 10 % (benchmarks/decode.py).

Statistics (a channel's mean and std for standardizing, the values' range and moments for
summary.json) come from exact integer counts per channel, which rows can add in any order: the
decode workers count their images and the sums equal the counts of the finished array.
"""

from functools import cache

import numpy as np

PIXEL_SCALE = np.float32(1 / 255)
CHANNELS = 3  # RGB, laid out pixel by pixel with the channel fastest
SUM, SQUARES, LOW, HIGH = range(4)  # the rows of a counts array
# lines summed in float32 at once: 256 squares of pixels (255**2 each) stay below 2**24, so every
# partial sum is an integer float32 holds exactly, in any order the BLAS adds them
SUMMED_LINES = 256


def to_values(pixels: np.ndarray, out: np.ndarray, standardization: tuple | None = None) -> np.ndarray:
    """uint8 pixels as trained on, written into out (float32 or float64, the same shape) and
    returned: computed in float32 (then cast), so both training dtypes see the same values."""
    values = out if out.dtype == np.float32 else np.empty(out.shape, np.float32)
    np.copyto(values, pixels)
    _to_values_in_place(values, standardization)
    if values is not out:
        out[...] = values
    return out


def rows_to_values(source: np.ndarray, rows, out: np.ndarray) -> np.ndarray:
    """to_values of the given rows of a (memory-mapped) pixel array, into out[:len(rows)]: each row
    cast into place (as fast as copying float32 rows, for a quarter of the bytes read), then scaled
    there while it is in the cache."""
    out = out[: len(rows)]
    if out.dtype != np.float32:
        return to_values(np.stack([source[r] for r in rows]) if len(rows) else source[:0], out)
    for i, r in enumerate(rows):
        np.copyto(out[i], source[r])
        out[i] *= PIXEL_SCALE
    return out


def _to_values_in_place(values: np.ndarray, standardization: tuple | None) -> np.ndarray:
    """float32 pixels (exact small integers) to values: times PIXEL_SCALE in place (2x faster than a
    multiplication of uint8 by float32), then standardized."""
    values *= PIXEL_SCALE
    if standardization is not None:
        mean, inv_std = standardization
        values -= mean
        values *= inv_std
    return values


def standardization(stats: dict, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """float32[n_features] means and inverse stds from per-channel statistics (channel_stats),
    tiled over the pixels."""
    reps = n_features // CHANNELS
    mean, std = np.asarray(stats["mean"]), np.asarray(stats["std"])
    return np.tile(mean.astype(np.float32), reps), np.tile((1 / std).astype(np.float32), reps)


def channel_counts(pixels: np.ndarray) -> np.ndarray:
    """int64[4, CHANNELS]: each channel's sum, sum of squares, min and max of uint8 pixel rows.
    Exact integers: add_counts of any split of the rows gives the whole's."""
    line = CHANNELS * _pixels_per_line(pixels.shape[-1] // CHANNELS)
    lines = pixels.reshape(-1, line)  # reductions down the columns of a wide array are fast
    columns = np.zeros((2, line))  # sums and sums of squares per column: exact integers in float64
    low, high = np.full(line, 255, np.uint8), np.zeros(line, np.uint8)
    values = np.empty((min(len(lines), SUMMED_LINES), line), np.float32)
    ones = np.ones(len(values), np.float32)
    for start in range(0, len(lines), SUMMED_LINES):
        block = lines[start : start + SUMMED_LINES]
        v, n = values[: len(block)], len(block)
        np.copyto(v, block)
        columns[0] += ones[:n] @ v  # a BLAS sum down the columns: 2x numpy's integer sums
        v *= v
        columns[1] += ones[:n] @ v
        np.minimum(low, block.min(axis=0), out=low)
        np.maximum(high, block.max(axis=0), out=high)
    counts = np.empty((4, CHANNELS), dtype=np.int64)
    counts[:LOW] = columns @ _channel_of_column(line)  # a column holds channel c when its index is c mod 3
    counts[LOW] = [low[c::CHANNELS].min() for c in range(CHANNELS)]
    counts[HIGH] = [high[c::CHANNELS].max() for c in range(CHANNELS)]
    return counts


@cache
def _channel_of_column(line: int) -> np.ndarray:
    """float64[line, CHANNELS]: 1 where a line's column holds that channel."""
    select = np.zeros((line, CHANNELS))
    select[np.arange(line), np.arange(line) % CHANNELS] = 1
    return select


def no_counts() -> np.ndarray:
    """The counts of no pixels, to add others to."""
    counts = np.zeros((4, CHANNELS), dtype=np.int64)
    counts[LOW], counts[HIGH] = 255, 0
    return counts


def add_counts(total: np.ndarray, counts: np.ndarray) -> None:
    """total += counts, in place."""
    total[SUM] += counts[SUM]
    total[SQUARES] += counts[SQUARES]
    np.minimum(total[LOW], counts[LOW], out=total[LOW])
    np.maximum(total[HIGH], counts[HIGH], out=total[HIGH])


def channel_stats(counts: np.ndarray, n_pixels: int) -> dict:
    """summary.json's standardization: each channel's mean and std (a constant channel: 1) of
    the pixels as values, pixel * PIXEL_SCALE, from the counts of n_pixels pixels."""
    scale = float(PIXEL_SCALE)
    mean = counts[SUM] * scale / n_pixels
    std = np.sqrt(np.maximum(counts[SQUARES] * scale**2 / n_pixels - mean**2, 0))
    std[std == 0] = 1.0
    return {"mean": mean.tolist(), "std": std.tolist(), "from": "training split"}


def value_stats(counts: np.ndarray, n_pixels: int) -> dict:
    """min, max, mean and std of the values of n_pixels pixels from their counts: the range exactly
    as to_values computes it, the moments from the exact sums."""
    scale = float(PIXEL_SCALE)
    mean = float(counts[SUM].sum()) * scale / (n_pixels * CHANNELS)
    square = float(counts[SQUARES].sum()) * scale**2 / (n_pixels * CHANNELS)
    ends = to_values(np.array([counts[LOW].min(), counts[HIGH].max()], np.uint8), np.empty(2, np.float32))
    return {"min": float(ends[0]), "max": float(ends[1]), "mean": mean, "std": float(np.sqrt(max(square - mean**2, 0)))}


@cache
def _pixels_per_line(n_pixels: int) -> int:
    """The largest divisor of n_pixels up to 512: a row of pixels reshaped into lines this long."""
    return max(d for d in range(1, min(n_pixels, 512) + 1) if n_pixels % d == 0)
