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

0.4.0 reruns, once, the datasets whose job parameters were wrong in 0.3.x: a bundled source
(bundled:iris) entered its jobs as the install path, and the synthetic archive's generator was in no
fingerprint. Their fetch, preparation and runs rerun; a study's data from any other source (a URL, a
local file, kaggle:) keeps every run.
"""

import io
import subprocess
import tarfile

import pytest
from conftest import REPO
from test_workflow import TINY, copy_env, planned, snakemake, write_config

from mpinet.layout import RECORD_FILE, RUNS_ROOT

pytestmark = pytest.mark.workflow

RELEASED = "25513f200572df8f4914583c29aed18d7cec7867"  # 0.4.0 (tag v0.4.0): reruns derived from the code
RERUN_FROM = "087bb1a31a83f6b3a511bac9bb18fc6c28403ba8"  # 0.3.0 as landed on 2026-12-02
# what upgrading from RERUN_FROM reruns besides the runs on those datasets: bundled:iris and the
# synthetic images, never the study's local copy of the same table
REBUILT = {"make_synthetic": 1, "fetch": 2, "prepare": 2}
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
    snakemake(wd)
    trained = len(list((wd / RUNS_ROOT).rglob(RECORD_FILE)))
    on_local = len(list((wd / RUNS_ROOT / "local").rglob(RECORD_FILE)))
    assert trained >= 4 and on_local == 3

    changed = _pull(wd, old)
    assert changed
    plan = planned(wd)
    rebuilt = {r: n for r, n in plan.items() if r in REBUILT}
    assert rebuilt == (REBUILT if reruns else {}), f"upgrading from {old}: {plan}"
    retrained = plan.get("train_single", 0) + plan.get("train_mpi", 0)
    assert retrained == (trained - on_local if reruns else 0), f"upgrading from {old}: {plan}"
