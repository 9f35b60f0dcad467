from dataclasses import fields

import pandas as pd
import pytest
from conftest import REPO

from mpinet import MpinetError
from mpinet.engine.options import Options
from mpinet.study.experiments import dropped_lines, expand_sweeps, train_arguments

DATASETS = {"iris": {}, "images": {}}


def test_lists_are_crossed_and_impossible_combinations_dropped():
    df = expand_sweeps(
        [{"dataset": "iris", "algorithm": ["serial", "allreduce", "paramserver"], "ranks": [1, 2, 3], "seed": [1, 2]}],
        DATASETS,
    )
    pairs = set(zip(df["algorithm"], df["ranks"]))
    assert pairs == {
        ("serial", 1),
        ("allreduce", 1),
        ("allreduce", 2),
        ("allreduce", 3),
        ("paramserver", 2),
        ("paramserver", 3),
    }
    assert len(df) == 6 * 2
    assert set(df["hidden"]) == {"30-20"}
    assert dropped_lines(df) == []  # serial on several ranks, a server alone: dropped without a word


def test_a_sweep_that_drops_what_the_user_may_have_meant_says_so_per_entry():
    """sync_every [1, 4] with allgather: local SGD exists for allreduce only, so allgather's k = 4 runs are
    dropped, and the plan says which, one line for the entry (the serial baseline's k = 4 silently)."""
    sweeps = [
        {"dataset": "iris", "algorithm": ["serial", "allreduce"], "ranks": [1, 2]},
        {"dataset": "iris", "algorithm": ["serial", "allreduce", "allgather"], "ranks": [1, 2], "sync_every": [1, 4]},
    ]
    df = expand_sweeps(sweeps, DATASETS)
    assert set(zip(df["algorithm"], df["ranks"], df["sync_every"])) >= {("allreduce", 2, 4), ("allgather", 2, 1)}
    assert not ((df["algorithm"] == "allgather") & (df["sync_every"] == 4)).any()
    (line,) = dropped_lines(df)
    assert line.startswith("experiments[1]: dropped 2 combination(s) that cannot run: ")
    assert "applies to allreduce only, not allgather (2x)" in line and "serial" not in line


def test_hidden_is_one_architecture_or_a_list_of_them():
    one = expand_sweeps([{"dataset": "iris", "hidden": [40, 10]}], DATASETS)
    two = expand_sweeps([{"dataset": "iris", "hidden": [[40, 10], [8]]}], DATASETS)
    assert one["hidden"].tolist() == ["40-10"] and two["hidden"].tolist() == ["40-10", "8"]


def test_train_arguments_carry_every_parameter():
    row = expand_sweeps([{"dataset": "iris", "algorithm": "paramserver", "ranks": 3}], DATASETS).iloc[0]
    args = train_arguments(row.to_dict())
    assert "--algorithm paramserver" in args and "--expect-ranks 3" in args and "--hidden 30 20" in args
    assert "--standardize true" in args


@pytest.mark.parametrize(
    "sweep,message",
    [
        ({"dataset": "mnist"}, r"experiments\[0\].dataset: 'mnist' is not defined under datasets"),
        ({"dataset": "iris", "algorithm": "gossip"}, r"experiments\[0\].algorithm: unknown 'gossip'"),
        ({"dataset": "iris", "batch_size": 0}, r"experiments\[0\].batch_size must be a positive integer, got 0"),
        ({"dataset": "iris", "learning_rate": -1}, r"experiments\[0\].learning_rate must be positive, got -1"),
        ({"dataset": "iris", "colour": "red"}, r"experiments\[0\].colour: unknown key; expected one of dataset,"),
        (
            {"dataset": "iris", "global_batc": 8},
            r"experiments\[0\].global_batc: unknown key; did you mean global_batch\?",
        ),
        (
            {"dataset": "iris", "algorithm": "paramserver", "ranks": 1},
            r"experiments\[0\]: no runnable combination: algorithm paramserver needs at least 2 ranks",
        ),
    ],
)
def test_bad_sweeps_name_the_key(sweep, message):
    with pytest.raises(MpinetError, match=message):
        expand_sweeps([sweep], DATASETS)


def test_the_grid_and_the_cli_derive_from_the_options_dataclass():
    """One definition: a field added to train.Options appears as a grid column, a default and a flag."""
    from dataclasses import fields

    from mpinet.engine.options import Options
    from mpinet.study.experiments import COLUMNS, DEFAULTS
    from mpinet.train import parse_args

    names = [f.name for f in fields(Options)]
    assert set(COLUMNS) == {*names, "ranks", "repeat"} and set(DEFAULTS) == set(COLUMNS)
    args = vars(parse_args(["--data", "d", "--out", "o"]))
    assert all(args[n] == (list(f.default) if n == "hidden" else f.default) for n, f in zip(names, fields(Options)))


def test_repeats_are_separate_launches_in_rounds_with_designs_side_by_side():
    from mpinet.study.experiments import launch_order

    df = expand_sweeps(
        [{"dataset": "iris", "algorithm": ["serial", "allreduce"], "ranks": [1, 2], "seed": [1, 2], "repeats": 2}],
        DATASETS,
    )
    assert len(df) == 3 * 2 * 2 and sorted(df["repeat"].unique()) == [1, 2]
    assert "repeat" not in train_arguments(df.iloc[0].to_dict())  # the trainer never sees it
    launched = df.iloc[sorted(range(len(df)), key=launch_order(df).__getitem__)]
    assert launched["repeat"].tolist() == [1] * 6 + [2] * 6  # whole rounds
    first = launched.head(3)
    assert set(first["seed"]) == {1} and set(zip(first["algorithm"], first["ranks"])) == {
        ("allreduce", 1),
        ("allreduce", 2),
        ("serial", 1),
    }  # one configuration's designs side by side


def test_nodes_is_a_placement_outside_the_run_path_capped_at_one_node_per_rank():
    from mpinet.study.experiments import COLUMNS

    df = expand_sweeps(
        [{"dataset": "iris", "algorithm": ["serial", "allreduce"], "ranks": [1, 2, 4], "nodes": 3}], DATASETS
    )
    placed = {(a, r): n for a, r, n in zip(df["algorithm"], df["ranks"], df["nodes"])}
    # a 1-rank baseline runs on one node (no --nodes), 2 ranks on 2 nodes, 4 ranks on the 3 asked for
    assert placed[("serial", 1)] is pd.NA and placed[("allreduce", 2)] == 2 and placed[("allreduce", 4)] == 3
    assert "nodes" not in COLUMNS  # the same numbers wherever the ranks run: not a level of the path
    unset = expand_sweeps([{"dataset": "iris", "algorithm": "allreduce", "ranks": 2}], DATASETS)
    assert unset["nodes"].isna().all()  # SLURM decides


def test_one_experiment_with_two_placements_is_refused_naming_both():
    sweeps = [
        {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "nodes": 2},
        {"dataset": "iris", "algorithm": ["allreduce", "paramserver"], "ranks": 2},
    ]
    with pytest.raises(MpinetError, match=r"iris allreduce on 2 ranks \(seed 1\) is listed with no nodes and nodes 2"):
        expand_sweeps(sweeps, DATASETS)
    # the same placement twice is the same experiment, listed once
    assert len(expand_sweeps([sweeps[0], sweeps[0]], DATASETS)) == 1


def _schema():
    import yaml

    return yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())


def _enums(node, defs) -> set:
    """Every enum value reachable from a schema node ($refs followed)."""
    if isinstance(node, dict):
        if "$ref" in node:
            return _enums(defs[node["$ref"].split("/")[-1]], defs)
        return set(node.get("enum", [])) | set().union(*(_enums(v, defs) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_enums(v, defs) for v in node))
    return set()


@pytest.mark.parametrize("section", ["experiments", "references"])
def test_the_config_schema_and_the_options_dataclass_agree(section):
    """Every option has a key in the schema's sweeps and references, with the same choices, and its
    default is a valid value there (the schema's types and bounds admit what the trainer defaults to)."""
    import jsonschema

    schema = _schema()
    keys = schema["properties"][section]["items"]["properties"]
    for f in fields(Options):
        assert f.name in keys, f"{section}: option {f.name} missing from the schema"
        prop = dict(keys[f.name], **{"$defs": schema["$defs"]})
        choices = f.metadata["choices"]
        assert _enums(keys[f.name], schema["$defs"]) == set(choices or ()), f.name
        default = list(f.default) if isinstance(f.default, tuple) else f.default
        jsonschema.validate(default, prop)  # the default is a valid value of the key, in references too
        for bad in ["not-a-choice"] if choices else []:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(bad, prop)
