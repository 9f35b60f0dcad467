"""Benchmark: mpinet's serial, Allreduce and parameter-server epochs against the GEMM limit and PyTorch DDP.

Run on demand (`make benchmark`), not in the test suite. Intel-shaped synthetic data
(150x150x3 = 67,500 float32 features, 6 classes, random labels), measured side by side in one
run with designs interleaved per repeat; every rank uses one BLAS thread. The trainer is the
real `python -m mpinet.train` (shuffle=batches: contiguous zero-copy batches, standardization
off to match the plain DDP model); its per-epoch times exclude evaluation and the first
(warm-up) epoch. Writes JSON and a Markdown table to benchmarks/results/ and prints the table.

Figures that hold still: each configuration runs at least --repeats times and then again, round
after round, until its median epoch time is known to within --precision (the half-width of its 95 %
bootstrap interval over runs and epochs, mpinet.analysis.confidence) or it has run --max-repeats
times; a cell that never got there is marked noisy. Every roofline share and ratio carries its
95 % interval (ratios: per-run medians, Welch's t on the logarithms).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import date
from pathlib import Path

import numpy as np

from mpinet.engine.model import Net
from mpinet.launch.launcher import mpiexec_argv

CLASSES = 6  # the Intel data's classes
# In --kernels-worker, every rank times the same kernels at once on its own half of the rows (what
# sharing one node costs): this rank's share, and a barrier before each timing so the ranks overlap.
_SHARE = {"rank": 0, "size": 1, "sync": lambda: None}
INTEL_SAMPLES = 14_034


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.allreduce_worker:
        return allreduce_worker(a)
    if a.ddp_worker:
        return ddp_worker(a)
    if a.kernels_worker:
        return kernels_worker(a)
    os.environ["OMP_NUM_THREADS"] = "1"
    hidden = tuple(a.hidden)
    torch_ok = _has_torch() and not a.no_torch
    with tempfile.TemporaryDirectory(prefix="mpinet-bench-") as tmp:
        data = make_data(Path(tmp) / "data", a.samples, a.features)
        designs = [("serial", 1), *[("allreduce", p) for p in a.ranks]]
        designs += [(d, p) for d in ("allgather", "sharded", "paramserver") for p in a.ranks if p > 1]
        # the engine before a change (--before) and without the fused update (--unfused), beside it
        variants = {d: ("before",) * bool(a.before) for d in ("serial", "allreduce")}
        if a.unfused:
            variants["serial"] += ("unfused",)
        cells = []  # every configuration, in the order one round runs them: designs side by side
        for dtype in a.dtypes:
            for b in a.batches:
                for algorithm, p in designs:
                    for impl in ("mpinet", *variants.get(algorithm, ())):
                        cells.append(("ours", (algorithm, p, b, dtype, hidden, a.epochs), impl))
                if torch_ok:
                    cells += [("ddp", (b, dtype, hidden, a.epochs, p), "torch-ddp") for p in a.ranks]
        runs = run_rounds(
            cells,
            a,
            lambda kind, args, impl, rep: (
                run_ours(data, Path(tmp), *args, rep, impl, a.before) if kind == "ours" else run_ddp(data, *args, rep)
            ),
        )
        gemm, bandwidth, steps = measure_kernels(data, a)
        n_params = Net((a.features, *hidden, CLASSES)).n_params
        allreduce = {dt: allreduce_time(n_params, dt) for dt in a.dtypes} if max(a.ranks) > 1 else {}
        # the kernels again with every rank of a P-rank run busy at once: what sharing one node costs
        shared = {p: shared_kernels(data, a, p) for p in a.ranks if p > 1}
    for p, k in shared.items():  # beside the kernels alone in the kernel table
        for key in k:
            steps[key][f"allreduce, {p} ranks at once"] = k[key]["allreduce"]
    report = summarize(runs, gemm, allreduce, a, n_params, torch_ok, steps, bandwidth)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{date.today().isoformat()}"
    (out / f"{stem}.json").write_text(
        json.dumps({"runs": runs, "gemm": gemm, "allreduce": allreduce, "kernels": steps, **report}, indent=1)
    )
    (out / f"{stem}.md").write_text(report["markdown"])
    print(report["markdown"])
    print(f"wrote {out / stem}.json and .md", file=sys.stderr)
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--samples", type=int, default=1024, help="training samples per epoch (all ranks together)")
    p.add_argument("--features", type=int, default=67500, help="input size (150x150x3 for Intel)")
    p.add_argument("--hidden", type=int, nargs="+", default=[30, 20], help="hidden layer sizes (the original: 40 10)")
    p.add_argument("--batches", type=int, nargs="+", default=[4, 32, 256], help="per-rank batch sizes")
    p.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="rank counts for the MPI designs")
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per run (one more is run as warm-up)")
    p.add_argument("--repeats", type=int, default=3, help="whole runs per configuration, at least")
    p.add_argument("--max-repeats", type=int, default=10, help="whole runs per configuration, at most")
    p.add_argument(
        "--precision",
        type=float,
        default=0.05,
        help="run a configuration again until its median epoch's 95 %% interval is within this fraction of it",
    )
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch DDP peer")
    p.add_argument(
        "--before", metavar="SRC", help="also run serial and allreduce with the package in SRC (an older src/)"
    )
    p.add_argument("--unfused", action="store_true", help="also run serial without the fused update")
    p.add_argument("--out", default="benchmarks/results", help="directory for the JSON and Markdown results")
    p.add_argument("--allreduce-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kernels-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- workloads ------------------------------------------------------------------------------


def make_data(d: Path, n: int, features: int) -> Path:
    """A dataset directory of uniform [0, 1) float32 features and random labels."""
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = np.lib.format.open_memmap(d / "train_x.npy", mode="w+", dtype=np.float32, shape=(n, features))
    for s in range(0, n, 256):
        x[s : s + 256] = rng.random((min(256, n - s), features), dtype=np.float32)
    x.flush()
    np.save(d / "train_y.npy", rng.integers(0, CLASSES, n))
    np.save(d / "test_x.npy", rng.random((64, features), dtype=np.float32))
    np.save(d / "test_y.npy", rng.integers(0, CLASSES, 64))
    (d / "classes.json").write_text(json.dumps([f"class{i}" for i in range(CLASSES)]))
    (d / "summary.json").write_text("{}")
    return d


def run_rounds(cells, a, run) -> list[dict]:
    """Run every cell once per round, interleaved, for at least a.repeats rounds; then again only the
    cells whose median is not yet known to within a.precision, up to a.max_repeats runs each."""
    runs, rep = [], 0
    while todo := [c for c in cells if needs_more([r for r in runs if _cell_of(r) == _key(c)], a)]:
        for i, (kind, args, impl) in enumerate(todo, 1):
            runs.append(run(kind, args, impl, rep))
            _progress(rep + 1, i, len(todo), runs[-1])
        rep += 1
    return runs


def needs_more(done: list[dict], a) -> bool:
    if len(done) < a.repeats:
        return True
    return len(done) < a.max_repeats and spread(done)["half_width"] > a.precision


def spread(done: list[dict]) -> dict:
    """The median epoch time over a cell's runs and its 95 % interval (a two-level bootstrap over the
    runs and their epochs), with the interval's half-width relative to the median."""
    from mpinet.analysis.confidence import bootstrap_medians, interval

    launches = [np.asarray(r["epochs_s"]) for r in done]
    median = float(np.median(np.concatenate(launches)))
    low, high = interval(bootstrap_medians(launches))
    return {"median": median, "low": low, "high": high, "half_width": (high - low) / 2 / median}


def _key(cell) -> tuple:
    kind, args, impl = cell
    if kind == "ours":
        algorithm, p, b, dtype = args[:4]
        return (impl, algorithm, p, b, dtype)
    b, dtype, _, _, p = args
    return (impl, "ddp", p, b, dtype)


def _cell_of(run: dict) -> tuple:
    return (run["impl"], run["design"], run["ranks"], run["batch"], run["dtype"])


def run_ours(data, tmp, algorithm, ranks, batch, dtype, hidden, epochs, rep, impl="mpinet", before=None) -> dict:
    """One training run; impl "before" runs the package in `before` (--before), "unfused" this one without
    the fused update (mpinet.engine.blas.OFF), for the gains of an engine change measured side by side."""
    out = tmp / f"run-{impl}-{algorithm}-{ranks}-{batch}-{dtype}-{rep}"
    args = ["--data", data, "--out", out, "--algorithm", algorithm, "--expect-ranks", ranks, "--batch-size", batch]
    args += ["--dtype", dtype, "--hidden", *hidden, "--epochs", epochs + 1, "--learning-rate", 0.01]
    args += ["--standardize", "false", "--shuffle", "batches"]
    cmd = [sys.executable, "-m", "mpinet.train"]
    if algorithm != "serial":
        cmd = [*mpiexec_argv(ranks), sys.executable, "-m", "mpi4py", "-m", "mpinet.train"]
    env = dict(os.environ)
    if impl == "before":
        env["PYTHONPATH"] = str(Path(before).resolve())
    elif impl == "unfused":
        env["MPINET_FUSED_UPDATE"] = "0"
    subprocess.run([*cmd, *map(str, args)], check=True, capture_output=True, timeout=1800, env=env)
    import pandas as pd

    m = pd.read_csv(out / "metrics.csv").iloc[1:]  # epoch 1 is warm-up (page faults, first touches)
    meta = json.loads((out / "run.json").read_text())
    return {
        "impl": impl,
        "design": algorithm,
        "ranks": ranks,
        "batch": batch,
        "dtype": dtype,
        "repeat": rep,
        "epoch_s": float(m["time_s"].median()),
        "epochs_s": [float(t) for t in m["time_s"]],
        "compute_s": float(m["compute_s"].median()),
        "comm_s": float(m["comm_s"].median()),
        "peak_rss_mb": meta["peak_rss_mb"],
    }


def run_ddp(data, batch, dtype, hidden, epochs, ranks, rep) -> dict:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + rep * 7 + ranks), WORLD_SIZE=str(ranks))
    procs = []
    for r in range(ranks):
        cmd = [sys.executable, __file__, "--ddp-worker", "--data", str(data), "--batch", str(batch), "--dtype", dtype]
        cmd += ["--epochs", str(epochs), "--hidden", *map(str, hidden)]
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a DDP worker failed")
    times = json.loads(outs[0])
    return {
        "impl": "torch-ddp",
        "design": "ddp",
        "ranks": ranks,
        "batch": batch,
        "dtype": dtype,
        "repeat": rep,
        "epoch_s": float(statistics.median(times)),
        "epochs_s": [float(t) for t in times],
        "compute_s": None,
        "comm_s": None,
        "peak_rss_mb": None,
    }


def ddp_worker(a) -> int:
    """One DDP rank: the same model (Linear + Sigmoid, L2 loss), batches and sample order as mpinet."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")  # read-only views are fine
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    dt = getattr(torch, a.dtype)
    x_all = np.load(Path(a.data) / "train_x.npy", mmap_mode="r")
    y_all = np.load(Path(a.data) / "train_y.npy")
    sizes = [x_all.shape[1], *a.hidden, 6]
    layers = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        layers += [torch.nn.Linear(n_in, n_out), torch.nn.Sigmoid()]
    torch.manual_seed(1)
    model = DDP(torch.nn.Sequential(*layers).to(dt))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    eye = torch.eye(6, dtype=dt)
    n, gb = len(y_all), a.batch * size
    steps = -(-n // gb)
    times = []
    for epoch in range(a.epochs + 1):
        order = np.random.default_rng([1, epoch]).permutation(steps) * gb
        dist.barrier()
        t = time.perf_counter()
        for start in order:
            q, r = divmod(min(gb, n - start), size)
            lo = start + rank * q + min(rank, r)
            hi = lo + q + (rank < r)
            x = torch.from_numpy(np.asarray(x_all[lo:hi], dtype=a.dtype))
            y = eye[torch.from_numpy(y_all[lo:hi])]
            loss = 0.5 * ((model(x) - y) ** 2).sum() / max(hi - lo, 1)
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()
        if epoch > 0:
            times.append(time.perf_counter() - t)
    if rank == 0:
        print(json.dumps(times))
    dist.destroy_process_group()
    return 0


def gemm_limits(features, h1, batches, dtypes) -> dict:
    """Seconds per forward and weight-gradient GEMM of the first layer, one BLAS thread.

    Each is the fastest of the weight layouts and operand orders ([in, out]: x @ W and x.T @ d;
    [out, in]: x @ W.T or W @ x.T, whole or summed over blocks of inputs, and d.T @ x), so the
    limit is the best numpy does at these shapes, not our choice. `fused_s` is the weight-gradient
    GEMM that subtracts its product from the weights as it goes (BLAS beta = 1, mpinet.engine.blas): the
    serial step's backward and update in one.
    """
    from threadpoolctl import threadpool_limits

    from mpinet.engine import blas

    out = {}
    with threadpool_limits(1, user_api="blas"):
        for dt in dtypes:
            rng = np.random.default_rng(0)
            w = rng.random((features, h1)).astype(dt)
            wt = np.ascontiguousarray(w.T)
            gw, gwt = np.empty_like(w), np.empty_like(wt)
            for b in batches:
                x = rng.random((b, features)).astype(dt)
                d = rng.random((b, h1)).astype(dt)
                z, zt = np.empty((b, h1), dtype=dt), np.empty((h1, b), dtype=dt)
                part = np.empty_like(zt)
                fwd = min(
                    _best_time(lambda x=x, z=z: np.matmul(x, w, out=z)),  # noqa: B023 (this dtype's w)
                    _best_time(lambda x=x, z=z: np.matmul(x, wt.T, out=z)),  # noqa: B023
                    _best_time(lambda x=x, zt=zt: np.matmul(wt, x.T, out=zt)),  # noqa: B023
                    # W @ x.T summed over blocks of inputs, as mpinet.engine.model does at small batches
                    _best_time(lambda x=x, zt=zt, part=part: _blocked(wt, x, zt, part)),  # noqa: B023
                )
                tiny = d * np.dtype(dt).type(1e-20)  # the weights stay as they are
                fused = _best_time(lambda x=x, tiny=tiny: blas.subtract_product(wt, tiny, x))  # noqa: B023
                bwd = min(
                    _best_time(lambda x=x, d=d: np.matmul(x.T, d, out=gw)),  # noqa: B023
                    _best_time(lambda x=x, d=d: np.matmul(d.T, x, out=gwt)),  # noqa: B023
                )
                flops = 2 * b * features * h1
                out[f"{dt}/{b}"] = {
                    "fwd_s": fwd,
                    "bwd_s": bwd,
                    "fused_s": fused if blas.fused_available(dt) else float("nan"),
                    "fwd_gflops": flops / fwd / 1e9,
                    "bwd_gflops": flops / bwd / 1e9,
                }
    return out


def _blocked(w, x, zt, part) -> None:
    """zt = w @ x.T summed over blocks of inputs as mpinet.engine.model's rule picks them on this machine
    at this batch (or, where the rule takes one GEMM, over the blocks it would take at batch 4 / batch)."""
    from mpinet.engine.machine import this_machine
    from mpinet.engine.model import blocked_matmul, first_layer_plan

    block = first_layer_plan(w.shape[1], len(x), w.dtype, this_machine()).block
    blocked_matmul(
        w, x, zt, part, block or max(1, first_layer_plan(w.shape[1], 4, w.dtype, this_machine()).block * 4 // len(x))
    )


def memory_bandwidth(nbytes: int, dtype="float32") -> float:
    """Bytes per second one thread moves in a -= b over arrays of nbytes each (two reads and a
    write per element, the update W -= G itself): at the parameters' size the arrays may
    stay in the caches, as the update's do right after the gradient GEMM wrote G; at 256 MB this
    is the memory's own bandwidth."""
    a = np.ones(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
    b = np.full_like(a, 1e-30)
    return 3 * a.nbytes / _median_time(lambda: np.subtract(a, b, out=a), min_reps=5, min_seconds=0.5, stat=min)


def kernels(data, features, hidden, batches, dtypes, gemm, bandwidth) -> dict:
    """One training step's kernels per design as the trainer calls them (mpinet.engine.model's forward and
    backward, the update `params -= grads`), each timed in this process at each batch size, one BLAS
    thread, beside its bound: the first layer's GEMMs at the rate measured alone at their shape (the
    other layers are 0.05 % of the work) and the update's three passes over the parameters at the
    bandwidth measured at the parameters' size (bandwidth[dtype]). The forward pass runs on the
    training file's rows one batch after the other, as in training, so its bound adds reading those
    rows once, at the rate one thread reads them (stream_time), to its GEMM. Serial folds its update into the
    weight-gradient GEMM (backward with update=True); its bound is the better of that GEMM alone and
    the unfused GEMM plus the update's passes. Allreduce needs the gradient in memory to send it."""
    from threadpoolctl import threadpool_limits

    from mpinet.engine.model import Views, Workspace, backward, forward, init_params, layer_views

    out = {}
    with threadpool_limits(1, user_api="blas"):
        for dt in dtypes:
            net = Net((features, *hidden, CLASSES), "l2", False, np.dtype(dt))
            params = init_params(net, 1)
            grads = np.zeros_like(params)
            layers, grad_layers = layer_views(net, params), layer_views(net, grads)
            rng = np.random.default_rng(0)
            for b in batches:
                ws = Workspace(net, b)
                x = rng.random((b, features)).astype(dt)
                y = rng.integers(0, CLASSES, b)
                rows = _Batches(data, b, dt)
                fwd = _median_time(lambda rows=rows, ws=ws: forward(net, layers, rows.next(), ws))  # noqa: B023
                bwd = _median_time(lambda x=x, y=y, ws=ws: backward(Views(net, layers, grad_layers, ws), x, y, 1e-9))  # noqa: B023
                fused = _median_time(
                    lambda x=x, y=y, ws=ws: backward(Views(net, layers, grad_layers, ws), x, y, 1e-20, update=True)  # noqa: B023
                )
                upd = _median_time(lambda: np.subtract(params, grads, out=params))  # noqa: B023
                g = gemm[f"{dt}/{b}"]
                update_bound = 3 * params.nbytes / bandwidth[dt]
                forward_k = {"bound_s": g["fwd_s"] + stream_time(data, b), "measured_s": fwd}
                out[f"{dt}/{b}"] = {
                    "serial": {
                        "forward": forward_k,
                        "backward + update": {
                            "bound_s": np.nanmin([g["fused_s"], g["bwd_s"] + update_bound]),
                            "measured_s": fused,
                        },
                    },
                    "allreduce": {
                        "forward": forward_k,
                        "backward": {"bound_s": g["bwd_s"], "measured_s": bwd},
                        "update": {"bound_s": update_bound, "measured_s": upd},
                    },
                }
    return out


def measure_kernels(data: Path, a) -> tuple[dict, dict, dict]:
    """The GEMM limits, the memory bandwidths (256 MB and at the parameters' size) and the step's
    kernels beside their bounds, for the workload in `a`."""
    hidden = tuple(a.hidden)
    gemm = gemm_limits(a.features, hidden[0], a.batches, a.dtypes)
    n_params = Net((a.features, *hidden, CLASSES)).n_params
    bandwidth = {"dram": memory_bandwidth(256 << 20)}
    bandwidth |= {dt: memory_bandwidth(n_params * np.dtype(dt).itemsize, dt) for dt in a.dtypes}
    return gemm, bandwidth, kernels(data, a.features, hidden, a.batches, a.dtypes, gemm, bandwidth)


def stream_time(data: Path, batch: int) -> float:
    """Seconds to read one batch of the training file's rows that no earlier call touched, one
    batch after another as training does (a sum over the rows; the median over the file's batches):
    the rows come from further than the parameters, which stay in the caches from step to step."""
    x = _my_rows(data)
    acc = np.empty(x.shape[1], dtype=x.dtype)
    _SHARE["sync"]()
    times = []
    for _ in range(2):  # the first pass maps the pages
        times.clear()
        for start in range(0, len(x) - batch + 1, batch):
            t = time.perf_counter()
            np.add.reduce(x[start : start + batch], axis=0, out=acc)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def step_bound(k: dict, allreduce_s: float = 0.0) -> float:
    """The roofline of one step: every kernel at its bound, and the Allreduce as measured alone."""
    return sum(v["bound_s"] for v in k.values()) + allreduce_s


def allreduce_time(n_params, dtype) -> float:
    """Median seconds of one in-place MPI_Allreduce of the parameter buffer on 2 ranks."""
    cmd = [*mpiexec_argv(2), sys.executable, __file__, "--allreduce-worker", "--count", str(n_params)]
    p = subprocess.run([*cmd, "--dtype", dtype], check=True, capture_output=True, text=True, timeout=600)
    return float(p.stdout.strip())


def allreduce_worker(a) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buf = np.ones(a.count, dtype=a.dtype)
    for _ in range(3):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    times = []
    for _ in range(30):
        comm.Barrier()
        t = MPI.Wtime()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        times.append(comm.allreduce(MPI.Wtime() - t, op=MPI.MAX))
    if comm.Get_rank() == 0:
        print(statistics.median(times))
    return 0


# --- the table ------------------------------------------------------------------------------


def summarize(runs, gemm, allreduce, a, n_params, torch_ok, steps, bandwidth) -> dict:
    """The Markdown report and the per-cell numbers (each with its 95 % interval) the headlines are read from."""
    from mpinet.analysis.confidence import compare_launches

    by_cell: dict[tuple, list[dict]] = {}
    for r in runs:
        by_cell.setdefault(_cell_of(r), []).append(r)

    def ratio(this: tuple, other: tuple) -> dict:
        """other ÷ this over the runs' own medians, with its interval (NaN when a side is missing)."""
        if other not in by_cell:
            return _nan_ratio()
        per_run = [np.array([r["epoch_s"] for r in by_cell[k]]) for k in (this, other)]
        return compare_launches(*per_run)

    header = ["dtype", "batch/rank", "design", "ranks", "runs", "epoch s [95 % interval]", "samples/s", "comm %"]
    header += ["GEMM-limit %", "roofline % [95 %]", "14,034-image epoch s", "speedup vs serial"]
    header += ["DDP ÷ ours", "before ÷ ours"]
    table = [header, ["---"] * len(header)]
    targets, noisy = {}, []
    for key, done in by_cell.items():
        impl, design, ranks, batch, dtype = key
        ours = impl != "torch-ddp"  # this engine, or a variant of it
        sp = spread(done)
        train_ranks = ranks - 1 if design == "paramserver" else ranks
        gk = gemm[f"{dtype}/{batch}"]
        n_steps = -(-a.samples // (batch * train_ranks))
        share = n_steps * (gk["fwd_s"] + gk["bwd_s"]) / sp["median"] if ours else float("nan")
        roof = _roofline(steps[f"{dtype}/{batch}"], design, ranks, allreduce.get(dtype, 0.0), n_steps, 1.0)
        roof = {"share": roof / sp["median"], "low": roof / sp["high"], "high": roof / sp["low"]}
        speedup = ratio(key, ("mpinet", "serial", 1, batch, dtype)) if impl == "mpinet" else _nan_ratio()
        ddp = ratio(key, ("torch-ddp", "ddp", ranks, batch, dtype)) if ours and torch_ok else _nan_ratio()
        gain = ratio(key, ("before", design, ranks, batch, dtype)) if impl != "before" else _nan_ratio()
        label = design if impl in ("mpinet", "torch-ddp") else f"{design} [{impl}]"
        comm_s = np.median([r["comm_s"] for r in done]) if ours else float("nan")
        compute_s = np.median([r["compute_s"] for r in done]) if ours else float("nan")
        comm = 100 * comm_s / (compute_s + comm_s) if ours else float("nan")
        intel = sp["median"] / a.samples * INTEL_SAMPLES
        still = sp["half_width"] <= a.precision
        if not still:
            noisy.append(f"{dtype} batch {batch} {label} on {ranks} (±{100 * sp['half_width']:.0f} %)")
        table.append(
            [dtype, batch, label, ranks, len(done), f"{sp['median']:.3f} [{sp['low']:.3f}, {sp['high']:.3f}]"]
            + [f"{a.samples / sp['median']:,.0f}", _f(comm, 0), _f(100 * share, 0), _share(roof)]
            + [f"{intel:.2f}", _ratio(speedup), _ratio(ddp), _ratio(gain)]
        )
        if not still:
            table[-1][5] += " (noisy)"
        variant = "" if impl in ("mpinet", "torch-ddp") else f"/{impl}"
        targets[f"{dtype}/{batch}/{design}/{ranks}{variant}"] = {
            "epoch_s": sp["median"],
            "epoch_ci": [sp["low"], sp["high"]],
            "runs": len(done),
            "settled": still,
            "gemm_share": share,
            "roofline_share": roof["share"],
            "roofline_ci": [roof["low"], roof["high"]],
            "speedup_vs_serial": speedup["ratio"],
            "speedup_ci": [speedup["ratio_ci_low"], speedup["ratio_ci_high"]],
            "ddp_over_ours": ddp["ratio"],
            "before_over_ours": gain["ratio"],
            "before_ci": [gain["ratio_ci_low"], gain["ratio_ci_high"]],
            "peak_rss_mb": float(np.median([r["peak_rss_mb"] or np.nan for r in done])),
            "intel_epoch_s": intel,
        }
    markdown = _report(table, targets, gemm, allreduce, a, n_params, torch_ok, steps, bandwidth, noisy)
    return {"markdown": markdown, "targets": targets}


def _nan_ratio() -> dict:
    return {"ratio": float("nan"), "ratio_ci_low": float("nan"), "ratio_ci_high": float("nan")}


def _ratio(r: dict) -> str:
    if r["ratio"] != r["ratio"]:
        return "-"
    if r["ratio_ci_low"] != r["ratio_ci_low"]:
        return f"{r['ratio']:.2f}"
    return f"{r['ratio']:.2f} [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]"


def _share(roof: dict) -> str:
    if roof["share"] != roof["share"]:
        return "-"
    return f"{100 * roof['share']:.0f} [{100 * roof['low']:.0f}, {100 * roof['high']:.0f}]"


def _report(table, targets, gemm, allreduce, a, n_params, torch_ok, steps, bandwidth, noisy) -> str:
    """The Markdown report around the table: the machine and workload, limits, kernels, headlines."""
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    lines = [
        f"## mpinet benchmark, {date.today().isoformat()}",
        "",
        f"Machine: {machine}; Python {platform.python_version()}, numpy {np.__version__} ({_blas()}); "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}.",
        f"Workload: {a.samples} samples x {a.features} features, net {a.features}-{'-'.join(map(str, a.hidden))}-6 "
        f"({n_params:,} parameters), 1 BLAS thread per rank, {a.epochs} timed epochs per run, {a.repeats} to "
        f"{a.max_repeats} runs per cell, until the median epoch is known to ±{100 * a.precision:.0f} %; cells are "
        "the median epoch over runs and epochs with its 95 % interval; ratios are of the runs' medians, with theirs.",
        f"{_machine_line()}",
        "",
        *("| " + " | ".join(map(str, row)) + " |" for row in table),
        "",
        "GEMM limit, one thread (GFLOP/s): "
        + "; ".join(f"{k}: fwd {v['fwd_gflops']:.0f}, bwd {v['bwd_gflops']:.0f}" for k, v in gemm.items()),
    ]
    at_size = "; ".join(f"{dt} {bw / 1e9:.1f} GB/s" for dt, bw in bandwidth.items() if dt != "dram")
    lines += [
        "",
        f"Memory bandwidth, one thread (a -= b): {bandwidth['dram'] / 1e9:.1f} GB/s over 256 MB arrays; "
        f"at the parameter buffer's size (the update's bound): {at_size}.",
        "",
    ]
    lines += kernel_table(steps)
    if allreduce:
        sizes = {dt: n_params * np.dtype(dt).itemsize / 1e6 for dt in allreduce}
        lines.append(
            "MPI_Allreduce of the parameter buffer alone, 2 ranks: "
            + "; ".join(f"{dt}: {t * 1e3:.2f} ms ({sizes[dt]:.1f} MB)" for dt, t in allreduce.items())
        )
    if not torch_ok:
        lines.append("PyTorch DDP: skipped (torch not importable here; `pip install torch` adds it).")
    if noisy:
        lines += ["", f"Too noisy to conclude (not within ±{100 * a.precision:.0f} % after {a.max_repeats} runs): "]
        lines[-1] += "; ".join(noisy) + "."
    lines += ["", *headline_lines(targets, a, n_params)]
    return "\n".join(lines) + "\n"


def _roofline(k: dict, design: str, ranks: int, allreduce_s: float, n_steps: int, epoch_s: float) -> float:
    """The share of the roofline an epoch reaches: steps x the step's bound over the epoch's time.
    Every design's bound is its kernels alone: the same kernels timed with P ranks at once (the
    kernel table's "P ranks at once" rows) show the cost of sharing a node, but are no lower bound
    (both ranks stream all the time there, while in training one often waits in the reduction).
    The parameter server has none here: its rank 0 serves the workers one after another."""
    if design not in k:
        return float("nan")
    return n_steps * step_bound(k[design], allreduce_s if ranks > 1 else 0.0) / epoch_s


def kernel_table(steps: dict) -> list[str]:
    """Per dtype, batch and kernel of a step: its bound, the trainer's own call, and the gap."""
    rows = ["| dtype/batch | design | kernel | bound ms | measured ms | bound / measured |"]
    rows.append("|---|---|---|---|---|---|")
    for key, designs in steps.items():
        for design, k in designs.items():
            for name, v in k.items():
                b, m = v["bound_s"] * 1e3, v["measured_s"] * 1e3
                rows.append(f"| {key} | {design} | {name} | {b:.3f} | {m:.3f} | {100 * b / m:.0f} % |")
            total_b, total_m = (sum(v[f] for v in k.values()) * 1e3 for f in ("bound_s", "measured_s"))
            share = 100 * total_b / total_m
            rows.append(f"| {key} | {design} | step | {total_b:.3f} | {total_m:.3f} | {share:.0f} % |")
    return rows


def headline_lines(t, a, n_params) -> list[str]:
    def get(tag, field):
        return t.get(tag, {}).get(field, float("nan"))

    shard_mb = a.samples * a.features * 4 / 2 / 1e6
    rss = get("float32/32/allreduce/2", "peak_rss_mb")
    budget = shard_mb + 3 * n_params * 4 / 1e6 + 150

    def share(tag):
        low, high = t.get(tag, {}).get("roofline_ci", [float("nan")] * 2)
        return f"{_pct(get(tag, 'roofline_share'))} [{_pct(low)}, {_pct(high)}]"

    def speedup(tag):
        low, high = t.get(tag, {}).get("speedup_ci", [float("nan")] * 2)
        return f"{_f(get(tag, 'speedup_vs_serial'), 2)} [{_f(low, 2)}, {_f(high, 2)}]"

    rows = [
        *(
            (
                f"roofline share [95 %], {name}, batch 4 / 32 / 256",
                " / ".join(share(f"float32/{b}/{tag}") for b in (4, 32, 256)),
            )
            for name, tag in (("serial", "serial/1"), ("allreduce on 2 ranks", "allreduce/2"))
        ),
        *(
            (
                f"speedup over serial [95 %], {name} on 2 ranks, batch 4 / 32 / 256",
                " / ".join(speedup(f"float32/{b}/{d}/2") for b in (4, 32, 256)),
            )
            for name, d in (("allreduce", "allreduce"), ("allgather", "allgather"), ("sharded", "sharded"))
        ),
        ("serial epoch at batch 256, share of the GEMM limit", _pct(get("float32/256/serial/1", "gemm_share"))),
        ("serial epoch at batch 32, share of the GEMM limit", _pct(get("float32/32/serial/1", "gemm_share"))),
        (
            "PyTorch DDP (gloo) time / ours, 2 ranks, batch 256 / 32 / 4",
            " / ".join(_f(get(f"float32/{b}/allreduce/2", "ddp_over_ours"), 2) for b in (256, 32, 4)),
        ),
        (
            "full 14,034-image epoch, 1 rank, batch 32 (extrapolated)",
            f"{get('float32/32/serial/1', 'intel_epoch_s'):.2f} s",
        ),
        (
            f"peak memory of a rank (allreduce, 2 ranks, batch 32; shard + 3 x params + 150 MB = {budget:.0f} MB)",
            f"{rss:.0f} MB",
        ),
    ]
    # the goals for these rows are written in docs/performance.md, next to what they mean
    return [
        "| headline (fp32, 1 BLAS thread per rank) | measured |",
        "|---|---|",
        *(f"| {n} | {m} |" for n, m in rows),
    ]


def _median_time(fn, min_reps=5, min_seconds=0.2, stat=statistics.median) -> float:
    _SHARE["sync"]()
    fn()
    times, start = [], time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return stat(times)


def _best_time(fn) -> float:
    """The fastest of the repetitions: a bound is the best the machine did, not its typical run."""
    return _median_time(fn, stat=min)


class _Batches:
    """Consecutive batches of the benchmark's training file, one after the other as the trainer
    reads them (shuffle=batches), so a kernel timed on them reads rows no earlier call cached."""

    def __init__(self, data: Path, batch: int, dtype):
        self.x = _my_rows(data)
        self.batch, self.dtype, self.k = batch, np.dtype(dtype), 0
        self.buf = np.empty((batch, self.x.shape[1]), dtype=dtype)

    def next(self) -> np.ndarray:
        start = self.k * self.batch % (len(self.x) - self.batch + 1)
        self.k += 1
        rows = self.x[start : start + self.batch]
        if rows.dtype == self.dtype:
            return rows
        self.buf[...] = rows  # float64 runs convert as the trainer does
        return self.buf


def _my_rows(data: Path) -> np.ndarray:
    """The training file's rows this rank reads (all of them outside --kernels-worker)."""
    x = np.load(data / "train_x.npy", mmap_mode="r")
    k = len(x) // _SHARE["size"]
    return x[_SHARE["rank"] * k : (_SHARE["rank"] + 1) * k]


def shared_kernels(data, a, ranks: int) -> dict:
    """kernels() as rank 0 measures them while `ranks` ranks run the same kernels at once."""
    cmd = [*mpiexec_argv(ranks), sys.executable, __file__, "--kernels-worker", "--data", str(data)]
    cmd += ["--features", str(a.features), "--hidden", *map(str, a.hidden), "--batches", *map(str, a.batches)]
    p = subprocess.run([*cmd, "--dtypes", *a.dtypes], check=True, capture_output=True, text=True, timeout=1800)
    return json.loads(p.stdout)


def kernels_worker(a) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    _SHARE.update(rank=comm.Get_rank(), size=comm.Get_size(), sync=comm.Barrier)
    os.environ["OMP_NUM_THREADS"] = "1"
    _, _, steps = measure_kernels(Path(a.data), a)
    if comm.Get_rank() == 0:
        print(json.dumps(steps))
    return 0


def _machine_line() -> str:
    """The facts the engine's first-layer plan follows (mpinet.engine.machine), and the CPU."""
    from mpinet.engine.machine import this_machine
    from mpinet.engine.runfiles import cpu_model

    m = this_machine()
    family = _cpuinfo("cpu family")
    family = f", family {family} model {_cpuinfo('model')}" if family else ""
    blas = f"{m.blas} {m.blas_kernel}"
    return f"CPU: {cpu_model()}{family}; L2 per core {m.l2_bytes >> 10} KiB ({m.l2_source}); BLAS {blas}."


def _cpuinfo(key: str) -> str:
    """A field of /proc/cpuinfo's first processor, or ''."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        pass
    return ""


def _blas() -> str:
    from threadpoolctl import threadpool_info

    return ", ".join(
        f"{i['internal_api']} {i['version']} {i.get('architecture')}"
        for i in threadpool_info()
        if i["user_api"] == "blas"
    )


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _progress(round_, done, total, run) -> None:
    print(
        f"[round {round_}: {done}/{total}] {run['impl']} {run['design']} P={run['ranks']} B={run['batch']} "
        f"{run['dtype']}: {run['epoch_s']:.3f} s/epoch",
        file=sys.stderr,
        flush=True,
    )


def _f(v, digits) -> str:
    return "-" if v != v else f"{v:.{digits}f}"


def _pct(v) -> str:
    return "-" if v != v else f"{100 * v:.0f} %"


def _x(v) -> str:
    return "-" if v != v else f"{v:.2f}x"


if __name__ == "__main__":
    sys.exit(main())
