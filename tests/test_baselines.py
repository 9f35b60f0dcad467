"""Both scaling axes, the base case, contention and the headline's choice (mpinet.analysis.baselines),
and a front page that renders for every study shape."""

import io
import math

import numpy as np
import pandas as pd
import pytest
from docutils.core import publish_string

from mpinet import MpinetError
from mpinet.analysis.aggregate import summarize_runs
from mpinet.analysis.baselines import cpu_contention, reason_kinds
from mpinet.analysis.costmodel import held_out_error, scored
from mpinet.analysis.intervals import unsettled
from mpinet.analysis.summary import headline_rst
from mpinet.study.experiments import DEFAULTS, expand_sweeps

BASE = dict(DEFAULTS, dataset="iris", epochs=3, hidden="30-20", trained_samples=120, isolation="one-at-a-time", cores=8)


def _run(algorithm, ranks, batch, epoch_s, seed=1, cpu_share=1.0, repeat=1):
    """A run's epoch rows: every epoch takes epoch_s (the first a warm-up twice as long)."""
    name = f"{algorithm}-{ranks}-b{batch}-s{seed}-r{repeat}"
    return [
        dict(
            BASE,
            algorithm=algorithm,
            ranks=ranks,
            batch_size=batch,
            seed=seed,
            repeat=repeat,
            run_dir=name,
            epoch=e,
            train_loss=1.0,
            train_accuracy=0.9,
            test_loss=1.0,
            test_accuracy=0.9,
            time_s=epoch_s * (2 if e == 1 else 1),
            compute_s=epoch_s,
            comm_s=0.0,
            eval_s=0.01,
            bytes_sent=0,
            cpu_share=cpu_share,
        )
        for e in (1, 2, 3)
    ]


def _table(*runs) -> pd.DataFrame:
    return summarize_runs(pd.DataFrame([row for run in runs for row in run]), 0.9).set_index("run_dir")


def test_both_axes_divide_by_their_own_serial_base_and_the_best_serial_run_by_time_per_sample():
    runs = _table(
        _run("serial", 1, 4, 2.4),  # 20 ms a sample: batch 4 is slow
        _run("serial", 1, 8, 1.2),  # 10 ms: the best serial run
        _run("serial", 1, 16, 1.8),
        _run("allreduce", 2, 4, 0.8),  # global batch 8
        _run("allreduce", 4, 4, 0.6),  # global batch 16
    )
    two, four = runs.loc["allreduce-2-b4-s1-r1"], runs.loc["allreduce-4-b4-s1-r1"]
    assert (two["global_batch"], four["global_batch"]) == (8, 16)
    assert two["speedup"] == pytest.approx(3.0) and two["serial_s_per_sample"] == pytest.approx(0.02)
    assert two["global_speedup"] == pytest.approx(1.5) and two["global_efficiency"] == pytest.approx(0.75)
    assert two["global_serial_s_per_sample"] == pytest.approx(0.01)
    assert four["global_speedup"] == pytest.approx(3.0)
    for run in (two, four):
        assert run["best_serial_batch"] == 8 and run["best_serial_s_per_sample"] == pytest.approx(0.01)
    assert two["best_serial_speedup"] == pytest.approx(1.5) and four["best_serial_speedup"] == pytest.approx(2.0)
    # one launch each: the intervals hold the point (epochs all alike)
    assert two["global_speedup_ci_low"] == pytest.approx(1.5) == two["best_serial_speedup_ci_high"]
    # the 2-rank run is superlinear on the slow base (efficiency 1.5): flagged, not quoted
    assert "superlinear" in two["speedup_note"] and four["speedup_note"] == ""  # the 4-rank run is quoted


def test_a_weak_scaling_base_s_time_per_sample_is_of_the_samples_the_base_trained():
    """samples_per_rank 40: serial trains 40 samples in 0.4 s an epoch (10 ms a sample), 2 ranks train 80 in
    0.5 s, 4 ranks 160 in 0.8 s. The base's 10 ms a sample is the same beside every run (dividing its
    epoch by a P-rank run's samples would say 5 and 2.5 ms)."""

    def weak(algorithm, ranks, epoch_s):
        return [dict(r, samples_per_rank=40, trained_samples=40 * ranks) for r in _run(algorithm, ranks, 4, epoch_s)]

    runs = _table(weak("serial", 1, 0.4), weak("allreduce", 2, 0.5), weak("allreduce", 4, 0.8))
    serial, two, four = (runs.loc[f"{a}-{p}-b4-s1-r1"] for a, p in [("serial", 1), ("allreduce", 2), ("allreduce", 4)])
    for run in (serial, two, four):
        assert run["serial_s_per_sample"] == pytest.approx(0.4 / 40)
    assert two["s_per_sample"] == pytest.approx(0.5 / 80) and four["s_per_sample"] == pytest.approx(0.8 / 160)
    assert two["weak_efficiency"] == pytest.approx(0.4 / 0.5) and four["weak_efficiency"] == pytest.approx(0.4 / 0.8)
    # weak runs have no fixed-global-batch base and no best serial run (their training sets differ)
    for column in ("speedup", "global_serial_s_per_sample", "best_serial_s_per_sample"):
        assert math.isnan(two[column]) and math.isnan(four[column])


def test_a_base_at_another_engine_or_seed_is_not_a_base():
    runs = _table(_run("serial", 1, 8, 1.2, seed=2), _run("allreduce", 2, 4, 0.8))
    ar = runs.loc["allreduce-2-b4-s1-r1"]
    assert math.isnan(ar["speedup"]) and math.isnan(ar["global_speedup"])  # seed 1 has no serial run
    assert ar["best_serial_speedup"] == pytest.approx(1.5)  # the best serial run: any seed, any batch


@pytest.mark.parametrize(
    "share, expected", [(1.0, "clean"), (0.95, "clean"), (0.6, "contended"), (float("nan"), "unknown")]
)
def test_contention_is_the_slowest_rank_s_share_of_a_core(share, expected):
    assert cpu_contention(pd.Series([share])).tolist() == [expected]


def test_contended_runs_bases_and_one_rank_mpi_runs_are_never_quoted():
    runs = _table(
        _run("serial", 1, 4, 2.0, cpu_share=0.5),
        _run("allreduce", 1, 4, 2.1),
        _run("allreduce", 2, 4, 1.2, cpu_share=0.6),
        _run("paramserver", 3, 4, 1.0),
    )
    assert runs.loc["serial-1-b4-s1-r1", "contention"] == "contended"
    assert "an MPI run on 1 rank" in runs.loc["allreduce-1-b4-s1-r1", "speedup_note"]
    assert "contended" in runs.loc["allreduce-2-b4-s1-r1", "speedup_note"].split("; ")
    assert "its serial base contended" in runs.loc["paramserver-3-b4-s1-r1", "speedup_note"]
    # a runs.csv from before CPU time was kept: unknown, not contended
    old = _table(
        _run("serial", 1, 4, 2.0, cpu_share=float("nan")), _run("allreduce", 2, 4, 1.2, cpu_share=float("nan"))
    )
    assert set(old["contention"]) == {"unknown"} and old["speedup_note"].fillna("").eq("").all()


def test_launches_that_disagree_beyond_their_own_intervals_are_unsettled():
    rng = np.random.default_rng(0)
    steady = [1.0 + 0.01 * rng.standard_normal(20), 1.0 + 0.01 * rng.standard_normal(20)]
    assert not unsettled(steady) and not unsettled(steady[:1])
    assert unsettled([steady[0], steady[1] * 1.3])
    runs = _table(_run("serial", 1, 4, 2.0), _run("serial", 1, 4, 2.6, repeat=2))
    assert runs["unsettled"].all() and (runs["ci_launches"] == 2).all()


def test_a_global_batch_sweep_gives_each_rank_count_its_share_and_refuses_one_that_does_not_divide_it():
    sweep = {"dataset": "iris", "algorithm": ["serial", "allreduce", "paramserver"], "ranks": [1, 2, 3]}
    df = expand_sweeps([{**sweep, "global_batch": 12}], {"iris": {}})
    got = {(a, r): b for a, r, b in zip(df["algorithm"], df["ranks"], df["batch_size"])}
    assert got == {
        ("serial", 1): 12,
        ("allreduce", 1): 12,
        ("allreduce", 2): 6,
        ("allreduce", 3): 4,
        ("paramserver", 2): 12,  # one worker
        ("paramserver", 3): 6,  # two workers
    }
    with pytest.raises(MpinetError, match=r"experiments\[0\]: global_batch 12 on 5 ranks of allreduce"):
        expand_sweeps([{**sweep, "algorithm": "allreduce", "ranks": [2, 5], "global_batch": 12}], {"iris": {}})
    with pytest.raises(MpinetError, match=r"experiments\[0\]: global_batch and batch_size exclude each other"):
        expand_sweeps([{**sweep, "global_batch": 12, "batch_size": 4}], {"iris": {}})


def _render(page: str) -> str:
    """The page as the report renders it (docutils), and every system message docutils reports."""
    warnings = io.StringIO()
    html = publish_string(
        page, writer="html", settings_overrides={"report_level": 1, "halt_level": 5, "warning_stream": warnings}
    ).decode()
    return warnings.getvalue() + ("System Message" if "System Message" in html else "")


SHAPES = {
    "no serial base": [_run("allreduce", 2, 4, 1.0)],
    "one rank count": [_run("serial", 1, 4, 2.0), _run("allreduce", 1, 4, 2.1)],
    "one design": [_run("serial", 1, 4, 2.0)],
    "auto only": [_run("auto", 2, 4, 1.0), _run("auto", 4, 4, 0.6)],
    "a failed experiment (only its serial base finished)": [_run("serial", 1, 4, 2.0), _run("serial", 1, 8, 1.0)],
    "all contended": [_run("serial", 1, 4, 2.0, cpu_share=0.4), _run("allreduce", 2, 4, 1.0, cpu_share=0.4)],
    "both axes": [_run("serial", 1, 4, 2.4), _run("serial", 1, 8, 1.2), _run("allreduce", 2, 4, 1.4)],
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_front_page_renders_without_a_docutils_message_for_every_study_shape(shape, tmp_path):
    _table(*SHAPES[shape]).reset_index().to_csv(tmp_path / "runs.csv", index=False)
    page = headline_rst(tmp_path / "runs.csv", "A description.", "s")
    assert _render(page) == ""
    if shape == "both axes":
        assert "batch per rank fixed" in page and "global batch fixed" in page
    elif shape != "auto only":
        assert "No speedup to quote" in page
    # nothing quotable but speedups measured: the best left-out one is shown, marked, with its reasons
    shown = {
        "all contended": ("2.00", "contended; its serial base contended"),
        "one rank count": ("0.95", "an MPI run"),
    }
    if shape in shown:
        value, why = shown[shape]
        table = page.split("**Not quotable**")[1]
        assert f"- {value} [" in table and f"- {why}" in table
    else:
        assert "**Not quotable**" not in page


def test_the_front_page_counts_left_out_runs_by_the_kind_of_reason_not_its_value(tmp_path):
    runs = _table(
        _run("serial", 1, 4, 2.4),
        _run("allreduce", 2, 4, 0.8),  # efficiency 1.5
        _run("allreduce", 3, 4, 0.6),  # 1.33
        _run("allreduce", 2, 4, 0.9, cpu_share=0.5, repeat=2),  # 1.33, and contended
    )
    assert reason_kinds(runs.loc["allreduce-2-b4-s1-r2", "speedup_note"]) == ["contended", "superlinear"]
    runs.reset_index().to_csv(tmp_path / "runs.csv", index=False)
    page = headline_rst(tmp_path / "runs.csv", "A description.", "s")
    left = next(line for line in page.splitlines() if line.startswith("**Left out"))
    assert "3 run(s)" in left and "superlinear (3)" in left and "contended (1)" in left
    assert left.count("superlinear") == 1 and "add up to more than 3" in left  # 4 reasons, 3 runs
    assert _render(page) == ""


def test_a_fixed_global_batch_run_without_a_base_at_its_batch_per_rank_is_quoted_on_its_axis(tmp_path):
    runs = _table(_run("serial", 1, 12, 1.2), _run("allreduce", 2, 6, 0.75), _run("allreduce", 3, 4, 0.5))
    assert runs.loc[runs["ranks"] > 1, "speedup"].isna().all()  # no serial at batch 6 or 4
    runs.reset_index().to_csv(tmp_path / "runs.csv", index=False)
    page = headline_rst(tmp_path / "runs.csv", "A description.", "s")
    assert "No speedup to quote" not in page and "global batch fixed" in page and "2.40" in page  # 1.2 / 0.5


def test_an_experiment_s_launches_are_pooled_as_its_base_s_so_serial_over_itself_is_one(tmp_path):
    from mpinet.analysis.summary import summary_table

    serial = [_run("serial", 1, 4, t, repeat=r) for r, t in ((1, 4.0), (2, 4.1), (3, 5.8))]
    allreduce = [_run("allreduce", 2, 4, t, repeat=r) for r, t in ((1, 3.5), (2, 3.4), (3, 2.8))]
    runs = _table(*serial, *allreduce)
    base = (4.0 + 4.1 + 5.8) / 3  # the mean of the launches' medians, both sides
    assert runs["serial_epoch_s"].to_numpy() == pytest.approx([base] * 6)
    is_serial = runs["algorithm"] == "serial"
    assert runs.loc[is_serial, ["speedup", "global_speedup", "best_serial_speedup"]].to_numpy() == pytest.approx(1.0)
    assert runs.loc[is_serial, ["speedup_ci_low", "speedup_ci_high"]].to_numpy() == pytest.approx(1.0)
    assert runs.loc[~is_serial, "speedup"].to_numpy() == pytest.approx([base / ((3.5 + 3.4 + 2.8) / 3)] * 3)
    runs.reset_index().to_csv(tmp_path / "runs.csv", index=False)
    row = next(line.split() for line in summary_table(tmp_path / "runs.csv").splitlines() if " serial " in line)
    assert "1.0" in row and "[1.00, 1.00]" in " ".join(row)


def test_a_reference_check_leaves_out_contended_and_one_rank_runs_and_says_why():
    from mpinet.analysis.references import evaluate

    runs = _table(
        _run("serial", 1, 4, 2.0),
        _run("allreduce", 1, 4, 2.1),
        _run("allreduce", 2, 4, 1.2, cpu_share=0.5),
        _run("allreduce", 2, 4, 1.1, repeat=2),
    ).reset_index()
    checked = evaluate([{"algorithm": "allreduce", "speedup": 1.0}], runs).set_index("configuration")
    one = checked.loc["iris allreduce 1 ranks batch_size=4"]
    assert one["status"] == "left out" and "an MPI run on 1 rank" in one["note"]
    two = checked.loc["iris allreduce 2 ranks batch_size=4"]
    assert two["note"].startswith("1 of 2 run(s) left out: contended") and two["launches"] == 1
    assert two["measured"] == pytest.approx(2.0 / 1.1)  # the clean launch alone


def test_compare_names_the_seed_and_refuses_two_studies_with_nothing_in_common(tmp_path):
    from mpinet.analysis.compare import compare

    a = _table(_run("serial", 1, 4, 2.0), _run("allreduce", 2, 4, 1.2)).reset_index()
    b = _table(_run("serial", 1, 4, 2.0, seed=2), _run("allreduce", 2, 4, 1.0, seed=2)).reset_index()
    with pytest.raises(MpinetError, match="no experiment in common"):
        compare(a, b)
    table = compare(a, a.assign(median_epoch_s=a["median_epoch_s"] * 1.1))
    assert table["experiment"].str.endswith("seed 1").all()  # make status's labels
    assert table["base_s_per_sample_a"].iloc[0] == pytest.approx(2.0 / 120)


def test_an_auto_run_is_charged_its_experiment_s_trials_and_grouped_by_the_design_it_trained():
    auto = [dict(r, trained_as="node", auto_trials_s=0.6) for r in _run("auto", 2, 4, 1.0)]
    other = [dict(r, trained_as="allreduce", auto_trials_s=0.6) for r in _run("auto", 2, 4, 1.0, repeat=2)]
    runs = _table(_run("serial", 1, 4, 2.0), auto, other)
    run = runs.loc["auto-2-b4-s1-r1"]
    assert run["median_epoch_s"] == 1.0 and run["charged_epoch_s"] == pytest.approx(1.2)  # 0.6 s over 3 epochs
    assert run["speedup"] == pytest.approx(2.0 / 1.2) and run["speedup_ci_high"] == pytest.approx(2.0 / 1.2)
    assert (runs.loc[["auto-2-b4-s1-r1", "auto-2-b4-s1-r2"], "ci_launches"] == 1).all()  # two designs: apart


def test_the_front_page_scores_the_model_on_runs_it_was_not_fitted_on_with_a_core_each(tmp_path):
    """costmodel.held_out_error: the 1-rank runs are the model's input and a contended or
    oversubscribed run is priced as if it had a core per rank, so neither is scored; the line says how
    many were left out."""
    runs = _table(
        _run("serial", 1, 4, 2.0),
        _run("allreduce", 2, 4, 1.2),
        _run("allreduce", 2, 4, 1.0, repeat=2),
        _run("allreduce", 2, 4, 2.0, cpu_share=0.4, repeat=3),  # contended
    ).reset_index()
    runs["model_error"] = [float("nan"), -0.2, 0.1, -0.6]
    assert list(scored(runs)) == [False, True, True, False]
    assert held_out_error(runs) == {
        "cells": 2,
        "median_abs": pytest.approx(0.15),
        "low": -0.2,
        "high": 0.1,
        "left_out": 1,
        "reasons": {"contended": 1},
        "unpriced": 0,
    }

    def line(table) -> str:
        table.to_csv(tmp_path / "runs.csv", index=False)
        page = headline_rst(tmp_path / "runs.csv", "A description.", "s")
        assert _render(page) == ""
        return next(line for line in page.splitlines() if line.startswith("**Cost model**"))

    text = line(runs)
    assert "**15 %** over the 2 runs" in text and "from -20 to +10 %" in text
    assert "1 more on several ranks is not scored (1 contended)" in text
    one = line(runs.assign(model_error=[float("nan"), -0.2, float("nan"), -0.6]))  # one scored, one unpriced
    assert "absolute error **20 %** on the one run on several ranks" in one
    assert "− 1: -20 %;" in one and "from" not in one
    assert "1 on several ranks could not be priced: no 1-rank run" in one
    none = line(runs.assign(model_error=float("nan")))  # no 1-rank run of theirs: nothing priced
    assert none.startswith("**Cost model**: not scored. 3 on several ranks could not be priced")
    assert line(runs[runs["ranks"] == 1]) == "**Cost model**: not scored: no run on several ranks."
