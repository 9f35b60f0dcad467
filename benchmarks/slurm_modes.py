"""Pools, the pilot and packing on one sweep (tests/test_slurm_pack.py's SWEEP) on the local cluster's
partition `nodes`: the SLURM jobs each submits and its occupancy, node-seconds in trainings (run.json's
start and end times the nodes the run used) over node-seconds its allocations held (sacct). The pilot,
which refuses `nodes`, runs the sweep's 1-node experiments. Writes docs/data/slurm_modes.json with the
machine's facts; docs/slurm.md quotes it.

    python benchmarks/slurm_modes.py   (the cluster started with: tests/slurm/local-cluster.sh start --nodes 3)
"""

import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from conftest import paced  # noqa: E402
from test_slurm import STEP_DELAY, _since, copy_for_nodes, sacct_jobs  # noqa: E402
from test_slurm_pack import DATASETS, SWEEP  # noqa: E402
from test_workflow import SNAKEMAKE, copy_env, write_config  # noqa: E402

from mpinet.analysis import allocation  # noqa: E402
from mpinet.analysis.allocation import expand_hostlist  # noqa: E402

OUT = REPO / "docs/data/slurm_modes.json"
# the test's sweep at 150 epochs: paced runs of 10 to 45 s, within a step's 1-minute time limit (the
# estimate knows no pacing), so what each mode spends around a run (Snakemake and srun starting, the
# microbenchmark) weighs as in a study of short runs, not more
EPOCHS = 150


def pools(wd):
    return [*SNAKEMAKE, "--profile", "profiles/slurm", "--configfile", "config/test.yaml"]


def pilot(wd):
    return [sys.executable, "-m", "mpinet.launch.pilot", "--configfile", "config/test.yaml", "--partition", "nodes"]


def pack(wd):
    # the cluster's 3 nodes, as the goal's sweep asks (left to itself it takes the fewest that fit: 2)
    cmd = [sys.executable, "-m", "mpinet.launch.pack", "--configfile", "config/test.yaml", "--partition", "nodes"]
    return [*cmd, "--nodes", "3"]


def measure(name, command, experiments, root: Path) -> dict:
    wd = copy_for_nodes(root / name)
    write_config(wd, {"datasets": DATASETS, "experiments": experiments})
    since = _since()
    p = subprocess.run(command(wd), cwd=wd, capture_output=True, text=True, env=paced(copy_env(wd), STEP_DELAY))
    if p.returncode != 0:
        raise SystemExit(f"{name} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    jobs = sacct_jobs(wd, since)
    held = sum(
        int(j.nnodes) * (datetime.fromisoformat(j.end) - datetime.fromisoformat(j.start)).total_seconds()
        for j in jobs.itertuples()
    )
    runs = [json.loads(r.read_text()) for r in (wd / "results/runs").rglob("run.json")]
    used = sum(_seconds(m) * _nodes(m) for m in runs)
    steps = wd / "results/test/metrics/steps.csv"  # a packed allocation's job steps (sacct), as the report reads them
    in_steps = allocation.occupancy(pd.read_csv(steps, dtype=str, keep_default_na=False)) if steps.exists() else {}
    return {
        # the report's occupancy: node-seconds in job steps (the microbenchmark's too) over node-seconds held
        **({"occupancy_steps": round(min(in_steps.values()), 3)} if in_steps else {}),
        "experiments": len(runs),
        "slurm_jobs": len(jobs),
        "training_jobs": int((~jobs["comment"].str.startswith("rule_prepare")).sum()),
        "node_seconds_held": round(held, 1),
        "node_seconds_training": round(used, 1),
        "occupancy": round(used / held, 3),
        "first_submit_to_last_end_s": (
            pd.to_datetime(jobs["end"]).max() - pd.to_datetime(jobs["submit"]).min()
        ).total_seconds(),
    }


def _seconds(run: dict) -> float:
    """A run's training span (run.json's timing start and end, ISO times)."""
    t = run["timing"]
    return (datetime.fromisoformat(t["end"]) - datetime.fromisoformat(t["start"])).total_seconds()


def _nodes(run: dict) -> int:
    """How many nodes a run held: its step's node list, else its recorded node count."""
    listed = (run.get("slurm") or {}).get("SLURM_STEP_NODELIST")
    return len(expand_hostlist(listed)) if listed else int(run.get("nodes") or 1)


def main() -> None:
    # `python benchmarks/slurm_modes.py pack`: only the modes named, the others kept from the last run
    names = sys.argv[1:] or ["pools", "pilot", "pack"]
    sweep = [{**e, "epochs": EPOCHS} for e in SWEEP]
    one_node = [e for e in sweep if not e.get("nodes") and e["ranks"] <= 2]
    modes = {"pools": (pools, sweep), "pilot": (pilot, one_node), "pack": (pack, sweep)}
    result = json.loads(OUT.read_text())["modes"] if OUT.exists() and sys.argv[1:] else {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in names:
            (root / name).mkdir()
            result[name] = measure(name, *modes[name], root)
    slurm = subprocess.run(["sinfo", "-V"], capture_output=True, text=True).stdout.strip()
    facts = {
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "cpu_model": next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if "model name" in ln
            ),
            "",
        ),
        "slurm": slurm,
        "cluster": "tests/slurm/local-cluster.sh --nodes 3: partition nodes, 3 namespaced nodes of 2 CPUs "
        "on this machine",
        "sweep": f"tests/test_slurm_pack.py SWEEP (12 iris runs, hidden [8]) at {EPOCHS} epochs, paced 10 ms a "
        "step; the pilot its 6 one-node runs; pack on the cluster's 3 nodes (--nodes 3)",
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip(),
        "date": datetime.now().isoformat(timespec="seconds"),
    }
    OUT.write_text(json.dumps({"machine": facts, "modes": result}, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
