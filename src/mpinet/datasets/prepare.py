"""Preprocess a fetched dataset directory into training arrays, by format."""

from pathlib import Path

from mpinet import MpinetError
from mpinet.datasets.csvdata import prepare_table
from mpinet.datasets.fetch import is_metadata
from mpinet.datasets.images import prepare_images

TABLE_SUFFIXES = (".csv", ".data", ".txt", ".tsv")


def prepare_dataset(
    raw_dir: str | Path, out_dir: str | Path, fmt: str, options: dict, source: str = "", workers: int | None = None
) -> dict:
    """Write the dataset directory out_dir from raw_dir; options are the dataset's config keys, with
    the defaults the workflow's schema fills in."""
    if fmt == "csv":
        return prepare_table(
            find_table(raw_dir),
            out_dir,
            label_column=options.get("label_column"),  # optional: the last column
            test_fraction=options["test_fraction"],
            seed=options["split_seed"],
            source=source,
        )
    if fmt == "images":
        return prepare_images(
            raw_dir,
            out_dir,
            image_size=options["image_size"],
            standardize=options["standardize_inputs"],
            test_fraction=options["test_fraction"],
            seed=options["split_seed"],
            skip_bad_images=options["skip_bad_images"],
            include_pred=options["include_pred"],
            workers=workers,
            source=source,
        )
    raise MpinetError(f"format: unknown '{fmt}'; expected csv or images")


def find_table(raw_dir: str | Path) -> Path:
    """The one table file in a fetched dataset (searched recursively)."""
    raw = Path(raw_dir)
    found = sorted(
        p
        for p in raw.rglob("*")
        if p.is_file() and p.suffix.lower() in TABLE_SUFFIXES and not is_metadata(str(p.relative_to(raw)))
    )
    found = [p for p in found if p.name.lower() not in ("readme.txt", "synthetic.txt")]
    if not found:
        raise MpinetError(f"{raw}: no table file (.csv or .data) found")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(raw)) for p in found)
        raise MpinetError(f"{raw}: several table files ({names}); keep one, or point source at the file itself")
    return found[0]
