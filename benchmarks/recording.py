"""Benchmark: what recording a run's step times and timeline costs, against the engine of a release
that recorded neither (default v0.4.0).

Both engines train the same small network (the case where a per-step cost shows most: steps of tens
of microseconds) serially and on 2 ranks with Allreduce, launch after launch, interleaved so both
see the same machine. A launch's median epoch time (epochs 2 onwards) is one observation; the table
gives each engine's median over its launches and this engine's ÷ the release's with a 95 % interval
(mpinet.analysis.confidence.compare_launches, launches as the unit), and says when the machine was
too noisy to conclude. Run alone (`make benchmark`): two jobs sharing the cores move an epoch by 20 %.
"""

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from mpinet.analysis.confidence import compare_launches
from mpinet.launch.launcher import mpiexec_argv

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from conftest import env, write_dataset  # noqa: E402 (the tests' learnable random dataset)

CONFIGS = (("serial", None), ("allreduce", 2))


def release_source(rev: str, dest: Path) -> Path:
    """The package as the release `rev` shipped it (git archive), unpacked under dest."""
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


def launch(src: Path, data: Path, out: Path, algorithm: str, ranks: int | None, a) -> float:
    """One training launch with the package in src; its median epoch time (epochs 2 onwards)."""
    args = ["--data", data, "--out", out, "--algorithm", algorithm, "--epochs", a.epochs, "--batch-size", a.batch]
    args += ["--hidden", "8"]
    python = [sys.executable, "-m", "mpinet.train"] if ranks is None else [*mpiexec_argv(ranks), sys.executable]
    if ranks is not None:
        python += ["-m", "mpi4py", "-m", "mpinet.train"]
    e = {**env(), "PYTHONPATH": str(src)}
    subprocess.run([*python, *map(str, args)], check=True, capture_output=True, env=e, timeout=600)
    return float(pd.read_csv(out / "metrics.csv")["time_s"].iloc[1:].median())


def bookkeeping_seconds(steps: int, repeats: int = 21) -> float:
    """An upper bound of the work recording adds to one epoch of `steps` steps, timed alone (median of
    `repeats`): per step a clock read, the step's two times stored and the timeline's check (a serial
    step had no clock read before; an exchanging one had it already); per epoch the step durations,
    the reduction's doubled buffer and two percentiles (mpinet.engine.loop), less an empty loop."""
    import time

    def epoch(record: bool) -> float:
        t0 = time.perf_counter()
        arrivals, ends = np.empty(steps), np.empty(steps)
        computed, talked = np.zeros(steps), np.zeros(steps, dtype=bool)
        arrived = t0
        for k in range(steps):
            if record:
                serve = [] if k < 40 else None
                done = time.perf_counter()
                arrivals[k], ends[k] = arrived, done
                if serve:
                    pass
        if record:
            both = np.concatenate([computed, np.diff(ends, prepend=t0)])
            np.where(talked, both[:steps] - computed, 0.0)
            np.percentile(both[steps:], [50, 95])
        return time.perf_counter() - t0

    added = [epoch(True) - epoch(False) for _ in range(repeats)]
    return float(np.median(added))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--release", default="v0.4.0", help="git revision of the engine to compare with")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--features", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--launches", type=int, default=7, help="launches per engine and configuration")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mpinet-recording-") as tmp:
        tmp = Path(tmp)
        data = write_dataset(tmp / "data", n_train=a.samples, n_test=200, dim=a.features)
        engines = {"release": release_source(a.release, tmp / "release"), "this": REPO / "src"}
        rows = []
        for algorithm, ranks in CONFIGS:
            times = {name: [] for name in engines}
            for i in range(a.launches):
                # interleaved, and which goes first alternates: both see the same machine in the same way
                order = list(engines.items())[:: 1 if i % 2 == 0 else -1]
                for name, src in order:
                    times[name].append(launch(src, data, tmp / f"{name}-{algorithm}-{i}", algorithm, ranks, a))
            r = compare_launches(np.array(times["release"]), np.array(times["this"]))
            verdict = "no difference detected" if not r["differs"] else ("slower" if r["ratio"] > 1 else "faster")
            rows.append(
                {
                    "design": f"{algorithm} on {ranks or 1}",
                    f"{a.release} epoch s": np.median(times["release"]),
                    "this epoch s": np.median(times["this"]),
                    "this / release": r["ratio"],
                    "95% interval": f"[{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}]",
                    "verdict": verdict,
                }
            )
    steps = -(-a.samples // a.batch)
    print(f"{a.samples} samples x {a.features} features, batch {a.batch} per rank ({steps} serial steps an epoch)")
    print(f"{a.launches} launches per engine, interleaved; medians of epochs 2-{a.epochs}\n")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.5f}"))
    # launches on a shared machine spread by more than the cost looked for: the added work, timed alone
    cost = bookkeeping_seconds(steps)
    fastest = min(r["this epoch s"] for r in rows)
    print(
        f"\nthe bookkeeping recording adds to an epoch of {steps} steps, timed alone: {cost * 1e6:.0f} us, "
        f"{100 * cost / fastest:.2f} % of the fastest median epoch above ({fastest:.4f} s)"
    )
    if not any(r["verdict"] != "no difference detected" for r in rows):
        print("the launches could not tell the engines apart: the machine's noise is larger than the difference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
