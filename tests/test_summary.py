"""The summary printed at the end of a run (mpinet.analysis.summary.summary_table)."""

from test_baselines import _run, _table

from mpinet.analysis.summary import summary_table


def _summary(tmp_path, *runs) -> list[list[str]]:
    _table(*runs).reset_index().to_csv(tmp_path / "runs.csv", index=False)
    text = summary_table(tmp_path / "runs.csv")
    assert "nan" not in text.lower()  # a missing value is '-'
    return [line.split() for line in text.splitlines()]


def test_the_summary_shows_missing_values_as_a_dash_and_the_global_batch_of_a_fixed_global_batch_study(tmp_path):
    no_base = [dict(r, dataset="other", run_dir="no-base") for r in _run("allreduce", 2, 4, 1.0)]
    head, *rows = _summary(
        tmp_path, _run("serial", 1, 4, 2.0), _run("serial", 1, 8, 1.2), _run("allreduce", 2, 4, 1.1), no_base
    )
    cells = {tuple(r[:4]): dict(zip(head, r)) for r in rows if r[0] in ("iris", "other")}  # dataset to ranks
    assert cells[("iris", "4", "allreduce", "2")]["global_batch"] == "8"  # 2 ranks x 4 share serial's batch 8
    assert cells[("iris", "4", "serial", "1")]["global_batch"] == "4"
    other = cells[("other", "4", "allreduce", "2")]  # no serial run at all: every ratio and the base missing
    assert other["speedup"] == other["speedup_95ci"] == other["base_us"] == other["global_speedup"] == "-"


def test_a_study_without_a_fixed_global_batch_has_no_global_batch_column(tmp_path):
    head, *_ = _summary(tmp_path, _run("serial", 1, 4, 2.0), _run("allreduce", 2, 4, 1.1))
    assert "global_batch" not in head and "base_us" in head


def test_a_configuration_s_runs_on_one_node_and_on_two_are_two_rows(tmp_path):
    two = [dict(r, nodes=2, seed=2, run_dir="two-nodes") for r in _run("allreduce", 2, 4, 1.5)]
    one = [[dict(r, nodes=1) for r in run] for run in (_run("serial", 1, 4, 2.0), _run("allreduce", 2, 4, 1.1))]
    head, *rows = _summary(tmp_path, *one, two)
    assert "nodes" in head
    allreduce = [dict(zip(head, r)) for r in rows if "allreduce" in r]
    assert sorted(r["nodes"] for r in allreduce) == ["1", "2"] and all(r["runs"] == "1" for r in allreduce)
    head, *_ = _summary(tmp_path, _run("serial", 1, 4, 2.0), _run("allreduce", 2, 4, 1.1))
    assert "nodes" not in head  # one placement: no column


def test_auto_s_runs_are_shown_as_the_design_they_trained(tmp_path):
    """Repeats of an auto experiment share one choice (auto_choice.json); the summary names it, as the
    report and the figures do ("auto → allreduce"), and keeps it apart from the design run by hand."""
    auto = [dict(r, trained_as="allreduce") for r in _run("auto", 2, 4, 1.0)]
    by_hand = [dict(r, trained_as="allreduce") for r in _run("allreduce", 2, 4, 1.1)]
    serial = [dict(r, trained_as="serial") for r in _run("serial", 1, 4, 2.0)]
    _table(serial, auto, by_hand).reset_index().to_csv(tmp_path / "runs.csv", index=False)
    lines = summary_table(tmp_path / "runs.csv").splitlines()
    assert "design" in lines[0].split()
    assert sum("auto → allreduce" in line for line in lines) == 1
    assert sum(" allreduce " in line and "auto" not in line for line in lines) == 1


def test_the_one_launch_note_is_printed_only_under_a_starred_interval(tmp_path):
    head, *rows = _summary(tmp_path, _run("serial", 1, 4, 2.0), _run("allreduce", 2, 4, 1.1))
    text = summary_table(tmp_path / "runs.csv")
    assert ("*: one launch" in text) == any(cell.endswith("*") for row in rows for cell in row)
