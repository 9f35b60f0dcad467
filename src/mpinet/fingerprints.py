"""Code fingerprints: one string per kind of job that changes when the code deciding that job's
output changes, and only then. The jobs take it as a parameter (Snakemake reruns a job whose
parameters changed) instead of listing their modules as inputs, so a comment, a docstring, a
rename elsewhere or a release's new version number reruns nothing, while a change to what the job
computes does.

- NUMERICS: a training run's numbers (its weights and its timings); checkpoints carry it too.
- FETCHING: a dataset's files as fetched and unpacked.
- PREPARATION: the arrays preprocessing writes from them.

A fingerprint hashes the syntax trees of its modules with docstrings removed (comments are not in
the tree). Guard tests fail when a job's output changes while its fingerprint does not
(tests/test_numerics.py: tiny fixed trainings' weights; tests/test_preparation.py: fetched and
prepared files): code outside the modules that changes the output needs the version bumped. A
refactor the guard shows to give the recorded output keeps the fingerprint through an entry in
`same` (the code's new hash -> the fingerprint before it), so upgrading over it reruns nothing.
A change that makes the engine faster with the same weights is not such a refactor: a run's
timings are its numbers too, and a study whose serial baseline and parallel runs came from two
engines would divide one engine's time by the other's (the fused update and the blocked first
layer of 2026-12-02 each got a new fingerprint for that reason).
"""

import ast
import hashlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).parent


@dataclass(frozen=True)
class CodeFingerprint:
    name: str
    version: int
    modules: tuple[str, ...]
    # refactors after which the guard test still gives the recorded output: code hash -> fingerprint
    same: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    root: Path = PACKAGE

    def value(self) -> str:
        """The fingerprint jobs run under: the code's hash, or the one it computes the same as."""
        h = self.code_hash()
        return self.same.get(h, h)

    def code_hash(self) -> str:
        """sha256 of the name, the version and the docstring-free syntax trees of the modules."""
        return _code_hash(self.name, self.version, self.modules, self.root)


NUMERICS = CodeFingerprint(
    "numerics",
    1,
    # the forward/backward/update (and the BLAS call it fuses), the exchange between ranks, the data
    # as the trainer reads it, and the epoch loop; not the options' help texts, the CLI, checkpoints
    # or run.json (mpinet.options, .cli, .checkpoint, .runfiles)
    ("model.py", "blas.py", "comm.py", "dataset.py", "train.py"),
    {
        "5009140d42f8b9a6": "3f0865c25f1a9cca",  # 0.4.0: train()'s setup and epoch loop moved into _Run
        "b255860bc5887031": "d8023681db0bdf4e",  # the first layer's blocked sum as model.blocked_matmul
    },
)
# what lands in resources/raw/<dataset>: the download, the checksum check and the unpacking
FETCHING = CodeFingerprint("fetching", 1, ("fetch.py",))
# the arrays from those files: finding the files, decoding, splitting, standardizing, writing
PREPARATION = CodeFingerprint(
    "preparation", 1, ("prepare.py", "csvdata.py", "images.py", "split.py", "dataset.py", "fetch.py")
)


@cache
def _code_hash(name: str, version: int, modules: tuple[str, ...], root: Path) -> str:
    h = hashlib.sha256(f"{name} v{version}".encode())
    for module in modules:
        h.update(module.encode() + b"\0" + code_shape((root / module).read_text()).encode())
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
