"""A study's grid as one object: its experiments table, where each run lives, and what the workflow
asks of a run by its name <dataset>/<grid path> (its row, its trainer arguments, its launch
priority, the files the tables read). Built once per workflow run; rules reach it through
one-line lambdas."""

from dataclasses import dataclass, field

import pandas as pd

from mpinet.layout import CONFUSION_FILE, METRICS_FILE, RECORD_FILE, RunPaths
from mpinet.study.experiments import grid_paths, launch_order, train_arguments
from mpinet.study.status import Experiment


@dataclass(frozen=True)
class Grid:
    experiments: pd.DataFrame  # one row per experiment (mpinet.study.experiments.expand_sweeps)
    names: tuple[str, ...]  # each row's run name, <dataset>/<grid path>, in table order
    # look-ups by run name: a dict per job (Paramspace.instance costs 5 ms a call, most of a
    # 1,000-experiment dry run)
    rows: dict = field(repr=False)
    priorities: dict = field(repr=False)

    @classmethod
    def of(cls, experiments: pd.DataFrame) -> "Grid":
        names = tuple(grid_paths(experiments))
        rows = dict(zip(names, experiments.to_dict("records")))
        # the order timed runs are launched in (designs side by side, whole rounds of repeats)
        order = launch_order(experiments)
        priorities = dict(zip(names, (len(experiments) - i for i in order)))
        return cls(experiments, names, rows, priorities)

    def arguments(self, name: str) -> str:
        """The run's `python -m mpinet.train` options."""
        return train_arguments(self.rows[name])

    def nodes(self, name: str) -> int | None:
        """Nodes the run's ranks are spread over; None lets the scheduler place them."""
        nodes = self.rows[name]["nodes"]
        return None if pd.isna(nodes) else int(nodes)

    def widest(self) -> int | None:
        """The largest node count any experiment asks for (None: none asks)."""
        nodes = self.experiments["nodes"].max()
        return None if pd.isna(nodes) else int(nodes)

    def run_dirs(self) -> list[str]:
        """results/runs/<dataset>/<grid path> of every experiment, in table order."""
        return [str(RunPaths(n).dir) for n in self.names]

    def status_rows(self) -> list[Experiment]:
        """Every experiment with its run directory, log and checkpoint, for the status view."""
        paths = (RunPaths(n) for n in self.names)
        return [Experiment(p.name, p.dir, p.log, p.checkpoint) for p in paths]

    def runs(self) -> list[dict]:
        """Every experiment's parameters and run directory, for the aggregation."""
        return [dict(r, dir=d) for r, d in zip(self.experiments.to_dict("records"), self.run_dirs())]

    def run_files(self) -> list[str]:
        """The files of every run the tables read."""
        return [f"{d}/{f}" for d in self.run_dirs() for f in (METRICS_FILE, RECORD_FILE)]

    def confusion_files(self, dataset: str) -> list[str]:
        """The confusion matrices of one dataset's runs, for its figures."""
        return self.dataset_files(dataset, CONFUSION_FILE)

    def dataset_files(self, dataset: str, name: str) -> list[str]:
        """One file of each of a dataset's runs (a confusion matrix, a timeline), for its figures."""
        pairs = zip(self.run_dirs(), self.experiments["dataset"])
        return [f"{d}/{name}" for d, ds in pairs if ds == dataset]
