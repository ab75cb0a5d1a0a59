"""Library code logs through one logger per module, nested under its package's (``logstore``, ``table``,
``spark_integration``), and never prints: printing is for the command line and the demo."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("logstore", "table", "spark_integration")
MAY_PRINT = {"table/cli"}


def library_modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                  if not any(p.relative_to(ROOT).as_posix().startswith(allowed) for allowed in MAY_PRINT))


def calls(path: Path, name: str) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name)]


@pytest.mark.parametrize("path", library_modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_library_modules_do_not_print_and_log_under_their_own_name(path):
    assert [c.lineno for c in calls(path, "print")] == [], "library code logs; it never prints"
    named = [c for c in calls(path, "getLogger") if c.args]
    assert all(isinstance(c.args[0], ast.Name) and c.args[0].id == "__name__" for c in named), (
        "use logging.getLogger(__name__): the logger then nests under the package's")


def test_the_rules_see_the_library():
    assert len(library_modules()) > 30
