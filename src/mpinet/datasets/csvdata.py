"""Table datasets (Iris, UCI, OpenML, Kaggle): read the table (mpinet.datasets.tables), pick the label,
drop id columns, missing rows by the stated policy and duplicates, split, standardize, write arrays."""

import re
from pathlib import Path

import numpy as np

from mpinet import MpinetError
from mpinet.datasets import dataset, prepared
from mpinet.datasets.fetch import is_metadata
from mpinet.datasets.split import stratified_split
from mpinet.datasets.tables import MISSING, number, read_cells
from mpinet.files import staging_dir

TABLE_SUFFIXES = (".csv", ".data", ".txt", ".tsv", ".arff", ".parquet", ".pq")
# a dataset's keys that say how its table is read (mpinet.datasets.tables, read_labelled)
READING_KEYS = ("label_column", "id_column", "missing", "separator", "header")
MISSING_POLICIES = ("refuse", "drop_rows")
# the defaults of the keys prepare needs, as the workflow's schema states them (a test ties them)
DEFAULTS = {"test_fraction": 0.3, "split_seed": 0}
ID_NAME = re.compile(r"^(id|index|unnamed: ?0|)$", re.IGNORECASE)


def read_table(
    path: str | Path, label_column=None, reading: dict | None = None
) -> tuple[np.ndarray, list[str], list[str]]:
    """Read a table into (features float64[n, d], labels, feature names): read_labelled without its
    decisions. `label_column` (a name, or a 0-based index) is a shorthand for reading's key."""
    reading = dict(reading or {}, **({"label_column": label_column} if label_column is not None else {}))
    x, labels, names, _ = read_labelled(Path(path), reading)
    complete = ~np.isnan(x).any(axis=1)
    return x[complete], [lab for lab, c in zip(labels, complete) if c], names


def read_labelled(path: Path, reading: dict) -> tuple[np.ndarray, list[str], list[str], dict]:
    """(features float64[n, d], labels, feature names, what was decided) of the table in path
    (mpinet.datasets.tables reads its cells). `reading` holds the dataset's keys: label_column (a
    name or a 0-based index; default the last column), id_column (excluded; so are columns a header
    names like an id and, in a headerless table, a first column of distinct integers or one counting
    0, 1, 2...), missing (refuse or drop_rows rows with a `?`, `NA` or empty cell: a row without a
    label is dropped here, a missing feature is NaN), separator and header."""
    table = read_cells(path, reading)
    names, rows, decimal = table.names, table.rows, table.decided["decimal"]
    width = len(names)
    if width < 2:
        raise MpinetError(f"{path}: {width} column; expected at least one feature column and a label column")
    if not rows:
        raise MpinetError(f"{path}: no data rows after the header")
    label_idx = column_index(path, names, reading.get("label_column"), "label_column", width - 1)
    named = {column_index(path, names, reading["id_column"], "id_column", 0)} if "id_column" in reading else set()
    named |= {j for j, n in enumerate(names) if table.decided["header"] and ID_NAME.match(n)} - {label_idx}
    policy = reading.get("missing", "refuse")
    if policy not in MISSING_POLICIES:
        raise MpinetError(f"missing: unknown {policy!r}; expected {' or '.join(MISSING_POLICIES)}")
    feature_idx = [j for j in range(width) if j != label_idx and j not in named]
    values, labels, unlabelled = [], [], 0
    for line, cells in rows:
        if len(cells) != width:
            raise MpinetError(f"{path}: row {line} has {len(cells)} cells, expected {width}")
        gaps = [j for j in [label_idx, *feature_idx] if cells[j] in MISSING]
        if gaps and policy == "refuse":
            j = gaps[0]
            what = f"the label column '{names[j]}'" if j == label_idx else f"column '{names[j]}'"
            how = "is empty" if not cells[j] else f"is missing ({cells[j]!r})"
            raise MpinetError(f"{path}: row {line}: {what} {how}; set missing: drop_rows to drop such rows")
        if label_idx in gaps:  # belongs to no class, so to no split: dropped here
            unlabelled += 1
            continue
        # drop_rows: a missing feature is NaN until prepare_table drops its row after the split
        values.append([np.nan if j in gaps else _number(path, line, names[j], cells[j], decimal) for j in feature_idx])
        labels.append(cells[label_idx])
    if not values or np.isnan(values).any(axis=1).all():
        raise MpinetError(f"{path}: every row has a missing value; nothing is left to train on")
    x = np.array(values, dtype=np.float64)
    headerless = not table.decided["header"]
    detected = {j for k, j in enumerate(feature_idx) if headerless and _is_id_column(j, x[:, k])}
    keep = [k for k, j in enumerate(feature_idx) if j not in detected]
    ids = sorted(named | detected)
    decided = {**table.decided, "label_column": names[label_idx], "id_columns": [names[j] for j in ids]}
    decided |= {"missing": policy, "rows_dropped_missing": {"unlabelled": unlabelled}, "encoding": table.encoding}
    return x[:, keep], labels, [names[feature_idx[k]] for k in keep], decided


def prepare(raw_dir: str | Path, out_dir: str | Path, options: dict, source: str = "", workers=None) -> dict:
    """The dataset directory out_dir from the one table in raw_dir (mpinet.datasets.prepare's entry;
    one process: a table is small)."""
    options = {**DEFAULTS, **options}  # the command line may give none (mpinet.datacli)
    reading = {k: options[k] for k in READING_KEYS if k in options}
    return prepare_table(find_table(raw_dir), out_dir, reading, options["test_fraction"], options["split_seed"], source)


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
        raise MpinetError(f"{raw}: no table file ({', '.join(TABLE_SUFFIXES)}) found")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(raw)) for p in found)
        raise MpinetError(f"{raw}: several table files ({names}); keep one, or point source at the file itself")
    return found[0]


def prepare_table(
    path: str | Path, out_dir: str | Path, reading: dict | None = None, test_fraction=0.3, seed=0, source=""
) -> dict:
    """Turn a table into a standardized, stratified train/test dataset directory; returns its summary.
    `reading`: how to read it (read_labelled's keys)."""
    x, labels, names, decided = read_labelled(Path(path), reading or {})
    encoding = decided.pop("encoding")
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
    train_idx, test_idx = _split(path, x, y, (test_fraction, seed), decided["rows_dropped_missing"])
    if lost := [c for i, c in enumerate(classes) if not (y[train_idx] == i).any()]:
        raise MpinetError(
            f"{path}: every training row of class {lost[0]!r} has a missing value; nothing to learn it from"
        )
    mean = x[train_idx].mean(axis=0)
    std = x[train_idx].std(axis=0)
    std[std == 0] = 1.0  # a constant feature carries no information; leave it at zero
    z = ((x - mean) / std).astype(np.float32)

    summary = {
        "format": "csv",
        "encoding": encoding,
        # how the file was read: what `auto` decided, the label, the ids left out, rows dropped
        "table": decided,
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


def _split(path, x: np.ndarray, y: np.ndarray, how: tuple, dropped: dict) -> tuple[np.ndarray, np.ndarray]:
    """The training rows (in their stored, shuffled order) and the test rows of a stratified split by
    how = (test_fraction, seed). Rows with a missing feature (missing: drop_rows) are split with the
    others and then dropped, so each split's count in `dropped` says how many of its rows it lost."""
    test_fraction, seed = how
    train_idx, test_idx = stratified_split(y, test_fraction, seed)
    train_idx = np.random.default_rng([seed, 1]).permutation(train_idx)  # stored shuffled: see train.SHUFFLES
    complete = ~np.isnan(x).any(axis=1)
    for split, idx in (("train", train_idx), ("test", test_idx)):
        dropped[split] = int((~complete[idx]).sum())
        if not complete[idx].any():
            raise MpinetError(f"{path}: every {split} row has a missing value; nothing is left to {split} on")
    return train_idx[complete[train_idx]], test_idx[complete[test_idx]]


def column_index(path: Path, names: list[str], spec, key: str, default: int) -> int:
    """A column given by name or by 0-based index (default: `default`), for the key `key`."""
    if spec is None:
        return default
    if str(spec) in names:
        return names.index(str(spec))
    if isinstance(spec, int) or str(spec).lstrip("-").isdigit():
        if -len(names) <= int(spec) < len(names):
            return int(spec) % len(names)
        raise MpinetError(f"{key}: column {spec} is out of range; {path} has columns 0 to {len(names) - 1}")
    raise MpinetError(f"{path}: {key.replace('_', ' ')} '{spec}' is not in the header ({', '.join(names)})")


def _number(path: Path, line: int, name: str, cell: str, decimal: str) -> float:
    value = number(cell, decimal)
    if value is None:
        raise MpinetError(f"{path}: row {line}, column '{name}': '{cell}' is not a number")
    return value


def _is_id_column(j: int, col: np.ndarray) -> bool:
    """Distinct integers in the first column (an id), or anywhere counting 0, 1, 2... or 1, 2, 3..."""
    if len(col) <= 2 or not np.all(col == np.round(col)):
        return False
    counting = bool(np.all(np.diff(col) == 1)) and col[0] in (0, 1)
    return counting or (j == 0 and len(np.unique(col)) == len(col))
