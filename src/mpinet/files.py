"""Writing files so that a reader never sees half of one: the one atomic-write helper (a temporary
name beside the file, then a rename), its JSON form, and a staging directory for many files."""

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed to `path` when the block ends without an
    error, removed when it raises. `suffix` keeps an extension a writer insists on (np.savez: .npz)."""
    tmp = temporary_path(path, suffix)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def temporary_path(path: str | Path, suffix: str = "") -> Path:
    """The one name atomic_path writes under: fixed, so a writer killed mid-write leaves at most one."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp{suffix}")


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj) -> None:
    """Write JSON atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


@contextmanager
def staging_dir(out_dir: str | Path) -> Iterator[Path]:
    """An empty scratch directory beside out_dir, removed when the block ends, whether it worked or not.

    Nothing appears in out_dir until the caller moves the finished files there.
    """
    out = Path(out_dir)
    tmp = out.parent / f".{out.name}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
