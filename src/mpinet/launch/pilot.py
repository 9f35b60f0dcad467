"""A study in one SLURM allocation: a pilot job in which Snakemake runs with its local executor, each
training a job step (`srun`) one after another, the way a local `make run` runs them.

Pools (`make slurm-run`) submit one allocation per few experiments, and inside each Snakemake starts
once per member (a few seconds each). The pilot starts Snakemake once, on one whole node
(`--exclusive`), for the whole study: the choice for many small experiments that fit one node.
Its time limit is the sum of the experiments' estimates (mpinet.launch.walltime) plus a margin for the
microbenchmark; a pilot that runs out resumes from the checkpoints when started again. The data is
prepared first, here, where it is missing (its size decides the estimates); the tables and plots are
built here after the pilot has ended.

    python -m mpinet.launch.pilot --configfile config/config.yaml [--partition P] [--dry-run]
"""

import argparse
import shlex
import sys

from mpinet import MpinetError
from mpinet.launch import batch
from mpinet.launch.slurm import TrainingJob, check_fits, partitions

LOG_FILE = "logs/slurm/pilot-{job}.log"
EXIT_FILE = "logs/slurm/pilot-{job}.exit"
PROG = "mpinet.launch.pilot"


def load_experiments(configfile: str):
    """The study's experiment table and its name, as the workflow expands them; one node only."""
    table, study, _ = batch.read_experiments(configfile)
    spread = table[table["nodes"].fillna(1).astype(int) > 1] if "nodes" in table else table.iloc[:0]
    if len(spread):
        row = spread.iloc[0]
        raise MpinetError(
            f"{configfile}: a pilot runs on one node, but an experiment of {row['dataset']} asks for "
            f"nodes {int(row['nodes'])}; run this study with make slurm-run (pools) or make slurm-pack, or drop `nodes`"
        )
    return table, study


def minutes(table, study: str) -> int:
    """The pilot's time limit: each unfinished experiment's estimate, and EXTRA_MINUTES."""
    return batch.EXTRA_MINUTES + sum(m for _, m in batch.unfinished(table, study))


def sbatch_command(snakemake_args: list[str], limit: int | None, partition, account, study: str) -> list[str]:
    """The pilot's sbatch line: one whole node, the time limit, Snakemake on all its CPUs."""
    inner = f'{batch.snakemake_line(snakemake_args)} --cores "$SLURM_CPUS_ON_NODE"'
    slurm = ["--nodes=1", *([f"--time={limit}"] if limit else [])]
    files = (LOG_FILE, EXIT_FILE)
    return batch.sbatch_command(inner, slurm, files, ("mpinet-pilot", f"pilot_{study}"), (partition, account))


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
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    args = [*(["-s", a.snakefile] if a.snakefile else []), "--configfile", a.configfile]
    if not a.dry_run and (code := batch.prepare(args, table, PROG)):
        return code
    limit = minutes(table, study) if batch.prepared(table) else None
    cmd = sbatch_command([*args, *batch.INSIDE], limit, a.partition, a.account, study)
    if a.dry_run:
        print(shlex.join(cmd))
        print(f"time limit: {limit} minutes" if limit else "time limit: known once the data is prepared")
        return 0
    print(f"{PROG}: {len(table)} experiments of study {study} in one allocation of {limit} minutes", flush=True)
    if (job := batch.submit(cmd, PROG)) is None:
        return 1
    print(f"{PROG}: job {job}, its log {LOG_FILE.format(job=job)} (scancel {job} stops it)", flush=True)
    return _wait(job) or batch.finish_here(args, table, study, PROG)


def _wait(job: str, poll_s: float = batch.POLL_S, give_up_s: float = batch.GIVE_UP_S) -> int:
    """Until the job leaves the queue; then its log's tail and exit code (mpinet.launch.batch.wait)."""
    return batch.wait(job, PROG, (LOG_FILE, EXIT_FILE), "pilot", poll_s, give_up_s)


if __name__ == "__main__":
    sys.exit(main())
