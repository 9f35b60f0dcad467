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
                for name, src in engines.items():  # interleaved: both see the same machine
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
