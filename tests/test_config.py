"""A bad study config is refused before anything runs, with one line naming the key
(mpinet.study.config.check_study, which the workflow calls first)."""

import pytest
import yaml
from conftest import REPO
from test_workflow import TINY

from mpinet import MpinetError
from mpinet.study.config import check_study

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda c: c.update(colour="red"), "config: colour: unknown key; expected one of study, isolate_timing"),
        (lambda c: c["experiments"][0].update(algorithm="gossip"), "gossip"),
        (lambda c: c["experiments"][0].update(dataset="mnist"), "experiments[0].dataset: 'mnist' is not defined"),
        (lambda c: c["experiments"][1].update(batch_size=0), "batch_size"),
        (lambda c: c["experiments"][0].update(learning_rate=-0.1), "learning_rate"),
        (lambda c: c["experiments"][0].update(algorithm="paramserver", ranks=1), "no runnable combination"),
        (lambda c: c["datasets"].update({"my data": c["datasets"]["iris"]}), "'my data' does not match"),
        (lambda c: c["datasets"].update({"..": c["datasets"]["iris"]}), "'..' does not match"),
        (lambda c: c["datasets"].update({"c++": c["datasets"]["iris"]}), "'c++' does not match"),
        (lambda c: c["datasets"].update({7: c["datasets"]["iris"]}), "datasets: 7 is not a string"),
        (
            lambda c: c["experiments"][0].update(epochs=5.0),
            "experiments[0].epochs: 5.0 is not an integer >= 1 or a list",
        ),
        (lambda c: c["experiments"][0].update(nodes=0), "experiments[0].nodes: 0 is less than the minimum of 1"),
        (
            lambda c: c["experiments"].append(
                {**c["experiments"][0], "algorithm": "allreduce", "ranks": 2, "nodes": 2}
            ),
            "is listed with no nodes and nodes 2",
        ),
        (
            lambda c: c["datasets"]["images"].update(image_size=32.0),
            "image_size: 32.0 is not an integer >= 1 and <= 2048",
        ),
        (lambda c: c["datasets"]["images"].update(image_size=100000), "100000 is greater than the maximum of 2048"),
        (
            lambda c: c["datasets"]["iris"].update(source="config", sha256="0" * 64),
            "config: datasets.iris.sha256: config is a folder, not one file",
        ),
        # a value that names data that does not exist is refused, never mapped to something else
        (lambda c: c["datasets"]["images"].update(source="synthetic:cifar"), "unknown synthetic dataset"),
        (lambda c: c["datasets"]["iris"].update(source="bundled:mnist"), "unknown bundled dataset 'bundled:mnist'"),
        (lambda c: c.update(references=[{"dataset": "iris", "ranks": 7, "speedup": 2}]), "selects no experiment"),
        (
            lambda c: c.update(references=[{"dataset": "images", "global_batch": 12, "global_speedup": 2}]),
            "references[0]: selects no experiment of the study (dataset=images, global_batch=12)",
        ),
    ],
)
def test_a_bad_config_is_refused_with_one_line_naming_the_key(change, message):
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    change(cfg)
    with pytest.raises(MpinetError) as refused:
        check_study(cfg, SCHEMA, lambda dataset: None)
    text = str(refused.value)
    assert text.startswith("config: ") and "\n" not in text and message in text, text


def test_a_good_config_gives_its_experiments():
    experiments = check_study(yaml.safe_load(yaml.safe_dump(TINY)), SCHEMA, lambda dataset: None)
    assert len(experiments) == 4 + 3 and set(experiments["dataset"]) == {"iris", "images"}


def test_a_reference_may_select_by_global_batch():
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["references"] = [{"dataset": "images", "global_batch": 16, "best_serial_speedup": 1.5}]  # 2 ranks x 8
    check_study(cfg, SCHEMA, lambda dataset: None)


def test_the_schema_s_references_take_exactly_the_keys_and_measures_the_check_knows():
    """The schema's reference keys and mpinet.study.config's SELECTORS and MEASURES must agree."""
    from mpinet.study.config import MEASURES, SELECTORS

    items = yaml.safe_load(SCHEMA.read_text())["properties"]["references"]["items"]
    assert set(items["properties"]) == {*SELECTORS, *MEASURES, "tolerance"}
    assert [one["required"] for one in items["oneOf"]] == [[m] for m in MEASURES]


def test_a_subset_larger_than_prepared_data_is_refused_naming_the_dataset():
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["experiments"][0]["train_samples"] = 500
    with pytest.raises(MpinetError, match="config: .*train_samples 500 is more than the 105 training samples"):
        check_study(cfg, SCHEMA, {"iris": (105, 3)}.get)


def test_the_schema_names_every_design_the_engine_has():
    """The schema's enum and mpinet.engine.options.ALGORITHMS are two lists that must agree."""
    from mpinet.engine.options import ALGORITHMS

    schema = yaml.safe_load(SCHEMA.read_text())
    assert tuple(schema["$defs"]["algorithm"]["enum"]) == ALGORITHMS


def test_a_dataset_name_defined_differently_by_another_study_here_is_refused_naming_both(tmp_path):
    """Two studies in one directory share resources/data/<name>: the second to plan with another
    definition of a name is refused, naming both config files and the keys that differ; the same
    definition, its own earlier record, or another name pass."""
    from mpinet.study.definitions import check_definitions, definitions, write_definitions

    images = {"source": "synthetic:intel", "format": "images", "image_size": 32}
    default = {"datasets": {"images": images, "iris": {"source": "bundled:iris"}}, "synthetic": {"size": 32}}
    write_definitions(tmp_path / "default" / "datasets.json", definitions(default, ["config/config.yaml"]))
    small = {"datasets": {"images": {**images, "image_size": 16}}, "synthetic": {"size": 16}}
    mine = definitions(small, ["config/small.yaml"])
    with pytest.raises(MpinetError) as e:
        check_definitions("small", mine, tmp_path)
    message = str(e.value)
    assert message.startswith("datasets.images is defined differently by study default (config/config.yaml)")
    assert "this one (config/small.yaml): image_size: 32 there, 16 here" in message
    assert 'synthetic: {"size": 32} there, {"size": 16} here' in message and "\n" not in message
    check_definitions("default", mine, tmp_path)  # its own record: a changed definition re-prepares, as before
    check_definitions("small", definitions(default, ["config/again.yaml"]), tmp_path)  # the same definition
    check_definitions("small", definitions({"datasets": {"tiny": images}}, ["config/small.yaml"]), tmp_path)


SHIPPED = sorted([*(REPO / "config").glob("*.yaml"), *(REPO / "benchmarks").glob("*.yaml")])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_config_the_repository_ships_is_a_valid_study(path):
    """The studies and the benchmarks' studies pass the workflow's own check (a renamed key once broke
    benchmarks/sync_every.yaml, which no test read)."""
    assert len(SHIPPED) >= 4
    check_study(yaml.safe_load(path.read_text()), SCHEMA, lambda dataset: None, source=str(path))
