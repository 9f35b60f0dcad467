"""A finished run's files: metrics.csv, confusion.csv, weights.npz, run.json with its provenance
(what ran where, with which libraries and settings) and timeline.json. Nothing here changes a number."""

import csv
import os
import platform
import socket
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from mpinet import __version__
from mpinet.datasets import dataset
from mpinet.engine import blas
from mpinet.engine.checkpoint import timed_by
from mpinet.engine.comm import Comm, mpi_library_version
from mpinet.engine.loop import METRIC_COLUMNS, Result
from mpinet.engine.machine import this_machine
from mpinet.engine.options import Options, data_ranks, train_size
from mpinet.engine.timeline import trace_events, unrecorded
from mpinet.files import atomic_path, write_json
from mpinet.fingerprints import NUMERICS
from mpinet.layout import CONFUSION_FILE, METRICS_FILE, RECORD_FILE, TIMELINE_FILE, WEIGHTS_FILE

# Settings that change timings without changing a number: BLAS kernels, and MPICH's network module
# and transport (a run across nodes over TCP and one over InfiniBand are different measurements)
RECORDED_ENVIRONMENT = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "MPIR_CVAR_CH4_NETMOD",
    "FI_PROVIDER",
    "FI_TCP_IFACE",
    "UCX_TLS",
    "UCX_NET_DEVICES",
)
SLURM_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NODELIST",
    "SLURM_MPI_TYPE",
    "SLURM_CLUSTER_NAME",
)


def write_outputs(out: Path, result: Result, opts: Options, arrays: dataset.Arrays, meta: dict, timeline: dict) -> None:
    """metrics.csv, confusion.csv, weights.npz, timeline.json (run_timeline) and run.json (last), each
    written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / TIMELINE_FILE, timeline)  # a declared file of every run (run_timeline: one without events)
    with atomic_path(out / METRICS_FILE) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS, extrasaction="ignore")  # a resumed row's engine
        w.writeheader()
        w.writerows(result.metrics)
    with atomic_path(out / CONFUSION_FILE) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["true\\predicted", *arrays.classes])
        for name, row in zip(arrays.classes, result.confusion):
            w.writerow([name, *row.tolist()])
    with atomic_path(out / WEIGHTS_FILE, suffix=".npz") as tmp:
        np.savez(tmp, params=result.params, sizes=np.array(result.net.sizes))
    write_json(out / RECORD_FILE, {"options": asdict(opts), **meta})


def run_timeline(result: Result, opts: Options, meta: dict) -> dict:
    """The trace of the run's timeline (mpinet.engine.timeline); one without events when this launch
    did not train the last epoch."""
    if result.timeline is None:
        return unrecorded("this launch resumed after the last epoch and trained none", {"mpinet": __version__})
    about = {
        "algorithm": opts.algorithm,
        "ranks": meta["ranks"],
        "epoch": opts.epochs,
        "steps_recorded": max(len(lane["steps"]) for lane in result.timeline),
        "clock": "microseconds from the epoch's start; the ranks start it together (a barrier)",
        "mpinet": __version__,
    }
    return trace_events(result.timeline, meta.get("rank_hosts", []), about)


def run_metadata(
    comm: Comm, opts: Options, data_dir: str, arrays: dataset.Arrays, launcher: str | None = None, result=None
) -> dict:
    """Provenance for run.json; called on every rank (host names are gathered). `launcher` is the
    line that started the ranks, as the workflow passed it; `result` (a Result) what this rank trained:
    the design (auto's choice), its exchange's layout and the first layer's plan."""
    result = result or Result(np.empty(0), None, design=opts.algorithm, fused=comm.mpi is None)
    opts = replace(opts, algorithm=result.design)
    meta = {
        "ranks": comm.size,
        "data_ranks": data_ranks(opts.algorithm, comm.size),
        **_placement(comm, result.first_layer),
        "data": {
            "path": str(data_dir),
            # the samples trained on (a subset when train_samples or samples_per_rank asks), of all
            "train_samples": train_size(opts, data_ranks(opts.algorithm, comm.size), len(arrays.train_y)),
            "available_train_samples": len(arrays.train_y),
            "test_samples": len(arrays.test_y),
            "features": int(arrays.train_x.shape[1]),
            "classes": arrays.classes,
        },
        "mpinet": __version__,
        "numerics": NUMERICS.value(),  # what decides the numbers (mpinet.fingerprints)
        # the engine that timed the epochs: its code's hash, never a release name typed by hand (a
        # speedup divides only timings of one engine: mpinet.analysis.aggregate)
        "timed_by": timed_by(result.metrics),
        **_libraries(opts, result.fused),
        "environment": {k: os.environ[k] for k in RECORDED_ENVIRONMENT if k in os.environ},
        # set by srun in every task it starts: shows the ranks came from SLURM, and how many
        "slurm": {k: os.environ[k] for k in SLURM_VARIABLES if k in os.environ},
        "design": result.design,  # what trained: the options' algorithm, or what auto chose
        **result.layout,  # how the design laid its ranks out (a grid's shape), where it chooses
    }
    if result.trial_step_s:
        meta["auto_trial_step_s"] = result.trial_step_s
    if comm.mpi is not None:
        import mpi4py

        from mpinet.engine.mpilib import family_of

        version = mpi_library_version()
        meta["mpi"] = {
            "library": version,
            "family": family_of(version),
            "mpi4py": mpi4py.__version__,
            "launcher": launcher,
        }
    return meta


def _placement(comm: Comm, first_layer: str) -> dict:
    """Where the ranks ran: hosts, their cores and CPUs, each rank's host and CPU binding, and each
    host's L2 with the first layer's plan it gave (gathered from every rank)."""
    host = socket.gethostname()
    names = comm.gather_strings(host)  # by rank
    cpus = dict(zip(names, comm.gather_strings(str(os.cpu_count() or 1))))  # host -> its CPUs
    models = dict(zip(names, comm.gather_strings(cpu_model())))
    # each rank's CPUs as the OS lets it run (a task plugin's binding shows here): a 2-thread rank
    # bound to one CPU runs its BLAS threads on one core
    affinity = comm.gather_strings(",".join(map(str, sorted(os.sched_getaffinity(0)))))
    m = this_machine()
    plans = comm.gather_objects({"l2_bytes": m.l2_bytes, "l2_source": m.l2_source, "first_layer": first_layer})
    return {
        "hosts": sorted(cpus),  # each rank's own host name: where the ranks really ran
        "nodes": len(cpus),
        "cores": sum(int(n) for n in cpus.values()),  # on all the hosts the ranks ran on
        "rank_hosts": names,
        "cpu_model": models,  # host -> the CPU it has (/proc/cpuinfo)
        # host -> its L2 per core and the first layer's operand order and blocking it gave
        # (mpinet.engine.model.first_layer_plan)
        "first_layer": dict(zip(names, plans)),
        "affinity": [[int(c) for c in a.split(",") if c] for a in affinity],  # by rank
    }


def _libraries(opts: Options, fused: bool) -> dict:
    """Python, numpy and numpy's BLAS as this rank runs them, and whether its update was fused."""
    from threadpoolctl import threadpool_info

    blas_info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": [{k: i.get(k) for k in ("internal_api", "version", "architecture", "num_threads")} for i in blas_info],
        "blas_threads": opts.blas_threads,
        # the step's update folded into the gradient GEMM (mpinet.engine.blas): serial and local SGD's own
        # steps, where numpy's BLAS allows it; False means matmul, then subtract (slower, same numbers)
        "fused_update": bool(fused and blas.fused_available(opts.dtype)),
    }


def cpu_model() -> str:
    """This host's CPU model as the OS names it (/proc/cpuinfo), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
