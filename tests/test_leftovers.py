"""Removing leftover run directories: what cannot be deleted is named, after every other one is gone."""

import shutil

import pytest

from mpinet import MpinetError
from mpinet.study import leftovers


def test_a_directory_that_cannot_be_deleted_is_named_and_the_others_are_removed(tmp_path, monkeypatch):
    runs, logs = tmp_path / "runs", tmp_path / "logs"
    dirs = [runs / "iris" / name for name in ("a", "stuck", "b")]
    for d in dirs:
        d.mkdir(parents=True)
        (d / "metrics.csv").write_text("epoch\n")
        (logs / "iris").mkdir(parents=True, exist_ok=True)
        (logs / "iris" / f"{d.name}.log").write_text("log\n")
    real = shutil.rmtree

    def rmtree(path, *args, **kwargs):  # as root nothing refuses a delete: the refusal is injected here
        if path.name == "stuck":
            raise PermissionError(13, "Permission denied", str(path))
        real(path, *args, **kwargs)

    monkeypatch.setattr(leftovers.shutil, "rmtree", rmtree)
    with pytest.raises(
        MpinetError, match=r"could not delete 1 of 3 leftover run directories: .*stuck \(Permission denied\)"
    ):
        leftovers.remove(dirs, logs, runs)
    assert [d.exists() for d in dirs] == [False, True, False]
    assert (logs / "iris" / "stuck.log").exists() and not (logs / "iris" / "a.log").exists()
