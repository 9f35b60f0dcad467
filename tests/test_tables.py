"""Tables laid out as repositories publish them, made here: each is read with `auto` (or the one key
it needs), its decisions land in the summary, and one short training run learns from it. The
refusals say which key to set."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import env

from mpinet import MpinetError
from mpinet.datasets import dataset
from mpinet.datasets.csvdata import DEFAULTS, prepare_table
from mpinet.engine.comm import Comm
from mpinet.engine.loop import train
from mpinet.engine.options import Options

RNG = np.random.default_rng(4)
N = 60  # rows: 20 of each of three classes


def _rows():
    """(id, class word, four measurements) of N samples whose measurements tell the class apart."""
    y = np.repeat(np.arange(3), N // 3)
    RNG.shuffle(y)
    x = RNG.normal(size=(N, 4)) * 0.3 + y[:, None] * 1.5
    return [(842300 + 17 * i, ("benign", "malign", "unsure")[c], *np.round(v, 3)) for i, (c, v) in enumerate(zip(y, x))]


def _learns(out, epochs=40) -> float:
    """The final test accuracy of a short serial run on the prepared dataset."""
    opts = Options(algorithm="serial", hidden=(8,), epochs=epochs, batch_size=4, learning_rate=0.5, dtype="float64")
    result = train(dataset.load(out), opts, Comm(None))
    return result.metrics[-1]["test_accuracy"]


def _prepared(tmp_path, name: str, text: str, **reading) -> dict:
    path = tmp_path / name
    path.write_text(text)
    summary = prepare_table(path, tmp_path / "out", reading)
    assert _learns(tmp_path / "out") > 0.8
    return summary


def test_uci_headerless_with_an_id_first_and_the_class_word_second(tmp_path):
    """wdbc.data's layout: no header, an id column, the class as a word in the second column."""
    text = "".join(f"{i},{c},{a},{b},{d},{e}\n" for i, c, a, b, d, e in _rows())
    summary = _prepared(tmp_path, "wdbc.data", text, label_column=1)
    table = summary["table"]
    assert table["header"] is False and table["separator"] == "," and set(table["found"]) == {"separator", "header"}
    assert table["label_column"] == "column1" and table["id_columns"] == ["column0"]
    assert summary["features"] == ["column2", "column3", "column4", "column5"]
    assert summary["classes"] == ["benign", "malign", "unsure"]
    from mpinet.analysis.plots import how_read  # the class-counts figure says it, so a wrong guess shows

    assert how_read(table) == (
        "table read as delimited text; separator ',', no header; (separator and header found by auto); "
        "label 'column1'; ids left out: column0"
    )


def test_semicolons_with_decimal_commas_as_european_spreadsheets_export(tmp_path):
    def comma(v) -> str:
        return str(v).replace(".", ",")

    text = "id;class;a;b;c;d\n" + "".join(
        f"{i};{c};{';'.join(map(comma, (a, b, d, e)))}\n" for i, c, a, b, d, e in _rows()
    )
    table = _prepared(tmp_path, "export.csv", text, label_column="class")["table"]
    assert table["separator"] == ";" and table["decimal"] == "," and table["header"] is True
    assert table["id_columns"] == ["id"]


@pytest.mark.parametrize("name,sep,separator", [("data.tsv", "\t", "tab"), ("data.txt", "   ", "whitespace")])
def test_tab_and_blank_separated_tables(tmp_path, name, sep, separator):
    header = sep.join(["a", "b", "c", "d", "class"]) + "\n" if separator == "tab" else ""
    text = header + "".join(sep.join(map(str, [a, b, d, e, c])) + "\n" for _, c, a, b, d, e in _rows())
    table = _prepared(tmp_path, name, text)["table"]
    assert table["separator"] == separator and table["header"] is (separator == "tab")


def test_quoted_fields_holding_the_separator_and_a_label_of_words_in_the_middle(tmp_path):
    text = "name,a,class,b,c,d\n" + "".join(
        f'"sample {i}, batch 2",{a},{c},{b},{d},{e}\n' for i, c, a, b, d, e in _rows()
    )
    table = _prepared(tmp_path, "quoted.csv", text, label_column="class", id_column="name")["table"]
    assert table["separator"] == "," and table["label_column"] == "class" and table["id_columns"] == ["name"]


def test_a_header_of_numbers_years_is_still_found_to_be_a_header(tmp_path):
    text = "1990,1991,1992,1993,class\n" + "".join(f"{a},{b},{d},{e},{c}\n" for _, c, a, b, d, e in _rows())
    summary = _prepared(tmp_path, "years.csv", text)
    assert summary["table"]["header"] is True and summary["features"] == ["1990", "1991", "1992", "1993"]


def test_missing_values_are_refused_naming_row_and_column_or_dropped_and_counted(tmp_path):
    rows = _rows()
    lines = [f"{a},{b},{d},{e},{c}\n" for _, c, a, b, d, e in rows]
    lines[4] = lines[4].replace(str(rows[4][3]), "?", 1)  # UCI's marker
    lines[9] = "NA," + lines[9].split(",", 1)[1]
    lines[12] = lines[12].rsplit(",", 1)[0] + ",\n"  # no label
    path = tmp_path / "gaps.data"
    path.write_text("".join(lines))
    with pytest.raises(
        MpinetError, match=r"gaps\.data: row 5: column 'column1' is missing \('\?'\); set missing: drop_rows"
    ):
        prepare_table(path, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    summary = prepare_table(path, tmp_path / "out", {"missing": "drop_rows"})
    dropped = summary["table"]["rows_dropped_missing"]
    assert set(dropped) == {"train", "test", "unlabelled"} and summary["table"]["missing"] == "drop_rows"
    assert dropped["unlabelled"] == 1 and dropped["train"] + dropped["test"] == 2
    assert sum(sum(c.values()) for c in summary["counts"].values()) == N - 3
    for split in ("train", "test"):
        assert not np.isnan(np.load(tmp_path / "out" / f"{split}_x.npy")).any()
        assert len(np.load(tmp_path / "out" / f"{split}_y.npy")) == sum(summary["counts"][split].values())
    from mpinet.analysis.plots import how_read

    assert "3 rows with missing values dropped (" in how_read(summary["table"])
    assert _learns(tmp_path / "out") > 0.8


def test_a_class_whose_every_row_has_a_missing_value_is_refused_by_name(tmp_path):
    lines = ["a,b,label\n"] + [f"{i},{i % 5},{'x' if i % 2 else 'y'}\n" for i in range(20)]
    lines += [f"{i},?,z\n" for i in range(6)]
    path = tmp_path / "gone.csv"
    path.write_text("".join(lines))
    with pytest.raises(MpinetError, match=r"gone\.csv: every training row of class 'z' has a missing value"):
        prepare_table(path, tmp_path / "out", {"missing": "drop_rows"})
    assert not (tmp_path / "out").exists()


def test_openml_arff_with_a_nominal_class(tmp_path):
    head = "% from OpenML\n@relation 'samples'\n@attribute a numeric\n@attribute 'b b' real\n"
    head += "@attribute c numeric\n@attribute d integer\n@attribute class {benign,malign,unsure}\n\n@data\n"
    text = head + "".join(f"{a},{b},{d},{round(e)},'{c}'\n" for _, c, a, b, d, e in _rows())
    summary = _prepared(tmp_path, "samples.arff", text)
    assert summary["features"] == ["a", "b b", "c", "d"] and summary["table"]["format"] == "arff"
    assert summary["classes"] == ["benign", "malign", "unsure"]


def test_parquet_through_pandas(tmp_path):
    frame = pd.DataFrame(_rows(), columns=["id", "class", "a", "b", "c", "d"])
    frame.to_parquet(tmp_path / "samples.parquet")
    summary = prepare_table(tmp_path / "samples.parquet", tmp_path / "out", {"label_column": "class"})
    assert summary["table"]["format"] == "parquet" and summary["table"]["id_columns"] == ["id"]
    assert _learns(tmp_path / "out") > 0.8


@pytest.mark.parametrize(
    "text,reading,message",
    [
        ("x\na,b\nc;d;e\np q r s\n", {}, "cannot tell the columns' separator .* set separator: to ','"),
        ("a,b\nx,y\nz,w\n", {}, "cannot tell whether the first row is a header; set header: true or false"),
        ("a,b,c\n1,2,x\n", {"label_column": 7}, "label_column: column 7 is out of range"),
        ("a,b,c\n1,2,x\n", {"missing": "impute"}, "missing: unknown 'impute'; expected refuse or drop_rows"),
        ("a,b,c\n1,2,x\n", {"separator": "|"}, "separator: unknown '|'"),
    ],
)
def test_tables_auto_cannot_read_are_refused_naming_the_key_to_set(tmp_path, text, reading, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(MpinetError, match=message) as e:
        prepare_table(path, tmp_path / "out", reading)
    assert "\n" not in str(e.value)


def test_the_prepare_command_runs_as_its_help_says_with_the_schema_s_defaults(tmp_path):
    """`python -m mpinet.datacli prepare RAW OUT --format csv --options '{"label_column": "4"}'`: the
    keys not given take the schema's defaults (DEFAULTS, tied to the schema here)."""
    import yaml
    from conftest import REPO

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    keys = schema["properties"]["datasets"]["additionalProperties"]["properties"]
    from mpinet.datasets import images

    for defaults in (DEFAULTS, images.DEFAULTS):  # each format's defaults are the schema's
        assert defaults == {k: keys[k]["default"] for k in defaults}
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "t.data").write_text("".join(f"{a},{b},{d},{e},{c}\n" for _, c, a, b, d, e in _rows()))
    cmd = [sys.executable, "-m", "mpinet.datacli", "prepare", str(raw), str(tmp_path / "out"), "--format", "csv"]
    p = subprocess.run(
        [*cmd, "--options", json.dumps({"label_column": "4"})], capture_output=True, text=True, env=env()
    )
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["test_fraction"] == 0.3 and summary["table"]["label_column"] == "column4"
