"""Code fingerprints: what a job's output depends on in the package, derived from the code itself.

The rule, written down once: a job depends on the package modules its entry module imports,
directly or through other package modules (`closure`), and on nothing else of the package. The
jobs take a fingerprint of those modules as a parameter (Snakemake reruns a job whose parameters
changed), never a list of files or an install path, so:

- a change to what any of those modules computes reruns the job, a module added to its imports
  included, with no list to keep;
- a comment, a docstring, a help text (`help=`), the release's `__version__`, a change to a module
  the job does not import, or the same package installed at another path reruns nothing.

Training is the one job whose entry is not its command line: NUMERICS is the closure of the
epoch loop (mpinet.engine.loop), which is handed its checkpoint store and writes no file, so the
command line, run.json and the checkpoint format (mpinet.train, .runfiles, .checkpoint) stay out
while everything that decides a run's numbers or the rows it trains on (the model, the BLAS call,
the exchange, the data as the trainer reads it, the options and their checks) is in.

Guard tests fail when a job's output changes while its fingerprint does not. Training's refactors
are found by running them: the numerics lock (numerics_lock.json, beside this module) maps each
engine code hash to the fingerprint whose weights the guard runs give, and `make numerics-lock`
(tests/test_numerics.py) writes the current code's entry, so no hash is typed by hand; code the
lock does not know runs under its own hash. The data fingerprints have one lock too
(data_lock.json), written by `make data-lock` from the data guard (tests/test_preparation.py).
Either way upgrading over a refactor reruns nothing. Timings
are not numbers here: a run records the engine that timed it (its code hash) and a speedup divides
only timings of one engine (mpinet.analysis.aggregate).
"""

import ast
import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).parent
ROOT_NAME = "mpinet"


@dataclass(frozen=True)
class CodeFingerprint:
    name: str
    version: int
    entries: tuple[str, ...]  # the modules the job runs; what they import is found from the code
    root: Path = PACKAGE
    # a JSON file beside the package's modules mapping the code hashes of refactors after which the
    # guard still gives the recorded output to that output's fingerprint; written by a make target
    lock: str = ""
    # environment switches that change the numbers the code computes: (variable, the value that does),
    # e.g. the engine's unfused update; a job run with one set runs under a fingerprint of its own
    switches: tuple[tuple[str, str], ...] = ()

    def value(self) -> str:
        """The fingerprint jobs run under: the code's hash, or the one it computes the same as, with
        every numbers-changing switch set in this environment after it."""
        h = self.code_hash()
        on = [f"{name}={v}" for name, v in self.switches if os.environ.get(name) == v]
        return "+".join([self.known().get(h, h), *on])

    def known(self) -> dict[str, str]:
        """Every code hash known to compute as an earlier one: the lock's entries."""
        return read_lock(self.root / self.lock) if self.lock else {}

    def code_hash(self) -> str:
        """sha256 of the name, the version and the code shapes of the modules in the closure."""
        return _code_hash(self.name, self.version, self.modules(), self.root)

    def modules(self) -> tuple[str, ...]:
        """The package modules this job depends on (dotted names, sorted)."""
        return closure(self.entries, self.root)


# a training run's numbers (its weights); checkpoints and run.json carry it too. Its refactors that
# keep the weights are found by the guard runs and written to the lock by `make numerics-lock`
# MPINET_FUSED_UPDATE=0 (mpinet.engine.blas.OFF; a test ties the two) rounds the update differently on
# some OpenBLAS kernels (seen on Haswell's), so it is part of the numbers' identity
NUMERICS = CodeFingerprint(
    "numerics", 1, ("mpinet.engine.loop",), lock="numerics_lock.json", switches=(("MPINET_FUSED_UPDATE", "0"),)
)
# The data's fingerprints share one lock (their code hashes differ: the name and modules are in
# them), written by `make data-lock` from the data guard (tests/test_preparation.py).
DATA_LOCK = "data_lock.json"
# what lands in resources/raw/<dataset>: the download, the checksum check and the unpacking
FETCHING = CodeFingerprint("fetching", 1, ("mpinet.datasets.fetch",), lock=DATA_LOCK)
# the arrays from those files, one fingerprint per format (the formats of mpinet.datasets.prepare,
# which imports each format's module by name): the dispatch and that module with what it imports
PREPARATION = {
    fmt: CodeFingerprint("preparation", 1, ("mpinet.datasets.prepare", module), lock=DATA_LOCK)
    for fmt, module in (("csv", "mpinet.datasets.csvdata"), ("images", "mpinet.datasets.images"))
}
# the generated stand-in for the Intel archive
SYNTHESIS = CodeFingerprint("synthesis", 1, ("mpinet.datasets.synthetic",), lock=DATA_LOCK)


def read_lock(path: Path) -> dict[str, str]:
    """A lock file's code hash -> fingerprint entries (none when there is no file)."""
    if not path.is_file():
        return {}
    return {h: e["fingerprint"] for h, e in json.loads(path.read_text())["entries"].items()}


def write_lock(fp: CodeFingerprint, recorded: str | None, kept: bool, what: str) -> str:
    """Enter fp's current code in its lock and return the fingerprint entered: the guard's recorded
    one when the guard's output kept its bytes (a refactor), else the code's own hash (new output).
    The make targets that run the guards call this; nothing else writes a lock."""
    from mpinet import MpinetError, __version__

    code = fp.code_hash()
    if not kept and code == recorded:  # e.g. a library upgrade: the same code, other output
        raise MpinetError(
            f"the {what} guard's output moved under the code it was recorded with: bump the "
            f"version of its fingerprint in mpinet/fingerprints.py, then lock again"
        )
    fingerprint = recorded if kept else code
    path = fp.root / fp.lock
    doc = json.loads(path.read_text())
    if doc["entries"].get(code, {}).get("fingerprint") == fingerprint:
        return fingerprint  # already entered: its release and date stay those of its first lock
    entry = {"fingerprint": fingerprint, "what": what, "mpinet": __version__, "locked": str(date.today())}
    doc["entries"][code] = entry
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return fingerprint


def job_code(*entries: str) -> str:
    """The fingerprint of a job that runs these package modules (`python -m` commands)."""
    return CodeFingerprint("job", 1, tuple(entries)).value()


def script_code(script: str | Path) -> str:
    """The fingerprint of a job that runs a workflow script: the script's own code shape and the
    package modules it imports, found in it."""
    source = Path(script).read_text()
    modules = script_modules(source)
    return hashlib.sha256(f"{job_code(*modules)} {code_shape(source)}".encode()).hexdigest()[:16]


def script_modules(source: str) -> tuple[str, ...]:
    """The package modules a workflow script (an adapter outside the package) imports."""
    return tuple(sorted(_imports(source, ROOT_NAME, PACKAGE)))


def closure(entries: tuple[str, ...], root: Path = PACKAGE) -> tuple[str, ...]:
    """The entries and every package module they import, directly or through each other."""
    seen, todo = set(), list(entries)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_imports(_module_file(name, root).read_text(), name, root))
    return tuple(sorted(seen))


def _module_file(name: str, root: Path) -> Path:
    """The file of a dotted package module name (a subpackage is its __init__.py)."""
    parts = name.split(".")[1:]
    path = root.joinpath(*parts)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _is_module(name: str, root: Path) -> bool:
    parts = name.split(".")[1:]
    path = root.joinpath(*parts)
    return (path / "__init__.py").is_file() or path.with_suffix(".py").is_file()


@cache  # by the source's text: an edited module is parsed again, the others are not
def _imports(source: str, importer: str, root: Path) -> frozenset[str]:
    """Package modules a source imports anywhere in it (a function's lazy import included), with the
    packages their import runs (`mpinet.x.y` runs mpinet and mpinet.x first)."""
    found = set()
    for name in _imported_names(source, importer).split():
        if (name == ROOT_NAME or name.startswith(ROOT_NAME + ".")) and _is_module(name, root):
            parts = name.split(".")
            found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return frozenset(found)


def _imported_names(source: str, importer: str) -> str:
    """Every absolute name the source's import statements name (`from a import b`: a and a.b), one
    a line; kept on disk by the source's text (_on_disk)."""

    def parse() -> str:
        names = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, importer)
                names += [base] + [f"{base}.{a.name}" for a in node.names]
        return "\n".join(n for n in names if n)

    return _on_disk("imports", f"{importer}\0{source}", parse)


def _absolute(node: ast.ImportFrom, importer: str) -> str:
    if not node.level:
        return node.module or ""
    package = importer.split(".")[: -node.level] if importer != ROOT_NAME else [ROOT_NAME]
    return ".".join([*package, *([node.module] if node.module else [])])


@cache
def _code_hash(name: str, version: int, modules: tuple[str, ...], root: Path) -> str:
    h = hashlib.sha256(f"{name} v{version}".encode())
    for module in modules:
        h.update(module.encode() + b"\0" + code_shape(_module_file(module, root).read_text()).encode())
    return h.hexdigest()[:16]


@cache  # by the source's text, as _imports
def code_shape(source: str) -> str:
    """Python source as its syntax tree without docstrings, help texts (`help=` arguments) and the
    `__version__` assignment: equal for sources that differ only in those, comments, blank lines
    and layout."""
    return _on_disk("shapes", source, lambda: _shape(source))


def _shape(source: str) -> str:
    tree = ast.parse(source)
    tree.body = [s for s in tree.body if not _is_version(s)]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            if _is_text(body[0]):
                node.body = body[1:] or [ast.Pass()]
        if isinstance(node, ast.keyword) and node.arg == "help":
            node.value = ast.Constant("")
    return ast.dump(tree, annotate_fields=False)


def _is_text(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _is_version(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__version__" for t in statement.targets
    )


def _on_disk(kind: str, text: str, compute: Callable[[], str]) -> str:
    """compute(), a pure function of `text`, kept in the user's cache directory: every training run
    and every Snakemake start fingerprints the engine, and parsing its modules again each time cost
    more than a short run's training. The key is the text, this module's own source and the
    Python version (ast.dump's output is Python's), so an edit of either computes afresh; a cache
    that cannot be read or written is computed around."""
    key = hashlib.sha256(f"{_SELF}\0{sys.version}\0{text}".encode()).hexdigest()
    path = _CACHE / kind / key
    try:
        return path.read_text()
    except OSError:
        pass
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{key}.{os.getpid()}")
        part.write_text(value)
        os.replace(part, path)  # whole or absent, for the ranks and jobs that start at once
    except OSError:
        pass
    return value


_SELF = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpinet" / "code"
