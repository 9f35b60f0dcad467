"""Benchmark: how near the cost model's predicted epoch times come to real runs on this machine.

Run on demand (`make benchmark`); it was a test until a 2-rank epoch on the shared 2-core CI machine
came out slower than the 1-rank one and failed it. Fitted on this machine's own ping-pong
(python -m mpinet.commbench) and 1-rank runs, the model predicts the serial, 1-rank and 2-rank
Allreduce epochs of a compute-bound workload; each run is launched --repeats times, interleaved,
and the fastest launch counts (other work on the machine only ever adds time). Prints measured and
predicted epoch seconds, the model's error, and the error of a model that does not split the
compute over the ranks (the 2-rank row shows what splitting buys).
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from mpinet.analysis.aggregate import load_epochs, summarize_runs
from mpinet.analysis.costmodel import Link, model_error, predicted_epochs
from mpinet.launch.launcher import mpiexec_argv
from mpinet.study.experiments import DEFAULTS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from conftest import write_dataset  # noqa: E402 (the tests' learnable random dataset)

CONFIGS = (("serial", None), ("allreduce", 1), ("allreduce", 2))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=6000)
    p.add_argument("--features", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mpinet-model-") as tmp:
        tmp = Path(tmp)
        data = write_dataset(tmp / "d", n_train=a.samples, n_test=50, dim=a.features)
        table = _fastest(_runs(tmp, data, a), a)
        link = _link(tmp)
    errors = model_error(table, link)
    unsplit = predicted_epochs(table, link) + predicted_epochs(table, Link(0, 0))  # compute not halved
    measured = table["median_epoch_s"]
    print(f"link: α = {link.alpha * 1e6:.2f} µs, β = {link.beta * 1e9:.3f} ns/byte; fastest of {a.repeats} launches")
    print("| design | ranks | measured epoch s | model error % | unsplit model error % |")
    print("|---|---|---|---|---|")
    for i, row in table.iterrows():
        err = 100 * errors.iloc[i]
        off = f"{100 * (unsplit.iloc[i] / measured.iloc[i] - 1):+.1f}" if row["ranks"] > 1 else "-"
        print(f"| {row['algorithm']} | {row['ranks']} | {measured.iloc[i]:.4f} | {err:+.1f} | {off} |")
    return 0


def _runs(tmp: Path, data: Path, a) -> list[dict]:
    runs = []
    for repeat in range(1, a.repeats + 1):
        for algorithm, ranks in CONFIGS:  # interleaved, so drift hits every configuration alike
            out = tmp / f"{algorithm}-{ranks}-{repeat}"
            cmd = [sys.executable, "-m", "mpinet.train", "--data", str(data), "--out", str(out)]
            cmd += ["--algorithm", algorithm, "--epochs", str(a.epochs), "--batch-size", "64"]
            if ranks:
                cmd = [*mpiexec_argv(ranks), sys.executable, "-m", "mpi4py", *cmd[1:]]
            subprocess.run(cmd, check=True, capture_output=True)
            row = dict(DEFAULTS, dataset="d", algorithm=algorithm, ranks=ranks or 1, epochs=a.epochs, hidden="30-20")
            runs.append(row | {"dir": out, "repeat": repeat})
    return runs


def _fastest(runs: list[dict], a) -> pd.DataFrame:
    table = summarize_runs(load_epochs(runs), 0.9)
    table = table.loc[table.groupby(["algorithm", "ranks"], sort=False)["median_epoch_s"].idxmin()]
    return table.reset_index(drop=True)


def _link(tmp: Path) -> Link:
    bench_csv = tmp / "bench.csv"
    cmd = [*mpiexec_argv(2), sys.executable, "-m", "mpi4py", "-m", "mpinet.commbench"]
    subprocess.run([*cmd, "--max-bytes", str(4 << 20), "--out", str(bench_csv)], check=True, capture_output=True)
    b = pd.read_csv(bench_csv)
    return Link(float(b["alpha_s"].iloc[0]), float(b["beta_s_per_byte"].iloc[0]))


if __name__ == "__main__":
    sys.exit(main())
