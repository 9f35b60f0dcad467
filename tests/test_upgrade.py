"""Upgrading a study's working directory from the last release to this code, as `git pull` does it
(only the files that changed get a new time stamp), refetches, re-prepares and retrains nothing: a
study of hours must not start over because code moved. Snakemake reruns a job whose inputs are
newer than its outputs, whose shell command changed (the data and training rules) or whose
parameters changed (the code fingerprints): none of these may move for fetching, preparing or
training unless their output changes, and then the README says so.

RELEASED is the last release's commit. A release that has to rerun them (new numbers, a faster
engine whose timings must not be divided by the old one's, a changed data preparation, a job
parameter that was wrong) moves it to itself, keeps the one before in RERUN_FROM (that upgrade
reruns them once) and says so in CHANGELOG.md.

0.7.0 reruns, once, the preparation of image datasets (their pixels are stored as uint8 now) and the
runs on them; tables (the bundled Iris and a study's local copy of it) keep their data and every run.
0.9.0 retrains nothing: its runs name the engine that timed them, and the old runs are one engine
(`mpinet 0.8.0`) whose speedups stay; only an experiment added later mixes, and says so (that upgrade
was checked here with RELEASED at 0.8.0's commit, f660866).
"""

import io
import subprocess
import tarfile

import pytest
from conftest import REPO
from test_workflow import RUNS_ONLY, TINY, copy_env, planned, snakemake, write_config

from mpinet.layout import RECORD_FILE, RUNS_ROOT

pytestmark = pytest.mark.workflow

RELEASED = "dc3f814b8e089b2f28429b4bf2ff06b121487e13"  # 0.9.0 (tag v0.9.0)
RERUN_FROM = "765b39d619a6833f10d0787420a25b12e9675f55"  # 0.6.0 (tag v0.6.0)
# what upgrading from RERUN_FROM reruns besides the runs on those datasets: the synthetic images'
# preparation, never a fetch, never a table
REBUILT = {"prepare": 1}
RETRAINED = ("images",)  # the datasets whose runs retrain
LOCAL = {"source": "data/iris.csv", "format": "csv", "test_fraction": 0.3, "split_seed": 0}


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
    (wd / "data").mkdir()
    (wd / "data" / "iris.csv").write_bytes((REPO / "src/mpinet/data/iris.csv").read_bytes())
    config = {**TINY, "datasets": {**TINY["datasets"], "local": LOCAL}}
    iris, images = TINY["experiments"]  # Iris (bundled), every design; the synthetic images
    local = {**iris, "dataset": "local", "algorithm": ["serial", "allreduce"]}
    config["experiments"] = [iris, {**images, "ranks": 1, "algorithm": "serial"}, local]
    write_config(wd, config)
    assert copy_env(wd)["PYTHONPATH"] == str(wd / "src")  # the release's own package runs it
    snakemake(wd, *RUNS_ONLY)  # the release's runs: what an upgrade may not redo
    trained = len(list((wd / RUNS_ROOT).rglob(RECORD_FILE)))
    on_local = len(list((wd / RUNS_ROOT / "local").rglob(RECORD_FILE)))
    assert trained >= 4 and on_local == 3
    retraining = sum(len(list((wd / RUNS_ROOT / d).rglob(RECORD_FILE))) for d in RETRAINED)
    assert retraining >= 1

    changed = _pull(wd, old)
    assert changed
    plan = planned(wd)
    rebuilt = {r: n for r, n in plan.items() if r in ("make_synthetic", "fetch", "prepare")}
    assert rebuilt == (REBUILT if reruns else {}), f"upgrading from {old}: {plan}"
    retrained = plan.get("train_single", 0) + plan.get("train_mpi", 0)
    assert retrained == (retraining if reruns else 0), f"upgrading from {old}: {plan}"
