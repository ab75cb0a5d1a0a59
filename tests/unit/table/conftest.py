"""Fixtures for the pure table modules: real Delta logs written by delta-rs into ``tmp_path``.

The parser and replay are checked against what another implementation writes and reads, not only
against logs we made up.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest


def _rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array(["a" if i % 2 else "b" for i in ids]),
            "value": pa.array([i * 1.5 for i in ids], pa.float64()),
            "label": pa.array([None if i % 3 == 0 else f"row-{i}" for i in ids]),
        }
    )


def _plain(path: Path) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(path), _rows(0, 6))
    write_deltalake(str(path), _rows(6, 6), mode="append")
    write_deltalake(str(path), _rows(12, 4), mode="overwrite")
    write_deltalake(str(path), _rows(16, 3), mode="append")


def _partitioned(path: Path) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(path), _rows(0, 6), partition_by=["part"])
    write_deltalake(str(path), _rows(6, 6), mode="append")
    write_deltalake(str(path), _rows(12, 4), mode="overwrite")
    write_deltalake(str(path), _rows(16, 3), mode="append")


def _rewrites(path: Path) -> None:
    """Deletes and compaction: files removed and re-added across commits, ``dataChange=false``."""
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(str(path), _rows(0, 6), partition_by=["part"])
    for start in (6, 12, 18):
        write_deltalake(str(path), _rows(start, 6), mode="append")
    DeltaTable(str(path)).delete("id < 4")
    DeltaTable(str(path)).optimize.compact()
    replacement = _rows(100, 6).filter(pa.compute.equal(pa.compute.field("part"), "a"))
    write_deltalake(str(path), replacement, mode="overwrite", predicate="part = 'a'")


def _change_data_feed(path: Path) -> None:
    """A table with ``cdc`` actions (writer version 4)."""
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(
        str(path), _rows(0, 10), partition_by=["part"], configuration={"delta.enableChangeDataFeed": "true"}
    )
    DeltaTable(str(path)).delete("id < 3")


def _timestamp_ntz(path: Path) -> None:
    """Protocol 3/7 with the timestampNtz feature."""
    import datetime as dt

    from deltalake import write_deltalake

    data = pa.table({"at": pa.array([dt.datetime(2024, 1, 1, 12, 0, 0, 123456)], pa.timestamp("us")), "n": [1]})
    write_deltalake(str(path), data)
    write_deltalake(str(path), data, mode="append")


SCENARIOS = {
    "plain": _plain,
    "partitioned": _partitioned,
    "rewrites": _rewrites,
    "change_data_feed": _change_data_feed,
    "timestamp_ntz": _timestamp_ntz,
}


@pytest.fixture(params=sorted(SCENARIOS))
def deltars_table(request, tmp_path) -> Path:
    """The root of a table written by delta-rs, one per scenario above."""
    pytest.importorskip("deltalake")
    path = tmp_path / request.param
    SCENARIOS[request.param](path)
    return path


@pytest.fixture
def deltars_commits(deltars_table) -> list[tuple[int, bytes]]:
    """``(version, body)`` of every commit file of ``deltars_table``, in version order."""
    log = deltars_table / "_delta_log"
    return [(int(p.name.split(".")[0]), p.read_bytes()) for p in sorted(log.glob("*.json"))]
