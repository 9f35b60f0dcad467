"""Where a study ran (mpinet.analysis.environment), from run.json records, and what differs."""

from mpinet.analysis.environment import (
    FIELDS,
    UNKNOWN,
    differences,
    environment_table,
    run_environment,
    short_form,
)

META = {
    "ranks": 2,
    "hosts": ["vm"],
    "nodes": 1,
    "cores": 2,
    "cpu_model": {"vm": "AMD EPYC 7B13"},
    "numpy": "2.4.6",
    "python": "3.11.7",
    "mpinet": "0.5.0",
    "blas": [{"internal_api": "openblas", "version": "0.3.31", "architecture": "Zen", "num_threads": 1}],
    "affinity": [[0], [1]],
    "mpi": {"library": "MPICH Version:      5.0.2", "family": "mpich", "mpi4py": "4.1.2"},
}


def test_a_runs_environment_names_each_field_and_what_an_old_record_lacks():
    env = run_environment(META)
    assert list(env) == list(FIELDS)
    assert (
        env["cpu"] == "AMD EPYC 7B13" and env["blas"] == "openblas 0.3.31 Zen" and env["mpi"] == "MPICH Version: 5.0.2"
    )
    assert env["binding"] == "1 CPU(s) per rank"
    old = run_environment({k: v for k, v in META.items() if k != "cpu_model"})  # before 0.5.0
    assert old["cpu"] == UNKNOWN
    serial = run_environment({**META, "ranks": 1, "mpi": None})
    assert serial["mpi"] == "none (serial)"


def test_the_table_counts_runs_per_value_and_the_short_form_names_the_common_ones():
    table = environment_table([META, META, {**META, "ranks": 1, "mpi": None}])
    mpi = table[table["field"] == "mpi"].set_index("value")["runs"].to_dict()
    assert mpi == {"MPICH Version: 5.0.2": 2, "none (serial)": 1}
    assert short_form(table) == "AMD EPYC 7B13, 2 cores · MPICH Version: 5.0.2 · openblas 0.3.31 Zen · 1 node(s)"


def test_compare_names_only_the_fields_that_differ():
    a = environment_table([META])
    openmpi = {**META, "mpi": {**META["mpi"], "library": "Open MPI v5.0.8"}}
    b = environment_table([openmpi])
    assert differences(a, b) == ["mpi: A MPICH Version: 5.0.2 | B Open MPI v5.0.8"]
    assert differences(a, a) == []
    assert "not recorded" in differences(a, None)[0] and "B" in differences(a, None)[0]
