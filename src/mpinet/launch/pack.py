"""A study packed into one SLURM allocation of several nodes: Snakemake's local executor inside runs
the unfinished experiments side by side, each training its own job step sized to it.

Snakemake schedules (its cores are the allocation's CPUs and its `train_slots`, one per node, are
the whole nodes the running steps hold); SLURM's step scheduler places each step on free nodes.
By default every step gets whole nodes (`srun --whole`), so experiments share the allocation but
never a node and their timings stand alone (run.json: isolation exclusive-node); --shared (or
isolate_timing: false) lets steps share nodes (`srun --exact`; shared-node, left out of every
speedup). Each step has its own time limit from its estimate; the allocation's is the estimated
makespan of the steps (list scheduling by width) plus a margin, on the fewest nodes whose makespan
fits the partition's time limit unless --nodes says. Afterwards sacct's account of the steps goes to
results/<study>/metrics/steps.csv, which the report draws (nodes over time, with the occupancy), and
the tables and plots are built here: the allocation ends with its last step.

    python -m mpinet.launch.pack --configfile config/config.yaml [--nodes N] [--partition P] [--shared] [--dry-run]
"""

import argparse
import shlex
import sys
from dataclasses import dataclass
from typing import NamedTuple

from mpinet import MpinetError
from mpinet.analysis import allocation
from mpinet.analysis.figures import steps_table
from mpinet.launch import batch
from mpinet.launch.launcher import PACK_ENV, step_nodes
from mpinet.launch.slurm import Partition, TrainingJob, check_fits, partitions
from mpinet.layout import study_dir
from mpinet.study.grid import Grid
from mpinet.study.status import failures

LOG_FILE = "logs/slurm/pack-{job}.log"
EXIT_FILE = "logs/slurm/pack-{job}.exit"
PROG = "mpinet.launch.pack"


@dataclass(frozen=True)
class Step:
    name: str
    width: int  # whole nodes (exclusive) or CPUs (shared) it holds
    minutes: float


class Size(NamedTuple):
    """What the allocation asks for: whole nodes, its time limit in minutes, the CPUs Snakemake gets."""

    nodes: int
    minutes: int
    cpus: int


def makespan(steps: list[Step], units: int) -> float:
    """Minutes until the last step ends when each, longest first, starts as soon as `width` of the
    `units` (nodes, or CPUs when steps share nodes) are free: an estimate (list scheduling), not the
    order Snakemake and SLURM will pick."""
    free = [0.0] * units
    for s in sorted(steps, key=lambda s: (-s.minutes, -s.width)):
        if s.width > units:
            raise MpinetError(f"{s.name}: {s.width} nodes per step, but the allocation has {units}")
        free.sort()
        start = free[s.width - 1]  # the width-th node to come free
        free[: s.width] = [start + s.minutes] * s.width
    return max(free, default=0.0)


def choose_nodes(steps: list[Step], part: Partition, per_node: int = 1) -> int:
    """The fewest nodes whose makespan (plus EXTRA_MINUTES) fits the partition's time limit; `per_node`:
    units per node (1 for whole-node steps, the node's CPUs when steps share nodes)."""
    least = max([-(-s.width // per_node) for s in steps] + [part.min_nodes])
    for n in range(least, part.max_nodes + 1):
        if part.max_minutes is None or makespan(steps, n * per_node) + batch.EXTRA_MINUTES <= part.max_minutes:
            return n
    span = makespan(steps, part.max_nodes * per_node) + batch.EXTRA_MINUTES
    raise MpinetError(
        f"the study's estimated makespan on all {part.max_nodes} nodes of SLURM partition '{part.name}' is "
        f"{span:.0f} minutes, over its time limit of {part.max_minutes}; split the study or run it with make slurm-run"
    )


def plan_steps(rows: list[tuple[dict, int]], node_cpus: int, shared: bool) -> list[Step]:
    """Each unfinished experiment (row, minutes) as a step: whole nodes wide, or its CPUs when shared."""
    steps = []
    for row, minutes in rows:
        nodes = step_nodes(int(row["ranks"]), int(row["blas_threads"]), row.get("nodes"), node_cpus)
        cpus = int(row["ranks"]) * int(row["blas_threads"])
        steps.append(Step(batch.experiment_name(row), cpus if shared else nodes, minutes))
    return steps


def sbatch_command(args: list[str], size: Size, shared: bool, where: tuple, study: str):
    """The allocation's sbatch line: `size`'s whole nodes and time limit, Snakemake on all their CPUs
    with one train_slot per node; the steps' isolation in PACK_ENV; `where`: partition and account."""
    nodes, limit, cores = size
    mode = "shared-node" if shared else "exclusive-node"
    inner = f"{PACK_ENV}={mode} {batch.snakemake_line([*args, *batch.INSIDE])} --cores {cores}"
    # greedy: the highest priority that fits first, then the next (the widest steps first, launcher.
    # step_priority); the ILP scheduler maximizes the chosen jobs' summed priority, which several
    # narrow steps outweigh one wide one, so wide steps were left to run one at a time at the end
    inner += f" --resources train_slots={nodes} --scheduler greedy"
    slurm = [f"--nodes={nodes}", f"--time={limit}"]
    return batch.sbatch_command(inner, slurm, (LOG_FILE, EXIT_FILE), ("mpinet-pack", f"pack_{study}"), where)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Run it again after a failure, a cancel or a time limit: it goes on from the finished runs and "
        "checkpoints. make slurm-pack NODES=N PARTITION=P CONFIG=... runs it and then builds the report.",
    )
    p.add_argument("--configfile", default="config/config.yaml", help="the study (default: config/config.yaml)")
    p.add_argument(
        "--nodes", type=int, default=None, help="nodes of the allocation (default: the fewest whose estimate fits)"
    )
    p.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's default)")
    p.add_argument("--account", default=None, help="SLURM account (default: yours, from sacctmgr)")
    p.add_argument("--snakefile", default=None, help="the workflow's Snakefile, when not ./workflow/Snakefile")
    p.add_argument(
        "--shared",
        action="store_true",
        help="let experiments share nodes (isolation shared-node: no speedup uses them); also isolate_timing: false",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the sbatch line, node count and makespan; submit nothing"
    )
    return p


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    try:
        table, study, config = batch.read_experiments(a.configfile)
        shared = a.shared or config.get("isolate_timing") is False
        parts, default = partitions()
        part = _partition(parts, a.partition or default)
        node_cpus = min(part.node_cpus[: part.max_nodes])
        _check(table, study, part, node_cpus, a.nodes, parts, default)
    except MpinetError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    args = [*(["-s", a.snakefile] if a.snakefile else []), "--configfile", a.configfile]
    if not a.dry_run and (code := batch.prepare(args, table, PROG)):
        return code
    if not batch.prepared(table):
        print(f"{PROG}: the estimates need the prepared data (run without --dry-run once, or prepare it)")
        return 0
    steps = plan_steps(batch.unfinished(table, study), node_cpus, shared)
    if not steps:
        print(f"{PROG}: every experiment of study {study} has run; nothing to submit")
        return 0
    try:
        nodes = a.nodes or choose_nodes(steps, part, node_cpus if shared else 1)
        span = makespan(steps, nodes * (node_cpus if shared else 1))
    except MpinetError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    limit = int(span + 0.999) + batch.EXTRA_MINUTES
    cmd = sbatch_command(args, Size(nodes, limit, nodes * node_cpus), shared, (a.partition, a.account), study)
    mode = "sharing nodes" if shared else "each on whole nodes"
    print(
        f"{PROG}: {len(steps)} experiments of study {study} side by side, {mode}: estimated makespan "
        f"{span:.1f} minutes on {nodes} nodes (list scheduling of the estimates); allocation {nodes} nodes, "
        f"{limit} minutes",
        flush=True,
    )
    if a.dry_run:
        print(shlex.join(cmd))
        return 0
    if (job := batch.submit(cmd, PROG)) is None:
        return 1
    print(f"{PROG}: job {job}, its log {LOG_FILE.format(job=job)} (scancel {job} stops it)", flush=True)
    code = batch.wait(job, PROG, (LOG_FILE, EXIT_FILE), "pack", batch.POLL_S, batch.GIVE_UP_S)
    return _afterwards(job, study, table) or code or batch.finish_here(args, table, study, PROG)


def _afterwards(job: str, study: str, table) -> int:
    """The steps' account to steps.csv, its occupancy and every failed experiment's error line."""
    path = steps_table(study_dir(study))
    rows = allocation.query_steps(job)
    if len(rows):
        allocation.write_steps(rows, path)
        share = allocation.occupancy(rows).get(job, float("nan"))
        print(f"{PROG}: steps of job {job} in {path}: {len(rows) - 1} steps, occupancy {share:.2f}")
    if failed := failures(Grid.of(table).status_rows()):
        print(failed, file=sys.stderr)
        return 1
    return 0


def _partition(parts: dict[str, Partition], name: str | None) -> Partition:
    if name not in parts:
        raise MpinetError(f"SLURM partition '{name}' does not exist (partitions: {', '.join(sorted(parts)) or 'none'})")
    return parts[name]


def _check(table, study: str, part: Partition, node_cpus: int, nodes: int | None, parts, default) -> None:
    """One line for what cannot fit: an experiment wider than the allocation or its partition."""
    if nodes is not None and not part.min_nodes <= nodes <= part.max_nodes:
        raise MpinetError(
            f"--nodes {nodes}: SLURM partition '{part.name}' gives a job {part.min_nodes} to {part.max_nodes} nodes"
        )
    jobs = []
    for row in table.to_dict("records"):
        ranks, threads = int(row["ranks"]), int(row["blas_threads"])
        width = step_nodes(ranks, threads, row.get("nodes"), node_cpus)
        if nodes is not None and width > nodes:
            raise MpinetError(
                f"{batch.experiment_name(row)}: {ranks} ranks x {threads} threads take {width} whole nodes, but "
                f"the allocation has {nodes} (NODES={nodes}); raise NODES or lower ranks or nodes in the config"
            )
        jobs.append(TrainingJob(batch.experiment_name(row), ranks, threads, width, part.name))
    check_fits(jobs, parts, default)


if __name__ == "__main__":
    sys.exit(main())
