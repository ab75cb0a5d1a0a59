"""DynacommitTable's DELETE, UPDATE and MERGE on the shared local[2,3] session, against the moto stack.

Every expectation is computed by DuckDB's own DELETE / UPDATE / MERGE INTO over the same input rows
(``tests/support/dml_reference.py``); the table is read back through a fresh ``Table`` (its log,
replayed). The conditions and values are written in SQL both engines read alike.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark import cloudpickle
from pyspark.sql.functions import udf

from logstore import TableUri, open_object_store
from spark_integration import DynacommitTable, read_dataframe, write_dataframe
from table import MergeCardinalityError, Table, write_table
from table.data.read import prune_files
from table.errors import SparkJobError
from table.log.actions import AddFile, Cdc, RemoveFile
from table.log.snapshot import read_commit
from table.engine import Engine
from table.operations.predicate import bind_predicate
from tests.spark.conftest import app_env
from tests.support.spark_hooks import spark_hooks
from tests.support.dml_reference import (
    ClauseSpec,
    MergeSpec,
    duckdb_count,
    duckdb_delete,
    duckdb_merge,
    duckdb_update,
    rows_of,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.float64()), ("s", pa.string())])


def batch(ids, p, start=0.0) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "p": pa.array([p] * len(ids), pa.string()),
        "v": pa.array([None if i is not None and i % 4 == 3 else start + (i or 0) for i in ids], pa.float64()),
        "s": pa.array([None if i is None else f"s{i % 3}" for i in ids], pa.string()),
    }, schema=SCHEMA)


def make_table(uri: str, options: dict[str, str], partitioned: bool, **configuration) -> pa.Table:
    """Four files (in three partitions, one of them null, when partitioned); returns every row written."""
    parts = [batch([0, 1, 2, 3], "a"), batch([4, 5, None, 6], "b"), batch([7, 8, 9], "a", 0.5), batch([10, 11], None)]
    for i, part in enumerate(parts):
        write_table(uri, part, partition_by=["p"] if partitioned else None, storage_options=options,
                    configuration=(configuration or None) if i == 0 else None)
    return pa.concat_tables(parts)


def deltars_options(storage_options: dict[str, str]) -> dict[str, str]:
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def table_rows(uri: str, options: dict[str, str]) -> pa.Table:
    return Table(uri, storage_options=options).to_pyarrow_table().select(SCHEMA.names).cast(SCHEMA)


def last_commit(uri: str, options: dict[str, str]) -> list:
    table = Table(uri, storage_options=options)
    return read_commit(table.log_store, table.version)


def pending_uploads(uri: str, options: dict[str, str]) -> list:
    return open_object_store(uri, storage_options=options).list_uploads(TableUri.parse(uri).key(""))


def data_keys(uri: str, options: dict[str, str]) -> set[str]:
    parsed = TableUri.parse(uri)
    objects = open_object_store(uri, storage_options=options)
    return {o.key for o in objects.list(parsed.key("")) if "/_delta_log/" not in "/" + parsed.relative(o.key)}


def ids_by_file(uri: str, options: dict[str, str]) -> dict[str, frozenset]:
    """The ids each live file of the table holds, read from the file itself."""
    table = Table(uri, storage_options=options)
    return {f.path: frozenset(pq.read_table(pa.BufferReader(table.objects.get(table.uri.key(f.path))))
                              .column("id").to_pylist()) for f in table.add_actions()}


def apply(spec: MergeSpec, builder):
    """The clauses of a MergeSpec (tests/support/dml_reference.py) on a DynacommitMergeBuilder."""
    for clause in spec.clauses:
        values = None if clause.assignments is None else dict(clause.assignments)
        if clause.kind == "matched" and clause.action == "update":
            builder = (builder.whenMatchedUpdateAll(clause.condition) if values is None
                       else builder.whenMatchedUpdate(clause.condition, set=values))
        elif clause.kind == "matched":
            builder = builder.whenMatchedDelete(clause.condition)
        elif clause.kind == "not_matched":
            builder = (builder.whenNotMatchedInsertAll(clause.condition) if values is None
                       else builder.whenNotMatchedInsert(clause.condition, values=values))
        elif clause.action == "update":
            builder = builder.whenNotMatchedBySourceUpdate(clause.condition, set=values)
        else:
            builder = builder.whenNotMatchedBySourceDelete(clause.condition)
    return builder


partitioning = pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])

SOURCE = pa.table({"id": pa.array([2, 5, 9, 12, 13, None], pa.int64()),
                   "p": pa.array(["a", "b", "a", "c", None, "a"]),
                   "v": pa.array([20.0, None, 90.0, 120.0, 130.0, 1.0]),
                   "s": pa.array(["n2", "n5", None, "n12", "n13", "nnull"])})

MERGES = {
    "every-kind": MergeSpec("target.id = source.id", (
        ClauseSpec("matched", "delete", "source.v > 50"),
        ClauseSpec("matched", "update", "target.v IS NOT NULL", (("v", "target.v + source.v"),)),
        ClauseSpec("matched", "update", None, (("s", "'nullv'"),)),
        ClauseSpec("not_matched", "insert", "source.v > 125", (("id", "source.id"), ("v", "source.v"))),
        ClauseSpec("not_matched", "insert", None, (("id", "-1 * source.id"), ("s", "source.s"), ("p", "source.p"))),
        ClauseSpec("not_matched_by_source", "delete", "target.p = 'a'"),
        ClauseSpec("not_matched_by_source", "update", None, (("v", "-1"),)),
    )),
    "upsert": MergeSpec("target.id = source.id", (ClauseSpec("matched", "update"),
                                                   ClauseSpec("not_matched", "insert"))),
    "insert-only": MergeSpec("target.id = source.id AND target.p = source.p", (ClauseSpec("not_matched", "insert"),)),
}


# --- DELETE and UPDATE ------------------------------------------------------------------------------------


@partitioning
@pytest.mark.spark_smoke
def test_deletes_leave_the_rows_duckdb_leaves(spark, s3_uri, storage_options, partitioned):
    rows = make_table(s3_uri, storage_options, partitioned)
    table = DynacommitTable.forPath(spark, s3_uri, storage_options)
    for condition in ["p IS NULL", "id > 8", "v IS NULL OR p = 'b'", "s = 's1' OR id IS NULL"]:
        result = table.delete(condition)
        expected = duckdb_delete(rows, condition)
        assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(expected), condition
        assert int(result.metrics["numDeletedRows"]) == rows.num_rows - expected.num_rows, condition
        rows = expected
    history = Table(s3_uri, storage_options=storage_options).history(1)[0]
    assert history.operation == "DELETE" and json.loads(history.operation_parameters["predicate"]) == [
        "s = 's1' OR id IS NULL"]
    assert pending_uploads(s3_uri, storage_options) == []


def test_a_delete_of_whole_partitions_removes_their_files_without_a_spark_job_over_their_rows(
        spark, s3_uri, storage_options):
    rows = make_table(s3_uri, storage_options, partitioned=True)
    before = {f.path: f for f in Table(s3_uri, storage_options=storage_options).add_actions()}
    result = DynacommitTable.forPath(spark, s3_uri, storage_options).delete("p = 'a' OR p IS NULL")
    actions = last_commit(s3_uri, storage_options)
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    assert removed == {p for p, f in before.items() if f.partition_values["p"] in ("a", None)}
    assert not [a for a in actions if isinstance(a, AddFile)]
    assert result.metrics["numDeletedRows"] == "9" and result.metrics["rewriteTimeMs"] == "0"
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(duckdb_delete(rows, "p = 'a' OR p IS NULL"))


@partitioning
def test_updates_leave_the_rows_duckdb_leaves(spark, s3_uri, storage_options, partitioned):
    rows = make_table(s3_uri, storage_options, partitioned)
    table = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t")
    steps = [("t.v > 5", {"v": "t.v * 2", "s": "concat(coalesce(t.s, 'none'), '!')"}),
             ("id IS NULL OR s = 's0'", {"p": "'moved'"}),   # a partition column: rows move
             (None, {"id": "coalesce(id, -1) + 100"})]
    for step, (condition, assignments) in enumerate(steps):
        # delta-spark's update, then its Scala updateExpr in both forms: the same UPDATE
        result = table.update(condition, assignments) if step == 0 else \
            table.updateExpr(condition, assignments) if condition is not None else table.updateExpr(assignments)
        duck = {c: e.replace("t.", "") for c, e in assignments.items()}
        expected = duckdb_update(rows, duck, None if condition is None else condition.replace("t.", ""))
        assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(expected), condition
        selected = None if condition is None else condition.replace("t.", "")
        assert result.metrics["numUpdatedRows"] == str(duckdb_count(rows, selected)), condition
        rows = expected
    assert Table(s3_uri, storage_options=storage_options).history(1)[0].operation == "UPDATE"


def test_an_update_value_that_does_not_fit_its_column_fails_and_commits_nothing(spark, s3_uri, storage_options):
    make_table(s3_uri, storage_options, partitioned=False)
    table = DynacommitTable.forPath(spark, s3_uri, storage_options)
    with pytest.raises(SparkJobError, match="nothing was committed"):
        table.update("id = 1", {"id": "'not a number'"})
    assert Table(s3_uri, storage_options=storage_options).version == 3
    assert pending_uploads(s3_uri, storage_options) == []


# --- MERGE ---------------------------------------------------------------------------------------------


@partitioning
@pytest.mark.parametrize("name", ["every-kind", pytest.param("upsert", marks=pytest.mark.spark_smoke), "insert-only"])
def test_merges_leave_the_rows_duckdb_leaves(spark, s3_uri, storage_options, partitioned, name):
    rows = make_table(s3_uri, storage_options, partitioned)
    spec = MERGES[name]
    target = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("target")
    result = apply(spec, target.merge(spark.createDataFrame(SOURCE).alias("source"), spec.predicate)).execute()
    expected = duckdb_merge(rows, SOURCE, spec)
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(expected)
    metrics = result.metrics
    assert metrics["numSourceRows"] == "6"
    changed = int(metrics["numTargetRowsUpdated"]) + int(metrics["numTargetRowsDeleted"])
    assert int(metrics["numTargetRowsInserted"]) + rows.num_rows - int(metrics["numTargetRowsDeleted"]) \
        == expected.num_rows
    if name == "insert-only":
        assert changed == 0 and metrics["numTargetFilesRemoved"] == "0"
    history = Table(s3_uri, storage_options=storage_options).history(1)[0]
    assert history.operation == "MERGE"
    assert json.loads(history.operation_parameters["predicate"]) == [spec.predicate]
    assert [c["actionType"] for c in json.loads(history.operation_parameters["notMatchedPredicates"])] == \
        ["insert"] * sum(c.kind == "not_matched" for c in spec.clauses)
    assert pending_uploads(s3_uri, storage_options) == []


def test_a_merge_joins_only_the_target_columns_its_expressions_name(spark, s3_uri, storage_options, monkeypatch):
    """The join carries the target columns the condition, the clauses' conditions and their values name (the
    rewrite tasks take the others from the files): found on a probe of the join, then the MERGE is built
    once, with those columns; the rows are DuckDB's."""
    from spark_integration.dml import job

    reads = []
    target_frame = job.target_frame

    def recorded(*args, columns=None, **kwargs):
        reads.append(None if columns is None else sorted(columns))
        return target_frame(*args, columns=columns, **kwargs)

    monkeypatch.setattr(job, "target_frame", recorded)
    rows = make_table(s3_uri, storage_options, partitioned=False)
    spec = MergeSpec("target.id = source.id", (
        ClauseSpec("matched", "update", "target.v IS NOT NULL", (("s", "source.s"),)),
        ClauseSpec("not_matched", "insert", None, (("id", "source.id"), ("v", "source.v"))),
    ))
    target = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("target")
    apply(spec, target.merge(spark.createDataFrame(SOURCE).alias("source"), spec.predicate)).execute()
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(duckdb_merge(rows, SOURCE, spec))
    # every column for the probe, then id and v (not p, nor s, which is assigned, never read) for the MERGE
    assert reads == [None, ["id", "v"]]


def test_a_merge_rewrites_only_the_files_holding_a_changed_row(spark, s3_uri, storage_options):
    rows = make_table(s3_uri, storage_options, partitioned=True)
    ids = ids_by_file(s3_uri, storage_options)
    source = spark.createDataFrame([(8, "a", 80.0, "eight"), (40, "b", 4.0, "new")], "id long, p string, v double, "
                                   "s string").alias("s")
    spec = MergeSpec("target.id = source.id", (ClauseSpec("matched", "update"), ClauseSpec("not_matched", "insert")))
    result = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t").merge(source, "t.id = s.id") \
        .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    removed = {a.path for a in last_commit(s3_uri, storage_options) if isinstance(a, RemoveFile)}
    assert removed == {p for p, held in ids.items() if 8 in held}
    assert ids_by_file(s3_uri, storage_options).items() >= {(p, held) for p, held in ids.items() if p not in removed}
    assert result.metrics["numTargetFilesRemoved"] == "1" and result.metrics["numTargetRowsCopied"] == "2"
    arrow_source = pa.table({"id": pa.array([8, 40], pa.int64()), "p": ["a", "b"], "v": [80.0, 4.0],
                             "s": ["eight", "new"]})
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(duckdb_merge(rows, arrow_source, spec))


def test_a_merge_on_two_keys_prunes_by_both_and_an_empty_source_changes_nothing(spark, s3_uri, storage_options):
    """The source's row count and both keys' ranges come from one aggregate over it; each key prunes."""
    rows = make_table(s3_uri, storage_options, partitioned=False)
    ids = ids_by_file(s3_uri, storage_options)
    source = spark.createDataFrame([(1, "a", 10.0, "s1"), (8, "b", 80.0, "s2"), (9, "c", 90.0, "no such s")],
                                   "id long, p string, v double, s string").alias("s")
    spec = MergeSpec("target.id = source.id AND target.s = source.s",
                     (ClauseSpec("matched", "update"), ClauseSpec("not_matched", "insert")))
    table = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t")
    result = table.merge(source, "t.id = s.id AND t.s = s.s").whenMatchedUpdateAll().whenNotMatchedInsertAll() \
        .execute()
    arrow_source = pa.table({"id": pa.array([1, 8, 9], pa.int64()), "p": ["a", "b", "c"], "v": [10.0, 80.0, 90.0],
                             "s": ["s1", "s2", "no such s"]})
    expected = duckdb_merge(rows, arrow_source, spec)
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(expected)
    removed = {a.path for a in last_commit(s3_uri, storage_options) if isinstance(a, RemoveFile)}
    assert removed == {p for p, held in ids.items() if held & {1, 8}}
    assert result.metrics["numSourceRows"] == "3" and result.metrics["numTargetRowsUpdated"] == "2"
    assert int(result.metrics["numFilesAfterSkipping"]) < len(ids), "the file of ids 10-11 is skipped"

    empty = source.where("id < 0").alias("s")
    result = table.merge(empty, "t.id = s.id AND t.s = s.s").whenMatchedUpdateAll().whenNotMatchedInsertAll() \
        .execute()
    assert result.metrics["numSourceRows"] == "0" and result.metrics["numFilesAfterSkipping"] == "0"
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(expected)


def _coin(_: int) -> float:
    """A draw no seed repeats: a Spark job that computes the source again draws other rows."""
    return random.SystemRandom().random()


def test_a_non_deterministic_source_is_computed_once_and_each_of_its_rows_merged_once(spark, s3_uri,
                                                                                       storage_options):
    ids = list(range(2000))
    for start in range(0, 2000, 500):
        write_table(s3_uri, pa.table({"id": pa.array(ids[start:start + 500], pa.int64()),
                                      "v": pa.array([0.0] * 500), "s": pa.array(["old"] * 500)}),
                    storage_options=storage_options)
    draw = udf(_coin, "double", useArrow=False).asNondeterministic()
    source = spark.range(0, 4000, 1, numPartitions=4).where(draw("id") < 0.5) \
        .selectExpr("id", "cast(id as double) / 10 as v", "'new' as s").alias("s")
    result = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t").merge(source, "t.id = s.id") \
        .whenMatchedUpdate(set={"v": "s.v", "s": "s.s"}).whenNotMatchedInsertAll().execute()

    rows = Table(s3_uri, storage_options=storage_options).to_pyarrow_table().to_pylist()
    merged = sorted(r["id"] for r in rows if r["s"] == "new")
    assert len({r["id"] for r in rows}) == len(rows), "no id twice"
    assert all(r["v"] == r["id"] / 10 for r in rows if r["s"] == "new")
    assert {r["id"] for r in rows if r["s"] == "old"} == set(ids) - set(merged)
    metrics = result.metrics
    assert int(metrics["numSourceRows"]) == len(merged), "the rows counted are the rows merged"
    assert int(metrics["numTargetRowsUpdated"]) == sum(1 for i in merged if i < 2000)
    assert int(metrics["numTargetRowsInserted"]) == sum(1 for i in merged if i >= 2000)


def test_a_target_row_matched_twice_fails_the_merge_unless_it_is_only_deleted(spark, s3_uri, storage_options):
    rows = make_table(s3_uri, storage_options, partitioned=False)
    twice = spark.createDataFrame([(1, 10.0), (1, 11.0), (4, 40.0)], "id long, v double").alias("s")
    table = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t")
    with pytest.raises(MergeCardinalityError, match="1 target row"):
        table.merge(twice, "t.id = s.id").whenMatchedUpdate(set={"v": "s.v"}).execute()
    assert Table(s3_uri, storage_options=storage_options).version == 3
    assert pending_uploads(s3_uri, storage_options) == []

    table.merge(twice, "t.id = s.id").whenMatchedDelete().execute()
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(duckdb_delete(rows, "id IN (1, 4)"))


def test_schema_evolution_adds_the_source_columns(spark, s3_uri, storage_options):
    make_table(s3_uri, storage_options, partitioned=True)
    wider = spark.createDataFrame([(2, "a", 2.5, "n2", "two"), (50, "z", 5.0, "n50", "fifty")],
                                  "id long, p string, v double, s string, note string").alias("s")
    DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t").merge(wider, "t.id = s.id") \
        .withSchemaEvolution().whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    table = Table(s3_uri, storage_options=storage_options)
    assert table.schema.names == ["id", "p", "v", "s", "note"]
    notes = {r["id"]: r["note"] for r in table.to_pyarrow_table().to_pylist()}
    assert notes[2] == "two" and notes[50] == "fifty" and notes[0] is None and len(notes) == 14
    assert table.history(1)[0].operation_parameters["mergeSchema"] == "true"


def test_with_the_change_data_feed_a_merge_writes_what_the_python_merge_writes(spark, s3_uri, storage_options):
    ours, theirs = s3_uri, s3_uri + "-python"
    for uri in (ours, theirs):
        make_table(uri, storage_options, partitioned=True, **{"delta.enableChangeDataFeed": "true"})
    source = pa.table({"id": pa.array([1, 2, 50], pa.int64()), "p": ["a", "a", "z"], "v": [-1.0, -2.0, -50.0],
                       "s": ["x", "y", "z"]})
    DynacommitTable.forPath(spark, ours, storage_options).alias("target") \
        .merge(spark.createDataFrame(source).alias("source"), "target.id = source.id") \
        .whenMatchedDelete("source.id = 1").whenMatchedUpdate(set={"v": "source.v"}).whenNotMatchedInsertAll() \
        .execute()
    Table(theirs, storage_options=storage_options).merge(source, "target.id = source.id") \
        .when_matched_delete("source.id = 1").when_matched_update({"v": "source.v"}).when_not_matched_insert_all() \
        .execute()
    assert change_rows(ours, storage_options) == change_rows(theirs, storage_options) == [
        ("delete", 1, 1.0, "s1"), ("insert", 50, -50.0, "z"), ("update_postimage", 2, -2.0, "s2"),
        ("update_preimage", 2, 2.0, "s2")]


def change_rows(uri: str, options: dict[str, str]) -> list[tuple]:
    table = Table(uri, storage_options=options)
    changes = [a for a in read_commit(table.log_store, table.version) if isinstance(a, Cdc)]
    assert changes and all(c.path.startswith("_change_data/") and not c.data_change for c in changes)
    read = [pq.read_table(pa.BufferReader(table.objects.get(table.uri.key(c.path)))) for c in changes]
    merged = pa.concat_tables(read, promote_options="default")
    return sorted(tuple(r.get(k) for k in ("_change_type", "id", "v", "s")) for r in merged.to_pylist())


# --- pruning -------------------------------------------------------------------------------------------


def test_conditions_spark_reads_otherwise_than_datafusion_prune_no_file_a_naive_translation_would(
        spark, s3_uri, storage_options):
    """Spark reads ``code = 5`` on a string column as ``cast(code as bigint) = 5``, so ``'05'`` matches; a
    translation casting the literal to the column's type (``code = '5'``) rules out the file holding '05'
    and '06' by its statistics. And DataFusion folds ``substr('0505', 0, 2)`` to ``'0'`` (Spark: ``'05'``),
    so the Python operations' own translation of that condition rules out every file."""
    schema = pa.schema([("id", pa.int64()), ("code", pa.string())])
    write_table(s3_uri, pa.table({"id": [1, 2], "code": ["05", "06"]}, schema=schema), storage_options=storage_options)
    write_table(s3_uri, pa.table({"id": [3, 4], "code": ["7", "8"]}, schema=schema), storage_options=storage_options)
    snapshot = Table(s3_uri, storage_options=storage_options).snapshot
    assert prune_files(snapshot, pc.field("code") == "5") == []
    folded = bind_predicate(Engine(), snapshot, "code = substr('0505', 0, 2)", what="the predicate").filter
    assert folded is not None and prune_files(snapshot, folded) == []

    table = DynacommitTable.forPath(spark, s3_uri, storage_options)
    result = table.delete("code = 5")
    assert result.metrics["numFilesAfterSkipping"] == "2" and result.metrics["numDeletedRows"] == "1"
    result = table.update("code = substr('0606', 0, 2)", {"code": "'six'"})
    assert result.metrics["numFilesAfterSkipping"] == "2" and result.metrics["numUpdatedRows"] == "1"
    assert sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table().to_pylist(),
                  key=lambda r: r["id"]) == [{"id": 2, "code": "six"}, {"id": 3, "code": "7"}, {"id": 4, "code": "8"}]


def test_conditions_both_engines_read_alike_prune_files_by_statistics_and_partition_values(spark, s3_uri,
                                                                                            storage_options):
    rows = make_table(s3_uri, storage_options, partitioned=True)
    table = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t")
    result = table.update("t.p = 'a' AND t.id BETWEEN 7 AND 8", {"s": "'hit'"})
    assert result.metrics["numFilesBeforeSkipping"] == "4" and result.metrics["numFilesAfterSkipping"] == "1"
    source = spark.createDataFrame([(10, None, 1.0, "x")], "id long, p string, v double, s string").alias("s")
    merged = table.merge(source, "t.id = s.id AND t.id > 9").whenMatchedUpdate(set={"s": "s.s"}).execute()
    assert merged.metrics["numFilesAfterSkipping"] == "1" and merged.metrics["numTargetRowsUpdated"] == "1"
    expected = duckdb_update(duckdb_update(rows, {"s": "'hit'"}, "p = 'a' AND id BETWEEN 7 AND 8"),
                             {"s": "'x'"}, "id = 10")
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(expected)


# --- failures ----------------------------------------------------------------------------------------------


class FailFirstAttempt:
    """Attempt 0 of rewrite task 0 fails after staging; it records its PendingSets first."""

    def __init__(self, marker_dir: Path):
        self.marker_dir = str(marker_dir)

    def __call__(self, task, pendingsets):
        first = pendingsets[0]
        if first.task_id == 0 and first.attempt_id == 0:
            staged = [p.model_dump_json() for p in pendingsets]
            Path(self.marker_dir, "failed-attempt.json").write_text(json.dumps(staged))
            raise RuntimeError("injected failure after staging")


class FailEveryAttempt:
    """Every attempt of every rewrite task fails after staging; each records that it staged something."""

    def __init__(self, marker_dir: Path):
        self.marker_dir = str(marker_dir)

    def __call__(self, task, pendingsets):
        first = pendingsets[0]
        Path(self.marker_dir, f"task-{first.task_id}-{first.attempt_id}.json").write_text(
            str(sum(len(p.files) for p in pendingsets)))
        raise RuntimeError("injected failure of a rewrite task")


def test_a_rewrite_task_failing_after_staging_is_retried_and_the_merge_lands_once(spark, s3_uri, storage_options,
                                                                                  tmp_path):
    rows = make_table(s3_uri, storage_options, partitioned=True)
    spec = MERGES["every-kind"]
    builder = apply(spec, DynacommitTable.forPath(spark, s3_uri, storage_options).alias("target")
                    .merge(spark.createDataFrame(SOURCE).alias("source"), spec.predicate))
    with spark_hooks(task=FailFirstAttempt(tmp_path)):
        builder.execute()
    staged = json.loads((tmp_path / "failed-attempt.json").read_text())
    assert any(json.loads(p)["files"] for p in staged), "the failed attempt had staged uploads"
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(duckdb_merge(rows, SOURCE, spec))
    assert pending_uploads(s3_uri, storage_options) == []


def test_a_merge_whose_tasks_keep_failing_leaves_nothing_visible_or_pending(spark, s3_uri, storage_options, tmp_path):
    make_table(s3_uri, storage_options, partitioned=True)
    keys = data_keys(s3_uri, storage_options)
    spec = MERGES["every-kind"]
    builder = apply(spec, DynacommitTable.forPath(spark, s3_uri, storage_options).alias("target")
                    .merge(spark.createDataFrame(SOURCE).alias("source"), spec.predicate))
    with pytest.raises(SparkJobError, match="injected failure of a rewrite task") as failed:
        with spark_hooks(task=FailEveryAttempt(tmp_path)):
            builder.execute()
    assert "nothing was committed" in str(failed.value)
    assert any(int(p.read_text()) for p in tmp_path.glob("task-*.json")), "some attempt staged uploads"
    assert Table(s3_uri, storage_options=storage_options).version == 3
    assert data_keys(s3_uri, storage_options) == keys
    assert pending_uploads(s3_uri, storage_options) == []


# --- the facade ----------------------------------------------------------------------------------------


def test_to_df_and_history_read_like_delta_spark(spark, s3_uri, storage_options):
    rows = make_table(s3_uri, storage_options, partitioned=False)
    table = DynacommitTable.forPath(spark, s3_uri, storage_options)
    table.delete("id = 0")
    assert sorted(r.id for r in table.alias("x").toDF().where("x.id < 3").collect()) == [1, 2]
    history = table.history()
    assert history.columns[:6] == ["version", "timestamp", "userId", "userName", "operation", "operationParameters"]
    newest = history.first()
    assert newest.version == 4 and newest.operation == "DELETE" and newest.readVersion == 3
    assert newest.operationParameters["predicate"] == '["id = 0"]'
    assert newest.operationMetrics["numDeletedRows"] == "1" and newest.isolationLevel == "WriteSerializable"
    assert [r.version for r in table.history(2).collect()] == [4, 3]
    assert rows.num_rows == 13


def test_bad_arguments_are_refused_before_any_job(spark, s3_uri, storage_options):
    make_table(s3_uri, storage_options, partitioned=False)
    table = DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t")
    source = spark.createDataFrame(SOURCE).alias("s")
    with pytest.raises(TypeError, match="Spark SQL expression string or a pyspark Column"):
        table.delete(5)
    with pytest.raises(ValueError, match="set is required"):
        table.update("id = 1")
    with pytest.raises(ValueError, match="names column 'nope'"):
        table.update("id = 1", {"nope": "1"})
    with pytest.raises(ValueError, match="only the last matched clause may omit its condition"):
        table.merge(source, "t.id = s.id").whenMatchedDelete().whenMatchedUpdateAll()
    with pytest.raises(ValueError, match="no WHEN clause"):
        table.merge(source, "t.id = s.id").execute()
    with pytest.raises(ValueError, match="lacks \\['s'\\]"):
        table.merge(source.drop("s"), "t.id = s.id").whenNotMatchedInsertAll().execute()
    assert Table(s3_uri, storage_options=storage_options).version == 3


# --- a driver crash ------------------------------------------------------------------------------------


def test_a_driver_killed_after_staging_a_merge_leaves_the_table_as_it_was_and_uploads_abort_clears_it(
        spark, s3_uri, storage_options, tmp_path):
    """The MERGE of tests/spark/spark_dml_app.py, its driver killed (SIGKILL) once every file is staged and
    before anything is completed: no version, no new object, only incomplete uploads, which
    ``dynacommit uploads abort`` removes. Then the same MERGE, run here, lands as DuckDB's."""
    ids = list(range(0, 200, 3))
    rows = pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([i % 4 for i in ids], pa.int32()),
                     "v": pa.array([float(i) for i in ids])})
    for part in (rows.slice(0, 30), rows.slice(30)):
        write_table(s3_uri, part, partition_by=["p"], storage_options=storage_options)
    keys = data_keys(s3_uri, storage_options)
    app = Path(__file__).with_name("spark_dml_app.py")
    proc = subprocess.run([sys.executable, str(app), "local[2]", s3_uri, "kill-after-staging"],
                          env=app_env(storage_options), cwd=str(app.parents[2]), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    assert '"event": "staged"' in proc.stdout

    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 1
    assert rows_of(table.to_pyarrow_table().select(["id", "p", "v"])) == rows_of(rows)
    assert data_keys(s3_uri, storage_options) == keys, "nothing was completed"
    assert pending_uploads(s3_uri, storage_options), "the killed job's staged uploads are left behind"
    flags = [f"--option={k}={v}" for k, v in storage_options.items()]
    aborted = subprocess.run([sys.executable, "-m", "table.cli", "uploads", "abort", s3_uri, "--older-than-hours", "0",
                              "--execute", *flags], env=app_env(storage_options), capture_output=True, text=True,
                             timeout=120, cwd=str(app.parents[2]))
    assert aborted.returncode == 0, aborted.stderr
    assert pending_uploads(s3_uri, storage_options) == []
    assert data_keys(s3_uri, storage_options) == keys

    source = pa.table({"id": pa.array(range(100), pa.int64()), "p": pa.array([i % 4 for i in range(100)], pa.int32()),
                       "v": pa.array([1000.0 + i for i in range(100)])})
    DynacommitTable.forPath(spark, s3_uri, storage_options).alias("t") \
        .merge(spark.createDataFrame(source).alias("s"), "t.id = s.id") \
        .whenMatchedUpdate(set={"v": "s.v"}).whenNotMatchedInsertAll().execute()
    spec = MergeSpec("target.id = source.id", (ClauseSpec("matched", "update", None, (("v", "source.v"),)),
                                                ClauseSpec("not_matched", "insert")))
    assert rows_of(Table(s3_uri, storage_options=storage_options).to_pyarrow_table().select(["id", "p", "v"])) == \
        rows_of(duckdb_merge(rows, source, spec))


def test_conditions_and_values_may_be_columns(spark, s3_uri, storage_options):
    from pyspark.sql import functions as F

    rows = make_table(s3_uri, storage_options, partitioned=True)
    table = DynacommitTable.forPath(spark, s3_uri, storage_options)
    table.delete(F.col("id") > 9)
    table.update(F.col("s") == "s1", {"v": F.col("v") * 10, "s": F.lit("ten")})
    source = spark.createDataFrame(SOURCE).alias("source")
    table.alias("target").merge(source, F.expr("target.id = source.id")) \
        .whenMatchedUpdate(F.col("source.v") > 50, {"v": F.col("source.v")}) \
        .whenNotMatchedInsert(values={"id": F.col("source.id"), "p": F.lit("new")}).execute()
    expected = duckdb_update(duckdb_delete(rows, "id > 9"), {"v": "v * 10", "s": "'ten'"}, "s = 's1'")
    spec = MergeSpec("target.id = source.id", (
        ClauseSpec("matched", "update", "source.v > 50", (("v", "source.v"),)),
        ClauseSpec("not_matched", "insert", None, (("id", "source.id"), ("p", "'new'")))))
    assert rows_of(table_rows(s3_uri, storage_options)) == rows_of(duckdb_merge(expected, SOURCE, spec))
    history = Table(s3_uri, storage_options=storage_options).history(3)
    assert [h.operation for h in history] == ["MERGE", "UPDATE", "DELETE"]
    [recorded] = json.loads(history[2].operation_parameters["predicate"])  # Spark's rendering of the Column
    assert "id" in recorded and "9" in recorded


def test_spark_changes_on_a_column_mapped_table_with_deletion_vectors(spark, s3_uri, storage_options):
    """A table whose files hold physical column names (a renamed column) and rows deleted by deletion
    vectors (a Python DELETE, merge-on-read): Spark reads its logical rows, appends under its physical
    names, and a MERGE marks the rows it changes deleted in the files' vectors, as the same Python MERGE
    does on a copy of the table; deltalake reads both alike."""
    python_uri = s3_uri + "-python"
    for uri in (s3_uri, python_uri):
        rows = make_table(uri, storage_options, partitioned=True, **{"delta.columnMapping.mode": "name",
                                                                     "delta.enableDeletionVectors": "true"})
        table = Table(uri, storage_options=storage_options)
        table.alter.rename_column("v", "value")
        table.delete("id IN (1, 8)")
    assert any(f.deletion_vector is not None for f in Table(s3_uri, storage_options=storage_options).add_actions())
    rows = duckdb_delete(rows, "id IN (1, 8)").rename_columns(["id", "p", "value", "s"])

    read = lambda uri=s3_uri: Table(uri, storage_options=storage_options).to_pyarrow_table().select(  # noqa: E731
        ["id", "p", "value", "s"])
    assert rows_of(pa.Table.from_pylist([r.asDict() for r in DynacommitTable.forPath(
        spark, s3_uri, storage_options).toDF().collect()]).select(["id", "p", "value", "s"]).cast(read().schema)) == \
        rows_of(read())
    extra = pa.table({"id": pa.array([20], pa.int64()), "p": ["a"], "value": [2.0], "s": ["x"]})
    write_dataframe(spark.createDataFrame(extra), s3_uri, storage_options=storage_options)
    write_table(python_uri, extra, storage_options=storage_options)
    rows = pa.concat_tables([rows, extra.cast(rows.schema)])
    assert rows_of(read()) == rows_of(rows)

    source = pa.table({"id": pa.array([2, 9, 30], pa.int64()), "p": ["a", "a", "b"], "value": [-2.0, -9.0, -30.0],
                       "s": ["two", "nine", "thirty"]})
    DynacommitTable.forPath(spark, s3_uri, storage_options).alias("target") \
        .merge(spark.createDataFrame(source).alias("source"), "target.id = source.id") \
        .whenMatchedUpdate(set={"value": "source.value"}).whenNotMatchedInsertAll().execute()
    Table(python_uri, storage_options=storage_options).merge(source, "target.id = source.id") \
        .when_matched_update({"value": "source.value"}).when_not_matched_insert_all().execute()
    spec = MergeSpec("target.id = source.id", (ClauseSpec("matched", "update", None, (("value", "source.value"),)),
                                                ClauseSpec("not_matched", "insert")))
    assert rows_of(read()) == rows_of(read(python_uri)) == rows_of(duckdb_merge(rows, source, spec))
    for uri in (s3_uri, python_uri):
        actions = last_commit(uri, storage_options)
        removed = [a for a in actions if isinstance(a, RemoveFile)]
        vectored = [a for a in actions if isinstance(a, AddFile) and a.deletion_vector is not None]
        assert len(removed) == 2, "the files holding ids 2 and 9: every other file is left as it is"
        assert sorted(a.path for a in vectored) == sorted(a.path for a in removed), \
            "each file keeps its other rows, the changed ones marked deleted in its vector (merge-on-read)"
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltars_options(storage_options))
    read_by_deltalake = pa.RecordBatchReader.from_stream(
        deltalake.QueryBuilder().register("t", theirs).execute("SELECT id, p, value, s FROM t")).read_all()
    assert rows_of(read_by_deltalake.cast(read().schema)) == rows_of(read())


def test_spark_reads_a_table_with_deletion_vectors_streaming_them_batch_by_batch(spark, s3_uri, storage_options):
    """Spark's read tasks apply the vectors per batch (no column mapping): with and without a pushed
    filter, the rows are DuckDB's DELETE of the same rows."""
    rows = make_table(s3_uri, storage_options, partitioned=True, **{"delta.enableDeletionVectors": "true"})
    Table(s3_uri, storage_options=storage_options).delete("id IN (1, 5, 8, 11)")
    assert all(f.deletion_vector is not None for f in Table(s3_uri, storage_options=storage_options).add_actions())
    expected = duckdb_delete(rows, "id IN (1, 5, 8, 11)")
    frame = read_dataframe(spark, s3_uri, storage_options=storage_options)
    got = pa.Table.from_pylist([r.asDict() for r in frame.collect()]).select(expected.column_names)
    assert rows_of(got.cast(expected.schema)) == rows_of(expected)
    filtered = [r.asDict() for r in frame.filter("id > 3").select("id").collect()]
    assert sorted(r["id"] for r in filtered) == sorted(i for i in expected["id"].to_pylist() if i is not None and i > 3)
