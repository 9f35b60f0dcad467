"""Where a run's files live, named once for the workflow's rules and the package alike: the roots
of run directories, training logs and checkpoints (relative to the working directory), the files a
finished run holds, and one run's paths from its name."""

from dataclasses import dataclass
from pathlib import Path

RAW_ROOT = "resources/raw"  # one fetched (downloaded, unpacked) dataset per folder
DATA_ROOT = "resources/data"  # one prepared dataset per folder
SYNTHETIC_ARCHIVE = "resources/synthetic/intel-synthetic.zip"  # the generated stand-in for the Intel archive
RUNS_ROOT = "results/runs"
TRAIN_LOGS = "logs/train"
CHECKPOINTS = "results/checkpoints"
RESULTS_ROOT = "results"  # results/<study>/: a study's tables, figures and report
# a finished run's files; the record comes last, so its presence means the others are complete
METRICS_FILE = "metrics.csv"
CONFUSION_FILE = "confusion.csv"
WEIGHTS_FILE = "weights.npz"
TIMELINE_FILE = "timeline.json"  # the last epoch's first steps, every rank (mpinet.engine.timeline)
RECORD_FILE = "run.json"
RUN_FILES = (METRICS_FILE, CONFUSION_FILE, WEIGHTS_FILE, TIMELINE_FILE, RECORD_FILE)
CHECKPOINT_FILE = "checkpoint.npz"
# the file in a fetched dataset that marks it as drawn by mpinet.datasets.synthetic, not real photographs
SYNTHETIC_MARKER = "SYNTHETIC.txt"


@dataclass(frozen=True)
class RunPaths:
    """One run's directory, log and checkpoint, from its name <dataset>/<grid path>."""

    name: str

    @property
    def dir(self) -> Path:
        return Path(RUNS_ROOT, self.name)

    @property
    def log(self) -> Path:
        return Path(TRAIN_LOGS, f"{self.name}.log")

    @property
    def checkpoint(self) -> Path:
        return Path(CHECKPOINTS, self.name, CHECKPOINT_FILE)

    @property
    def record(self) -> Path:
        return self.dir / RECORD_FILE


AUTO_CHOICE_FILE = "auto_choice.json"


def auto_choice_path(run_dir: str | Path) -> Path | None:
    """Where `auto`'s choice for a run's experiment is kept, shared by its seeds and launches: beside
    them, in the experiment's directory (a run's path ends .../seed~S/repeat~R); None for a run
    directory laid out otherwise (a hand-started run decides alone)."""
    run_dir = Path(run_dir)
    if run_dir.name.startswith("repeat~") and run_dir.parent.name.startswith("seed~"):
        return run_dir.parent.parent / AUTO_CHOICE_FILE
    return None


def study_dir(study: str) -> Path:
    return Path(RESULTS_ROOT, study)


def runs_table(study_directory: str | Path) -> Path:
    """A study's runs.csv: one row per run (mpinet.analysis.aggregate)."""
    return Path(study_directory, "metrics", "runs.csv")


def steps_table(study_directory: str | Path) -> Path:
    """A study's steps.csv: each job step of its packed allocations, from sacct (mpinet.analysis.allocation)."""
    return Path(study_directory, "metrics", "steps.csv")


def output_key(filename: str) -> str:
    """A run file's name as a rule's output key: metrics.csv -> metrics."""
    return filename.split(".")[0]
