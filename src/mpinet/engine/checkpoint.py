"""Checkpoints: a running experiment's weights after its last saved epoch, resumed only by the very
same run (options, ranks, data and numerics).

The checkpoint is weights + epoch + signature (rewritten whole, a constant cost per save) and a
sidecar of metric rows that only grows by appending, so saving costs the same in every epoch.
"""

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from mpinet.datasets import dataset
from mpinet.engine.options import Options
from mpinet.files import atomic_path, temporary_path, write_text
from mpinet.fingerprints import NUMERICS
from mpinet.layout import CHECKPOINTS, RECORD_FILE, TIMELINE_FILE

TIMED_BY = "timed_by"  # a metric row's engine, in the checkpoint's rows and run.json (timed_by)
UNNAMED_ENGINE = "before 0.9.0"


def timed_by(rows: list[dict]) -> str:
    """The engine(s) that timed a run's epochs, as run.json records them: this code's hash (its rows
    trained in this launch), or several joined by '+' when it resumed another engine's checkpoint."""
    engines = dict.fromkeys(row.get(TIMED_BY) or NUMERICS.code_hash() for row in rows)
    return "+".join(engines) or NUMERICS.code_hash()


@dataclass
class Store:
    """Rank 0's checkpoint of one run, as the epoch loop (mpinet.engine.loop) sees it: resume, offer the
    weights after an epoch (saved once `seconds` have passed since the last save, and after the
    last epoch, so very short epochs do not spend their time writing files), discard."""

    path: Path
    seconds: float = 0.0
    log: object = field(default=lambda msg: None)
    _signature: str = ""
    _saved_at: float = 0.0
    _saved_rows: int = 0

    def resume(self, opts: Options, arrays: dataset.Arrays, ranks: int, params: np.ndarray) -> tuple[int, list[dict]]:
        """(epoch, metric rows) to go on from, with the weights loaded into params; (0, []) to start."""
        self._signature = signature(opts, arrays, ranks)
        epoch, rows = load_checkpoint(self.path, self._signature, params, self.log)
        self._saved_at, self._saved_rows = time.monotonic(), len(rows)
        return epoch, rows

    def offer(self, params: np.ndarray, epoch: int, rows: list[dict], last: bool) -> None:
        if last or time.monotonic() - self._saved_at >= self.seconds:
            save_checkpoint(self.path, self._signature, params, epoch, rows[self._saved_rows :])
            self._saved_at, self._saved_rows = time.monotonic(), len(rows)

    def discard(self) -> None:
        remove_checkpoint(self.path)


def signature(opts: Options, arrays: dataset.Arrays, ranks: int) -> str:
    """What a checkpoint must match to be resumed: options, rank count, the data's content
    fingerprint and the numerics fingerprint (comments and docstrings do not count)."""
    return json.dumps(
        {
            "options": asdict(opts),
            "ranks": ranks,
            "data": arrays.fingerprint,
            "code": NUMERICS.value(),
        },
        sort_keys=True,
    )


def _metrics_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.metrics.jsonl")


def record_path(path: Path) -> Path:
    """The run.json a final checkpoint keeps beside it (keep_run_record)."""
    return path.with_name(f"{path.name}.{RECORD_FILE}")


def _tmp_path(path: Path) -> Path:
    return temporary_path(path, suffix=".npz")


def save_checkpoint(path: Path, signature: str, params: np.ndarray, epoch: int, new_rows: list[dict]) -> None:
    """Append the metric rows since the last save, then replace the weights atomically. The sample
    order needs no saved RNG state: it is drawn afresh from (seed, epoch) in every epoch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = NUMERICS.code_hash()  # each row names the engine that timed its epoch (timed_by)
    with open(_metrics_path(path), "a") as f:
        f.writelines(json.dumps({TIMED_BY: engine, **row}) + "\n" for row in new_rows)
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, params=params, epoch=epoch, signature=signature)


def load_checkpoint(path: Path, signature: str, params: np.ndarray, log) -> tuple[int, list[dict]]:
    """(epoch, metric rows) to resume from, with the weights loaded into params, if path belongs to
    this very run; otherwise clear it and return (0, []) to start at epoch 1."""
    _tmp_path(path).unlink(missing_ok=True)  # left by a writer killed mid-save
    if not path.exists():
        _metrics_path(path).unlink(missing_ok=True)
        return 0, []
    try:
        with np.load(path) as ck:
            theirs, saved, epoch = str(ck["signature"]), ck["params"], int(ck["epoch"])
        rows = [json.loads(line) for line in _metrics_path(path).read_text().splitlines()[:epoch]]
        for row in rows:  # saved before 0.9.0: by an engine that did not say which
            row.setdefault(TIMED_BY, UNNAMED_ENGINE)
    except (OSError, ValueError, KeyError) as e:
        log(f"checkpoint {path} is unreadable ({e}); starting from epoch 1")
        theirs, rows = None, []
    if theirs != signature or len(rows) != epoch or saved.shape != params.shape:
        if theirs is not None and theirs != signature:
            log(f"checkpoint {path} was written {_difference(theirs, signature)}; starting from epoch 1")
        path.unlink(missing_ok=True)
        _metrics_path(path).unlink(missing_ok=True)
        return 0, []
    params[...] = saved
    _metrics_path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))  # drop rows past the epoch
    log(f"resuming from checkpoint {path} after epoch {epoch}")
    return epoch, rows


def _difference(theirs: str, ours: str) -> str:
    """Which part of the signature changed, in words."""
    try:
        a, b = json.loads(theirs), json.loads(ours)
    except ValueError:
        return "by another version"
    changed = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    words = {"data": "for other data", "code": "by other code", "options": "with other options"}
    words["ranks"] = "on other ranks"
    return " and ".join(words.get(k, k) for k in changed) or "by another run"


def timeline_path(path: Path) -> Path:
    """The timeline a final checkpoint keeps beside it (keep_run_record)."""
    return path.with_name(f"{path.name}.{TIMELINE_FILE}")


def keep_run_record(path: Path, meta: dict, timeline: dict | None = None) -> None:
    """Keep a finished run's run.json (and timeline) beside its final checkpoint: a run restored
    from that checkpoint reports when and where it really trained, not the restore."""
    if timeline is not None:
        write_text(timeline_path(path), json.dumps(timeline))
    write_text(record_path(path), json.dumps(meta, indent=2))


def kept_timeline(path: Path) -> dict | None:
    """The timeline kept with a final checkpoint, or None."""
    try:
        return json.loads(timeline_path(path).read_text())
    except (OSError, ValueError):
        return None


def run_record(path: Path) -> dict | None:
    """The run.json kept with a final checkpoint, or None."""
    try:
        return json.loads(record_path(path).read_text())
    except (OSError, ValueError):
        return None


def remove_checkpoint(path: Path) -> None:
    """Delete the checkpoint's files and the folders that held only them: up to the checkpoints
    root (mpinet.layout.CHECKPOINTS, itself included) when the path lies under it, else only the
    checkpoint's own folder."""
    for p in (path, _metrics_path(path), _tmp_path(path), record_path(path), timeline_path(path)):
        p.unlink(missing_ok=True)
    folder = path.parent.absolute()
    root = _checkpoints_root(folder) or folder
    while True:
        try:
            folder.rmdir()  # only succeeds while empty
        except OSError:
            break
        if folder == root:
            break
        folder = folder.parent


def _checkpoints_root(folder: Path) -> Path | None:
    """The CHECKPOINTS folder among folder's parents (or folder itself), if any."""
    depth = len(Path(CHECKPOINTS).parts)
    return next((p for p in (folder, *folder.parents) if p.parts[-depth:] == Path(CHECKPOINTS).parts), None)


def remove_finished(runs: list[tuple[Path, Path]]) -> int:
    """Remove the kept final checkpoints of runs whose outputs exist ((run.json, checkpoint) pairs),
    once the workflow has succeeded: nothing can ask to restore them any more. Returns how many."""
    removed = 0
    for run_json, ck in runs:
        if run_json.exists() and record_path(ck).exists():
            remove_checkpoint(ck)
            removed += 1
    return removed
