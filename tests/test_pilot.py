"""The pilot's wait for its job, against a scheduler whose squeue keeps failing."""

import os

from mpinet.launch import batch, pilot


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


def test_a_finished_job_s_long_log_is_shown_from_a_line_s_start(tmp_path, monkeypatch, capsys):
    squeue = tmp_path / "bin" / "squeue"
    squeue.parent.mkdir()
    squeue.write_text("#!/bin/sh\nexit 0\n")  # the job has left the queue
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{squeue.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job-7.log").write_text("".join(f"line {i:04d} {'x' * 60}\n" for i in range(200)))
    (tmp_path / "job-7.exit").write_text("0\n")
    assert batch.wait("7", "prog", ("job-{job}.log", "job-{job}.exit"), "pilot", 0.01, 1) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith("line ") and shown[-2].startswith("line 0199") and shown[-1] == "prog: pilot job 7 done"
