"""No product file (what the wheel ships: ``logstore/``, ``table/``, ``spark_integration/``) is over 800 lines.

A module of a few hundred lines says what it is in its name and docstring; a much bigger one mixes
concerns and ends up dodging import cycles with function-local imports. A file over the limit is split
by concern, its public names re-exported from the old module where callers use them.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("logstore", "table", "spark_integration")
LIMIT = 800


def line_counts(root: Path) -> dict[str, int]:
    """The number of lines of every ``.py`` file under the product packages of ``root``, by relative path."""
    return {p.relative_to(root).as_posix(): len(p.read_text().splitlines())
            for package in PRODUCT for p in sorted((root / package).rglob("*.py"))}


def over_limit(counts: dict[str, int]) -> list[str]:
    """``path: N lines`` for each file over :data:`LIMIT`, the longest first."""
    return [f"{path}: {n} lines" for path, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            if n > LIMIT]


def test_no_product_file_is_over_800_lines():
    counts = line_counts(ROOT)
    assert len(counts) > 50, f"found only {len(counts)} product files under {PRODUCT}: is ROOT right?"
    over = over_limit(counts)
    assert over == [], f"product files over {LIMIT} lines; split each by concern:\n  " + "\n  ".join(over)


def test_the_report_names_each_file_over_the_limit_with_its_line_count(tmp_path):
    for path, lines in {"table/big.py": LIMIT + 1, "table/log/bigger.py": LIMIT + 50, "logstore/fits.py": LIMIT}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x = 1\n" * lines)
    counts = line_counts(tmp_path)
    assert over_limit(counts) == [
        f"table/log/bigger.py: {LIMIT + 50} lines", f"table/big.py: {LIMIT + 1} lines"]
