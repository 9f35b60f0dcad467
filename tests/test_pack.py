"""make slurm-pack's decisions without a cluster: each step's srun options and node count, the
makespan estimate and the node count it picks, what it refuses, and the steps table sacct gives
afterwards (host lists, occupancy, steps at once, the picture)."""

import re
import shlex
from pathlib import Path

import pytest
import yaml
from test_figures_layout import layout_problems

from mpinet import MpinetError
from mpinet.analysis import allocation
from mpinet.launch import batch, pack
from mpinet.launch.launcher import PACK_ENV, allocation_node_cpus, step_nodes, step_options, step_priority
from mpinet.launch.slurm import Partition, minutes

# sacct -n -P -o JobID,JobName,NodeList,Start,End,State of an allocation of 3 nodes for 100 s: three
# 1-node steps at once, then a 2-node step beside a 1-node one; the batch and extern steps are left out
SACCT = """\
7|mpinet-pack|node[1-3]|2026-01-01T10:00:00|2026-01-01T10:01:40|COMPLETED
7.batch|batch|node1|2026-01-01T10:00:00|2026-01-01T10:01:40|COMPLETED
7.extern|extern|node[1-3]|2026-01-01T10:00:00|2026-01-01T10:01:40|COMPLETED
7.0|iris/algorithm~serial/ranks~1/seed~1/repeat~1|node1|2026-01-01T10:00:00|2026-01-01T10:00:50|COMPLETED
7.1|iris/algorithm~allreduce/ranks~2/seed~1/repeat~1|node2|2026-01-01T10:00:00|2026-01-01T10:00:50|COMPLETED
7.2|iris/algorithm~allreduce/ranks~2/seed~2/repeat~1|node3|2026-01-01T10:00:00|2026-01-01T10:00:50|FAILED
7.3|iris/algorithm~allreduce/ranks~4/seed~1/repeat~1|node[1-2]|2026-01-01T10:00:50|2026-01-01T10:01:40|COMPLETED
7.4|commbench|node3|2026-01-01T10:00:50|2026-01-01T10:01:40|CANCELLED by 0
"""


def test_a_timed_step_asks_for_whole_nodes_and_its_own_time_limit():
    line = step_options(2, 3, "iris/algorithm~allreduce/seed~1", whole=True)
    assert shlex.split(line) == ["--nodes=2", "--whole", "--time=3", "--job-name=iris/algorithm~allreduce/seed~1"]
    assert "--exact" in step_options(1, 1, "x", whole=False) and "--whole" not in step_options(1, 1, "x", False)
    assert "'a b'" in step_options(1, 1, "a b", whole=True)  # quoted for the shell


def test_a_step_takes_the_experiment_s_nodes_else_as_many_as_its_cpus_fill():
    assert step_nodes(2, 1, None, 2) == 1 and step_nodes(3, 1, None, 2) == 2 and step_nodes(2, 2, None, 2) == 2
    assert step_nodes(2, 1, 2, 16) == 2 and step_nodes(2, 1, float("nan"), 16) == 1  # NaN: not given
    assert allocation_node_cpus("2(x3)") == 2 and allocation_node_cpus("16,8(x2)") == 8
    with pytest.raises(MpinetError, match="SLURM_JOB_CPUS_PER_NODE"):
        allocation_node_cpus("")


def test_in_a_packed_allocation_the_widest_steps_start_first_the_longest_first_among_a_width():
    # (nodes, estimated seconds); the microbenchmark's seconds are inf: first of its width
    steps = [(1, 45.0), (2, 17.0), (1, 25.0), (2, float("inf")), (3, 5.0), (2, 25.0), (1, 2e9)]
    ranked = sorted(steps, key=lambda s: -step_priority(*s))
    assert ranked == [(3, 5.0), (2, float("inf")), (2, 25.0), (2, 17.0), (1, 2e9), (1, 45.0), (1, 25.0)]


def test_the_makespan_places_the_longest_steps_first_on_the_first_free_nodes():
    steps = [pack.Step(f"s{i}", w, m) for i, (w, m) in enumerate([(2, 10), (1, 10), (1, 5), (1, 5), (2, 4)])]
    # 3 nodes: the 2-wide 10 and a 1-wide 10 at once (0-10), the two 5s (10-15), then the 2-wide 4
    assert pack.makespan(steps, 3) == 19
    assert pack.makespan(steps, 100) == 10  # every step at once: the longest
    assert pack.makespan(steps, 2) == 24  # the 10, the 1-wide steps two at once (10 beside 5 + 5), the 4
    with pytest.raises(MpinetError, match="2 nodes per step, but the allocation has 1"):
        pack.makespan(steps, 1)


def test_the_allocation_is_the_fewest_nodes_whose_makespan_fits_the_partition_s_limit():
    steps = [pack.Step(f"s{i}", 1, 10) for i in range(8)]
    part = Partition("p", [2] * 64, 64, max_minutes=30 + batch.EXTRA_MINUTES)
    assert pack.choose_nodes(steps, part) == 3  # 3 rounds of 10 minutes on 3 nodes; 2 nodes need 40
    assert pack.choose_nodes(steps, Partition("p", [2] * 8, 8)) == 1  # no limit: the widest step's nodes
    assert pack.choose_nodes([pack.Step("w", 4, 1)], Partition("p", [2] * 8, 8)) == 4
    assert pack.choose_nodes(steps, part, per_node=2) == 2  # steps sharing nodes: 2 CPUs a node
    with pytest.raises(MpinetError, match="over its time limit of 10; split the study"):
        pack.choose_nodes(steps, Partition("p", [2] * 2, 2, max_minutes=10))


def test_slurm_time_limits_read_as_minutes():
    assert [minutes(t) for t in ("UNLIMITED", "60", "30:00", "2:00:00", "1-00:00:00", "2-12", "1-2:30")] == [
        None,
        60,
        30,
        120,
        1440,
        3600,
        1590,
    ]


def test_the_allocation_s_sbatch_line_holds_whole_nodes_and_runs_snakemake_with_a_slot_per_node():
    cmd = pack.sbatch_command(["--configfile", "c.yaml"], (3, 13, 6), False, ("nodes", "ci"), "study")
    assert {"--exclusive", "--nodes=3", "--time=13", "--partition=nodes", "--account=ci"} <= set(cmd)
    wrap = next(c for c in cmd if c.startswith("--wrap="))
    assert wrap.startswith(f"--wrap={PACK_ENV}=exclusive-node ") and "--cores 6 --resources train_slots=3" in wrap
    assert "--keep-going" in wrap and "--rerun-incomplete" in wrap and "--scheduler greedy" in wrap
    shared = pack.sbatch_command(["--configfile", "c.yaml"], (2, 5, 4), True, (None, ""), "study")
    assert f"{PACK_ENV}=shared-node" in shared[-1] and not any(c.startswith("--partition") for c in shared)


@pytest.mark.parametrize(
    "nodes,experiment,message",
    [
        (1, {"ranks": 2, "nodes": 2}, "take 2 whole nodes, but the allocation has 1 (NODES=1); raise NODES"),
        (None, {"ranks": 8, "nodes": 4}, "on 4 nodes, but SLURM partition 'p' gives a job at most 3 nodes"),
        (9, {"ranks": 2}, "--nodes 9: SLURM partition 'p' gives a job 1 to 3 nodes"),
    ],
)
def test_what_cannot_fit_is_refused_in_one_line_before_anything_runs(
    tmp_path, monkeypatch, capsys, nodes, experiment, message
):
    config = tmp_path / "c.yaml"
    exp = {"dataset": "iris", "algorithm": "allreduce", **experiment}
    config.write_text(yaml.safe_dump({"datasets": {"iris": {"source": "bundled:iris"}}, "experiments": [exp]}))
    monkeypatch.setattr(pack, "partitions", lambda: ({"p": Partition("p", [2, 2, 2], 3)}, "p"))
    argv = ["--configfile", str(config), "--dry-run", *(["--nodes", str(nodes)] if nodes else [])]
    assert pack.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("mpinet.launch.pack: error: ") and message in err, err


def test_the_allocation_runs_only_the_trainings_and_the_microbenchmark_of_the_workflow():
    smk = "".join(p.read_text() for p in (Path(__file__).parents[1] / "workflow/rules").glob("*.smk"))
    assert set(batch.ALLOCATION_RULES) <= set(re.findall(r"^rule (\w+):", smk, re.M))
    assert batch.INSIDE[batch.INSIDE.index("--until") + 1 :] == list(batch.ALLOCATION_RULES)


def test_after_the_allocation_nothing_trains_here_while_a_run_is_missing(monkeypatch, capsys):
    row = {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "seed": 1}
    monkeypatch.setattr(batch, "unfinished", lambda table, study: [(row, 3)] * 4)
    ran = []
    monkeypatch.setattr(batch.subprocess, "run", lambda *a, **k: ran.append(a))
    assert batch.finish_here(["--configfile", "c.yaml"], None, "s", "prog") == 1
    (err,) = capsys.readouterr().err.splitlines()
    assert ran == [] and err.startswith("prog: error: 4 experiments have no run yet (iris allreduce ranks=2 seed=1, ")
    assert err.endswith(", ...); run the command again")


def test_host_lists_expand_as_slurm_writes_them():
    assert allocation.expand_hostlist("node[1-3,5],gpu07") == ["node1", "node2", "node3", "node5", "gpu07"]
    assert allocation.expand_hostlist("cn[008-010]") == ["cn008", "cn009", "cn010"]
    assert allocation.expand_hostlist("localhost") == ["localhost"]


def test_the_steps_table_keeps_the_allocation_and_its_numbered_steps():
    t = allocation.parse_steps(SACCT)
    assert t["step"].tolist() == ["allocation", "0", "1", "2", "3", "4"]
    assert t.set_index("step").loc["3", "nodes"] == "node1 node2"
    assert t.set_index("step").loc["4", "state"] == "CANCELLED"  # 'CANCELLED by 0': the state alone


def test_occupancy_is_node_seconds_in_steps_over_node_seconds_held():
    t = allocation.parse_steps(SACCT)
    # 300 node-seconds held; steps fill node1 and node2 for 100 s each, node3 for 50 + 50
    assert allocation.occupancy(t) == {"7": pytest.approx(1.0)}
    gap = allocation.parse_steps(SACCT.replace("7.4|", "#").replace("7.3|", "#"))
    assert allocation.occupancy(gap)["7"] == pytest.approx(150 / 300)
    # two steps on one node at once count its busy time once
    twice = allocation.parse_steps(SACCT + SACCT.splitlines()[3].replace("7.0|", "7.9|") + "\n")
    assert allocation.occupancy(twice)["7"] == pytest.approx(1.0)


def test_steps_sharing_a_node_at_once_are_found_and_touching_ones_are_not():
    t = allocation.parse_steps(SACCT)
    assert allocation.shared_nodes(t) == [] and allocation.most_at_once(t) == 3
    clash = allocation.parse_steps(SACCT.replace("7.4|commbench|node3", "7.4|commbench|node2"))
    assert allocation.shared_nodes(clash) == [("7.3", "7.4", "node2")]


def test_a_later_allocation_s_steps_join_the_table_and_replace_only_its_own(tmp_path):
    path = tmp_path / "metrics/steps.csv"
    allocation.write_steps(allocation.parse_steps(SACCT), path)
    allocation.write_steps(allocation.parse_steps(SACCT.replace("7", "8")), path)
    table = allocation.write_steps(allocation.parse_steps(SACCT.replace("7", "8")), path)
    assert table["job"].value_counts().to_dict() == {"7": 6, "8": 6}


def test_the_allocation_figure_shows_every_step_and_the_occupancy_and_reads(tmp_path):
    path = tmp_path / "steps.csv"
    allocation.write_steps(allocation.parse_steps(SACCT), path)
    texts = allocation.plot_allocation(path, tmp_path / "allocation.png")
    assert "occupancy 100%" in texts["title"] and "5 steps on 3 nodes" in texts["title"]
    assert (
        "0: iris serial 1 rank seed 1" in texts["legend"]
        and "2: iris allreduce 2 ranks seed 2 (failed)" in texts["legend"]
    )
    assert layout_problems(texts["figure"]) == []
    assert (tmp_path / "allocation.png").stat().st_size > 0
