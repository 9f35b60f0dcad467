"""MkDocs hooks: the pages' generated parts, from the one definition of each fact.

- `<!-- config-reference -->`: every config key from workflow/schemas/config.schema.yaml, with the
  experiment keys' defaults and help from the training options (mpinet.engine.options.Options).
- `<!-- module-map -->`: every module of the package, by floor, with its docstring's first line.
- `<!-- readme -->`: the README, the site's home page, its links made the site's (docs/x.md -> x.md;
  a file outside docs/ named as code).
"""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
PACKAGE = REPO / "src" / "mpinet"
FLOORS = ("", "launch", "analysis", "study", "engine", "datasets")


def on_page_markdown(markdown: str, **kwargs) -> str:
    if "<!-- config-reference -->" in markdown:
        markdown = markdown.replace("<!-- config-reference -->", config_reference())
    if "<!-- module-map -->" in markdown:
        markdown = markdown.replace("<!-- module-map -->", module_map())
    if "<!-- readme -->" in markdown:
        markdown = markdown.replace("<!-- readme -->", readme())
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

    options = {f.name: f for f in fields(Options)}
    schema = yaml.safe_load(SCHEMA.read_text())
    rows = []

    def walk(node: dict, path: str) -> None:
        for key, spec in node.get("properties", {}).items():
            name = f"{path}.{key}" if path else key
            option = options.get(key) if path == "experiments[]" else None
            default = spec.get("default", option.default if option else "")
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


def config_reference() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, meaning in config_keys():
        lines.append(f"| `{key}` | {kind} | {default} | {meaning.replace('|', '/')} |")
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


def _type(spec: dict, schema: dict) -> str:
    if "$ref" in spec:
        return spec["$ref"].rsplit("/", 1)[-1]
    kind = spec.get("type", "any")
    return " or ".join(kind) if isinstance(kind, list) else kind


def _text(value) -> str:
    if value == "" or value is None:
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"
