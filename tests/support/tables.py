"""Small helpers for tests that write tables: rows to write, and what a table leaves in its bucket."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

from logstore import failpoints
from table.log.transaction import BEFORE_WRITE
from table.table import Table

T = TypeVar("T")


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


def with_rival(rival: Callable[[], object], call: Callable[[], T], *, at: str = BEFORE_WRITE) -> T:
    """Run ``call``; the first time it reaches failpoint ``at`` (by default: a transaction about to write its
    log entry, after staging and completing its files), run ``rival`` there: another writer in between."""
    done: list[str] = []

    def hook(name: str) -> None:
        if name == at and not done:
            done.append(name)
            rival()

    failpoints.set_hook(hook)
    try:
        return call()
    finally:
        failpoints.set_hook(None)
