"""What the one-allocation commands share (mpinet.launch.pilot, mpinet.launch.pack): the study's
experiments, its data prepared here first, the sbatch line of a job that runs Snakemake inside, and
the wait for that job with its log's tail and exit code at the end.

The data is prepared on the login node because its size decides the time estimates; inside, the
job's Snakemake reruns a killed job's half-written outputs (--rerun-incomplete) and one failed
experiment stops no other (--keep-going), so running the command again goes on from what finished.
The allocation holds its nodes only while they measure (ALLOCATION_RULES); the tables and plots are
built here once it has ended and every experiment has its run (finish_here).
"""

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

from mpinet import MpinetError
from mpinet.launch import walltime
from mpinet.launch.slurm import default_account
from mpinet.layout import DATA_ROOT, RunPaths
from mpinet.study.experiments import expand_sweeps, grid_paths
from mpinet.study.oversubscription import TRAINS_ELSEWHERE
from mpinet.study.status import study_name

POLL_S = 2  # squeue, while the job is queued or runs (sbatch --wait polls at 2, 6, 14, 30, 62 s ...)
# a controller that answers no squeue for this long is taken to be gone (slurmctld restarts take seconds)
GIVE_UP_S = 600
# an allocation's time beyond its trainings' estimates: Snakemake's start in it and the microbenchmark
EXTRA_MINUTES = 5
# what runs inside the allocation: the trainings and the microbenchmark of its nodes' link (rule
# names of workflow/rules/train.smk; tests/test_pack.py checks they exist), nothing after them
ALLOCATION_RULES = ("train_single", "train_mpi", "commbench")
# inside the job: a killed job's half-written outputs are redone, one failed experiment stops no other
INSIDE = ["--rerun-incomplete", "--keep-going", "--until", *ALLOCATION_RULES]


def read_experiments(configfile: str):
    """The study's experiment table and its name, as the workflow expands them."""
    try:
        config = yaml.safe_load(Path(configfile).read_text()) or {}
        table = expand_sweeps(config["experiments"], config.get("datasets") or {})
    except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
        raise MpinetError(f"{configfile}: cannot read its experiments ({type(e).__name__}: {e})") from None
    return table, study_name(config, [configfile]), config


def unfinished(table, study: str) -> list[tuple[dict, int]]:
    """(row, minutes of its estimate) of each experiment without a run.json, in table order."""
    runs, link = walltime.calibration(Path("results") / study)
    out = []
    for g, row in zip(grid_paths(table), table.to_dict("records")):
        paths = RunPaths(g)
        if not paths.record.exists():
            out.append((row, walltime.request(row, Path(DATA_ROOT, row["dataset"]), paths.checkpoint, runs, link)))
    return out


def sbatch_command(inner: str, slurm: list[str], files: tuple[str, str], job: tuple[str, str], where: tuple):
    """The sbatch line of a job running `inner` (a shell line) with `slurm` options (nodes, time);
    `files`: its log and exit-code file with {job}; `job`: its name and comment; `where`: partition
    and account (None: the default). The exit code lands beside the log: what the waiting side reports."""
    log, exit_file = files
    name, comment = job
    partition, account = where
    wrap = f"{inner}; echo $? > {exit_file.format(job='$SLURM_JOB_ID')}"
    account = default_account() if account is None else account
    cmd = ["sbatch", "--parsable", "--exclusive", *slurm, f"--job-name={name}", f"--comment={comment}"]
    cmd += [f"--output={log.format(job='%j')}"]
    cmd += [f"--partition={partition}"] * bool(partition) + [f"--account={account}"] * bool(account)
    return [*cmd, f"--chdir={os.getcwd()}", f"--wrap={wrap}"]


def snakemake_line(args: list[str]) -> str:
    """This Python's Snakemake with `args`, as a shell line."""
    return shlex.join([sys.executable, "-m", "snakemake", *args])


def submit(cmd: list[str], prog: str) -> str | None:
    """sbatch's job id, or None after printing sbatch's refusal in one line."""
    submitted = subprocess.run(cmd, capture_output=True, text=True)
    if submitted.returncode != 0:
        print(f"{prog}: error: sbatch: {submitted.stderr.strip()}", file=sys.stderr)
        return None
    return submitted.stdout.strip().split(";")[0]


def wait(job: str, prog: str, files: tuple[str, str], what: str, poll_s=POLL_S, give_up_s=GIVE_UP_S) -> int:
    """Until the job leaves the queue, saying when it starts; then its log's tail and exit code."""
    log, exit_file = (Path(f.format(job=job)) for f in files)
    state, answered = "", time.monotonic()
    while True:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
        now = q.stdout.strip()
        if q.returncode != 0 and "Invalid job id" not in q.stderr:
            if time.monotonic() - answered > give_up_s:
                why = q.stderr.strip() or "no message"
                print(
                    f"{prog}: error: squeue has failed for {give_up_s:.0f} s ({why}); "
                    f"the {what} job {job} may still run: check `squeue -j {job}` and its log {log}",
                    file=sys.stderr,
                )
                return 1
            now = state  # the controller did not answer this time: ask again
        elif not now:
            break  # squeue lists a job only while it is queued, runs or completes
        else:
            answered = time.monotonic()
        if now != state:
            print(f"{prog}: job {job} {now.lower()}", flush=True)
            state = now
        time.sleep(poll_s)
    if log.exists():
        text = log.read_text()
        tail = text[-3000:] if len(text) <= 3000 else text[-3000:].partition("\n")[2]  # from a line's start
        print(tail, end="")
    code = exit_file.read_text().strip() if exit_file.exists() else ""
    if code != "0":
        why = f"Snakemake exited with {code}" if code else "ended before Snakemake did (cancelled, time limit, node)"
        again = "run it again to go on from the checkpoints"
        print(f"{prog}: error: {what} job {job}: {why}; {again}", file=sys.stderr)
        return 1
    print(f"{prog}: {what} job {job} done")
    return 0


def prepare(args: list[str], table, prog: str) -> int:
    """Fetch and prepare the study's datasets here where they are missing (Snakemake decides)."""
    targets = [str(prepared_marker(d)) for d in sorted(set(table["dataset"]))]
    print(f"{prog}: the data first, here (its size sizes the time limit)", flush=True)
    Path("logs/slurm").mkdir(parents=True, exist_ok=True)
    # the targets first: --configfile (in args) takes every value that follows it
    return subprocess.run(snakemake_here([*targets, *args]), env=trains_elsewhere()).returncode


def finish_here(args: list[str], table, study: str, prog: str) -> int:
    """After the allocation: the study's tables and plots built here, when every experiment has its
    run (never a training on this node: a missing one is named and left to the command run again)."""
    if missing := unfinished(table, study):
        names = ", ".join(experiment_name(r) for r, _ in missing[:3]) + (", ..." if len(missing) > 3 else "")
        why = f"{len(missing)} experiments have no run yet ({names}); run the command again"
        print(f"{prog}: error: {why}", file=sys.stderr)
        return 1
    print(f"{prog}: the tables and plots, here (the allocation has ended)", flush=True)
    return subprocess.run(snakemake_here(args), env=trains_elsewhere()).returncode


def trains_elsewhere() -> dict:
    """The environment of a Snakemake here that trains nothing (the training runs in the allocation)."""
    return {**os.environ, TRAINS_ELSEWHERE: "1"}


def snakemake_here(args: list[str]) -> list[str]:
    """This Python's Snakemake on this (login) node, as prepare and finish_here run it."""
    return [sys.executable, "-m", "snakemake", *args, "--cores", "2", "--quiet", "rules"]


def experiment_name(row: dict) -> str:
    """An experiment in a message: its dataset, design, ranks and seed."""
    return f"{row['dataset']} {row['algorithm']} ranks={row['ranks']} seed={row['seed']}"


def prepared(table) -> bool:
    return all(prepared_marker(d).exists() for d in set(table["dataset"]))


def prepared_marker(dataset: str) -> Path:
    """One of the files a prepared dataset has (mpinet.datasets.dataset.FILES; Snakemake makes them together)."""
    return Path(DATA_ROOT, dataset, "summary.json")
