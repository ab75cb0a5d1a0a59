"""Reading the change data feed (``Table.load_cdf``): cdc files where a version has them, add/remove rows
where it has not, compactions skipped, and Delta's refusals. (Against deltalake's reader:
tests/interop/test_dml_interop.py.)"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from table import (
    ArgumentTypeError,
    DataFileMissingError,
    InvalidArgumentError,
    Table,
    VersionNotFoundError,
    write_table,
)
from table.data.cdf import plan_cdf, read_changes
from table.maintenance import vacuum

CDF = {"delta.enableChangeDataFeed": "true"}


def changes(reader: pa.RecordBatchReader) -> list[tuple]:
    rows = reader.read_all()
    return sorted((r["_commit_version"], r["_change_type"], r["id"], r.get("v")) for r in rows.to_pylist())


@pytest.fixture
def table(memory_uri) -> Table:
    write_table(memory_uri, pa.table({"id": [1, 2, 3], "v": [1.0, 2.0, 3.0]}), configuration=CDF)  # 0
    t = Table(memory_uri)
    t.update({"v": "v + 10"}, predicate="id = 1")                                                   # 1
    write_table(memory_uri, pa.table({"id": [4], "v": [4.0]}))                                      # 2
    t.optimize(target_size=5 * 1024 * 1024)                                                         # 3: no change
    t.delete("id >= 3")                                                                             # 4
    return t.refresh()


def test_every_kind_of_change_version_by_version(table):
    assert changes(table.load_cdf(0)) == [
        (0, "insert", 1, 1.0), (0, "insert", 2, 2.0), (0, "insert", 3, 3.0),
        (1, "update_postimage", 1, 11.0), (1, "update_preimage", 1, 1.0),
        (2, "insert", 4, 4.0),
        (4, "delete", 3, 3.0), (4, "delete", 4, 4.0),
    ]
    assert changes(table.load_cdf(1, 2)) == [(1, "update_postimage", 1, 11.0), (1, "update_preimage", 1, 1.0),
                                             (2, "insert", 4, 4.0)]
    assert changes(table.load_cdf(3, 3)) == []
    schema = table.load_cdf(2, columns=["id"]).schema
    assert schema.names == ["id", "_change_type", "_commit_version", "_commit_timestamp"]
    assert schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")


def test_ranges_by_timestamp(table):
    stamps = {r["_commit_version"]: r["_commit_timestamp"] for r in table.load_cdf(0).read_all().to_pylist()}
    assert {v for v, *_ in changes(table.load_cdf(starting_timestamp=stamps[2]))} == {2, 4}
    assert {v for v, *_ in changes(table.load_cdf(ending_timestamp=stamps[1]))} == {0, 1}
    with pytest.raises(InvalidArgumentError, match="not both"):
        table.load_cdf(1, starting_timestamp=stamps[2])


def test_a_planned_range_read_in_parts_gives_the_rows_of_the_whole(table):
    """What Spark's tasks do: plan once (nothing read), then read some versions each, anywhere (the plan is
    pickled); together, the rows of load_cdf, version by version."""
    feed = plan_cdf(table, 1, columns=["id"])
    assert (feed.start, feed.end, feed.schema) == (1, 4, table.load_cdf(1, columns=["id"]).schema)
    shipped = pickle.loads(pickle.dumps(feed))
    parts = [pa.Table.from_batches(list(read_changes(shipped, v, v)), feed.schema) for v in feed.versions]
    assert [p.num_rows for p in parts] == [2, 1, 0, 2]
    assert pa.concat_tables(parts).equals(table.load_cdf(1, columns=["id"]).read_all())
    with pytest.raises(InvalidArgumentError, match="versions 0..1 are not in the change data feed read"):
        list(read_changes(feed, 0, 1))


def test_out_of_range_versions(table):
    with pytest.raises(VersionNotFoundError, match="go up to 4"):
        table.load_cdf(9)
    assert table.load_cdf(9, allow_out_of_range=True).read_all().num_rows == 0
    with pytest.raises(VersionNotFoundError, match="ending_version 9"):
        table.load_cdf(0, 9)
    assert changes(table.load_cdf(4, 9, allow_out_of_range=True)) == [(4, "delete", 3, 3.0), (4, "delete", 4, 4.0)]


def test_a_table_without_the_feed_is_refused_naming_the_version(memory_uri):
    write_table(memory_uri, pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError, match="did not record change data at version 0"):
        Table(memory_uri).load_cdf(0).read_all()


def test_columns_added_later_are_null_in_earlier_changes(memory_uri):
    write_table(memory_uri, pa.table({"id": [1]}), configuration=CDF)
    write_table(memory_uri, pa.table({"id": [2], "note": ["new"]}), schema_mode="merge")
    rows = Table(memory_uri).load_cdf(0).read_all()
    assert sorted((r["id"], r["note"]) for r in rows.to_pylist()) == [(1, None), (2, "new")]


def test_a_removed_file_vacuumed_away_is_named(table):
    vacuum(table, retention_hours=0, force=True, dry_run=False)
    with pytest.raises(DataFileMissingError, match="vacuumed"):
        table.load_cdf(4).read_all()


@pytest.mark.parametrize("deletion_vectors", [False, True])
def test_a_column_mapped_table_gives_the_changes_of_an_unmapped_one_under_its_current_names(
        memory_uri, tmp_path, deletion_vectors):
    """Column mapping (name mode): files hold physical names, so every version's rows come under the names
    of the last version read, a column renamed since included. The expectation is the same history on an
    unmapped table, its result renamed afterwards."""
    vectors = {"delta.enableDeletionVectors": "true"} if deletion_vectors else {}

    def history(uri: str, mapped: bool) -> Table:
        properties = {**CDF, **vectors, **({"delta.columnMapping.mode": "name"} if mapped else {})}
        write_table(uri, pa.table({"id": [1, 2, 3], "v": [1.0, 2.0, 3.0], "p": ["a", "b", "a"]}),
                    partition_by=["p"], configuration=properties)
        t = Table(uri)
        t.update({"v": "v + 10"}, predicate="id = 1")
        if mapped:
            t.alter.rename_column("v", "value")
        else:  # a commit without changes at the same version
            t.alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
        t.refresh()
        write_table(uri, pa.table({"id": [4], ("value" if mapped else "v"): [4.0], "p": ["b"]}))
        t.refresh().delete("id >= 3")
        return t.refresh()

    mapped = history(memory_uri, True)
    plain = history(f"{memory_uri}-plain", False)
    got = mapped.load_cdf(0).read_all()
    assert got.column_names[:3] == ["id", "value", "p"]
    expected = plain.load_cdf(0).read_all().rename_columns(got.column_names)
    key = ["_commit_version", "_change_type", "id"]
    strip = lambda t: t.drop_columns(["_commit_timestamp"]).sort_by([(k, "ascending") for k in key]).to_pylist()  # noqa: E731
    assert strip(got) == strip(expected)
    assert mapped.load_cdf(1, columns=["value"]).read_all().column_names[0] == "value"


def test_a_range_across_a_replaced_schema_is_refused_and_each_side_reads(memory_uri):
    write_table(memory_uri, pa.table({"id": [1, 2], "v": ["a", "b"]}), configuration=CDF)
    write_table(memory_uri, pa.table({"id": [3], "v": [30]}), mode="overwrite", schema_mode="overwrite")
    table = Table(memory_uri)
    with pytest.raises(InvalidArgumentError, match="column 'v' is string there and int64"):
        table.load_cdf(0).read_all()
    assert changes(table.load_cdf(0, 0)) == [(0, "insert", 1, "a"), (0, "insert", 2, "b")]
    with pytest.raises(InvalidArgumentError):  # its deleted rows have the old schema
        table.load_cdf(1).read_all()
    write_table(memory_uri, pa.table({"id": [4], "v": [40]}))
    assert changes(Table(memory_uri).load_cdf(2)) == [(2, "insert", 4, 40)]


def test_a_range_across_a_dropped_mapped_column_is_refused(memory_uri):
    write_table(memory_uri, pa.table({"id": [1], "v": [1.0], "w": ["x"]}),
                configuration={**CDF, "delta.columnMapping.mode": "name"})
    Table(memory_uri).alter.drop_columns(["w"])
    with pytest.raises(InvalidArgumentError, match="column 'w' is not in the table's schema"):
        Table(memory_uri).load_cdf(0).read_all()


def test_columns_added_later_read_as_null_and_bad_columns_are_refused(memory_uri):
    write_table(memory_uri, pa.table({"id": [1, 2]}), configuration=CDF)
    write_table(memory_uri, pa.table({"id": [3], "v": [30.0]}), schema_mode="merge")
    table = Table(memory_uri)
    assert changes(table.load_cdf(0, columns=["id", "v"])) == [(0, "insert", 1, None), (0, "insert", 2, None),
                                                             (1, "insert", 3, 30.0)]
    with pytest.raises(InvalidArgumentError, match="nope"):
        table.load_cdf(0, columns=["nope"])
    with pytest.raises(ArgumentTypeError):
        table.load_cdf(0, columns="id")
