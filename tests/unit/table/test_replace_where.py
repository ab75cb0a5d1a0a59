"""replaceWhere (issue 25, item 3): ``write_table(..., mode="overwrite", predicate=...)`` replaces exactly the
rows the predicate selects. The expected table is computed by DuckDB over the input rows (the rows the
predicate does not select, plus the data), independently of the code's DELETE path."""

from __future__ import annotations

import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError
from table import CommitConflictError, Table, write_table
from table.log.actions import AddFile, RemoveFile
from table.log.snapshot import read_commit
from tests.support.dml_reference import duckdb_delete, rows_of
from tests.support.tables import with_rival


def rows(ids, day="d1") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "day": pa.array([day] * len(ids)),
                     "v": pa.array([float(i) for i in ids])})


def setup(uri, configuration=None) -> pa.Table:
    first, second = rows([1, 2, 3], "d1"), rows([10, 11], "d2")
    write_table(uri, first, partition_by=["day"], configuration=configuration)
    write_table(uri, second)
    return pa.concat_tables([first, second])


@pytest.mark.parametrize("predicate,data", [
    ("day = 'd1'", rows([7, 8], "d1")),                   # partition columns only: files removed whole
    ("id >= 2 AND id < 11", rows([5], "d2")),             # data columns: files rewritten without the rows
    ("day = 'd3'", rows([30], "d3")),                     # selects nothing yet: an append
], ids=["partition", "data-columns", "new-partition"])
@pytest.mark.parametrize("configuration", [None, {"delta.enableDeletionVectors": "true"}], ids=["cow", "dv"])
def test_replace_where_replaces_exactly_the_selected_rows(memory_uri, predicate, data, configuration):
    base = setup(memory_uri, configuration)
    result = write_table(memory_uri, data, mode="overwrite", predicate=predicate)
    expected = pa.concat_tables([duckdb_delete(base, predicate), data])
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(expected)
    entry = Table(memory_uri).history(1)[0]
    assert entry.operation == "WRITE" and entry.operation_parameters["mode"] == "Overwrite"
    assert entry.operation_parameters["predicate"] == f'["{predicate}"]'
    assert result.metrics["numOutputRows"] == str(data.num_rows)
    actions = read_commit(Table(memory_uri).log_store, result.version)
    assert any(isinstance(a, AddFile) for a in actions)
    if predicate == "day = 'd3'":
        assert not any(isinstance(a, RemoveFile) for a in actions)


def test_data_outside_the_predicate_is_refused_before_anything_is_written(memory_uri):
    setup(memory_uri)
    before = Table(memory_uri).version
    with pytest.raises(InvalidArgumentError, match="does not select") as caught:
        write_table(memory_uri, pa.concat_tables([rows([7], "d1"), rows([9], "d2")]), mode="overwrite",
                    predicate="day = 'd1'")
    assert "'id': 9" in str(caught.value) and "Nothing was written" in str(caught.value)
    assert Table(memory_uri).version == before
    with pytest.raises(InvalidArgumentError):  # NULL is not TRUE: a row where the predicate is NULL is outside
        write_table(memory_uri, pa.table({"id": pa.array([None], pa.int64()), "day": ["d1"], "v": [1.0]}),
                    mode="overwrite", predicate="id > 0")


def test_bad_uses_are_refused_naming_the_problem(memory_uri):
    with pytest.raises(InvalidArgumentError, match="no table at"):
        write_table(memory_uri, rows([1]), mode="overwrite", predicate="id = 1")
    setup(memory_uri)
    with pytest.raises(InvalidArgumentError, match="needs mode='overwrite'"):
        write_table(memory_uri, rows([1]), predicate="id = 1")
    with pytest.raises(InvalidArgumentError, match="partition_overwrite='dynamic'"):
        write_table(memory_uri, rows([1]), mode="overwrite", partition_overwrite="dynamic", predicate="id = 1")
    with pytest.raises(InvalidArgumentError, match="replaceWhere predicate"):
        write_table(memory_uri, rows([1]), mode="overwrite", predicate="nope = 1")


def test_a_concurrent_delete_of_the_replaced_rows_conflicts_and_nothing_lands(memory_uri):
    """The replaceWhere read the files its predicate selects: a concurrent DELETE of one of them is a
    conflict by Delta's rules; the data may have been a stream, so it is raised, not re-planned."""
    base = setup(memory_uri)
    with pytest.raises(CommitConflictError):
        with_rival(lambda: Table(memory_uri).delete("id = 2"),
                   lambda: write_table(memory_uri, rows([0], "d1"), mode="overwrite", predicate="id <= 3"))
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(duckdb_delete(base, "id = 2"))
    assert orphans(memory_uri) == set()  # the staged data and rewritten files were deleted


def orphans(uri) -> set[str]:
    """Objects under the table that no version of its log ever added."""
    from urllib.parse import unquote

    table = Table(uri)
    added = {unquote(a.path) for v in range(table.version + 1) for a in read_commit(table.log_store, v)
             if isinstance(a, AddFile)}
    stored = {table.uri.relative(o.key) for o in table.objects.list(table.uri.key(""))}
    return {k for k in stored if not k.startswith("_delta_log/")} - added


def test_a_concurrent_append_elsewhere_does_not_stop_it(memory_uri):
    base = setup(memory_uri)
    appended = rows([50], "d2")
    with_rival(lambda: write_table(memory_uri, appended),
               lambda: write_table(memory_uri, rows([7], "d1"), mode="overwrite", predicate="day = 'd1'"))
    expected = pa.concat_tables([duckdb_delete(base, "day = 'd1'"), rows([7], "d1"), appended])
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(expected)


def test_a_stream_of_batches_is_written_once(memory_uri):
    base = setup(memory_uri)
    data = rows(list(range(100, 400)), "d1")
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=64))
    write_table(memory_uri, reader, mode="overwrite", predicate="day = 'd1'")
    expected = pa.concat_tables([duckdb_delete(base, "day = 'd1'"), data])
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(expected)


def test_a_schema_change_committed_while_the_data_uploads_is_a_conflict(memory_uri):
    """The data was planned on the table's schema then: a rival replacing the schema meanwhile conflicts
    (Delta's MetadataChanged), and nothing of the replaceWhere lands."""
    setup(memory_uri)
    rival = pa.table({"id": ["x"], "day": ["d1"], "w": pa.array([1], pa.int32())})
    with pytest.raises(CommitConflictError):
        with_rival(lambda: write_table(memory_uri, rival, mode="overwrite", schema_mode="overwrite"),
                   lambda: write_table(memory_uri, rows([7], "d1"), mode="overwrite", predicate="day = 'd1'"))
    assert Table(memory_uri).to_pyarrow_table().to_pylist() == rival.to_pylist()
    assert orphans(memory_uri) == set()


def test_with_schema_mode_merge_the_new_columns_are_committed(memory_uri):
    base = setup(memory_uri)
    data = rows([7], "d1").append_column("extra", pa.array(["e"]))
    write_table(memory_uri, data, mode="overwrite", predicate="day = 'd1'", schema_mode="merge")
    table = Table(memory_uri)
    assert "extra" in table.schema.names
    kept = duckdb_delete(base, "day = 'd1'")
    kept = kept.append_column("extra", pa.nulls(kept.num_rows, pa.string()))
    assert rows_of(table.to_pyarrow_table().select(data.column_names)) == rows_of(pa.concat_tables([kept, data]))


@pytest.mark.parametrize("predicate", ["id >= 2 AND id < 11", "day = 'd1'"], ids=["data-columns", "partition"])
def test_the_change_data_feed_has_the_deleted_and_the_inserted_rows(memory_uri, predicate):
    base = setup(memory_uri, {"delta.enableChangeDataFeed": "true"})
    data = rows([2, 7], "d1")
    result = write_table(memory_uri, data, mode="overwrite", predicate=predicate)
    feed = Table(memory_uri).load_cdf(result.version, result.version).read_all()
    changes = sorted((r["id"], r["_change_type"]) for r in feed.to_pylist())
    deleted = [(i, "delete") for i in duckdb_delete(base, f"NOT ({predicate})")["id"].to_pylist()]
    assert changes == sorted(deleted + [(2, "insert"), (7, "insert")])
    assert orphans_of_any_kind(memory_uri) == set()  # unneeded insert change data was aborted, not left


def orphans_of_any_kind(uri) -> set[str]:
    """Objects under the table that no version's add or cdc action names."""
    from urllib.parse import unquote

    from table.log.actions import Cdc

    table = Table(uri)
    named = {unquote(a.path) for v in range(table.version + 1) for a in read_commit(table.log_store, v)
             if isinstance(a, (AddFile, Cdc))}
    stored = {table.uri.relative(o.key) for o in table.objects.list(table.uri.key(""))}
    return {k for k in stored if not k.startswith("_delta_log/")} - named
