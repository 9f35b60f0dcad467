"""What reruns a job is derived from the code (mpinet.fingerprints): for every job of the workflow and
every package module its entry imports, a change to that module's code changes the job's
fingerprint, and a comment, a docstring or a help text does not. The workflow tests show the same
on a dry run (tests/test_workflow.py: test_a_code_change_plans_the_steps_that_import_it_and_nothing_else)."""

import dataclasses
import json
import re

import pytest
from conftest import REPO, EditedPackage

from mpinet import fingerprints
from mpinet.fingerprints import FETCHING, NUMERICS, PREPARATION, SYNTHESIS, CodeFingerprint, closure, script_modules

SCRIPTS = REPO / "workflow" / "scripts"
RULES = REPO / "workflow" / "rules"


def _jobs() -> dict[str, CodeFingerprint]:
    """Every job kind's fingerprint, as the workflow computes it."""
    jobs = {"train": NUMERICS, "fetch": FETCHING, "make_synthetic": SYNTHESIS}
    jobs.update({f"prepare-{fmt}": fp for fmt, fp in PREPARATION.items()})
    jobs["commbench"] = CodeFingerprint("job", 1, ("mpinet.commbench",))
    for script in ("aggregate", "plots"):
        jobs[script] = CodeFingerprint("job", 1, script_modules((SCRIPTS / f"{script}.py").read_text()))
    return jobs


def _file(module: str) -> str:
    """A module's file, relative to the package root (a package is its __init__.py)."""
    return str(fingerprints._module_file(module, fingerprints.PACKAGE).relative_to(fingerprints.PACKAGE))


CASES = [(job, module) for job, fp in _jobs().items() for module in fp.modules()]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """One copy of the package for all the edits (each is undone after it)."""
    return EditedPackage(tmp_path_factory.mktemp("edited"))


@pytest.mark.parametrize("job,module", CASES, ids=[f"{j}-{m}" for j, m in CASES])
def test_a_code_change_in_any_module_a_job_imports_changes_its_fingerprint_and_a_comment_does_not(package, job, module):
    guard = package.guard(_jobs()[job])
    base = guard.value()
    text = (package.root / _file(module)).read_text()
    assert package.value_with(guard, _file(module), text + "\n# a comment\n") == base
    assert package.value_with(guard, _file(module), text + "\n_CHANGED = 1\n") != base


def test_the_closure_follows_lazy_imports_and_from_package_imports(tmp_path):
    root = tmp_path / "mpinet"
    root.mkdir()
    (root / "__init__.py").write_text("class MpinetError(Exception):\n    pass\n")
    (root / "a.py").write_text("from mpinet import MpinetError, b\n\n\ndef f():\n    import mpinet.c\n")
    (root / "b.py").write_text("import numpy\n")
    (root / "c.py").write_text("from mpinet.d import g\n")
    (root / "d.py").write_text("def g():\n    pass\n")
    (root / "unused.py").write_text("")
    assert closure(("mpinet.a",), root) == ("mpinet", "mpinet.a", "mpinet.b", "mpinet.c", "mpinet.d")


def test_the_numerics_hold_the_loop_and_what_it_imports_and_no_command_line_or_file_writing():
    modules = set(NUMERICS.modules())
    assert {
        "mpinet.engine.loop",
        "mpinet.engine.model",
        "mpinet.engine.blas",
        "mpinet.engine.comm",
        "mpinet.engine.options",
        "mpinet.datasets.dataset",
    } <= modules
    assert not modules & {
        "mpinet.train",
        "mpinet.engine.runfiles",
        "mpinet.engine.checkpoint",
        "mpinet.files",
        "mpinet.datasets.prepared",
    }


def test_a_fingerprint_does_not_depend_on_where_the_package_is_installed(tmp_path):
    for job, fp in _jobs().items():
        elsewhere = EditedPackage(tmp_path / job).guard(fp)
        fingerprints._code_hash.cache_clear()
        assert elsewhere.code_hash() == fp.code_hash(), job


def test_every_workflow_job_that_runs_package_code_takes_its_fingerprint_as_a_parameter():
    """The rules name the fingerprints the tests above check: every rule with outputs that runs package
    code (a `python -m mpinet.X` command, a script or a run block) has its code parameter, and the
    data commands run exactly the fingerprints' entries. (Rules without outputs are views: they
    always run.)"""
    text = "\n".join(p.read_text() for p in sorted(RULES.glob("*.smk")))
    rules = dict(re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)+)", text, re.M))
    param = {
        "train_single": "NUMERICS.value()",
        "train_mpi": "NUMERICS.value()",
        "fetch": "FETCHING.value()",
        "prepare": 'PREPARATION[config["datasets"][w.dataset]["format"]].value()',
        "make_synthetic": "SYNTHESIS.value()",
        "commbench": 'job_code("mpinet.commbench")',
        "aggregate": 'script_code(workflow.source_path("../scripts/aggregate.py"))',
        "plots": 'script_code(workflow.source_path("../scripts/plots.py"))',
        "allocation": 'script_code(workflow.source_path("../scripts/allocation.py"))',
        "record_study": 'job_code("mpinet.study.leftovers", "mpinet.study.definitions")',
    }
    running = {
        name
        for name, body in rules.items()
        if re.search(r"-m mpinet\.|script:|run:|TRAIN_PARAMS", body) and re.search(r"output:|TRAIN_OUTPUT", body)
    }
    assert running == set(param)
    train = rules["train_single"] + text[text.index("TRAIN_PARAMS") :]
    for name, expected in param.items():
        assert expected in (train if name.startswith("train") else rules[name]), name
    commands = {
        "fetch": "mpinet.datasets.fetch",
        "prepare": "mpinet.datasets.prepare",
        "make_synthetic": "mpinet.datasets.synthetic",
    }
    datacli = (REPO / "src" / "mpinet" / "datacli.py").read_text()
    for module in commands.values():  # the datacli subcommands run exactly the fingerprints' entries
        assert f"from {module} import" in datacli
    assert FETCHING.entries == ("mpinet.datasets.fetch",) and SYNTHESIS.entries == ("mpinet.datasets.synthetic",)


def test_each_format_is_prepared_under_its_own_fingerprint_and_no_other_format_s_code():
    """PREPARATION has one fingerprint per format the dispatch and the schema know, whose entries are
    the dispatch and that format's module; the dispatch imports no format module itself, so the
    closures of two formats hold neither's module."""
    import yaml

    from mpinet.datasets.prepare import FORMATS

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    formats = schema["properties"]["datasets"]["additionalProperties"]["properties"]["format"]["enum"]
    assert list(PREPARATION) == list(FORMATS) == formats
    for fmt, fp in PREPARATION.items():
        assert fp.entries == ("mpinet.datasets.prepare", FORMATS[fmt])
        others = set(FORMATS.values()) - {FORMATS[fmt]}
        assert FORMATS[fmt] in fp.modules() and not others & set(fp.modules()), fmt


def test_the_lock_commands_map_a_refactor_to_the_old_fingerprint_and_new_output_to_the_code(tmp_path):
    """What `make data-lock` and `make numerics-lock` write (fingerprints.write_lock): a refactor whose
    guard output kept its bytes joins the recorded fingerprint; new output runs under the code's own
    hash; output that moved under the very code it was recorded with (a library upgrade) is refused,
    since only a version bump can give it a new fingerprint."""
    from mpinet import MpinetError

    package = EditedPackage(tmp_path)
    guard = package.guard(PREPARATION["images"])
    recorded = guard.value()
    module = package.root / "datasets" / "images.py"
    module.write_text(module.read_text() + "\n\ndef _unused():\n    pass\n")
    fingerprints._code_hash.cache_clear()
    assert guard.value() == guard.code_hash() != recorded  # unknown to the lock: its own hash
    assert fingerprints.write_lock(guard, recorded, True, "preparation images") == recorded
    assert guard.value() == recorded and guard.known()[guard.code_hash()] == recorded
    assert fingerprints.write_lock(guard, recorded, False, "preparation images") == guard.code_hash()
    assert guard.value() == guard.code_hash()
    with pytest.raises(MpinetError, match="moved under the code it was recorded with: bump the version"):
        fingerprints.write_lock(guard, guard.code_hash(), False, "preparation images")
    fingerprints._code_hash.cache_clear()


def test_the_numerics_lock_names_known_code_and_leaves_an_edit_its_own_hash(tmp_path):
    """Code the lock knows runs under the fingerprint the lock gives it; an edit the lock does not know
    (a user's) runs under its own code hash, so it reruns; an entry for it (what `make numerics-lock`
    writes) maps it; a version bump is new code again."""
    package = EditedPackage(tmp_path)
    guard = package.guard(NUMERICS)
    assert guard.value() == NUMERICS.value() != NUMERICS.code_hash()  # this code is in the lock
    model = package.root / "engine" / "model.py"
    text = model.read_text()
    model.write_text(text.replace("def _sigmoid(", "def _unused():\n    pass\n\n\ndef _sigmoid(", 1))
    fingerprints._code_hash.cache_clear()
    edited = guard.code_hash()
    assert guard.value() == edited != NUMERICS.value()
    lock = package.root / NUMERICS.lock
    entries = json.loads(lock.read_text())
    entries["entries"][edited] = {"fingerprint": NUMERICS.value()}
    lock.write_text(json.dumps(entries))
    assert guard.value() == NUMERICS.value()
    bumped = dataclasses.replace(guard, version=NUMERICS.version + 1)
    assert bumped.value() == bumped.code_hash() not in fingerprints.read_lock(lock).values()
    model.write_text(text)
    fingerprints._code_hash.cache_clear()


def test_an_environment_switch_that_changes_the_numbers_gives_runs_a_fingerprint_of_their_own(monkeypatch):
    """MPINET_FUSED_UPDATE=0 (the engine's unfused update) rounds differently on some OpenBLAS kernels:
    a run trained with it runs under a fingerprint of its own, and the engine's switch is the one named."""
    from mpinet.engine import blas
    from mpinet.fingerprints import NUMERICS

    assert (blas.OFF, "0") in NUMERICS.switches
    monkeypatch.delenv(blas.OFF, raising=False)
    plain = NUMERICS.value()
    monkeypatch.setenv(blas.OFF, "1")  # the default behaviour: the same fingerprint
    assert NUMERICS.value() == plain
    monkeypatch.setenv(blas.OFF, "0")
    assert NUMERICS.value() == f"{plain}+{blas.OFF}=0"
