"""Questions asked of SLURM before submission, on scontrol/squeue output as SLURM prints it."""

import pytest

from mpinet import MpinetError
from mpinet.cluster import Partition, TrainingJob, check_fits, describe_comment, parse_partitions, queue_table
from mpinet.experiments import COLUMNS, DEFAULTS

SCONTROL = (
    "PartitionName=debug AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxCPUsPerNode=UNLIMITED "
    "Nodes=n[1-3] State=UP TotalCPUs=12 TotalNodes=3\n"
    "PartitionName=small Default=NO MaxNodes=1 MaxCPUsPerNode=UNLIMITED Nodes=n[1-3] TotalCPUs=12 TotalNodes=3\n"
    "PartitionName=capped Default=NO MaxNodes=UNLIMITED MaxCPUsPerNode=2 Nodes=n[1-3] TotalCPUs=12 TotalNodes=3\n"
)
NODES = {"n1": 4, "n2": 4, "n3": 4}


def test_partition_capacity_follows_total_cpus_max_nodes_and_max_cpus_per_node():
    parts, default = parse_partitions(SCONTROL, NODES)
    assert default == "debug"
    assert {n: p.cpus for n, p in parts.items()} == {"debug": 12, "small": 4, "capped": 6}


def test_a_job_that_fits_passes_and_one_that_does_not_names_the_experiment_and_limit():
    parts = {"debug": Partition("debug", 4)}
    check_fits([TrainingJob("results/runs/iris/a", 4)], parts, "debug")
    jobs = [TrainingJob("results/runs/iris/ranks~5", 5), TrainingJob("results/runs/iris/ranks~8", 8)]
    with pytest.raises(MpinetError) as e:
        check_fits(jobs, parts, "debug")
    assert str(e.value) == (
        "results/runs/iris/ranks~5: 5 ranks need 5 CPUs but SLURM partition 'debug' holds at most 4 "
        "(and 1 more experiments); lower ranks or nodes in the config or choose a larger slurm_partition"
    )


def test_ranks_spread_over_nodes_must_find_the_nodes_and_fit_on_each():
    parts, _ = parse_partitions(SCONTROL, NODES)
    assert (parts["debug"].nodes, parts["debug"].cpus_per_node) == (3, 4)
    assert (parts["small"].nodes, parts["capped"].cpus_per_node) == (1, 2)
    check_fits([TrainingJob("a", 12, nodes=3), TrainingJob("b", 3, nodes=3)], parts, "debug")
    with pytest.raises(
        MpinetError, match="^b: 4 ranks on 4 nodes, but SLURM partition 'debug' gives a job at most 3 nodes;"
    ):
        check_fits([TrainingJob("b", 4, nodes=4)], parts, "debug")
    with pytest.raises(
        MpinetError, match="^c: 2 ranks on 2 nodes, but SLURM partition 'small' gives a job at most 1 nodes"
    ):
        check_fits([TrainingJob("c", 2, nodes=2, partition="small")], parts, "debug")
    # 9 ranks on 2 nodes: 5 on one of them, more than its 4 CPUs, though the 12 CPUs of the partition would do
    with pytest.raises(MpinetError, match="^d: 9 ranks on 2 nodes need 5 CPUs on one node but .* at most 4 per node"):
        check_fits([TrainingJob("d", 9, nodes=2)], parts, "debug")
    with pytest.raises(MpinetError, match="^e: 3 ranks on 2 nodes need 6 CPUs on one node"):
        check_fits([TrainingJob("e", 3, cpus_per_rank=3, nodes=2)], parts, "debug")


def test_an_unknown_partition_is_named():
    with pytest.raises(MpinetError, match="partition 'gpu' does not exist \\(partitions: debug\\)"):
        check_fits([TrainingJob("x", 2, partition="gpu")], {"debug": Partition("debug", 4)}, "debug")


def test_a_job_comment_reads_as_its_experiment_with_only_non_default_values():
    comment = "rule_train_mpi_wildcards_iris_allreduce_2_1_4_0.01_100_0_0_30-20_l2_True_float32_1_samples_True_7_1"
    assert describe_comment(comment, COLUMNS, DEFAULTS) == (
        "iris allreduce ranks=2 learning_rate=0.01 faithful=True seed=7"
    )
    assert describe_comment("rule_prepare_wildcards_iris", COLUMNS, DEFAULTS) == "rule_prepare_wildcards_iris"
    table = queue_table(f"12|RUNNING|0:05|{comment}\n", COLUMNS, DEFAULTS)
    assert table.splitlines()[1].split()[:3] == ["12", "RUNNING", "0:05"]


def test_memory_per_cpu_covers_a_ranks_shard_the_test_array_and_the_runtime():
    from mpinet.cluster import mem_per_cpu_mb

    intel_train, intel_test = 14034 * 67500 * 4, 3000 * 67500 * 4  # float32 at 150 px
    assert mem_per_cpu_mb(intel_train, intel_test, ranks=2, threads=1) == int(1807.1 + 772.5 + 300) + 1
    assert mem_per_cpu_mb(intel_train, intel_test, ranks=2, threads=2) == int((1807.1 + 772.5 + 300) / 2) + 1
