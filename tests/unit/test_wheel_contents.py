"""The wheel ships the product only: ``logstore``, ``table`` and ``spark_integration``, none of the test
machinery (the in-repository local stack and demo in ``infra/``, ``tests/``), and no module of the product
imports what the wheel leaves out."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = {"logstore", "table", "spark_integration"}


@pytest.mark.slow
def test_the_wheel_holds_the_product_packages_and_nothing_else(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)],
                   check=True, cwd=tmp_path, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("dynacommit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == PRODUCT
    shipped = {name for name in names if name.endswith(".py")}
    in_repo = {p.relative_to(ROOT).as_posix() for top in PRODUCT for p in (ROOT / top).rglob("*.py")}
    assert shipped == in_repo


def test_no_product_module_imports_what_the_wheel_leaves_out():
    outside = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()} - PRODUCT
    outside.add("tests")
    found = []
    for top in sorted(PRODUCT):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
                found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in outside]
    assert found == []
