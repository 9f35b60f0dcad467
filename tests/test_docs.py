"""The manual stays true: it builds in strict mode (no broken link, anchor or include, no page left
out of the navigation), its command blocks marked runnable run, every column the code writes is
documented, every bad input names a test that exists, and the generated reference covers every
option."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, env

DOCS = REPO / "docs"
BIN = Path(sys.executable).parent


def test_the_site_builds_in_strict_mode(tmp_path):
    cmd = [str(BIN / "mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**env(), "NO_MKDOCS_2_WARNING": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "site" / "reference" / "index.html").exists()


def _runnable_blocks() -> list[tuple[str, str]]:
    """(page, command) of every shell line in a block preceded by `<!-- runnable -->`."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for block in re.findall(r"<!-- runnable -->\n```sh\n(.*?)```", page.read_text(), re.S):
            found += [(page.name, line.split("  #")[0].strip()) for line in block.splitlines() if line.strip()]
    return found


@pytest.mark.workflow  # one of them is a Snakemake dry run
@pytest.mark.parametrize("page,command", _runnable_blocks())
def test_every_command_the_manual_marks_runnable_runs(page, command):
    p = subprocess.run(command, shell=True, cwd=REPO, capture_output=True, text=True, env=env(), timeout=120)
    assert p.returncode == 0, f"{page}: {command}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"


def test_the_getting_started_page_has_runnable_commands():
    assert "getting-started.md" in {page for page, _ in _runnable_blocks()}


def _written_columns() -> set[str]:
    """Every column the tables get, from the code that writes them (tiny runs of known timings)."""
    sys.path.insert(0, str(REPO / "tests"))
    from test_aggregate import _run

    from mpinet.analysis.accounting import COLUMNS as ACCOUNTING
    from mpinet.analysis.aggregate import summarize_runs, summarize_seeds
    from mpinet.analysis.costmodel import MODEL_COLUMNS
    from mpinet.analysis.environment import environment_table
    from mpinet.analysis.references import COLUMNS_OUT
    from mpinet.engine.loop import METRIC_COLUMNS

    rows = _run("serial", 1, 1, [2.0, 2.0], [2.0, 2.0], [0, 0], [0.5, 0.9])
    rows += _run("allreduce", 2, 1, [1.0, 1.0], [0.8, 0.8], [0.2, 0.2], [0.5, 0.9])
    epochs = pd.DataFrame(rows)
    runs = summarize_runs(epochs, 0.9)
    seeds = summarize_seeds(runs, epochs)
    model = {"model_epoch_s", "model_error", "model_transfer_error"}  # aggregate adds them with the link
    bench = {"bytes", "one_way_s", "allreduce_s", "ranks", "alpha_s", "beta_s_per_byte", "library"}
    environment = set(environment_table([]).columns)
    tables = {*METRIC_COLUMNS, *runs.columns, *seeds.columns, *MODEL_COLUMNS, *COLUMNS_OUT, *model, *bench}
    return tables | set(ACCOUNTING) | environment


def test_every_column_of_every_table_is_documented_on_the_outputs_page():
    from mpinet.study.experiments import COLUMNS

    text = (DOCS / "outputs.md").read_text()
    documented = set(re.findall(r"`([a-z0-9_<>]+)`", text))
    missing = []
    for column in sorted(_written_columns() - {"dataset", *COLUMNS}):
        stem = re.sub(r"_(mean|std|ci_low|ci_high)$", "", column)
        suffixed = column != stem and f"<measure>{column[len(stem) :]}" in documented
        if column not in documented and not (suffixed and stem in documented | {"median_epoch_s"}):
            missing.append(column)
    assert not missing, f"columns the code writes that docs/outputs.md does not explain: {missing}"


def test_every_bad_input_of_the_troubleshooting_page_names_a_test_that_exists():
    text = (DOCS / "troubleshooting.md").read_text()
    named, current = [], None
    for m in re.finditer(r"`(?:(test_\w+\.py))?::(test_\w+)`", text):
        current = m.group(1) or current
        named.append((current, m.group(2)))
    assert len(named) > 30
    defined = {}
    for file in {f for f, _ in named}:
        tree = ast.parse((REPO / "tests" / file).read_text())
        defined[file] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    absent = [f"{f}::{t}" for f, t in named if t not in defined[f]]
    assert not absent, f"docs/troubleshooting.md names tests that do not exist: {absent}"


def test_the_config_reference_covers_every_schema_key_and_every_training_option():
    from dataclasses import fields

    sys.path.insert(0, str(DOCS))
    import hooks

    from mpinet.engine.options import Options

    keys = {key for key, *_ in hooks.config_keys()}
    assert {f"experiments[].{f.name}" for f in fields(Options)} <= keys
    assert {"study", "datasets.<name>.source", "references[].tolerance", "isolate_timing"} <= keys
    assert all(meaning for *_, meaning in hooks.config_keys())  # every key is explained


def test_the_module_map_lists_every_module_of_the_package():
    sys.path.insert(0, str(DOCS))
    import hooks

    text = hooks.module_map()
    modules = {
        ".".join(("mpinet", *p.relative_to(REPO / "src" / "mpinet").with_suffix("").parts))
        for p in (REPO / "src" / "mpinet").rglob("*.py")
        if p.name != "__init__.py"
    }
    listed = set(re.findall(r"\| `(mpinet[\w.]*)` \|", text))
    assert modules == listed


@pytest.mark.parametrize("page", ["README.md"])
def test_the_front_page_s_design_table_lists_the_engine_s_designs_in_order(page):
    """The table users read first and mpinet.engine.options.ALGORITHMS are two lists that must agree."""
    from mpinet.engine.options import ALGORITHMS

    text = (REPO / page).read_text()
    listed = re.findall(r"^\| `(\w+)` \|", text.split("| design | what happens after every step |")[1], re.M)
    assert tuple(listed) == ALGORITHMS
    designs = len(ALGORITHMS) - 1  # auto picks one of them
    assert f"in {('one', 'two', 'three', 'four', 'five', 'six', 'seven')[designs - 1]} designs" in text


def test_the_report_s_front_page_lists_every_design_of_the_engine():
    """workflow/report/workflow.rst, the report's first page, names each design once, in the engine's order."""
    from mpinet.engine.options import ALGORITHMS

    text = (REPO / "workflow" / "report" / "workflow.rst").read_text()
    named = [d for d in re.findall(r"^\* ``(\w+)``", text, re.M)]
    assert named == list(ALGORITHMS)


def test_the_site_s_home_page_is_the_readme_with_the_site_s_links():
    """docs/index.md holds only the README's include (one source); its links become the site's."""
    sys.path.insert(0, str(REPO / "docs"))
    from hooks import readme

    assert (REPO / "docs" / "index.md").read_text().strip() == "<!-- readme -->"
    home = readme()
    assert "](docs/" not in home and "](performance.md#a-whole-node-benchmarksnodepy)" in home
    assert "[changelog](changelog.md)" in home and "`LICENSE` in the repository" in home
