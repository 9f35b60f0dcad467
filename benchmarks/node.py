"""Every design on 1 rank and the powers of two up to the cores of one node, beside its calibrated model
and DDP, on two named scaling axes, every speedup with its base and its 95 % interval over launches.

`make benchmark-node`, or on a bare checkout (a node lent for a few minutes: numpy, mpi4py, an MPI,
pandas and threadpoolctl; no Snakemake, no venv): `PYTHONPATH=src python3 benchmarks/node.py`.

Workload: Intel-shaped synthetic data (150x150x3 uint8 pixels, as preparation stores unstandardized
images; 6 classes, random labels), float32, one BLAS thread a rank, ranks bound to cores where they
fit. For each per-rank batch b of --batches the training set holds --steps global batches of the
largest P; a global batch of --global-batches that no measured cell already gives has a set of
--steps global batches of its own, shared by serial at G and the P-rank cells at G/P. Times are
compared per sample (an epoch's seconds ÷ its samples), so cells on sets of different sizes compare.

The two axes. Throughput scaling (batch per rank fixed, the global batch grows): P ranks at per-rank
batch b against serial at b, as Horovod and DDP report it; the P-rank run does P-fold fewer updates.
Fixed global batch G: P ranks at G/P against serial at G, the same updates (distributed == serial), so
the speedup is the parallelization alone. Both are read off the same cells: `--ranks 2 --batches 64
32` gives throughput at 32 and 64 and the fixed global batch 64 (2 x 32 against serial at 64).

The base case (Hoefler and Belli, SC15, rule 1): every speedup names its base with the base's
µs/sample, and a second column divides by the best serial run measured at any batch (lowest
µs/sample), so no speedup comes from a slow baseline alone. Serial runs under the same launcher and
binding as the ranks (`mpiexec -n 1`, bound to a core).

Launches: every cell, serial included, is launched --launches times, round-robin (launch 1 of every
cell, then launch 2 of every cell, ...). A launch's first epoch is warm-up; the cell's time is the
median µs/sample of the other --epochs of all its launches, with a 95 % interval from a two-level
bootstrap (launches, then epochs within them); a speedup's interval divides the two cells' bootstrap
replicates, drawn independently. A cell whose launches disagree beyond their own intervals (one
launch's epoch-only 95 % interval of its median misses another's) is marked unsettled.

The model, calibrated first (one short MPI job per P, every rank running the same kernels at once,
since on a node P ranks share one memory system): at each b the step's kernels with the first
layer's gradient written (allreduce's), folded into the update (serial's) and left out (node's), and
the `node` design's exchange; the update pass, a bare MPI_Allreduce of the gradient, a ping-pong
of 8 bytes and of the gradient (α and β), and a 64 MiB copy (each rank's copy rate, P copying).
Predicted epoch = steps x the design's step from those:
serial: its fused step; allreduce: gradient + Allreduce + update; node: the step without the first
layer's gradient + its exchange (the errors through the window, its columns' update, two barriers);
paramserver: gradient + 2 (P - 1) gradient-sized messages (the server serves the workers in turn);
sharded and grid: a group's step (S x b rows converted, the rank's units of the first layer, the small
layers) calibrated at every S that divides P, its gather, and the groups' Allreduce of 1/S of the
gradient (the measured one scaled by its bytes); allgather: mpinet.analysis.costmodel's formula with
this node's compute per sample and α, β. The model error is predicted ÷ measured − 1. Held out: the
same model calibrated on P ≤ max(1, min(4, cores / 2)) alone (every kernel as timed with the largest
of those counts at once, slowed by the workflow model's contention: its streamed share by the drop
in the copy rate at P; the link and the copy rate as measured at each P, as the workflow's model
takes them from its microbenchmark) predicts the cells on more ranks, and only those are scored
(the table's held-out column, with the median absolute error under it).

Prints a line per finished launch and rewrites the JSON (raw epoch times of every launch, the
machine, the arguments, the date) and Markdown after every launch, so a run cut off keeps what
finished; --budget stops starting launches once that many seconds have passed. `--markdown-from
JSON` renders the table of a finished run again (`--into FILE` replaces its generated section).
"""

import argparse
import functools
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
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
STREAM_BYTES = 64 << 20  # the copy the calibration times: past any L3 of a node
DESIGNS = tuple(a for a in ALGORITHMS if a != "serial")
AXES = {
    "throughput": "throughput scaling: batch per rank fixed, the global batch grows",
    "global": "fixed global batch: P ranks at G/P do the updates of serial at G",
}
NOT_GLOBAL = ("paramserver",)  # its workers step one by one: no global batch, never serial's updates
BEGIN, END = "<!-- generated by benchmarks/node.py --markdown-from ", "<!-- end of the generated table -->"


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.calibrate_worker:
        return calibrate_worker(a)
    if a.markdown_from:
        return render(a.markdown_from, a.into)
    cores = os.cpu_count() or 1
    ranks = a.ranks or [p for p in (2**i for i in range(8)) if 1 < p <= cores]
    torch_ok = bench._has_torch() and not a.no_torch
    plan = make_plan(a, ranks, torch_ok)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"node-{date.today().isoformat()}"
    started = time.perf_counter()
    report = {"date": date.today().isoformat(), "machine": _machine(cores), "cores": cores, "args": vars(a)}
    report["ranks"] = ranks
    report |= {"global_batches": plan["global_batches"], "calibration": {}, "cells": []}
    with tempfile.TemporaryDirectory(prefix="mpinet-node-") as tmp:
        data = {n: make_pixels(Path(tmp) / f"n{n}", n, a.features) for n in sorted(set(plan["samples"].values()))}
        print(f"data: {', '.join(f'{n} samples' for n in data)}", flush=True)
        calibrate_all(report, data[max(data)], [1, *ranks], plan["batches"], a, cores)
        run_rounds(report, plan, data, Path(tmp), a, cores, started, stem)
    write(report, stem)
    print(stem.with_suffix(".md").read_text())
    print(f"wrote {stem}.json and .md ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


class Help(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown, except where the help says what an unset option means."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


def parse_args(argv):
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()), formatter_class=Help)
    every = "rank counts beside serial (default: the powers of two from 2 up to the cores)"
    p.add_argument("--ranks", type=int, nargs="+", help=every)
    p.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS, help="designs beside serial")
    p.add_argument("--batches", type=int, nargs="+", default=[32, 4], help="per-rank batches (throughput axis)")
    p.add_argument(
        "--global-batches",
        type=int,
        nargs="*",
        default=[],
        help="fixed global batches G beside those the per-rank batches give (P x b also in --batches): serial "
        "at G and every P that divides G at G/P",
    )
    p.add_argument("--steps", type=int, default=16, help="global steps an epoch at the largest rank count")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs a launch (one more runs as warm-up)")
    p.add_argument("--launches", type=int, default=2, help="launches a cell, round-robin over the cells")
    p.add_argument("--features", type=int, default=67500, help="input size (150x150x3 pixels for Intel)")
    p.add_argument("--hidden", type=int, nargs="+", default=[30, 20], help="hidden layer sizes")
    p.add_argument("--budget", type=float, default=460, help="start no launch after this many seconds")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch DDP peer")
    p.add_argument("--out", default="benchmarks/results", help="directory for the JSON and Markdown results")
    p.add_argument("--markdown-from", metavar="JSON", help="print the table of a finished run's JSON, run nothing")
    p.add_argument("--into", metavar="FILE", help="with --markdown-from: replace FILE's generated section of it")
    p.add_argument("--calibrate-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def global_batches(batches, extra, ranks) -> list[int]:
    """The fixed global batches measured: every P x b that is itself a per-rank batch (its serial is
    measured anyway), and those asked for."""
    derived = {p * b for p in ranks for b in batches if p * b in batches}
    return sorted(derived | set(extra), reverse=True)


def make_plan(a, ranks, torch_ok) -> dict:
    """The cells in launch order, each one's training-set size, the per-rank batches the model is
    calibrated at, and the global batches."""
    globals_ = global_batches(a.batches, a.global_batches, ranks)
    order = cells(a.batches, globals_, ranks, a.designs, torch_ok)
    # a per-rank batch's set holds --steps global batches of the largest P; a global batch's own cells
    # (serial at G, P ranks at G/P) share one set of --steps global batches
    samples = {(d, p, b): a.steps * b * (max(ranks) if b in a.batches else p) for d, p, b in order}
    batches = list(dict.fromkeys(b for _, _, b in order))
    return {"order": order, "samples": samples, "batches": batches, "global_batches": globals_}


def cells(batches, globals_, ranks, designs, torch_ok) -> list[tuple]:
    """Serial first, then the largest rank counts: a run cut off by its budget keeps the cells the
    goals are about. A global batch adds serial at G and every design at G/P where P divides G."""
    order = [("serial", 1, b) for b in dict.fromkeys([*batches, *globals_])]
    for p in sorted(ranks, reverse=True):
        for b in batches:
            order += [(d, p, b) for d in designs] + [("ddp", p, b)] * torch_ok
        for g in globals_:
            if g % p == 0 and g // p not in batches:
                order += [(d, p, g // p) for d in designs if d not in NOT_GLOBAL] + [("ddp", p, g // p)] * torch_ok
    return list(dict.fromkeys(order))


def interleave(order: list, launches: int) -> list[tuple[int, tuple]]:
    """(launch, cell) in the order they run: launch 1 of every cell, then launch 2 of every cell, ..."""
    return [(i, cell) for i in range(launches) for cell in order]


def calibrate_all(report: dict, data: Path, ps, batches, a, cores) -> None:
    for p in ps:
        report["calibration"][p] = c = calibrate(data, p, a, cores, batches)
        grads = ", ".join(f"b={b} {1e3 * c['grad_s'][str(b)]:.2f}" for b in batches)
        nodes = ", ".join(f"b={b} {1e3 * c['node_s'][str(b)]:.2f}" for b in batches)
        print(
            f"calibrated P={p}: gradient step ms {grads}; allreduce {1e3 * c['allreduce_s']:.2f} ms; "
            f"node exchange ms {nodes}",
            flush=True,
        )


def run_rounds(report: dict, plan: dict, data: dict, tmp: Path, a, cores: int, started: float, stem: Path) -> None:
    """Every launch of every cell, round-robin; a failed cell is not launched again, and once --budget
    seconds have passed no launch starts (a cell never launched is named skipped)."""
    records, failed = {}, set()
    for i, cell in interleave(plan["order"], a.launches):
        if cell in failed:
            continue
        if time.perf_counter() - started > a.budget:
            if cell not in records and list(cell) not in report.setdefault("skipped", []):
                report["skipped"].append(list(cell))
            continue
        design, p, b = cell
        n = plan["samples"][cell]
        try:
            times, chose = run_launch(data[n], tmp, design, p, b, a, cores)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, RuntimeError) as e:
            # one failed cell (a launcher refusing 2P ranks, say) costs that cell, not the run
            error = (getattr(e, "stderr", None) or b"").decode(errors="replace").strip().splitlines()[-1:]
            print(f"{design:>11} P={p:<3} b={b:<3} failed: {e}; {' '.join(error)}", flush=True)
            report.setdefault("failed", []).append([*cell, str(e)])
            failed.add(cell)
            continue
        if cell not in records:
            records[cell] = {"design": design, "ranks": p, "batch": b, "samples": n, "chose": [], "launches_s": []}
            records[cell]["model_s"] = predict(design, p, b, n, report["calibration"], a)
            report["cells"].append(records[cell])
        records[cell]["launches_s"].append(times)
        records[cell]["chose"].append(chose)
        us = 1e6 * statistics.median(times) / n
        print(
            f"{design:>11} P={p:<3} b={b:<3} launch {i + 1}: epoch {statistics.median(times):.3f} s, "
            f"{us:.1f} µs/sample, model {records[cell]['model_s']:.3f} s",
            flush=True,
        )
        write(report, stem)


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


def launcher(p: int, cores: int) -> list[str]:
    return [*mpiexec_argv(p, bind=p <= cores), sys.executable, "-m", "mpi4py"]


def run_launch(data: Path, tmp: Path, design: str, p: int, b: int, a, cores: int) -> tuple[list[float], str | None]:
    """One launch of a cell: its timed epochs' seconds and what it trained with (auto's choice, a
    grid's shape; None for DDP)."""
    if design == "ddp":
        return bench.run_ddp(data, b, "float32", tuple(a.hidden), a.epochs, p, 0)["epochs_s"], None
    times, meta = launch(data, tmp, design, p, b, a, cores)
    grid = meta.get("grid")
    return times, meta["design"] + (f" {grid['groups']}x{grid['shards']}" if grid else "")


def train_argv(data: Path, out: Path, design: str, p: int, b: int, a, cores: int) -> list[str]:
    """The trainer's command line: every cell, serial too, under the MPI launcher and its binding."""
    args = ["--data", data, "--out", out, "--algorithm", design, "--expect-ranks", p, "--batch-size", b]
    args += ["--hidden", *a.hidden, "--epochs", a.epochs + 1, "--learning-rate", 0.01]
    args += ["--standardize", "false", "--shuffle", "batches"]
    return [*launcher(p, cores), "-m", "mpinet.train", *map(str, args)]


def launch(data: Path, tmp: Path, design: str, p: int, b: int, a, cores: int) -> tuple[list[float], dict]:
    """One launch of the trainer: its timed epochs' seconds and its run.json."""
    import pandas as pd

    out = tmp / f"run-{design}-{p}-{b}"
    cmd = train_argv(data, out, design, p, b, a, cores)
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    m = pd.read_csv(out / "metrics.csv").iloc[1:]  # epoch 1 is warm-up (page faults, first touches)
    return [float(t) for t in m["time_s"]], json.loads((out / "run.json").read_text())


def calibrate(data: Path, p: int, a, cores: int, batches) -> dict:
    """The model's parts measured with p ranks running them at once (calibrate_worker)."""
    cmd = [*launcher(p, cores), str(Path(__file__).resolve()), "--calibrate-worker", "--data", str(data)]
    cmd += ["--features", str(a.features), "--hidden", *map(str, a.hidden), "--batches", *map(str, batches)]
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

    timed = functools.partial(_timed, world)
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
    # a copy past the caches with every rank copying at once: the memory system the ranks share, which
    # the held-out model reads at every count as it reads the link (held_out_calibration)
    source = np.ones(STREAM_BYTES // 4, np.float32)
    copy = np.empty_like(source)
    out["stream_s"] = timed(lambda: np.copyto(copy, source))
    if rank == 0:
        print(json.dumps(out))
    return 0


def _timed(world, fn, reps=12) -> float:
    """fn's median seconds on the slowest rank, every rank running it at once (a barrier before each)."""
    fn()
    times = []
    for _ in range(reps):
        world.Barrier()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return max(world.allgather(statistics.median(times)))  # the slowest rank sets the step


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
    from mpinet.analysis.costmodel import allgather_seconds
    from mpinet.engine.grid import grid_shape

    sizes = (a.features, *a.hidden, CLASSES)
    groups, shards = (1, p) if design == "sharded" else grid_shape(p, sizes, b, 4)
    link = _link(c, sizes)
    compute = c["shard_s"][str(b)][str(shards)] if shards > 1 else c["grad_s"][str(b)] + c["update_s"]
    gather = allgather_seconds(shards, shards * b * sizes[1] * 4, link)
    reduced = (groups - 1) / groups / shards / ((p - 1) / p) if groups > 1 else 0.0
    return compute + gather + c["allreduce_s"] * reduced


def calibration_limit(cores: int) -> float:
    """The held-out model is calibrated on the rank counts up to this (1 to 4, at most half the cores)
    and predicts the cells above it, which alone it is scored on."""
    return max(1, min(4, cores / 2))


def held_out_calibration(calibration: dict, p: int, limit: float, a) -> dict | None:
    """The calibration at p as a model calibrated on the rank counts up to `limit` alone sees it: every
    kernel's time (all ranks at once) at the largest of those counts; the link (ping-pong, Allreduce) as
    measured at p, as the workflow's model takes its link from the microbenchmark at every count;
    `node`'s exchange and a group's step past that count priced from there (mpinet.analysis.costmodel).
    None for p at or below the limit (the model's own calibration, never scored) or nothing below it."""
    from mpinet.analysis.costmodel import first_layer_share, node_step_seconds

    cal = {int(q): c for q, c in calibration.items()}
    seen = [q for q in cal if q <= limit]
    if p <= limit or p not in cal or not seen:
        return None
    q = max(seen)
    c, at_p = cal[q], cal[p]
    sizes = (a.features, *a.hidden, CLASSES)
    rest = (Net(sizes).n_params - sizes[0] * sizes[1]) * 4  # the small layers' bytes
    share = first_layer_share(sizes)
    slower = _contention(cal, q, p, sizes)  # a batch's kernels at p against at q: the memory they share
    held = {key: {b: t * slower(int(b), c["grad_s"][b]) for b, t in c[key].items()} for key in _BATCH_KERNELS}
    held["update_s"] = c["update_s"] * slower(0, 0.0)
    held |= {key: at_p[key] for key in ("allreduce_s", "message_s", "latency_s")}
    # node's exchange: q ranks' column updates (the same flops a rank at p does), p ranks' barriers and sums
    barriers = node_step_seconds(p, rest, _link(at_p, sizes)) - node_step_seconds(q, rest, _link(c, sizes))
    held["node_s"] = {b: s * slower(int(b), c["grad_s"][b]) + barriers for b, s in c["node_s"].items()}
    # a rank of a group of S: its units over S x b rows and the small layers on them, from q's step
    held["shard_s"] = {
        b: {
            str(n): c["shard_s"].get(b, {}).get(str(n), (grad + c["update_s"]) * n * (2 * share / n + 1 - 2 * share))
            * slower(int(b), grad)
            for n in _shards(p)
        }
        for b, grad in c["grad_s"].items()
    }
    return held


_BATCH_KERNELS = ("grad_s", "fused_s", "partial_s")


def _contention(cal: dict, q: int, p: int, sizes: tuple):
    """f(b, step_s): how much slower a step of batch b that takes step_s with q ranks at once runs with
    p (the workflow model's contention, mpinet.analysis.costmodel, from each count's copy rate); b = 0:
    a pass over the weights alone, all of it streamed. 1 for a calibration without copy timings."""
    from mpinet.analysis.costmodel import Link, Work, contention

    rates = {k: 2 * STREAM_BYTES / c["stream_s"] for k, c in cal.items() if c.get("stream_s")}
    if q not in rates or p not in rates:
        return lambda b, step_s: 1.0
    link = Link(0.0, 0.0, stream_at={1: rates[q], 2: rates[p]})  # at q as alone, at p as the next count

    def slower(b: int, step_s: float) -> float:
        if not b:
            return rates[q] / rates[p]
        return contention(2, Work(b, b, step_s / b, sizes, 4), link)

    return slower


def _link(c: dict, sizes: tuple):
    """α and β of a calibration's ping-pong (8 bytes, and the gradient)."""
    from mpinet.analysis.costmodel import Link

    return Link(c["latency_s"], max(c["message_s"] - c["latency_s"], 0.0) / (Net(sizes).n_params * 4))


def write(report: dict, stem: Path) -> None:
    """The JSON and the Markdown table of what has finished, written whole each time."""
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    stem.with_suffix(".md").write_text(f"## mpinet node benchmark, {report['date']}\n\n{markdown(report)}")


def render(path: str, into: str | None) -> int:
    """The table of a finished run's JSON, printed, or put in place of FILE's generated section for it
    (between `<!-- generated by benchmarks/node.py --markdown-from PATH ... -->` and END)."""
    return publish_from(path, into, BEGIN, "node.py", ("args", "cells", "calibration", "machine"), markdown)


def publish_from(path: str, into: str | None, begin: str, script: str, keys: tuple, make) -> int:
    """A benchmark's --markdown-from: `make(report)` of the JSON at path, published (publish); a file
    that is not that benchmark's result (unreadable, no JSON, without `keys`, or that `make` cannot
    read) is one line on stderr naming it, and exit status 1."""
    try:
        report = read_result(path, keys, f"result of {script}")
        text = make(report)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        print(f"{script}: {path}: not a result of {script} ({e!r})", file=sys.stderr)
        return 1
    except SystemExit as e:
        print(f"{script}: {e}", file=sys.stderr)
        return 1
    return publish(text, path, into, begin)


def save_result(report: dict, path: Path, make) -> None:
    """A finished benchmark's JSON at path (its folder made), then its tables (make(report)) printed:
    what --markdown-from makes of the file again (publish_from)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    print(make(report), end="")
    print(f"wrote {path}", file=sys.stderr)


def read_result(path, keys: tuple, kind: str) -> dict:
    """A benchmark's JSON, or SystemExit with one line naming the file and what it lacks."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else e
        raise SystemExit(f"{path}: not a readable JSON ({why})") from None
    missing = [k for k in keys if k not in report] if isinstance(report, dict) else list(keys)
    if missing:
        raise SystemExit(f"{path}: not a {kind} (no {', '.join(missing)})")
    return report


def publish(text: str, source: str, into: str | None, begin: str) -> int:
    """A benchmark's table made from `source` (its JSON): printed, or in place of the section of
    `into` that a line `begin + source` opens (every benchmark's --markdown-from and --into)."""
    if into:
        try:
            replace_section(Path(into), f"{begin}{source} ", text)
        except (OSError, ValueError):
            where = f"a line '{begin}{source} --into {into}; do not edit -->' and then '{END}'"
            print(f"{into}: no section generated from {source} to rewrite (expected {where})", file=sys.stderr)
            return 1
    else:
        print(text, end="")
    return 0


def replace_section(doc_path: Path, begin: str, text: str) -> None:
    """`text` in place of the section of doc_path that starts with the line beginning `begin` (kept)
    and ends at END: a generated table, rewritten from its JSON."""
    doc = doc_path.read_text()
    start = doc.index("\n", doc.index(begin)) + 1
    doc_path.write_text(doc[:start] + "\n" + text + "\n" + doc[doc.index(END, start) :])


def summarize(cell: dict) -> dict:
    """A cell's µs/sample: the median over its launches' timed epochs, the two-level bootstrap's
    replicates (launches, then epochs) and their 95 % interval, and whether its launches disagree."""
    from mpinet.analysis.confidence import bootstrap_medians, interval

    per = [1e6 * np.asarray(t, dtype=float) / cell["samples"] for t in cell["launches_s"]]
    reps = bootstrap_medians(per, seed=zlib.crc32(f"{cell['design']} {cell['ranks']} {cell['batch']}".encode()))
    low, high = interval(reps)
    return {"us": float(np.median(np.concatenate(per))), "low": low, "high": high, "reps": reps} | {
        "unsettled": unsettled(per)
    }


def unsettled(launches: list) -> bool | None:
    """Whether a cell's launches disagree beyond their own noise: some launch's epoch-only 95 % interval
    of its median misses another launch's. None with one launch (nothing to compare)."""
    from mpinet.analysis.confidence import bootstrap_medians, interval

    if len(launches) < 2:
        return None
    bounds = [interval(bootstrap_medians([t])) for t in launches]
    return any(high < low for _, high in bounds for low, _ in bounds)


def ratio(base: dict, cell: dict) -> tuple[float, float, float]:
    """base's µs/sample ÷ cell's (a speedup), with the 95 % interval of the two cells' bootstrap
    replicates divided (drawn independently; a cell over itself is exactly 1)."""
    from mpinet.analysis.confidence import interval

    if base is cell:
        return 1.0, 1.0, 1.0
    return (base["us"] / cell["us"], *interval(base["reps"] / cell["reps"]))


def rows(report: dict) -> list[dict]:
    """The table's rows: the throughput axis at every per-rank batch (serial at that batch the base),
    then every fixed global batch G (P ranks at G/P; serial at G the base), each with the best serial."""
    stats = {(c["design"], c["ranks"], c["batch"]): c | summarize(c) | held_out(report, c) for c in report["cells"]}
    serial = {b: s for (d, _, b), s in stats.items() if d == "serial"}
    best = min(serial.values(), key=lambda s: s["us"], default=None)
    out = []
    for b in report["args"]["batches"]:
        for key, c in stats.items():
            if key[2] == b:
                out.append(_row("throughput", c, serial.get(b), best, stats))
    for g in report["global_batches"]:
        for (d, p, b), c in stats.items():
            if (p > 1 and p * b == g and d not in NOT_GLOBAL) or (d, b) == ("serial", g):
                out.append(_row("global", c, serial.get(g), best, stats))
    return out


def held_out(report: dict, cell: dict) -> dict:
    """The held-out model's µs/sample of a cell (held_us: NaN on the rank counts it is calibrated on, and
    where the run kept no calibration or cores)."""
    a, cores, p = argparse.Namespace(**report["args"]), _cores(report), cell["ranks"]
    held = held_out_calibration(report["calibration"], p, calibration_limit(cores), a) if cores else None
    if held is None:
        return {"held_us": math.nan}
    return {"held_us": 1e6 * predict(cell["design"], p, cell["batch"], cell["samples"], {p: held}, a) / cell["samples"]}


def _cores(report: dict) -> int | None:
    """The machine's cores (runs before 0.10.0 name them only in the machine's line)."""
    found = re.search(r"(\d+) cores", report["machine"])
    return report.get("cores") or (int(found.group(1)) if found else None)


def _row(axis: str, c: dict, base: dict | None, best: dict | None, stats: dict) -> dict:
    p, b = c["ranks"], c["batch"]
    speedup = ratio(base, c) if base else (math.nan,) * 3
    ddp = stats.get(("ddp", p, b))
    return {
        "axis": axis,
        "cell": c,
        "global": None if c["design"] in NOT_GLOBAL else p * b,
        "base": base,
        "speedup": speedup,
        "over_best": ratio(best, c) if best else (math.nan,) * 3,
        "efficiency": speedup[0] / p,
        "model_us": 1e6 * c["model_s"] / c["samples"],
        "ddp": ddp["us"] / c["us"] if ddp and c["design"] != "ddp" else math.nan,
    }


def markdown(report: dict) -> str:
    """The run's Markdown (without a heading): its workload, both axes' table and the calibration."""
    a = argparse.Namespace(**report["args"])
    table = rows(report)
    held = any(r["cell"]["held_us"] == r["cell"]["held_us"] for r in table)  # a cell past the calibration set
    serial = [r["cell"] for r in table if r["cell"]["design"] == "serial"]
    best = min(serial, key=lambda s: s["us"], default=None)
    lines = [
        f"Machine: {report['machine']}; {report['date']}. Workload: {a.features} uint8 pixels a sample, net "
        f"{a.features}-{'-'.join(map(str, a.hidden))}-{CLASSES}, float32, 1 BLAS thread a rank, {a.steps} global "
        f"steps an epoch at the largest rank count, {a.epochs} timed epochs a launch, {a.launches} launch(es) a "
        "cell round-robin, every cell (serial too) under `mpiexec -n P` bound to cores. µs/sample: the median "
        "over the launches' timed epochs, 95 % interval from a bootstrap over launches, then epochs.",
        "",
        f"Axes: **throughput** = {AXES['throughput']} (base: serial at the same per-rank batch); **global** = "
        f"{AXES['global']} (base: serial at G). Over best serial: the best serial run at any batch ÷ the cell"
        + (f" (serial at batch {best['batch']}, {best['us']:.1f} µs/sample)." if best else "."),
        "",
        "| axis | design | ranks | batch/rank | global batch | trained | launches | µs/sample [95 %] "
        "| base (its µs/sample) | speedup [95 %] | over best serial [95 %] | efficiency | unsettled "
        "| model µs/sample | model error" + " | held-out error" * held + " | DDP ÷ ours |",
        "|---" * (16 + held) + "|",
        *(_table_line(r, held) for r in table),
    ]
    notes = _notes(report, table) + (_held_out_note(report, table) if held else [])
    return "\n".join(lines + notes + _calibration(report)) + "\n"


def _held_out_note(report: dict, table: list[dict]) -> list[str]:
    """What the held-out column is, and its median absolute error over the cells it was scored on."""
    limit = calibration_limit(_cores(report))
    seen = sorted(int(q) for q in report["calibration"] if int(q) <= limit)
    cells = {id(r["cell"]): r["cell"] for r in table if r["cell"]["held_us"] == r["cell"]["held_us"]}.values()
    errors = [abs(c["held_us"] / c["us"] - 1) for c in cells]
    return [
        "",
        f"Held-out error: the model calibrated on P = {', '.join(map(str, seen))} alone (up to 4 ranks or half "
        f"the cores) predicts the cells on more ranks, each kernel timed with {max(seen)} rank(s) at once"
        + (", its streamed share slowed by the drop in the copy rate at the cell's P," if _copies(report) else "")
        + " and the link (ping-pong, Allreduce) as measured at the cell's P; predicted ÷ measured − 1, on those "
        "cells only "
        f"(the calibration's own are never scored). Median absolute error over the {len(errors)} held-out "
        f"cell(s): {100 * statistics.median(errors):.0f} %.",
    ]


def _copies(report: dict) -> bool:
    """Whether the calibration timed a copy at every count (runs before 0.11 did not)."""
    return all(c.get("stream_s") for c in report["calibration"].values())


def _table_line(r: dict, held: bool = False) -> str:
    c, base = r["cell"], r["base"]
    if base is c:
        based, speedup, efficiency = f"itself ({c['us']:.1f})", "1 (base)", "-"
    else:
        based = f"serial b={base['batch']} ({base['us']:.1f})" if base else "- (not measured)"
        speedup, efficiency = _ci(r["speedup"]), f"{_f(100 * r['efficiency'], 0)} %"
    trained = ", ".join(dict.fromkeys(filter(None, c["chose"]))) or "-"
    flag = {None: "-", True: "**unsettled**", False: "no"}[c["unsettled"]]
    return (
        f"| {r['axis']} | {c['design']} | {c['ranks']} | {c['batch']} | {r['global'] or '-'} | {trained} "
        f"| {len(c['launches_s'])} | {c['us']:.1f} [{c['low']:.1f}, {c['high']:.1f}] | {based} | {speedup} "
        f"| {_ci(r['over_best'])} | {efficiency} | {flag} | {_f(r['model_us'], 1)} "
        f"| {_percent(r['model_us'] / c['us'] - 1)} "
        + (f"| {_percent(c['held_us'] / c['us'] - 1)} " if held else "")
        + f"| {_f(r['ddp'], 2)} |"
    )


def _ci(v: tuple) -> str:
    return "-" if v[0] != v[0] else f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]"


def _notes(report: dict, table: list[dict]) -> list[str]:
    lines = []
    best = _best(table)
    if best:
        lines += ["", "Best design per axis, batch and rank count (speedup over its base): " + "; ".join(best) + "."]
    asked = report["args"]["launches"]
    short = [r["cell"] for r in table if len(r["cell"]["launches_s"]) < asked]
    if short:
        cut = ", ".join(dict.fromkeys(f"{c['design']} P={c['ranks']} b={c['batch']}" for c in short))
        lines += ["", f"Fewer than {asked} launches (past --budget): {cut}."]
    if report.get("failed"):
        lines += ["", "Failed: " + ", ".join(f"{d} P={p} b={b}" for d, p, b, _ in report["failed"]) + "."]
    if report.get("skipped"):
        lines += [
            "",
            f"Not run (past --budget {report['args']['budget']:.0f} s): "
            + ", ".join(f"{d} P={p} b={b}" for d, p, b in report["skipped"])
            + ".",
        ]
    return lines


def _calibration(report: dict) -> list[str]:
    lines = ["", "Calibration (ms; the slowest rank's median with all P ranks at once):", ""]
    if not report["calibration"]:
        return []
    batches = list(next(iter(report["calibration"].values()))["grad_s"])
    parts = [("gradient step", "grad_s"), ("without the first layer's", "partial_s"), ("node exchange", "node_s")]
    head = [f"{name} b={b}" for name, _ in parts for b in batches]
    lines += ["| P | " + " | ".join(head) + " | update | Allreduce | ping-pong |", "|---" * (4 + len(head)) + "|"]
    for p, c in report["calibration"].items():
        cells = [f"{1e3 * c[key][b]:.2f}" for _, key in parts for b in batches]
        cells += [f"{1e3 * c[key]:.2f}" for key in ("update_s", "allreduce_s", "message_s")]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _best(table: list[dict]) -> list[str]:
    """The fastest design (auto, DDP and serial aside) at each axis, batch and rank count, with auto's choice."""
    best: dict[tuple, dict] = {}
    for r in table:
        c = r["cell"]
        key = (r["axis"], c["batch"] if r["axis"] == "throughput" else r["global"], c["ranks"])
        if (
            c["design"] not in ("serial", "ddp", "auto")
            and r["speedup"][0] > best.get(key, {"speedup": (0,)})["speedup"][0]
        ):
            best[key] = r
    out = []
    for (axis, b, p), r in best.items():
        auto = next(
            (
                x
                for x in table
                if x["axis"] == axis
                and x["cell"]["design"] == "auto"
                and x["cell"]["ranks"] == p
                and (x["cell"]["batch"] if axis == "throughput" else x["global"]) == b
            ),
            None,
        )
        picked = (
            f" (auto chose {', '.join(dict.fromkeys(filter(None, auto['cell']['chose'])))}: {auto['speedup'][0]:.2f}x)"
            if auto
            else ""
        )
        name = f"b={b}" if axis == "throughput" else f"G={b}"
        out.append(
            f"{axis} {name}, P={p}: {r['cell']['design']} {_ci(r['speedup'])}, over best serial "
            f"{_ci(r['over_best'])}{picked}"
        )
    return out


def _machine(cores: int) -> str:
    from mpinet.engine.mpilib import library
    from mpinet.engine.runfiles import cpu_model

    return (
        f"{cpu_model()}, {cores} cores; Python {platform.python_version()}, numpy {np.__version__}; "
        + " ".join(library().version.split())  # MPICH pads its "Version:" line
    )


def _percent(v) -> str:
    return "-" if v != v else f"{100 * v:.0f} %"


def _f(v, digits) -> str:
    return "-" if v != v else f"{v:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
