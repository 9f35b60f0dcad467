"""The numerics guard: tiny fixed experiments (every design, both dtypes, the blocked and unblocked
first layer) must give the weights of the fingerprint the numerics lock maps the engine's code to;
`make numerics-lock` (MPINET_LOCK_NUMERICS=1) writes that entry, so a numeric change can never keep
old runs and a refactor costs one command."""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EditedPackage, env, run_train, weights, write_dataset

REFERENCE = Path(__file__).with_name("numerics_reference.json")
LOCK_COMMAND = "make numerics-lock"
BASE = ("--dtype", "float64", "--epochs", 3, "--hidden", 5, 4, "--seed", 3, "--batch-size", 4)
# (ranks or None for a plain process, extra options) on Iris: every design and the options that change numbers
EXPERIMENTS = {
    "serial": (None, ("--learning-rate", 0.3)),
    "serial_faithful": (None, ("--learning-rate", 0.01, "--faithful", "true")),
    "serial_xent_batches": (None, ("--loss", "xent", "--shuffle", "batches", "--standardize", "false")),
    "serial_float32": (None, ("--dtype", "float32")),
    "allreduce_2": (2, ("--algorithm", "allreduce", "--batch-size", 3)),
    "allreduce_2_local_sgd": (2, ("--algorithm", "allreduce", "--sync-every", 2)),
    "paramserver_3": (3, ("--algorithm", "paramserver", "--learning-rate", 0.5)),
    "allgather_2": (2, ("--algorithm", "allgather")),
    "sharded_3": (3, ("--algorithm", "sharded", "--shuffle", "batches")),
    "node_3": (3, ("--algorithm", "node", "--batch-size", 3)),
    "node_2_float32": (2, ("--algorithm", "node", "--dtype", "float32")),
    "grid_4": (4, ("--algorithm", "grid")),  # the engine's shape for these sizes: 2 groups x 2 shards
}
# on 40000 inputs, where the first layer's GEMM runs in blocks of inputs at batch 4 (on an L2 of up
# to 5 MiB a core) and as one GEMM at batch 48
WIDE = ("--epochs", 2, "--hidden", 6, 4, "--seed", 3)
WIDE_EXPERIMENTS = {
    "wide_blocked": (None, ("--batch-size", 4, "--dtype", "float64")),
    "wide_blocked_float32": (None, ("--batch-size", 4, "--dtype", "float32")),
    "wide_unblocked": (None, ("--batch-size", 48, "--dtype", "float64")),
    "wide_allreduce_2": (2, ("--algorithm", "allreduce", "--batch-size", 4, "--dtype", "float64")),
}
# how far the guard's weights may move on a machine other than the reference's, relative to their
# norm: another BLAS kernel rounds differently (float64 ~1e-13, float32 ~1e-6 after these runs)
OTHER_MACHINE = {"float64": 1e-9, "float32": 1e-4}


def digest(w: np.ndarray) -> dict:
    """What the guard keeps of a run's weights: their bytes' hash (equal on the reference's machine),
    and their dtype, norm and projections on 8 seeded random directions (close on any machine)."""
    directions = np.random.default_rng(7).standard_normal((len(w), 8))
    return {
        "sha256": hashlib.sha256(w.tobytes()).hexdigest(),
        "dtype": str(w.dtype),
        "norm": float(np.linalg.norm(w.astype(np.float64))),
        "projection": (w.astype(np.float64) @ directions).tolist(),
    }


def machine() -> str:
    """What decides the guard's bits besides the code: the CPU, numpy's BLAS and its kernel, the L2."""
    from threadpoolctl import threadpool_info

    from mpinet.engine.machine import this_machine
    from mpinet.engine.runfiles import cpu_model

    blas = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}" for i in threadpool_info()]
    return f"{cpu_model()}; {', '.join(sorted(blas))}; L2 {this_machine().l2_bytes}; numpy {np.__version__}"


def reference_kernel(reference: str) -> dict:
    """OPENBLAS_CORETYPE set to the reference's OpenBLAS kernel, when with it this machine reads as the
    reference's (the same CPU, OpenBLAS, L2 and numpy, only the kernel OpenBLAS picks differing, as in
    an environment without the variable): the guard then runs under it and compares bytes, not
    tolerances. {} when no kernel makes this machine the reference's."""
    kernel = re.search(r"openblas \S+ (\w+)", reference)
    if not kernel:
        return {}
    forced = {"OPENBLAS_CORETYPE": kernel[1]}
    code = "import test_numerics; print(test_numerics.machine())"
    probe = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent, env={**env(), **forced}, capture_output=True, text=True
    )
    return forced if probe.stdout.strip() == reference else {}


def how_compared(here: bool, forced: dict, reference: str) -> str:
    """What the lock and the guard say of their comparison."""
    if here:
        return "byte for byte"
    if forced:
        return f"byte for byte under the reference's kernel ({' '.join(f'{k}={v}' for k, v in forced.items())})"
    return f"within tolerances only (the reference ran on {reference}; no kernel forced here makes this machine it)"


def same(now: dict, recorded: dict, here: bool) -> bool:
    """The same weights: the same bytes on the reference's machine, within OTHER_MACHINE elsewhere."""
    if here:
        return now["sha256"] == recorded["sha256"]
    moved = np.abs(np.subtract(now["projection"], recorded["projection"])).max()
    return now["dtype"] == recorded["dtype"] and moved <= OTHER_MACHINE[now["dtype"]] * recorded["norm"]


def trained(iris_dataset, tmp_path, forced: dict) -> dict[str, dict]:
    """Every guard run's digest (under the `forced` environment); the wide runs' first-layer plans
    checked to be blocked and not."""
    wide = write_dataset(tmp_path / "wide", n_train=64, n_test=8, dim=40000)
    out, plans = {}, {}
    for data, base, experiments in ((iris_dataset, BASE, EXPERIMENTS), (wide, WIDE, WIDE_EXPERIMENTS)):
        for name, (ranks, extra) in experiments.items():
            run_train(ranks, "--data", data, "--out", tmp_path / name, *base, *extra, extra_env=forced)
            out[name] = digest(weights(tmp_path / name))
            plans[name] = json.loads((tmp_path / name / "run.json").read_text())["first_layer"]
    assert all("blocks" in p["first_layer"] for p in plans["wide_blocked"].values())
    assert not any("blocks" in p["first_layer"] for p in plans["wide_unblocked"].values())
    return out


def lock(now: dict, code: str, forced: dict) -> str:
    """`make numerics-lock`: the fingerprint the guard's weights show this code to compute under, written
    to the lock (the reference's when every run gives its weights, else the code's own hash, with
    these weights as the new reference). Bytes decide where this machine is, or can be made with
    `forced`, the reference's: new code whose bytes moved is never mapped to the old fingerprint."""
    from mpinet.fingerprints import NUMERICS, write_lock

    ref = json.loads(REFERENCE.read_text()) if REFERENCE.is_file() else {"digests": {}}
    reference = ref.get("machine")
    here = reference == machine() or bool(forced)
    kept = [k for k in now if k in ref["digests"] and same(now[k], ref["digests"][k], here)]
    all_kept = bool(kept) and set(kept) == set(ref["digests"])  # runs new to the guard join the same numbers
    fingerprint = write_lock(NUMERICS, ref.get("fingerprint"), all_kept, "numerics")
    if all_kept:
        ref["digests"] = {k: ref["digests"].get(k, now[k]) for k in now}
        ref.setdefault("machine", machine())
    else:
        ref = {"fingerprint": fingerprint, "machine": machine(), "digests": now}
    REFERENCE.write_text(json.dumps(ref, indent=1) + "\n")
    how = how_compared(reference == machine(), forced, reference)
    print(f"numerics lock: engine code {code} -> fingerprint {fingerprint}, compared {how}", file=sys.stderr)
    return fingerprint


@pytest.mark.mpi
def test_the_lock_maps_this_code_to_the_numbers_the_guard_runs_give(iris_dataset, tmp_path):
    """The numerics fingerprint is computed, not typed: the lock maps the engine's code hash to the
    fingerprint whose weights the guard runs give (`make numerics-lock` writes it). New code, or code
    whose weights moved, fails here until the lock says so; a user's local edit, unknown to the lock,
    runs under its own code hash (test_fingerprints)."""
    from mpinet.fingerprints import NUMERICS

    code = NUMERICS.code_hash()
    reference = json.loads(REFERENCE.read_text())["machine"] if REFERENCE.is_file() else machine()
    natural = reference == machine()
    forced = {} if natural else reference_kernel(reference)
    now = trained(iris_dataset, tmp_path, forced)
    if os.environ.get("MPINET_LOCK_NUMERICS"):
        lock(now, code, forced)
    locked = NUMERICS.known().get(code)
    assert locked, f"the numerics lock has no entry for the engine's code {code}: run `{LOCK_COMMAND}`"
    ref = json.loads(REFERENCE.read_text())
    assert locked == ref["fingerprint"], (
        f"the lock maps this code to {locked}, the guard's reference is {ref['fingerprint']}: run `{LOCK_COMMAND}`"
    )
    here = natural or bool(forced)
    moved = [k for k in now if k not in ref["digests"] or not same(now[k], ref["digests"][k], here)]
    assert not moved, (
        f"the guard runs {moved} no longer give the weights of fingerprint {locked} (compared "
        f"{how_compared(natural, forced, ref['machine'])}), which the lock maps this code to: run "
        f"`{LOCK_COMMAND}` (new numbers get a new fingerprint, and studies retrain)"
    )


def test_a_reference_whose_kernel_this_machine_can_run_is_compared_byte_for_byte_under_it():
    """Off the reference's kernel (another OPENBLAS_CORETYPE, or none where the reference had one) the
    guard runs under the reference's kernel and compares bytes; where nothing forced makes this machine
    the reference's (another numpy, CPU or BLAS) it compares within tolerances and says so."""
    here = machine()
    other = re.sub(r"(openblas \S+ )\w+", r"\1Sandybridge", here)
    if other == here or "openblas" not in here:
        pytest.skip(f"this machine's BLAS is not OpenBLAS with another kernel than Sandybridge: {here}")
    assert reference_kernel(other) == {"OPENBLAS_CORETYPE": "Sandybridge"}
    assert "byte for byte under the reference's kernel (OPENBLAS_CORETYPE=Sandybridge)" in how_compared(
        False, {"OPENBLAS_CORETYPE": "Sandybridge"}, other
    )
    assert reference_kernel(other.replace("; numpy ", "; numpy 0.")) == {}
    assert reference_kernel("Some CPU; mkl 2024 skylake; L2 1; numpy 1") == {}
    assert how_compared(False, {}, "Some CPU").startswith("within tolerances only (the reference ran on Some CPU")


def test_comments_docstrings_and_layout_leave_the_code_shape_alone():
    from mpinet.fingerprints import code_shape

    before = 'def f(x):\n    """Scale."""\n    return 2 * x\n'
    after = '"""A module."""\n\n\ndef f(x):  # why\n    """Scale it, better said."""\n\n    return 2 * x\n'
    assert code_shape(before) == code_shape(after)
    assert code_shape(before) != code_shape(before.replace("2 * x", "3 * x"))


def test_the_fingerprint_covers_what_decides_the_numbers_and_not_the_command_line_or_files(tmp_path):
    from mpinet.fingerprints import NUMERICS

    package = EditedPackage(tmp_path)
    guard = package.guard(NUMERICS)

    def fingerprint_after(module, old, new):
        return package.value_after(guard, module, old, new)

    base = guard.value()
    assert base == NUMERICS.value()
    assert (
        fingerprint_after("engine/loop.py", '"""The epoch loop', '# a comment\n"""The epoch loop, said otherwise:')
        == base
    )
    assert fingerprint_after("train.py", "def main(", "def _unused():\n    pass\n\n\ndef main(") == base
    assert fingerprint_after("engine/runfiles.py", '"ranks": comm.size,', '"ranks": comm.size, "extra": 1,') == base
    assert fingerprint_after("engine/checkpoint.py", "def signature(", "X = 1\n\n\ndef signature(") == base
    assert fingerprint_after("engine/options.py", '"SGD step size', '"the SGD step size') == base  # a help text
    assert fingerprint_after("__init__.py", '__version__ = "', '__version__ = "9') == base
    assert fingerprint_after("engine/model.py", "def _sigmoid(", "def _unused():\n    pass\n\n\ndef _sigmoid(") != base
    assert fingerprint_after("engine/comm.py", "class Comm:", "X = 1\n\n\nclass Comm:") != base
    # which rows a run trains on (train_size) and the data as the trainer reads it
    assert fingerprint_after("engine/options.py", "return opts.train_samples or n_train", "return n_train") != base
    assert fingerprint_after("datasets/dataset.py", "SUBSET_SEED = 20240", "SUBSET_SEED = 20241") != base
