"""DELETE, UPDATE and MERGE leave the rows DuckDB's own statements leave, on partitioned and unpartitioned
tables, NULLs included; only files holding a changed row are rewritten; files that cannot match are not read.

Every expectation is computed by DuckDB over the same input rows (``tests/support/dml_reference.py``),
and the table is read back through a fresh ``Table`` (its log, replayed).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logstore import open_object_store
from table import (
    ArgumentTypeError,
    InvalidArgumentError,
    MergeCardinalityError,
    SchemaMismatchError,
    Table,
    TableNotFoundError,
    write_table,
)
from table.log.actions import AddFile, Cdc, RemoveFile
from table.log.snapshot import read_commit
from tests.support.dml_reference import (
    ClauseSpec,
    MergeSpec,
    duckdb_count,
    duckdb_delete,
    duckdb_merge,
    duckdb_update,
    rows_of,
)

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.float64()), ("s", pa.string())])


def batch(ids, p, start=0.0):
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "p": pa.array([p] * len(ids), pa.string()),
        "v": pa.array([None if i is not None and i % 4 == 3 else start + (i or 0) for i in ids], pa.float64()),
        "s": pa.array([None if i is None else f"s{i % 3}" for i in ids], pa.string()),
    }, schema=SCHEMA)


def make_table(uri: str, partitioned: bool, **configuration) -> pa.Table:
    """Four files (in three partitions when partitioned); returns every row written."""
    parts = [batch([0, 1, 2, 3], "a"), batch([4, 5, None, 6], "b"), batch([7, 8, 9], "a", 0.5),
             batch([10, 11], None)]
    for i, part in enumerate(parts):
        write_table(uri, part, partition_by=["p"] if partitioned else None,
                    configuration=configuration or None if i == 0 else None)
    return pa.concat_tables(parts)


def table_rows(uri: str) -> pa.Table:
    return Table(uri).to_pyarrow_table().select(SCHEMA.names).cast(SCHEMA)


def data_reads(monkeypatch, uri: str) -> list[str]:
    """Record the data files the operations open (GETs of Parquet outside the log) from now on."""
    objects = open_object_store(uri)
    seen: list[str] = []
    get = objects.get

    def recording(key: str) -> bytes:
        if key.endswith(".parquet") and "/_delta_log/" not in key:
            seen.append(key.rsplit("/", 1)[-1])
        return get(key)

    monkeypatch.setattr(objects, "get", recording)
    return seen


def last_commit(uri: str) -> list:
    table = Table(uri)
    return read_commit(table.log_store, table.version)


partitioning = pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])


# --- DELETE --------------------------------------------------------------------------------------------


@partitioning
@pytest.mark.parametrize("predicate", [
    "id > 5", "v IS NULL", "s = 's1' AND v > 1", "id IN (1, 4, 10)", "p = 'a'", "p IS NULL", "p = 'b' OR id = 0",
    "NOT (id < 3)", "id IS NULL", "coalesce(s, 'none') = 'none'", "1 = 1", "1 = 0", "length(s) = 2",
    # the engine folds the data column away: a predicate over the partition column, written with another
    "p = 'a' AND (v > 0 OR true)", "p = 'b' OR (id > 1 AND false)",
])
def test_delete_leaves_the_rows_duckdb_leaves(memory_uri, partitioned, predicate):
    rows = make_table(memory_uri, partitioned)
    result = Table(memory_uri).delete(predicate)
    expected = duckdb_delete(rows, predicate)
    assert rows_of(table_rows(memory_uri)) == rows_of(expected)
    if "numDeletedRows" in result.metrics:
        assert int(result.metrics["numDeletedRows"]) == duckdb_count(rows, predicate)


@partitioning
def test_delete_without_predicate_removes_every_file_without_reading_one(memory_uri, partitioned, monkeypatch):
    make_table(memory_uri, partitioned)
    files = len(Table(memory_uri).files())
    reads = data_reads(monkeypatch, memory_uri)
    result = Table(memory_uri).delete()
    assert table_rows(memory_uri).num_rows == 0 and reads == []
    assert result.metrics["numRemovedFiles"] == str(files) and result.metrics["numDeletedRows"] == "13"
    assert json.loads(Table(memory_uri).history(1)[0].operation_parameters["predicate"]) == []


def test_a_delete_of_whole_partitions_removes_their_files_without_reading_them(memory_uri, monkeypatch):
    make_table(memory_uri, partitioned=True)
    reads = data_reads(monkeypatch, memory_uri)
    result = Table(memory_uri).delete("p = 'a' OR p IS NULL")
    assert reads == []
    assert sorted(table_rows(memory_uri)["p"].to_pylist()) == ["b"] * 4
    commit = last_commit(memory_uri)
    assert sum(isinstance(a, RemoveFile) for a in commit) == 3 and not any(isinstance(a, AddFile) for a in commit)
    assert result.metrics["numDeletedRows"] == "9"  # from the files' statistics, as Delta reports it


def test_a_delete_opens_only_files_whose_statistics_can_match_and_rewrites_only_files_with_a_match(memory_uri,
                                                                                                   monkeypatch):
    make_table(memory_uri, partitioned=False)
    by_first_id = {add.stats and json.loads(add.stats)["minValues"]["id"]: add.path
                   for add in Table(memory_uri).add_actions()}
    reads = data_reads(monkeypatch, memory_uri)
    result = Table(memory_uri).delete("id >= 8 AND id <= 9")
    # only [7, 9] can hold an id of 8 or 9; [4, 6] holds a null id too, and neither part of it can
    assert reads == [by_first_id[7]]
    assert result.metrics["numFilesAfterSkipping"] == "1"
    commit = last_commit(memory_uri)
    removed = [a.path for a in commit if isinstance(a, RemoveFile)]
    assert removed == [by_first_id[7]]  # the only file holding a selected row
    assert result.metrics["numCopiedRows"] == "1" and result.metrics["numDeletedRows"] == "2"
    reads.clear()
    Table(memory_uri).delete("id = 1000")  # within no file's range: nothing opened, nothing committed
    assert reads == [] and Table(memory_uri).version == 4


def test_a_delete_that_selects_nothing_commits_nothing(memory_uri):
    make_table(memory_uri, partitioned=True)
    result = Table(memory_uri).delete("v > 1000")
    assert result.version == 3 and Table(memory_uri).version == 3
    assert result.metrics["numDeletedRows"] == "0" and result.metrics["numRemovedFiles"] == "0"


# --- UPDATE --------------------------------------------------------------------------------------------


@partitioning
@pytest.mark.parametrize("updates, predicate", [
    ({"v": "v * 2"}, "id > 5"),
    ({"v": "coalesce(v, -1)", "s": "'changed'"}, None),
    ({"s": "s || '-x'"}, "p = 'a'"),
    ({"p": "'moved'"}, "id % 2 = 0"),
    ({"id": "id + 100", "v": "NULL"}, "s = 's2' OR s IS NULL"),
    ({"v": "CASE WHEN v > 3 THEN v ELSE 0 END"}, "v IS NOT NULL"),
])
def test_update_leaves_the_rows_duckdb_leaves(memory_uri, partitioned, updates, predicate):
    rows = make_table(memory_uri, partitioned)
    result = Table(memory_uri).update(updates, predicate=predicate)
    expected = duckdb_update(rows, updates, predicate)
    assert rows_of(table_rows(memory_uri)) == rows_of(expected)
    assert int(result.metrics["numUpdatedRows"]) == duckdb_count(rows, predicate)
    assert int(result.metrics["numCopiedRows"]) <= rows.num_rows - duckdb_count(rows, predicate)


def test_update_rewrites_only_the_files_holding_an_updated_row(memory_uri):
    make_table(memory_uri, partitioned=False)
    table = Table(memory_uri)
    holding = {}
    for add in table.add_actions():
        ids = pq.read_table(pa.BufferReader(open_object_store(memory_uri).get(table.uri.key(add.path))))["id"]
        holding[add.path] = set(ids.to_pylist())
    result = table.update({"v": "-v"}, predicate="id = 5 OR id = 10")
    removed = {a.path for a in last_commit(memory_uri) if isinstance(a, RemoveFile)}
    assert removed == {path for path, ids in holding.items() if ids & {5, 10}}
    assert result.metrics["numUpdatedRows"] == "2" and result.metrics["numRemovedFiles"] == "2"


def test_update_casts_values_to_the_column_type_and_refuses_what_does_not_fit(memory_uri):
    make_table(memory_uri, partitioned=False)
    table = Table(memory_uri)
    table.update({"id": "'42'"}, predicate="id = 0")
    assert 42 in table_rows(memory_uri)["id"].to_pylist()
    with pytest.raises(InvalidArgumentError, match="'id'.*does not fit"):
        table.update({"id": "'forty-two'"}, predicate="id = 1")
    assert table.version == 4


@pytest.mark.parametrize("call, error, match", [
    (lambda t: t.update(), InvalidArgumentError, "Table.refresh"),
    (lambda t: t.update({}), InvalidArgumentError, "empty"),
    (lambda t: t.update({"nope": "1"}), InvalidArgumentError, "'nope'"),
    (lambda t: t.update({"V": "1"}), InvalidArgumentError, "did you mean 'v'"),
    (lambda t: t.update({"v": 1}), ArgumentTypeError, "SQL expression string"),
    (lambda t: t.update({"v": "v +"}), InvalidArgumentError, "not valid SQL"),
    (lambda t: t.update({"v": "1"}, predicate="nosuch > 1"), InvalidArgumentError, "nosuch"),
    (lambda t: t.delete("id >"), InvalidArgumentError, "the delete predicate"),
    (lambda t: t.delete("id > 1) OR (1 = 1"), InvalidArgumentError, "not valid SQL"),
    (lambda t: t.delete(5), ArgumentTypeError, "SQL expression string"),
    (lambda t: t.delete("   "), InvalidArgumentError, "empty"),
])
def test_bad_arguments_are_refused_naming_the_problem_and_commit_nothing(memory_uri, call, error, match):
    make_table(memory_uri, partitioned=True)
    table = Table(memory_uri)
    with pytest.raises(error, match=match):
        call(table)
    assert Table(memory_uri).version == 3


def test_an_update_into_a_not_null_column_refuses_nulls(memory_uri):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.float64())])
    write_table(memory_uri, pa.table({"id": [1, 2], "v": [1.0, 2.0]}, schema=schema))
    with pytest.raises(SchemaMismatchError, match="NOT NULL"):
        Table(memory_uri).update({"id": "NULL"}, predicate="id = 1")
    assert Table(memory_uri).version == 0


# --- MERGE ---------------------------------------------------------------------------------------------

SOURCE = pa.table({"id": pa.array([2, 5, 9, 12, 13, None], pa.int64()),
                   "p": pa.array(["a", "b", "a", "c", None, "a"]),
                   "v": pa.array([20.0, None, 90.0, 120.0, 130.0, 1.0]),
                   "s": pa.array(["n2", "n5", None, "n12", "n13", "nnull"])})

MERGES = {
    "upsert": MergeSpec("target.id = source.id", (
        ClauseSpec("matched", "update"), ClauseSpec("not_matched", "insert"))),
    "conditional": MergeSpec("target.id = source.id", (
        ClauseSpec("matched", "delete", "source.v > 50"),
        ClauseSpec("matched", "update", "target.v IS NOT NULL", (("v", "target.v + source.v"),)),
        ClauseSpec("matched", "update", None, (("s", "'nullv'"),)),
        ClauseSpec("not_matched", "insert", "source.v > 125", (("id", "source.id"), ("v", "source.v"))),
        ClauseSpec("not_matched", "insert", None, (("id", "-1 * source.id"), ("s", "source.s"), ("p", "source.p"))),
    )),
    "by-source": MergeSpec("target.id = source.id", (
        ClauseSpec("matched", "update", None, (("s", "source.s"),)),
        ClauseSpec("not_matched_by_source", "delete", "target.p = 'a'"),
        ClauseSpec("not_matched_by_source", "update", None, (("v", "-1"),)),
    )),
    "insert-only": MergeSpec("target.id = source.id AND target.p = source.p", (
        ClauseSpec("not_matched", "insert"),)),
    "delete-matched": MergeSpec("target.id = source.id", (ClauseSpec("matched", "delete"),)),
    "extra-condition": MergeSpec("target.id = source.id AND target.v < 9", (
        ClauseSpec("matched", "update", None, (("v", "source.v"),)),
        ClauseSpec("not_matched", "insert"),
        ClauseSpec("not_matched_by_source", "delete", "target.id IS NULL"))),
}


@partitioning
@pytest.mark.parametrize("name", sorted(MERGES))
def test_merge_leaves_the_rows_duckdb_merge_into_leaves(memory_uri, partitioned, name):
    rows = make_table(memory_uri, partitioned)
    spec = MERGES[name]
    result = spec.apply(Table(memory_uri).merge(SOURCE, spec.predicate)).execute()
    expected = duckdb_merge(rows, SOURCE, spec)
    assert rows_of(table_rows(memory_uri)) == rows_of(expected)
    metrics = result.metrics
    assert int(metrics.get("numTargetRowsInserted", 0)) + int(metrics.get("numTargetRowsUpdated", 0)) \
        + int(metrics.get("numTargetRowsCopied", 0)) == int(metrics.get("numOutputRows", 0))


def test_a_null_safe_merge_key_reaches_files_holding_only_null_keys(memory_uri):
    """``IS NOT DISTINCT FROM`` joins a null source key to null target keys: a file of null keys only must
    not be pruned by the source's (non-null) key values."""
    nulls = pa.table({"id": pa.array([None, None], pa.int64()), "p": ["a", "b"], "v": [1.0, 2.0], "s": ["x", "y"]})
    write_table(memory_uri, nulls.cast(SCHEMA))
    write_table(memory_uri, batch([1, 2], "a"))
    rows = table_rows(memory_uri)
    source = pa.table({"id": pa.array([None, 1], pa.int64()), "p": ["c", "c"], "v": [7.0, 8.0], "s": ["n", "m"]})
    spec = MergeSpec("target.id IS NOT DISTINCT FROM source.id", MERGES["upsert"].clauses)
    spec.apply(Table(memory_uri).merge(source.cast(SCHEMA), spec.predicate)).execute()
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_merge(rows, source.cast(SCHEMA), spec))


def test_merge_with_other_aliases(memory_uri):
    rows = make_table(memory_uri, partitioned=False)
    spec = MERGES["upsert"]
    Table(memory_uri).merge(SOURCE, "t.id = s.id", source_alias="s", target_alias="t") \
        .when_matched_update({"v": "s.v"}).when_not_matched_insert_all().execute()
    expected = duckdb_merge(rows, SOURCE, MergeSpec("target.id = source.id", (
        ClauseSpec("matched", "update", None, (("v", "source.v"),)), spec.clauses[1])))
    assert rows_of(table_rows(memory_uri)) == rows_of(expected)


def test_an_insert_only_merge_rewrites_nothing(memory_uri):
    make_table(memory_uri, partitioned=True)
    result = MERGES["insert-only"].apply(Table(memory_uri).merge(SOURCE, MERGES["insert-only"].predicate)).execute()
    commit = last_commit(memory_uri)
    assert not any(isinstance(a, RemoveFile) for a in commit)
    assert result.metrics["numTargetFilesRemoved"] == "0" and result.metrics["numTargetRowsInserted"] == "3"


def test_a_merge_reads_only_files_that_can_hold_a_matching_key(memory_uri, monkeypatch):
    make_table(memory_uri, partitioned=False)  # files hold ids [0,3], [4,6]+null, [7,9], [10,11]
    reads = data_reads(monkeypatch, memory_uri)
    source = pa.table({"id": pa.array([8, 20], pa.int64()), "p": ["a", "a"], "v": [1.0, 2.0], "s": ["x", "y"]})
    result = Table(memory_uri).merge(source, "target.id = source.id").when_matched_update_all() \
        .when_not_matched_insert_all().execute()
    assert len(reads) == 1 and result.metrics["numFilesAfterSkipping"] == "1"
    assert result.metrics["numTargetFilesRemoved"] == "1" and result.metrics["numTargetRowsUpdated"] == "1"


def test_a_target_row_matched_by_two_source_rows_is_an_error_unless_the_merge_only_deletes(memory_uri):
    make_table(memory_uri, partitioned=False)
    twice = pa.table({"id": pa.array([1, 1], pa.int64()), "p": ["a", "a"], "v": [1.0, 2.0], "s": ["x", "y"]})
    for build in (lambda m: m.when_matched_update_all(), lambda m: m.when_matched_delete("source.v > 1"),
                  lambda m: m.when_matched_delete("source.v > 1").when_matched_delete()):
        with pytest.raises(MergeCardinalityError, match="1 target row"):
            build(Table(memory_uri).merge(twice, "target.id = source.id")).execute()
    assert Table(memory_uri).version == 3
    result = Table(memory_uri).merge(twice, "target.id = source.id").when_matched_delete() \
        .when_not_matched_by_source_update({"v": "0"}, "target.id = 0").execute()
    assert 1 not in table_rows(memory_uri)["id"].to_pylist() and result.metrics["numTargetRowsDeleted"] == "1"
    inserted = Table(memory_uri).merge(twice, "target.id = source.id").when_not_matched_insert_all().execute()
    assert inserted.metrics["numTargetRowsInserted"] == "2"


@pytest.mark.parametrize("build, error, match", [
    (lambda m: m, InvalidArgumentError, "no WHEN clause"),
    (lambda m: m.when_matched_delete().when_matched_update_all(), InvalidArgumentError, "only the last"),
    (lambda m: m.when_matched_update({"nope": "1"}), InvalidArgumentError, "'nope'"),
    (lambda m: m.when_not_matched_insert({"v": "target.v"}), InvalidArgumentError, "not valid SQL"),
    (lambda m: m.when_not_matched_by_source_update({"v": "source.v"}), InvalidArgumentError, "not valid SQL"),
    (lambda m: m.when_matched_update({"v": "id"}), InvalidArgumentError, "ambiguous|not valid"),
    (lambda m: m.when_matched_update_all(except_cols=["zz"]), InvalidArgumentError, "except_cols"),
])
def test_bad_merges_are_refused_before_anything_is_written(memory_uri, build, error, match):
    make_table(memory_uri, partitioned=False)
    with pytest.raises(error, match=match):
        build(Table(memory_uri).merge(SOURCE, "target.id = source.id")).execute()
    assert Table(memory_uri).version == 3


def test_update_all_needs_every_column_in_the_source_unless_the_schema_merges(memory_uri):
    make_table(memory_uri, partitioned=False)
    narrow = pa.table({"id": pa.array([1, 99], pa.int64()), "v": [-1.0, -99.0]})
    with pytest.raises(InvalidArgumentError, match=r"lacks \['p', 's'\]"):
        Table(memory_uri).merge(narrow, "target.id = source.id").when_matched_update_all().execute()
    Table(memory_uri).merge(narrow, "target.id = source.id", merge_schema=True).when_matched_update_all() \
        .when_not_matched_insert_all().execute()
    got = {r["id"]: r for r in table_rows(memory_uri).to_pylist()}
    assert got[1] == {"id": 1, "p": "a", "v": -1.0, "s": "s1"}      # unchanged where the source has no column
    assert got[99] == {"id": 99, "p": None, "v": -99.0, "s": None}  # null on insert


def test_merge_schema_adds_the_source_columns(memory_uri):
    make_table(memory_uri, partitioned=True)
    wider = SOURCE.append_column("note", pa.array(["a", "b", "c", "d", "e", "f"]))
    Table(memory_uri).merge(wider, "target.id = source.id", merge_schema=True).when_matched_update_all() \
        .when_not_matched_insert_all().execute()
    table = Table(memory_uri)
    assert table.schema.names == ["id", "p", "v", "s", "note"]
    notes = {r["id"]: r["note"] for r in table.to_pyarrow_table().to_pylist()}
    assert notes[2] == "a" and notes[13] == "e" and notes[0] is None
    assert table.history(1)[0].operation_parameters["mergeSchema"] == "true"


@pytest.mark.parametrize("source", [
    lambda t: t, lambda t: t.to_batches()[0], lambda t: pa.RecordBatchReader.from_batches(t.schema, t.to_batches()),
    lambda t: t.to_pandas(),
], ids=["table", "batch", "reader", "pandas"])
def test_merge_takes_any_arrow_source(memory_uri, source):
    rows = make_table(memory_uri, partitioned=False)
    spec = MERGES["upsert"]
    spec.apply(Table(memory_uri).merge(source(SOURCE), spec.predicate)).execute()
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_merge(rows, SOURCE, spec))


# --- change data ----------------------------------------------------------------------------------------


def change_rows(uri: str) -> list[tuple]:
    table = Table(uri)
    changes = [a for a in read_commit(table.log_store, table.version) if isinstance(a, Cdc)]
    assert changes and all(c.path.startswith("_change_data/") and not c.data_change for c in changes)
    read = [pq.read_table(pa.BufferReader(table.objects.get(table.uri.key(c.path)))) for c in changes]
    merged = pa.concat_tables(read, promote_options="default")
    return sorted(tuple(r.get(k) for k in ("_change_type", "id", "v", "s")) for r in merged.to_pylist())


def test_with_the_change_data_feed_a_delete_writes_the_deleted_rows(memory_uri):
    make_table(memory_uri, partitioned=False, **{"delta.enableChangeDataFeed": "true"})
    assert Table(memory_uri).snapshot.protocol.min_writer_version == 4
    Table(memory_uri).delete("id IN (1, 8)")
    assert change_rows(memory_uri) == [("delete", 1, 1.0, "s1"), ("delete", 8, 8.5, "s2")]


def test_with_the_change_data_feed_an_update_writes_pre_and_post_images(memory_uri):
    make_table(memory_uri, partitioned=True, **{"delta.enableChangeDataFeed": "true"})
    Table(memory_uri).update({"v": "v + 1"}, predicate="id = 2")
    assert change_rows(memory_uri) == [("update_postimage", 2, 3.0, "s2"), ("update_preimage", 2, 2.0, "s2")]


def test_with_the_change_data_feed_a_merge_writes_every_kind_of_change(memory_uri):
    make_table(memory_uri, partitioned=False, **{"delta.enableChangeDataFeed": "true"})
    source = pa.table({"id": pa.array([1, 2, 50], pa.int64()), "p": ["a", "a", "z"], "v": [-1.0, -2.0, -50.0],
                       "s": ["x", "y", "z"]})
    Table(memory_uri).merge(source, "target.id = source.id").when_matched_delete("source.id = 1") \
        .when_matched_update({"v": "source.v"}).when_not_matched_insert_all().execute()
    assert change_rows(memory_uri) == [("delete", 1, 1.0, "s1"), ("insert", 50, -50.0, "z"),
                                       ("update_postimage", 2, -2.0, "s2"), ("update_preimage", 2, 2.0, "s2")]


def test_whole_file_deletes_and_insert_only_merges_write_no_change_data(memory_uri):
    make_table(memory_uri, partitioned=True, **{"delta.enableChangeDataFeed": "true"})
    Table(memory_uri).delete("p = 'b'")
    MERGES["insert-only"].apply(Table(memory_uri).merge(SOURCE, MERGES["insert-only"].predicate)).execute()
    table = Table(memory_uri)
    for version in (table.version - 1, table.version):
        assert not any(isinstance(a, Cdc) for a in read_commit(table.log_store, version))


# --- random merges ---------------------------------------------------------------------------------------

_ids = st.one_of(st.none(), st.integers(0, 9))
_values = st.one_of(st.none(), st.integers(-3, 3).map(float))
_row = st.tuples(_ids, st.sampled_from(["a", "b"]), _values)
_MATCHED = [ClauseSpec("matched", "update"), ClauseSpec("matched", "delete"),
            ClauseSpec("matched", "update", "source.v > target.v", (("v", "source.v - target.v"),)),
            ClauseSpec("matched", "delete", "target.v < 0"),
            ClauseSpec("matched", "update", "source.p = 'a'", (("s", "'upd'"), ("p", "source.p")))]
_NOT_MATCHED = [ClauseSpec("not_matched", "insert"), ClauseSpec("not_matched", "insert", "source.v IS NULL"),
                ClauseSpec("not_matched", "insert", "source.id > 4", (("id", "source.id"), ("v", "source.v * 10")))]
_BY_SOURCE = [ClauseSpec("not_matched_by_source", "delete", "target.v > 1"),
              ClauseSpec("not_matched_by_source", "update", None, (("v", "coalesce(target.v, 0) - 100"),)),
              ClauseSpec("not_matched_by_source", "delete")]


def _kind(pool):
    """An ordered list of clauses of one kind in which only the last may lack a condition."""
    return st.lists(st.sampled_from(pool), max_size=2, unique=True).map(
        lambda cs: sorted(cs, key=lambda c: c.condition is None)).filter(
        lambda cs: all(c.condition is not None for c in cs[:-1]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.lists(_row, max_size=12), source=st.lists(_row, max_size=6, unique_by=lambda r: r[0]),
       matched=_kind(_MATCHED), not_matched=_kind(_NOT_MATCHED), by_source=_kind(_BY_SOURCE),
       partitioned=st.booleans())
def test_random_merges_leave_the_rows_duckdb_leaves(target, source, matched, not_matched, by_source, partitioned):
    import uuid

    clauses = (*matched, *not_matched, *by_source)
    if not clauses or sum(r[0] is None for r in source) > 1:
        return
    uri = f"memory://rand-{uuid.uuid4().hex[:8]}/t"

    def arrow(rows):
        return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "p": pa.array([r[1] for r in rows]),
                         "v": pa.array([r[2] for r in rows], pa.float64()),
                         "s": pa.array([f"s{i}" for i in range(len(rows))])}, schema=SCHEMA)

    rows = arrow(target)
    half = len(target) // 2
    write_table(uri, rows.slice(0, half), partition_by=["p"] if partitioned else None)
    write_table(uri, rows.slice(half))
    spec = MergeSpec("target.id = source.id", clauses)
    spec.apply(Table(uri).merge(arrow(source), spec.predicate)).execute()
    assert rows_of(table_rows(uri)) == rows_of(duckdb_merge(rows, arrow(source), spec))


def test_vacuum_deletes_change_data_files_past_the_retention_and_keeps_the_log(memory_uri):
    from table.maintenance import vacuum

    make_table(memory_uri, partitioned=True, **{"delta.enableChangeDataFeed": "true"})
    Table(memory_uri).update({"v": "0"}, predicate="id = 2")
    table = Table(memory_uri)
    changes = [a.path for a in read_commit(table.log_store, table.version) if isinstance(a, Cdc)]
    assert changes and vacuum(table, dry_run=False).count == 0  # younger than the retention: kept
    done = vacuum(table, retention_hours=0, force=True, dry_run=False)
    removed = [a.path for a in read_commit(table.log_store, table.version) if isinstance(a, RemoveFile)]
    assert sorted(done.files) == sorted(changes + removed)
    assert table_rows(memory_uri).num_rows == 13 and len(table.history()) == table.version + 1


def test_row_level_changes_refuse_a_time_travelled_table_and_apply_to_the_newest_version(memory_uri):
    from table import ReadOnlySnapshotError

    make_table(memory_uri, partitioned=False)
    with pytest.raises(ReadOnlySnapshotError, match="pinned to version 1"):
        Table(memory_uri, version=1).delete("id = 1")
    stale = Table(memory_uri)
    write_table(memory_uri, batch([100], "a"))  # after the Table was opened
    stale.delete("id >= 100")
    assert 100 not in table_rows(memory_uri)["id"].to_pylist() and stale.version == 5


def log_listings(monkeypatch, uri: str) -> list[str]:
    """Record the listings of the table's log from now on."""
    objects = open_object_store(uri)
    seen: list[str] = []
    listing = objects.list

    def recording(prefix: str, **kwargs):
        if "/_delta_log/" in prefix:
            seen.append(prefix)
        return listing(prefix, **kwargs)

    monkeypatch.setattr(objects, "list", recording)
    return seen


def test_an_operation_on_an_unloaded_table_reads_the_log_once_where_an_opened_one_reads_it_twice(
        memory_uri, monkeypatch):
    make_table(memory_uri, partitioned=False)
    seen = log_listings(monkeypatch, memory_uri)
    Table(memory_uri).delete("id = 1")
    opened = len(seen)
    seen.clear()
    Table.unloaded(memory_uri).delete("id = 2")
    assert len(seen) == opened - 1
    assert sorted(r["id"] for r in table_rows(memory_uri).to_pylist() if r["id"] is not None) == \
        [0, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    with pytest.raises(TableNotFoundError, match="nothing to delete"):
        Table.unloaded(memory_uri + "-none").delete("id = 1")
