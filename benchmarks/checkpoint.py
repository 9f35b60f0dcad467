"""Benchmark: what checkpointing costs, on Iris with the default network (serial, many short epochs).

Run on demand (`make benchmark`). Times the same training without a checkpoint, with the
default checkpoint interval (--checkpoint-seconds 10) and with a checkpoint after every epoch,
interleaved, and prints medians and the overhead against no checkpoint. A checkpoint's cost
must not grow with the epoch number (the metric rows are appended, not rewritten).
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mpinet.datasets.csvdata import prepare_table

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6000)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mpinet-ckpt-") as tmp:
        data = Path(tmp) / "iris"
        prepare_table(REPO / "src" / "mpinet" / "data" / "iris.csv", data)
        variants = {
            "no checkpoint": [],
            "checkpoint every 10 s (default)": ["--checkpoint", f"{tmp}/a/checkpoint.npz"],
            "checkpoint every epoch": ["--checkpoint", f"{tmp}/b/checkpoint.npz", "--checkpoint-seconds", "0"],
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        for r in range(a.repeats):
            for name, extra in variants.items():  # interleaved, so drift hits every variant alike
                cmd = [sys.executable, "-m", "mpinet.train", "--data", str(data), "--out", f"{tmp}/out"]
                cmd += ["--epochs", str(a.epochs), *extra]
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                times[name].append(time.perf_counter() - t0)
                print(f"  repeat {r + 1}/{a.repeats} {name}: {times[name][-1]:.2f} s", file=sys.stderr)
    base = statistics.median(times["no checkpoint"])
    print(f"\n| Iris serial, {a.epochs} epochs, median of {a.repeats} | wall s | overhead |")
    print("|---|---|---|")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"| {name} | {m:.2f} | {100 * (m / base - 1):+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
