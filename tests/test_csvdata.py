import json

import numpy as np
import pytest
from conftest import REPO

from mpinet import MpinetError
from mpinet.datasets import dataset
from mpinet.datasets.csvdata import prepare_table, read_table
from mpinet.datasets.split import stratified_split

IRIS = REPO / "src" / "mpinet" / "data" / "iris.csv"


def _uci_iris(tmp_path):
    """UCI's headerless iris.data form of the shipped table."""
    rows = IRIS.read_text().splitlines()[1:]
    path = tmp_path / "iris.data"
    path.write_text("".join(",".join(r.split(",")[1:]) + "\n" for r in rows) + "\n")
    return path


def _original_form(tmp_path):
    """The header of Kaggle's saurabh00007/iriscsv (and the original project's file), rows repeated 4x."""
    rows = IRIS.read_text().splitlines()[1:]
    body = ["{},{},{},{},{}".format(*r.split(",")[1:5], r.split(",")[5].replace("Iris-", "").title()) for r in rows]
    path = tmp_path / "iris.csv"
    header = '"sepal.length","sepal.width","petal.length","petal.width","variety"\n'
    path.write_text(header + "\n".join(body * 4) + "\n")
    return path


def test_kaggle_iris_csv_drops_the_id_column():
    x, labels, names = read_table(IRIS)
    assert x.shape == (150, 4)
    assert names == ["SepalLengthCm", "SepalWidthCm", "PetalLengthCm", "PetalWidthCm"]
    assert sorted(set(labels)) == ["Iris-setosa", "Iris-versicolor", "Iris-virginica"]


def test_headerless_uci_iris_data_loads_the_same_values(tmp_path):
    x_uci, labels_uci, names = read_table(_uci_iris(tmp_path))
    x, labels, _ = read_table(IRIS)
    assert np.array_equal(x_uci, x) and labels_uci == labels
    assert names == [f"column{i}" for i in range(4)]


def test_named_label_column_in_the_middle(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,kind,b\n1,x,2\n3,y,4\n5,x,6\n")
    x, labels, names = read_table(path, label_column="kind")
    assert names == ["a", "b"] and labels == ["x", "y", "x"]
    assert x.tolist() == [[1, 2], [3, 4], [5, 6]]


def test_duplicates_are_reported_and_dropped_before_splitting(tmp_path):
    out = tmp_path / "ds"
    summary = prepare_table(_original_form(tmp_path), out)
    canonical = prepare_table(IRIS, tmp_path / "canonical")
    assert summary["duplicates_dropped"] == 600 - 147  # four copies of 150 rows, 3 of them exact repeats
    assert canonical["duplicates_dropped"] == 3
    a = dataset.load(out)
    assert len(a.train_y) + len(a.test_y) == 147
    train_rows = {tuple(r) for r in np.asarray(a.train_x).round(5).tolist()}
    test_rows = {tuple(r) for r in np.asarray(a.test_x).round(5).tolist()}
    assert not train_rows & test_rows  # nothing leaks from training into test
    assert a.classes == ["Setosa", "Versicolor", "Virginica"]


def test_split_is_stratified_seeded_and_standardized_on_train_only(tmp_path):
    summary = prepare_table(IRIS, tmp_path / "a", test_fraction=0.3, seed=5)
    prepare_table(IRIS, tmp_path / "b", test_fraction=0.3, seed=5)
    a, b = dataset.load(tmp_path / "a"), dataset.load(tmp_path / "b")
    assert np.array_equal(a.train_x, b.train_x)
    assert all(n in (14, 15) for n in summary["counts"]["test"].values())
    assert np.allclose(np.asarray(a.train_x).mean(axis=0), 0, atol=1e-6)
    assert np.allclose(np.asarray(a.train_x).std(axis=0), 1, atol=1e-5)
    assert not np.allclose(np.asarray(a.test_x).mean(axis=0), 0, atol=1e-3)
    assert a.train_x.dtype == np.float32 and a.train_y.dtype == np.int64
    assert json.loads((tmp_path / "a" / "classes.json").read_text()) == a.classes


def test_stratified_split_keeps_every_class_in_both_splits():
    y = np.array([0] * 10 + [1] * 3 + [2] * 2)
    train, test = stratified_split(y, 0.2, seed=0)
    assert set(y[train]) == set(y[test]) == {0, 1, 2}
    assert len(train) + len(test) == 15 and not set(train) & set(test)


@pytest.mark.parametrize(
    "text,message",
    [
        ("a,,label\n1,2,x\n3,4,y\n", r"t\.csv: header column 2 has no name"),
        ("a,a,label\n1,2,x\n3,4,y\n", r"t\.csv: header names column\(s\) a more than once"),
        ("a,b,label\n1,2,x\n3,oops,y\n", r"t\.csv: row 3, column 'b': 'oops' is not a number"),
        ("a,b,label\n1,2,x\n3,4,\n", r"t\.csv: row 3: the label column 'label' is empty"),
        ("a,b,label\n1,2,x\n3,4\n", r"t\.csv: row 3 has 2 cells, expected 3"),
        ("a,b,label\n1,2,x\n3,4,x\n", r"t\.csv: only one class \('x'\)"),
        ("", r"t\.csv: empty file"),
    ],
)
def test_bad_tables_give_one_line_errors_naming_file_row_and_column(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(MpinetError, match=message) as e:
        prepare_table(path, tmp_path / "out")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.partial").exists()


def test_unknown_label_column_names_the_header(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,label\n1,2,x\n3,4,y\n")
    with pytest.raises(MpinetError, match="label column 'species' is not in the header"):
        read_table(path, label_column="species")


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "cp1252"])
def test_csv_encodings_spreadsheets_write_read_the_same(tmp_path, encoding):
    text = IRIS.read_text().replace("Iris-setosa", "Iris-sétosa")  # one non-ASCII class name
    path = tmp_path / "iris.csv"
    path.write_bytes(text.replace("\n", "\r\n").encode(encoding))  # Windows line ends too
    x, labels, names = read_table(path)
    assert "Iris-sétosa" in labels and len(labels) == 150
    summary = prepare_table(path, tmp_path / "out")
    assert summary["encoding"] == {"utf-8-sig": "utf-8"}.get(encoding, encoding)


def test_a_binary_file_named_csv_is_refused(tmp_path):
    path = tmp_path / "iris.csv"
    path.write_bytes(b"PK\x03\x04\x00\x00binary")
    with pytest.raises(MpinetError, match="iris.csv: holds NUL bytes; expected a text file"):
        read_table(path)


def test_a_number_that_overflows_to_infinity_is_not_a_number(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,label\n1,2,x\n1e400,2,y\n3,4,y\n")
    with pytest.raises(MpinetError, match="row 3, column 'a': '1e400' is not a number"):
        read_table(path)
