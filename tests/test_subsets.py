"""Training on a subset (train_samples) and weak scaling (samples_per_rank): which rows, the errors
for sizes that cannot work, the equivalences on a subset, the tables, the model and the figures."""

import json
import os

import numpy as np
import pandas as pd
import pytest
from conftest import run_train, weights, write_dataset

from mpinet import MpinetError
from mpinet.datasets import dataset
from mpinet.engine.checkpoint import Store
from mpinet.engine.comm import Comm
from mpinet.engine.loop import train
from mpinet.engine.options import Impossible, Options, check_options
from mpinet.study.experiments import DEFAULTS, check_sizes, expand_sweeps

F64 = ("--dtype", "float64")


def _args(data, out, *extra):
    return ("--data", data, "--out", out, "--epochs", 3, "--learning-rate", 0.5, *F64, *extra)


def test_a_subset_is_stratified_nested_and_holds_every_class():
    rng = np.random.default_rng(3)
    y = rng.permutation(np.repeat([0, 1, 2, 3], [500, 300, 150, 50]))
    counts = {n: np.bincount(y[dataset.subset_rows(y, n, 4)], minlength=4) for n in (4, 40, 220, 1000)}
    assert counts[4].tolist() == [1, 1, 1, 1]  # the smallest subset still has every class
    for n in (40, 220):
        share = counts[n] / n
        assert np.abs(share - np.array([0.5, 0.3, 0.15, 0.05])).max() <= 1.5 / n * 4, (n, counts[n])
    small, large = dataset.subset_rows(y, 220, 4), dataset.subset_rows(y, 400, 4)
    assert set(small) <= set(large) and len(set(small)) == 220  # nested, no repeats
    assert np.all(np.diff(small) > 0)  # ascending: the memory map is read in file order
    assert np.array_equal(dataset.subset_rows(y, 1000, 4), np.arange(1000))
    assert np.array_equal(small, dataset.subset_rows(y.copy(), 220, 4))  # fixed: no seed, no state


@pytest.mark.parametrize(
    "opts,ranks,message",
    [
        (Options(train_samples=500), 1, "train_samples 500 is more than the 100 training samples"),
        (Options(train_samples=2), 1, "train_samples 2 cannot hold a sample of each of the data's 3 classes"),
        (Options(algorithm="allreduce", train_samples=3), 4, "train_samples 3 gives fewer samples than the 4"),
        (
            Options(algorithm="allreduce", samples_per_rank=30),
            4,
            "samples_per_rank 30 x 4 training ranks = 120 is more than the 100 training samples",
        ),
        (Options(train_samples=-1), 1, "train_samples must be 0 or a positive integer"),
    ],
)
def test_a_subset_that_cannot_work_names_the_key_and_the_datas_size(opts, ranks, message):
    with pytest.raises(MpinetError, match=message):
        check_options(opts, ranks, 100, 3)


def test_train_samples_and_samples_per_rank_exclude_each_other():
    with pytest.raises(Impossible):
        check_options(Options(train_samples=10, samples_per_rank=5), 1, None)
    grid = expand_sweeps(
        [{"dataset": "d", "train_samples": [0, 20], "samples_per_rank": [0, 5]}], {"d": {}}
    )  # the crossed combination with both set is dropped
    assert sorted(zip(grid["train_samples"], grid["samples_per_rank"])) == [(0, 0), (0, 5), (20, 0)]
    with pytest.raises(MpinetError, match="exclude each other"):
        expand_sweeps([{"dataset": "d", "train_samples": 20, "samples_per_rank": 5}], {"d": {}})


def test_sizes_are_checked_against_the_prepared_data_before_anything_runs():
    grid = expand_sweeps(
        [{"dataset": ["d", "e"], "algorithm": "allreduce", "ranks": 2, "train_samples": 90}], {"d": {}, "e": {}}
    )
    check_sizes(grid, {"d": (100, 3)}.get)  # e not prepared yet: its training job checks
    with pytest.raises(MpinetError, match="dataset e, allreduce on 2 ranks: train_samples 90 is more than the 60"):
        check_sizes(grid, {"d": (100, 3), "e": (60, 3)}.get)


@pytest.mark.mpi
@pytest.mark.parametrize("shuffle", ["samples", "batches"])
def test_on_a_subset_allreduce_matches_serial_and_the_server_matches_allreduce(tmp_path, shuffle):
    data = write_dataset(tmp_path / "d", n_train=90, n_test=10)
    before = {p.name: p.stat().st_size for p in data.iterdir()}
    sub = ("--train-samples", 41, "--shuffle", shuffle)  # 41: the last global batch is partial
    run_train(None, *_args(data, tmp_path / "s", "--batch-size", 8, *sub))
    run_train(2, *_args(data, tmp_path / "a", "--batch-size", 4, "--algorithm", "allreduce", *sub))
    run_train(3, *_args(data, tmp_path / "p", "--batch-size", 4, "--algorithm", "paramserver", *sub))
    run_train(None, *_args(data, tmp_path / "all", "--batch-size", 8, "--shuffle", shuffle))
    s, a, p = weights(tmp_path / "s"), weights(tmp_path / "a"), weights(tmp_path / "p")
    assert np.abs(s - a).max() < 1e-10 and np.abs(a - p).max() < 1e-10
    assert np.abs(s - weights(tmp_path / "all")).max() > 1e-3  # the subset is not the whole set
    for run in ("s", "a", "p"):
        meta = json.loads((tmp_path / run / "run.json").read_text())
        assert meta["data"]["train_samples"] == 41 and meta["data"]["available_train_samples"] == 90
        assert len(pd.read_csv(tmp_path / run / "metrics.csv")) == 3
    # no second copy of the training array: the data directory is as it was, and no run wrote
    # anything near the subset's size (41 rows x 5 float32 features)
    assert {p.name: p.stat().st_size for p in data.iterdir()} == before
    written = [f for run in ("s", "a", "p") for f in (tmp_path / run).rglob("*")]
    assert not any(f.suffix == ".npy" for f in written), written


def test_a_subset_trains_only_its_rows():
    """Rows outside the subset never reach the gradient: damaging them changes nothing."""
    d = write_dataset_like(n=60)
    opts = Options(algorithm="serial", hidden=(6,), epochs=2, dtype="float64", train_samples=20)
    clean = train(d, opts, Comm(None)).params
    keep = dataset.subset_rows(d.train_y, 20, 3)
    outside = np.setdiff1d(np.arange(60), keep)
    d.train_x[outside] = 1e6  # a copy in memory, not the file
    assert np.array_equal(train(d, opts, Comm(None)).params, clean)


def write_dataset_like(n: int) -> dataset.Arrays:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, n)
    x = (rng.normal(size=(n, 5)) + y[:, None]).astype(np.float32)
    return dataset.Arrays(x, y, x[:10].copy(), y[:10].copy(), ["a", "b", "c"], fingerprint="test")


def test_a_checkpoint_of_one_subset_never_resumes_onto_another(tmp_path):
    d = write_dataset(tmp_path / "d", n_train=80)
    arrays = dataset.load(d)
    ck = tmp_path / "ck" / "checkpoint.npz"
    first = Options(hidden=(6,), epochs=4, dtype="float64", train_samples=30)
    train(arrays, first, Comm(None), Store(ck))
    messages = []
    other = Options(hidden=(6,), epochs=4, dtype="float64", train_samples=40)
    result = train(arrays, other, Comm(None), Store(ck, log=messages.append))
    assert result.resumed_from_epoch == 0, messages
    assert np.array_equal(result.params, train(arrays, other, Comm(None)).params)


@pytest.mark.mpi
def test_samples_per_rank_grows_the_training_set_with_the_ranks(tmp_path):
    data = write_dataset(tmp_path / "d", n_train=90, n_test=10)
    run_train(None, *_args(data, tmp_path / "one", "--samples-per-rank", 20))
    run_train(3, *_args(data, tmp_path / "three", "--algorithm", "allreduce", "--samples-per-rank", 20))
    run_train(3, *_args(data, tmp_path / "ps", "--algorithm", "paramserver", "--samples-per-rank", 20))
    sizes = [
        json.loads((tmp_path / r / "run.json").read_text())["data"]["train_samples"] for r in ("one", "three", "ps")
    ]
    assert sizes == [20, 60, 40]  # the server's rank 0 trains on nothing
    p = run_train(3, *_args(data, tmp_path / "big", "--algorithm", "allreduce", "--samples-per-rank", 40), check=False)
    assert p.returncode != 0
    assert "samples_per_rank 40 x 3 training ranks = 120 is more than the 90 training samples" in p.stderr
    assert "Traceback" not in p.stderr


# (algorithm, ranks, training samples, samples_per_rank, epoch seconds): a serial run and a 1.67x Allreduce
STRONG = [("serial", 1, 100, 0, 1.0), ("allreduce", 2, 100, 0, 0.6)]


def _run(algorithm, ranks, epoch_s, **keys):
    return dict(DEFAULTS, dataset="d", algorithm=algorithm, ranks=ranks, median_epoch_s=epoch_s, **keys)


def test_weak_efficiency_divides_the_one_rank_time_with_k_by_the_p_rank_time_with_p_k(tmp_path):
    from mpinet.analysis.aggregate import summarize_runs

    weak = [("serial", 1, 20, 20, 0.5), ("allreduce", 2, 40, 20, 0.625), ("allreduce", 4, 80, 20, 1.0)]
    epochs = _epochs_of(tmp_path, [*STRONG, *weak])
    runs = summarize_runs(epochs, 0.9).set_index(["samples_per_rank", "ranks"])
    assert runs.loc[(0, 2), "speedup"] == pytest.approx(1 / 0.6)
    assert np.isnan(runs.loc[(0, 2), "weak_efficiency"])
    assert runs.loc[(20, 2), "weak_efficiency"] == pytest.approx(0.8)
    assert runs.loc[(20, 4), "weak_efficiency"] == pytest.approx(0.5)
    assert np.isnan(runs.loc[(20, 4), "speedup"]) and np.isnan(runs.loc[(20, 4), "efficiency"])
    assert runs.loc[(20, 4), "trained_samples"] == 80 and runs.loc[(20, 4), "train_samples"] == 0


def _epochs_of(tmp_path, runs) -> pd.DataFrame:
    """Three epochs of each (algorithm, ranks, training samples, samples_per_rank, epoch seconds)."""
    rows = []
    for algorithm, ranks, n, k, t in runs:
        run = _run(algorithm, ranks, t, samples_per_rank=k)
        rows += _epochs(run, n, t, tmp_path / f"{algorithm}{ranks}-{n}-{k}")
    return pd.DataFrame(rows)


def _epochs(run: dict, n: int, t: float, d) -> list[dict]:
    base = {k: v for k, v in run.items() if k != "median_epoch_s"}
    return [
        dict(
            base,
            run_dir=str(d),
            train_samples=n if not run.get("samples_per_rank") else 0,
            trained_samples=n,
            epoch=e,
            time_s=t,
            compute_s=t,
            comm_s=0.0,
            train_loss=1.0,
            train_accuracy=0.5,
            test_loss=1.0,
            test_accuracy=0.5,
            bytes_sent=0,
            hidden="30-20",
        )
        for e in (1, 2, 3)
    ]


def test_the_model_predicts_weak_scaling_from_the_compute_per_sample():
    from mpinet.analysis.costmodel import Link, Work, epoch_seconds, layer_sizes, predict

    base = dict(DEFAULTS, dataset="d", hidden="30-20", features=100, classes=3, median_compute_s=0.2)
    runs = pd.DataFrame(
        [
            dict(base, algorithm="serial", ranks=1, train_samples=100, samples_per_rank=100),
            dict(base, algorithm="allreduce", ranks=2, train_samples=200, samples_per_rank=100),
        ]
    )
    link = Link(1e-5, 1e-9)
    table = predict(runs, {"here": link}, [1, 2, 4])
    weak = table[(table["scaling"] == "weak") & (table["algorithm"] == "allreduce")].set_index("ranks")
    expected = epoch_seconds("allreduce", 4, Work(400, 4, 0.002, layer_sizes(100, "30-20", 3), 4), link) / (0.002 * 100)
    assert weak.loc[4, "weak_efficiency"] == pytest.approx(1 / expected)
    assert weak.loc[4, "trained_samples"] == 400 and weak["speedup"].isna().all()
    assert weak.loc[1, "weak_efficiency"] == pytest.approx(1.0)
    assert set(table["scaling"]) == {"weak"}  # no strong prediction from weak-scaling runs


def test_the_figures_show_data_size_curves_and_a_weak_scaling_panel(tmp_path):
    from mpinet.analysis.aggregate import summarize_runs
    from mpinet.analysis.plots import data_size
    from mpinet.analysis.scaling import scaling

    epochs = _epochs_of(
        tmp_path,
        [
            *STRONG,
            ("serial", 1, 30, 0, 0.3),
            ("allreduce", 2, 30, 0, 0.2),
            ("paramserver", 3, 30, 0, 0.4),
            ("paramserver", 3, 100, 0, 0.9),
            ("serial", 1, 20, 20, 0.2),
            ("allreduce", 2, 40, 20, 0.25),
        ],
    )
    runs = summarize_runs(epochs, 0.9)
    texts = scaling(runs, "d", tmp_path / "scaling.png")
    assert len(texts["ylabels"]) == 4 and "weak-scaling efficiency" in texts["ylabels"][2]
    assert os.path.getsize(tmp_path / "scaling.png") > 10_000
    texts = data_size(epochs, "d", tmp_path / "size.png")
    assert "training-set size" in texts["title"]
    assert {"30 samples", "100 samples"} <= set(texts["legend"])
    assert "20 samples" not in texts["legend"]  # weak-scaling runs left out
