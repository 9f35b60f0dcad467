"""SLURM time limits from what is known about a run (mpinet.launch.walltime)."""

import json
import math
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from mpinet.analysis import costmodel
from mpinet.engine.checkpoint import save_checkpoint
from mpinet.engine.options import Options
from mpinet.launch import walltime

# an experiment row as the grid makes it: every option, the defaults but these
ROW = {**asdict(Options()), "dataset": "intel", "algorithm": "allreduce", "ranks": 2, "epochs": 10, "hidden": [40, 10]}
SHAPE = {"train_samples": 14034, "test_samples": 3000, "features": 67500, "classes": 6}


def test_the_request_adds_start_up_and_safety_rounds_up_and_doubles_on_retries():
    e = walltime.Estimate(epoch_s=10.0, epochs=30, source="test")
    seconds = walltime.STARTUP_S + walltime.SAFETY * 300
    assert e.minutes() == math.ceil(seconds / 60)
    assert e.minutes(attempt=2) == 2 * e.minutes() and e.minutes(attempt=3) == 4 * e.minutes()
    assert walltime.Estimate(0.001, 5, "test").minutes() == walltime.FLOOR_MINUTES


def test_earlier_epochs_give_the_median_epoch_and_what_is_left(tmp_path):
    ck = tmp_path / "checkpoint.npz"
    rows = [{"epoch": i, "time_s": t, "eval_s": 1.0} for i, t in enumerate([5.0, 3.0, 4.0, 100.0], 1)]
    save_checkpoint(ck, "sig", np.zeros(3), 4, rows)
    e = walltime.from_checkpoint(ck, epochs=10)
    assert (e.epoch_s, e.epochs, e.source) == (5.5, 6, "earlier epochs")  # median of 6, 4, 5, 101
    assert walltime.from_checkpoint(tmp_path / "none.npz", 10) is None
    assert walltime.estimate(ROW, SHAPE, ck, None, None) == e  # preferred over any model


def test_the_calibrated_model_prices_compute_from_1_rank_runs_and_the_exchange_from_the_link():
    link = costmodel.Link(2e-6, 1 / 6e9, "test")
    runs = pd.DataFrame(
        [{**ROW, "ranks": 1, "hidden": "40-10", "median_compute_s": 14.0, "trained_samples": SHAPE["train_samples"]}]
    )
    e = walltime.from_model(ROW, SHAPE, runs, link)
    per_sample = 14.0 / SHAPE["train_samples"]
    sizes = costmodel.layer_sizes(SHAPE["features"], "40-10", SHAPE["classes"])
    train = costmodel.epoch_seconds(
        "allreduce", 2, costmodel.Work(SHAPE["train_samples"], 4, per_sample, sizes, 4), link
    )
    assert e.source == "cost model" and e.epochs == 10
    assert e.epoch_s == pytest.approx(train + per_sample / 3 * SHAPE["test_samples"] / 2)
    # another batch of the same net: its per sample held past the one batch measured (costmodel.per_sample_at)
    wider = walltime.from_model({**ROW, "batch_size": 32}, SHAPE, runs, link)
    assert wider.source == "cost model" and wider.epoch_s < e.epoch_s  # 8x fewer exchanges
    assert walltime.from_model({**ROW, "hidden": [64]}, SHAPE, runs, link) is None  # no run of that net
    assert walltime.estimate({**ROW, "hidden": [64]}, SHAPE, None, runs, link).source == "uncalibrated"


def test_the_uncalibrated_bound_grows_with_the_network_and_serialises_the_server():
    small = walltime.uncalibrated(ROW, {**SHAPE, "features": 4})
    large = walltime.uncalibrated(ROW, SHAPE)
    steps = math.ceil(SHAPE["train_samples"] / (4 * 2))
    n_small = costmodel.n_params(4, "40-10", SHAPE["classes"])
    evaluate = 2 * n_small * SHAPE["test_samples"] / 2 / walltime.UNCALIBRATED_FLOPS
    assert small.epoch_s == pytest.approx(steps * walltime.PER_STEP_S + evaluate)  # bound by its steps
    # 6 operations per parameter and sample, split over the ranks, plus a forward pass over the test set
    n = costmodel.n_params(SHAPE["features"], "40-10", SHAPE["classes"])
    expected = (6 * n * SHAPE["train_samples"] / 2 + 2 * n * SHAPE["test_samples"] / 2) / walltime.UNCALIBRATED_FLOPS
    assert large.epoch_s == pytest.approx(expected)
    # a tiny net is bound by its steps; the server applies every worker's update in turn
    tiny = {**SHAPE, "features": 4, "train_samples": 105, "test_samples": 45}
    ps = walltime.uncalibrated({**ROW, "algorithm": "paramserver", "ranks": 3}, tiny)
    assert ps.epoch_s >= math.ceil(105 / (4 * 2)) * 2 * walltime.PER_STEP_S


def test_calibration_is_absent_until_a_study_has_run(tmp_path):
    assert walltime.calibration(tmp_path) == (None, None)
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics/runs.csv").write_text("dataset,ranks\niris,1\n")
    (tmp_path / "metrics/commbench.csv").write_text("bytes,one_way_s,alpha_s,beta_s_per_byte\n8,1e-6,2e-6,1e-10\n")
    runs, link = walltime.calibration(tmp_path)
    assert len(runs) == 1 and (link.alpha, link.beta) == (2e-6, 1e-10)


def test_the_data_shape_follows_subsets(tmp_path):
    for name, arr in {
        "train_y": np.zeros(100, dtype=np.int64),
        "test_y": np.zeros(30, dtype=np.int64),
        "train_x": np.zeros((100, 7), dtype=np.float32),
    }.items():
        np.save(tmp_path / f"{name}.npy", arr)
    (tmp_path / "classes.json").write_text(json.dumps(["a", "b", "c"]))
    assert walltime.data_shape(tmp_path, ROW) == {"train_samples": 100, "test_samples": 30, "features": 7, "classes": 3}
    assert walltime.data_shape(tmp_path, {**ROW, "train_samples": 40})["train_samples"] == 40
    ps = {**ROW, "algorithm": "paramserver", "ranks": 3, "samples_per_rank": 20}
    assert walltime.data_shape(tmp_path, ps)["train_samples"] == 40  # 2 training ranks x 20
