"""Run directories no study uses any more, and their removal. What a study uses is what it recorded
when it last ran (results/<study>/runs.txt, written by the workflow), together with what the study
configs in config/ list; a config that cannot be read stops everything before anything is listed."""

import shutil
from pathlib import Path

import yaml

from mpinet import MpinetError
from mpinet.files import write_text
from mpinet.layout import METRICS_FILE, RECORD_FILE

RECORD = "runs.txt"  # results/<study>/runs.txt: the run directories of that study, one per line


def write_record(path: str | Path, run_dirs: list[str]) -> None:
    """The study's record of the run directories it uses (written whole, then renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "".join(f"{d}\n" for d in run_dirs))


def referenced(results_root: Path, config_dir: Path, schema: Path, runs_root: str, current=()) -> set[Path]:
    """Every run directory the current study, a recorded study or a study config in config_dir lists."""
    dirs = {Path(line) for rec in sorted(results_root.glob(f"*/{RECORD}")) for line in rec.read_text().split()}
    return dirs | {Path(d) for d in current} | config_run_dirs(config_dir, schema, runs_root)


def config_run_dirs(config_dir: Path, schema: Path, runs_root: str) -> set[Path]:
    """The run directories of every study config (a YAML file with `experiments`) in config_dir;
    MpinetError naming every file that cannot be read or expanded, a line each."""
    from mpinet.study.config import config_error
    from mpinet.study.experiments import expand_sweeps, grid_paths

    dirs, errors = set(), []
    for path in sorted(config_dir.glob("*.y*ml")):
        try:
            config = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as e:
            errors.append(f"{path}: cannot be read ({str(e).splitlines()[0]})")
            continue
        if not isinstance(config, dict) or "experiments" not in config:
            continue  # not a study config
        if message := config_error(config, schema):
            errors.append(f"{path}: {message.removeprefix('config: ')}")
            continue
        try:
            table = expand_sweeps(config["experiments"], config.get("datasets") or {})
        except MpinetError as e:
            errors.append(f"{path}: {e}")
            continue
        dirs |= {Path(runs_root) / g for g in grid_paths(table)}
    if errors:
        # a study whose config cannot be read would have its runs listed as leftovers (and removed)
        fix = f"; fix it (or move it out of {config_dir}/) before listing leftovers"
        raise MpinetError("\n".join(e + fix for e in errors))
    return dirs


def leftovers(runs_root: Path, keep: set[Path]) -> list[Path]:
    """Run directories under runs_root (those holding run.json or metrics.csv) that are not in keep."""
    found = {p.parent for name in (RECORD_FILE, METRICS_FILE) for p in runs_root.rglob(name)}
    kept = {r.resolve() for r in keep}
    return sorted(d for d in found if d.resolve() not in kept)


def leftovers_report(runs_root: Path, logs_root: Path, keep: set[Path], delete: bool) -> str:
    """The leftover run directories with their sizes, one line each; with `delete` they and their
    logs are removed, each line saying so."""
    found = leftovers(runs_root, keep)
    if not found:
        return "no leftover run directories"
    sizes = {d: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in found}
    verb = "removed" if delete else "leftover"
    lines = [f"{verb}: {d} ({_size(sizes[d])})" for d in found]
    if delete:
        remove(found, logs_root, runs_root)
        lines.append(f"removed {len(found)} run directories and their logs ({_size(sum(sizes.values()))})")
    else:
        lines.append(f"{len(found)} leftover run directories ({_size(sum(sizes.values()))}); REMOVE=1 deletes them")
    return "\n".join(lines)


def remove(dirs: list[Path], logs_root: Path, runs_root: Path) -> None:
    """Delete leftover run directories and their logs, then the folders that became empty; raise
    MpinetError naming what could not be deleted (and why) after trying every one."""
    failed = []
    for d in dirs:
        log = logs_root / f"{d.relative_to(runs_root)}.log"
        try:
            shutil.rmtree(d)
            log.unlink(missing_ok=True)
        except OSError as e:
            failed.append(f"{e.filename or d} ({e.strerror or e})")
    for root in (runs_root, logs_root):
        prune_empty(root)
    if failed:
        raise MpinetError(
            f"could not delete {len(failed)} of {len(dirs)} leftover run directories: {'; '.join(failed)}"
        )


def prune_empty(root: Path) -> None:
    """Remove empty folders below root (deepest first), keeping root itself."""
    if not root.is_dir():
        return
    for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
