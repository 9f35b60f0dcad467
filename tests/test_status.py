"""An experiment's state as `make status` reports it, from the files a run leaves."""

import os
import time

import numpy as np

from mpinet.engine.checkpoint import keep_run_record, save_checkpoint
from mpinet.study.status import Experiment, state


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
