"""The layers inside ``table/``: every import (those under ``if TYPE_CHECKING:`` and inside functions
included) points down, and no module reaches itself through the modules it imports.

From the bottom: errors and plain helpers; the log (actions, snapshots, the commit loop); the
``Transaction`` operations run in; the data path; maintenance; the operations; the ``Table`` handle; the
entry points (the CLI and the package). A module belongs to the layer of the longest prefix naming it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.import_graph import cycles

ROOT = Path(__file__).resolve().parents[3]

LAYERS: list[tuple[str, ...]] = [
    ("table.errors", "table.progress", "table.location", "table.compression", "table.buffers", "table.engine"),
    ("table.log",),
    ("table.transaction",),
    ("table.data",),
    ("table.maintenance",),
    # write_table is the WRITE operation: it runs in a Transaction as DELETE or MERGE do
    ("table.operations", "table.data.write"),
    ("table.table",),
    ("table.cli", "table"),
]


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_name(p): p for p in (ROOT / "table").rglob("*.py")}


def _layer(name: str) -> int:
    best, found = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    assert found is not None, f"module {name} is in no layer of this test: add it to LAYERS"
    return found


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every module of ``table`` that ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {node.module})
    return {name for name in found if name in known}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    names = set(known)
    # A package's __init__ importing its own submodules is how it re-exports them: not an edge.
    return {name: {i for i in _imports(path, names) if i != name and not i.startswith(name + ".")}
            for name, path in known.items()}


def test_every_import_in_table_points_down_or_across():
    graph = _graph()
    upward = sorted(f"{name} -> {dep}" for name, deps in graph.items() for dep in deps
                    if _layer(dep) > _layer(name))
    assert upward == []


def test_no_module_of_table_imports_itself_through_others():
    graph = _graph()
    assert cycles(graph) == []
