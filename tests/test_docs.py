"""The manual stays true: it builds in strict mode (no broken link, anchor or include, no page left
out of the navigation), its command blocks marked runnable run, every column the code writes is
documented, every bad input names a test that exists, and the generated reference covers every
option."""

import ast
import json
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


def _schema_defaults(node: dict, path: str = "") -> dict:
    """{reference key: default} of every key the schema gives a default, named as the reference names it."""
    found = {}
    for key, spec in node.get("properties", {}).items():
        name = f"{path}.{key}" if path else key
        if "default" in spec:
            found[name] = spec["default"]
        found |= _schema_defaults(spec, name)
        if isinstance(spec.get("items"), dict):
            found |= _schema_defaults(spec["items"], f"{name}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found |= _schema_defaults(node["additionalProperties"], f"{path}.<name>")
    return found


def _enums(node) -> list[list]:
    """Every enum anywhere in the schema, $defs included."""
    if isinstance(node, dict):
        return ([node["enum"]] if "enum" in node else []) + [e for v in node.values() for e in _enums(v)]
    return [e for v in node for e in _enums(v)] if isinstance(node, list) else []


def test_the_config_reference_gives_every_type_in_words_every_enum_value_and_every_default():
    import yaml

    sys.path.insert(0, str(DOCS))
    import hooks

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    text = hooks.config_reference()
    rows = {key: (kind, default) for key, kind, default, _ in hooks.config_keys()}
    assert "$defs" not in text and "enum of" not in text and "$ref" not in text
    assert not [k for k, (kind, _) in rows.items() if re.search(r"\bany\b|^$", kind)], "a key without a type"

    def shown(value) -> str:
        return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)

    for values in _enums(schema):
        for value in values:
            assert f"`{shown(value)}`" in text, f"enum value {value!r} is not in the reference"
    for key, value in _schema_defaults(schema).items():
        if not isinstance(value, (dict, list)):
            assert rows[key][1] == f"`{shown(value)}`", key
    assert rows["synthetic"][1] == "`{}`" and rows["experiments[].hidden"][1] == "`[30, 20]`"
    assert rows["experiments[].algorithm"][0].startswith("one of `serial`, `allreduce`")
    assert rows["experiments[].ranks"][0] == "integer ≥ 1, or a list of them"


def test_the_reference_gives_the_defaults_the_table_reader_applies_itself():
    """separator, header and missing have no schema default (one there would enter every dataset's
    prepare options and prepare every study's data again): their defaults are the reader's own."""
    sys.path.insert(0, str(DOCS))
    import hooks

    rows = {key: (kind, default) for key, kind, default, _ in hooks.config_keys()}
    expected = {"separator": "auto", "header": "auto", "missing": "refuse"}
    assert hooks.reader_defaults(set(expected)) == expected
    for key, value in expected.items():
        kind, default = rows[f"datasets.<name>.{key}"]
        assert default == f"`{value}`" and f"`{value}`" in kind  # the default is one of the values


def _makefile_recipe(target: str) -> list[str]:
    text = (REPO / "Makefile").read_text()
    body = re.search(rf"^{target}:[^\n]*\n((?:\t[^\n]*\n)*)", text, re.M)[1]
    return [line.strip() for line in body.splitlines() if not line.strip().startswith("@#")]


def _stage_lines(target: str) -> list[str]:
    """The stages `make target` runs, in order: its own pytest commands and those of the targets
    its `$(MAKE) a b` lines run; a target without pytest (lint, a set-up) is its recipe, joined."""
    lines = []
    for line in _makefile_recipe(target):
        sub = re.match(r"\$\(MAKE\)(?: --?[\w-]+)*((?: [\w-]+)+?)(?: \w+=\S+)*$", line)
        if not sub:
            lines.append(line)
        for t in sub[1].split() if sub else ():
            recipe = _makefile_recipe(t)
            pytest_free = not any(x.startswith("pytest") or re.search(r"\btest-\w+", x) for x in recipe)
            lines += ["; ".join(recipe)] if pytest_free else _stage_lines(t)
    return lines


def test_the_development_page_s_stage_table_is_the_makefile_s_test_recipe_without_times():
    sys.path.insert(0, str(DOCS))
    import hooks

    page = (DOCS / "development.md").read_text()
    assert "<!-- test-stages -->" in page and "| minutes |" not in page
    stages = hooks.make_test_stages()
    recipe = _stage_lines("test")
    assert len(stages) == len(recipe)  # one stage a pytest command, the linters one
    lint = next(command for name, command, _ in stages if name.startswith("lint"))
    assert lint.split("; ") == [line.replace("$$", "$") for line in _makefile_recipe("lint")]
    unit = re.search(r"^UNIT := (.*)$", (REPO / "Makefile").read_text(), re.M)[1]
    for (_, command, _), line in zip(stages, recipe, strict=True):
        assert command == line.replace("$(UNIT)", unit).replace("$$", "$")
    assert sum("beside" in name for name, _, _ in stages) >= 2  # the lines make runs at once say so
    table = hooks.make_test_table()
    assert table.count("\n") == 2 + len(stages) and not re.search(r"minute|seconds|\btests\b", table)


DURATION = r"\d+(?:\.\d+)?(?:\s*(?:–|to)\s*\d+(?:\.\d+)?)?\s*(?:ms|s|seconds?|minutes?|min|hours?|h)\b"


def _measured_quotes() -> list[str]:
    """How the pages quote docs/data/timings.json: the set-up, make run, make test's CI runs."""
    import json

    timings = json.loads((DOCS / "data" / "timings.json").read_text())
    assert {"machine", "date", "source", "measurements"} <= set(timings)
    m = timings["measurements"]
    assert all({"command", "what", "seconds"} <= set(entry) for entry in m.values())
    low, high = m["setup"]["seconds"]
    ci = sorted(m["make_test"]["seconds"])
    return [
        f"{low // 60}–{high // 60} minutes",
        f"{m['make_run']['seconds']} s on a fresh clone",
        f"{ci[0] / 60:.1f} to {ci[-1] / 60:.1f} minutes",
    ]


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md", "docs/development.md"])
def test_every_run_time_a_page_quotes_is_the_one_measured_in_docs_data_timings_json(page):
    text = " ".join((REPO / page).read_text().split())
    quotes = _measured_quotes()
    if page == "README.md":
        text = text.split("## Quick start")[1].split(" ## ")[0]
        assert all(q in text for q in quotes), f"the quick start does not quote {quotes}"
        run_s = int(quotes[1].split()[0])
        assert "in under a minute" not in text or run_s < 60
    if page == "docs/development.md":  # settings, not run times: the paced sleep, SLURM's and the plugin's periods
        text = text.split("## Tests")[1].split(" ## ")[0]
        for setting in ("sleep 10 ms", "30 s enforcement period", "slows by 10 s"):
            text = text.replace(setting, "")
    for quote in quotes:
        text = text.replace(quote, "")
    assert not re.findall(DURATION, text), f"{page} quotes a time that is not in docs/data/timings.json"


def test_the_slurm_page_s_modes_table_is_generated_from_the_benchmark_s_raw_numbers():
    """docs/slurm.md quotes pools, the pilot and packing through the hook, from the JSON
    benchmarks/slurm_modes.py writes (machine included), never typed by hand."""
    import json

    sys.path.insert(0, str(DOCS))
    import hooks

    assert "<!-- slurm-modes -->" in (DOCS / "slurm.md").read_text()
    data = json.loads(hooks.SLURM_MODES.read_text())
    assert set(data["modes"]) == set(hooks.MODE_COMMANDS) and data["machine"]["commit"]
    text = hooks.slurm_modes_table()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`make" in line]
    assert len(rows) == len(data["modes"])
    for row, (mode, m) in zip(rows, data["modes"].items()):
        assert row.startswith(f"| {mode} ") and f"| {m['occupancy']:.2f} |" in row and f"| {m['slurm_jobs']} |" in row


def test_every_raw_result_the_docs_name_is_committed_with_its_machine():
    """A number the docs quote from a run names that run's JSON (docs/data/...): the file is committed
    and records the machine it came from."""
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    named = set()
    for page in pages:
        named |= set(re.findall(r"(?<![\w/.-])((?:docs/data/)?[\w/-]+\.json)", page.read_text()))
    committed = {p.relative_to(DOCS / "data").as_posix(): p for p in (DOCS / "data").rglob("*.json")}
    named = {n for n in named if n == n.lower()}  # NAME.json in a command line is a placeholder
    quoted = [n for n in named if n.startswith("docs/data/") or re.search(r"\d{4}-\d\d-\d\d", n)]
    assert len(quoted) >= 10, sorted(named)
    for name in quoted:
        key = name.removeprefix("docs/data/")
        path = committed.get(key) or next((p for k, p in committed.items() if k.endswith("/" + key)), None)
        assert path is not None, f"the docs quote {name}, which docs/data/ does not hold"
        assert json.loads(path.read_text()).get("machine"), f"{path} records no machine"


GENERATED = re.compile(r"<!-- generated by (benchmarks/\w+\.py) --markdown-from (\S+) --into (\S+); do not edit -->\n")
END_GENERATED = "<!-- end of the generated table -->"


def _generated_sections() -> list[tuple[str, str, str, str]]:
    """(page, script, JSON, body) of every section a benchmark generates in the docs."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        for m in GENERATED.finditer(text):
            assert m.group(3) == f"docs/{page.name}", f"{page.name}: a section generated --into {m.group(3)}"
            found.append((page.name, m.group(1), m.group(2), text[m.end() : text.index(END_GENERATED, m.end())]))
    return found


@pytest.mark.parametrize("page,script,source,body", _generated_sections(), ids=lambda v: str(v)[:40])
def test_every_generated_section_is_its_benchmark_s_output_of_the_committed_json(page, script, source, body):
    """What a benchmark's --markdown-from prints for the committed JSON is, byte for byte, the section."""
    assert source.startswith("docs/data/") and (REPO / source).exists()
    cmd = [sys.executable, script, "--markdown-from", source]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env(), timeout=120)
    assert p.returncode == 0, p.stderr
    assert body == "\n" + p.stdout + "\n"


def test_every_table_of_the_performance_page_is_generated():
    """docs/performance.md shows measurements only as tables a benchmark generated from committed JSON
    (the test above ties each to it); typed tables of earlier runs live in the archive."""
    text = (DOCS / "performance.md").read_text()
    outside = re.sub(r"<!-- generated by .*?<!-- end of the generated table -->", "", text, flags=re.S)
    assert not re.findall(r"^\|[-| :]+\|$", outside, re.M), "performance.md has a table no benchmark generated"
