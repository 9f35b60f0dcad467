"""Benchmark: one node against two for the same 2-rank allreduce run, on a SLURM cluster with 2+ nodes.

Run on demand, alone, with the cluster idle (the local one: `bash tests/slurm/local-cluster.sh start
--nodes 3`), from the repository with the venv active:
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/nodes.py
The Intel-sized network (67,500 -> 40 -> 10 -> 6, 2.7 M float32 parameters, 10.8 MB per Allreduce)
trains on random data of the same shape (timings depend on shapes only) under `srun -N1 -n2` and
`srun -N2 -n2`, interleaved; prints the median epoch time, the median time in MPI per epoch and the
ratio two nodes / one node. Epoch 1 (warm-up) is left out.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from bench import make_data  # the training benchmark's random data (benchmarks/ is on sys.path)

from mpinet.engine import model

SHAPE = (150 * 150 * 3, [40, 10], 6)  # the Intel net; bench.make_data draws 6 classes


def run(data: Path, out: Path, nodes: int, args) -> dict:
    """One 2-rank run on `nodes` nodes; its median epoch and MPI seconds and the hosts it used."""
    cmd = ["srun", f"--nodes={nodes}", "--ntasks=2", "--exclusive", "--mpi=pmi2", "--kill-on-bad-exit=1"]
    cmd += [f"--partition={args.partition}"] if args.partition else []
    cmd += [sys.executable, "-m", "mpi4py", "-m", "mpinet.train", "--data", str(data), "--out", str(out)]
    cmd += ["--algorithm", "allreduce", "--expect-ranks", "2", "--epochs", str(args.epochs)]
    cmd += ["--batch-size", str(args.batch_size), "--hidden", *map(str, SHAPE[1]), "--learning-rate", "0.004"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=3600)
    m = pd.read_csv(out / "metrics.csv").iloc[1:]
    hosts = json.loads((out / "run.json").read_text())["hosts"]
    return {"epoch_s": m["time_s"].median(), "comm_s": m["comm_s"].median(), "hosts": ",".join(hosts)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", type=int, default=2048, help="training samples (default 2048)")
    p.add_argument("--batch-size", type=int, default=4, help="per rank (default 4: one Allreduce per 8 samples)")
    p.add_argument("--epochs", type=int, default=4, help="per run; the first is left out (default 4)")
    p.add_argument("--repeats", type=int, default=3, help="runs per placement, interleaved (default 3)")
    p.add_argument("--partition", default=None, help="SLURM partition (the local cluster: nodes)")
    p.add_argument("--tmp", default=None, help="directory for the data, on a filesystem every node sees")
    args = p.parse_args(argv)
    params = model.Net((SHAPE[0], *SHAPE[1], SHAPE[2])).n_params
    with tempfile.TemporaryDirectory(prefix="mpinet-nodes-", dir=args.tmp) as tmp:
        data = make_data(Path(tmp) / "data", args.train, SHAPE[0])
        rows = []
        for r in range(args.repeats):
            for nodes in (1, 2):  # interleaved, so drift hits both placements alike
                res = run(data, Path(tmp) / f"out-{nodes}-{r}", nodes, args)
                rows.append({"nodes": nodes, **res})
                print(f"  repeat {r + 1}, {nodes} node(s) ({res['hosts']}): {res['epoch_s']:.3f} s/epoch", flush=True)
    df = pd.DataFrame(rows)
    table = df.groupby("nodes").agg(
        epoch_s=("epoch_s", "median"), comm_s=("comm_s", "median"), hosts=("hosts", "first")
    )
    steps = -(-args.train // (2 * args.batch_size))
    print(
        f"\n2 ranks, allreduce, {args.train} samples, batch {args.batch_size} per rank: {steps} Allreduces of "
        f"{params * 4 / 1e6:.1f} MB per epoch; median of {args.repeats} runs, epoch 1 left out"
    )
    print(f"{'nodes':>5}  {'hosts':<12} {'epoch s':>8}  {'MPI s':>8}  {'MPI share':>9}")
    for nodes, row in table.iterrows():
        share = row["comm_s"] / row["epoch_s"]
        print(f"{nodes:>5}  {row['hosts']:<12} {row['epoch_s']:8.3f}  {row['comm_s']:8.3f}  {share:9.0%}")
    epoch, comm = (table.loc[2, c] / table.loc[1, c] for c in ("epoch_s", "comm_s"))
    print(f"two nodes / one node: {epoch:.2f}x epoch time, {comm:.2f}x MPI time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
