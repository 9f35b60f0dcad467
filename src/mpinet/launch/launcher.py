"""How ranks are started, for the MPI library mpi4py actually loads: MPICH (and its derivatives),
Open MPI or Intel MPI, detected rather than configured.

The launchers differ in syntax and defaults: MPICH's Hydra takes `-bind-to core` and oversubscribes
cores silently; Open MPI's `mpiexec` reads `-bind-to` as a program name, refuses more ranks than
cores without `--oversubscribe` and refuses root without `--allow-run-as-root`; Intel MPI pins ranks
itself (I_MPI_PIN). Under SLURM, `srun` starts the ranks and needs the PMI the library speaks:
PMI-2 for the PyPI mpich and Intel wheels, PMIx for Open MPI.
"""

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache

from mpinet import MpinetError
from mpinet.engine.mpilib import Library, family_of, library


@cache
def mpiexec_family(mpiexec: str = "mpiexec") -> tuple[str, str]:
    """(path, family) of the mpiexec the shell would run."""
    path = shutil.which(mpiexec)
    if path is None:
        raise MpinetError(f"no `{mpiexec}` on PATH; put the MPI library's bin directory on PATH")
    p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return path, family_of(p.stdout + p.stderr)


def mpiexec_command(lib: Library, ranks: int, cores: int, bind: bool, root: bool) -> str:
    """The local launcher line before `-n <ranks>`: binding each rank to a core when asked and when
    the ranks fit the cores, oversubscribing otherwise (the default study runs 3 ranks on 2 cores)."""
    over = ranks > cores
    if lib.family == "openmpi":
        parts = ["mpiexec"]
        if root:
            parts.append("--allow-run-as-root")  # Open MPI refuses root without it (containers, CI)
        parts += ["--oversubscribe", "--bind-to", "none"] if over else ["--bind-to", "core" if bind else "none"]
        return " ".join(parts)
    if lib.family == "intel":
        # Intel MPI pins ranks itself; pinning several ranks to one core would serialise them
        return "env I_MPI_PIN=0 mpiexec" if over or not bind else "mpiexec"
    if lib.family == "mpich":
        return "mpiexec -bind-to core" if bind and not over else "mpiexec"
    return "mpiexec"


def srun_command(lib: Library, cpus_per_rank: int = 1) -> str:
    """The SLURM launcher line: the PMI the library speaks, the whole step ended when a rank dies,
    and each rank's CPUs named (since SLURM 22.05 srun no longer inherits the job's
    --cpus-per-task, so where tasks are bound a 2-thread rank would get one CPU)."""
    pmi = "pmix" if lib.family == "openmpi" else "pmi2"
    return f"srun --mpi={pmi} --kill-on-bad-exit=1 --cpus-per-task={cpus_per_rank}"


# Set by mpinet.launch.pack in its allocation's batch script: the isolation its job steps get
# (exclusive-node: whole nodes per step; shared-node: only the CPUs a step asks for).
PACK_ENV = "MPINET_PACK"
PACK_MODES = ("exclusive-node", "shared-node")


def step_nodes(ranks: int, cpus_per_rank: int, nodes: int | None, node_cpus: int) -> int:
    """Nodes one step of a packed allocation takes: the experiment's `nodes`, else as many as its
    ranks' CPUs fill (nodes of `node_cpus` CPUs each)."""
    if nodes and nodes == nodes:  # NaN: not given
        return int(nodes)
    return max(1, math.ceil(ranks * cpus_per_rank / node_cpus))


def step_options(nodes: int, minutes: int, name: str, whole: bool) -> str:
    """srun options of one step in a packed allocation: its nodes, either whole (--whole: the step
    holds every CPU of them, so no other step starts there while it runs; SLURM 22.05's default for a
    step is the CPUs it asks for) or only its own CPUs (--exact), its own time limit (a step that
    outgrows its estimate is ended by it, not by the allocation's) and its name in sacct."""
    return f"--nodes={nodes} {'--whole' if whole else '--exact'} --time={minutes} --job-name={shlex.quote(name)}"


def step_priority(nodes: int, seconds: float) -> float:
    """A job's priority in a packed allocation, whose Snakemake starts the highest that fits first
    (its greedy scheduler): the widest steps first, the longest estimate first among one width (the
    microbenchmark, seconds inf, first of all). The narrower steps then fill the nodes beside the
    wide ones, and no long run is left to the end with the other nodes idle."""
    return nodes * 1e9 + min(seconds, 1e9 - 1)


def allocation_node_cpus(cpus_per_node: str | None = None) -> int:
    """The smallest node's CPUs in SLURM_JOB_CPUS_PER_NODE ('2(x3),4' -> 2), this job's by default."""
    if cpus_per_node is None:
        cpus_per_node = os.environ.get("SLURM_JOB_CPUS_PER_NODE", "")
    counts = [int(n) for n, _ in re.findall(r"(\d+)(\(x\d+\))?", cpus_per_node)]
    if not counts:
        raise MpinetError(f"SLURM_JOB_CPUS_PER_NODE={cpus_per_node!r}: no CPU count in it")
    return min(counts)


def check_mpiexec(lib: Library, mpiexec: str = "mpiexec") -> None:
    """MpinetError when the mpiexec on PATH belongs to another MPI than the one mpi4py loads: its
    ranks would each start as an independent 1-rank job."""
    path, family = mpiexec_family(mpiexec)
    if "unknown" not in (family, lib.family) and family != lib.family:
        raise MpinetError(
            f"{path} is {family}'s launcher but mpi4py loads {lib.version} ({lib.family}); put the "
            f"matching mpiexec first on PATH (e.g. {os.path.dirname(sys.executable)}) or rebuild mpi4py "
            "against this MPI: pip install --no-binary mpi4py mpi4py"
        )


def mpiexec_argv(ranks: int, bind: bool = False) -> list[str]:
    """The local launcher for `ranks` ranks as an argument list, for this Python's MPI library, with
    the mpiexec installed beside this Python when there is one (a wheel's), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = beside if os.path.exists(beside) else "mpiexec"
    line = mpiexec_command(library(sys.executable), ranks, os.cpu_count() or 1, bind, os.geteuid() == 0)
    return [exe if part == "mpiexec" else part for part in line.split()] + ["-n", str(ranks)]
