"""Shared fixtures: small real datasets made in tmp_path, and helpers that run the real trainer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpinet.datasets.csvdata import prepare_table
from mpinet.launch.launcher import mpiexec_argv

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# A machine may set PYTHONDONTWRITEBYTECODE; then every process the tests start (each Snakemake, each
# job, each rank, in every copy of the repository) compiles the package's modules from source again.
# Compiled once per copy instead, into __pycache__ (which git ignores); what runs is the same.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


# The files that take longest start first where a run keeps the collection order (make test-local:
# pytest-xdist's --dist loadfile with --no-loadscope-reorder, two files at a time; by default xdist
# starts the files with the most tests first), so the short files fill the end rather than a long
# one running alone. Only the order of whole files changes; within a file, tests keep theirs.
SLOW_FIRST = ("test_workflow.py", "test_workflow_paths.py", "test_upgrade.py", "test_deploy.py")


def pytest_collection_modifyitems(items):
    first = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(SLOW_FIRST)))


def write_dataset(d: Path, n_train=60, n_test=30, dim=5, classes=3, seed=0) -> Path:
    """A learnable random dataset directory: class-dependent means plus noise."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        y = rng.integers(0, classes, n)
        x = rng.normal(size=(n, dim)) + 2.0 * (y[:, None] - (classes - 1) / 2)
        np.save(d / f"{split}_x.npy", x.astype(np.float32))
        np.save(d / f"{split}_y.npy", y.astype(np.int64))
    (d / "classes.json").write_text(json.dumps([f"c{i}" for i in range(classes)]))
    (d / "summary.json").write_text("{}")
    return d


@pytest.fixture
def small_dataset(tmp_path) -> Path:
    return write_dataset(tmp_path / "small")


@pytest.fixture(scope="session")
def iris_dataset(tmp_path_factory) -> Path:
    """The shipped canonical Iris table, prepared with the default split."""
    out = tmp_path_factory.mktemp("iris") / "data"
    prepare_table(REPO / "src" / "mpinet" / "data" / "iris.csv", out)
    return out


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


PACED = REPO / "tests" / "paced"


def paced(e: dict, delay: float, while_file: Path | None = None) -> dict:
    """The environment `e` with every training step slept `delay` seconds first (while `while_file`
    exists, when given; tests/paced/sitecustomize.py): a run's length set by the delay, not by this
    machine's speed."""
    path = os.pathsep.join(filter(None, [str(PACED), e.get("PYTHONPATH")]))
    e = {**e, "PYTHONPATH": path, "MPINET_TEST_STEP_DELAY": str(delay)}
    return {**e, "MPINET_TEST_PACE_WHILE": str(while_file)} if while_file is not None else e


def train_cmd(ranks: int | None, *args) -> list[str]:
    """The trainer command line, under mpiexec when ranks is given."""
    base = [sys.executable, "-m", "mpinet.train", *map(str, args)]
    if ranks is None:
        return base
    return [*mpiexec_argv(ranks), sys.executable, "-m", "mpi4py", "-m", "mpinet.train", *map(str, args)]


def run_train(
    ranks: int | None, *args, timeout: float = 120, check: bool = True, extra_env: dict | None = None
) -> subprocess.CompletedProcess:
    e = {**env(), **(extra_env or {})}
    p = subprocess.run(train_cmd(ranks, *args), capture_output=True, text=True, timeout=timeout, env=e)
    if check and p.returncode != 0:
        raise AssertionError(f"trainer failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p


def train_patched(ranks: int, patch: str, *args) -> None:
    """The trainer on `ranks` ranks with `patch` (Python source: a delay, a recorder) run first in every
    rank, its modules imported there (sys, time, MPI, the CLI as `cli`); the test fails unless it ends well."""
    head = "import sys, time\nfrom mpi4py import MPI\nfrom mpinet import train as cli\n"
    code = f"{head}{patch}\nsys.exit(cli.main({[str(a) for a in args]!r}))\n"
    p = subprocess.run([*mpiexec_argv(ranks), sys.executable, "-c", code], capture_output=True, text=True, env=env())
    assert p.returncode == 0, p.stderr[-2000:]


def train_with_a_slow_rank(data: Path, out: Path, epochs: int, delay: float = 0.03) -> None:
    """Allreduce on 2 ranks, batch 2, rank 1 computing `delay` seconds longer every step: far above this
    machine's noise (a step of the tests' small data takes well under 1 ms)."""
    patch = (
        "from mpinet.engine import loop\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "    fast = loop._Run.compute\n"
        f"    loop._Run.compute = lambda *a: (time.sleep({delay}), fast(*a))[1]\n"
    )
    train_patched(
        2, patch, "--data", data, "--out", out, "--algorithm", "allreduce", "--epochs", epochs, "--batch-size", 2
    )


def weights(out: Path) -> np.ndarray:
    with np.load(out / "weights.npz") as w:
        return w["params"]


@pytest.fixture
def http_server(tmp_path):
    """A real HTTP server on 127.0.0.1 serving tmp_path/www; yields (base URL, directory)."""
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def synthetic_zip(tmp_path_factory) -> Path:
    from mpinet.datasets.synthetic import make_archive

    return make_archive(tmp_path_factory.mktemp("synthetic") / "intel.zip", 6, 3, 4, 24, seed=1)


class EditedPackage:
    """A copy of the mpinet package in which one edit at a time is made to see what a code
    fingerprint (mpinet.fingerprints) makes of it; the copy is restored after each."""

    def __init__(self, tmp_path: Path):
        import shutil

        import mpinet

        self.root = tmp_path / "mpinet"
        shutil.copytree(Path(mpinet.__file__).parent, self.root)

    def guard(self, fingerprint):
        """The fingerprint computed over this copy."""
        import dataclasses

        return dataclasses.replace(fingerprint, root=self.root)

    def value_after(self, guard, module: str, old: str, new: str) -> str:
        """guard's value with the first `old` in module replaced by `new`."""

        path = self.root / module
        text = path.read_text()
        assert old in text, (module, old)
        return self.value_with(guard, module, text.replace(old, new, 1))

    def value_with(self, guard, module: str, new_text: str) -> str:
        """guard's value with module's text replaced by new_text."""
        from mpinet import fingerprints

        path = self.root / module
        text = path.read_text()
        path.write_text(new_text)
        fingerprints._code_hash.cache_clear()  # cached by module path
        try:
            return guard.value()
        finally:
            path.write_text(text)
            fingerprints._code_hash.cache_clear()
