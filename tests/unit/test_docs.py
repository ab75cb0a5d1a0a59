"""The docs say what the code does: every link resolves, every failpoint is in the protocol, every public
error is in the one tree and in the operations guide's table, every Spark option in the user guide."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import logstore
import spark_integration
import table
from logstore import failpoints
from logstore.errors import DynacommitError
from spark_integration import options as spark_options

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "RELIABILITY.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]+\]\(([^)\s]+)\)")
NOT_PUBLIC = {"FailpointError"}  # raised only by an armed failpoint, in tests (logstore/failpoints.py)


def every_module() -> list:
    modules = []
    for package in (logstore, table, spark_integration):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith(".__main__"):  # an entry point runs when imported
                modules.append(importlib.import_module(info.name))
    return modules


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


def section(path: Path, heading: str) -> str:
    return path.read_text().split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_docs_exist_and_are_indexed():
    names = {p.name for p in DOCS}
    assert {"README.md", "user-guide.md", "operations.md", "protocol.md"} <= names
    index = (ROOT / "docs" / "README.md").read_text()
    for doc in (ROOT / "docs").glob("*.md"):
        if doc.name != "README.md":
            assert f"({doc.name})" in index, f"docs/README.md does not link {doc.name}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.name}")
    assert broken == []


def test_every_declared_failpoint_is_in_the_protocol():
    every_module()
    protocol = (ROOT / "docs" / "protocol.md").read_text()
    declared = failpoints.declared()
    assert len(declared) > 20
    assert [name for name in declared if f"`{name}`" not in protocol] == []


def public_errors() -> dict[str, type]:
    found = {}
    for module in every_module():
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, DynacommitError) and value.__module__ == module.__name__:
                found[name] = value
    return found


def test_every_error_is_exported_from_table_drawn_in_the_tree_and_explained():
    errors = public_errors()
    assert len(errors) > 20
    tree = importlib.import_module("logstore.errors").__doc__ + importlib.import_module("table.errors").__doc__
    table_of_errors = section(ROOT / "docs" / "operations.md", "## Errors")
    for name, cls in sorted(errors.items()):
        if name in NOT_PUBLIC:
            continue
        assert getattr(table, name, None) is cls, f"{name} is not importable from table"
        assert name in table.__all__, f"{name} is missing from table.__all__"
        assert re.search(rf"\b{name}\b", tree), f"{name} is not drawn in the error tree"
        assert f"| `{name}`" in table_of_errors or cls is DynacommitError, (
            f"{name} has no row in the operations guide's error table")


def test_every_spark_option_is_in_the_user_guide():
    guide = section(ROOT / "docs" / "user-guide.md", "### Options")
    rows = {line.split("|")[1].strip(): line for line in guide.splitlines() if line.startswith("| ")}
    for use, names in spark_options._OWN.items():
        assert use.value in rows, f"no row for {use.value}"
        for name in names:
            assert f"`{name}`" in rows[use.value], f"{name} ({use.value}) is not in the user guide"
    for refused in spark_options.REFUSED:
        assert f"`{refused}`" in guide


def test_every_storage_option_is_in_the_operations_guide():
    from logstore.options import KNOWN_KEYS

    deploying = section(ROOT / "docs" / "operations.md", "## Deploying")
    assert [key for key in KNOWN_KEYS if f"`{key}`" not in deploying] == []


def test_every_honoured_table_property_is_in_the_user_guide():
    from table.log import properties

    guide = (ROOT / "docs" / "user-guide.md").read_text()
    assert [key for key in properties._HONOURED if f"`{key}`" not in guide] == []


def test_every_table_feature_is_in_the_user_guides_feature_table():
    from table.log import protocol

    features = section(ROOT / "docs" / "user-guide.md", "## Delta features: read, written, refused")
    named = {*protocol.READER_FEATURES, *protocol.WRITER_FEATURES, *protocol.REFUSED}
    assert [f for f in sorted(named) if f"`{f}`" not in features] == []


def test_every_refused_spark_option_is_in_the_user_guide_with_the_error_it_gives():
    """Issue 18, item 9: each Delta option dynacommit refuses has a row in the user guide giving the error's
    advice as the parser words it (read from the error itself, for the use it belongs to)."""
    from logstore.errors import InvalidArgumentError

    guide = section(ROOT / "docs" / "user-guide.md", "### Options")
    rows = {line.split("|")[1].strip().strip("`"): line for line in guide.splitlines() if line.startswith("| `")}
    parsers = {"batch write": spark_options.parse_write, "batch read": spark_options.parse_read,
               "streaming read": spark_options.parse_stream_read, "streaming write": spark_options.parse_sink}
    for name, (use, advice) in spark_options.REFUSED.items():
        assert name in rows, f"refused option {name} has no row in the user guide's options"
        with pytest.raises(InvalidArgumentError) as refused:
            parsers[use]({"path": "s3://b/t", name.lower(): "x"})
        assert advice in str(refused.value)
        assert use in rows[name] and advice in rows[name], rows[name]
