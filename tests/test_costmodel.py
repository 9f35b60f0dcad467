"""The cost model: fits recover known costs, collectives follow MPICH's algorithms, predictions
meet a real run."""

import math
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest

from mpinet.analysis.costmodel import (
    COMPUTE_KEYS,
    FIT_KEYS,
    Link,
    Timed,
    Work,
    allgather_seconds,
    allreduce_seconds,
    contention,
    epoch_seconds,
    first_layer_share,
    fit_compute,
    fit_link,
    layer_sizes,
    measured_link,
    model_error,
    n_params,
    paramserver_step_seconds,
    per_sample_at,
    predict,
    predicted_epochs,
)
from mpinet.engine.options import COMPUTE_OPTIONS, NOT_COMPUTE, Options


def test_the_link_fit_recovers_known_alpha_and_beta_from_noisy_timings():
    rng = np.random.default_rng(0)
    sizes = np.array([8 << k for k in range(24)], dtype=float)
    seconds = 4e-6 + sizes / 5e9
    link = fit_link(sizes, seconds * (1 + rng.normal(0, 0.01, len(sizes))))
    assert link.beta == pytest.approx(1 / 5e9, rel=0.03)
    assert link.alpha == pytest.approx(4e-6, rel=0.3)


def _runs(per_sample=2e-5, samples=1000):
    base = dict(dataset="d", **{k: getattr(Options(), k) for k in COMPUTE_OPTIONS}, sync_every=1)
    base |= dict(batch_size=8, hidden="10")
    base |= dict(features=100, classes=3, train_samples=0, trained_samples=samples)
    rows = [dict(base, algorithm="serial", ranks=1, median_compute_s=per_sample * samples, median_epoch_s=0.02)]
    rows.append(
        dict(base, algorithm="allreduce", ranks=1, median_compute_s=per_sample * samples * 1.1, median_epoch_s=0.022)
    )
    return pd.DataFrame(rows)


def test_compute_per_sample_is_fitted_from_the_one_rank_runs():
    compute = fit_compute(_runs(per_sample=2e-5))
    assert dict(zip(COMPUTE_KEYS, next(iter(compute)))) == dict(_runs().iloc[0][COMPUTE_KEYS])
    assert list(compute.values()) == [pytest.approx(2.1e-5)]  # median of 2.0 and 2.2


def test_runs_that_differ_in_any_compute_option_are_fitted_apart():
    """shuffle decides whether a step copies its batch: a study sweeping it gets two compute rates."""
    runs = _runs(per_sample=2e-5)
    batches = _runs(per_sample=1e-5).assign(shuffle="batches")
    compute = fit_compute(pd.concat([runs, batches]))
    by_shuffle = {dict(zip(COMPUTE_KEYS, k))["shuffle"]: v for k, v in compute.items()}
    assert by_shuffle == {"samples": pytest.approx(2.1e-5), "batches": pytest.approx(1.05e-5)}
    # every option but the stated exclusions separates runs, options added later included
    assert set(COMPUTE_KEYS) == {"dataset", *(f.name for f in fields(Options))} - set(NOT_COMPUTE)


def test_an_allreduce_timed_at_a_rank_count_is_taken_as_timed_and_scales_the_formula_elsewhere():
    """commbench times the Allreduce at 2, 4, ... and all ranks: those counts take the timing (read
    between the sizes timed, per byte past the largest), the others the formula scaled by what the
    nearest count below cost beyond it (ranks sharing a node's memory; no timing: the formula)."""
    link = Link(1e-6, 1e-9)
    timed = Timed((8.0, 1024.0, 1 << 20), (2e-6, 4e-6, 4e-3))
    assert [timed.at(b) for b in (8, 1024, 1 << 20)] == pytest.approx([2e-6, 4e-6, 4e-3])
    assert timed.at(32) == pytest.approx(2e-6 * 2 ** (2 / 7))  # log-log between 8 and 1024 bytes
    assert timed.at(4 << 20) == pytest.approx(16e-3)  # per byte past the largest
    measured = Link(1e-6, 1e-9, allreduce_at={2: timed, 4: Timed((8.0, 1 << 20), (3e-6, 9e-3))})
    assert allreduce_seconds(2, 1 << 20, 4, measured) == pytest.approx(4e-3)
    assert allreduce_seconds(4, 1 << 20, 4, measured) == pytest.approx(9e-3)
    for ranks, k in ((3, 2), (8, 4), (32, 4)):
        ratio = measured.allreduce_at[k].at(1 << 20) / allreduce_seconds(k, 1 << 20, 4, link)
        assert allreduce_seconds(ranks, 1 << 20, 4, measured) == pytest.approx(
            allreduce_seconds(ranks, 1 << 20, 4, link) * ratio
        )
    assert allreduce_seconds(1, 1 << 20, 4, measured) == 0.0


def test_ranks_sharing_a_memory_system_slow_the_streaming_share_of_a_step_by_the_copy_rate_they_lose():
    """contention: the share of a 1-rank step that streams memory (rows four passes, the first layer
    three, at the 1-rank copy rate) slows by each rank's drop in copy rate with P ranks copying at
    once; interpolated between timed counts, held past the largest (more nodes like that one)."""
    from mpinet.engine.grid import ROW_PASSES, WEIGHT_PASSES

    sizes, b = (1000, 50, 10, 3), 8
    streamed = (ROW_PASSES * b * 1000 + WEIGHT_PASSES * 1000 * 50) * 4
    step = 2 * streamed / 10e9  # half the step streams at the 1-rank rate
    work = Work(800, b, step / b, sizes, 4)
    link = Link(1e-6, 1e-9, stream_at={1: 10e9, 2: 8e9, 4: 5e9})
    assert contention(1, work, link) == 1.0 and contention(4, work, Link(1e-6, 1e-9)) == 1.0
    assert contention(2, work, link) == pytest.approx(0.5 + 0.5 * 10 / 8)
    assert contention(3, work, link) == pytest.approx(0.5 + 0.5 * 10 / 6.5)
    assert contention(8, work, link) == contention(4, work, link)  # more nodes like the benchmark's
    slow = Work(800, b, 100 * step / b, sizes, 4)  # a compute-bound step barely notices
    assert 1 < contention(4, slow, link) < 1.01
    fast = Work(800, b, step / b / 10, sizes, 4)  # a share above 1 counts as all of the step
    assert contention(2, fast, link) == pytest.approx(10 / 8)
    plain = Link(1e-6, 1e-9)
    slowed = Work(800, b, step / b * contention(2, work, link), sizes, 4)
    assert epoch_seconds("allreduce", 2, work, link) == pytest.approx(epoch_seconds("allreduce", 2, slowed, plain))
    assert epoch_seconds("serial", 1, work, link) == epoch_seconds("serial", 1, work, plain)


def test_the_measured_link_reads_every_rank_count_commbench_timed_and_older_tables():
    rows = [
        {
            "bytes": b,
            "one_way_s": 1e-6 + b * 1e-10,
            "allreduce_s": k * (2e-6 + b * 1e-10),
            "ranks": k,
            "stream_s": k * b * 1e-10,
        }
        for b in (8, 1024, 1 << 16, 1 << 20)
        for k in (1, 2, 3)
    ]
    bench = pd.DataFrame(rows).assign(alpha_s=1e-6, beta_s_per_byte=1e-10, library="MPICH Version: 5")
    link = measured_link(bench)
    assert (link.alpha, link.beta) == (1e-6, 1e-10) and sorted(link.allreduce_at) == [2, 3]
    assert link.stream_at == pytest.approx({1: 2e10, 2: 1e10, 3: 2e10 / 3})  # read + write of the largest
    assert allreduce_seconds(3, 1 << 16, 4, link) == pytest.approx(3 * (2e-6 + (1 << 16) * 1e-10))
    older = bench[bench["ranks"] == 3]  # before 0.9.0: the Allreduce at all ranks only
    assert sorted(measured_link(older).allreduce_at) == [3] and measured_link(older).stream_at == {}
    bare = bench[["alpha_s", "beta_s_per_byte"]]
    assert measured_link(bare).allreduce_at == {} and measured_link(bare).alpha == 1e-6


@pytest.mark.mpi
@pytest.mark.each_mpi
def test_commbench_times_the_allreduce_and_the_copy_at_every_count_and_the_model_reads_them(tmp_path):
    import subprocess
    import sys

    from conftest import env

    from mpinet.launch.launcher import mpiexec_argv

    out = tmp_path / "commbench.csv"
    cmd = [*mpiexec_argv(3), sys.executable, "-m", "mpi4py", "-m", "mpinet.commbench"]
    # up to 64 MiB, as a study measures: 3 ranks on 2 cores busy with other tests wait ~2 ms for the
    # scheduler on every message, as long as 8 MiB takes to move (1 in 10 fits then had β < 0, which
    # commbench refuses); 64 MiB takes ~10 ms (none in 10 under the same load)
    largest = 64 << 20
    subprocess.run([*cmd, "--max-bytes", str(largest), "--out", str(out)], check=True, env=env(), timeout=120)
    bench = pd.read_csv(out)
    assert bench.groupby("bytes")["ranks"].apply(sorted).map(tuple).unique().tolist() == [(1, 2, 3)]
    assert (bench.groupby("bytes")["one_way_s"].nunique() == 1).all()  # one ping-pong per size
    assert (bench[["allreduce_s", "stream_s"]] > 0).all().all() and bench["bytes"].max() == largest
    link = measured_link(bench)
    assert sorted(link.allreduce_at) == [2, 3] and sorted(link.stream_at) == [1, 2, 3]


def test_allreduce_follows_mpichs_algorithm_choice():
    link = Link(1e-6, 1e-9)
    big = 4 * 1_000_000
    # Rabenseifner on a power of two: 2 log2(p) alpha + 2 (p-1)/p bytes beta
    assert allreduce_seconds(4, big, 4, link) == pytest.approx(2 * 2 * 1e-6 + 2 * 3 / 4 * big * 1e-9)
    # 6 ranks: p' = 4, and two more messages of the whole buffer for the 2 extra ranks
    assert allreduce_seconds(6, big, 4, link) == pytest.approx(
        allreduce_seconds(4, big, 4, link) + 2 * link.message(big)
    )
    # 8 bytes: recursive doubling, log2(p) full messages
    assert allreduce_seconds(8, 8, 8, link) == pytest.approx(3 * link.message(8))
    assert allreduce_seconds(1, big, 4, link) == 0.0
    assert paramserver_step_seconds(4, big, link) == pytest.approx(6 * link.message(big))


def test_epoch_time_splits_compute_over_ranks_and_adds_the_exchange_per_step():
    link = Link(1e-5, 1e-9)
    size = n_params(100, "10", 3)
    assert size == 100 * 10 + 10 + 10 * 3 + 3
    sizes = layer_sizes(100, "10", 3)
    serial = epoch_seconds("serial", 1, Work(1000, 8, 2e-5, sizes, 4), link)
    assert serial == pytest.approx(0.02)
    two = epoch_seconds("allreduce", 2, Work(1000, 8, 2e-5, sizes, 4), link)
    assert two == pytest.approx(0.01 + math.ceil(1000 / 16) * allreduce_seconds(2, size * 4, 4, link))
    ps = epoch_seconds("paramserver", 3, Work(1000, 8, 2e-5, sizes, 4), link)
    assert ps == pytest.approx(math.ceil(1000 / 16) * (2e-5 * 8 + paramserver_step_seconds(3, size * 4, link)))


def test_allgather_follows_mpichs_algorithm_choice():
    link = Link(1e-6, 1e-9)
    # short: recursive doubling (Bruck off powers of two), ceil(log2 p) messages
    assert allgather_seconds(4, 1000, link) == pytest.approx(2e-6 + 3 / 4 * 1000e-9)
    assert allgather_seconds(6, 1000, link) == pytest.approx(3e-6 + 5 / 6 * 1000e-9)
    # long: the ring, p - 1 messages
    assert allgather_seconds(4, 4 << 20, link) == pytest.approx(3e-6 + 3 / 4 * (4 << 20) * 1e-9)
    assert allgather_seconds(1, 4 << 20, link) == 0.0


def test_the_small_batch_designs_split_the_first_layer_s_work_as_they_run_it():
    """Without communication cost: sharded divides the first layer's work by P and runs the rest of
    the net on the whole global batch; allgather divides everything but the first layer's update,
    which every rank applies for the whole global batch."""
    free = Link(0.0, 0.0)
    sizes = (10000, 30, 20, 6)  # a wide first layer, as the Intel data's
    share = first_layer_share(sizes)
    macs = 10000 * 30 + 30 * 20 + 20 * 6
    assert share == pytest.approx(10000 * 30 / (2 * macs + 30 * 20 + 20 * 6))
    serial = epoch_seconds("serial", 1, Work(1024, 4, 1e-4, sizes, 4), free)
    sharded = epoch_seconds("sharded", 4, Work(1024, 4, 1e-4, sizes, 4), free)
    assert sharded == pytest.approx(serial * (2 * share / 4 + 1 - 2 * share))
    assert serial / 4 < sharded < serial / 3.9  # nearly P: the first layer is nearly all the work
    allgather = epoch_seconds("allgather", 4, Work(1024, 4, 1e-4, sizes, 4), free)
    assert allgather == pytest.approx(serial / 4 * (1 + 3 * share))  # about half the work does not split
    # and what they send: the rows and errors (allgather), the first layer's outputs (sharded)
    link = Link(1e-5, 1e-9)
    n = n_params(10000, "30-20", 6)
    steps = 1024 // 16
    rest = (n - 10000 * 30) * 4
    gathered = allgather_seconds(4, 16 * 10000 * 4, link) + allgather_seconds(4, 16 * 30 * 4, link)
    per_step = 1e-4 * (4 + 12 * share) + gathered + allreduce_seconds(4, rest, 4, link)
    bcast = 2 * link.message(10000 * 30 * 4)
    assert epoch_seconds("allgather", 4, Work(1024, 4, 1e-4, sizes, 4), link) == pytest.approx(steps * per_step + bcast)
    sharded_step = 1e-4 * 16 * (2 * share / 4 + 1 - 2 * share) + allgather_seconds(4, 16 * 30 * 4, link)
    once = allgather_seconds(4, 10000 * 30 * 4, link) + 2 * link.message(rest)
    assert epoch_seconds("sharded", 4, Work(1024, 4, 1e-4, sizes, 4), link) == pytest.approx(
        steps * sharded_step + once
    )


def test_the_node_design_divides_all_the_work_and_sends_only_two_barriers_and_the_small_layers():
    """node computes as allreduce (the first layer's update split by columns, the same flops as a
    rank's own gradient) and exchanges no byte of the first layer: two barriers and the small layers."""
    sizes, link = (10000, 30, 20, 6), Link(1e-5, 1e-9)
    serial = epoch_seconds("serial", 1, Work(1024, 4, 1e-4, sizes, 4), link)
    assert epoch_seconds("node", 4, Work(1024, 4, 1e-4, sizes, 4), Link(0.0, 0.0)) == pytest.approx(serial / 4)
    rest = (n_params(10000, "30-20", 6) - 10000 * 30) * 4
    step = 2 * 2 * link.alpha + rest * link.beta  # two barriers of log2(4) messages each
    assert epoch_seconds("node", 4, Work(1024, 4, 1e-4, sizes, 4), link) == pytest.approx(
        serial / 4 + 1024 // 16 * step
    )
    assert epoch_seconds("node", 16, Work(1024, 4, 1e-4, sizes, 4), link) < epoch_seconds(
        "allreduce", 16, Work(1024, 4, 1e-4, sizes, 4), link
    )


def test_predictions_cover_the_designs_a_study_ran_and_every_rank_count_with_speedups_against_the_model_serial():
    table = predict(_runs(), {"here": Link(1e-5, 1e-9), "free": Link(0, 0)}, range(1, 33))
    assert set(table["algorithm"]) == {"allreduce"} and table["ranks"].max() == 32
    alone = predict(_runs().iloc[:1], {"here": Link(1e-5, 1e-9)}, range(1, 5))  # serial only: the original's two
    assert set(alone["algorithm"]) == {"allreduce", "paramserver"}
    small = pd.concat([_runs(), _runs().iloc[1:].assign(algorithm="sharded", ranks=2)])
    assert set(predict(small, {"here": Link(1e-5, 1e-9)}, [1, 2])["algorithm"]) == {"allreduce", "sharded"}
    # per dataset: another dataset's designs draw no line here
    other = _runs().assign(dataset="e")
    both = predict(pd.concat([small, other]), {"here": Link(1e-5, 1e-9)}, [1, 2])
    assert set(both[both["dataset"] == "e"]["algorithm"]) == {"allreduce"}
    free = table[(table["link"] == "free") & (table["algorithm"] == "allreduce")].set_index("ranks")
    assert free.loc[32, "speedup"] == pytest.approx(32)  # nothing to pay for talking: linear
    here = table[(table["link"] == "here") & (table["algorithm"] == "allreduce")].set_index("ranks")
    assert here.loc[32, "efficiency"] < here.loc[2, "efficiency"]


def test_a_batch_no_one_rank_run_measured_is_read_between_the_batches_that_were():
    """A fixed global batch's G/P a rank: a step's seconds on the line between the nearest fitted
    batches (a fixed overhead plus its samples); past them, the nearest batch's seconds per sample."""
    runs = pd.concat([_runs(per_sample=3e-5).assign(batch_size=4), _runs(per_sample=1e-5).assign(batch_size=12)])
    compute = fit_compute(runs)
    key = dict(zip(FIT_KEYS, next(iter(compute))))

    def at(batch, **other):
        return per_sample_at(compute, tuple({**key, "batch_size": batch, **other}[k] for k in FIT_KEYS))

    step4, step12 = 4 * 3.15e-5, 12 * 1.05e-5  # the medians of serial's and the 1-rank design's
    assert at(4) == pytest.approx(3.15e-5) and at(12) == pytest.approx(1.05e-5)
    assert at(6) == pytest.approx((step4 + (step12 - step4) * 2 / 8) / 6)
    assert at(2) == at(4) and at(64) == at(12)
    assert at(6, hidden="99") is None  # no batch of that net was measured


def test_a_fixed_global_batch_is_predicted_at_every_count_that_divides_it_against_serial_at_that_batch():
    serial_at_12 = _runs(per_sample=1e-5).assign(batch_size=12).iloc[:1]
    split = serial_at_12.assign(algorithm="allreduce", ranks=2, batch_size=6)
    runs = pd.concat([_runs(per_sample=3e-5).assign(batch_size=4), serial_at_12, split], ignore_index=True)
    link = Link(1e-5, 1e-9)
    table = predict(runs, {"here": link}, range(1, 9))
    fixed = table[table["scaling"] == "global"].set_index("ranks")
    assert set(fixed["global_batch"]) == {12} and list(fixed.index) == [1, 2, 3, 4, 6]  # 5, 7, 8 split no 12
    assert list(fixed["batch_size"]) == [12, 6, 4, 3, 2]
    work = Work(1000, 3, per_sample_at(fit_compute(runs), _key(runs, batch_size=3)), (100, 10, 3), 4)
    assert fixed.loc[4, "epoch_s"] == pytest.approx(epoch_seconds("allreduce", 4, work, link))
    assert fixed.loc[4, "speedup"] == pytest.approx(1e-5 * 1000 / fixed.loc[4, "epoch_s"])
    # the split run itself gets a prediction, from the batches around its 6
    assert np.isfinite(predicted_epochs(runs, link).iloc[-1])
    # the throughput lines are the batches a 1-rank run measured: none at 6, read between 4 and 12
    assert set(table[table["scaling"] == "strong"]["batch_size"]) == {4, 12}


def _key(runs, **at):
    """A run's FIT_KEYS key (the model's compute table's), with some columns changed."""
    row = {**runs.iloc[0].to_dict(), "timed_by": "unknown", **at}
    return tuple(row[k] for k in FIT_KEYS)


def test_without_a_one_rank_run_the_model_predicts_nothing_but_keeps_its_columns(tmp_path):
    from mpinet.analysis.scaling import scaling

    runs = _runs()
    runs = runs.assign(ranks=2, algorithm="allreduce")  # no 1-rank run: no compute to fit
    table = predict(runs, {"here": Link(1e-5, 1e-9)}, range(1, 33))
    assert table.empty and {"link", "algorithm", "ranks", "speedup"} <= set(table.columns)
    table.to_csv(tmp_path / "model.csv", index=False)
    back = pd.read_csv(tmp_path / "model.csv")  # a header, so the plots can read it
    assert back.empty and model_error(runs, Link(1e-5, 1e-9)).isna().all()
    runs = runs.assign(design="Allreduce", speedup=float("nan"), efficiency=float("nan"), final_test_accuracy=0.5)
    scaling(runs.assign(speedup_isolated=True, oversubscribed=False), "d", tmp_path / "s.png", model=back)


def test_the_models_exchange_is_judged_against_the_measured_transfer_without_the_wait():
    from mpinet.analysis.aggregate import add_model

    runs = pd.concat(
        [
            _runs(),
            pd.DataFrame(
                [dict(_runs().iloc[0], algorithm="allreduce", ranks=2, median_epoch_s=0.05, median_transfer_s=0.02)]
            ),
        ],
        ignore_index=True,
    ).assign(samples_per_rank=0)
    bench = pd.DataFrame({"alpha_s": [1e-5], "beta_s_per_byte": [1e-9], "library": ["MPICH Version: 5"]})
    out, _ = add_model(runs, bench)
    two = out.iloc[2]
    link = Link(1e-5, 1e-9)
    size = n_params(100, "10", 3)
    exchange = math.ceil(1000 / 16) * allreduce_seconds(2, size * 4, 4, link)
    assert two["model_transfer_error"] == pytest.approx(exchange / 0.02 - 1)
    assert out["model_transfer_error"].iloc[:2].isna().all()  # 1-rank runs move nothing


def test_a_link_without_time_per_byte_is_refused_with_a_line_naming_beta():
    from mpinet import MpinetError

    sizes = [8, 1024, 65536, 1 << 20]
    with pytest.raises(MpinetError, match="β = 0 s/byte"):
        fit_link(sizes, [2e-6] * len(sizes))
