"""A study in one SLURM allocation: a pilot job in which Snakemake runs with its local executor, each
training a job step (`srun`) one after another, the way a local `make run` runs them.

Pools (`make slurm-run`) submit one allocation per few experiments, and inside each Snakemake starts
once per member (a few seconds each). The pilot starts Snakemake once, on one whole node
(`--exclusive`), for the whole study: the choice for many small experiments that fit one node.
Its time limit is the sum of the experiments' estimates (mpinet.launch.walltime) plus a margin for the
microbenchmark, tables and plots; a pilot that runs out resumes from the checkpoints when started
again. The data is prepared first, here, where it is missing: its size decides the estimates.

    python -m mpinet.launch.pilot --configfile config/config.yaml [--partition P] [--dry-run]
"""

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

from mpinet import MpinetError
from mpinet.launch import walltime
from mpinet.launch.slurm import TrainingJob, check_fits, default_account, partitions
from mpinet.layout import DATA_ROOT, RunPaths
from mpinet.study.experiments import expand_sweeps, grid_paths
from mpinet.study.status import study_name

EXTRA_MINUTES = 5  # the microbenchmark, the tables and the plots after the last training
LOG_FILE = "logs/slurm/pilot-{job}.log"
EXIT_FILE = "logs/slurm/pilot-{job}.exit"
PROG = "mpinet.launch.pilot"
POLL_S = 2  # squeue, while the pilot is queued or runs (sbatch --wait polls at 2, 6, 14, 30, 62 s ...)
# a controller that answers no squeue for this long is taken to be gone (slurmctld restarts take seconds)
GIVE_UP_S = 600


def load_experiments(configfile: str):
    """The study's experiment table and its name, as the workflow expands them."""
    try:
        config = yaml.safe_load(Path(configfile).read_text()) or {}
        table = expand_sweeps(config["experiments"], config.get("datasets") or {})
    except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
        raise MpinetError(f"{configfile}: cannot read its experiments ({type(e).__name__}: {e})") from None
    spread = table[table["nodes"].fillna(1).astype(int) > 1] if "nodes" in table else table.iloc[:0]
    if len(spread):
        row = spread.iloc[0]
        raise MpinetError(
            f"{configfile}: a pilot runs on one node, but an experiment of {row['dataset']} asks for "
            f"nodes {int(row['nodes'])}; run this study with make slurm-run (pools), or drop `nodes`"
        )
    return table, study_name(config, [configfile])


def minutes(table, study: str) -> int:
    """The pilot's time limit: each unfinished experiment's estimate, and EXTRA_MINUTES."""
    runs, link = walltime.calibration(Path("results") / study)
    total = EXTRA_MINUTES
    for g, row in zip(grid_paths(table), table.to_dict("records")):
        paths = RunPaths(g)
        if not paths.record.exists():
            total += walltime.request(row, Path(DATA_ROOT, row["dataset"]), paths.checkpoint, runs, link)
    return total


def sbatch_command(snakemake_args: list[str], limit: int | None, partition, account, study: str) -> list[str]:
    """The pilot's sbatch line: one whole node, the time limit, Snakemake on all its CPUs."""
    inner = [sys.executable, "-m", "snakemake", *snakemake_args]
    # its exit code in a file beside the log: what the waiting side reports
    wrap = f'{shlex.join(inner)} --cores "$SLURM_CPUS_ON_NODE"; echo $? > {EXIT_FILE.format(job="$SLURM_JOB_ID")}'
    account = default_account() if account is None else account
    cmd = ["sbatch", "--parsable", "--exclusive", "--nodes=1", *([f"--time={limit}"] if limit else [])]
    cmd += ["--job-name=mpinet-pilot", f"--comment=pilot_{study}", f"--output={LOG_FILE.format(job='%j')}"]
    cmd += [f"--partition={partition}"] * bool(partition) + [f"--account={account}"] * bool(account)
    return [*cmd, f"--chdir={os.getcwd()}", f"--wrap={wrap}"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mpinet.launch.pilot", description=__doc__.splitlines()[0])
    p.add_argument("--configfile", default="config/config.yaml", help="the study (default: config/config.yaml)")
    p.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's default)")
    p.add_argument("--account", default=None, help="SLURM account (default: yours, from sacctmgr)")
    p.add_argument("--snakefile", default=None, help="the workflow's Snakefile, when not ./workflow/Snakefile")
    p.add_argument("--dry-run", action="store_true", help="print the sbatch line and the time limit; submit nothing")
    a = p.parse_args(argv)
    try:
        table, study = load_experiments(a.configfile)
        parts, default = partitions()
        widest = max(table.itertuples(), key=lambda r: r.ranks * r.blas_threads)
        check_fits([TrainingJob(f"{study} (pilot)", widest.ranks, widest.blas_threads, 1, a.partition)], parts, default)
    except MpinetError as e:
        print(f"mpinet.launch.pilot: error: {e}", file=sys.stderr)
        return 1
    args = [*(["-s", a.snakefile] if a.snakefile else []), "--configfile", a.configfile]
    if not a.dry_run and (code := _prepare(args, table)):
        return code
    limit = minutes(table, study) if _prepared(table) else None
    # inside: a killed pilot's half-written outputs are redone, one failed experiment stops no other
    cmd = sbatch_command([*args, "--rerun-incomplete", "--keep-going"], limit, a.partition, a.account, study)
    if a.dry_run:
        print(shlex.join(cmd))
        print(f"time limit: {limit} minutes" if limit else "time limit: known once the data is prepared")
        return 0
    print(
        f"mpinet.launch.pilot: {len(table)} experiments of study {study} in one allocation of {limit} minutes",
        flush=True,
    )
    submitted = subprocess.run(cmd, capture_output=True, text=True)
    if submitted.returncode != 0:
        print(f"mpinet.launch.pilot: error: sbatch: {submitted.stderr.strip()}", file=sys.stderr)
        return 1
    job = submitted.stdout.strip().split(";")[0]
    print(f"mpinet.launch.pilot: job {job}, its log {LOG_FILE.format(job=job)} (scancel {job} stops it)", flush=True)
    return _wait(job)


def _wait(job: str, poll_s: float = POLL_S, give_up_s: float = GIVE_UP_S) -> int:
    """Until the job leaves the queue, saying when it starts; then its log's tail and exit code."""
    state, answered = "", time.monotonic()
    while True:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
        now = q.stdout.strip()
        if q.returncode != 0 and "Invalid job id" not in q.stderr:
            if time.monotonic() - answered > give_up_s:
                why = q.stderr.strip() or "no message"
                print(
                    f"mpinet.launch.pilot: error: squeue has failed for {give_up_s:.0f} s ({why}); "
                    f"the pilot job {job} may still run: check `squeue -j {job}` and its log "
                    f"{LOG_FILE.format(job=job)}",
                    file=sys.stderr,
                )
                return 1
            now = state  # the controller did not answer this time: ask again
        elif not now:
            break  # squeue lists a job only while it is queued, runs or completes
        else:
            answered = time.monotonic()
        if now != state:
            print(f"mpinet.launch.pilot: job {job} {now.lower()}", flush=True)
            state = now
        time.sleep(poll_s)
    log, exit_file = Path(LOG_FILE.format(job=job)), Path(EXIT_FILE.format(job=job))
    if log.exists():
        print(log.read_text()[-3000:], end="")
    code = exit_file.read_text().strip() if exit_file.exists() else ""
    if code != "0":
        why = f"Snakemake exited with {code}" if code else "ended before Snakemake did (cancelled, time limit, node)"
        again = "run it again to go on from the checkpoints"
        print(f"mpinet.launch.pilot: error: pilot job {job}: {why}; {again}", file=sys.stderr)
        return 1
    print(f"mpinet.launch.pilot: pilot job {job} done")
    return 0


def _prepare(args: list[str], table) -> int:
    """Fetch and prepare the study's datasets here where they are missing (Snakemake decides)."""
    targets = [str(_prepared_marker(d)) for d in sorted(set(table["dataset"]))]
    print("mpinet.launch.pilot: the data first, here (its size sizes the time limit)", flush=True)
    Path("logs/slurm").mkdir(parents=True, exist_ok=True)
    # the targets first: --configfile (in args) takes every value that follows it
    cmd = [sys.executable, "-m", "snakemake", *targets, *args, "--cores", "2", "--quiet", "rules"]
    return subprocess.run(cmd).returncode


def _prepared(table) -> bool:
    return all(_prepared_marker(d).exists() for d in set(table["dataset"]))


def _prepared_marker(dataset: str) -> Path:
    """One of the files a prepared dataset has (mpinet.datasets.dataset.FILES; Snakemake makes them together)."""
    return Path(DATA_ROOT, dataset, "summary.json")


if __name__ == "__main__":
    sys.exit(main())
