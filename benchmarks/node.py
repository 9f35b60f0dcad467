"""Every design on 1, 2, 4, ... all the cores of one node, beside its calibrated model and DDP.

`make benchmark-node`, or on a bare checkout (a node lent for a few minutes: numpy, mpi4py, an MPI,
pandas and threadpoolctl; no Snakemake, no venv): `PYTHONPATH=src python3 benchmarks/node.py`.

Workload: Intel-shaped synthetic data (150x150x3 uint8 pixels, as preparation stores unstandardized
images; 6 classes, random labels), float32, per-rank batch b, one BLAS thread a rank, ranks bound
to cores where they fit. For each b the training set holds --steps global batches of the largest P,
so every cell runs at least that many steps an epoch. Each cell is --launches launches of the real
trainer (`python -m mpinet.train`): a launch's first epoch is warm-up, the median of the other
--epochs over all launches is the cell's epoch time, with a 95 % bootstrap interval over the launches
and their epochs (with one launch it covers that launch's epochs, not the spread between launches,
which on a 16-core node reached 25 % for one design). Speedup and efficiency divide this
engine's serial epoch at the same b by the cell's, both measured in this run.

The model, calibrated first (one short MPI job per P, every rank running the same kernels at once,
since on a node P ranks share one memory system): at each b the step's kernels with the first
layer's gradient written (allreduce's), folded into the update (serial's) and left out (node's), and
the `node` design's exchange; the update pass, a bare MPI_Allreduce of the gradient, and a ping-pong
of 8 bytes and of the gradient (α and β). Predicted epoch = steps x the design's step from those:
serial: its fused step; allreduce: gradient + Allreduce + update; node: the step without the first
layer's gradient + its exchange (the errors through the window, its columns' update, two barriers);
paramserver: gradient + 2 (P - 1) gradient-sized messages (the server serves the workers in turn);
sharded and grid: a group's step (S x b rows converted, the rank's units of the first layer, the small
layers) calibrated at every S that divides P, its gather, and the groups' Allreduce of 1/S of the
gradient (the measured one scaled by its bytes); allgather: mpinet.analysis.costmodel's formula with
this node's compute per sample and α, β.

Prints a line per finished cell and rewrites the JSON and Markdown after every cell, so a run cut
off keeps what finished; --budget stops starting cells once that many seconds have passed.
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path[:0] = [str(SRC), str(HERE)]  # a bare checkout: the package from src/, bench.py beside this file
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"

import bench  # noqa: E402 (after the path above)

from mpinet.engine.designs import CANDIDATES  # noqa: E402
from mpinet.engine.model import Net  # noqa: E402
from mpinet.engine.options import ALGORITHMS  # noqa: E402
from mpinet.launch.launcher import mpiexec_argv  # noqa: E402

CLASSES = 6
DESIGNS = tuple(a for a in ALGORITHMS if a != "serial")


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.calibrate_worker:
        return calibrate_worker(a)
    cores = os.cpu_count() or 1
    ranks = a.ranks or [p for p in (2**i for i in range(8)) if 1 < p <= cores]
    torch_ok = bench._has_torch() and not a.no_torch
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"node-{date.today().isoformat()}"
    started = time.perf_counter()
    report = {"machine": _machine(cores), "args": vars(a), "ranks": ranks, "calibration": {}, "cells": []}
    with tempfile.TemporaryDirectory(prefix="mpinet-node-") as tmp:
        data = {b: make_pixels(Path(tmp) / f"b{b}", a.steps * b * max(ranks), a.features) for b in a.batches}
        print(f"data: {', '.join(f'b={b}: {a.steps * b * max(ranks)} samples' for b in a.batches)}", flush=True)
        for p in [1, *ranks]:
            report["calibration"][p] = calibrate(data[a.batches[0]], p, a, cores)
            c = report["calibration"][p]
            grads = ", ".join(f"b={b} {1e3 * c['grad_s'][str(b)]:.2f}" for b in a.batches)
            nodes = ", ".join(f"b={b} {1e3 * c['node_s'][str(b)]:.2f}" for b in a.batches)
            print(
                f"calibrated P={p}: gradient step ms {grads}; allreduce {1e3 * c['allreduce_s']:.2f} ms; "
                f"node exchange ms {nodes}",
                flush=True,
            )
        for cell in cells(a.batches, ranks, a.designs, torch_ok):
            if time.perf_counter() - started > a.budget:
                report.setdefault("skipped", []).append(cell)
                continue
            design, p, b = cell
            try:
                t = run_cell(data[b], Path(tmp), design, p, b, a, cores)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, RuntimeError) as e:
                # one failed cell (a launcher refusing 2P ranks, say) costs that cell, not the run
                error = (getattr(e, "stderr", None) or b"").decode(errors="replace").strip().splitlines()[-1:]
                print(f"{design:>11} P={p:<3} b={b:<3} failed: {e}; {' '.join(error)}", flush=True)
                report.setdefault("failed", []).append([*cell, str(e)])
                continue
            t["model_s"] = predict(design, p, b, len_data(data[b]), report["calibration"], a)
            report["cells"].append(t)
            print(
                f"{design:>11} P={p:<3} b={b:<3} epoch {t['epoch_s']:.3f} s "
                f"[{t['low']:.3f}, {t['high']:.3f}], model {t['model_s']:.3f} s",
                flush=True,
            )
            write(report, stem, a)
    write(report, stem, a)
    print((stem.with_suffix(".md")).read_text())
    print(f"wrote {stem}.json and .md ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--ranks", type=int, nargs="+", help="rank counts beside serial (default: 2, 4, ... up to the cores)"
    )
    p.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS, help="designs beside serial")
    p.add_argument("--batches", type=int, nargs="+", default=[32, 4], help="per-rank batch sizes")
    p.add_argument("--steps", type=int, default=16, help="global steps an epoch at the largest rank count")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs a launch (one more runs as warm-up)")
    p.add_argument("--launches", type=int, default=1, help="launches a cell (the interval covers their spread)")
    p.add_argument("--features", type=int, default=67500, help="input size (150x150x3 pixels for Intel)")
    p.add_argument("--hidden", type=int, nargs="+", default=[30, 20], help="hidden layer sizes")
    p.add_argument("--budget", type=float, default=460, help="start no cell after this many seconds")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch DDP peer")
    p.add_argument("--out", default="benchmarks/results", help="directory for the JSON and Markdown results")
    p.add_argument("--calibrate-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def cells(batches, ranks, designs, torch_ok) -> list[tuple]:
    """Serial first (every speedup divides by it), then the largest rank counts: a run cut off by its
    budget keeps the cells the goals are about."""
    order = [("serial", 1, b) for b in batches]
    for p in sorted(ranks, reverse=True):
        for b in batches:
            order += [(d, p, b) for d in designs] + [("ddp", p, b)] * torch_ok
    return order


def make_pixels(d: Path, n: int, features: int) -> Path:
    """A dataset directory of random uint8 pixels and labels, as preparation stores images."""
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = np.lib.format.open_memmap(d / "train_x.npy", mode="w+", dtype=np.uint8, shape=(n, features))
    for s in range(0, n, 512):
        x[s : s + 512] = rng.integers(0, 256, (min(512, n - s), features), dtype=np.uint8)
    x.flush()
    np.save(d / "train_y.npy", rng.integers(0, CLASSES, n))
    np.save(d / "test_x.npy", rng.integers(0, 256, (64, features), dtype=np.uint8))
    np.save(d / "test_y.npy", rng.integers(0, CLASSES, 64))
    (d / "classes.json").write_text(json.dumps([f"class{i}" for i in range(CLASSES)]))
    (d / "summary.json").write_text("{}")
    return d


def len_data(d: Path) -> int:
    return len(np.load(d / "train_y.npy", mmap_mode="r"))


def launcher(p: int, cores: int) -> list[str]:
    return [*mpiexec_argv(p, bind=p <= cores), sys.executable, "-m", "mpi4py"]


def run_cell(data: Path, tmp: Path, design: str, p: int, b: int, a, cores: int) -> dict:
    """--launches launches of the trainer (or of DDP): their timed epochs' median and 95 % interval, and
    what each launch trained with (auto's choice, a grid's shape)."""
    launches, chose = [], []
    for _ in range(a.launches):
        if design == "ddp":
            launches.append(bench.run_ddp(data, b, "float32", tuple(a.hidden), a.epochs, p, 0)["epochs_s"])
            continue
        times, meta = launch(data, tmp, design, p, b, a, cores)
        launches.append(times)
        grid = meta.get("grid")
        chose.append(meta["design"] + (f" {grid['groups']}x{grid['shards']}" if grid else ""))
    s = bench.spread([{"epochs_s": t} for t in launches])
    return {
        "design": design,
        "chose": ", ".join(dict.fromkeys(chose)) or None,  # what trained: auto's choice, a grid's shape
        "ranks": p,
        "batch": b,
        "epoch_s": s["median"],
        "low": s["low"],
        "high": s["high"],
        "epochs_s": [t for times in launches for t in times],
    }


def launch(data: Path, tmp: Path, design: str, p: int, b: int, a, cores: int) -> tuple[list[float], dict]:
    """One launch of the trainer: its timed epochs' seconds and its run.json."""
    import pandas as pd

    out = tmp / f"run-{design}-{p}-{b}"
    args = ["--data", data, "--out", out, "--algorithm", design, "--expect-ranks", p, "--batch-size", b]
    args += ["--hidden", *a.hidden, "--epochs", a.epochs + 1, "--learning-rate", 0.01]
    args += ["--standardize", "false", "--shuffle", "batches"]
    cmd = [sys.executable] if design == "serial" else launcher(p, cores)
    subprocess.run([*cmd, "-m", "mpinet.train", *map(str, args)], check=True, capture_output=True, timeout=600)
    m = pd.read_csv(out / "metrics.csv").iloc[1:]  # epoch 1 is warm-up (page faults, first touches)
    return [float(t) for t in m["time_s"]], json.loads((out / "run.json").read_text())


def calibrate(data: Path, p: int, a, cores: int) -> dict:
    """The model's parts measured with p ranks running them at once (calibrate_worker)."""
    cmd = [*launcher(p, cores), str(Path(__file__).resolve()), "--calibrate-worker", "--data", str(data)]
    cmd += ["--features", str(a.features), "--hidden", *map(str, a.hidden), "--batches", *map(str, a.batches)]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(r.stdout.strip().splitlines()[-1])


def calibrate_worker(a) -> int:
    """Every rank times the same kernels at once (a barrier before each repetition); rank 0 prints the
    slowest rank's median of each, as JSON."""
    from mpi4py import MPI

    from mpinet.datasets.dataset import features
    from mpinet.engine.comm import Comm
    from mpinet.engine.exchanges import Factors, Step
    from mpinet.engine.model import Views, Workspace, backward, forward, init_params, layer_views
    from mpinet.engine.nodeshared import NodeShared

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    net = Net((a.features, *a.hidden, CLASSES), "l2", False, np.dtype(np.float32))
    params = init_params(net, 1)
    grads = np.zeros_like(params)
    layers, grad_layers = layer_views(net, params), layer_views(net, grads)
    x_all = np.load(Path(a.data) / "train_x.npy", mmap_mode="r")
    rng = np.random.default_rng(rank)

    def timed(fn, reps=12) -> float:
        fn()
        times = []
        for _ in range(reps):
            world.Barrier()
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return max(world.allgather(statistics.median(times)))  # the slowest rank sets the step

    node = NodeShared(Comm(world), net.sizes, max(a.batches), np.float32)
    weights, node_grads = node.hold(params)
    out = {"grad_s": {}, "fused_s": {}, "partial_s": {}, "node_s": {}, "shard_s": {}}
    for b in a.batches:
        ws, buf = Workspace(net, b), np.empty((b, a.features), dtype=np.float32)
        y = rng.integers(0, CLASSES, b)
        step = iter(range(10**9))

        def rows(b=b, buf=buf, step=step):  # the next batch of this rank's own rows, as training reads them
            start = (next(step) * size + rank) * b % (len(x_all) - b + 1)
            return features(np.asarray(x_all[start : start + b]), buf)

        def gradient(ws=ws, y=y, rows=rows, update=False, first=True):
            x = rows()
            forward(net, layers, x, ws)
            backward(Views(net, layers, grad_layers, ws), x, y, 1e-20 if update else 1e-9, update=update, first=first)

        out["grad_s"][str(b)] = timed(gradient)
        out["fused_s"][str(b)] = timed(lambda gradient=gradient: gradient(update=True))
        out["partial_s"][str(b)] = timed(lambda gradient=gradient: gradient(first=False))
        # the node design's exchange of a step: every rank's errors, then its columns of the global batch
        d = np.full((b, net.sizes[1]), 1e-20, dtype=np.float32)
        factors = Factors(rows(), d, [b] * size, x_all, np.arange(size * b) % len(x_all))
        node.factors = factors
        out["node_s"][str(b)] = timed(lambda: node.step(weights, node_grads, Step(0, 1, *[None] * 3, 0.0)))
        out["shard_s"][str(b)] = {
            str(g): timed(_shard_step(net, layers, grad_layers, x_all, b, g)) for g in _shards(size)
        }
    node.close()
    out["update_s"] = timed(lambda: np.subtract(params, grads, out=params))
    summed = np.zeros_like(params)
    out["allreduce_s"] = timed(lambda: world.Allreduce(MPI.IN_PLACE, summed, op=MPI.SUM)) if size > 1 else 0.0
    out["message_s"], out["latency_s"] = _ping_pong(world, grads), _ping_pong(world, np.zeros(2, np.float32))
    if rank == 0:
        print(json.dumps(out))
    return 0


def _shards(ranks: int) -> list[int]:
    """The shard counts S of the grids G x S = ranks with more than one shard (S = ranks: sharded)."""
    return [s for s in range(2, ranks + 1) if ranks % s == 0]


def _shard_step(net, layers, grad_layers, x_all, b: int, shards: int):
    """A step's compute on one rank of a group of `shards` (sharded, a grid): its units of the first
    layer for the group's S x b rows, the small layers on them, its units' update (no exchange)."""
    from mpinet.datasets.dataset import features
    from mpinet.engine.comm import even_split
    from mpinet.engine.model import Views, Workspace, backward, first_layer_units, forward

    rows, units = shards * b, net.sizes[1]
    ws, buf = Workspace(net, rows), np.empty((rows, net.sizes[0]), dtype=np.float32)
    mine = slice(0, even_split(units, shards)[0])
    zt = np.zeros((units, rows), dtype=np.float32)
    y = np.arange(rows) % CLASSES
    step = iter(range(10**9))

    def run():
        start = next(step) * rows % (len(x_all) - rows + 1)
        x = features(np.asarray(x_all[start : start + rows]), buf)
        zt[mine] = first_layer_units(layers[0][0][mine], x, ws)
        forward(net, layers, x, ws, first_t=zt)
        backward(Views(net, layers, grad_layers, ws), x, y, 1e-20, update=True, first=mine)

    return run


def _ping_pong(world, buf) -> float:
    """Half a round trip of buf between ranks 0 and 1 (0 on one rank)."""
    rank = world.Get_rank()
    if world.Get_size() < 2:
        return 0.0
    times = []
    for _ in range(12):
        world.Barrier()
        t = time.perf_counter()
        if rank == 0:
            world.Send(buf, dest=1)
            world.Recv(buf, source=1)
        elif rank == 1:
            world.Recv(buf, source=0)
            world.Send(buf, dest=0)
        times.append((time.perf_counter() - t) / 2)
    return float(world.bcast(statistics.median(times[2:]) if rank == 0 else None, root=0))


def predict(design: str, p: int, b: int, samples: int, calibration: dict, a) -> float:
    """The model's epoch seconds of a cell, from the calibration at p ranks (the module's docstring)."""
    if design == "ddp":
        return float("nan")
    if design == "auto":  # the fastest candidate, as the engine's trial picks it
        return min(predict(d, p, b, samples, calibration, a) for d in CANDIDATES)
    c = calibration[p]
    workers = p - 1 if design == "paramserver" else p
    steps = math.ceil(samples / (b * workers))
    grad = c["grad_s"][str(b)]
    if design == "serial":
        return steps * c["fused_s"][str(b)]
    if design == "allreduce":
        return steps * (grad + c["allreduce_s"] + c["update_s"])
    if design == "node":
        return steps * (c["partial_s"][str(b)] + c["node_s"][str(b)])
    if design == "paramserver":
        return steps * (grad + 2 * (p - 1) * c["message_s"])
    if design in ("sharded", "grid"):
        return steps * _grid_step(design, p, b, c, a)
    from mpinet.analysis.costmodel import Link, Work, epoch_seconds

    nbytes = Net((a.features, *a.hidden, CLASSES)).n_params * 4
    beta = max(c["message_s"] - c["latency_s"], 0.0) / nbytes
    sizes = (a.features, *a.hidden, CLASSES)
    return epoch_seconds(design, p, Work(samples, b, grad / b, sizes, 4), Link(c["latency_s"], beta))


def _grid_step(design: str, p: int, b: int, c: dict, a) -> float:
    """A sharded or grid step: the calibrated compute of a rank of a group of S, the group's gather of
    the first layer's outputs, and (a grid) the groups' reduction of 1/S of the gradient, priced as the
    measured Allreduce of the whole one scaled by the bytes every rank moves in it."""
    from mpinet.analysis.costmodel import Link, allgather_seconds
    from mpinet.engine.grid import grid_shape

    sizes = (a.features, *a.hidden, CLASSES)
    groups, shards = (1, p) if design == "sharded" else grid_shape(p, sizes, b, 4)
    nbytes = Net(sizes).n_params * 4
    link = Link(c["latency_s"], max(c["message_s"] - c["latency_s"], 0.0) / nbytes)
    compute = c["shard_s"][str(b)][str(shards)] if shards > 1 else c["grad_s"][str(b)] + c["update_s"]
    gather = allgather_seconds(shards, shards * b * sizes[1] * 4, link)
    reduced = (groups - 1) / groups / shards / ((p - 1) / p) if groups > 1 else 0.0
    return compute + gather + c["allreduce_s"] * reduced


def write(report: dict, stem: Path, a) -> None:
    """The JSON and the Markdown table of what has finished, written whole each time."""
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    stem.with_suffix(".md").write_text(markdown(report, a))


def markdown(report: dict, a) -> str:
    done = {(c["design"], c["ranks"], c["batch"]): c for c in report["cells"]}
    lines = [
        f"## mpinet node benchmark, {date.today().isoformat()}",
        "",
        f"Machine: {report['machine']}. Workload: {a.features} uint8 pixels a sample, net "
        f"{a.features}-{'-'.join(map(str, a.hidden))}-{CLASSES}, float32, 1 BLAS thread a rank, {a.steps} global "
        f"steps an epoch at the largest rank count, {a.epochs} timed epochs a launch, {a.launches} launch(es) a cell "
        "(interval over the launches and their epochs). Speedup and efficiency: this engine's serial epoch at "
        "the same batch ÷ the cell's.",
        "",
        "| design | ranks | batch/rank | trained | epoch s [95 %] | speedup | efficiency | model s | model error "
        "| DDP ÷ ours |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (design, p, b), c in done.items():
        serial = done.get(("serial", 1, b))
        ddp = done.get(("ddp", p, b))
        speedup = serial["epoch_s"] / c["epoch_s"] if serial and design != "ddp" else float("nan")
        error = c["model_s"] / c["epoch_s"] - 1
        versus = ddp["epoch_s"] / c["epoch_s"] if ddp and design != "ddp" else float("nan")
        lines.append(
            f"| {design} | {p} | {b} | {c.get('chose') or '-'} | {c['epoch_s']:.3f} [{c['low']:.3f}, {c['high']:.3f}] "
            f"| {_f(speedup, 2)} | "
            f"{_f(100 * speedup / p, 0)} % | {_f(c['model_s'], 3)} | {_f(100 * error, 0)} % | {_f(versus, 2)} |"
        )
    best = _best(done, a.batches)
    if best:
        lines += ["", "Best design per rank count (speedup over serial): " + "; ".join(best) + "."]
    if report.get("failed"):
        lines += ["", "Failed: " + ", ".join(f"{d} P={p} b={b}" for d, p, b, _ in report["failed"]) + "."]
    if report.get("skipped"):
        lines += [
            "",
            f"Not run (past --budget {a.budget:.0f} s): "
            + ", ".join(f"{d} P={p} b={b}" for d, p, b in report["skipped"])
            + ".",
        ]
    lines += ["", "Calibration (ms; the slowest rank's median with all P ranks at once):", ""]
    parts = [("gradient step", "grad_s"), ("without the first layer's", "partial_s"), ("node exchange", "node_s")]
    head = [f"{name} b={b}" for name, _ in parts for b in a.batches]
    lines += ["| P | " + " | ".join(head) + " | update | Allreduce | ping-pong |", "|---" * (4 + len(head)) + "|"]
    for p, c in report["calibration"].items():
        cells = [f"{1e3 * c[key][str(b)]:.2f}" for _, key in parts for b in a.batches]
        cells += [f"{1e3 * c[key]:.2f}" for key in ("update_s", "allreduce_s", "message_s")]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _best(done: dict, batches) -> list[str]:
    out = []
    for b in batches:
        serial = done.get(("serial", 1, b))
        if not serial:
            continue
        by_p: dict[int, tuple] = {}
        for (design, p, bb), c in done.items():
            if bb == b and design not in ("serial", "ddp", "auto"):
                s = serial["epoch_s"] / c["epoch_s"]
                if s > by_p.get(p, ("", 0.0))[1]:
                    by_p[p] = (design, s)
        for p, (d, s) in sorted(by_p.items()):
            auto = done.get(("auto", p, b))
            picked = (
                f" (auto chose {auto['chose']}: {s * auto['epoch_s'] / serial['epoch_s']:.2f}x the best's time)"
                if auto
                else ""
            )
            out.append(f"b={b}, P={p}: {d} {s:.2f}x{picked}")
    return out


def _machine(cores: int) -> str:
    from mpinet.engine.mpilib import library
    from mpinet.engine.runfiles import cpu_model

    return (
        f"{cpu_model()}, {cores} cores; Python {platform.python_version()}, numpy {np.__version__}; {library().version}"
    )


def _f(v, digits) -> str:
    return "-" if v != v else f"{v:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
