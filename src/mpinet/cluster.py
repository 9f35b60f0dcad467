"""What the SLURM cluster can hold, asked before any job is submitted.

A training job whose ranks no node set of its partition can hold is refused by sbatch only at
submission, once per retry, with an empty job log; here it is one line before anything runs.
"""

import functools
import subprocess
from dataclasses import dataclass

from mpinet import MpinetError


@dataclass
class Partition:
    name: str
    cpus: int  # CPUs a single job may use: all nodes' CPUs, cut by MaxNodes and MaxCPUsPerNode
    nodes: int = 1  # nodes a single job may use: TotalNodes cut by MaxNodes
    cpus_per_node: int = 0  # CPUs a job may use on one node (0: cpus)


@dataclass
class TrainingJob:
    experiment: str  # the run's directory under results/runs/, which names every swept value
    ranks: int
    cpus_per_rank: int = 1
    nodes: int | None = None  # None: SLURM places the ranks
    partition: str | None = None  # None: the cluster's default partition


def mem_per_cpu_mb(train_bytes: int, test_bytes: int, ranks: int, threads: int) -> int:
    """MB per CPU a training job asks for: a rank maps its shard of the training array and the whole
    test array (every rank evaluates its share through the same memory map), plus 300 MB of Python,
    numpy and MPI, spread over the rank's `threads` CPUs."""
    per_rank = (train_bytes / max(1, ranks) + test_bytes) / 2**20 + 300
    return int(per_rank / threads) + 1


def check_fits(jobs: list[TrainingJob], partitions: dict[str, Partition], default: str | None) -> None:
    """Raise one line naming the experiment with the fewest ranks its partition cannot hold."""
    too_big = []
    for job in sorted(jobs, key=lambda j: (j.ranks * j.cpus_per_rank, j.experiment)):
        name = job.partition or default
        if name not in partitions:
            known = ", ".join(sorted(partitions)) or "none"
            raise MpinetError(f"{job.experiment}: SLURM partition '{name}' does not exist (partitions: {known})")
        if problem := _shortfall(job, partitions[name]):
            too_big.append(problem)
    if too_big:
        more = f" (and {len(too_big) - 1} more experiments)" if len(too_big) > 1 else ""
        raise MpinetError(f"{too_big[0]}{more}; lower ranks or nodes in the config or choose a larger slurm_partition")


def _shortfall(job: TrainingJob, part: Partition) -> str | None:
    """What of a job its partition cannot hold, in words, or None."""
    need = job.ranks * job.cpus_per_rank
    where = f"{job.experiment}: {job.ranks} ranks"
    if need > part.cpus:
        return f"{where} need {need} CPUs but SLURM partition '{part.name}' holds at most {part.cpus}"
    if job.nodes is None:
        return None
    if job.nodes > part.nodes:
        return f"{where} on {job.nodes} nodes, but SLURM partition '{part.name}' gives a job at most {part.nodes} nodes"
    per_node = -(-job.ranks // job.nodes) * job.cpus_per_rank  # the fullest node of an even spread
    capacity = part.cpus_per_node or part.cpus
    if per_node > capacity:
        return (
            f"{where} on {job.nodes} nodes need {per_node} CPUs on one node but SLURM partition "
            f"'{part.name}' has at most {capacity} per node"
        )
    return None


def partitions() -> tuple[dict[str, Partition], str | None]:
    """Every partition's CPU capacity and the default partition's name, asked of SLURM."""
    return parse_partitions(_slurm("scontrol", "show", "partition", "--oneliner"), _node_cpus())


def parse_partitions(text: str, node_cpus: dict[str, int]) -> tuple[dict[str, Partition], str | None]:
    """`scontrol show partition --oneliner` output and CPUs per node as partitions and the default's name."""
    found, default = {}, None
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "PartitionName" not in fields:
            continue
        name = fields["PartitionName"]
        cpus = int(fields.get("TotalCPUs", "0"))
        per_node = max(node_cpus.values(), default=cpus)
        if fields.get("MaxCPUsPerNode", "UNLIMITED").isdigit():
            per_node = min(per_node, int(fields["MaxCPUsPerNode"]))
            cpus = min(cpus, per_node * int(fields.get("TotalNodes", "1")))
        nodes = int(fields.get("TotalNodes", "1"))
        if fields.get("MaxNodes", "UNLIMITED").isdigit():
            cpus = min(cpus, per_node * int(fields["MaxNodes"]))
            nodes = min(nodes, int(fields["MaxNodes"]))
        found[name] = Partition(name, cpus, nodes, per_node)
        if fields.get("Default") == "YES":
            default = name
    return found, default


@functools.lru_cache(maxsize=1)
def default_account() -> str:
    """The user's default SLURM account ('' if none): the account sbatch would use anyway, named
    explicitly so the executor plugin does not guess it (its guess runs a broken sacct call)."""
    import getpass

    try:
        user = getpass.getuser()
        out = _slurm("sacctmgr", "--noheader", "--parsable2", "show", "user", user, "format=DefaultAccount")
    except MpinetError:
        return ""
    return out.strip().splitlines()[0] if out.strip() else ""


def _node_cpus() -> dict[str, int]:
    out = _slurm("sinfo", "--noheader", "--Node", "--format=%N %c")
    return {n: int(c) for n, c in (line.split() for line in out.splitlines() if line.strip())}


def _slurm(*cmd: str) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MpinetError(f"{cmd[0]}: cannot ask SLURM about its partitions ({e})") from None
    if p.returncode != 0:
        raise MpinetError(f"{' '.join(cmd)}: {p.stderr.strip() or 'failed'}")
    return p.stdout


def describe_comment(comment: str, columns: tuple[str, ...], defaults: dict) -> str:
    """A training job's SLURM comment ('rule_train_mpi_wildcards_<values>') as its experiment in words:
    dataset, design, ranks and seed always, every other value only where it is not the default."""
    rule, _, values = comment.partition("_wildcards_")
    parts = values.split("_")
    if not rule.startswith("rule_train") or len(parts) != len(columns) + 1:
        return comment
    row = dict(zip(("dataset", *columns), parts))
    words = [row["dataset"], row["algorithm"], f"ranks={row['ranks']}"]
    for key in columns:
        if key in ("algorithm", "ranks", "seed"):
            continue
        default = defaults.get(key)
        default = "-".join(map(str, default)) if isinstance(default, list) else str(default)
        if row[key] != default:
            words.append(f"{key}={row[key]}")
    return " ".join([*words, f"seed={row['seed']}"])


def queue_table(squeue_lines: str, columns: tuple[str, ...], defaults: dict) -> str:
    """`squeue -o '%i|%T|%M|%k'` output as job id, state, elapsed time and experiment."""
    rows = ["JOBID     STATE       TIME        EXPERIMENT"]
    for line in squeue_lines.splitlines():
        if line.count("|") < 3:
            continue
        job, state, elapsed, comment = line.split("|", 3)
        rows.append(f"{job:<9} {state:<11} {elapsed:<11} {describe_comment(comment, columns, defaults)}")
    return "\n".join(rows)


def main() -> int:
    """python -m mpinet.cluster: this user's SLURM jobs with the experiment each one trains."""
    import argparse
    import getpass
    import sys

    from mpinet.experiments import COLUMNS, DEFAULTS

    argparse.ArgumentParser(
        prog="python -m mpinet.cluster",
        description="List your queued and running SLURM jobs with the experiment each one trains "
        "(squeue shows only the job comment, whose values carry no keys).",
    ).parse_args()
    try:
        out = _slurm("squeue", "--noheader", "--user", getpass.getuser(), "--format=%i|%T|%M|%k")
    except MpinetError as e:
        print(f"mpinet.cluster: error: {e}", file=sys.stderr)
        return 1
    print(queue_table(out, COLUMNS, DEFAULTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
