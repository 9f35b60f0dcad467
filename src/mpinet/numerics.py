"""The numerics fingerprint: one string that changes when the code deciding a run's numbers changes,
and only then. Training jobs take it as a parameter (Snakemake reruns a job whose parameters
changed) and checkpoints carry it, so editing comments, docstrings, help texts, run.json fields, the
CLI or the checkpoint layout retrains nothing, while a change to the computation retrains.

The fingerprint hashes the syntax tree of NUMERICS_MODULES with docstrings removed (comments are
not in the tree). tests/test_numerics.py trains tiny fixed float64 experiments and fails when their
weights change while the fingerprint does not: code outside these modules that changes numbers
needs NUMERICS_VERSION bumped. A refactor that test shows to leave every weight as it was keeps
the fingerprint through SAME_NUMBERS, so upgrading over it retrains nothing. A change that makes
the engine faster with the same weights is not such a refactor: a run's timings are its numbers
too, and a study whose serial baseline and parallel runs came from two engines would divide one
engine's time by the other's, so it gets a new fingerprint (the fused update of 2026-12-02 did).
"""

import ast
import hashlib
from functools import cache
from pathlib import Path

NUMERICS_VERSION = 1
# The forward/backward/update (and the BLAS call it fuses), the exchange between ranks, the data as
# the trainer reads it, and the epoch loop; not the options' help texts, the CLI, checkpoints or
# run.json (mpinet.options, .cli, .checkpoint, .runfiles).
NUMERICS_MODULES = ("model.py", "blas.py", "comm.py", "dataset.py", "train.py")
# Refactors of NUMERICS_MODULES after which tests/test_numerics.py still gives the recorded weights:
# the code's new hash -> the fingerprint the runs before it were trained under. Only ever add an
# entry when that test's weights match (it fails otherwise); a numeric change bumps NUMERICS_VERSION.
SAME_NUMBERS = {
    "5009140d42f8b9a6": "3f0865c25f1a9cca",  # 0.4.0: train()'s setup and epoch loop moved into _Run
}


@cache
def fingerprint() -> str:
    """The fingerprint runs are trained under: the code's hash, or the one it computes the same as."""
    h = code_hash()
    return SAME_NUMBERS.get(h, h)


def code_hash() -> str:
    """sha256 of NUMERICS_VERSION and the docstring-free syntax trees of NUMERICS_MODULES."""
    h = hashlib.sha256(f"numerics v{NUMERICS_VERSION}".encode())
    for name in NUMERICS_MODULES:
        h.update(name.encode() + b"\0" + code_shape((Path(__file__).parent / name).read_text()).encode())
    return h.hexdigest()[:16]


def code_shape(source: str) -> str:
    """Python source as its syntax tree without docstrings: equal for sources that differ only in
    comments, docstrings, blank lines and layout."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False)
