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

Guard tests fail when a job's output changes while its fingerprint does not
(tests/test_numerics.py: tiny fixed trainings' weights; tests/test_preparation.py: fetched and
prepared files). A refactor the guard shows to give the recorded output keeps the fingerprint
through an entry in `same` (the code's new hash -> the fingerprint before it), so upgrading over it
reruns nothing. A change that makes the engine faster with the same weights is not such a
refactor: a run's timings are its numbers too, and a study whose serial baseline and parallel runs
came from two engines would divide one engine's time by the other's.
"""

import ast
import hashlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).parent
ROOT_NAME = "mpinet"


@dataclass(frozen=True)
class CodeFingerprint:
    name: str
    version: int
    entries: tuple[str, ...]  # the modules the job runs; what they import is found from the code
    # refactors after which the guard test still gives the recorded output: code hash -> fingerprint
    same: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    root: Path = PACKAGE

    def value(self) -> str:
        """The fingerprint jobs run under: the code's hash, or the one it computes the same as."""
        h = self.code_hash()
        return self.same.get(h, h)

    def code_hash(self) -> str:
        """sha256 of the name, the version and the code shapes of the modules in the closure."""
        return _code_hash(self.name, self.version, self.modules(), self.root)

    def modules(self) -> tuple[str, ...]:
        """The package modules this job depends on (dotted names, sorted)."""
        return closure(self.entries, self.root)


# a training run's numbers (its weights and its timings); checkpoints and run.json carry it too
NUMERICS = CodeFingerprint(
    "numerics",
    1,
    ("mpinet.engine.loop",),
    # 0.4.0: the engine subpackage, its modules derived from the loop's imports (options in;
    # checkpoints and file writing out); the same weights as 0.3.0's d8023681db0bdf4e.
    # 0.5.0: step-time percentiles and the timeline's record of the last epoch's first steps; the same
    # weights, and the same epoch times within noise (benchmarks/recording.py)
    # 0.6.0: the allgather and sharded designs, and the first layer's blocking derived from the
    # machine's L2 (the same block on a 1 MiB L2, where the reference was recorded): bit for bit the
    # same weights (also at 20000 inputs and batch 4, where the blocks engage, against v0.5.0)
    {
        "30bca31b8bb6a244": "d8023681db0bdf4e",
        "79a13989dac9994d": "d8023681db0bdf4e",
        "7a7a80c08692d737": "d8023681db0bdf4e",
        # 0.7.0: uint8 pixels read as pixel * (1/255) in float32 (mpinet.datasets.pixels): the same
        # weights from float32 data, and from pixels the weights of their float32 values
        "6d565c4ae0e2c92a": "d8023681db0bdf4e",
        "a23959b00e627f20": "d8023681db0bdf4e",  # 0.7.0: the features' dtype checked at load
        "83b13ac0443e0356": "d8023681db0bdf4e",  # 0.7.0's review: pixels' standardization unchecked
        "dbab008d709c6bf4": "d8023681db0bdf4e",  # 0.7.1: pixels' channel counts summed by the BLAS
        "14894810b4862a28": "d8023681db0bdf4e",  # 0.7.1: plain views of the memory maps (no Python a slice)
        "aeba982056b82a39": "d8023681db0bdf4e",  # 0.7.1: the labels too
        "bc03f289428eef66": "d8023681db0bdf4e",  # 0.7.1: each exchange builds itself; one bcast
        "c3819be58b9e3521": "d8023681db0bdf4e",  # 0.7.2: the server's inbox sized by Net.n_params
        # 0.8.0: the node design (one shared copy of the weights per node) and auto beside the others,
        # each design's step in its class: the guard runs' weights the same bytes (allgather, sharded
        # and node joined them)
        "010db5c9050315ed": "d8023681db0bdf4e",
        # 0.9.0: the grid design beside the others: the guard runs' weights the same bytes (grid joined them)
        "5816d75ab11d8301": "d8023681db0bdf4e",
    },
)
# what lands in resources/raw/<dataset>: the download, the checksum check and the unpacking
FETCHING = CodeFingerprint(
    "fetching",
    1,
    ("mpinet.datasets.fetch",),
    {"cfa0326fea76695b": "0ab16cf8a1426656"},  # 0.4.0: derived modules; bundled:NAME resolved in fetch()
)
# the arrays from those files, one fingerprint per format (the formats of mpinet.datasets.prepare,
# which imports each format's module by name): the dispatch and that module with what it imports
PREPARATION = {
    fmt: CodeFingerprint("preparation", 1, ("mpinet.datasets.prepare", module), same)
    for fmt, module, same in (
        # 0.4.0: the datasets subpackage, derived modules; dataset writing in mpinet.datasets.prepared
        # 0.7.0: one fingerprint per format; the same tables
        (
            "csv",
            "mpinet.datasets.csvdata",
            {
                "e6a8cb4d5cc40a27": "d17364a9ba7f0492",
                "70d6ec53583804ad": "d17364a9ba7f0492",
                "a65052d6f5a805f1": "d17364a9ba7f0492",
                "5ab5adaacbb3fd46": "d17364a9ba7f0492",
                "e6de3eec38bee983": "d17364a9ba7f0492",  # 0.7.1: pixels' channel counts (not a table's)
            },
        ),
        # 0.7.0: images that are not standardized are stored as uint8 pixels (new arrays, the same
        # values); channel statistics from exact pixel counts (the same up to rounding)
        (
            "images",
            "mpinet.datasets.images",
            {
                "b5a8a4992a580549": "1926d2e1e3661d58",
                "0092fa845a96d48d": "1926d2e1e3661d58",
                # 0.7.1: decoded CHUNK files a task, counted together, the counts summed by the BLAS:
                # the same arrays and summaries
                "c17beac91f6304aa": "1926d2e1e3661d58",
            },
        ),
    )
}
# the generated stand-in for the Intel archive
SYNTHESIS = CodeFingerprint("synthesis", 1, ("mpinet.datasets.synthetic",))


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
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, importer)
            # `from mpinet import x`: x is a module, or a name of mpinet/__init__.py
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name and (name == ROOT_NAME or name.startswith(ROOT_NAME + ".")) and _is_module(name, root):
                parts = name.split(".")
                found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return frozenset(found)


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
