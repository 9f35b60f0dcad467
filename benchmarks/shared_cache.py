"""Benchmark: what two ranks on one node cost each other's compute, by the first layer's width.

bench.py finds the Allreduce design's step at batch 32 slower than its kernels timed alone or two at
once. Here the trainer's own step (mpinet.engine.model's forward and backward on this rank's half of a
memory-mapped training file, then the update) runs on 2 ranks in blocks of steps that take turns in
one process pair, so that slow drifts of a shared machine hit all three alike: "alone" (rank 0
computes, rank 1 waits in a barrier), "at once" (both compute, the same update with no reduction)
and "with Allreduce" (both, GradientAllreduce's reduction and update). Each rank's working set from
step to step is its weights and its gradient (2 x parameters); the question asked is whether "at
once" is slower than "alone" only when the two ranks' sets together exceed the shared last-level
cache (the widths are chosen either side of it). One BLAS thread per rank; rank 0's median
step per mode over all blocks; then the median of the repeats. Run alone: other work on the
machine moves these by 20 %.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from cold_rows import rows_file  # beside this script

from mpinet.engine.model import Net
from mpinet.launch.launcher import mpiexec_argv

CLASSES = 6
MODES = ("alone", "at once", "with Allreduce")


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.worker:
        return worker(a)
    if max(a.batches) > a.samples // 2:
        raise SystemExit(f"shared_cache: --samples {a.samples} leaves a rank fewer rows than batch {max(a.batches)}")
    with tempfile.TemporaryDirectory(prefix="mpinet-shared-cache-") as tmp:
        rows = Path(tmp) / "train_x.npy"
        rows_file(str(rows), a.samples, a.features, np.float32)
        times = {}
        for rep in range(a.repeats):
            for h in a.hidden:
                print(f"[shared_cache] repeat {rep + 1}/{a.repeats}: width {h}", file=sys.stderr)
                for key, t in _run(rows, a, h).items():
                    times.setdefault((h, *key.split("/")), []).append(t)
    print(_table(a, {k: statistics.median(v) for k, v in times.items()}))
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=1024, help="rows in the training file (all ranks together)")
    p.add_argument("--features", type=int, default=67500, help="input size (150x150x3 for Intel)")
    p.add_argument("--hidden", type=int, nargs="+", default=[30, 15], help="first-layer widths (then 20, 6)")
    p.add_argument("--batches", type=int, nargs="+", default=[4, 32, 256], help="per-rank batch sizes")
    p.add_argument("--steps", type=int, default=8, help="steps per block (the first is not timed)")
    p.add_argument("--blocks", type=int, default=8, help="blocks of steps per mode and batch size")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rows", help=argparse.SUPPRESS)
    p.add_argument("--width", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _run(rows: Path, a, width: int) -> dict:
    # -m mpi4py: an exception on one rank aborts both, never leaves the other in a barrier
    cmd = [*mpiexec_argv(2), sys.executable, "-m", "mpi4py", __file__, "--worker", "--rows", str(rows)]
    cmd += ["--width", str(width)]
    cmd += ["--features", str(a.features), "--steps", str(a.steps), "--blocks", str(a.blocks)]
    cmd += ["--batches", *map(str, a.batches)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"shared_cache: {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def worker(a) -> int:
    """Per batch size and mode, rank 0's median step, the modes taking turns block by block."""
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits

    from mpinet.engine.comm import Comm
    from mpinet.engine.exchanges import GradientAllreduce, Step
    from mpinet.engine.model import Views, Workspace, backward, forward, init_params, layer_views

    comm = MPI.COMM_WORLD
    exchange = GradientAllreduce(Comm(comm))
    net = Net((a.features, a.width, 20, CLASSES), "l2", False, np.dtype(np.float32))
    params = init_params(net, 1)
    grads = np.zeros_like(params)
    layers, grad_layers = layer_views(net, params), layer_views(net, grads)
    x_all = np.load(a.rows, mmap_mode="r")
    share = len(x_all) // comm.size
    x = x_all[comm.rank * share : (comm.rank + 1) * share]
    y = np.random.default_rng(comm.rank).integers(0, CLASSES, len(x))
    out = {}
    with threadpool_limits(1, user_api="blas"):
        for b in a.batches:
            ws = Workspace(net, b)
            times = {mode: [] for mode in MODES}
            step = 0
            for _ in range(a.blocks):
                for mode in MODES:
                    comm.Barrier()
                    if mode == "alone" and comm.rank > 0:
                        continue  # to the next barrier, where it waits while rank 0 computes
                    for i in range(a.steps):
                        s = step * b % (len(x) - b + 1)
                        step += 1
                        t = time.perf_counter()
                        forward(net, layers, x[s : s + b], ws)
                        backward(Views(net, layers, grad_layers, ws), x[s : s + b], y[s : s + b], 1e-9)
                        if mode == "with Allreduce":
                            exchange.step(params, grads, Step(i, a.steps, *[None] * 3, 0.0))
                        else:
                            params -= grads
                        if i > 0:  # the first step of a block starts from the other mode's caches
                            times[mode].append(time.perf_counter() - t)
            out |= {f"{b}/{mode}": statistics.median(v) for mode, v in times.items() if v}  # rank 0 has all
    if comm.rank == 0:
        print(json.dumps(out))
    return 0


def last_level_cache_bytes() -> int | None:
    """The largest cache this machine's first CPU reports (sysfs), or None."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=None)


def _table(a, t: dict) -> str:
    llc = last_level_cache_bytes()
    lines = [
        f"Last-level cache: {llc / 2**20:.0f} MiB" if llc else "Last-level cache: not reported",
        "",
        "| first layer | weights + gradient per rank MB | both ranks MB | batch | alone ms | at once ms |"
        " at once ÷ alone | with Allreduce ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for h in a.hidden:
        per_rank = 2 * Net((a.features, h, 20, CLASSES)).n_params * 4 / 1e6
        for b in a.batches:
            alone, together, reduced = (t[(h, str(b), mode)] for mode in MODES)
            lines.append(
                f"| {a.features}-{h} | {per_rank:.1f} | {2 * per_rank:.1f} | {b} | {alone * 1e3:.2f} |"
                f" {together * 1e3:.2f} | {together / alone:.2f} | {reduced * 1e3:.2f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
