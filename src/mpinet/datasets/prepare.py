"""Preprocess a fetched dataset directory into training arrays, by format.

Each format's module is imported by name here, not at the top, so what a format's preparation
depends on (mpinet.fingerprints.PREPARATION, one fingerprint per format) is this dispatch and that
module's own imports: a change to the image code re-prepares no table, and the other way round.
"""

import importlib
from pathlib import Path

from mpinet import MpinetError

# format -> the module whose prepare(raw_dir, out_dir, options, source, workers) writes it
FORMATS = {"csv": "mpinet.datasets.csvdata", "images": "mpinet.datasets.images"}


def prepare_dataset(
    raw_dir: str | Path, out_dir: str | Path, fmt: str, options: dict, source: str = "", workers: int | None = None
) -> dict:
    """Write the dataset directory out_dir from raw_dir; options are the dataset's config keys, with
    the defaults the workflow's schema fills in."""
    if fmt not in FORMATS:
        raise MpinetError(f"format: unknown '{fmt}'; expected {' or '.join(FORMATS)}")
    return importlib.import_module(FORMATS[fmt]).prepare(raw_dir, out_dir, options, source, workers)
