"""The data guard: fixed small sources must fetch to the recorded files and prepare to the recorded
arrays, and when either changes its code fingerprint (mpinet.fingerprints) must change too, so a
change to the data code can never keep old data, while a refactor refetches and re-prepares nothing.

The sources are made here, losslessly (PNG pixels, CSV text, archives with fixed time stamps), so
they do not move with a library's encoder; decoding and resizing are the code under guard.
"""

import hashlib
import io
import json
import os
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import EditedPackage
from PIL import Image

REFERENCE = Path(__file__).with_name("preparation_reference.json")
LOCK_COMMAND = "make data-lock"
IRIS = Path(__file__).resolve().parents[1] / "src" / "mpinet" / "data" / "iris.csv"
CLASSES = ("sea", "forest", "street")
# (name, source made by _sources, format, dataset options): each reader and the options that change arrays
CASES = {
    "iris_csv": ("iris.csv", "csv", {}),
    # tables as repositories publish them (the reader's separator, header, label, id and missing rules)
    "uci_headerless_id_first_word_label": ("wdbc.data", "csv", {"label_column": 1}),
    "semicolons_decimal_commas_missing": ("export.csv", "csv", {"label_column": "class", "missing": "drop_rows"}),
    "tabs_quoted_years_header": ("years.tsv", "csv", {"label_column": "class", "id_column": "name"}),
    "blanks_counting_id": ("blanks.txt", "csv", {}),
    "openml_arff": ("table.arff", "csv", {"id_column": "name"}),
    "parquet": ("table.parquet", "csv", {"label_column": "class", "missing": "drop_rows"}),
    "images_split_standardized": ("images.tar.gz", "images", {"standardize_inputs": True, "include_pred": True}),
    "images_resized_own_split": ("train_only.zip", "images", {"image_size": 8, "test_fraction": 0.25}),
}
DEFAULTS = {
    "test_fraction": 0.3,
    "split_seed": 0,
    "image_size": 12,
    "standardize_inputs": False,
    "skip_bad_images": False,
    "include_pred": False,
}
# summary keys that hold this machine's paths, not the data; and how a table was read (its reader's
# decisions, added in 0.9.0: what they decide shows in the arrays, classes and counts compared)
PATH_KEYS = ("source", "file", "test_split", "skipped_files", "table")


def _png(rng, cls: int) -> bytes:
    base = np.array([40 + 90 * cls, 200 - 60 * cls, 30 + 70 * (cls % 2)], dtype=np.int16)
    pixels = np.clip(base + rng.integers(-40, 40, size=(12, 12, 3)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG")
    return out.getvalue()


def _image_tree(rng, splits) -> dict[str, bytes]:
    files = {}
    for split, per_class in splits:
        for c, name in enumerate(CLASSES):
            for i in range(per_class):
                files[f"seg_{split}/seg_{split}/{name}/{i}.png"] = _png(rng, c)
    return files


def _sources(d: Path) -> None:
    """iris.csv, a tar.gz with train, test and pred folders, a zip with a training folder only, and
    tables as repositories publish them (_tables)."""
    rng = np.random.default_rng(7)
    (d / "iris.csv").write_bytes(IRIS.read_bytes())
    tree = _image_tree(rng, [("train", 6), ("test", 2)])
    tree.update({f"seg_pred/seg_pred/{i}.png": _png(rng, i % 3) for i in range(3)})
    with tarfile.open(d / "images.tar.gz", "w:gz") as tar:
        for name, data in sorted(tree.items()):
            info = tarfile.TarInfo(f"intel/{name}")
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(d / "train_only.zip", "w") as z:
        for name, data in sorted(_image_tree(rng, [("train", 8)]).items()):
            z.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data)
    _tables(d, np.random.default_rng(11))


def _table_rows(rng) -> list[tuple]:
    """(class word, four measurements with 3 decimals) of 30 rows whose measurements tell 3 classes apart."""
    y = rng.permutation(np.repeat(np.arange(3), 10))
    x = np.round(rng.normal(size=(30, 4)) * 0.3 + y[:, None] * 1.5, 3)
    return [(("benign", "malign", "unsure")[c], *v) for c, v in zip(y, x)]


def _tables(d: Path, rng) -> None:
    """Tables laid out as published: delimited text in four layouts, ARFF and Parquet."""
    rows = _table_rows(rng)
    uci = (f"{842300 + 17 * i},{c},{a},{b},{e},{f}\n" for i, (c, a, b, e, f) in enumerate(rows))
    (d / "wdbc.data").write_text("".join(uci))
    cells = [[str(v).replace(".", ",") for v in r[1:]] for r in rows]
    cells[3][2] = "?"
    export = (f"{i};{';'.join(v[:2])};{r[0]};{';'.join(v[2:])}\n" for i, (r, v) in enumerate(zip(rows, cells)))
    (d / "export.csv").write_text("id;a;b;class;c;d\n" + "".join(export))
    (d / "years.tsv").write_text(
        "name\t1990\tclass\t1991\t1992\t1993\n"
        + "".join(f'"s\t{i}"\t{a}\t{c}\t{b}\t{e}\t{f}\n' for i, (c, a, b, e, f) in enumerate(rows))
    )
    (d / "blanks.txt").write_text("".join(f"{i}   {a}  {b} {e}  {f}  {c}\n" for i, (c, a, b, e, f) in enumerate(rows)))
    attributes = "".join(f"@attribute {n} numeric\n" for n in "abcd")
    (d / "table.arff").write_text(
        f"% made by the data guard\n@relation guard\n@attribute name string\n{attributes}"
        "@attribute class {benign,malign,unsure}\n@data\n"
        + "".join(f"'s {i}',{a},{b},{e},{f},{c}\n" for i, (c, a, b, e, f) in enumerate(rows))
    )
    frame = pd.DataFrame(rows, columns=["class", "a", "b", "c", "d"]).assign(id=range(len(rows)))
    frame.loc[5, "b"] = None  # a null is a missing value
    frame.to_parquet(d / "table.parquet")


def _tree_hash(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(p for p in d.rglob("*") if p.is_file()):
        h.update(str(p.relative_to(d)).encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def produced(tmp_path: Path) -> tuple[dict, dict]:
    """What each case fetches (a hash of the files) and prepares (its summary but for paths)."""
    from mpinet.datasets.fetch import fetch
    from mpinet.datasets.prepare import prepare_dataset

    _sources(tmp_path)
    fetched, prepared = {}, {}
    for name, (source, fmt, options) in CASES.items():
        raw, out = tmp_path / "raw" / name, tmp_path / "data" / name
        fetch(str(tmp_path / source), raw)
        if source.endswith(".parquet"):  # its bytes name the pyarrow that wrote them: only the copy is checked
            fetched[name] = "unchanged" if (raw / source).read_bytes() == (tmp_path / source).read_bytes() else "moved"
        else:
            fetched[name] = _tree_hash(raw)
        prepare_dataset(raw, out, fmt, {**DEFAULTS, **options}, source=source, workers=1)
        summary = json.loads((out / "summary.json").read_text())
        prepared[name] = {k: v for k, v in summary.items() if k not in PATH_KEYS}
    return fetched, prepared


def check_lock(fp, what: str, reference: dict, moved: list) -> None:
    """One data fingerprint against its lock: the lock maps the code's hash to the fingerprint the
    guard's output is recorded under, and that output is what the code gives. `make data-lock`
    (MPINET_LOCK_DATA=1) first writes the entry and, for moved output, the new reference."""
    from mpinet.fingerprints import write_lock

    if os.environ.get("MPINET_LOCK_DATA"):
        reference["fingerprints"][what] = write_lock(fp, reference["fingerprints"].get(what), not moved, what)
        print(f"data lock: {what} code {fp.code_hash()} -> {reference['fingerprints'][what]}", file=sys.stderr)
        moved.clear()
    code, recorded = fp.code_hash(), reference["fingerprints"][what]
    locked = fp.known().get(code)
    assert locked, f"the data lock has no entry for the {what} code {code}: run `{LOCK_COMMAND}`"
    assert locked == recorded, f"the lock maps the {what} code to {locked}, its guard to {recorded}: `{LOCK_COMMAND}`"
    assert not moved, (
        f"the guard's {what} output of {moved} is not that of fingerprint {locked}, which the lock maps this code "
        f"to: run `{LOCK_COMMAND}` (new data get a new fingerprint, and studies of it prepare and train again)"
    )


def _moved(fp, now: dict, recorded: dict, cases: list) -> list:
    """The cases whose output is not the recorded one. A case the guard gained (none recorded) is
    output the locked code gives when the code is the one the lock knows, so it is recorded under
    that fingerprint; under new code it counts as moved (nothing says the old code gave it)."""
    known = fp.code_hash() in fp.known()
    return [k for k in cases if (k in recorded or not known) and now[k] != recorded.get(k)]


def test_the_data_lock_maps_this_code_to_the_files_and_arrays_the_guard_produces(tmp_path):
    """The data fingerprints are computed, not typed: fixed sources fetched and prepared must give the
    output recorded under the fingerprint the lock maps the code to (a refactor: one command, no hash
    typed; new output: a new fingerprint, so old data are never kept)."""
    from mpinet.fingerprints import FETCHING, PREPARATION

    fetched, prepared = produced(tmp_path)
    now = {"fetched": fetched, "prepared": prepared}
    reference = json.loads(REFERENCE.read_text())
    guards = [(FETCHING, "fetching", "fetched", list(CASES))]
    for fmt, fp in PREPARATION.items():
        guards.append((fp, f"preparation {fmt}", "prepared", [k for k, (_, f, _) in CASES.items() if f == fmt]))
    moved = {what: _moved(fp, now[key], reference[key], cases) for fp, what, key, cases in guards}
    if os.environ.get("MPINET_LOCK_DATA"):
        for fp, what, _, _ in guards:
            check_lock(fp, what, reference, moved[what])
        REFERENCE.write_text(json.dumps({**reference, **now}, indent=1) + "\n")
    for fp, what, _, _ in guards:
        check_lock(fp, what, reference, moved[what])


@pytest.mark.parametrize("name", ["FETCHING", "PREPARATION-csv", "PREPARATION-images"])
def test_the_data_fingerprints_cover_their_modules_and_not_the_command_line(tmp_path, name):
    import dataclasses

    from mpinet import fingerprints

    package = EditedPackage(tmp_path)
    kind, _, fmt = name.partition("-")
    fp = getattr(fingerprints, kind)
    guard = package.guard(fp[fmt] if fmt else fp)

    def after(module, old, new):
        return package.value_after(guard, module, old, new)

    base = guard.value()
    assert after("datasets/fetch.py", "def fetch(", "# a comment\ndef fetch(") == base
    assert after("datacli.py", "def main(", "def _unused():\n    pass\n\n\ndef main(") == base
    assert after("__init__.py", '__version__ = "', '__version__ = "9') == base
    assert after("datasets/fetch.py", "CHUNK = 1 << 20", "CHUNK = 1 << 21") != base
    changes_images = after("datasets/images.py", "def _flatten(", "X = 1\n\n\ndef _flatten(") != base
    assert changes_images == (name == "PREPARATION-images")
    changes_tables = after("datasets/csvdata.py", "def _number(", "X = 1\n\n\ndef _number(") != base
    assert changes_tables == (name == "PREPARATION-csv")
    bumped = dataclasses.replace(guard, version=guard.version + 1)
    assert bumped.value() == bumped.code_hash() != base


def test_the_data_commands_explain_themselves_and_fail_in_one_line_leaving_nothing(tmp_path):
    import subprocess
    import sys

    def datacli(*args):
        cmd = [sys.executable, "-m", "mpinet.datacli", *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    shown = datacli("--help")
    assert shown.returncode == 0 and all(c in shown.stdout for c in ("synthetic", "fetch", "prepare"))
    out = tmp_path / "out"
    for args, code, message in [
        (("prepare", tmp_path / "missing", out, "--format", "csv"), 1, "missing: no such directory"),
        (("prepare", tmp_path, out, "--format", "csv", "--options", "{bad"), 2, "--options is not JSON"),
        (("fetch", tmp_path / "missing.zip", out), 1, "missing.zip: no such file or directory"),
    ]:
        p = datacli(*args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == code and len(lines) == 1, (args, p.stderr)
        assert lines[0].startswith("mpinet.datacli: error: ") and message in lines[0], lines
        assert not out.exists()


SYNTHESIS_REFERENCE = Path(__file__).with_name("synthesis_reference.json")


def test_the_synthetic_archive_is_the_one_its_locked_fingerprint_recorded(tmp_path):
    from mpinet.datasets.synthetic import make_archive
    from mpinet.fingerprints import SYNTHESIS

    archive = make_archive(tmp_path / "intel.zip", 3, 2, 2, 16, seed=5)
    again = make_archive(tmp_path / "again.zip", 3, 2, 2, 16, seed=5)
    assert archive.read_bytes() == again.read_bytes()  # the same settings, the same bytes
    now = hashlib.sha256(archive.read_bytes()).hexdigest()
    reference = json.loads(SYNTHESIS_REFERENCE.read_text())
    moved = [] if now == reference["archive"] else ["the archive"]
    check_lock(SYNTHESIS, "synthesis", reference, moved)
    if os.environ.get("MPINET_LOCK_DATA"):
        SYNTHESIS_REFERENCE.write_text(json.dumps({**reference, "archive": now}, indent=1) + "\n")
