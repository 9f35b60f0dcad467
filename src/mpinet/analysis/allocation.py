"""What a packed allocation (make slurm-pack) did, from SLURM's accounting: each job step's nodes,
start and end (steps.csv), how much of the node-time it held its steps used (occupancy), and the
picture of it: nodes up, time across, one bar per step.

sacct gives times to the second; two steps count as running at once only when one starts before the
other ends (a step that starts in the second another ended does not overlap it)."""

import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
from matplotlib.patches import Patch

from mpinet.analysis import style
from mpinet.analysis.accounting import FINAL_STATES
from mpinet.files import atomic_path

SACCT_FIELDS = ("JobID", "JobName", "NodeList", "Start", "End", "State")
COLUMNS = ("job", "step", "name", "nodes", "start", "end", "state")  # step: 'allocation' for the job itself


def expand_hostlist(text: str) -> list[str]:
    """SLURM's host list as names: 'node[1-3,5],gpu07' -> node1, node2, node3, node5, gpu07 (the
    digits' zero padding kept)."""
    hosts = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            hosts += [f"{prefix}{n:0{len(lo)}d}" for n in range(int(lo), int(hi or lo) + 1)]
    return hosts


def parse_steps(text: str) -> pd.DataFrame:
    """sacct -n -P -o SACCT_FIELDS of one or more jobs -> one row per job ('allocation') and per
    numbered step (the batch script and extern steps left out), nodes as 'node1 node2'."""
    rows = []
    for line in text.splitlines():
        values = line.split("|")
        if len(values) != len(SACCT_FIELDS):
            continue
        f = dict(zip(SACCT_FIELDS, values))
        job, _, step = f["JobID"].partition(".")
        if step and not step.isdigit():
            continue
        nodes = " ".join(expand_hostlist(f["NodeList"])) if f["NodeList"] not in ("", "None assigned") else ""
        state = f["State"].split(" ")[0]
        rows.append((job, step or "allocation", f["JobName"], nodes, f["Start"], f["End"], state))
    return pd.DataFrame(rows, columns=COLUMNS)


def query_steps(job: str, wait_s: float = 30.0) -> pd.DataFrame:
    """One job's rows (parse_steps) as sacct gives them, waiting up to wait_s for every step to reach a
    final state (accounting lags a step's end by a moment); empty without sacct."""
    if shutil.which("sacct") is None:
        return pd.DataFrame(columns=COLUMNS)
    deadline = time.monotonic() + wait_s
    while True:
        cmd = ["sacct", "-n", "-P", "-j", job, "-o", ",".join(SACCT_FIELDS)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        table = parse_steps(p.stdout if p.returncode == 0 else "")
        if table["state"].isin(FINAL_STATES).all() and len(table) or time.monotonic() > deadline:
            return table
        time.sleep(2)


def write_steps(table: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """Add one job's rows to a study's steps.csv (an earlier allocation's rows kept, this job's replaced)."""
    path = Path(path)
    if path.exists():
        old = pd.read_csv(path, dtype=str, keep_default_na=False)
        table = pd.concat([old[~old["job"].isin(table["job"])], table.astype(str)], ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".csv") as tmp:
        table.to_csv(tmp, index=False)
    return table


def spans(table: pd.DataFrame) -> pd.DataFrame:
    """The rows with start and end as seconds from their allocation's start (a step still running or
    never started dropped) and nodes as lists."""
    t = table.copy()
    t["job"] = t["job"].astype(str)
    for c in ("start", "end"):
        t[c] = pd.to_datetime(t[c], errors="coerce", format="ISO8601")
    begin = t[t["step"] == "allocation"].set_index("job")["start"]
    t = t[t["job"].isin(begin.index) & t["start"].notna() & t["end"].notna()].copy()
    t["t0"] = (t["start"] - t["job"].map(begin)).dt.total_seconds()
    t["t1"] = (t["end"] - t["job"].map(begin)).dt.total_seconds()
    t["nodes"] = [str(n).split() for n in t["nodes"].fillna("")]
    return t


def occupancy(table: pd.DataFrame) -> dict[str, float]:
    """Per allocation: node-seconds its steps held (each node's busy time, steps sharing a node counted
    once) / node-seconds allocated (its nodes x its elapsed time)."""
    t = spans(table)
    out = {}
    for job, rows in t.groupby("job", sort=False):
        whole = rows[rows["step"] == "allocation"].iloc[0]
        held = len(whole["nodes"]) * (whole["t1"] - whole["t0"])
        steps = rows[rows["step"] != "allocation"]
        busy = sum(_union([(s.t0, s.t1) for s in steps.itertuples() if node in s.nodes]) for node in whole["nodes"])
        out[job] = busy / held if held > 0 else float("nan")
    return out


def shared_nodes(table: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(step, step, node) of every two steps of one allocation that ran at once on a node."""
    t = spans(table)
    steps = list(t[t["step"] != "allocation"].itertuples())
    found = []
    for a_i, a in enumerate(steps):
        for b in steps[a_i + 1 :]:
            if a.job == b.job and a.t0 < b.t1 and b.t0 < a.t1:
                found += [(f"{a.job}.{a.step}", f"{b.job}.{b.step}", n) for n in sorted(set(a.nodes) & set(b.nodes))]
    return found


def most_at_once(table: pd.DataFrame) -> int:
    """The most steps of one allocation that ran at the same time."""
    t = spans(table)
    steps = t[t["step"] != "allocation"]
    events = sorted([(s, 1) for s in steps["t0"]] + [(e, -1) for e in steps["t1"]])
    running = best = 0
    for _, change in events:  # an end before a start at the same second: touching steps are not at once
        running += change
        best = max(best, running)
    return best


def plot_allocation(steps_csv: str | Path, out: str | Path) -> dict:
    """The study's latest allocation: one row per node, one bar per step (numbered; the legend names
    each step's run), the occupancy in the title. Returns style.finish's texts."""
    table = pd.read_csv(steps_csv, dtype=str, keep_default_na=False)
    t = spans(table)
    job = t[t["step"] == "allocation"]["job"].iloc[-1]
    rows = t[t["job"] == job]
    whole = rows[rows["step"] == "allocation"].iloc[0]
    steps = rows[rows["step"] != "allocation"].sort_values("t0")
    nodes = whole["nodes"]
    fig, ax = style.subplots(figsize=(9, 1.2 + 0.45 * len(nodes)))
    entries = {}
    for s in steps.itertuples():
        design = _design(s.name)
        color = style.DESIGNS[design].color if design in style.DESIGNS else "#999999"
        failed = s.state != "COMPLETED"
        for node in s.nodes:
            y = nodes.index(node)
            ax.barh(y, s.t1 - s.t0, left=s.t0, height=0.7, color=color, edgecolor="black", hatch="//" * failed)
        ax.text((s.t0 + s.t1) / 2, nodes.index(s.nodes[0]), s.step, ha="center", va="center", fontsize=7)
        entries[f"{s.step}: {short_label(s.name)}" + f" ({s.state.lower()})" * failed] = Patch(color=color)
    ax.set_yticks(range(len(nodes)), nodes)
    ax.invert_yaxis()
    ax.set_xlim(0, max(whole["t1"] - whole["t0"], 1))
    ax.set_xlabel("seconds since the allocation started")
    ax.set_ylabel("node")
    share = occupancy(table[table["job"] == job])[job]
    bottom = style.figure_legend(fig, [ax], entries=entries)
    title = f"Allocation {job}: {len(steps)} steps on {len(nodes)} nodes, occupancy {share:.0%}"
    title += " (node-seconds in steps / node-seconds held)"
    return style.finish(fig, [ax], title, out, legend=False, bottom=bottom)


def short_label(name: str) -> str:
    """A step's run name (<dataset>/key~value/...) as 'iris allreduce 2 ranks seed 1'; other names as they are."""
    parts = dict(p.split("~", 1) for p in name.split("/")[1:] if "~" in p)
    if "algorithm" not in parts:
        return name
    ranks = int(parts.get("ranks", 1))
    nodes = f" on {parts['nodes']} nodes" if parts.get("nodes", "").isdigit() else ""
    return f"{name.split('/')[0]} {parts['algorithm']} {style.ranks_text(ranks)}{nodes} seed {parts.get('seed', '?')}"


def _design(name: str) -> str:
    return next((p.split("~", 1)[1] for p in name.split("/") if p.startswith("algorithm~")), "")


def _union(intervals: list[tuple[float, float]]) -> float:
    """The length of a union of intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total
