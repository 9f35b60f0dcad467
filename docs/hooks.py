"""MkDocs hooks: the pages' generated parts, from the one definition of each fact.

- `<!-- config-reference -->`: every config key from workflow/schemas/config.schema.yaml, its type in
  words (`$ref`s resolved, every enum's values), its default: the schema's, the experiment grid's
  (mpinet.study.experiments.DEFAULTS, from the training options) and, for the dataset keys the table
  reader defaults itself, the reader's (mpinet.datasets: `options.get("separator", "auto")`); its help
  from the schema or the training options (mpinet.engine.options.Options).
- `<!-- test-stages -->`: the stages of `make test`, read from the Makefile's `test` recipe.
- `<!-- module-map -->`: every module of the package, by floor, with its docstring's first line.
- `<!-- slurm-modes -->`: pools, the pilot and packing on one sweep, from the raw numbers
  benchmarks/slurm_modes.py wrote (docs/data/slurm_modes.json, with its machine).
- `<!-- readme -->`: the README, the site's home page, its links made the site's (docs/x.md -> x.md;
  a file outside docs/ named as code).
"""

import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
MAKEFILE = REPO / "Makefile"
PACKAGE = REPO / "src" / "mpinet"
SLURM_MODES = REPO / "docs" / "data" / "slurm_modes.json"
FLOORS = ("", "launch", "analysis", "study", "engine", "datasets")


def on_page_markdown(markdown: str, **kwargs) -> str:
    if "<!-- config-reference -->" in markdown:
        markdown = markdown.replace("<!-- config-reference -->", config_reference())
    if "<!-- module-map -->" in markdown:
        markdown = markdown.replace("<!-- module-map -->", module_map())
    if "<!-- readme -->" in markdown:
        markdown = markdown.replace("<!-- readme -->", readme())
    if "<!-- slurm-modes -->" in markdown:
        markdown = markdown.replace("<!-- slurm-modes -->", slurm_modes_table())
    if "<!-- test-stages -->" in markdown:
        markdown = markdown.replace("<!-- test-stages -->", make_test_table())
    return markdown


def readme() -> str:
    """The README with its links as the site has them."""

    def link(m: re.Match) -> str:
        text, target, anchor = m.group(1), m.group(2), m.group(3) or ""
        if target.startswith(("http://", "https://")):
            return m.group(0)
        if target.startswith("docs/"):
            return f"[{text}]({target[len('docs/') :]}{anchor})"
        if target == "CHANGELOG.md":
            return f"[{text}](changelog.md{anchor})"
        return f"`{target}` in the repository" if text == target else f"{text} (`{target}` in the repository)"

    return re.sub(r"\[([^\]]+)\]\(([^)#\s]+)(#[^)\s]*)?\)", link, (REPO / "README.md").read_text())


def config_keys() -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) of every config key, in the schema's order."""
    from dataclasses import fields

    from mpinet.engine.options import Options
    from mpinet.study.experiments import DEFAULTS

    options = {f.name: f for f in fields(Options)}
    schema = yaml.safe_load(SCHEMA.read_text())
    dataset_keys = schema["properties"]["datasets"]["additionalProperties"]["properties"]
    readers = reader_defaults(set(dataset_keys))
    rows = []

    def walk(node: dict, path: str) -> None:
        for key, spec in node.get("properties", {}).items():
            name = f"{path}.{key}" if path else key
            option = options.get(key) if path == "experiments[]" else None
            default = _default(spec, schema, name)
            if default is None and path == "experiments[]":
                default = DEFAULTS.get(key)
            if default is None and path == "datasets.<name>":
                default = readers.get(key)
            meaning = spec.get("description") or (option.metadata["help"] if option else "")
            if path == "references[]" and not meaning:  # an experiment key, as a selector
                meaning = f"select the experiments whose {key} is this value"
            rows.append((name, _type(spec, schema), _text(default), " ".join(str(meaning).split())))
            walk(spec, name)
            if isinstance(spec.get("items"), dict):
                walk(spec["items"], f"{name}[]")
        if isinstance(node.get("additionalProperties"), dict):  # a mapping of names (datasets)
            walk(node["additionalProperties"], f"{path}.<name>")

    walk(schema, "")
    return rows


def reader_defaults(keys: set[str]) -> dict:
    """The defaults the dataset code applies itself (`options.get("separator", "auto")` in
    mpinet.datasets), for the keys whose schema default would add a value to every dataset's prepare
    options and so prepare every study's data again. ValueError when two places disagree."""
    import ast

    found: dict[str, set] = {}
    for path in sorted((PACKAGE / "datasets").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            if call and len(node.args) == 2 and all(isinstance(a, ast.Constant) for a in node.args):
                if node.args[0].value in keys:
                    found.setdefault(node.args[0].value, set()).add(node.args[1].value)
    clashes = {k: v for k, v in found.items() if len(v) > 1}
    if clashes:
        raise ValueError(f"mpinet.datasets reads these keys with different defaults: {clashes}")
    return {k: v.pop() for k, v in found.items()}


def config_reference() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, meaning in config_keys():
        meaning = meaning.replace("|", "/").replace("<", "&lt;")  # results/<study>/ is text, not a tag
        lines.append(f"| `{key}` | {kind} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


def make_test_stages() -> list[tuple[str, str, str]]:
    """(stage, commands, the make target that runs it alone) of every stage of `make test`, in order,
    from the Makefile: the recipes of its prerequisites, then each command of its own recipe, a
    `$(MAKE) <target> VAR=x` line as that target's commands under VAR=x, a target without pytest
    (the linters, a set-up) as one stage."""
    text = MAKEFILE.read_text()
    variables = dict(re.findall(r"^(\w+) *[:?]?= *(.*)$", text, re.M))
    recipes = {
        target: (prerequisites.split(), body.splitlines())
        for target, prerequisites, body in re.findall(r"^([\w-]+):(?!=)([^\n]*)\n((?:\t[^\n]*\n?)*)", text, re.M)
    }

    def expand(line: str, given: dict) -> str:
        line = re.sub(r"\$\((\w+)\)", lambda m: given.get(m[1], variables.get(m[1], m[0])), line)
        return line.replace("$$", "$").strip().lstrip("@")

    def commands(target: str, given: dict) -> list[str]:
        return [expand(line, given) for line in recipes[target][1] if not expand(line, given).startswith("#")]

    def alone(target: str, given: dict, lines: list[str]) -> str:
        """The target whose whole recipe is these lines (lint, test-fast), as a make command."""
        for name in recipes:
            if name != "test" and commands(name, given) == lines:
                return " ".join(["make", name, *(f"{k}={v}" for k, v in given.items())])
        return ""

    def line_stages(line: str, beside: str) -> list[tuple[str, str, str]]:
        """A recipe line's stages: a pytest command is one; `$(MAKE) target VAR=x` is that target's
        lines under VAR=x; `$(MAKE) -j2 a b` is a's lines and b's, each marked as run beside the other."""
        sub = re.match(r"\$\(MAKE\)((?: --?[\w-]+)*)((?: [\w-]+)+?)((?: \w+=\S+)*)$", line)
        if not sub:
            return [(f"{_stage(line)}{beside}", line, alone("", {}, [line]))]
        targets, given = sub[2].split(), dict(v.split("=", 1) for v in sub[3].split())
        if len(targets) > 1:  # run at once: each target's stages, said to run beside the others
            stages = []
            for t in targets:
                others = ", ".join(f"`make {o}`" for o in targets if o != t)
                stages += line_stages(f"$(MAKE) {t}", f" (`make {t}`, beside {others})")
            return stages
        lines = commands(targets[0], given)
        if not any(line.startswith("pytest") for line in lines):  # a set-up or the linters: one stage
            return [(f"{targets[0]}{beside}", "; ".join(lines), alone(targets[0], given, lines))]
        if given:  # one command under other variables: `make test-mpi MPI=openmpi`
            where = ", ".join(f"{k}={v}" for k, v in given.items())
            return [(f"{_stage(lines[0])} under {where}{beside}", "; ".join(lines), alone(targets[0], given, lines))]
        return [stage for each in lines for stage in line_stages(each, beside)]

    stages = []
    for prerequisite in recipes["test"][0]:
        lines = commands(prerequisite, {})
        stages.append((prerequisite, "; ".join(lines), alone(prerequisite, {}, lines)))
    for line in commands("test", {}):
        stages.extend(line_stages(line, ""))
    return stages


def _stage(command: str) -> str:
    """A pytest stage's name: the markers it selects, as its -m expression says them without the
    ones it leaves out (`unit` when it only leaves out)."""
    m = re.search(r'-m (?:"([^"]+)"|(\S+))', command)
    selected = re.sub(r"(?:\band )?\bnot \w+", "", m[1] or m[2]).strip()
    selected = re.sub(r"^and\s+|^\((.*)\)$", r"\1", selected).strip()
    return selected or "unit"


def make_test_table() -> str:
    lines = ["| stage | what it runs (the Makefile's `test` target) | alone |", "|---|---|---|"]
    for stage, command, target in make_test_stages():
        runs = "<br>".join(f"`{c.strip()}`" for c in command.split("; "))
        lines.append(f"| {stage} | {runs} | {f'`{target}`' if target else ''} |")
    return "\n".join(lines) + "\n"


MODE_COMMANDS = {"pools": "make slurm-run", "pilot": "make slurm-pilot", "pack": "make slurm-pack"}


def slurm_modes_table(path: Path = SLURM_MODES) -> str:
    """One row per mode of docs/data/slurm_modes.json, then the machine, commit and date it ran on."""
    data = json.loads(path.read_text())
    lines = [
        "| mode | experiments | SLURM jobs | node-seconds held | node-seconds in trainings | occupancy "
        "| occupancy in job steps (the report's) | first submit to last end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, m in data["modes"].items():
        steps = f"{m['occupancy_steps']:.2f}" if "occupancy_steps" in m else "-"
        lines.append(
            f"| {mode} (`{MODE_COMMANDS[mode]}`) | {m['experiments']} | {m['slurm_jobs']} | "
            f"{m['node_seconds_held']:.0f} | {m['node_seconds_training']:.0f} | {m['occupancy']:.2f} | {steps} | "
            f"{m['first_submit_to_last_end_s']:.0f} s |"
        )
    f = data["machine"]
    lines.append(
        f"\nMeasured by `benchmarks/slurm_modes.py` on {f['cluster']} ({f['cpu_model']}, {f['slurm']}); "
        f"{f['sweep']}; commit `{f['commit'][:10]}`, {f['date']}.\n"
    )
    return "\n".join(lines) + "\n"


def module_map() -> str:
    lines = []
    for floor in FLOORS:
        folder = PACKAGE / floor if floor else PACKAGE
        title = f"`mpinet.{floor}`" if floor else "`mpinet` (the command lines on top and the leaves)"
        lines += [f"**{title}**", "", "| module | what it is |", "|---|---|"]
        for path in sorted(folder.glob("*.py")):
            if path.name == "__init__.py":
                continue
            name = ".".join(["mpinet", *([floor] if floor else []), path.stem])
            lines.append(f"| `{name}` | {_first_line(path)} |")
        lines.append("")
    return "\n".join(lines)


def _first_line(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "/")


def _resolve(spec: dict, schema: dict) -> dict:
    """spec with its `$ref` (#/$defs/...) replaced by what it names; its own keys win."""
    while "$ref" in spec:
        target = schema
        for part in spec["$ref"].lstrip("#/").split("/"):
            target = target[part]
        spec = {**target, **{k: v for k, v in spec.items() if k != "$ref"}}
    return spec


def _default(spec: dict, schema: dict, name: str):
    """The schema's default, or None; null for a key whose type admits null and has no default."""
    spec = _resolve(spec, schema)
    if "default" in spec:
        return spec["default"]
    kinds = spec.get("type")
    if isinstance(kinds, list) and "null" in kinds:
        return _NULL
    return None


_NULL = object()  # a default of null, told from no default
NOUNS = {
    "string": ("string", "strings"),
    "integer": ("integer", "integers"),
    "number": ("number", "numbers"),
    "boolean": ("boolean", "booleans"),
    "object": ("mapping", "mappings"),
    "array": ("list", "lists"),
    "null": ("`null`", "`null`s"),
}


def _type(spec: dict, schema: dict, plural: bool = False) -> str:
    """A value's type in words: "integer ≥ 1, or a list of them", "one of `csv`, `images`"."""
    spec = _resolve(spec, schema)
    if "enum" in spec:
        values = ", ".join(f"`{_value(v)}`" for v in spec["enum"])
        return f"{'values' if plural else 'one'} of {values}"
    alternatives = spec.get("oneOf") or spec.get("anyOf")
    if alternatives and "type" not in spec:  # with a type, they only constrain (one of the measures)
        one, *rest = (_resolve(a, schema) for a in alternatives)
        if len(rest) == 1 and rest[0].get("type") == "array" and _resolve(rest[0].get("items", {}), schema) == one:
            return f"{_type(one, schema, plural)}, or a list of them"
        return " or ".join(_type(a, schema, plural) for a in (one, *rest))
    kinds = spec.get("type")
    if isinstance(kinds, list):
        return " or ".join(_type({**spec, "type": k}, schema, plural) for k in kinds)
    if kinds == "array" and isinstance(spec.get("items"), dict):
        items = _resolve(spec["items"], schema)
        nested = items.get("oneOf", [])
        if len(nested) == 2 and _resolve(nested[1].get("items", {}), schema) == _resolve(nested[0], schema):
            return f"list of {_type(nested[0], schema, True)}, or a list of such lists"
        return f"{'lists' if plural else 'list'} of {_type(items, schema, True)}"
    if kinds == "object" and isinstance(spec.get("additionalProperties"), dict):
        return "mapping of names to the keys below"
    if kinds not in NOUNS:
        raise ValueError(f"no words for the schema type {kinds!r} of {spec}")
    return f"{NOUNS[kinds][plural]}{_bounds(spec)}" if kinds != "null" else "`null`"


def _bounds(spec: dict) -> str:
    low = [f"≥ {spec['minimum']}"] if "minimum" in spec else []
    low += [f"> {spec['exclusiveMinimum']}"] if "exclusiveMinimum" in spec else []
    high = [f"≤ {spec['maximum']}"] if "maximum" in spec else []
    high += [f"< {spec['exclusiveMaximum']}"] if "exclusiveMaximum" in spec else []
    if "minimum" in spec and "maximum" in spec:
        return f" from {spec['minimum']} to {spec['maximum']}"
    return "".join(f" {b}" for b in (low + high)[:1]) + "".join(f" and {b}" for b in (low + high)[1:])


def _value(value) -> str:
    """A value as a config file writes it (YAML's flow style)."""
    if value is _NULL or value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _text(value) -> str:
    return "" if value is None or value == "" else f"`{_value(value)}`"
