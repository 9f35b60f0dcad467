"""An experiment's state and label as `make status` reports them, from the files a run and its data's jobs
leave; `make check` without references; the plan-time line on oversubscription."""

import os
import subprocess
import time

import numpy as np
import pandas as pd
import pytest
from test_workflow import SNAKEMAKE, copy_env, copy_repo, write_config

from mpinet.analysis.references import main as references_main
from mpinet.engine.checkpoint import keep_run_record, save_checkpoint
from mpinet.study.experiments import expand_sweeps
from mpinet.study.oversubscription import oversubscription_lines
from mpinet.study.status import Experiment, data_errors, experiment_labels, state, status_table


def _experiment(tmp_path) -> Experiment:
    return Experiment("iris/x", tmp_path / "runs/x", tmp_path / "logs/x.log", tmp_path / "checkpoints/x/checkpoint.npz")


def test_states_follow_the_files_a_run_leaves(tmp_path):
    e = _experiment(tmp_path)
    assert state(e) == ("missing", "")
    e.log.parent.mkdir(parents=True)
    e.log.write_text("[00:00:01] epoch 1/10\n")
    save_checkpoint(e.checkpoint, "sig", np.zeros(2), 3, [{"epoch": i} for i in (1, 2, 3)])
    assert state(e) == ("running", "checkpoint after epoch 3")
    old = time.time() - 3600
    os.utime(e.log, (old, old))
    assert state(e) == ("failed", "interrupted; resumes from its checkpoint after epoch 3")
    e.log.write_text("mpinet.train: error: training diverged in epoch 1: loss is nan\n")
    assert state(e) == ("failed", "mpinet.train: error: training diverged in epoch 1: loss is nan")


def test_a_pooled_run_whose_outputs_a_failed_neighbour_removed_is_not_failed(tmp_path):
    e = _experiment(tmp_path)
    save_checkpoint(e.checkpoint, "sig", np.zeros(2), 10, [{"epoch": i} for i in range(1, 11)])
    keep_run_record(e.checkpoint, {"ranks": 2})
    e.log.parent.mkdir(parents=True)
    e.log.write_text("wrote results/runs/x\n")
    assert state(e)[0] == "missing" and "final checkpoint" in state(e)[1]
    (e.run_dir).mkdir(parents=True)
    (e.run_dir / "run.json").write_text("{}")
    assert state(e) == ("done", "")


def _table(*sweeps: dict) -> pd.DataFrame:
    datasets = {d: {"format": "csv"} for d in {s["dataset"] for s in sweeps}}
    return expand_sweeps(list(sweeps), datasets)


def test_a_label_names_dataset_design_ranks_batch_seed_and_what_else_differs():
    table = _table(
        {"dataset": "iris", "algorithm": ["serial", "allreduce"], "ranks": [1, 2], "learning_rate": 0.3, "seed": 1},
        {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "learning_rate": 0.01, "faithful": True},
        {"dataset": "wine", "algorithm": "allreduce", "ranks": 2, "batch_size": 8, "epochs": 7, "repeats": 2},
    )
    labels = experiment_labels(table)
    assert labels == [
        "iris serial 1 rank batch 4 seed 1 lr=0.3",
        "iris allreduce 1 rank batch 4 seed 1 lr=0.3",
        "iris allreduce 2 ranks batch 4 seed 1 lr=0.3",
        "iris allreduce 2 ranks batch 4 seed 1 lr=0.01 faithful",
        # wine's options are the same for all its experiments (epochs differs only from iris'): not shown
        "wine allreduce 2 ranks batch 8 seed 1 repeat 1",
        "wine allreduce 2 ranks batch 8 seed 1 repeat 2",
    ]


def test_a_label_shows_a_switch_or_an_off_count_only_where_it_is_on():
    table = _table(
        {"dataset": "iris", "algorithm": "serial", "standardize": [True, False], "train_samples": [0, 60]},
    )
    assert experiment_labels(table) == [
        "iris serial 1 rank batch 4 seed 1",
        "iris serial 1 rank batch 4 seed 1 no-standardize",
        "iris serial 1 rank batch 4 seed 1 train_samples=60",
        "iris serial 1 rank batch 4 seed 1 train_samples=60 no-standardize",
    ]


def _study(tmp_path, table: pd.DataFrame) -> list[Experiment]:
    names = [f"{d}/x{i}" for i, d in enumerate(table["dataset"])]
    return [Experiment(n, tmp_path / "runs" / n, tmp_path / "logs" / f"{n}.log", tmp_path / "ck" / n) for n in names]


LOGS = {"fetch": "logs/data/fetch_{dataset}.log", "prepare": "logs/data/prepare_{dataset}.log"}
PREPARED = ["data/{dataset}/train_x.npy", "data/{dataset}/test_x.npy"]
BAD_VALUE = "mpinet.datacli: error: flowers.csv: row 3, column 'b': 'oops' is not a number"


def _logs(tmp_path, monkeypatch, **texts: str) -> None:
    """Data job logs under tmp_path (the working directory): job_dataset=text."""
    monkeypatch.chdir(tmp_path)
    for name, text in texts.items():
        (tmp_path / "logs/data").mkdir(parents=True, exist_ok=True)
        (tmp_path / f"logs/data/{name}.log").write_text(text)


def test_a_failed_preparation_is_failed_with_its_error_line_and_holds_its_experiments_back(tmp_path, monkeypatch):
    table = _table({"dataset": "flowers", "algorithm": ["serial", "allreduce"]}, {"dataset": "iris"})
    experiments = _study(tmp_path, table)
    (experiments[2].run_dir).mkdir(parents=True)
    (experiments[2].run_dir / "run.json").write_text("{}")
    _logs(tmp_path, monkeypatch, prepare_flowers=f"reading flowers.csv\n{BAD_VALUE}\n", prepare_iris="prepared\n")
    lines = status_table(experiments, table, LOGS, PREPARED).splitlines()
    assert lines[1].split() == ["failed", "prepare", "flowers", *BAD_VALUE.split(), "(logs/data/prepare_flowers.log)"]
    assert (
        lines[2].startswith("failed   flowers serial 1 rank batch 4 seed 1 ") and "prepare flowers failed" in lines[2]
    )
    assert lines[3].startswith("failed   flowers allreduce 1 rank")
    assert lines[4].split() == ["done", *"iris serial 1 rank batch 4 seed 1".split()]
    assert lines[-1] == "1 done, 2 failed of 3 experiments; prepare flowers failed"
    assert all(len(line) < 160 for line in lines)


def test_a_data_error_counts_while_the_data_is_not_prepared_and_the_newest_failed_job_is_named(tmp_path, monkeypatch):
    _logs(tmp_path, monkeypatch, prepare_flowers=BAD_VALUE, fetch_flowers="mpinet.datacli: error: no such file\n")
    old = time.time() - 60
    os.utime(tmp_path / "logs/data/prepare_flowers.log", (old, old))  # an earlier run's preparation
    assert data_errors(["flowers"], LOGS, PREPARED) == {
        "flowers": ("fetch flowers", "mpinet.datacli: error: no such file (logs/data/fetch_flowers.log)")
    }
    for f in PREPARED:
        (tmp_path / f.format(dataset="flowers")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f.format(dataset="flowers")).touch()
    assert data_errors(["flowers"], LOGS, PREPARED) == {}  # prepared since: the logs are history


def test_the_count_line_lists_the_states_in_a_fixed_order(tmp_path):
    table = _table({"dataset": "iris", "algorithm": ["serial", "allreduce"], "ranks": [1, 2]})
    experiments = _study(tmp_path, table)
    experiments[1].log.parent.mkdir(parents=True)
    experiments[1].log.write_text("mpinet.train: error: training diverged in epoch 1: loss is nan\n")
    experiments[0].run_dir.mkdir(parents=True)
    (experiments[0].run_dir / "run.json").write_text("{}")
    out = status_table(experiments, table)
    assert "mpinet.train: error: training diverged" in out.splitlines()[2]
    assert out.splitlines()[-1] == "1 done, 1 failed, 1 missing of 3 experiments"


def test_oversubscription_is_one_line_naming_each_kind_of_experiment_locally_only():
    table = _table(
        {"dataset": "iris", "algorithm": ["allreduce", "paramserver"], "ranks": [1, 2, 3], "seed": [1, 2]},
        {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "blas_threads": 2},
    )
    (line,) = oversubscription_lines(table, 2)
    assert line.startswith("5 experiments need more ranks than this machine's 2 cores: ")
    assert line.endswith("; they run oversubscribed, and the figures mark them")
    assert "iris allreduce 3 ranks, iris paramserver 3 ranks, iris allreduce 2 ranks × 2 BLAS threads;" in line
    assert oversubscription_lines(table, 4) == []
    assert oversubscription_lines(table, None) == []  # planned for SLURM: its nodes' cores decide


def test_check_without_references_says_so_and_exits_0(tmp_path, capsys):
    config = tmp_path / "plain.yaml"
    config.write_text("study: plain\n")
    assert references_main([str(config)]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"{config}: no references to check")
    config.write_text("study: plain\nreferences:\n  - {dataset: iris, algorithm: serial, median_epoch_s: 1}\n")
    assert references_main([str(config), "--runs", str(tmp_path / "runs.csv")]) == 2  # nothing ran: an error
    assert "runs.csv: missing" in capsys.readouterr().err
    assert references_main([str(tmp_path / "absent.yaml")]) == 2


@pytest.mark.workflow
def test_a_study_whose_preparation_fails_shows_it_failed_and_says_once_that_it_oversubscribes(tmp_path):
    wd = copy_repo(tmp_path)
    rows = "".join(f"{i},{i},{'xy'[i % 2]}\n" for i in range(30))
    (wd / "flowers.csv").write_text("a,b,label\n1,2,x\n3,oops,y\n" + rows)  # row 3: not a number
    over = (os.cpu_count() or 1) + 1
    datasets = {"flowers": {"source": str(wd / "flowers.csv"), "format": "csv"}}
    experiments = [{"dataset": "flowers", "algorithm": "allreduce", "ranks": [1, over], "epochs": 2}]
    write_config(wd, {"datasets": datasets, "experiments": experiments})
    run = [*SNAKEMAKE, "--configfile", "config/test.yaml"]
    p = subprocess.run([*run, "--cores", "2"], cwd=wd, capture_output=True, text=True, env=copy_env(wd), timeout=600)
    assert p.returncode != 0
    said = [line for line in (p.stdout + p.stderr).splitlines() if "more ranks than this machine's" in line]
    assert said == [
        f"config: 1 experiment needs more ranks than this machine's {over - 1} cores: "
        f"flowers allreduce {over} ranks; it runs oversubscribed, and the figures mark it"
    ]
    status = [*SNAKEMAKE, "status", "--configfile", "config/test.yaml", "--cores", "1", "--nolock", "--quiet", "all"]
    p = subprocess.run(status, cwd=wd, capture_output=True, text=True, env=copy_env(wd), timeout=300)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, p.stderr
    error = "mpinet.datacli: error: "
    assert (
        lines[1].startswith("failed   prepare flowers ") and error in lines[1] and "'oops' is not a number" in lines[1]
    )
    assert lines[2].startswith("failed   flowers allreduce 1 rank batch 4 seed 1 ")
    assert lines[3].startswith(f"failed   flowers allreduce {over} ranks batch 4 seed 1 ")
    assert lines[4] == "2 failed of 2 experiments; prepare flowers failed"


def test_a_config_that_is_not_yaml_is_one_line_naming_the_file_line_and_column(tmp_path, capsys):
    """make run checks CONFIG with this before Snakemake, whose own message names neither."""
    from mpinet.study.status import main

    bad = tmp_path / "study.yaml"
    bad.write_text("study: x\nexperiments:\n  - algorithm: [serial\n    ranks: 1\n")
    assert main(["study", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {bad}: not valid YAML (line 4, column 10: expected ',' or ']', but got ':')\n"
    good = tmp_path / "fine.yaml"
    good.write_text("study: fine\n")
    assert main(["study", str(good)]) == 0 and capsys.readouterr().out == "fine\n"
