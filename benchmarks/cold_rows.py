"""Benchmark: the first layer's forward GEMM on rows just read from the training file against the
same GEMM on rows in the caches, and what was tried to close that gap.

bench.py bounds the forward pass by the GEMM at its shape on cached rows plus reading the rows
once. Here, per dtype and batch size, with one BLAS thread and the trainer's operand order
(mpinet.engine.model's rule, named in the table): "cached" repeats the GEMM on one batch; "from the file"
walks the memory-mapped file batch after batch as training does with shuffle=batches; "other
order" does that with the operands the other way round (W @ x.T against x @ W.T); "read first"
reads each batch once (a sum) before its GEMM, to bring it into the caches; "K in blocks" sums
W @ x.T over blocks of block_elements // batch inputs, as the trainer does on this machine up to
batch FIRST_BLOCKED_UP_TO (mpinet.engine.model.first_layer_plan). Medians per batch, the median of
the repeats. Run alone: other work on the machine moves these by 20 %.
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
from numpy.lib.format import open_memmap
from threadpoolctl import threadpool_limits

from mpinet.engine.machine import this_machine
from mpinet.engine.model import block_elements, first_layer_plan


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=1024, help="rows in the file")
    p.add_argument("--features", type=int, default=67500)
    p.add_argument("--hidden", type=int, default=30, help="the first layer's width")
    p.add_argument("--batches", type=int, nargs="+", default=[4, 32, 256])
    p.add_argument("--block", type=int, default=0, help="inputs per block in 'K in blocks' (default: the model's)")
    p.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    with threadpool_limits(1):  # one BLAS thread, as every rank trains
        _table(a)
    return 0


def _table(a) -> None:
    print("| dtype | batch | trainer's order | cached ms | from the file ms | other order ms | read first ms |", end="")
    print(" K in blocks ms | file ÷ cached |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dtype in map(np.dtype, a.dtypes):
        with tempfile.TemporaryDirectory(prefix="mpinet-cold-") as tmp:
            x = rows_file(os.path.join(tmp, "train_x.npy"), a.samples, a.features, dtype)
            w = np.random.default_rng(1).random((a.hidden, a.features)).astype(dtype)
            for b in a.batches:
                plan = first_layer_plan(a.features, b, dtype, this_machine())
                transposed = plan.transposed
                block = a.block or max(1, block_elements(this_machine()) // b)
                t = {
                    m: statistics.median(_time(m, w, x, b, block, transposed) for _ in range(a.repeats)) for m in MODES
                }
                cells = " | ".join(f"{t[m] * 1e3:.3f}" for m in MODES)
                order = plan.describe()
                print(f"| {dtype} | {b} | {order} | {cells} | {t['file'] / t['cached']:.2f} |")


MODES = ("cached", "file", "other_order", "read_first", "blocks")


def rows_file(path: str, n: int, d: int, dtype) -> np.ndarray:
    """A training file of n random rows, memory-mapped read-only as the trainer opens it."""
    rng = np.random.default_rng(0)
    x = open_memmap(path, mode="w+", dtype=dtype, shape=(n, d))
    for s in range(0, n, 256):
        x[s : s + 256] = rng.random((min(256, n - s), d))
    x.flush()
    del x
    return np.load(path, mmap_mode="r")


def _time(mode, w, x, b, block, transposed) -> float:
    """The median time of one batch's first-layer GEMM in this mode over an epoch (after a warm-up one)."""
    if mode == "other_order":
        return _time("file", w, x, b, block, not transposed)
    out = np.empty((w.shape[0], b) if transposed else (b, w.shape[0]), dtype=w.dtype)
    part = np.empty_like(out)
    hot = np.array(x[:b])
    for _ in range(2):
        times = []
        for s in range(0, len(x) - b + 1, b):
            xb = hot if mode == "cached" else x[s : s + b]
            t0 = time.perf_counter()
            if mode == "read_first":
                np.add.reduce(xb, axis=None)
            if mode == "blocks":
                _gemm(w[:, :block], xb[:, :block], out, transposed)
                for k in range(block, x.shape[1], block):
                    _gemm(w[:, k : k + block], xb[:, k : k + block], part, transposed)
                    out += part
            else:
                _gemm(w, xb, out, transposed)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _gemm(w, xb, out, transposed) -> None:
    if transposed:
        np.matmul(w, xb.T, out=out)
    else:
        np.matmul(xb, w.T, out=out)


if __name__ == "__main__":
    raise SystemExit(main())
