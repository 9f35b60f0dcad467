"""A table as repositories publish it, read into named columns of text cells: CSV with its separator
and header found from the file (or given), decimal commas after `;`, and OpenML's ARFF and Parquet
beside it. What the rows mean (label, id, features, missing values) is mpinet.datasets.csvdata's.

`auto` decides as a person would, from the first rows:
- the separator: the first of tab, `;`, `,` and blanks that splits at least half the sampled rows
  into the same number (two or more) of cells, quotes respected (`,` last but one: a `;` file with decimal commas
  splits on commas too);
- the header: the first row is one when a column holds a word there and numbers below, or an integer
  there and fractions below (years over measurements), or a word there that never recurs in a column
  whose words do (a label column's name over its classes); it is data when a word of it recurs below,
  or when it holds numbers only, of the kinds below. Anything else is refused, naming the key to set.
"""

import codecs
import csv
import io
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mpinet import MpinetError

SEPARATORS = {",": ",", ";": ";", "tab": "\t", "\t": "\t", "whitespace": None}  # config value -> splitter
AUTO_ORDER = ("\t", ";", ",", None)
SEPARATOR_NAMES = {",": ",", ";": ";", "\t": "tab", None: "whitespace"}
MISSING = frozenset({"", "?", "NA"})  # UCI's `?`, R's and pandas' NA, an empty cell
SAMPLE = 50  # rows a decision looks at
DECIMAL_COMMA = re.compile(r"^[+-]?\d*,\d+([eE][+-]?\d+)?$")
INTEGER = re.compile(r"^[+-]?\d+$")


@dataclass
class Table:
    """A table's column names and data rows (line number, cells), with what was decided reading it."""

    names: list[str]
    rows: list[tuple[int, list[str]]]
    decided: dict = field(default_factory=dict)  # separator, header, decimal, and which of them `auto` found
    encoding: str = ""


def read_cells(path: Path, options: dict) -> Table:
    """The table in path by its suffix: ARFF (.arff), Parquet (.parquet, .pq), else delimited text."""
    suffix = path.suffix.lower()
    if suffix == ".arff":
        return read_arff(path)
    if suffix in (".parquet", ".pq"):
        return read_parquet(path)
    return read_text_table(path, options)


def read_text_table(path: Path, options: dict) -> Table:
    text, encoding = decode_text(path)
    if not text.strip():
        raise MpinetError(f"{path}: empty file; expected a table with feature columns and a label column")
    given = options.get("separator", "auto")
    sep = find_separator(path, text, given)
    rows = [(i, r) for i, r in enumerate(_split(text, sep), start=1) if any(c.strip() for c in r)]
    if not rows:
        raise MpinetError(f"{path}: empty file; expected a table with feature columns and a label column")
    decimal = "," if sep == ";" else "."
    header_given = options.get("header", "auto")
    header = find_header(path, rows, header_given, options.get("label_column"), decimal)
    first = [c.strip() for c in rows[0][1]]
    if header:
        names, rows = first, rows[1:]
        for j, n in enumerate(names):
            if not n:
                raise MpinetError(f"{path}: header column {j + 1} has no name; expected a name for every column")
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise MpinetError(f"{path}: header names column(s) {', '.join(dup)} more than once")
    else:
        names = [f"column{j}" for j in range(len(first))]
    found = [k for k, v in (("separator", given), ("header", header_given)) if v == "auto"]
    decided = {"separator": SEPARATOR_NAMES[sep], "header": header, "decimal": decimal, "found": found}
    return Table(names, [(i, [c.strip() for c in r]) for i, r in rows], decided, encoding)


def find_separator(path: Path, text: str, given) -> str | None:
    """The cells' separator: the one given, or found (the module's docstring)."""
    if given != "auto":
        if given not in SEPARATORS:
            raise MpinetError(f"separator: unknown {given!r}; expected auto, ',', ';', 'tab' or 'whitespace'")
        return SEPARATORS[given]
    lines = [line for line in text.splitlines() if line.strip()][:SAMPLE]
    for sep in AUTO_ORDER:
        widths = Counter(len(cells) for cells in _split("\n".join(lines), sep))
        width, count = widths.most_common(1)[0] if widths else (0, 0)
        if width >= 2 and count >= 0.5 * len(lines):
            return sep
    raise MpinetError(
        f"{path}: cannot tell the columns' separator (no tab, ';', ',' or blanks splits its rows alike); "
        "set separator: to ',', ';', 'tab' or 'whitespace'"
    )


def find_header(path: Path, rows: list, given, label_column, decimal: str) -> bool:
    """Whether the first row names the columns: as given, or found (the module's docstring)."""
    if given in (True, False, "true", "false"):
        return given in (True, "true")
    if given != "auto":
        raise MpinetError(f"header: unknown {given!r}; expected auto, true or false")
    first, below = [c.strip() for c in rows[0][1]], [[c.strip() for c in r] for _, r in rows[1:SAMPLE]]
    if label_column is not None and str(label_column) in first and not str(label_column).isdigit():
        return True
    columns = [[r[j] for r in below if j < len(r) and r[j] not in MISSING] for j in range(len(first))]
    kinds = [{kind(c, decimal) for c in col} for col in columns]
    for cell, below_kinds in zip(first, kinds):
        mine = kind(cell, decimal)
        if (mine == "text" and below_kinds and "text" not in below_kinds) or (
            mine == "int" and below_kinds == {"float"}
        ):
            return True
    words = [(cell, col) for cell, col in zip(first, columns) if kind(cell, decimal) == "text" and cell not in MISSING]
    if any(cell in col for cell, col in words):
        return False  # a word of the first row is a value of its column: data
    if any(len(set(col)) < len(col) for _, col in words):
        return True  # a word found nowhere below, over words that recur (a label's name over its classes)
    if not words:
        return False  # numbers of the kinds below: data
    raise MpinetError(f"{path}: cannot tell whether the first row is a header; set header: true or false")


def kind(cell: str, decimal: str = ".") -> str:
    """int, float or text (a missing marker is text here; callers leave markers out)."""
    if INTEGER.match(cell):
        return "int"
    return "float" if number(cell, decimal) is not None else "text"


def number(cell: str, decimal: str = ".") -> float | None:
    """A finite number in cell, a decimal comma read where the table uses one; None otherwise."""
    if decimal == "," and DECIMAL_COMMA.match(cell):
        cell = cell.replace(",", ".")
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


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


def read_arff(path: Path) -> Table:
    """OpenML's ARFF (dense): @attribute lines name the columns, @data rows are comma-separated
    cells (quotes respected, `?` missing). Numeric, integer, real, string and nominal ({a, b})
    attributes; a sparse row ({0 x, 3 y}) is refused."""
    text, encoding = decode_text(path)
    names, data_at = [], None
    lines = text.splitlines()
    for n, line in enumerate(lines, start=1):
        s = line.strip()
        if not s or s.startswith("%"):
            continue
        word = s.split(None, 1)[0].lower()
        if word == "@attribute":
            names.append(_arff_name(path, n, s))
        elif word == "@data":
            data_at = n
            break
    if data_at is None or not names:
        raise MpinetError(f"{path}: no @attribute lines or no @data section; expected an ARFF file")
    rows = []
    for n, cells in enumerate(csv.reader(io.StringIO("\n".join(lines[data_at:])), skipinitialspace=True), data_at + 1):
        if not cells or cells[0].lstrip().startswith("%") or not any(c.strip() for c in cells):
            continue
        if cells[0].lstrip().startswith("{"):
            raise MpinetError(f"{path}: row {n} is sparse ARFF ({{index value, ...}}); expected dense rows")
        rows.append((n, [c.strip().strip("'") for c in cells]))
    decided = {"format": "arff", "header": True, "decimal": ".", "found": []}
    return Table(names, rows, decided, encoding)


def _arff_name(path: Path, n: int, line: str) -> str:
    rest = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
    m = re.match(r"""^(?:'([^']*)'|"([^"]*)"|(\S+))""", rest)
    if not m:
        raise MpinetError(f"{path}: line {n}: an @attribute without a name")
    return next(g for g in m.groups() if g is not None)


def read_parquet(path: Path) -> Table:
    """A Parquet file through pandas (pyarrow): its columns as text cells, nulls missing."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except ImportError:
        raise MpinetError(f"{path}: reading Parquet needs pyarrow; pip install pyarrow (or mpinet[parquet])") from None
    except (OSError, ValueError) as e:
        raise MpinetError(f"{path}: cannot be read as Parquet ({type(e).__name__}: {e})") from None
    cells = frame.astype(object).where(frame.notna(), "").astype(str)
    rows = [(i, list(r)) for i, r in enumerate(cells.itertuples(index=False, name=None), start=1)]
    decided = {"format": "parquet", "header": True, "decimal": ".", "found": []}
    return Table([str(c) for c in frame.columns], rows, decided, "binary")


def _split(text: str, sep: str | None) -> list[list[str]]:
    if sep is None:
        return [line.split() for line in text.splitlines()]
    return list(csv.reader(io.StringIO(text, newline=""), delimiter=sep))
