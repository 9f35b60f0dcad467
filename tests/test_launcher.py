"""The launcher follows the MPI library mpi4py loads: its family, its mpiexec syntax, its PMI."""

import os
import stat

import pytest

from mpinet import MpinetError
from mpinet.engine.mpilib import Library, family_of, library
from mpinet.launch.launcher import check_mpiexec, mpiexec_command, mpiexec_family, srun_command

MPICH = Library("mpich", "MPICH Version:      5.0.2")
OPENMPI = Library("openmpi", "Open MPI v5.0.11, package: Open MPI user@localhost Distribution")
INTEL = Library("intel", "Intel(R) MPI Library 2021.19.0 for Linux* OS")


@pytest.mark.parametrize(
    "text,family",
    [
        (MPICH.version, "mpich"),
        (OPENMPI.version, "openmpi"),
        (INTEL.version, "intel"),
        ("mpiexec (Open MPI) 5.0.11", "openmpi"),
        ("prterun (PRRTE) 3.0.13", "openmpi"),
        ("HYDRA build details:\n    Version: 5.0.2", "mpich"),
        ("MVAPICH2 Version 2.3.7", "mpich"),
        ("Intel(R) MPI Library for Linux* OS, Version 2021.19 (MPICH-derived)", "intel"),
        ("Spectrum something", "unknown"),
    ],
)
def test_the_family_is_read_from_the_library_text(text, family):
    assert family_of(text) == family


def test_this_environment_loads_a_known_mpi():
    assert library().family in ("mpich", "openmpi", "intel")


def test_each_family_gets_its_own_launcher_syntax():
    assert mpiexec_command(MPICH, 2, 2, True, True) == "mpiexec -bind-to core"
    assert mpiexec_command(MPICH, 3, 2, True, True) == "mpiexec"  # oversubscribed: no binding
    assert mpiexec_command(OPENMPI, 2, 2, True, False) == "mpiexec --bind-to core"
    assert mpiexec_command(OPENMPI, 3, 2, True, True) == "mpiexec --allow-run-as-root --oversubscribe --bind-to none"
    assert mpiexec_command(INTEL, 3, 2, True, False) == "env I_MPI_PIN=0 mpiexec"
    assert srun_command(OPENMPI).startswith("srun --mpi=pmix ") and srun_command(MPICH).startswith("srun --mpi=pmi2 ")
    assert "--kill-on-bad-exit=1" in srun_command(INTEL)


def test_an_mpiexec_of_another_mpi_is_refused_naming_both(tmp_path, monkeypatch):
    fake = tmp_path / "mpiexec"  # a site's Open MPI launcher first on PATH, in front of the MPICH wheel's
    fake.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 4.1.4'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    mpiexec_family.cache_clear()
    try:
        with pytest.raises(MpinetError) as e:
            check_mpiexec(MPICH)
        assert str(fake) in str(e.value) and "openmpi" in str(e.value) and "MPICH" in str(e.value)
        check_mpiexec(Library("openmpi", "Open MPI v4.1.4"))  # the matching library passes
    finally:
        mpiexec_family.cache_clear()
