"""Intervals over launches and epochs, and the launch-level A/B test: checked on synthetic timings
whose truth is known."""

import numpy as np
import pandas as pd
import pytest

from mpinet.analysis.confidence import bootstrap_medians, compare_launches, interval, t975


def _launches(rng, n, true_s, launch_noise, epoch_noise=0.01, epochs=20):
    """n launches: each with its own offset from the true epoch time, and small epoch-to-epoch noise."""
    offsets = true_s * (1 + rng.normal(0, launch_noise, n))
    return [o * (1 + rng.normal(0, epoch_noise, epochs)) for o in offsets]


def test_the_interval_covers_the_true_time_when_launches_scatter_and_an_epochs_only_one_would_not():
    rng = np.random.default_rng(1)
    covered, epochs_only = 0, 0
    trials = 120
    for i in range(trials):
        launches = _launches(rng, 8, 1.0, 0.10)
        low, high = interval(bootstrap_medians(launches, replicates=400, seed=i))
        covered += low <= 1.0 <= high
        pooled = np.concatenate(launches)  # what resampling epochs alone would see
        boot = np.median(rng.choice(pooled, size=(400, len(pooled))), axis=1)
        lo, hi = interval(boot)
        epochs_only += lo <= 1.0 <= hi
    assert covered / trials >= 0.8, covered  # near the nominal 95 % (8 launches is few)
    assert epochs_only / trials < 0.5, epochs_only  # 160 epochs fake a precision 8 launches do not have


def test_one_launch_gives_an_interval_over_its_epochs_only():
    rng = np.random.default_rng(2)
    one = _launches(rng, 1, 1.0, 0.0, epoch_noise=0.02)
    low, high = interval(bootstrap_medians(one))
    assert low < np.median(one[0]) < high and high - low < 0.03
    assert np.isnan(interval(bootstrap_medians([]))[0])


def test_t_quantiles():
    assert t975(1) == pytest.approx(12.706) and t975(10) == pytest.approx(2.228)
    assert t975(2.5) == pytest.approx((4.303 + 3.182) / 2)
    assert 1.96 < t975(200) < 1.975 and t975(0.5) == float("inf")


def test_a_ten_percent_slowdown_with_small_noise_is_detected():
    rng = np.random.default_rng(3)
    a = np.array([np.median(t) for t in _launches(rng, 5, 1.0, 0.02)])
    b = np.array([np.median(t) for t in _launches(rng, 5, 1.1, 0.02)])
    r = compare_launches(a, b)
    assert r["differs"] and r["ratio_ci_low"] > 1.0 and r["ratio"] == pytest.approx(1.1, rel=0.04)
    assert compare_launches(b, a)["ratio_ci_high"] < 1.0  # the other way round: faster


def test_the_same_change_in_twenty_percent_launch_noise_with_two_launches_is_not():
    rng = np.random.default_rng(4)
    missed = 0
    for _ in range(50):
        a = np.array([np.median(t) for t in _launches(rng, 2, 1.0, 0.2)])
        b = np.array([np.median(t) for t in _launches(rng, 2, 1.1, 0.2)])
        missed += not compare_launches(a, b)["differs"]
    assert missed >= 45  # two launches cannot tell 10 % from 20 % noise
    one = compare_launches(np.array([1.0]), np.array([1.5]))
    assert not one["differs"] and np.isnan(one["ratio_ci_low"])  # one launch: nothing to test with


def test_runs_csv_and_seeds_csv_carry_intervals_and_say_when_they_cover_one_launch(tmp_path):
    from mpinet.analysis.aggregate import summarize_runs, summarize_seeds
    from mpinet.study.experiments import DEFAULTS

    rng = np.random.default_rng(5)
    rows = []
    for algorithm, ranks, true_s, repeats in (
        ("serial", 1, 1.0, 3),
        ("allreduce", 2, 0.5, 3),
        ("allreduce", 3, 0.4, 1),
    ):
        for repeat, times in enumerate(_launches(rng, repeats, true_s, 0.05, epochs=10), start=1):
            run = dict(DEFAULTS, dataset="d", algorithm=algorithm, ranks=ranks, repeat=repeat, hidden="30-20")
            rows += [
                dict(run, run_dir=f"{algorithm}{ranks}-{repeat}", trained_samples=100, epoch=e + 1, time_s=t,
                     compute_s=t, comm_s=0.0, train_loss=1.0, train_accuracy=0.5, test_loss=1.0,
                     test_accuracy=0.5, bytes_sent=0)
                for e, t in enumerate(times)
            ]  # fmt: skip
    epochs = pd.DataFrame(rows)
    runs = summarize_runs(epochs, 0.9)
    two = runs[runs["ranks"] == 2]
    assert (two["ci_launches"] == 3).all() and two["speedup_ci_low"].nunique() == 1  # one interval per experiment
    assert (two["speedup_ci_low"] < two["speedup"]).all() and (two["speedup"] < two["speedup_ci_high"]).all()
    assert two["speedup_ci_low"].iloc[0] < 2.0 < two["speedup_ci_high"].iloc[0]
    three = runs[runs["ranks"] == 3].iloc[0]
    assert three["ci_launches"] == 1 and three["speedup_ci_low"] < three["speedup"] < three["speedup_ci_high"]
    assert two["efficiency_ci_high"].iloc[0] == pytest.approx(two["speedup_ci_high"].iloc[0] / 2)
    assert runs["median_epoch_s_ci_low"].le(runs["median_epoch_s"]).all()
    seeds = summarize_seeds(runs, epochs)
    assert {"speedup_ci_low", "speedup_ci_high", "ci_launches"} <= set(seeds.columns)
    assert seeds.set_index("ranks").loc[2, "ci_launches"] == 3

    from mpinet.analysis.summary import summary_table

    runs.to_csv(tmp_path / "runs.csv", index=False)
    text = summary_table(tmp_path / "runs.csv")
    assert "speedup_95ci" in text and "*: one launch" in text
    rows = {tuple(x.split()[1:3]): x for x in text.splitlines()[1:] if len(x.split()) > 3}
    assert "]*" in rows[("allreduce", "3")] and "]*" not in rows[("allreduce", "2")]


def _runs_table(rng, experiments: dict, launches: int, noise: float) -> pd.DataFrame:
    """runs.csv rows: per experiment (algorithm, ranks) -> true epoch time, `launches` repeats each."""
    from mpinet.study.experiments import DEFAULTS

    rows = []
    for (algorithm, ranks), true_s in experiments.items():
        for repeat in range(1, launches + 1):
            t = true_s * (1 + rng.normal(0, noise))
            rows.append(dict(DEFAULTS, dataset="d", algorithm=algorithm, ranks=ranks, repeat=repeat,
                             hidden="30-20", median_epoch_s=t, speedup=1.0 / t))  # fmt: skip
    return pd.DataFrame(rows)


def test_make_compare_finds_a_slowdown_a_speedup_and_lists_the_unmatched(tmp_path):
    import subprocess
    import sys

    from conftest import env

    rng = np.random.default_rng(6)
    a = _runs_table(rng, {("serial", 1): 1.0, ("allreduce", 2): 0.6, ("allreduce", 3): 0.5}, 5, 0.02)
    b = _runs_table(rng, {("serial", 1): 1.0, ("allreduce", 2): 0.66, ("paramserver", 3): 0.7}, 5, 0.02)
    b.loc[b["algorithm"] == "serial", "median_epoch_s"] *= 0.9  # B's serial runs 10 % faster
    a["p95_step_s"], b["p95_step_s"] = a["median_epoch_s"] / 100, b["median_epoch_s"] / 100
    b.loc[b["algorithm"] == "allreduce", "p95_step_s"] *= 1.5  # and B's slow steps are slower still
    from test_environment import META

    from mpinet.analysis.environment import environment_table

    openmpi = {**META, "mpi": {**META["mpi"], "library": "Open MPI v5.0.8"}}
    for name, table, meta in (("A", a, META), ("B", b, openmpi)):
        (tmp_path / name / "metrics").mkdir(parents=True)
        table.to_csv(tmp_path / name / "metrics" / "runs.csv", index=False)
        environment_table([meta]).to_csv(tmp_path / name / "metrics" / "environment.csv", index=False)
    p = subprocess.run(
        [sys.executable, "-m", "mpinet.analysis.compare", tmp_path / "A", tmp_path / "B", "--out", tmp_path / "cmp"],
        capture_output=True,
        text=True,
        env=env(),
    )
    assert p.returncode == 0, p.stderr
    out = pd.read_csv(tmp_path / "cmp" / "compare.csv").set_index(["algorithm", "ranks"])
    assert out.loc[("allreduce", 2), "verdict"] == "slower"
    assert out.loc[("allreduce", 2), "time_ratio"] == pytest.approx(1.1, rel=0.05)
    assert out.loc[("allreduce", 2), "time_ratio_ci_low"] > 1
    assert out.loc[("serial", 1), "verdict"] == "faster"
    assert out.loc[("allreduce", 3), "verdict"] == "only in A" and out.loc[("paramserver", 3), "verdict"] == "only in B"
    assert "only in A: 1 experiment(s) (compare.csv lists them): d allreduce 3 ranks" in p.stdout
    assert "slower" in p.stdout
    # what differs in where they ran comes first, then the verdicts with the tail beside them
    head = p.stdout.split("experiment")[0]
    assert "mpi: A MPICH Version: 5.0.2 | B Open MPI v5.0.8" in head and "cpu:" not in head
    assert out.loc[("allreduce", 2), "tail_ratio"] == pytest.approx(1.1 * 1.5, rel=0.05)
    assert "p95 step B/A" in p.stdout
    assert (tmp_path / "cmp" / "compare.png").stat().st_size > 5_000


def test_compare_in_launch_noise_with_two_launches_detects_nothing_and_a_missing_table_is_one_line(tmp_path):
    from mpinet import MpinetError
    from mpinet.analysis.compare import compare, read_runs

    rng = np.random.default_rng(7)
    a = _runs_table(rng, {("allreduce", 2): 0.6}, 2, 0.2)
    b = _runs_table(rng, {("allreduce", 2): 0.66}, 2, 0.2)
    assert compare(a, b)["verdict"].tolist() == ["no difference detected"]
    with pytest.raises(MpinetError, match="metrics/runs.csv: cannot read it"):
        read_runs(tmp_path / "nowhere")


def _measured_runs():
    """A runs.csv whose 2-rank Allreduce speedup is 1.95 with interval [1.89, 2.07]."""
    from mpinet.study.experiments import DEFAULTS

    base = dict(DEFAULTS, dataset="d", hidden="30-20", trained_samples=100, ci_launches=3)
    return pd.DataFrame(
        [
            dict(base, algorithm="serial", ranks=1, speedup=1.0, speedup_ci_low=0.97, speedup_ci_high=1.03),
            dict(base, algorithm="allreduce", ranks=2, speedup=1.95, speedup_ci_low=1.89, speedup_ci_high=2.07),
            dict(base, algorithm="allreduce", ranks=2, seed=2, speedup=1.97, speedup_ci_low=1.9, speedup_ci_high=2.0),
        ]
    )


def test_a_reference_is_met_when_the_interval_meets_its_band_and_breached_when_wholly_outside():
    from mpinet.analysis.references import evaluate

    refs = [
        {"algorithm": "allreduce", "ranks": 2, "speedup": 2.0, "tolerance": 0.1},
        {"algorithm": "allreduce", "ranks": 2, "speedup": 2.4, "tolerance": 0.1},  # band [2.16, 2.64]
        {"algorithm": "allreduce", "speedup": 2.3, "tolerance": 0.1},  # [2.07, 2.53]: touches 2.07
        {"algorithm": "serial", "efficiency": 1.0},  # no efficiency interval in this table
    ]
    table = evaluate(refs, _measured_runs())
    assert table["status"].tolist() == ["ok", "breach", "ok", "no interval"]
    row = table.iloc[0]
    assert row["launches"] == 2 and row["ci_low"] == 1.89 and row["ci_high"] == 2.07  # the widest over seeds
    assert row["measured"] == pytest.approx(1.96)


@pytest.mark.parametrize(
    "refs,message",
    [
        ([{"algorithm": "allreduce", "ranks": 5, "speedup": 2.0}], r"references\[0\]: selects no experiment"),
        ([{"ranks": 2, "speedup": 2.0, "efficiency": 1.0}], r"references\[0\]: give exactly one of"),
        ([{"rank": 2, "speedup": 2.0}], r"references\[0\]: unknown key\(s\) rank"),
        ([{"ranks": 2, "speedup": 2.0, "tolerance": 1.5}], r"references\[0\].tolerance: expected a relative"),
    ],
)
def test_a_reference_that_cannot_be_checked_is_an_error_naming_it(refs, message):
    from mpinet import MpinetError
    from mpinet.analysis.references import evaluate

    with pytest.raises(MpinetError, match=message):
        evaluate(refs, _measured_runs())


def test_make_check_exits_non_zero_on_a_breach_and_zero_when_every_band_is_met(tmp_path):
    import subprocess
    import sys

    import yaml
    from conftest import env

    (tmp_path / "results/s/metrics").mkdir(parents=True)
    _measured_runs().to_csv(tmp_path / "results/s/metrics/runs.csv", index=False)

    def check(refs):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({"study": "s", "references": refs}))
        cmd = [sys.executable, "-m", "mpinet.analysis.references", "c.yaml"]
        return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env())

    ok = check([{"algorithm": "allreduce", "ranks": 2, "speedup": 2.0}])
    assert ok.returncode == 0 and "1 checked: 0 breached" in ok.stdout, ok.stderr
    bad = check([{"algorithm": "allreduce", "ranks": 2, "speedup": 2.4}])
    assert bad.returncode == 1
    assert "reference 0 breached: d allreduce 2 ranks batch_size=4: speedup 1.96 [1.89, 2.07] outside 2.4" in bad.stderr
    (tmp_path / "results/s/metrics/runs.csv").unlink()
    missing = check([{"ranks": 2, "speedup": 2.0}])
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "runs.csv: missing" in missing.stderr
