"""Benchmark: the first layer's blocked GEMM in a process that has made no GEMM with an inner size
past the block, against the same GEMM after one such GEMM (mpinet.engine.model.warm_gemm).

With numpy's OpenBLAS 0.3.31 (Haswell kernel, AMD EPYC) a GEMM whose inner size is 512 or less ran
twice as slow until the process had made one with a larger inner size. A serial run leaves that
state after its first evaluation (its test batch is unblocked); a `node` run on 2 ranks at batch
32 never did (each rank evaluates 32 rows, blocked too), so its steps stayed slow. Each case runs
in a fresh process (the state is per process), alternating, `--repeats` times; medians in ms.
Run alone: other work on the machine moves these by 20 %.
"""

import argparse
import statistics
import subprocess
import sys

PROBE = """
import sys, time
import numpy as np
from threadpoolctl import threadpool_limits
from mpinet.engine.machine import this_machine
from mpinet.engine.model import blocked_matmul, first_layer_plan, warm_gemm
dtype, (batch, units, features) = np.dtype(sys.argv[1]), map(int, sys.argv[2:5])
warm = sys.argv[5] == "1"
plan = first_layer_plan(features, batch, dtype, this_machine())
rng = np.random.default_rng(0)
w, x = rng.random((units, features)).astype(dtype), rng.random((batch, features)).astype(dtype)
out = np.empty((units, batch), dtype); part = np.empty_like(out)
with threadpool_limits(1):
    if warm and plan.block:
        warm_gemm(units, batch, plan.block, dtype)
    blocked_matmul(w, x, out, part, plan.block or features)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        blocked_matmul(w, x, out, part, plan.block or features)
        times.append(time.perf_counter() - t)
print(plan.block, 1e3 * sorted(times)[len(times) // 2])
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--features", type=int, default=67500)
    p.add_argument("--hidden", type=int, default=30, help="the first layer's width")
    p.add_argument("--batches", type=int, nargs="+", default=[4, 8, 16, 32])
    p.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    print("| dtype | batch | block | cold ms | after warm_gemm ms | cold ÷ warm |")
    print("|---|---|---|---|---|---|")
    for dtype in a.dtypes:
        for batch in a.batches:
            runs = {"0": [], "1": []}
            block = 0
            for _ in range(a.repeats):
                for warm in ("0", "1"):  # alternating, each in a fresh process
                    args = [dtype, str(batch), str(a.hidden), str(a.features), warm]
                    out = subprocess.run(
                        [sys.executable, "-c", PROBE, *args], check=True, capture_output=True, text=True
                    )
                    block, ms = out.stdout.split()
                    runs[warm].append(float(ms))
            cold, warm = statistics.median(runs["0"]), statistics.median(runs["1"])
            print(f"| {dtype} | {batch} | {block} | {cold:.2f} | {warm:.2f} | {cold / warm:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
