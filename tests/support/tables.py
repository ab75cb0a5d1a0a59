"""Small helpers for tests that write tables: rows to write, and what a table leaves in its bucket."""

from __future__ import annotations

import pyarrow as pa

from table.table import Table


def rows(start: int, count: int, part: str = "a") -> pa.Table:
    """``count`` rows with ids from ``start``, all in partition ``part``."""
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()), "part": pa.array([part] * count, pa.string())})


def data_keys(table: Table) -> set[str]:
    """Every object under the table but its log."""
    return {o.key for o in table.objects.list(table.uri.key(""))
            if not table.uri.relative(o.key).startswith("_delta_log/")}


def uploads(table: Table) -> list:
    """Incomplete multipart uploads under the table."""
    return table.objects.list_uploads(table.uri.key(""))


def assert_untouched(table: Table, keys_before: set[str]) -> None:
    """Nothing of a failed write is left: the same data objects as before, no pending upload."""
    assert data_keys(table) == keys_before
    assert uploads(table) == []


def ids(uri: str, options: dict[str, str] | None) -> list[int]:
    """The sorted ids of the table's rows, read afresh."""
    return sorted(Table(uri, storage_options=options).to_pyarrow_table()["id"].to_pylist())
