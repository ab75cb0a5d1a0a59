"""deltalake's inspection and maintenance methods on ``Table``, with deltalake's call forms (issue 25, item 5).

Each answer is compared with what deltalake itself says of the same table on the moto stack: ``version()``,
``metadata()``, ``protocol()``, ``get_add_actions`` (nested and flattened), ``vacuum`` (the same files, and
the retention check), ``create_checkpoint`` (deltalake reads the checkpoint we wrote), ``is_deltatable``,
``to_pandas``; ``detail()`` against the table's own log.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import deltalake
import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError
from table import Table, write_table
from tests.support.fault_harness import deltalake_options


def sample(start: int) -> pa.Table:
    n = 4
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "name": pa.array([f"n{i}" if i % 3 else None for i in range(start, start + n)], pa.string()),
        "price": pa.array([Decimal(f"{i}.25") for i in range(start, start + n)], pa.decimal128(10, 2)),
        "day": pa.array([dt.date(2024, 1, 1 + i % 20) for i in range(start, start + n)], pa.date32()),
        "at": pa.array([dt.datetime(2024, 1, 1, 12, i % 60, tzinfo=dt.timezone.utc)
                        for i in range(start, start + n)], pa.timestamp("us", tz="UTC")),
        "region": pa.array(["eu" if i % 2 else "us" for i in range(start, start + n)], pa.string()),
    })


@pytest.fixture
def twin(s3_uri, storage_options):
    """A partitioned table of three appends written by deltalake, opened by both."""
    options = deltalake_options(storage_options)
    for start in (0, 10, 20):
        deltalake.write_deltalake(s3_uri, sample(start), partition_by=["region"], mode="append",
                                  storage_options=options)
    return Table(s3_uri, storage_options=storage_options), deltalake.DeltaTable(s3_uri, storage_options=options)


def test_version_is_an_int_and_callable_as_in_deltalake(twin):
    ours, theirs = twin
    assert ours.version == theirs.version() == 2
    assert ours.version() == theirs.version() and isinstance(ours.version(), int)
    assert ours.version + 1 == 3


def test_metadata_and_protocol_match_deltalakes(twin):
    ours, theirs = twin
    mine, their = ours.metadata(), theirs.metadata()
    assert (mine.id, mine.name, mine.description, mine.partition_columns, mine.created_time, mine.configuration) == (
        their.id, their.name, their.description, their.partition_columns, their.created_time, their.configuration)
    mine, their = ours.protocol(), theirs.protocol()
    assert (mine.min_reader_version, mine.min_writer_version, mine.reader_features, mine.writer_features) == (
        their.min_reader_version, their.min_writer_version, their.reader_features, their.writer_features)


@pytest.mark.parametrize("flatten", [False, True], ids=["nested", "flattened"])
def test_get_add_actions_gives_deltalakes_rows(twin, flatten):
    ours, theirs = twin
    mine = ours.get_add_actions(flatten=flatten)
    their = pa.table(theirs.get_add_actions(flatten=flatten)).sort_by("path")
    assert mine.column_names == their.column_names
    assert mine.num_rows == their.num_rows == len(theirs.file_uris())
    for name in mine.column_names:
        assert mine[name].to_pylist() == their[name].to_pylist(), name


def test_vacuum_takes_deltalakes_arguments_and_deletes_the_files_deltalake_would(s3_uri, storage_options, twin):
    ours, theirs = twin
    write_table(s3_uri, sample(100), mode="overwrite", storage_options=storage_options)
    ours.refresh()
    theirs.update_incremental()
    with pytest.raises(InvalidArgumentError, match="enforce_retention_duration=False"):
        ours.vacuum(0)
    expected = sorted(theirs.vacuum(0, dry_run=True, enforce_retention_duration=False))
    assert len(expected) == 6  # the three appends' files of both partitions, removed by the overwrite
    assert sorted(ours.vacuum(0, enforce_retention_duration=False)) == expected  # a dry run by default
    assert sorted(ours.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)) == expected
    assert ours.vacuum(0, dry_run=False, enforce_retention_duration=False) == []
    assert sorted(ours.to_pyarrow_table()["id"].to_pylist()) == list(range(100, 104))


def test_create_checkpoint_writes_one_deltalake_reads(s3_uri, storage_options, twin):
    ours, _ = twin
    hint = ours.create_checkpoint()
    assert hint.version == 2
    names = sorted(f.name for f in ours.log_store.list_files())
    assert "00000000000000000002.checkpoint.parquet" in names and "_last_checkpoint" in names
    assert ours.cleanup_metadata() == []  # every commit is within the 30-day log retention
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options))
    assert theirs.version() == 2
    assert sorted(pa.table(theirs.to_pyarrow_table())["id"].to_pylist()) == sorted(
        ours.to_pyarrow_table()["id"].to_pylist())


def test_is_deltatable_and_to_pandas(s3_uri, storage_options, twin):
    ours, theirs = twin
    options = deltalake_options(storage_options)
    assert Table.is_deltatable(s3_uri, storage_options) is deltalake.DeltaTable.is_deltatable(s3_uri, options) is True
    empty = s3_uri + "-nothing-here"
    assert Table.is_deltatable(empty, storage_options) is deltalake.DeltaTable.is_deltatable(empty, options) is False
    frame = ours.to_pandas(columns=["id", "name"]).sort_values("id")
    their = theirs.to_pandas(columns=["id", "name"]).sort_values("id")
    assert frame["id"].tolist() == their["id"].tolist()
    assert frame["name"].fillna("-").tolist() == their["name"].fillna("-").tolist()


def test_detail_describes_the_table_as_describe_detail_does(s3_uri, storage_options, twin):
    ours, theirs = twin
    detail = ours.detail()
    adds = pa.table(theirs.get_add_actions())
    assert detail["format"] == "delta" and detail["id"] == theirs.metadata().id
    assert detail["location"] == ours.uri.table_path
    assert detail["partitionColumns"] == ["region"] and detail["clusteringColumns"] == []
    assert detail["numFiles"] == adds.num_rows and detail["sizeInBytes"] == sum(adds["size_bytes"].to_pylist())
    assert (detail["minReaderVersion"], detail["minWriterVersion"]) == (1, 2)
    assert detail["lastModified"] == theirs.history(1)[0]["timestamp"]
    assert detail["createdAt"] == theirs.metadata().created_time
