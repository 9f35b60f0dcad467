"""The pilot's wait for its job, against a scheduler whose squeue keeps failing."""

import os

from mpinet.launch import pilot


def test_a_squeue_that_keeps_failing_ends_the_wait_with_one_clear_error(tmp_path, monkeypatch, capsys):
    squeue = tmp_path / "bin" / "squeue"
    squeue.parent.mkdir()
    squeue.write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller' >&2\nexit 1\n")
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{squeue.parent}{os.pathsep}{os.environ['PATH']}")
    assert pilot._wait("42", poll_s=0.01, give_up_s=0.2) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mpinet.launch.pilot: error: squeue has failed for 0 s")
    assert "Unable to contact slurm controller" in err[0] and "squeue -j 42" in err[0]
