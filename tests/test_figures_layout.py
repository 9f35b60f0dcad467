"""Every figure the workflow draws (mpinet.analysis.figures.FIGURES, through plot_dataset as the plots
rule calls it), for a default-like study and studies of other shapes, reads: no two texts overlap, no
text leaves the canvas, no PNG is wider than 1,800 px, and a design has one name in every figure."""

import itertools
import json
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from mpinet.analysis.aggregate import summarize_runs
from mpinet.analysis.costmodel import Link, predict
from mpinet.analysis.figures import DPI, NAMES
from mpinet.analysis.plots import FigureInputs, plot_dataset
from mpinet.analysis.style import DESIGNS
from mpinet.study.experiments import DEFAULTS

MAX_WIDTH = 1800  # px at the report's DPI
BASE = dict(DEFAULTS, dataset="d", epochs=12, hidden="30-20", trained_samples=120, isolation="one-at-a-time", cores=2)
CLASSES = ["cat", "dog", "forest", "sea"]

# (design, ranks, other parameters) per study shape; every experiment ran with seeds 1 and 2
DEFAULT_LIKE = [
    *(("serial", 1, p) for p in ({}, {"learning_rate": 0.01, "faithful": True}, {"batch_size": 12})),
    *(("allreduce", r, {}) for r in (1, 2, 3)),
    *(("paramserver", r, {}) for r in (2, 3)),
    *(("allreduce", r, {"learning_rate": 0.01, "faithful": True}) for r in (1, 2)),
    ("allreduce", 1, {"batch_size": 12}),
    ("allreduce", 2, {"batch_size": 6}),
    *(("allreduce", r, {"samples_per_rank": 30, "trained_samples": 30 * r}) for r in (1, 2, 3)),
    *(("paramserver", r, {"samples_per_rank": 30, "trained_samples": 30 * (r - 1)}) for r in (2, 3)),
    *((a, 3, {"train_samples": 60, "trained_samples": 60}) for a in ("allreduce", "paramserver")),
]
SHAPES = {
    "default": DEFAULT_LIKE,
    "one design": [("serial", 1, {})],
    "one rank count": [(a, 2, {}) for a in ("allreduce", "paramserver", "node")],
    "train_samples sweep": [
        (a, r, {"train_samples": n, "trained_samples": n or 120})
        for n in (0, 30, 60)
        for a, r in (("serial", 1), ("allreduce", 2))
    ],
    "auto": [("serial", 1, {}), ("auto", 2, {"trained_as": "node"}), ("auto", 3, {"trained_as": "allreduce"})],
    "many designs": [("serial", 1, {}), *((a, r, {}) for a in list(DESIGNS)[1:-1] for r in (1, 2, 4))],
}


def _epochs(design: str, ranks: int, params: dict, seed: int, root) -> list[dict]:
    """A run's epoch rows: compute shrinks with the ranks, communication grows; accuracy climbs."""
    name = "-".join([design, str(ranks), f"s{seed}", *(f"{k}{v}" for k, v in params.items())])
    run = dict(BASE, algorithm=design, ranks=ranks, seed=seed, run_dir=str(root / name), **params)
    compute, comm = 0.08 / ranks, 0.004 * (ranks - 1) * (2 if design == "paramserver" else 1)
    return [
        dict(
            run,
            epoch=e,
            train_loss=1.0 / e + 0.01 * seed,
            train_accuracy=min(0.99, 0.3 + 0.06 * e),
            test_loss=1.0 / e,
            test_accuracy=min(0.97, 0.25 + 0.06 * e + 0.01 * seed),
            time_s=(compute + comm) * (1.5 if e == 1 else 1 + 0.02 * seed),
            compute_s=compute,
            comm_s=comm,
            wait_s=comm / 3,
            transfer_s=2 * comm / 3,
            eval_s=0.01,
            bytes_sent=1000 * (ranks - 1),
            cpu_share=1.0,
        )
        for e in range(1, BASE["epochs"] + 1)
    ]


def _run_files(run_dir, ranks: int) -> None:
    """A run's confusion matrix and timeline (the last epoch's first steps of every rank)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(5, index=CLASSES, columns=CLASSES).to_csv(run_dir / "confusion.csv")
    events = [
        {"ph": "X", "cat": cat, "tid": r, "ts": 1000 * s + start, "dur": 400, "args": {"step": s + 1}}
        for r in range(ranks)
        for s in range(8)
        for cat, start in (("compute", 0), ("exchange", 450))
    ]
    (run_dir / "timeline.json").write_text(json.dumps({"traceEvents": events}))


def _study(shape: str, root) -> tuple[FigureInputs, dict]:
    """The shape's epochs.csv, runs.csv, model.csv, summary.json and run files; the figures' paths."""
    rows = [row for d, r, p in SHAPES[shape] for seed in (1, 2) for row in _epochs(d, r, p, seed, root / "runs")]
    epochs = pd.DataFrame(rows)
    runs = summarize_runs(epochs, 0.9)
    for run_dir, ranks in zip(runs["run_dir"], runs["ranks"]):
        _run_files(Path(run_dir), ranks)
    model = predict(runs, {"measured here": Link(2e-6, 3e-10)}, range(1, 33))
    counts = {split: dict(zip(CLASSES, (30, 31, 29, 30))) for split in ("train", "test")}
    summary = {"classes": CLASSES, "counts": counts, "synthetic": True}
    for name, table in (("epochs", epochs), ("runs", runs), ("model", model.assign(dataset="d"))):
        table.to_csv(root / f"{name}.csv", index=False)
    (root / "summary.json").write_text(json.dumps(summary))
    confusions = [Path(d) / "confusion.csv" for d in runs["run_dir"]]
    inputs = FigureInputs(root / "epochs.csv", root / "runs.csv", root / "summary.json", confusions, root / "model.csv")
    return inputs, {name: root / "plots" / f"{name}.png" for name in NAMES}


def texts_of(fig) -> list:
    """Every non-empty text the figure draws: titles, axis labels, tick labels in view, legends, notes."""
    found = [fig._suptitle, *fig.texts]
    for ax in (a for a in fig.axes if a.get_visible()):
        found += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):
            found += [t for tick in axis._update_ticks() for t in (tick.label1, tick.label2) if t.get_visible()]
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        if legend is not None:
            found += [legend.get_title(), *legend.get_texts()]
    found = list({id(t): t for t in found if t is not None}.values())  # the suptitle is among fig.texts too
    return [t for t in found if t.get_visible() and t.get_text().strip()]


def layout_problems(fig) -> list[str]:
    """Pairs of texts whose boxes overlap and texts outside the canvas, drawn as save_png draws."""
    fig.set_dpi(DPI)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = [(t.get_text().replace("\n", " ")[:60], t.get_window_extent(renderer)) for t in texts_of(fig)]
    width, height = canvas.get_width_height()
    problems = [
        f"{label!r} leaves the canvas"
        for label, b in boxes
        if b.x0 < -1 or b.y0 < -1 or b.x1 > width + 1 or b.y1 > height + 1
    ]
    for (a, p), (b, q) in itertools.combinations(boxes, 2):
        dx, dy = min(p.x1, q.x1) - max(p.x0, q.x0), min(p.y1, q.y1) - max(p.y0, q.y0)
        if dx > 1 and dy > 1:  # more than a pixel each way: an antialiased edge is no overlap
            problems.append(f"{a!r} overlaps {b!r}")
    return problems


@pytest.fixture(scope="module", params=SHAPES)
def drawn(request, tmp_path_factory):
    """Every figure of one study shape: its name, the PNGs' paths and plot_dataset's texts."""
    inputs, out = _study(request.param, tmp_path_factory.mktemp("figures"))
    return request.param, out, plot_dataset("d", inputs, out, target=0.9)


def test_every_figure_of_every_study_shape_has_no_overlapping_text_and_fits_the_width(drawn):
    _, out, texts = drawn
    assert set(texts) == set(NAMES)
    problems = []
    for name in NAMES:
        with Image.open(out[name]) as png:
            if png.width > MAX_WIDTH:
                problems.append(f"{name}: {png.width} px wide")
        problems += [f"{name}: {p}" for p in layout_problems(texts[name]["figure"])]
    assert not problems, "\n".join(problems)


def test_a_design_has_one_name_in_every_figure_and_auto_names_what_it_trained(drawn):
    shape, _, texts = drawn
    words = " | ".join(t.get_text() for name in NAMES for t in texts_of(texts[name]["figure"]))
    for other in ("Allreduce", "Send/Recv", "parameter server", "Allgather", "shared memory", "first layer"):
        assert other not in words
    for design, _, params in SHAPES[shape]:
        name = f"auto → {params['trained_as']}" if design == "auto" else DESIGNS[design].name
        assert name in " ".join(texts["curves"]["legend"]) and name in " ".join(texts["scaling"]["legend"])
        assert name in words
    assert "train_samples=0" not in words


def test_the_compare_figure_keeps_long_experiment_names_and_its_legend_on_the_canvas(tmp_path):
    from mpinet.analysis.compare import figure

    names = [f"images allreduce {p} ranks batch 8 seed 1 lr=0.01 no-standardize train_samples=60" for p in (2, 3)]
    table = pd.DataFrame(
        {
            "experiment": [*names, "iris serial 1 rank batch 4 seed 1"],
            "time_ratio": [0.8, 1.3, 1.0],
            "time_ratio_ci_low": [0.7, 1.1, float("nan")],  # one launch on a side: no interval
            "time_ratio_ci_high": [0.9, 1.5, float("nan")],
            "verdict": ["faster", "slower", "no difference detected"],
        }
    )
    fig = figure(table, tmp_path / "compare.png", "B = results/after vs A = results/before")
    assert not layout_problems(fig)
    with Image.open(tmp_path / "compare.png") as png:
        assert png.width <= MAX_WIDTH
