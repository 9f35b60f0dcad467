"""The numerics fingerprint: one string that changes when the code deciding a run's numbers changes,
and only then. Training jobs take it as a parameter (Snakemake reruns a job whose parameters
changed) and checkpoints carry it, so editing comments, docstrings, help texts, run.json fields, the
CLI or the checkpoint layout retrains nothing, while a change to the computation retrains.

The fingerprint hashes the syntax tree of NUMERICS_MODULES with docstrings removed (comments are
not in the tree). tests/test_numerics.py trains tiny fixed float64 experiments and fails when their
weights change while the fingerprint does not: code outside these modules that changes numbers
needs NUMERICS_VERSION bumped.
"""

import ast
import hashlib
from functools import cache
from pathlib import Path

NUMERICS_VERSION = 1
# The forward/backward/update, the exchange between ranks, the data as the trainer reads it, and the
# epoch loop; not the options' help texts, the CLI, checkpoints or run.json (mpinet.options, .cli,
# .checkpoint, .runfiles).
NUMERICS_MODULES = ("model.py", "comm.py", "dataset.py", "train.py")


@cache
def fingerprint() -> str:
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
