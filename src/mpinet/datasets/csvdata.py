"""CSV datasets (Iris): read the file, drop id columns and duplicates, split, standardize, write arrays."""

import codecs
import csv
import io
import math
import re
from pathlib import Path

import numpy as np

from mpinet import MpinetError
from mpinet.datasets import dataset, prepared
from mpinet.datasets.fetch import is_metadata
from mpinet.datasets.split import stratified_split
from mpinet.files import staging_dir

TABLE_SUFFIXES = (".csv", ".data", ".txt", ".tsv")
ID_NAME = re.compile(r"^(id|index|unnamed: ?0|)$", re.IGNORECASE)


def decode_text(path: Path) -> tuple[str, str]:
    """A text file's content and its encoding: UTF-8 (with or without BOM) or UTF-16 with a BOM
    (Excel's "Unicode text"); anything else that is not UTF-8 is read as Windows-1252, what
    spreadsheet programs on Windows write, and the summary records that."""
    raw = path.read_bytes()
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return raw.decode("utf-16"), "utf-16"
        except UnicodeDecodeError as e:
            raise MpinetError(f"{path}: UTF-16 text cut or damaged at byte {e.start}") from None
    if b"\0" in raw[:4096]:
        raise MpinetError(f"{path}: holds NUL bytes; expected a text file (CSV), not a binary one")
    try:
        return raw.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode("cp1252"), "cp1252"
    except UnicodeDecodeError as e:
        raise MpinetError(f"{path}: byte {e.start} is neither UTF-8 nor Windows-1252 text; save it as UTF-8") from None


def read_table(path: str | Path, label_column: str | None = None) -> tuple[np.ndarray, list[str], list[str]]:
    """Read a CSV into (features float64[n, d], labels, feature names).

    Handles Kaggle's Iris.csv (Id column dropped), UCI's headerless iris.data and any CSV
    with a header; the label is `label_column` (a name, or a 0-based index for headerless
    files) or else the last column.
    """
    path = Path(path)
    text, _ = decode_text(path)
    rows = [
        (i, r) for i, r in enumerate(csv.reader(io.StringIO(text, newline="")), start=1) if any(c.strip() for c in r)
    ]
    if not rows:
        raise MpinetError(f"{path}: empty file; expected a CSV with feature columns and a label column")
    first = [c.strip() for c in rows[0][1]]
    has_header = not all(_is_number(c) for c in first[:-1]) or (label_column is not None and label_column in first)
    if has_header:
        names, rows = first, rows[1:]
        for j, n in enumerate(names):
            if not n:
                raise MpinetError(f"{path}: header column {j + 1} has no name; expected a name for every column")
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise MpinetError(f"{path}: header names column(s) {', '.join(dup)} more than once")
    else:
        names = [f"column{j}" for j in range(len(first))]
    label_idx = _label_index(path, names, label_column, has_header)
    width = len(names)
    if width < 2:
        raise MpinetError(f"{path}: {width} column; expected at least one feature column and a label column")
    if not rows:
        raise MpinetError(f"{path}: no data rows after the header")

    feature_idx = [j for j in range(width) if j != label_idx]
    values, labels = np.empty((len(rows), len(feature_idx))), []
    for r, (line, cells) in enumerate(rows):
        if len(cells) != width:
            raise MpinetError(f"{path}: row {line} has {len(cells)} cells, expected {width}")
        label = cells[label_idx].strip()
        if not label:
            raise MpinetError(f"{path}: row {line}: the label column '{names[label_idx]}' is empty")
        labels.append(label)
        for k, j in enumerate(feature_idx):
            cell = cells[j].strip()
            if not _is_number(cell):
                raise MpinetError(f"{path}: row {line}, column '{names[j]}': '{cell}' is not a number")
            values[r, k] = float(cell)
    keep = [k for k, j in enumerate(feature_idx) if not _is_id_column(names[j], values[:, k], has_header)]
    return values[:, keep], labels, [names[feature_idx[k]] for k in keep]


def prepare(raw_dir: str | Path, out_dir: str | Path, options: dict, source: str = "", workers=None) -> dict:
    """The dataset directory out_dir from the one table in raw_dir (mpinet.datasets.prepare's entry;
    one process: a table is small)."""
    return prepare_table(
        find_table(raw_dir),
        out_dir,
        label_column=options.get("label_column"),  # optional: the last column
        test_fraction=options["test_fraction"],
        seed=options["split_seed"],
        source=source,
    )


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


def prepare_table(
    path: str | Path,
    out_dir: str | Path,
    label_column: str | None = None,
    test_fraction: float = 0.3,
    seed: int = 0,
    source: str = "",
) -> dict:
    """Turn a CSV into a standardized, stratified train/test dataset directory; returns its summary."""
    x, labels, names = read_table(path, label_column)
    _, encoding = decode_text(Path(path))
    rows = [tuple(v) + (lab,) for v, lab in zip(x.tolist(), labels)]
    seen, keep = set(), []
    for i, row in enumerate(rows):
        if row not in seen:
            seen.add(row)
            keep.append(i)
    duplicates = len(rows) - len(keep)
    x, labels = x[keep], [labels[i] for i in keep]
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise MpinetError(f"{path}: only one class ({classes[0]!r}) in the label column; need at least 2")
    y = np.array([classes.index(lab) for lab in labels], dtype=np.int64)
    train_idx, test_idx = stratified_split(y, test_fraction, seed)
    train_idx = np.random.default_rng([seed, 1]).permutation(train_idx)  # stored shuffled: see train.SHUFFLES
    mean = x[train_idx].mean(axis=0)
    std = x[train_idx].std(axis=0)
    std[std == 0] = 1.0  # a constant feature carries no information; leave it at zero
    z = ((x - mean) / std).astype(np.float32)

    summary = {
        "format": "csv",
        "encoding": encoding,
        "source": source or str(path),
        "file": str(path),
        "features": names,
        "classes": classes,
        "counts": {
            split: {c: int((y[idx] == i).sum()) for i, c in enumerate(classes)}
            for split, idx in (("train", train_idx), ("test", test_idx))
        },
        "shapes": {"train_x": [len(train_idx), len(names)], "test_x": [len(test_idx), len(names)]},
        "dtype": "float32",
        "duplicates_dropped": duplicates,
        "standardization": {"mean": mean.tolist(), "std": std.tolist(), "from": "training split"},
        "values": dataset.value_stats(z[train_idx]),
        "test_fraction": test_fraction,
        "seed": seed,
        "synthetic": False,
    }
    with staging_dir(out_dir) as staging:
        for name, rows in (("train", train_idx), ("test", test_idx)):
            np.save(staging / f"{name}_x.npy", z[rows])
            np.save(staging / f"{name}_y.npy", y[rows])
        prepared.write(out_dir, staging, classes, summary)
    return summary


def _label_index(path: Path, names: list[str], label_column: str | None, has_header: bool) -> int:
    if label_column is None:
        return len(names) - 1
    if label_column in names:
        return names.index(label_column)
    if not has_header and str(label_column).lstrip("-").isdigit():
        return int(label_column) % len(names)
    raise MpinetError(f"{path}: label column '{label_column}' is not in the header ({', '.join(names)})")


def _is_number(text: str) -> bool:
    """A finite number: not nan, not inf, and not a value like 1e400 that overflows to inf."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _is_id_column(name: str, col: np.ndarray, has_header: bool) -> bool:
    """An id column is named like one, or (headerless) counts 0, 1, 2... or 1, 2, 3..."""
    if has_header and ID_NAME.match(name.strip()):
        return True
    steps = np.diff(col)
    return not has_header and len(col) > 2 and bool(np.all(steps == 1)) and col[0] in (0, 1)
