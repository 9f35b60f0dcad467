"""Questions asked of SLURM before submission, on scontrol/squeue output as SLURM prints it."""

from pathlib import Path

import pytest
import yaml

from mpinet import MpinetError
from mpinet.launch.slurm import (
    Partition,
    TrainingJob,
    check_fits,
    describe_comment,
    node_cpus,
    parse_partitions,
    queue_table,
    sinfo_membership,
)
from mpinet.study.experiments import COLUMNS, DEFAULTS

# --- scontrol and sinfo output as real clusters print it (tests/slurm/samples/), each with its source ---


def sample(name: str) -> str:
    """A sample kept byte for byte (long lines, trailing blanks) beside the cluster script."""
    return (Path(__file__).parent / "slurm" / "samples" / name).read_text()


# The bundled cluster (tests/slurm/local-cluster.sh start --nodes 3, slurm-wlm 22.05.8 from Debian 12),
# after `scontrol create PartitionName=wide Nodes=node[1-3] MinNodes=2 MaxCPUsPerNode=1 State=UP` and
# `scontrol update NodeName=node3 State=DOWN Reason="disk replaced, not back yet"`; sinfo with its header.
BUNDLED_PARTITIONS = sample("bundled_partitions.txt")
BUNDLED_NODES = sample("bundled_nodes.txt")
BUNDLED_SINFO = "NODELIST PARTITION\nnode1 wide\nnode1 debug*\nnode2 debug*\nnode2 wide\nnode3 debug*\nnode3 wide\n"

# The University of Geneva's Bamboo cluster (SLURM 23.11.7), from a user's notes in a public GitHub
# repository (the search index's snapshot; the repository's name was not recorded): 2 of 128 CPUs
# held back for the system (CoreSpecCount=2), so CPUEfctv=126.
BAMBOO_CPU001 = sample("bamboo_cpu001.txt")
# The same cluster's gpu010 (SLURM 25.11.3), drained, in two partitions, its configured TRES cpu=94 of
# 96 (same source kind; the excerpt starts at CPUTot=, so its first line is shortened to NodeName=).
BAMBOO_GPU010 = sample("bamboo_gpu010.txt")
# Taiwan Computing Cloud's gn0101.twcc.ai (SLURM 17.11, before CPUEfctv existed), from a public
# Traditional-Chinese guide in a GitHub repository (the index's snapshot): CPUSpecList=0-1 of 36.
TWCC_GN0101 = sample("twcc_gn0101.txt")
# SchedMD's own documentation (SchedMD/slurm, doc/html/quickstart.shtml): partitions with MinNodes=1
# and MaxNodes=26, a DOWN* node in the old format (CPUs=, no Partitions=).
SCHEDMD_QUICKSTART = sample("schedmd_quickstart.txt")
SCHEDMD_ADEV1 = sample("schedmd_adev1.txt")
# A 561-node site's partitions as snakemake-executor-plugin-slurm tests its own parser on them
# (snakemake/snakemake-executor-plugin-slurm, tests/test_scontrol_parsing.py; abridged to the lines
# that matter here): `standard` gives a job one node.
PLUGIN_PARTITIONS = sample("plugin_partitions.txt")


def _fit(parts, default, **job):
    """None when the job fits, else the refusal's text."""
    try:
        check_fits([TrainingJob("x", **job)], parts, default)
    except MpinetError as e:
        return str(e)
    return None


def test_records_keep_values_with_spaces_and_skip_what_is_not_a_record():
    nodes = node_cpus("scontrol: some banner line\n" + BUNDLED_NODES)
    assert nodes == {n: (2, ["debug", "wide"]) for n in ("node1", "node2", "node3")}
    parts, default = parse_partitions(BUNDLED_PARTITIONS, BUNDLED_NODES, BUNDLED_SINFO)
    assert default == "debug" and set(parts) == {"debug", "wide"}
    assert sinfo_membership(BUNDLED_SINFO + "\n\nnode4 extra  columns here\n")["debug"] == ["node1", "node2", "node3"]


def test_bundled_cluster_min_nodes_and_max_cpus_per_node():
    parts, default = parse_partitions(BUNDLED_PARTITIONS, BUNDLED_NODES, BUNDLED_SINFO)
    assert parts["debug"] == Partition("debug", [2, 2, 2], 3, 1)  # a DOWN node still counts: jobs wait for it
    assert parts["wide"] == Partition("wide", [1, 1, 1], 3, 2)
    assert _fit(parts, default, ranks=6) is None and "holds at most 6" in _fit(parts, default, ranks=7)
    # wide: MinNodes=2, one CPU per node
    assert "at least 2 nodes (MinNodes), one task each" in _fit(parts, default, ranks=1, partition="wide")
    assert _fit(parts, default, ranks=3, partition="wide") is None
    assert "holds at most 3" in _fit(parts, default, ranks=4, partition="wide")
    assert "at least 2 nodes (MinNodes)" in _fit(parts, default, ranks=2, nodes=1, partition="wide")
    assert "at least one task on every node" in _fit(parts, default, ranks=2, nodes=3)


def test_cpus_held_back_for_the_system_are_not_offered():
    parts, _ = parse_partitions("PartitionName=debug-cpu Default=YES MaxNodes=UNLIMITED", BAMBOO_CPU001)
    assert parts["debug-cpu"].node_cpus == [126]  # CPUEfctv, not CPUTot=128
    assert "holds at most 126" in _fit(parts, "debug-cpu", ranks=127)
    drained = node_cpus(BAMBOO_GPU010)  # no CPUEfctv in the excerpt: TRES cpu=94 below CPUTot=96
    assert drained == {"gpu010": (94, ["private-kalousis-gpu", "shared-gpu"])}
    assert node_cpus(TWCC_GN0101) == {"gn0101.twcc.ai": (34, ["SlurmDefault"])}  # 17.11: 36 less CPUSpecList 0-1


def test_each_partition_is_sized_by_its_own_nodes_and_tasks_may_spread_unevenly():
    # one cluster with a 126-CPU node and a 94-CPU node: partitions by their own nodes, not the largest
    nodes = BAMBOO_CPU001 + "\n" + BAMBOO_GPU010
    text = "PartitionName=debug-cpu Default=YES\nPartitionName=shared-gpu MaxNodes=UNLIMITED\n"
    sinfo = "cpu001 mixed\ngpu010 mixed\n"  # both in a third partition only sinfo knows of
    parts, default = parse_partitions(text + "PartitionName=mixed MaxNodes=2\n", nodes, sinfo)
    assert parts["shared-gpu"].node_cpus == [94] and parts["mixed"].node_cpus == [126, 94]
    assert "holds at most 94" in _fit(parts, default, ranks=100, partition="shared-gpu")
    # 200 ranks on 2 nodes: 126 + 74 fits, though an even spread (100 each) would not fit the 94-CPU node
    assert _fit(parts, default, ranks=200, nodes=2, partition="mixed") is None
    assert "the 2 largest nodes of SLURM partition 'mixed' hold 220" in _fit(
        parts, default, ranks=221, nodes=2, partition="mixed"
    )
    # 2 CPUs per rank: 63 + 47 ranks
    assert _fit(parts, default, ranks=110, cpus_per_rank=2, partition="mixed") is None
    assert _fit(parts, default, ranks=111, cpus_per_rank=2, partition="mixed") is not None


def test_old_output_without_node_detail_spreads_total_cpus_over_total_nodes():
    parts, default = parse_partitions(SCHEDMD_QUICKSTART, SCHEDMD_ADEV1)
    assert default == "debug"
    assert parts["debug"] == Partition("debug", [8] * 5, 5, 1) and parts["batch"].cpus() == 80
    assert node_cpus(SCHEDMD_ADEV1) == {"adev1": (8, [])}  # DOWN*, CPUs= of old releases
    assert _fit(parts, default, ranks=40) is None and "holds at most 40" in _fit(parts, default, ranks=41)
    parts, default = parse_partitions(PLUGIN_PARTITIONS, "")
    assert default == "standard" and parts["standard"].max_nodes == 1
    assert "holds at most 128" in _fit(parts, default, ranks=129)  # 71808 / 561 per node, one node
    assert _fit(parts, default, ranks=129, partition="parallel") is None


def test_a_job_that_fits_passes_and_one_that_does_not_names_the_experiment_and_limit():
    parts = {"debug": Partition("debug", [4], 1)}
    check_fits([TrainingJob("results/runs/iris/a", 4)], parts, "debug")
    jobs = [TrainingJob("results/runs/iris/ranks~5", 5), TrainingJob("results/runs/iris/ranks~8", 8)]
    with pytest.raises(MpinetError) as e:
        check_fits(jobs, parts, "debug")
    assert str(e.value) == (
        "results/runs/iris/ranks~5: 5 ranks need 5 CPUs but SLURM partition 'debug' holds at most 4 "
        "(and 1 more experiments); lower ranks or nodes in the config or choose a larger slurm_partition"
    )


def test_ranks_spread_over_nodes_must_find_the_nodes_and_fit_on_them():
    parts = {"debug": Partition("debug", [4, 4, 4], 3), "small": Partition("small", [4, 4, 4], 1)}
    check_fits([TrainingJob("a", 12, nodes=3), TrainingJob("b", 3, nodes=3)], parts, "debug")
    with pytest.raises(
        MpinetError, match="^b: 4 ranks on 4 nodes, but SLURM partition 'debug' gives a job at most 3 nodes;"
    ):
        check_fits([TrainingJob("b", 4, nodes=4)], parts, "debug")
    with pytest.raises(
        MpinetError, match="^c: 2 ranks on 2 nodes, but SLURM partition 'small' gives a job at most 1 nodes"
    ):
        check_fits([TrainingJob("c", 2, nodes=2, partition="small")], parts, "debug")
    with pytest.raises(MpinetError, match="^d: 9 ranks on 2 nodes need 9 CPUs but the 2 largest nodes .* hold 8"):
        check_fits([TrainingJob("d", 9, nodes=2)], parts, "debug")
    with pytest.raises(MpinetError, match="^e: 3 ranks on 2 nodes need 9 CPUs but .* hold 6"):
        check_fits([TrainingJob("e", 3, cpus_per_rank=3, nodes=2)], parts, "debug")


def test_an_unknown_partition_is_named():
    with pytest.raises(MpinetError, match="partition 'gpu' does not exist \\(partitions: debug\\)"):
        check_fits([TrainingJob("x", 2, partition="gpu")], {"debug": Partition("debug", [4], 1)}, "debug")


def test_a_job_comment_reads_as_its_experiment_with_only_non_default_values():
    comment = "rule_train_mpi_wildcards_iris_allreduce_2_1_4_0.01_100_0_0_30-20_l2_True_float32_1_samples_True_7_1"
    assert describe_comment(comment, COLUMNS, DEFAULTS) == (
        "iris allreduce ranks=2 learning_rate=0.01 faithful=True seed=7"
    )
    assert describe_comment("rule_prepare_wildcards_iris", COLUMNS, DEFAULTS) == "rule_prepare_wildcards_iris"
    pool = describe_comment("rule_train-mpi-t1-n2_commbench_train_mpi", COLUMNS, DEFAULTS)
    assert pool.startswith("pool train-mpi-t1-n2 (commbench, train_mpi)")
    table = queue_table(f"12|RUNNING|0:05|{comment}\n", COLUMNS, DEFAULTS)
    assert table.splitlines()[1].split()[:3] == ["12", "RUNNING", "0:05"]


def test_memory_per_cpu_covers_a_ranks_shard_the_test_array_and_the_runtime():
    from mpinet.launch.slurm import mem_per_cpu_mb

    intel_train, intel_test = 14034 * 67500 * 4, 3000 * 67500 * 4  # float32 at 150 px
    assert mem_per_cpu_mb(intel_train, intel_test, ranks=2, threads=1) == int(1807.1 + 772.5 + 300) + 1
    assert mem_per_cpu_mb(intel_train, intel_test, ranks=2, threads=2) == int((1807.1 + 772.5 + 300) / 2) + 1

    # a design that holds the global batch asks for its rows; one that reads every row, for all of them
    batch = 4 * 67500 * 4
    assert mem_per_cpu_mb(intel_train, intel_test, 2, 1, "allreduce", batch) == int(1807.1 + 772.5 + 300) + 1
    assert mem_per_cpu_mb(intel_train, intel_test, 2, 1, "allgather", batch) == int(1807.1 + 772.5 + 2.1 + 300) + 1
    assert mem_per_cpu_mb(intel_train, intel_test, 2, 1, "sharded", batch) == int(3614.2 + 772.5 + 2.1 + 300) + 1


def test_a_batch_of_rows_is_sized_from_the_prepared_array_in_the_training_dtype(tmp_path):
    import numpy as np

    from mpinet.launch.slurm import batch_bytes

    np.save(tmp_path / "train_x.npy", np.zeros((10, 300), dtype=np.float32))
    assert batch_bytes(tmp_path / "train_x.npy", 4, "float64") == 4 * 300 * 8
    assert batch_bytes(tmp_path / "missing.npy", 4, "float32") == 0  # not prepared yet


def test_a_pilot_refuses_a_study_spread_over_nodes_before_asking_slurm(tmp_path, capsys):
    from mpinet.launch import pilot

    config = tmp_path / "spread.yaml"
    experiments = [{"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "nodes": 2}]
    config.write_text(yaml.safe_dump({"datasets": {"iris": {"source": "bundled:iris"}}, "experiments": experiments}))
    assert pilot.main(["--configfile", str(config), "--dry-run"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "a pilot runs on one node" in err and "nodes 2" in err and str(config) in err
    assert pilot.main(["--configfile", str(tmp_path / "missing.yaml")]) == 1
    assert "missing.yaml: cannot read its experiments" in capsys.readouterr().err


def test_the_snakemake_internal_the_pools_write_still_exists_in_the_pinned_version():
    """pools.smk's pool_name writes workflow.parent_groupids (no public way to map a pool's name to
    the profile's `train` group-components entry); the DAG must still read it when it sizes groups."""
    import importlib.util
    from pathlib import Path

    source = Path(importlib.util.find_spec("snakemake").origin).parent
    assert "def parent_groupids(self)" in (source / "workflow.py").read_text()
    assert "self.workflow.parent_groupids.get(groupid, groupid)" in (source / "dag.py").read_text()
