"""A full read (every column, no filter) of files bigger than ``WHOLE_FILE`` fetches each of them whole
through the log store's client, in windows bounded by ``WINDOW_BYTES``, and decodes them from memory
(``table.data.fetching.WHOLE_FULL_READ``): the rows must be exactly those deltalake (delta-rs's reader)
and DuckDB read from the same table. A projected or filtered read leaves such files to pyarrow's ranged
reads, as before."""

from __future__ import annotations

import datetime

import deltalake
import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

from table import Table, write_table
from table.data import fetching
from table.data import read as reader
from table.data.files import fetch_each, filesystem_for
from table.data.fragments import file_path
from tests.support.fault_harness import deltalake_options
from tests.support.filesystems import OpeningRecorder

FILES = 6


def rows(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table({
        "id": ids,
        "k": pc.cast(pc.divide(ids, 7), pa.int32()),
        "s": pc.cast(pc.multiply(ids, 2654435761), pa.string()),
        "ts": pc.cast(pc.add(pc.multiply(ids, 1_000_000), 1_700_000_000_000_000), pa.timestamp("us", tz="UTC")),
        "flag": pc.equal(pc.bit_wise_and(ids, 1), 0),
        "day": pa.array([datetime.date(2026, 1, 1 + i % 28) for i in range(start, start + count)], pa.date32()),
        "part": pa.array([f"p{(start // count) % 2}"] * count),
    })


@pytest.fixture
def table(s3_uri, storage_options) -> Table:
    for i in range(FILES):
        write_table(s3_uri, rows(i * 5000, 5000), partition_by=["part"], storage_options=storage_options)
    return Table(s3_uri, storage_options=storage_options)


def recorded_read(table: Table, **kwargs) -> tuple[pa.Table, OpeningRecorder]:
    opening = OpeningRecorder(filesystem_for(table.uri, table.storage_options))
    return reader.to_pyarrow_table(table, filesystem=pafs.PyFileSystem(opening), **kwargs), opening


def theirs(uri: str, storage_options, columns: list[str] | None = None) -> pa.Table:
    """The table as deltalake reads it, by ``id``."""
    read = deltalake.DeltaTable(uri, storage_options=deltalake_options(storage_options))
    return read.to_pyarrow_table(columns=columns).sort_by("id")


def same_rows(ours: pa.Table, other: pa.Table) -> None:
    ours = ours.sort_by("id")
    assert ours.column_names == other.column_names
    for name in ours.column_names:  # deltalake reads a partition column as a dictionary or a plain string
        assert ours[name].to_pylist() == other[name].to_pylist(), name


def test_a_full_read_fetches_bigger_files_whole_and_reads_what_deltalake_and_duckdb_read(
        table, s3_uri, storage_options, monkeypatch, tmp_path):
    sizes = sorted(a.size for a in table.add_actions())
    monkeypatch.setattr(fetching, "WHOLE_FILE", 0)  # none of these files counts as small
    monkeypatch.setattr(fetching, "WINDOW_BYTES", sizes[0] * 2)  # several windows of two files
    got, opening = recorded_read(table)
    assert sorted(opening.opened_by("dynacommit-fetch")) == sorted(opening.opened)
    assert len(opening.opened) == FILES
    same_rows(got, theirs(s3_uri, storage_options))
    # The default path (through the log store's client, no filesystem given) reads the same rows.
    assert table.to_pyarrow_table().sort_by("id").equals(got.sort_by("id"))
    # DuckDB's own Parquet reader, over copies of the same files, finds the same rows.
    for n, add in enumerate(table.add_actions()):
        (tmp_path / f"{n}.parquet").write_bytes(table.objects.get(table.uri.key(add.path)))
    theirs_rows = duckdb.sql(f"SELECT id, k, s, ts, flag, day FROM read_parquet('{tmp_path}/*.parquet') "
                             "ORDER BY id").to_arrow_table()
    assert got.sort_by("id").select(["id", "k", "s", "ts", "flag", "day"]).to_pylist() == theirs_rows.to_pylist()


def test_a_projected_or_filtered_read_leaves_bigger_files_to_pyarrow(table, s3_uri, storage_options, monkeypatch):
    monkeypatch.setattr(fetching, "WHOLE_FILE", 0)
    got, opening = recorded_read(table, columns=["s", "id"])
    assert opening.opened_by("dynacommit-fetch") == [] and len(opening.opened) == FILES
    same_rows(got, theirs(s3_uri, storage_options, columns=["s", "id"]))
    got, opening = recorded_read(table, filter=pc.field("id") >= 12_500)
    assert opening.opened_by("dynacommit-fetch") == []
    assert got.sort_by("id")["id"].to_pylist() == list(range(12_500, FILES * 5000))


def test_files_over_the_full_read_limit_are_left_to_pyarrow(table, s3_uri, storage_options, monkeypatch):
    sizes = sorted(a.size for a in table.add_actions())
    monkeypatch.setattr(fetching, "WHOLE_FILE", 0)
    monkeypatch.setattr(fetching, "WHOLE_FULL_READ", sizes[2])
    got, opening = recorded_read(table)
    fetched = opening.opened_by("dynacommit-fetch")
    assert len(fetched) == len([s for s in sizes if s <= sizes[2]]) and len(opening.opened) == FILES
    same_rows(got, theirs(s3_uri, storage_options))


def test_files_fetched_ahead_stay_within_the_byte_budget(table):
    opening = OpeningRecorder(filesystem_for(table.uri, table.storage_options))
    fs = pafs.PyFileSystem(opening)
    adds = sorted(table.add_actions(), key=lambda a: a.path)
    paths = [file_path(table.uri, a.path) for a in adds] * 3
    sizes = [a.size for a in adds] * 3
    fetched = fetch_each(fs, paths, ahead=32, sizes=sizes, ahead_bytes=sizes[0] + sizes[1])
    first = next(fetched)
    assert first.error is None and first.buffer.size == sizes[0]
    fetched.close()
    # the one handed over, then files under way up to the budget (two of these files, at least one)
    assert 1 <= len(opening.opened_by("dynacommit-fetch")) <= 1 + 2
    assert [f.buffer.size for f in fetch_each(fs, paths, ahead=32, sizes=sizes, ahead_bytes=1)] == sizes
