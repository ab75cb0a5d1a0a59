"""Product modules of ``table`` and ``spark_integration`` cite only files of this repository (a path with
a directory, or a ``.md`` file), besides Delta's own specification (``PROTOCOL.md`` of delta-io/delta)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("table", "spark_integration")
CITED = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.(?:md|py|json|toml)|[\w-]+\.md)\b")
ELSEWHERE = {"PROTOCOL.md"}  # Delta's protocol, cited by its name


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_module_cites_only_files_of_the_repository(path):
    text = path.read_text()
    missing = [f"line {text[:m.start()].count(chr(10)) + 1}: {m.group(1)}" for m in CITED.finditer(text)
               if m.group(1) not in ELSEWHERE and not (ROOT / m.group(1)).exists()]
    assert missing == []
