"""Which MPI library mpi4py loads (MPICH, Open MPI or Intel MPI), detected rather than configured:
recorded in run.json and used by the launch lines (mpinet.launch.launcher) and the cost model."""

import subprocess
import sys
from dataclasses import dataclass
from functools import cache

from mpinet import MpinetError


@dataclass(frozen=True)
class Library:
    family: str  # mpich, openmpi, intel or unknown (family_of)
    version: str  # the library's own first line, e.g. "MPICH Version: 5.0.2"


def family_of(version: str) -> str:
    """mpich, openmpi, intel or unknown, from MPI_Get_library_version's text (or `mpiexec --version`)."""
    text = version.lower()
    if "intel(r) mpi" in text or "intel mpi" in text:
        return "intel"  # before mpich: Intel MPI derives from MPICH and may say so
    if "open mpi" in text or "open-mpi" in text or "prrte" in text:
        return "openmpi"
    if "mpich" in text or "hydra" in text or "mvapich" in text:
        return "mpich"
    return "unknown"


@cache
def library(python: str = sys.executable) -> Library:
    """The MPI library mpi4py loads in `python`, asked in a child process without MPI_Init (so this
    process never loads MPI)."""
    code = (
        "import mpi4py; mpi4py.rc.initialize = False; mpi4py.rc.finalize = False\n"
        "from mpi4py import MPI; print(MPI.Get_library_version().strip().splitlines()[0])"
    )
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise MpinetError(f"mpi4py cannot load an MPI library in {python}: {last}")
    version = p.stdout.strip()
    return Library(family_of(version), version)
