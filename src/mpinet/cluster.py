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


@dataclass
class TrainingJob:
    experiment: str  # the run's directory under results/runs/, which names every swept value
    ranks: int
    cpus_per_rank: int = 1
    partition: str | None = None  # None: the cluster's default partition


def check_fits(jobs: list[TrainingJob], partitions: dict[str, Partition], default: str | None) -> None:
    """Raise one line naming the first experiment whose ranks its partition cannot hold."""
    too_big = []
    for job in jobs:
        name = job.partition or default
        if name not in partitions:
            known = ", ".join(sorted(partitions)) or "none"
            raise MpinetError(f"{job.experiment}: SLURM partition '{name}' does not exist (partitions: {known})")
        need = job.ranks * job.cpus_per_rank
        if need > partitions[name].cpus:
            too_big.append((job, need, partitions[name]))
    if too_big:
        job, need, part = too_big[0]
        more = f" (and {len(too_big) - 1} more experiments)" if len(too_big) > 1 else ""
        raise MpinetError(
            f"{job.experiment}: {job.ranks} ranks need {need} CPUs but SLURM partition '{part.name}' "
            f"holds at most {part.cpus}{more}; lower ranks in the config or choose a larger slurm_partition"
        )


def partitions() -> tuple[dict[str, Partition], str | None]:
    """Every partition's CPU capacity and the default partition's name, from `scontrol show partition`."""
    text = _slurm("scontrol", "show", "partition", "--oneliner")
    node_cpus = _node_cpus()
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
        if fields.get("MaxNodes", "UNLIMITED").isdigit():
            cpus = min(cpus, per_node * int(fields["MaxNodes"]))
        found[name] = Partition(name, cpus)
        if fields.get("Default") == "YES":
            default = name
    return found, default


@functools.lru_cache(maxsize=1)
def default_account() -> str:
    """The user's default SLURM account ('' if none): the account sbatch would use anyway, named
    explicitly so the executor plugin does not guess it (its guess runs a broken sacct call)."""
    import getpass

    try:
        out = _slurm("sacctmgr", "--noheader", "--parsable2", "show", "user", getpass.getuser(), "format=DefaultAccount")
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
