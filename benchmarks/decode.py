"""Benchmark: images per second from 150x150 JPEG files to a dataset's .npy, against Pillow's bare decode rate.

Run on demand (`make benchmark`). Writes a synthetic Intel-layout folder of JPEGs, then times, in
rounds that run every variant once (so the machine's drift touches them alike): (1) Pillow alone,
one process (mpinet's load_image: open, upright, RGB, array), (2) the same spread over the cores
with a process pool, (3) mpinet's preprocessing (`prepare_images`: decode in parallel, write the
uint8 pixels, hash and count them as they come) and (4) the same standardized. Medians of the rounds.

Then where the time between (2) and (3) goes: the pool stage writing uint8 pixels, the same writing
float32 rows as 0.6.0 stored them (4x the bytes), and the work prepare_images does besides decoding,
timed alone: the content fingerprint (sha256, in the parent while the workers decode) and the
pixels' channel counts (in the workers).

Last, the training step's reads: a batch of random rows of the prepared training array as the
trainer takes them, stored as float32 values against uint8 pixels turned into values, and the
same pixels standardized as they are read (the form standardized images are not stored in: it
would cost a step three more passes over its rows).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from mpinet.datasets import dataset, pixels
from mpinet.datasets.fetch import fetch
from mpinet.datasets.images import CHUNK, ImageOptions, load_image, prepare_images
from mpinet.datasets.synthetic import make_archive
from mpinet.engine.loop import _gather


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-class", type=int, default=300, help="training images per class (6 classes)")
    p.add_argument("--size", type=int, default=150, help="image side in pixels")
    p.add_argument("--repeats", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--workers", type=int, default=os.cpu_count(), help="decode processes")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mpinet-decode-") as tmp:
        tmp = Path(tmp)
        raw = fetch(str(make_archive(tmp / "a.zip", a.per_class, 1, 0, a.size)), tmp / "raw")
        files = sorted((raw / "seg_train" / "seg_train").glob("*/*.jpg"))
        n = len(files)
        variants = {
            "bare": lambda r: [load_image(f, a.size) for f in files],
            "pool": lambda r: _pool_decode(files, a.size, a.workers),
            "ours": lambda r: prepare_images(raw, tmp / f"ds{r}", ImageOptions(image_size=a.size), workers=a.workers),
            "standardized": lambda r: prepare_images(
                raw, tmp / f"std{r}", ImageOptions(image_size=a.size, standardize=True), workers=a.workers
            ),
            "uint8 stage": lambda r: _pool_write(files, a.size, a.workers, tmp, "uint8"),
            "float32 stage": lambda r: _pool_write(files, a.size, a.workers, tmp, "float32"),
        }
        times = _rounds(variants, a.repeats)
        ds = dataset.load(tmp / "ds0")
        extras = {
            "content fingerprint (sha256 of the arrays; the parent, while the workers decode)": lambda r: (
                dataset.fingerprint(tmp / "ds0")
            ),
            f"channel counts of the training pixels (the workers; divided by {a.workers})": lambda r: (
                [pixels.channel_counts(ds.train_x[i : i + CHUNK]) for i in range(0, len(ds.train_x), CHUNK)]
            ),
        }
        extra_times = _rounds(extras, a.repeats)
        reads = _reads(ds, a.repeats)
    rate = {k: n / statistics.median(t) for k, t in times.items()}
    print(f"| {n} JPEGs {a.size}x{a.size}, median of {a.repeats} rounds | images/s |\n|---|---|")
    print(f"| Pillow decode, 1 process | {rate['bare']:,.0f} |")
    print(f"| Pillow decode, {a.workers} processes | {rate['pool']:,.0f} |")
    print(f"| mpinet prepare_images, {a.workers} processes (decode + uint8 .npy) | {rate['ours']:,.0f} |")
    print(f"| the same, standardized | {rate['standardized']:,.0f} |")
    print(
        f"\nmpinet reaches {rate['ours'] / rate['pool']:.0%} of the bare parallel decode rate "
        f"({rate['standardized'] / rate['pool']:.0%} standardized).\n"
    )
    total = statistics.median(times["ours"])
    print(f"| where prepare_images' {total:.2f} s go ({n} images) | seconds | share |\n|---|---|---|")
    parts = [
        (f"bare decode, {a.workers} processes", statistics.median(times["pool"])),
        ("pool stage, decode + uint8 rows written (prepare_images)", statistics.median(times["uint8 stage"])),
        ("pool stage, decode + float32 rows written (0.6.0)", statistics.median(times["float32 stage"])),
    ]
    for name, t in extra_times.items():
        parts.append((name, statistics.median(t) / (a.workers if "workers" in name else 1)))
    for name, t in parts:
        print(f"| {name} | {t:.3f} | {t / total:.0%} |")
    print("\n| a training step's read, µs (median) | float32 values | uint8 pixels | uint8 standardized as read |")
    print("|---|---|---|---|")
    for batch, row in reads.items():
        print(f"| batch {batch}, random rows | " + " | ".join(f"{t * 1e6:.0f}" for t in row) + " |")
    return 0


def _rounds(variants: dict, repeats: int) -> dict[str, list[float]]:
    """Every variant once per round, `repeats` rounds: {name: seconds per round}."""
    times = {name: [] for name in variants}
    for r in range(repeats):
        for name, fn in variants.items():
            times[name].append(_time(lambda fn=fn, r=r: fn(r)))
    return times


def _reads(plain: dataset.Arrays, repeats: int) -> dict[int, list[float]]:
    """Median seconds to take a batch of random training rows into the trainer's float32 buffer."""
    stored = np.array(dataset.features(plain.train_x, np.empty(plain.train_x.shape, np.float32)))
    stats = pixels.channel_stats(pixels.channel_counts(plain.train_x), plain.train_x.size // pixels.CHANNELS)
    tiled = pixels.standardization(stats, stored.shape[1])

    def standardized(rows, out):
        for i, r in enumerate(rows):
            pixels.to_values(plain.train_x[r], out[i], tiled)

    ways = (
        lambda rows, out: _gather(stored, rows, out),
        lambda rows, out: _gather(plain.train_x, rows, out),
        standardized,
    )
    rng = np.random.default_rng(0)
    out = {}
    for batch in (4, 32, 256):
        buf = np.empty((batch, stored.shape[1]), np.float32)
        picks = [np.sort(rng.choice(len(stored), batch, replace=False)) for _ in range(200 * repeats)]
        times = [[] for _ in ways]
        for rows in picks:  # the ways side by side, pick by pick
            for way, t in zip(ways, times):
                t.append(_time(lambda way=way, rows=rows, buf=buf: way(rows, buf)))
        out[batch] = [statistics.median(t) for t in times]
    return out


def _pool_write(files, size, workers, tmp: Path, dtype: str) -> None:
    """The pool stage alone: decode and write each row of a dtype .npy (float32: scaled as 0.6.0
    stored it; uint8: the pixels as decoded, as prepare_images stores them)."""
    path = tmp / f"stage-{dtype}.npy"
    open_memmap(path, mode="w+", dtype=dtype, shape=(len(files), size * size * 3)).flush()
    with get_context("fork").Pool(workers, initializer=_open, initargs=(str(path), dtype)) as pool:
        for _ in pool.imap(_write_row, ((i, f, size) for i, f in enumerate(files)), chunksize=16):
            pass
    path.unlink()


_OUT = None


def _open(path: str, dtype: str) -> None:
    global _OUT
    x = np.load(path, mmap_mode="r")
    _OUT = (os.open(path, os.O_WRONLY), x.offset, np.empty(x.shape[1], dtype=dtype))


def _write_row(args) -> None:
    i, path, size = args
    image = load_image(path, size).reshape(-1)
    fd, offset, row = _OUT
    if row.dtype == np.uint8:
        row = image
    else:
        np.multiply(image, pixels.PIXEL_SCALE, out=row)
    os.pwrite(fd, row, offset + i * row.nbytes)


def _pool_decode(files, size, workers):
    with get_context("fork").Pool(workers) as pool:
        for _ in pool.imap(_decode, ((f, size) for f in files), chunksize=16):
            pass


def _decode(args):
    return load_image(*args).shape


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
