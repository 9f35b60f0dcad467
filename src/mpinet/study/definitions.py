"""One dataset name, one definition, in a working directory: the studies that ran here share
resources/data/<name>, so two that define one name differently would re-prepare it and retrain
each other's runs in turn. Each study records its datasets' definitions when it runs
(results/<study>/datasets.json, beside its runs.txt); a study whose definition of a name differs
from another study's record is refused at plan time, naming both config files and the keys."""

import json
from pathlib import Path

from mpinet import MpinetError
from mpinet.files import write_text

RECORD = "datasets.json"  # results/<study>/datasets.json: {name: {"config": file, "definition": {...}}}


def definitions(config: dict, configfiles: list) -> dict:
    """Each dataset's definition in this study: its config entry, and the `synthetic:` section for a
    generated source (it decides the images too), with the config file that gave it."""
    where = _shown(Path(configfiles[-1])) if configfiles else "the command line's config"
    out = {}
    for name, entry in (config.get("datasets") or {}).items():
        definition = dict(entry)
        if str(entry.get("source", "")).startswith("synthetic:"):
            definition["synthetic"] = config.get("synthetic") or {}
        out[name] = {"config": where, "definition": definition}
    return out


def write_definitions(path: str | Path, mine: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(mine, indent=1, sort_keys=True) + "\n")


def check_definitions(study: str, mine: dict, results_root: str | Path) -> None:
    """MpinetError when another study recorded here defines one of this study's dataset names
    differently; the line names both config files and the keys that differ."""
    for record in sorted(Path(results_root).glob(f"*/{RECORD}")):
        other = record.parent.name
        if other == study:
            continue
        try:
            theirs = json.loads(record.read_text())
        except (OSError, ValueError):
            continue  # a record cut short is rewritten when its study runs again
        for name in sorted(set(mine) & set(theirs)):
            a, b = theirs[name]["definition"], mine[name]["definition"]
            if a != b:
                keys = ", ".join(f"{k}: {_text(a.get(k))} there, {_text(b.get(k))} here" for k in _differing(a, b))
                raise MpinetError(
                    f"datasets.{name} is defined differently by study {other} ({theirs[name]['config']}) and "
                    f"this one ({mine[name]['config']}): {keys}; both would share resources/data/{name}, "
                    f"re-preparing it in turn: give one of them another name (or remove {record} if {other} "
                    "is gone)"
                )


def _shown(path: Path) -> str:
    """A config file as the user named it: relative to the working directory when it lies inside."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _differing(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _text(value) -> str:
    return "unset" if value is None else json.dumps(value, sort_keys=True)
