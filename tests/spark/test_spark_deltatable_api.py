"""delta-spark's ``DeltaTable`` methods that fit a path-based table (issue 25, item 5): ``isDeltaTable``,
``detail`` (``DESCRIBE DETAIL``'s columns) and ``vacuum`` with delta-spark's retention check and its session
setting; type widening (``changeColumnType``, widening by ``mergeSchema`` and MERGE schema evolution) and
liquid clustering (``clusterBy``) from Spark. The expectations are the in-process ``Table``'s answers and the
table's files."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError
from spark_integration import DynacommitTable
from table import Table, write_table
from table.maintenance.vacuum import RETENTION_CHECK_CONF

pytestmark = [pytest.mark.spark]


def rows(start: int, n: int = 4) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "p": [f"v{i % 2}" for i in range(n)]})


def test_is_delta_table_and_detail(spark, s3_uri, storage_options):
    assert DynacommitTable.isDeltaTable(spark, s3_uri, storage_options=storage_options) is False
    write_table(s3_uri, rows(0), partition_by=["p"], storage_options=storage_options,
                configuration={"delta.appendOnly": "false"})
    write_table(s3_uri, rows(10), storage_options=storage_options)
    assert DynacommitTable.isDeltaTable(spark, s3_uri, storage_options=storage_options) is True
    table = Table(s3_uri, storage_options=storage_options)
    row = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options).detail().collect()
    assert len(row) == 1
    detail = row[0].asDict()
    adds = table.get_add_actions()
    assert detail["id"] == table.metadata().id and detail["format"] == "delta"
    assert detail["numFiles"] == adds.num_rows == 4
    assert detail["sizeInBytes"] == sum(adds["size_bytes"].to_pylist())
    assert detail["partitionColumns"] == ["p"] and detail["properties"] == {"delta.appendOnly": "false"}
    assert (detail["minReaderVersion"], detail["minWriterVersion"]) == (table.protocol().min_reader_version,
                                                                        table.protocol().min_writer_version)
    assert int(detail["lastModified"].timestamp() * 1000) == table.history(1)[0].timestamp


def test_vacuum_honours_delta_sparks_retention_check_setting(spark, s3_uri, storage_options):
    write_table(s3_uri, rows(0), storage_options=storage_options)
    write_table(s3_uri, rows(10), mode="overwrite", storage_options=storage_options)
    spark_table = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    with pytest.raises(InvalidArgumentError, match=RETENTION_CHECK_CONF):
        spark_table.vacuum(0)
    expected = sorted(Table(s3_uri, storage_options=storage_options).vacuum(0, enforce_retention_duration=False))
    assert len(expected) == 1
    spark.conf.set(RETENTION_CHECK_CONF, "false")
    try:
        deleted = sorted(r["path"] for r in spark_table.vacuum(0).collect())
    finally:
        spark.conf.unset(RETENTION_CHECK_CONF)
    assert deleted == expected
    assert Table(s3_uri, storage_options=storage_options).vacuum(0, enforce_retention_duration=False) == []
    assert sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist()) == \
        list(range(10, 14))


def test_restore_to_version_and_timestamp(spark, s3_uri, storage_options):
    write_table(s3_uri, rows(0), storage_options=storage_options)
    write_table(s3_uri, rows(10), storage_options=storage_options)
    spark_table = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    frame = spark_table.restoreToVersion(0)
    metrics = frame.collect()[0].asDict()
    assert frame.columns[:4] == ["table_size_after_restore", "num_of_files_after_restore", "num_removed_files",
                                 "num_restored_files"]
    assert (metrics["num_removed_files"], metrics["num_restored_files"], metrics["num_of_files_after_restore"]) \
        == (1, 0, 1)
    assert sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist()) == \
        sorted(Table(s3_uri, version=0, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist())
    moment = Table(s3_uri, storage_options=storage_options).history()[-2].timestamp  # version 1's commit
    import datetime as dt

    when = dt.datetime.fromtimestamp(moment / 1000, dt.timezone.utc)
    # the version time travel picks for that moment (by Delta's rules, from the commit files' times)
    expected = Table(s3_uri, timestamp=when, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist()
    spark_table.restoreToTimestamp(when.isoformat())
    assert sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist()) == \
        sorted(expected)


def test_a_spark_append_lacking_a_nullable_column_writes_nulls(spark, s3_uri, storage_options):
    from spark_integration import write_dataframe

    write_table(s3_uri, pa.table({"id": pa.array([1], pa.int64()), "note": ["x"], "p": ["v0"]}),
                storage_options=storage_options)
    write_dataframe(spark.createDataFrame([(2, "v1")], "id long, p string"), s3_uri, storage_options=storage_options)
    got = Table(s3_uri, storage_options=storage_options).to_pyarrow_table().sort_by("id").to_pylist()
    assert got == [{"id": 1, "note": "x", "p": "v0"}, {"id": 2, "note": None, "p": "v1"}]


@pytest.mark.parametrize("how", ["option", "write_dataframe"])
def test_a_table_created_from_spark_has_its_properties_from_version_0(spark, s3_uri, storage_options, how):
    """Change data feed on from the first commit: the feed holds version 0's rows (issue 25, item 5)."""
    from spark_integration import write_dataframe

    from spark_integration import register

    frame = spark.createDataFrame([(1, "a"), (2, "b")], "id long, p string")
    if how == "option":
        register(spark)
        writer = frame.write.format("dynacommit").mode("append").option("delta.enableChangeDataFeed", "true")
        for key, value in storage_options.items():
            writer = writer.option(key, value)
        writer.save(s3_uri)
    else:
        write_dataframe(frame, s3_uri, storage_options=storage_options,
                        configuration={"delta.enableChangeDataFeed": "true"})
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 0 and table.metadata().configuration == {"delta.enableChangeDataFeed": "true"}
    feed = table.load_cdf(0).read_all()
    assert sorted(feed["id"].to_pylist()) == [1, 2] and set(feed["_change_type"].to_pylist()) == {"insert"}


def test_clone_at_version_gives_a_table_of_that_version(spark, s3_uri, storage_options):
    write_table(s3_uri, rows(0), storage_options=storage_options)
    write_table(s3_uri, rows(10), storage_options=storage_options)
    spark_table = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    clone = spark_table.cloneAtVersion(0, s3_uri + "-clone")
    assert sorted(r.id for r in clone.toDF().collect()) == list(range(4))
    deep = spark_table.clone(s3_uri + "-deep", isShallow=False)  # the files copied, named relative to the clone
    assert sorted(r.id for r in deep.toDF().collect()) == list(range(4)) + list(range(10, 14))
    copied = Table(s3_uri + "-deep", storage_options=storage_options)
    assert copied.history(1)[0].operation_parameters["isShallow"] == "false"
    assert all("://" not in f.path for f in copied.add_actions())


def test_a_column_widened_from_spark_reads_old_files_in_the_new_type_and_merge_schema_widens(
        spark, s3_uri, storage_options):
    """Type widening (issue 25, item 2): ``changeColumnType`` is ``alter.change_column_type``; Spark reads the
    file written before it cast (the expectation: the values written, in the new type), and a ``mergeSchema``
    append widens float to double as Delta's automatic widening does."""
    from pyspark.sql.types import LongType

    from spark_integration import register

    write_table(s3_uri, pa.table({"c": pa.array([1, -(2**31)], pa.int32()), "f": pa.array([1.5, 2.5], pa.float32())}),
                storage_options=storage_options, configuration={"delta.enableTypeWidening": "true"})
    DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options).changeColumnType("c", LongType())
    register(spark)
    writer = spark.createDataFrame([(2**40, 0.1)], "c long, f double").write.format("dynacommit") \
        .mode("append").option("mergeSchema", "true")
    for key, value in storage_options.items():
        writer = writer.option(key, value)
    writer.save(s3_uri)
    table = Table(s3_uri, storage_options=storage_options)
    assert [(f.name, f.type) for f in table.schema] == [("c", pa.int64()), ("f", pa.float64())]
    frame = spark.read.format("dynacommit").options(**storage_options).load(s3_uri)
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [("c", "bigint"), ("f", "double")]
    assert sorted(tuple(r) for r in frame.collect()) == [(-(2**31), 2.5), (1, 1.5), (2**40, 0.1)]


def test_a_table_clustered_from_spark_is_clustered_by_executeCompaction_in_spark_tasks(
        spark, s3_uri, storage_options):
    """Liquid clustering (issue 25, item 4): the ``clusterBy`` option creates a clustered table; the Spark
    OPTIMIZE clusters the unclustered files (one clustering column: the file's rows come sorted by it) and
    tags them; ``clusterBy`` on DynacommitTable changes the columns."""
    import io

    import pyarrow.parquet as pq

    from spark_integration import register

    register(spark)
    for seed, values in enumerate(([5, -3, 9], [1, 7, -8])):
        writer = spark.createDataFrame([(v, f"n{v}") for v in values], "x long, name string") \
            .write.format("dynacommit").mode("append").option("clusterBy", "x")
        for key, value in storage_options.items():
            writer = writer.option(key, value)
        writer.save(s3_uri)
    dt = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    dt.optimize().executeCompaction()
    table = Table(s3_uri, storage_options=storage_options)
    (clustered,) = table.snapshot.files
    assert clustered.clustering_provider == "liquid"
    values = pq.read_table(io.BytesIO(table.objects.get(table.uri.key(clustered.path))))["x"].to_pylist()
    assert values == sorted([5, -3, 9, 1, 7, -8])
    dt.clusterBy("name")
    assert Table(s3_uri, storage_options=storage_options).detail()["clusteringColumns"] == ["name"]


def test_a_spark_merge_with_schema_evolution_widens_and_casts_the_rows_it_copies(spark, s3_uri, storage_options):
    """Type widening in MERGE (issue 25, item 2): a source wider than the target (long into integer) widens the
    column on a table with delta.enableTypeWidening, records the change, and the target rows the MERGE copies
    from old files are written in the new type."""
    write_table(s3_uri, pa.table({"id": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}),
                storage_options=storage_options, configuration={"delta.enableTypeWidening": "true"})
    source = spark.createDataFrame([(2, "B"), (2**40, "new")], "id long, v string")
    (DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options).alias("t")
     .merge(source.alias("s"), "t.id = s.id").whenMatchedUpdateAll().whenNotMatchedInsertAll()
     .withSchemaEvolution().execute())
    table = Table(s3_uri, storage_options=storage_options)
    assert table.schema.field("id").type == pa.int64()
    field = next(f for f in json.loads(table.metadata().schema_string)["fields"] if f["name"] == "id")
    assert field["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a"}, {"id": 2, "v": "B"}, {"id": 2**40, "v": "new"}]
