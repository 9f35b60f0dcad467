"""The figures of a dataset, named once: the plots rule's outputs and their report entries, the
workflow's targets, the plotting code and the tests are built from this table. Each figure's
caption is workflow/report/<name>.rst."""

from dataclasses import dataclass
from pathlib import Path

from mpinet.files import atomic_path

DPI = 110  # every figure's resolution: the report's, the timeline's and `make compare`'s


@dataclass(frozen=True)
class Figure:
    name: str  # the PNG's name and the plot function's key
    category: str  # the report's section
    label: str  # the report's label for it


FIGURES = (
    Figure("curves", "Training curves", "loss and accuracy"),
    Figure("data_size", "Training curves", "by training-set size"),
    Figure("time_to_accuracy", "Training curves", "time to accuracy"),
    Figure("confusion", "Training curves", "confusion matrix"),
    Figure("scaling", "Scaling", "speedup and efficiency"),
    Figure("time_split", "Scaling", "compute vs communication"),
    Figure("timeline", "Scaling", "per-rank timeline"),
    Figure("class_counts", "Data", "samples per class"),
)
NAMES = tuple(f.name for f in FIGURES)
# the study's own figure, drawn once a packed allocation (make slurm-pack) has left its steps.csv
ALLOCATION = Figure("allocation", "SLURM", "packed allocation: steps over nodes and time")


def steps_table(study_directory: str | Path) -> Path:
    """A study's steps.csv: each job step of its packed allocations, from sacct (mpinet.analysis.allocation)."""
    return Path(study_directory, "metrics", "steps.csv")


def save_png(fig, path: str | Path) -> None:
    """Write a matplotlib figure as a PNG at `path`, its folder made if need be, atomically: a
    reader (the report, a rerun after a kill) sees the whole image or none."""
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    # tight_layout leaves a placeholder engine behind, and savefig draws a figure that has an engine
    # once more before the drawing it writes (40 % of its time); the layout is done, so drop it
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        fig.set_layout_engine(None)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=DPI)
