"""make check (mpinet.analysis.references): references select by global_batch too and check every measure
with an interval; left-out rows show their note and are not counted as checked; every error line names the
config file."""

import pandas as pd
import pytest
from test_baselines import _run, _table

from mpinet.analysis.references import evaluate, main

RUNS = [
    _run("serial", 1, 4, 2.0),
    _run("serial", 1, 8, 1.2),  # the best serial run: 10 ms a sample
    _run("allreduce", 1, 4, 2.1),  # an MPI run on 1 rank: left out
    _run("allreduce", 2, 4, 1.1),  # speedup 2.0 / 1.1, global batch 8: global speedup 1.2 / 1.1
]


@pytest.fixture
def runs_csv(tmp_path):
    path = tmp_path / "runs.csv"
    _table(*RUNS).reset_index().to_csv(path, index=False)
    return path


def test_a_reference_selects_by_global_batch_and_checks_the_global_and_best_serial_speedups(runs_csv):
    refs = [
        {"global_batch": 8, "algorithm": "allreduce", "global_speedup": 1.2 / 1.1},
        {"algorithm": "allreduce", "ranks": 2, "best_serial_speedup": 3.0},
    ]
    checked = evaluate(refs, pd.read_csv(runs_csv))
    assert checked["configuration"].tolist() == ["iris allreduce 2 ranks batch_size=4"] * 2
    assert checked["measured"].tolist() == pytest.approx([1.2 / 1.1, 1.2 / 1.1])  # 10 ms over 1.1 s / 120
    assert checked["status"].tolist() == ["ok", "breach"]


def test_make_check_shows_the_note_counts_left_out_rows_apart_and_names_the_config(tmp_path, runs_csv, capsys):
    config = tmp_path / "study.yaml"
    config.write_text(
        "references:\n"
        "  - {algorithm: allreduce, speedup: 1.8}\n"  # 1 rank: left out; 2 ranks: ok
        "  - {algorithm: allreduce, global_batch: 8, global_speedup: 3.0}\n"  # a breach
    )
    assert main([str(config), "--runs", str(runs_csv)]) == 1
    out, err = capsys.readouterr()
    header, *rows = out.strip().splitlines()[:4]
    assert header.split()[-1] == "note" and "an MPI run on 1 rank" in rows[0]
    last = out.strip().splitlines()[-1]
    assert last.startswith("2 checked: 1 breached, 1 within their band, 0 without an interval; 1 left out")
    assert err.splitlines() and all(line.startswith(f"{config}: reference 1 breached") for line in err.splitlines())

    config.write_text("references:\n  - {algorithm: allreduce, ranks: 5, speedup: 1.8}\n")
    assert main([str(config), "--runs", str(runs_csv)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{config}: references[0]: selects no experiment of the study (algorithm=allreduce")
    (tmp_path / "empty.csv").write_text("")
    config.write_text("references:\n  - {algorithm: allreduce, speedup: 1.8}\n")
    assert main([str(config), "--runs", str(tmp_path / "empty.csv")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{config}: {tmp_path / 'empty.csv'}: unreadable")
