# Every hook of the workflow, and what they call: before anything runs, after it succeeded, after
# it failed; and what the console leaves out of a failure the job has said itself.

import logging

from snakemake.logging import logger
from snakemake_interface_logger_plugins.common import LogEvent

from mpinet.datacli import said_on_the_console


onstart:
    check_slurm_fit()


onsuccess:
    remove_kept_checkpoints()
    print_summary()


onerror:
    print_failures()


def check_slurm_fit():
    """On SLURM, a training job no node set of its partition can hold is an error before submission."""
    if not on_slurm():
        return
    jobs = [
        TrainingJob(
            str(RunPaths(grid_path(job.wildcards)).dir),
            int(job.wildcards.ranks),
            int(job.wildcards.blas_threads),
            nodes=job.resources.get("nodes"),
            partition=job.resources.get("slurm_partition"),
        )
        for job in workflow.dag.needrun_jobs()
        if job.rule.name in ("train_single", "train_mpi")
    ]
    try:
        check_fits(jobs, *partitions())
    except MpinetError as e:
        raise WorkflowError(f"SLURM: {e}") from None


def print_summary():
    """At the end of a run: the study's headline numbers, per design and rank count."""
    runs = Path(rules.aggregate.output.runs)
    if runs.exists() and runs.stat().st_mtime >= workflow_start:  # only when this run rewrote it
        text = end_of_run(runs, rules.aggregate.output.references, STUDY, STUDY_DIR)
        print(text, flush=True)


def remove_kept_checkpoints():
    """After a successful run, the final checkpoints runs in a SLURM allocation kept (for a retry of
    it) are no longer needed."""
    removed = remove_finished([(e.run_dir / RECORD_FILE, e.checkpoint) for e in GRID.status_rows()])
    if removed:
        print(
            f"removed the final checkpoints of {removed} finished runs, kept until now for a retry",
            flush=True,
        )


def print_failures():
    """When a run fails: every failed experiment by name with its one-line error."""
    if text := failures(GRID.status_rows()):
        print(f"\n{text}\n", flush=True)


def said_by_the_job(record):
    """Whether a log record is Snakemake's report of a data job's failure that the job has printed
    itself, in one line naming the user's file and the job's log (mpinet.datacli --log): the
    exception with the shell command and its options, and the `Error in rule` block. Not where the
    user asked for Snakemake's report (--verbose, --show-failed-logs), nor on SLURM, where the job's
    line is in its SLURM output rather than on this console."""
    event = getattr(record, "event", None)
    if event == LogEvent.JOB_ERROR:
        text = getattr(record, "shellcmd", None) or ""
    elif event == LogEvent.ERROR:
        text = record.getMessage()
    else:
        return False
    asked = workflow.output_settings
    if asked is not None and (asked.verbose or asked.show_failed_logs):
        return False
    return said_on_the_console(text) and not (on_slurm() or in_slurm_job())


# left off the console only: the complete log under .snakemake/log/ keeps Snakemake's report
for handler in logger.handlers:
    if not isinstance(handler, logging.FileHandler):
        handler.addFilter(lambda record: not said_by_the_job(record))
