"""Small functions, kept so by a test (issue: every function at most 60 lines): the package, the
workflow's scripts and the functions of its rule files."""

import ast
import re

from conftest import REPO

LIMIT = 60


def _long_functions(source: str, where: str) -> list[str]:
    return [
        f"{where}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > LIMIT
    ]


def _smk_functions(text: str) -> str:
    """The plain Python functions of a rule file (top-level `def` blocks), as one module's source."""
    blocks = re.findall(r"^def .*?(?=^\S|\Z)", text, re.M | re.S)
    return "\n".join(blocks)


def test_no_function_is_longer_than_sixty_lines():
    found = []
    for path in sorted([*(REPO / "src").rglob("*.py"), *(REPO / "workflow" / "scripts").glob("*.py")]):
        found += _long_functions(path.read_text(), str(path.relative_to(REPO)))
    for path in sorted((REPO / "workflow").rglob("*.smk")):
        found += _long_functions(_smk_functions(path.read_text()), str(path.relative_to(REPO)))
    assert not found, "split these functions (at most 60 lines each): " + "; ".join(found)


def test_no_public_package_function_takes_more_than_six_parameters():
    """What a caller passes stays readable: more than six values travel as a named record (Tables,
    FigureInputs, Work, Views, ImageOptions)."""
    found = []
    for path in sorted((REPO / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            a = node.args
            names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]
            if len(names) > 6:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({len(names)})")
    assert not found, "pass a named record instead: " + "; ".join(found)
