"""Upgrading a study's working directory from the last release to this code, as `git pull` does it
(only the files that changed get a new time stamp), refetches, re-prepares and retrains nothing: a
study of hours must not start over because code moved. Snakemake reruns a job whose inputs are
newer than its outputs, whose shell command changed (the data and training rules) or whose
parameters changed (the code fingerprints): none of these may move for fetching, preparing or
training unless their output changes, and then the README says so.

RELEASED is the last release's commit. A release that has to rerun them (new numbers, a faster
engine whose timings must not be divided by the old one's, a changed data preparation) moves it to
itself, keeps the one before in RERUN_FROM (that upgrade reruns them once) and adds its upgrade
note to the README.
"""

import io
import subprocess
import tarfile

import pytest
from conftest import REPO
from test_workflow import TINY, copy_env, planned, snakemake, write_config

from mpinet.layout import RECORD_FILE, RUNS_ROOT

pytestmark = pytest.mark.workflow

RELEASED = "1a466f8cfbdb6ab6ae1514a2e41b8640b0eec275"  # blocked first layer, data jobs by fingerprint
RERUN_FROM = "0aa8685f98599956a56128fa3bb12eb1e96815af"  # 0.3.0 as landed on 2026-12-01
# what upgrading from RERUN_FROM reruns besides every training run: the tiny study's two datasets
REBUILT = {"make_synthetic": 1, "fetch": 2, "prepare": 2}


def _git(*args) -> bytes:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, check=True).stdout


def _pull(wd, old: str) -> list[str]:
    """Bring wd from commit `old` to the working tree's files as git does: rewrite the files whose
    content changed, add new ones, delete removed ones; the others keep their time stamps."""
    now = set(_git("ls-files", "-co", "--exclude-standard").decode().splitlines())
    before = set(_git("ls-tree", "-r", "--name-only", old).decode().splitlines())
    changed = []
    for name in sorted(now):
        src, dest = REPO / name, wd / name
        if not src.is_file():
            continue
        if not dest.exists() or dest.read_bytes() != src.read_bytes():
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(src.read_bytes())
            changed.append(name)
    for name in sorted(before - now):
        (wd / name).unlink(missing_ok=True)
        changed.append(name)
    return changed


@pytest.mark.parametrize("old,reruns", [(RELEASED, False), (RERUN_FROM, True)])
def test_upgrading_reruns_data_and_training_only_across_a_change_to_what_they_compute(tmp_path, old, reruns):
    try:
        archive = _git("archive", old)
    except subprocess.CalledProcessError:
        pytest.skip(f"release commit {old} not in this clone's history")
    wd = tmp_path / "study"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:  # time stamps: the release commit's
        tar.extractall(wd, filter="data")
    config = {**TINY, "experiments": TINY["experiments"][:1]}  # Iris, every design; images is prepared too
    config["experiments"] = [*config["experiments"], {**TINY["experiments"][1], "ranks": 1, "algorithm": "serial"}]
    write_config(wd, config)
    assert copy_env(wd)["PYTHONPATH"] == str(wd / "src")  # the release's own package runs it
    snakemake(wd)
    trained = len(list((wd / RUNS_ROOT).rglob(RECORD_FILE)))
    assert trained >= 4

    changed = _pull(wd, old)
    # across the engine change the trainer's code changed; after it, whatever later commits touched
    assert "src/mpinet/model.py" in changed if reruns else changed
    plan = planned(wd)
    rebuilt = {r: n for r, n in plan.items() if r in REBUILT}
    assert rebuilt == (REBUILT if reruns else {}), f"upgrading from {old}: {plan}"
    retrained = plan.get("train_single", 0) + plan.get("train_mpi", 0)
    assert retrained == (trained if reruns else 0), f"upgrading from {old}: {plan}"
