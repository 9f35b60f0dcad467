"""A dataset's source as the user wrote it: a local source that is not there, refused at plan time,
and the fetched copy's paths (under resources/raw/) named as the user's files in an error. Imported
by no job's code (the workflow's config check and the data command line use it), so a change here
refetches and re-prepares nothing."""

import os
import re
from pathlib import Path

from mpinet.datasets.fetch import BUNDLED_PREFIX, KAGGLE_PREFIX, is_metadata
from mpinet.datasets.sources import SYNTHETIC_PREFIX

# sources that are not a path on this machine
REMOTE_PREFIXES = ("http://", "https://", KAGGLE_PREFIX, BUNDLED_PREFIX, SYNTHETIC_PREFIX)
# what fetch unpacks into a folder of members (a file inside one is named `<archive>: <member>`)
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tgz", ".tar.gz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz")


def missing_source(name: str, source: str) -> str | None:
    """`datasets.<name>.source: <source>: no such file or folder` for a local source that is not
    there (a relative one is read from the working directory, which the line names); else None."""
    if not source or source.startswith(REMOTE_PREFIXES) or Path(source).expanduser().exists():
        return None
    where = "" if Path(source).expanduser().is_absolute() else f" (relative to {os.getcwd()})"
    return f"datasets.{name}.source: {source}: no such file or folder{where}"


def as_written(message: str, raw_dir: str, source: str) -> str:
    """A message about the fetched copy (paths under raw_dir) as about the source the user wrote: a
    folder's files by their path in it, a single (or compressed) file by the source itself, an
    archive's or a download's members as `<source>: <member>`."""
    raw = str(raw_dir).rstrip("/")
    if not source or raw not in message:
        return message
    folder = not source.startswith(REMOTE_PREFIXES) and Path(source).expanduser().is_dir()
    if not folder and not source.lower().endswith(ARCHIVE_SUFFIXES):
        # fetch copied (or decompressed) the one file the source names; Snakemake's hidden
        # .snakemake_timestamp may stand beside it
        files = [f for f in Path(raw).glob("*") if f.is_file() and not is_metadata(f.name)]
        if len(files) == 1:
            message = message.replace(f"{raw}/{files[0].name}", source)
    message = message.replace(f"{raw}/", source.rstrip("/") + "/" if folder else f"{source}: ")
    return re.sub(re.escape(raw) + r"(?![\w.-])", lambda _: source, message)
