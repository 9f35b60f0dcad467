"""Benchmark: images per second from 150x150 JPEG files to a float32 .npy, against Pillow's bare decode rate.

Run on demand (`make benchmark`). Writes a synthetic Intel-layout folder of JPEGs, then times
(1) Pillow alone: open + RGB convert + numpy array, one process, (2) the same spread over all
cores with a process pool, and (3) mpinet's preprocessing (`prepare_images`: decode in
parallel, scale to float32, write into a memory-mapped .npy). Medians over repeats.

Then where the time between (2) and (3) goes: the pool stage with the float32 rows written
(prepare_images' workers alone), the same writing uint8 pixels instead (a 4x smaller stored form),
and the two passes prepare_images makes over the finished array: the content fingerprint
(sha256) and the value statistics of summary.json.
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

from mpinet.datasets.dataset import fingerprint, value_stats
from mpinet.datasets.fetch import fetch
from mpinet.datasets.images import load_image, prepare_images
from mpinet.datasets.synthetic import make_archive


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-class", type=int, default=300, help="training images per class (6 classes)")
    p.add_argument("--size", type=int, default=150, help="image side in pixels")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count(), help="decode processes")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mpinet-decode-") as tmp:
        raw = fetch(str(make_archive(Path(tmp) / "a.zip", a.per_class, 1, 0, a.size)), Path(tmp) / "raw")
        files = sorted((raw / "seg_train" / "seg_train").glob("*/*.jpg"))
        n = len(files)
        bare = [_time(lambda: [load_image(f, a.size) for f in files]) for _ in range(a.repeats)]
        pool = [_time(lambda: _pool_decode(files, a.size, a.workers)) for _ in range(a.repeats)]
        ours = [
            _time(lambda r=r: prepare_images(raw, Path(tmp) / f"ds{r}", a.size, workers=a.workers))
            for r in range(a.repeats)
        ]
        stages = {
            dtype: [
                _time(lambda d=dtype: _pool_write(files, a.size, a.workers, Path(tmp), d)) for _ in range(a.repeats)
            ]
            for dtype in ("float32", "uint8")
        }
        ds = Path(tmp) / "ds0"
        passes = {
            "content fingerprint (sha256 of the arrays)": [_time(lambda: fingerprint(ds)) for _ in range(a.repeats)],
            "value statistics (summary.json)": [
                _time(lambda: value_stats(np.load(ds / "train_x.npy", mmap_mode="r"))) for _ in range(a.repeats)
            ],
        }
    rows = [
        ("Pillow decode, 1 process", n / statistics.median(bare)),
        (f"Pillow decode, {a.workers} processes", n / statistics.median(pool)),
        (f"mpinet prepare_images, {a.workers} processes (decode + float32 .npy)", n / statistics.median(ours)),
    ]
    print(f"| {n} JPEGs {a.size}x{a.size}, median of {a.repeats} | images/s |\n|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} |")
    print(f"\nmpinet reaches {rows[2][1] / rows[1][1]:.0%} of the bare parallel decode rate.\n")
    total = statistics.median(ours)
    print(f"| where prepare_images' {total:.2f} s go ({n} images) | seconds | share |\n|---|---|---|")
    parts = [(f"bare decode, {a.workers} processes", statistics.median(pool))]
    parts += [(f"pool stage, decode + {d} rows written", statistics.median(t)) for d, t in stages.items()]
    parts += [(name, statistics.median(t)) for name, t in passes.items()]
    for name, t in parts:
        print(f"| {name} | {t:.3f} | {t / total:.0%} |")
    return 0


def _pool_write(files, size, workers, tmp: Path, dtype: str) -> None:
    """prepare_images' pool stage alone: decode and write each row of a dtype .npy (float32: scaled as
    prepare_images scales it; uint8: the pixels as decoded)."""
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
    pixels = load_image(path, size).reshape(-1)
    fd, offset, row = _OUT
    if row.dtype == np.uint8:
        row = pixels
    else:
        np.multiply(pixels, np.float32(1 / 255), out=row)
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
