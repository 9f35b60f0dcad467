"""The numerics guard: tiny fixed float64 experiments must give the recorded weights, and when their
numbers change the numerics fingerprint must change too, so a numeric change can never keep old runs."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import EditedPackage, run_train, weights

REFERENCE = Path(__file__).with_name("numerics_reference.json")
BASE = ("--dtype", "float64", "--epochs", 3, "--hidden", 5, 4, "--seed", 3, "--batch-size", 4)
# (ranks or None for a plain process, extra options): every design and the options that change numbers
EXPERIMENTS = {
    "serial": (None, ("--learning-rate", 0.3)),
    "serial_faithful": (None, ("--learning-rate", 0.01, "--faithful", "true")),
    "serial_xent_batches": (None, ("--loss", "xent", "--shuffle", "batches", "--standardize", "false")),
    "allreduce_2": (2, ("--algorithm", "allreduce", "--batch-size", 3)),
    "allreduce_2_local_sgd": (2, ("--algorithm", "allreduce", "--sync-every", 2)),
    "paramserver_3": (3, ("--algorithm", "paramserver", "--learning-rate", 0.5)),
    "allgather_2": (2, ("--algorithm", "allgather")),
    "sharded_3": (3, ("--algorithm", "sharded", "--shuffle", "batches")),
    "node_3": (3, ("--algorithm", "node", "--batch-size", 3)),
    "grid_4": (4, ("--algorithm", "grid")),  # the engine's shape for these sizes: 2 groups x 2 shards
}


def trained(iris_dataset, tmp_path) -> dict[str, list[float]]:
    out = {}
    for name, (ranks, extra) in EXPERIMENTS.items():
        run_train(ranks, "--data", iris_dataset, "--out", tmp_path / name, *BASE, *extra)
        out[name] = weights(tmp_path / name).tolist()
    return out


@pytest.mark.mpi
def test_recorded_weights_change_only_with_the_numerics_fingerprint(iris_dataset, tmp_path):
    from mpinet.fingerprints import NUMERICS

    now = {"fingerprint": NUMERICS.value(), "weights": trained(iris_dataset, tmp_path)}
    if os.environ.get("MPINET_RECORD_NUMERICS"):
        REFERENCE.write_text(json.dumps(now, indent=1) + "\n")
    recorded = json.loads(REFERENCE.read_text())
    missing = sorted(set(EXPERIMENTS) - set(recorded["weights"]))
    assert not missing, f"{missing} have no recorded weights: record with MPINET_RECORD_NUMERICS=1 pytest {__file__}"
    same = {k: np.allclose(now["weights"][k], recorded["weights"][k], rtol=1e-9, atol=1e-12) for k in EXPERIMENTS}
    changed = [k for k, ok in same.items() if not ok]
    assert not changed or now["fingerprint"] != recorded["fingerprint"], (
        f"the numbers of {changed} changed but the numerics fingerprint did not: bump NUMERICS' version in "
        "src/mpinet/fingerprints.py (or add the module that changed them to its modules), then record "
        "with MPINET_RECORD_NUMERICS=1 pytest tests/test_numerics.py"
    )
    assert now["fingerprint"] == recorded["fingerprint"], (
        "the numerics fingerprint changed: every study retrains. The same weights (a refactor): map the "
        f"code's hash to the recorded fingerprint in NUMERICS' `same`, "
        f"{NUMERICS.code_hash()!r}: {recorded['fingerprint']!r}; "
        "new numbers: record the new reference with MPINET_RECORD_NUMERICS=1 pytest tests/test_numerics.py"
    )


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


def test_a_refactor_keeps_the_fingerprint_only_through_an_entry_and_a_version_bump_undoes_it():
    import dataclasses

    from mpinet.fingerprints import NUMERICS

    assert NUMERICS.value() in (NUMERICS.code_hash(), NUMERICS.same.get(NUMERICS.code_hash()))
    bumped = dataclasses.replace(NUMERICS, version=NUMERICS.version + 1)
    assert bumped.value() == bumped.code_hash() and bumped.value() not in NUMERICS.same.values()
