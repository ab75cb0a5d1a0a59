"""The layers import downwards only (``logstore`` <- ``table`` <- ``spark_integration``; ``infra`` only from
the demo and tests), and no two modules import each other at load time, directly or through others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.import_graph import cycles

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["logstore", "table", "spark_integration"]
MAY_USE_INFRA: set[str] = set()  # the demo lives in infra/


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")}


def load_time_imports(path: Path, known: set[str]) -> set[str]:
    """Modules imported when ``path`` is loaded: top-level imports, outside ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from table import progress`` imports the module table.progress (and runs the package's
                # __init__, which imports its own submodules: not an edge of the module's own)
                submodules = {f"{node.module}.{alias.name}" for alias in node.names} & known
                found.update(submodules or {node.module})
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return found


@pytest.mark.parametrize("name", sorted(modules()))
def test_imports_point_down_the_layers(name):
    layer = LAYERS.index(name.split(".")[0])
    above = {*LAYERS[layer + 1:], *(["infra"] if name not in MAY_USE_INFRA else [])}
    text = modules()[name].read_text()
    every_import = {n for node in ast.walk(ast.parse(text)) for n in _names(node)}
    assert sorted(i for i in every_import if i.split(".")[0] in above) == []


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module]
    return []


def test_no_import_cycle_at_load_time():
    known = modules()
    names = set(known)
    graph = {name: {i for i in load_time_imports(path, names) if i in names and i != name}
             for name, path in known.items()}
    # A package's __init__ importing its own submodules is how packages re-export: not a cycle.
    graph = {name: {i for i in deps if not i.startswith(name + ".")} for name, deps in graph.items()}
    assert cycles(graph) == []


def every_import(path: Path, known: set[str]) -> set[str]:
    """Every module ``path`` imports anywhere: at the top, under ``if TYPE_CHECKING:``, inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {node.module})
    return found


def test_no_import_circle_in_table_counting_type_checking_and_function_imports():
    """``table/`` holds no circle even through imports that run late (inside functions) or never (for the
    type checker): the modules can be read, and moved, one layer at a time."""
    known = modules()
    names = set(known)
    graph = {name: {i for i in every_import(path, names)
                    if i.startswith("table.") and i != name and not i.startswith(name + ".")}
             for name, path in known.items() if name == "table" or name.startswith("table.")}
    assert cycles(graph) == []
