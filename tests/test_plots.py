import json

import numpy as np
import pandas as pd
import pytest
from conftest import run_train, write_dataset
from PIL import Image

from mpinet.analysis.aggregate import Tables, write_tables
from mpinet.analysis.figures import FIGURES, NAMES
from mpinet.analysis.plots import FigureInputs, plot_dataset
from mpinet.study.experiments import DEFAULTS


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """Five real runs of a small dataset (serial, Allreduce on 1 and 2 ranks, parameter server on 2 and 3)."""
    tmp = tmp_path_factory.mktemp("plots")
    data = write_dataset(tmp / "data", n_train=90, n_test=30)
    (data / "summary.json").write_text(
        json.dumps(
            {
                "classes": ["c0", "c1", "c2"],
                "counts": {"train": {"c0": 30, "c1": 31, "c2": 29}, "test": {"c0": 10, "c1": 10, "c2": 10}},
            }
        )
    )
    runs = []
    for algorithm, ranks in (("serial", 1), ("allreduce", 1), ("allreduce", 2), ("paramserver", 2), ("paramserver", 3)):
        out = tmp / "runs" / f"{algorithm}-{ranks}"
        launcher = None if algorithm == "serial" else ranks
        run_train(
            launcher, "--data", data, "--out", out, "--algorithm", algorithm, "--epochs", 8, "--learning-rate", 1.0
        )
        runs.append(
            dict(DEFAULTS, dataset="small", algorithm=algorithm, ranks=ranks, epochs=8, hidden="30-20", dir=out)
        )
    m = tmp / "metrics"
    m.mkdir()
    write_tables(runs, 0.8, Tables(m / "epochs.csv", m / "runs.csv", m / "seeds.csv"))
    out = {f: tmp / "plots" / f"{f}.png" for f in NAMES}
    confusions = [r["dir"] / "confusion.csv" for r in runs]
    inputs = FigureInputs(m / "epochs.csv", m / "runs.csv", data / "summary.json", confusions)
    texts = plot_dataset("small", inputs, out, target=0.8)
    return out, texts, m


@pytest.mark.mpi  # small_run trains under mpiexec
def test_every_figure_is_a_real_non_blank_png(small_run):
    out, texts, _ = small_run
    assert set(texts) == set(NAMES)  # every figure of the table, drawn
    for name, path in out.items():
        with Image.open(path) as img:
            assert img.format == "PNG" and img.width > 400 and img.height > 300, name
            pixels = np.asarray(img.convert("L"))
        assert pixels.std() > 10, f"{name} looks blank"


@pytest.mark.mpi  # small_run trains under mpiexec
def test_figures_carry_titles_axis_labels_with_units_and_design_legends(small_run):
    _, texts, _ = small_run
    assert "training curves" in texts["curves"]["title"]
    assert texts["curves"]["xlabels"] == ["epoch", "epoch"]
    assert {"allreduce", "paramserver", "serial"} <= set(texts["curves"]["legend"])
    assert texts["scaling"]["xlabels"][0] == "MPI processes (ranks)"
    assert "ideal" in texts["scaling"]["legend"] and "speedup" in texts["scaling"]["ylabels"][0]
    assert texts["time_split"]["ylabels"] == ["time per epoch and rank (ms)"]
    assert texts["time_to_accuracy"]["xlabels"] == ["training wall-clock time (s)"]
    assert "best run" in texts["confusion"]["title"]
    assert texts["confusion"]["xlabels"] == ["predicted class"]
    assert texts["class_counts"]["ylabels"] == ["samples"]


@pytest.mark.mpi  # small_run trains under mpiexec
def test_tables_hold_every_run_and_epoch(small_run):
    _, _, m = small_run
    epochs, runs = pd.read_csv(m / "epochs.csv"), pd.read_csv(m / "runs.csv")
    assert len(epochs) == 5 * 8 and len(runs) == 5
    assert runs.loc[runs["algorithm"] == "serial", "speedup"].item() == 1.0
    assert runs["speedup"].notna().all()
    assert (runs.loc[runs["ranks"] > 1, "comm_share"] > 0).all()


def test_other_swept_parameters_become_named_variants():
    from mpinet.analysis.style import labelled

    df = pd.DataFrame(
        [
            dict(DEFAULTS, hidden="30-20", algorithm="serial", ranks=1, learning_rate=lr, faithful=f)
            for lr, f in ((0.3, False), (0.01, True))
        ]
    )
    assert sorted(labelled(df)["variant"]) == ["learning_rate=0.01, faithful=True", "learning_rate=0.3, faithful=False"]
    assert set(labelled(df.iloc[:1])["variant"]) == {""}


@pytest.mark.mpi  # small_run trains under mpiexec
def test_the_intel_figure_carries_the_originals_numbers_relative_to_their_first_point(small_run, tmp_path):
    import pandas as pd

    from mpinet.analysis.scaling import ORIGINAL_INTEL, scaling

    _, _, m = small_run
    texts = scaling(pd.read_csv(m / "runs.csv"), "intel", tmp_path / "s.png", original=True)
    labels = [t for t in texts["legend"] if t.startswith("original Go")]
    assert len(labels) == 2 and all("summed updates" in t and "its own 7 processes" in t for t in labels)
    assert ORIGINAL_INTEL["allreduce"][7] / ORIGINAL_INTEL["allreduce"][30] == pytest.approx(90 / 44)
    assert not [t for t in scaling(pd.read_csv(m / "runs.csv"), "x", tmp_path / "t.png")["legend"] if "original" in t]


@pytest.mark.mpi  # small_run trains under mpiexec
def test_the_scaling_figure_draws_the_cost_models_lines_to_32_ranks(small_run, tmp_path):
    import pandas as pd

    from mpinet.analysis.costmodel import Link, predict
    from mpinet.analysis.scaling import scaling

    _, _, m = small_run
    runs = pd.read_csv(m / "runs.csv")
    model = predict(runs, {"measured here": Link(2e-6, 3e-10)}, range(1, 33))
    texts = scaling(runs, "small", tmp_path / "s.png", model=model)
    drawn = texts["lines"]["model: allreduce (MPI timed here)"]
    # through the powers of two and the rank counts measured, never between (no zig-zag)
    shown = sorted({1, 2, 4, 8, 16, 32} | set(runs["ranks"]))
    expected = model[(model["algorithm"] == "allreduce") & model["ranks"].isin(shown)].sort_values("ranks")
    assert [x for x, _ in drawn] == shown
    assert [y for _, y in drawn] == pytest.approx(expected["speedup"].tolist())


def test_a_figure_with_more_variants_than_rows_names_the_ones_it_left_out(tmp_path, capsys):
    from mpinet.analysis.plots import MAX_VARIANT_ROWS, training_curves

    rows = [
        dict(DEFAULTS, hidden="30-20", dataset="d", algorithm="serial", ranks=1, learning_rate=lr, seed=1,
             run_dir=f"r{i}", epoch=e, train_loss=1.0 / e, test_accuracy=0.5, time_s=0.1)
        for i, lr in enumerate(0.1 * (k + 1) for k in range(MAX_VARIANT_ROWS + 2))
        for e in (1, 2)
    ]  # fmt: skip
    texts = training_curves(pd.DataFrame(rows), "d", tmp_path / "curves.png")
    assert "2 more variants not shown: learning_rate=0.7; learning_rate=0.8" in texts["title"]
    assert "2 more variants not shown" in capsys.readouterr().err


def test_every_figure_of_the_table_has_its_caption_and_a_known_report_section():
    from conftest import REPO

    for f in FIGURES:
        assert (REPO / "workflow" / "report" / f"{f.name}.rst").read_text().strip(), f.name
    assert {f.category for f in FIGURES} == {"Training curves", "Scaling", "Data"}


@pytest.mark.mpi  # small_run trains under mpiexec
def test_the_timeline_figure_draws_one_run_per_design_at_its_largest_rank_count(small_run):
    _, texts, _ = small_run
    rows = texts["timeline"]["rows"]
    # serial on 1 rank, allreduce on 2 (not its 1-rank run), the parameter server on 3 (not on 2)
    assert rows == [
        "serial, rank 0",
        "allreduce, rank 0",
        "allreduce, rank 1",
        "paramserver, rank 0 (server)",
        "paramserver, rank 1",
        "paramserver, rank 2",
    ]
    assert "compute (forward, backward)" in texts["timeline"]["legend"]
    assert "server: apply one worker's update" in texts["timeline"]["legend"]
    assert texts["timeline"]["xlabels"] == ["milliseconds from the start of the last epoch (its first 6 steps)"]


def test_every_design_has_a_colour_and_names():
    """The figures' design table and the engine's ALGORITHMS are lists that must agree, in order; a
    design's name in a figure is the one the config, the report and the CLI use."""
    from mpinet.analysis.style import DESIGNS
    from mpinet.engine.options import ALGORITHMS

    assert tuple(DESIGNS) == ALGORITHMS
    assert all(d.name == a for a, d in DESIGNS.items())
    assert len({d.color for d in DESIGNS.values()}) == len(DESIGNS)  # no two designs share a colour
