"""The Spark DML and the Python DML run the same plan: the same MERGE, UPDATE or DELETE on copies of one
table leaves the same rows, the same protocol and schema (column ids included) and the same kind of
actions; deltalake reads both tables alike.
"""

from __future__ import annotations

import datetime
import json
import sys

import deltalake
import pyarrow as pa
import pytest
from pyspark import cloudpickle

from spark_integration import DynacommitTable
from table import Table, write_table
from table.log.actions import AddFile, RemoveFile
from table.log.protocol import needed_features
from table.log.snapshot import read_commit

pytestmark = [pytest.mark.spark, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BASE = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "v": pa.array([1.0, 2.0, 3.0, 4.0])})
SEEN = [datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.datetime(2025, 6, 7, 8, 9, 10)]
WIDER = pa.table({"id": pa.array([2, 9], pa.int64()), "v": pa.array([-2.0, -9.0]),
                  "seen": pa.array(SEEN, pa.timestamp("us"))})
WIDER_DDL = "id long, v double, seen timestamp_ntz"


def deltalake_options(storage_options: dict[str, str]) -> dict[str, str]:
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def deltalake_rows(uri: str, options: dict[str, str]) -> list[dict]:
    """The table as deltalake's SQL engine reads it (its pyarrow reader refuses column mapping and deletion
    vectors; the SQL engine, delta-kernel underneath, reads both)."""
    table = deltalake.DeltaTable(uri, storage_options=deltalake_options(options))
    read = pa.RecordBatchReader.from_stream(
        deltalake.QueryBuilder().register("t", table).execute("SELECT * FROM t")).read_all()
    return sorted(read.to_pylist(), key=lambda r: r["id"])


def our_rows(uri: str, options: dict[str, str]) -> list[dict]:
    return sorted(Table(uri, storage_options=options).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def ids_of(schema_string: str) -> dict[str, int | None]:
    return {f["name"]: f["metadata"].get("delta.columnMapping.id") for f in json.loads(schema_string)["fields"]}


def copies(s3_uri: str, options: dict[str, str], **configuration) -> tuple[str, str]:
    """Two tables with the same rows and properties: one for the Spark DML, one for the Python DML."""
    spark_uri, python_uri = s3_uri, s3_uri + "-python"
    for uri in (spark_uri, python_uri):
        write_table(uri, BASE, storage_options=options, configuration=configuration or None)
    return spark_uri, python_uri


def evolve_both(spark, spark_uri: str, python_uri: str, options: dict[str, str]) -> None:
    source = spark.createDataFrame([tuple(r.values()) for r in WIDER.to_pylist()], WIDER_DDL).alias("s")
    DynacommitTable.forPath(spark, spark_uri, options).alias("t").merge(source, "t.id = s.id") \
        .withSchemaEvolution().whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    Table(python_uri, storage_options=options).merge(WIDER, "target.id = source.id", merge_schema=True) \
        .when_matched_update_all().when_not_matched_insert_all().execute()


def test_a_merge_adding_a_timestamp_ntz_column_upgrades_the_protocol_as_the_python_merge_does(
        spark, s3_uri, storage_options):
    spark_uri, python_uri = copies(s3_uri, storage_options)
    evolve_both(spark, spark_uri, python_uri, storage_options)
    ours, theirs = Table(spark_uri, storage_options=storage_options), Table(python_uri, storage_options=storage_options)
    reader, writer = needed_features(ours.snapshot.metadata.schema_string, ours.snapshot.metadata.configuration)
    assert "timestampNtz" in reader and "timestampNtz" in writer
    protocol = ours.snapshot.protocol
    assert protocol.min_reader_version == 3 and protocol.min_writer_version == 7
    assert "timestampNtz" in protocol.reader_features and "timestampNtz" in protocol.writer_features
    assert protocol == theirs.snapshot.protocol
    assert ours.snapshot.metadata.schema_string == theirs.snapshot.metadata.schema_string
    expected = [{"id": 1, "v": 1.0, "seen": None}, {"id": 2, "v": -2.0, "seen": SEEN[0]},
                {"id": 3, "v": 3.0, "seen": None}, {"id": 4, "v": 4.0, "seen": None},
                {"id": 9, "v": -9.0, "seen": SEEN[1]}]
    assert our_rows(spark_uri, storage_options) == our_rows(python_uri, storage_options) == expected
    assert deltalake_rows(spark_uri, storage_options) == deltalake_rows(python_uri, storage_options) == expected


def test_a_merge_evolving_a_column_mapped_table_assigns_column_ids_as_the_python_merge_does(
        spark, s3_uri, storage_options):
    spark_uri, python_uri = copies(s3_uri, storage_options, **{"delta.columnMapping.mode": "name"})
    evolve_both(spark, spark_uri, python_uri, storage_options)
    ours, theirs = Table(spark_uri, storage_options=storage_options), Table(python_uri, storage_options=storage_options)
    assert ids_of(ours.snapshot.metadata.schema_string) == ids_of(theirs.snapshot.metadata.schema_string) == \
        {"id": 1, "v": 2, "seen": 3}
    assert ours.snapshot.metadata.configuration["delta.columnMapping.maxColumnId"] == "3"
    assert ours.snapshot.protocol == theirs.snapshot.protocol
    assert "timestampNtz" in ours.snapshot.protocol.writer_features
    assert "columnMapping" in ours.snapshot.protocol.writer_features
    assert our_rows(spark_uri, storage_options) == our_rows(python_uri, storage_options)
    assert deltalake_rows(spark_uri, storage_options) == deltalake_rows(python_uri, storage_options) == \
        our_rows(python_uri, storage_options)


# --- deletion vectors -----------------------------------------------------------------------------------

DV = {"delta.enableDeletionVectors": "true"}
ROWS = pa.table({"id": pa.array(range(12), pa.int64()), "v": pa.array([float(i) for i in range(12)])})


def dv_copies(s3_uri: str, options: dict[str, str]) -> tuple[str, str]:
    """Two tables of three files each (ids 0-3, 4-7, 8-11), with deletion vectors on; a Python DELETE gave
    the first file a vector already, so later changes must add to it."""
    spark_uri, python_uri = s3_uri, s3_uri + "-python"
    for uri in (spark_uri, python_uri):
        for start in (0, 4, 8):
            write_table(uri, ROWS.slice(start, 4), storage_options=options, configuration=DV if start == 0 else None)
        Table(uri, storage_options=options).delete("id = 1")
    return spark_uri, python_uri


def last_actions(uri: str, options: dict[str, str]) -> list:
    table = Table(uri, storage_options=options)
    return read_commit(table.log_store, table.version)


def kinds(actions: list) -> dict[str, int]:
    """How a commit changed the table: files kept with a vector, files removed, new files."""
    vectored = sum(isinstance(a, AddFile) and a.deletion_vector is not None for a in actions)
    return {"vectored": vectored, "removed": sum(isinstance(a, RemoveFile) for a in actions),
            "added": sum(isinstance(a, AddFile) and a.deletion_vector is None for a in actions)}


def compare(spark_uri: str, python_uri: str, options: dict[str, str], expected: dict[str, int]) -> None:
    """The last commits of both tables changed them the same way (Spark may spread new rows over more
    files than the one Python writes) with the same metrics; both read alike, here and in deltalake."""
    ours, theirs = kinds(last_actions(spark_uri, options)), kinds(last_actions(python_uri, options))
    assert (ours["vectored"], ours["removed"]) == (theirs["vectored"], theirs["removed"]) == \
        (expected["vectored"], expected["removed"])
    assert (ours["added"] > 0) == (theirs["added"] > 0) == (expected["added"] > 0)
    ours, theirs = Table(spark_uri, storage_options=options), Table(python_uri, storage_options=options)
    assert ours.snapshot.protocol == theirs.snapshot.protocol
    ours_metrics, theirs_metrics = ours.history(1)[0].operation_metrics, theirs.history(1)[0].operation_metrics
    for key in ("numDeletedRows", "numUpdatedRows", "numCopiedRows", "numTargetRowsUpdated", "numTargetRowsDeleted",
                "numTargetRowsInserted", "numTargetRowsCopied"):
        assert ours_metrics.get(key) == theirs_metrics.get(key), key
    assert our_rows(spark_uri, options) == our_rows(python_uri, options)
    assert deltalake_rows(spark_uri, options) == deltalake_rows(python_uri, options) == our_rows(python_uri, options)


def test_with_deletion_vectors_a_spark_delete_marks_rows_deleted_as_the_python_delete_does(
        spark, s3_uri, storage_options):
    spark_uri, python_uri = dv_copies(s3_uri, storage_options)
    DynacommitTable.forPath(spark, spark_uri, storage_options).delete("id IN (2, 5, 8, 9, 10, 11)")
    Table(python_uri, storage_options=storage_options).delete("id IN (2, 5, 8, 9, 10, 11)")
    # the first two files keep their rows under a (new) vector; the third loses every row and goes
    compare(spark_uri, python_uri, storage_options, {"vectored": 2, "removed": 3, "added": 0})
    assert [r["id"] for r in our_rows(spark_uri, storage_options)] == [0, 3, 4, 6, 7]


def test_with_deletion_vectors_a_spark_update_and_merge_write_vectors_as_the_python_ones_do(
        spark, s3_uri, storage_options):
    spark_uri, python_uri = dv_copies(s3_uri, storage_options)
    DynacommitTable.forPath(spark, spark_uri, storage_options).update("id IN (3, 4)", {"v": "v * 10"})
    Table(python_uri, storage_options=storage_options).update({"v": "v * 10"}, predicate="id IN (3, 4)")
    compare(spark_uri, python_uri, storage_options, {"vectored": 2, "removed": 2, "added": 1})

    source = pa.table({"id": pa.array([0, 6, 20], pa.int64()), "v": pa.array([-1.0, -6.0, -20.0])})
    DynacommitTable.forPath(spark, spark_uri, storage_options).alias("target") \
        .merge(spark.createDataFrame(source).alias("source"), "target.id = source.id") \
        .whenMatchedDelete("source.id = 0").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    Table(python_uri, storage_options=storage_options).merge(source, "target.id = source.id") \
        .when_matched_delete("source.id = 0").when_matched_update_all().when_not_matched_insert_all().execute()
    compare(spark_uri, python_uri, storage_options, {"vectored": 2, "removed": 2, "added": 1})
    assert {r["id"]: r["v"] for r in our_rows(spark_uri, storage_options)} == {
        2: 2.0, 3: 30.0, 4: 40.0, 5: 5.0, 6: -6.0, 7: 7.0, 8: 8.0, 9: 9.0, 10: 10.0, 11: 11.0, 20: -20.0}


# --- the MERGE source and pruning ---------------------------------------------------------------------


def test_a_merge_computes_its_source_once(spark, s3_uri, storage_options):
    """The source's keys come from a Python UDF counting its calls: counting the source, the key range that
    prunes the target and the join all read the one persisted evaluation."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import LongType

    spark_uri, python_uri = copies(s3_uri, storage_options)
    calls = spark.sparkContext.accumulator(0)

    def key(value):
        calls.add(1)
        return value

    key_udf = F.udf(key, LongType()).asNondeterministic()
    source = spark.range(2, 8, 1, numPartitions=2).select(key_udf(F.col("id")).alias("id"),
                                                          (F.col("id") * -1.0).alias("v")).alias("s")
    result = DynacommitTable.forPath(spark, spark_uri, storage_options).alias("t").merge(source, "t.id = s.id") \
        .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    assert calls.value == 6, "each source row evaluated once"
    assert not source.is_cached, "the merge unpersists what it persisted"
    assert result.metrics["numSourceRows"] == "6"
    Table(python_uri, storage_options=storage_options).merge(
        pa.table({"id": pa.array(range(2, 8), pa.int64()), "v": [-float(i) for i in range(2, 8)]}),
        "target.id = source.id").when_matched_update_all().when_not_matched_insert_all().execute()
    assert our_rows(spark_uri, storage_options) == our_rows(python_uri, storage_options) == \
        deltalake_rows(spark_uri, storage_options)


def test_a_merge_reads_only_the_files_whose_statistics_overlap_the_source_keys(spark, s3_uri, storage_options):
    """Ten files of ten ids each (0-9, 10-19, ...): a source whose ids lie in 23..41 reads three files,
    whether pruned by the keys' set or (over 100 distinct keys) by their range, as the Python MERGE does."""
    spark_uri, python_uri = s3_uri, s3_uri + "-python"
    for uri in (spark_uri, python_uri):
        for start in range(0, 100, 10):
            write_table(uri, pa.table({"id": pa.array(range(start, start + 10), pa.int64()),
                                       "v": pa.array([float(i) for i in range(start, start + 10)])}),
                        storage_options=storage_options)
    few = pa.table({"id": pa.array([23, 35, 41], pa.int64()), "v": pa.array([-1.0, -2.0, -3.0])})
    spark_result = DynacommitTable.forPath(spark, spark_uri, storage_options).alias("t") \
        .merge(spark.createDataFrame(few).alias("s"), "t.id = s.id").whenMatchedUpdateAll().execute()
    python_result = Table(python_uri, storage_options=storage_options).merge(few, "target.id = source.id") \
        .when_matched_update_all().execute()
    for result in (spark_result, python_result):
        assert result.metrics["numFilesBeforeSkipping"] == "10" and result.metrics["numFilesAfterSkipping"] == "3"
    assert spark_result.metrics["numTargetRowsUpdated"] == "3"

    overlapping = sum(1 for f in Table(spark_uri, storage_options=storage_options).add_actions()
                      if json.loads(f.stats)["maxValues"]["id"] >= 23)  # and every minimum is <= 1149
    wide = spark.range(0, 150).selectExpr("cast(1000 + id AS long) AS id", "0.5 AS v") \
        .unionByName(spark.createDataFrame(few)).alias("s")  # 153 distinct keys: 23 .. 1149, pruned by range
    result = DynacommitTable.forPath(spark, spark_uri, storage_options).alias("t").merge(wide, "t.id = s.id") \
        .whenMatchedUpdate(set={"v": "s.v * 10"}).execute()
    assert result.metrics["numFilesAfterSkipping"] == str(overlapping) != result.metrics["numFilesBeforeSkipping"]
    assert result.metrics["numTargetRowsUpdated"] == "3"
    assert {r["id"]: r["v"] for r in our_rows(spark_uri, storage_options) if r["id"] in (23, 35, 41)} == \
        {23: -10.0, 35: -20.0, 41: -30.0}
    assert our_rows(spark_uri, storage_options) == deltalake_rows(spark_uri, storage_options)


def test_a_transformed_aliased_source_still_prunes_by_its_keys(spark, s3_uri, storage_options):
    """The alias stays visible to pruning when the aliased source is filtered, projected or given a new column
    afterwards (Spark still resolves ``s.id``): each MERGE reads only the files holding its source's keys, and
    leaves the rows the Python MERGE of the same source rows leaves."""
    from pyspark.sql import functions as F  # noqa: N812

    spark_uri, python_uri = s3_uri, s3_uri + "-python"
    for uri in (spark_uri, python_uri):
        for start in range(0, 100, 10):
            write_table(uri, pa.table({"id": pa.array(range(start, start + 10), pa.int64()),
                                       "v": pa.array([float(i) for i in range(start, start + 10)])}),
                        storage_options=storage_options)
    # ids 5 and 95 (files 0 and 9) are filtered out of each source: ids 23, 35 and 41 remain (files 2, 3, 4)
    rows = pa.table({"id": pa.array([5, 23, 35, 41, 95], pa.int64()), "v": pa.array([1.0, -1.0, -2.0, -3.0, 1.0])})
    kept = rows.take([1, 2, 3])
    frame = spark.createDataFrame(rows)
    sources = {
        "where": frame.alias("s").where("s.v < 0"),
        "where, select": frame.alias("s").where(F.col("s.v") < 0).select("s.id", "s.v", (F.col("s.v") * 2).alias("w")),
        "withColumn, orderBy": frame.alias("s").withColumn("w", F.lit(1)).where("s.v < 0").orderBy("s.id"),
    }
    for name, source in sources.items():
        files = Table(spark_uri, storage_options=storage_options).add_actions()
        overlapping = sum(1 for f in files if json.loads(f.stats)["maxValues"]["id"] >= 23
                          and json.loads(f.stats)["minValues"]["id"] <= 41)  # 3 before the first MERGE
        result = DynacommitTable.forPath(spark, spark_uri, storage_options).alias("t") \
            .merge(source, "t.id = s.id").whenMatchedUpdate(set={"v": "s.v"}).execute()
        assert (result.metrics["numFilesBeforeSkipping"], result.metrics["numFilesAfterSkipping"]) == \
            (str(len(files)), str(overlapping)), name
        assert overlapping <= 3, name
        assert result.metrics["numTargetRowsUpdated"] == "3", name
        Table(python_uri, storage_options=storage_options).merge(kept, "target.id = source.id") \
            .when_matched_update({"v": "source.v"}).execute()
        assert our_rows(spark_uri, storage_options) == our_rows(python_uri, storage_options), name
    assert our_rows(spark_uri, storage_options) == deltalake_rows(spark_uri, storage_options)


def test_the_source_alias_is_the_one_spark_resolves_the_sources_columns_by(spark):
    """The alias pruning uses: kept through steps that keep the aliased columns; none for a source whose
    columns carry two aliases (a join), or none; the outermost of two."""
    from pyspark.sql import functions as F  # noqa: N812

    from spark_integration.dml.common import source_alias

    frame = spark.range(3).selectExpr("id", "id * 2 AS v")
    assert source_alias(frame) is None
    assert source_alias(frame.alias("s")) == "s"
    assert source_alias(frame.alias("s").where("s.v > 0").select("s.id", F.lit(1).alias("w")).limit(2)) == "s"
    assert source_alias(frame.alias("a").alias("s").distinct()) == "s"
    joined = frame.alias("a").join(frame.alias("b"), F.col("a.id") == F.col("b.id"))
    assert source_alias(joined) is None
    assert source_alias(joined.select("a.id", "a.v")) == "a"


ROW_FIELDS = {"DELETE": ("num_deleted_rows", "num_copied_rows", "num_removed_files"),
              "UPDATE": ("num_updated_rows", "num_copied_rows", "num_removed_files"),
              "MERGE": ("num_source_rows", "num_target_rows_inserted", "num_target_rows_updated",
                        "num_target_rows_deleted", "num_target_rows_copied", "num_output_rows",
                        "num_target_files_removed")}
"""The typed fields both executors count the same way (Spark may write its new rows to more files, and
the times differ)."""


def test_spark_and_python_dml_return_the_same_typed_metrics(spark, s3_uri, storage_options):
    spark_uri, python_uri = copies(s3_uri, storage_options)
    spark_table, python_table = (DynacommitTable.forPath(spark, spark_uri, storage_options),
                                 Table(python_uri, storage_options=storage_options))
    source = pa.table({"id": pa.array([2, 9], pa.int64()), "v": pa.array([-2.0, -9.0])})
    results = {
        "DELETE": (spark_table.delete("id = 1"), python_table.delete("id = 1")),
        "UPDATE": (spark_table.update("id = 3", {"v": "v * 10"}), python_table.update({"v": "v * 10"},
                                                                                     predicate="id = 3")),
        "MERGE": (spark_table.alias("t").merge(spark.createDataFrame(source.to_pylist(), "id long, v double")
                                               .alias("s"), "t.id = s.id")
                  .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute(),
                  Table(python_uri, storage_options=storage_options).merge(source, "target.id = source.id")
                  .when_matched_update_all().when_not_matched_insert_all().execute()),
    }
    for operation, (ours, theirs) in results.items():
        assert type(ours.metrics) is type(theirs.metrics), operation
        assert type(ours.metrics).__name__ == operation.title() + "Metrics"
        for name in ROW_FIELDS[operation]:
            assert getattr(ours.metrics, name) == getattr(theirs.metrics, name) is not None, (operation, name)
    ids = set(BASE["id"].to_pylist()) - {1}  # after the DELETE
    keys = set(source["id"].to_pylist())
    assert results["DELETE"][0].metrics.num_deleted_rows == len(set(BASE["id"].to_pylist())) - len(ids)
    assert results["UPDATE"][0].metrics.num_updated_rows == len(ids & {3})
    merged = results["MERGE"][0].metrics
    assert (merged.num_target_rows_inserted, merged.num_target_rows_updated) == (len(keys - ids), len(keys & ids))
    assert our_rows(spark_uri, storage_options) == our_rows(python_uri, storage_options)
