"""A study's dataset sources as the workflow checks and tracks them: which config entries can be
honoured, which files are a fetch job's inputs, and what stands for a bundled source. Apart from
mpinet.datasets.fetch, so a new check of the config refetches nothing (fetching's fingerprint is
what fetch.py imports)."""

import hashlib
import json
from pathlib import Path

from mpinet.datasets.fetch import BUNDLED, BUNDLED_PREFIX, KAGGLE_PREFIX, is_metadata, resolve_source

# drawn by mpinet.datasets.synthetic (the workflow's make_synthetic job): only the Intel layout exists
SYNTHETIC_PREFIX = "synthetic:"


def source_digest(source: str) -> str:
    """What a bundled source's files are, as a job parameter: its name and content hash (never the
    install path, so the same data installed elsewhere refetches nothing); "" for other sources."""
    if not source.startswith(BUNDLED_PREFIX):
        return ""
    return f"{source} sha256:{hashlib.sha256(Path(resolve_source(source)).read_bytes()).hexdigest()}"


def source_error(name: str, entry: dict) -> str | None:
    """A dataset entry whose keys cannot all be honoured, as one line naming the key; else None."""
    source = entry.get("source", "")
    if source.startswith(SYNTHETIC_PREFIX) and source != SYNTHETIC_PREFIX + "intel":
        return f"datasets.{name}.source: unknown synthetic dataset '{source}'; expected {SYNTHETIC_PREFIX}intel"
    if source.startswith(BUNDLED_PREFIX) and source[len(BUNDLED_PREFIX) :] not in BUNDLED:
        known = ", ".join(BUNDLED_PREFIX + n for n in BUNDLED)
        return f"datasets.{name}.source: unknown bundled dataset '{source}'; expected {known}"
    if entry.get("sha256"):
        if source.startswith(KAGGLE_PREFIX):
            return f"datasets.{name}.sha256: a kaggle: source is unpacked by kagglehub, not one file; remove sha256"
        if Path(source).expanduser().is_dir():
            return (
                f"datasets.{name}.sha256: {source} is a folder, not one file; remove sha256 or point "
                "source at the archive it came from"
            )
    return None


def prepare_options(entry: dict) -> str:
    """A dataset's config keys but its source, as the JSON the prepare command takes."""
    return json.dumps({k: v for k, v in entry.items() if k != "source"}, sort_keys=True)


def local_inputs(source: str) -> list[str]:
    """What a fetch job takes as input files: a local source's files; nothing for a download or a
    bundled source (those enter by URL, checksum or content hash)."""
    if source.startswith(("http://", "https://", KAGGLE_PREFIX, BUNDLED_PREFIX)):
        return []
    return local_files(source)


def local_files(source: str) -> list[str]:
    """The files a local source consists of: the file itself, or every data file under a folder (so
    Snakemake notices a file changed, added or removed inside it)."""
    path = Path(source).expanduser()
    if not path.is_dir():
        return [source]
    return sorted(str(f) for f in path.rglob("*") if f.is_file() and not is_metadata(str(f.relative_to(path))))
