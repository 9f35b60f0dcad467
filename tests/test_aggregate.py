import math

import pandas as pd
import pytest

from mpinet.analysis.aggregate import summarize_runs, summarize_seeds
from mpinet.study.experiments import DEFAULTS

# every experiment parameter at its default; each run sets algorithm, ranks and seed
BASE = dict(DEFAULTS, dataset="iris", epochs=3, hidden="30-20", trained_samples=100, isolation="one-at-a-time", cores=2)


def _run(algorithm, ranks, seed, times, compute, comm, acc, isolation="one-at-a-time"):
    rows = []
    for e, (t, c, m, a) in enumerate(zip(times, compute, comm, acc), start=1):
        rows.append(
            dict(
                BASE,
                algorithm=algorithm,
                ranks=ranks,
                seed=seed,
                run_dir=f"{algorithm}-{ranks}-{seed}",
                epoch=e,
                train_loss=1.0 / e,
                train_accuracy=a,
                test_loss=1.0 / e,
                test_accuracy=a,
                time_s=t,
                compute_s=c,
                comm_s=m,
                eval_s=0.01,
                bytes_sent=1000 * (ranks > 1),
                isolation=isolation,
            )
        )
    return rows


@pytest.fixture
def epochs():
    rows = []
    # epoch 1 is a slow warm-up in most runs: it must not enter the epoch-time statistics
    rows += _run("serial", 1, 1, [5.0, 2.0, 2.0], [5.0, 2.0, 2.0], [0, 0, 0], [0.5, 0.8, 0.95])
    rows += _run("allreduce", 2, 1, [3.0, 1.25, 1.25], [2.5, 1.0, 1.0], [0.5, 0.25, 0.25], [0.6, 0.92, 0.93])
    rows += _run("paramserver", 3, 1, [1.0, 1.0, 1.0], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [0.3, 0.4, 0.5])
    rows += _run("serial", 1, 2, [3.0, 2.0, 4.0], [3.0, 2.0, 4.0], [0, 0, 0], [0.9, 0.9, 0.9])
    rows += _run("allreduce", 2, 2, [1.0, 1.0, 1.0], [0.8, 0.8, 0.8], [0.2, 0.2, 0.2], [0.9, 0.9, 0.9], "shared")
    return pd.DataFrame(rows)


def test_speedup_efficiency_comm_share_and_time_to_accuracy_are_exact(epochs):
    runs = summarize_runs(epochs, target_accuracy=0.9).set_index("run_dir")
    ar = runs.loc["allreduce-2-1"]
    assert ar["median_epoch_s"] == 1.25  # epochs 2 and 3: the 3 s warm-up is left out
    assert ar["speedup"] == 2.0 / 1.25 == 1.6  # serial seed 1: median epoch 2.0 s
    assert ar["efficiency"] == 0.8
    assert ar["comm_share"] == pytest.approx(1.0 / 5.5)  # 0.5 + 0.25 + 0.25 over 4.5 compute + 1.0 comm
    assert ar["time_to_target_s"] == 4.25  # 0.92 >= 0.9 first in epoch 2, after 3.0 + 1.25 s
    assert ar["total_train_s"] == 5.5
    assert ar["samples_per_s"] == pytest.approx(300 / 5.5)
    ps = runs.loc["paramserver-3-1"]
    assert ps["speedup"] == 2.0 and ps["efficiency"] == pytest.approx(2 / 3)
    assert ps["comm_share"] == 0.5 and math.isnan(ps["time_to_target_s"])
    assert ps["best_test_accuracy"] == 0.5 and ps["final_test_accuracy"] == 0.5
    serial = runs.loc["serial-1-1"]
    assert serial["speedup"] == 1.0 and serial["comm_share"] == 0.0 and serial["time_to_target_s"] == 9.0
    assert runs.loc["allreduce-2-2", "speedup"] == 3.0  # matched with the seed-2 serial run, not seed 1
    assert runs.loc["serial-1-2", "iqr_epoch_s"] == 1.0  # epochs 2 and 3 took 2 s and 4 s
    # a speedup is flagged unless both its run and its baseline ran alone
    assert runs["speedup_isolated"].to_dict() == {
        "serial-1-1": True,
        "allreduce-2-1": True,
        "paramserver-3-1": True,
        "serial-1-2": True,
        "allreduce-2-2": False,
    }
    assert runs["oversubscribed"].to_dict() == {k: k == "paramserver-3-1" for k in runs.index}  # 3 ranks, 2 cores


def test_seeds_are_summarized_with_mean_and_spread(epochs):
    seeds = summarize_seeds(summarize_runs(epochs, 0.9))
    ar = seeds[seeds["algorithm"] == "allreduce"].iloc[0]
    assert ar["seeds"] == 2 and ar["seeds_reached_target"] == 2
    assert ar["speedup_mean"] == pytest.approx((1.6 + 3.0) / 2)
    assert ar["speedup_std"] == pytest.approx(pd.Series([1.6, 3.0]).std())
    assert ar["final_test_accuracy_mean"] == pytest.approx(0.915)


def test_seeds_placed_on_one_node_and_on_two_are_never_pooled(epochs):
    runs = summarize_runs(epochs, 0.9)
    runs.loc[runs.index[(runs["algorithm"] == "allreduce") & (runs["seed"] == 2)], "nodes"] = 2
    ar = summarize_seeds(runs).query("algorithm == 'allreduce'").set_index("nodes")
    assert sorted(ar.index) == [1, 2] and (ar["seeds"] == 1).all()
    assert ar.loc[2, "speedup_mean"] == pytest.approx(3.0) and ar.loc[1, "speedup_mean"] == pytest.approx(1.6)


def test_runs_without_a_serial_baseline_have_no_speedup(epochs):
    runs = summarize_runs(epochs[epochs["algorithm"] != "serial"], 0.9)
    assert runs["speedup"].isna().all() and runs["efficiency"].isna().all()


def _write_run(d, epochs=3):
    import json

    d.mkdir(parents=True)
    rows = pd.DataFrame(_run("serial", 1, 1, [1.0] * epochs, [1.0] * epochs, [0.0] * epochs, [0.5] * epochs))
    rows[
        ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy", "time_s", "compute_s", "comm_s"]
    ].to_csv(d / "metrics.csv", index=False)
    (d / "run.json").write_text(json.dumps({"data": {"train_samples": 100}}))
    return d


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda d: (d / "metrics.csv").write_text((d / "metrics.csv").read_text()[:-20]), "complete epoch rows of 3"),
        (lambda d: (d / "metrics.csv").write_text(""), "metrics.csv: unreadable (EmptyDataError"),
        (lambda d: (d / "metrics.csv").unlink(), "metrics.csv: unreadable (FileNotFoundError"),
        (lambda d: (d / "run.json").write_text('{"data": '), "run.json: unreadable or incomplete (JSONDecodeError"),
        (lambda d: (d / "run.json").write_text("{}"), "run.json: unreadable or incomplete (KeyError"),
    ],
)
def test_a_cut_or_empty_run_is_an_error_naming_it_never_a_row(tmp_path, damage, message):
    from mpinet import MpinetError
    from mpinet.analysis.aggregate import load_epochs

    run = dict(BASE, algorithm="serial", ranks=1, seed=1, dir=str(_write_run(tmp_path / "run")))
    assert len(load_epochs([run])) == 3
    damage(tmp_path / "run")
    with pytest.raises(MpinetError, match="remove the run's directory and run the workflow again") as e:
        load_epochs([run])
    assert str(tmp_path / "run") in str(e.value) and message in str(e.value)


def test_the_report_front_page_opens_with_the_best_isolated_speedups(epochs, tmp_path):
    from mpinet.analysis.summary import headline_rst

    runs = summarize_runs(epochs, 0.9)
    runs.to_csv(tmp_path / "runs.csv", index=False)
    page = headline_rst(tmp_path / "runs.csv", "DESCRIPTION", "s1")
    assert page.startswith("Study **s1**: headline numbers") and page.endswith("DESCRIPTION")
    rows = page.split("   * - ")[2:]
    allreduce = next(r for r in rows if "- allreduce" in r)
    assert "- 1.60" in allreduce  # seed 2's 3.0 was not timed alone: the seed-1 speedup is the headline
    assert "- batch per rank fixed" in allreduce and "- 8.00" not in allreduce  # its base: serial at batch 4
    assert "- 20000" in allreduce  # the base's time: 2.0 s an epoch over 100 samples, 20,000 µs a sample
    # 3 ranks on 2 cores: its 2.00 is left out of the headline, and the page says why
    assert not any("- paramserver" in r for r in rows)
    assert "more ranks than cores (1)" in page and "not timed alone (1)" in page


def test_a_speedup_divides_two_timings_of_one_engine_and_a_mix_is_named(epochs, tmp_path):
    """An experiment added after an upgrade is timed by the new engine: its speedup against the old
    engine's serial run is left out, named in the summary and on the front page with the command that
    retimes it, and `make retime` lists the runs another engine timed."""
    from mpinet.analysis.summary import end_of_run, headline_rst
    from mpinet.study.status import stale_runs

    mixed = epochs.assign(timed_by="old")
    mixed.loc[mixed["run_dir"] == "allreduce-2-1", "timed_by"] = "new"
    runs = summarize_runs(mixed, 0.9).set_index("run_dir")
    assert math.isnan(runs.loc["allreduce-2-1", "speedup"]) and runs.loc["allreduce-2-1", "timing_mixed"]
    assert runs.loc["paramserver-3-1", "speedup"] == 2.0 and not runs.loc["paramserver-3-1", "timing_mixed"]
    runs.reset_index().to_csv(tmp_path / "runs.csv", index=False)
    pd.DataFrame(columns=["status"]).to_csv(tmp_path / "references.csv", index=False)
    for text in (
        end_of_run(tmp_path / "runs.csv", tmp_path / "references.csv", "s1", "results/s1"),
        headline_rst(tmp_path / "runs.csv", "", "s1"),
    ):
        assert "timings of 2 engines (new, old)" in text.lower() and "make retime" in text
        assert "algorithm=allreduce, ranks=2" in text
    assert sorted(stale_runs(tmp_path / "runs.csv", "new")) == sorted(
        f"{d}/metrics.csv" for d in runs.index if d != "allreduce-2-1"
    )
    same = summarize_runs(epochs.assign(timed_by="new"), 0.9).set_index("run_dir")
    assert same.loc["allreduce-2-1", "speedup"] == 1.6 and not same["timing_mixed"].any()
