"""What the SLURM cluster can hold, asked before any job is submitted.

A training job whose ranks no node set of its partition can hold is refused by sbatch only at
submission, once per retry, with an empty job log; here it is one line before anything runs.
"""

import functools
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mpinet import MpinetError
from mpinet.engine.designs import exchange_class, possible
from mpinet.study.experiments import hidden_text


@dataclass
class Partition:
    name: str
    node_cpus: list[int]  # CPUs a job may use on each node of the partition, largest first
    max_nodes: int  # nodes a single job may use (MaxNodes, cut by the nodes there are)
    min_nodes: int = 1  # MinNodes: fewer nodes are refused
    max_minutes: int | None = field(default=None, compare=False)  # MaxTime; None: UNLIMITED

    def cpus(self, nodes: int | None = None) -> int:
        """CPUs a job may use on its `nodes` largest nodes (None: as many as it may have)."""
        return sum(self.node_cpus[: self.max_nodes if nodes is None else nodes])


@dataclass
class TrainingJob:
    experiment: str  # the run's directory under results/runs/, which names every swept value
    ranks: int
    cpus_per_rank: int = 1
    nodes: int | None = None  # None: SLURM places the ranks
    partition: str | None = None  # None: the cluster's default partition


def mem_per_cpu_mb(
    train_bytes: int, test_bytes: int, ranks: int, threads: int, algorithm: str = "allreduce", batch_bytes: int = 0
) -> int:
    """MB per CPU a training job asks for: a rank maps its shard of the training array (a design that
    reads every row, all of it) and the whole test array (every rank evaluates its share through the
    same memory map), a design that holds the global batch ranks x batch_bytes (one rank's batch of
    rows in the training dtype) more, plus 300 MB of Python, numpy and MPI, spread over the rank's
    `threads` CPUs."""
    exchanges = [exchange_class(a) for a in possible(algorithm, ranks)]  # auto: the most its choice may hold
    mapped = train_bytes if any(e.reads_all_rows for e in exchanges) else train_bytes / max(1, ranks)
    held = ranks * batch_bytes if any(e.global_batch_rows for e in exchanges) else 0
    per_rank = (mapped + test_bytes + held) / 2**20 + 300
    return int(per_rank / threads) + 1


def training_mem_per_cpu(data_files, ranks: int, threads: int, algorithm: str, batch_size: int, dtype: str) -> int:
    """mem_per_cpu_mb of a training job from its prepared dataset's files (those not written yet count 0)."""
    files = {Path(f).name: Path(f) for f in data_files if Path(f).exists()}
    sizes = {name: f.stat().st_size for name, f in files.items()}
    rows = batch_bytes(files.get("train_x.npy", ""), batch_size, dtype)
    return mem_per_cpu_mb(sizes.get("train_x.npy", 0), sizes.get("test_x.npy", 0), ranks, threads, algorithm, rows)


def batch_bytes(train_x: str | Path, batch_size: int, dtype: str) -> int:
    """Bytes of one batch of rows of a prepared training array in the training dtype (0 if not there yet)."""
    try:
        features = np.load(train_x, mmap_mode="r").shape[1]
    except (OSError, ValueError, IndexError):
        return 0
    return batch_size * features * np.dtype(dtype).itemsize


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
    """What of a job its partition cannot hold, in words, or None. SLURM places tasks unevenly, at
    least one per node: a job fits when its N largest nodes together hold its ranks x CPUs per rank."""
    need = job.ranks * job.cpus_per_rank
    where = f"{job.experiment}: {job.ranks} ranks"
    p = f"SLURM partition '{part.name}'"
    if job.nodes is not None:
        if job.nodes > part.max_nodes:
            return f"{where} on {job.nodes} nodes, but {p} gives a job at most {part.max_nodes} nodes"
        if job.nodes < part.min_nodes:
            return f"{where} on {job.nodes} nodes, but {p} gives a job at least {part.min_nodes} nodes (MinNodes)"
        if job.ranks < job.nodes:
            return f"{where} on {job.nodes} nodes: SLURM starts at least one task on every node"
        nodes = job.nodes
    else:
        if job.ranks < part.min_nodes:
            return f"{where}, but {p} gives a job at least {part.min_nodes} nodes (MinNodes), one task each"
        nodes = max(part.min_nodes, min(part.max_nodes, job.ranks))
    # tasks each node can take, whole ranks only: 3 CPUs hold one 2-CPU rank
    tasks = [c // job.cpus_per_rank for c in part.node_cpus[:nodes]]
    if sum(tasks) >= job.ranks and all(tasks):
        return None
    held = sum(tasks) * job.cpus_per_rank
    if job.nodes is None:
        return f"{where} need {need} CPUs but {p} holds at most {held}"
    return f"{where} on {job.nodes} nodes need {need} CPUs but the {job.nodes} largest nodes of {p} hold {held}"


def partitions() -> tuple[dict[str, Partition], str | None]:
    """Every partition's nodes and limits and the default partition's name, asked of SLURM."""
    return parse_partitions(
        _slurm("scontrol", "show", "partition", "--oneliner"),
        _slurm("scontrol", "show", "node", "--oneliner"),
        _slurm("sinfo", "--noheader", "--Node", "--format=%N %P"),
    )


def _records(text: str, key: str) -> list[dict[str, str]]:
    """The Key=Value records of scontrol output, one per `key` (one line each with --oneliner, or
    blocks of indented lines without it). Values may hold spaces (OS=Linux 6.1 ..., Reason=Not
    responding): a value runs to the next Key=. Text before the first record is ignored."""
    found = []
    for chunk in re.split(rf"(?=\b{key}=)", text):
        if not chunk.startswith(f"{key}="):
            continue
        found.append(dict(re.findall(r"([A-Za-z][\w/:.]*)=(.*?)(?=\s+[A-Za-z][\w/:.]*=|\s*$)", chunk, re.S)))
    return found


def _int(value: str | None, default: int | None = None) -> int | None:
    """An integer field, or default for UNLIMITED, N/A, (null), a missing field or a suffixed value."""
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def node_cpus(scontrol_nodes: str) -> dict[str, tuple[int, list[str]]]:
    """Each node's usable CPUs and partitions from `scontrol show node`: CPUEfctv (22.05+: without
    the CPUs held back for the system, CoreSpecCount/CPUSpecList), else CPUTot (CPUs= before 15.08)
    less CPUSpecList, never more than its configured TRES cpu=."""
    nodes = {}
    for f in _records(scontrol_nodes, "NodeName"):
        cpus = _int(f.get("CPUEfctv"))
        if cpus is None:
            cpus = _int(f.get("CPUTot"), _int(f.get("CPUs"), 0))
            spec = f.get("CPUSpecList", "(null)")
            if spec not in ("", "(null)"):
                cpus -= len(_cpu_list(spec))
        if m := re.search(r"(?:^|,)cpu=(\d+)", f.get("CfgTRES", "")):
            cpus = min(cpus, int(m[1]))
        parts = [p for p in f.get("Partitions", "").split(",") if p and p != "(null)"]
        nodes[f["NodeName"]] = (max(0, cpus), parts)
    return nodes


def _cpu_list(spec: str) -> list[int]:
    """0-1,8,9 as [0, 1, 8, 9]."""
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.extend(range(int(lo), int(hi or lo) + 1) if (hi or lo).isdigit() else [int(lo)])
    return out


def sinfo_membership(sinfo_lines: str) -> dict[str, list[str]]:
    """`sinfo --Node --format='%N %P'` as partition -> nodes (the default partition's '*' dropped;
    a header line, blank lines and extra columns are ignored)."""
    members: dict[str, list[str]] = {}
    for line in sinfo_lines.splitlines():
        words = line.split()
        if len(words) < 2 or (words[0], words[1]) == ("NODELIST", "PARTITION"):
            continue
        members.setdefault(words[1].rstrip("*"), []).append(words[0])
    return members


def parse_partitions(
    scontrol_partitions: str, scontrol_nodes: str, sinfo_nodes: str = ""
) -> tuple[dict[str, Partition], str | None]:
    """Partitions with their nodes' usable CPUs (cut by MaxCPUsPerNode), MaxNodes and MinNodes, and
    the default partition's name. A node's partitions come from its Partitions= field, or from
    sinfo's node list where scontrol does not print them."""
    nodes = node_cpus(scontrol_nodes)
    members = sinfo_membership(sinfo_nodes)
    found, default = {}, None
    for f in _records(scontrol_partitions, "PartitionName"):
        name = f["PartitionName"]
        names = {n for n, (_, parts) in nodes.items() if name in parts} | set(members.get(name, []))
        cap = _int(f.get("MaxCPUsPerNode"))
        cpus = sorted((min(nodes[n][0], cap or nodes[n][0]) for n in names if n in nodes), reverse=True)
        if not cpus:  # no node detail: TotalCPUs spread evenly over TotalNodes, as a last resort
            total, count = _int(f.get("TotalCPUs"), 0), max(1, _int(f.get("TotalNodes"), 1))
            cpus = [min(total // count, cap or total // count)] * count
        max_nodes = min(len(cpus), _int(f.get("MaxNodes"), len(cpus)))
        limit = minutes(f.get("MaxTime", "UNLIMITED"))
        found[name] = Partition(name, cpus, max_nodes, max(1, _int(f.get("MinNodes"), 1)), limit)
        if f.get("Default") == "YES":
            default = name
    return found, default


def minutes(text: str) -> int | None:
    """A SLURM time limit (MaxTime: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in whole
    minutes rounded down; None for UNLIMITED, INFINITE or what is not a time."""
    days, dash, rest = text.partition("-") if "-" in text else ("0", "", text)
    try:
        parts = [int(p) for p in rest.split(":")]
        d = int(days)
    except ValueError:
        return None
    if dash:  # after a day count: hours first
        h, m, sec = (parts + [0, 0])[:3]
    else:
        h, m, sec = {1: [0, parts[0], 0], 2: [0, *parts], 3: parts}.get(len(parts), [0, 0, 0])
    return d * 1440 + h * 60 + m + sec // 60


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
    # a pool (a group job): rule_<pool>_<its rules>, e.g. rule_train-mpi-t1_commbench_train_mpi
    if m := re.fullmatch(r"rule_(train-[a-z]+-t\d+(?:-n\d+)?)_(\w+)", comment):
        rules = ", ".join(re.findall(r"commbench|train_single|train_mpi", m[2]))
        return f"pool {m[1]} ({rules}): its experiments in logs/train/, one after another"
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
        default = hidden_text(default) if key == "hidden" else str(default)
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
    """python -m mpinet.launch.slurm: this user's SLURM jobs with the experiment each one trains."""
    import argparse
    import getpass
    import sys

    from mpinet.study.experiments import COLUMNS, DEFAULTS

    argparse.ArgumentParser(
        prog="python -m mpinet.launch.slurm",
        description="List your queued and running SLURM jobs with the experiment each one trains "
        "(squeue shows only the job comment, whose values carry no keys).",
    ).parse_args()
    try:
        out = _slurm("squeue", "--noheader", "--user", getpass.getuser(), "--format=%i|%T|%M|%k")
    except MpinetError as e:
        print(f"mpinet.launch.slurm: error: {e}", file=sys.stderr)
        return 1
    print(queue_table(out, COLUMNS, DEFAULTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
