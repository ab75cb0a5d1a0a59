"""``format("dynacommit")`` batch writes and reads on the shared local[2,3] session, against the moto stack:
modes, partitioning, idempotent jobs, time travel, pushed-down filters, column subsets, what Spark 4.3
refuses, and failed tasks and jobs. The injected failures run inside the executors' Python workers;
this module is pickled by value so that the workers, which cannot import test modules, receive them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.errors import PySparkException

from logstore import TableUri, open_object_store
from spark_integration import register
from spark_integration.compat import FEATURES
from table.data.write import write_table
from table.table import Table

pytestmark = [pytest.mark.spark, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    register(spark)


def frame(spark, n: int = 90, *, start: int = 0, tag: str = "a", partitions: int = 2):
    return spark.range(start, start + n, 1, numPartitions=partitions).selectExpr(
        "id", "cast(id % 3 as int) as p", f"concat('{tag}', cast(id as string)) as s")


def ids(df) -> list[int]:
    return sorted(r.id for r in df.select("id").collect())


def uploads(uri: str, options: dict[str, str]) -> list:
    return open_object_store(uri, storage_options=options).list_uploads(TableUri.parse(uri).key(""))


@pytest.mark.spark_smoke
def test_append_and_overwrite_commit_one_entry_each_and_time_travel(spark, s3_uri, storage_options):
    read = spark.read.format("dynacommit").options(**storage_options)
    frame(spark).write.format("dynacommit").mode("append").options(**storage_options) \
        .option("partitionBy", "p").save(s3_uri)
    frame(spark, 30, start=90).write.format("dynacommit").mode("append").options(**storage_options) \
        .option("userMetadata", "backfill of 2026-11").save(s3_uri)
    frame(spark, 10, start=500).write.format("dynacommit").mode("overwrite").options(**storage_options).save(s3_uri)

    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 2 and table.partition_columns == ["p"]
    history = sorted(table.history(), key=lambda h: h.version)
    assert [h.operation_parameters["mode"] for h in history] == ["Append", "Append", "Overwrite"]
    assert history[0].operation_metrics["numTasks"] == "2"
    assert [h.user_metadata for h in history] == [None, "backfill of 2026-11", None]
    assert ids(read.load(s3_uri)) == list(range(500, 510))
    assert ids(read.option("versionAsOf", "1").load(s3_uri)) == list(range(120))
    assert ids(read.option("versionAsOf", "0").load(s3_uri)) == list(range(90))
    assert uploads(s3_uri, storage_options) == []


def test_dynamic_partition_overwrite_replaces_only_the_partitions_written(spark, s3_uri, storage_options):
    frame(spark).write.format("dynacommit").mode("append").options(**storage_options) \
        .option("partitionBy", "p").save(s3_uri)
    fix = spark.range(1000, 1010, 1, numPartitions=1).selectExpr("id", "1 as p", "'fix' as s")
    fix.write.format("dynacommit").mode("overwrite").options(**storage_options) \
        .option("partitionOverwriteMode", "dynamic").save(s3_uri)

    back = spark.read.format("dynacommit").options(**storage_options).load(s3_uri)
    assert ids(back.where("p = 1")) == list(range(1000, 1010))
    assert ids(back.where("p != 1")) == [i for i in range(90) if i % 3 != 1]
    latest = Table(s3_uri, storage_options=storage_options).history(limit=1)[0]
    assert latest.operation_parameters["partitionOverwriteMode"] == "DYNAMIC"


def test_a_job_with_the_same_txn_app_version_writes_nothing_again(spark, s3_uri, storage_options):
    def job(version: int, tag: str) -> None:
        frame(spark, 30, tag=tag).write.format("dynacommit").mode("append").options(**storage_options) \
            .option("txnAppId", "nightly").option("txnVersion", str(version)).save(s3_uri)

    job(7, "first")
    job(7, "rerun")
    job(6, "older")
    job(8, "next")
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 1
    assert table.snapshot.state.app_version("nightly") == 8
    assert {s.rstrip("0123456789") for s in table.to_pyarrow_table().column("s").to_pylist()} == {"first", "next"}
    assert uploads(s3_uri, storage_options) == []


def test_what_spark_refuses_for_a_python_data_source_writes_nothing(spark, s3_uri, storage_options):
    """Spark 4.3 itself refuses these for Python data sources, before the source is asked (the README's
    Spark section documents them and what to use instead)."""
    writer = frame(spark).write.format("dynacommit").options(**storage_options)
    for mode in ("error", "ignore"):
        with pytest.raises(PySparkException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            writer.mode(mode).save(s3_uri)
    with pytest.raises(PySparkException, match="partitioning or clustering columns do not match"):
        writer.mode("append").partitionBy("p").save(s3_uri)
    assert not Table.for_write(s3_uri, storage_options=storage_options).exists
    assert uploads(s3_uri, storage_options) == []


def test_sql_commands_and_catalog_names_do_not_reach_a_python_data_source(spark, s3_uri, storage_options):
    """What Spark offers only to data sources with a catalog or SQL extensions (the user guide lists each with
    the call to use instead): it refuses them itself, and the table is unchanged."""
    frame(spark, 4).write.format("dynacommit").mode("append").options(**storage_options).save(s3_uri)
    spark.read.format("dynacommit").options(**storage_options).load(s3_uri).createOrReplaceTempView("events")
    frame(spark, 2, tag="b").createOrReplaceTempView("updates")
    refused = {
        "MERGE INTO events USING updates ON events.id = updates.id WHEN MATCHED THEN UPDATE SET *": "does not support",
        "UPDATE events SET s = 'x'": "does not support",
        "DELETE FROM events WHERE id = 1": "does not support deletes",
        f"SELECT * FROM dynacommit.`{s3_uri}`": "UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY",
        "DESCRIBE HISTORY events": "HISTORY",
    }
    for sql, message in refused.items():
        with pytest.raises(PySparkException, match=message):
            spark.sql(sql).collect()
    with pytest.raises(PySparkException):
        frame(spark, 2).write.format("dynacommit").mode("append").options(**storage_options).saveAsTable("events_t")
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 0 and table.to_pyarrow_table().num_rows == 4


@pytest.mark.parametrize(("option", "value", "message"), [
    ("compresion", "zstd", "unknown option 'compresion' for a dynacommit batch write"),
    ("partitionBy", "nope", "partition column.*'nope'"),
])
def test_bad_options_fail_the_write_before_any_task_stages(spark, s3_uri, storage_options, option, value, message):
    with pytest.raises(PySparkException, match=message):
        frame(spark).write.format("dynacommit").mode("append").options(**storage_options) \
            .option(option, value).save(s3_uri)
    assert not Table.for_write(s3_uri, storage_options=storage_options).exists
    assert uploads(s3_uri, storage_options) == []


# --- reads ----------------------------------------------------------------------------------------


def delete_data_files(uri: str, options: dict[str, str], *, keep) -> int:
    """Delete, behind the log's back, every data file whose ``add`` ``keep`` rejects; a read that opened
    one would fail."""
    table = Table(uri, storage_options=options)
    gone = [f for f in table.add_actions() if not keep(f)]
    open_object_store(uri, storage_options=options).delete([table.uri.key(f.path) for f in gone])
    return len(gone)


@pytest.mark.skipif(not FEATURES.filter_pushdown, reason=f"pyspark {FEATURES.version} has no filter pushdown "
                    f"for Python data sources (4.1+): every file is read")
def test_pushed_filters_prune_files_the_read_never_opens(spark, s3_uri, storage_options):
    """Partition values and file statistics rule files out: the read never opens them (they are deleted
    here, and the unfiltered read that would open them fails)."""
    for commit in range(3):
        frame(spark, 30, start=commit * 30, partitions=1).write.format("dynacommit").mode("append") \
            .options(**storage_options).option("partitionBy", "p").save(s3_uri)
    read = spark.read.format("dynacommit").options(**storage_options)
    deleted = delete_data_files(s3_uri, storage_options,
                                keep=lambda f: f.partition_values["p"] == "1" and json.loads(f.stats)["minValues"]["id"] >= 30)
    assert deleted == 7  # 9 files (3 commits x 3 partitions) minus p=1 of commits 1 and 2

    assert ids(read.load(s3_uri).where("p = 1 and id >= 30")) == [i for i in range(30, 90) if i % 3 == 1]
    assert ids(read.load(s3_uri).where("p in (1) and s like 'a4%' and id > 40")) == [43, 46, 49]
    with pytest.raises(PySparkException, match="is gone"):
        read.load(s3_uri).collect()


PREDICATES = [
    "i = 2", "i != 2", "i > 1", "i <= 2", "i in (1, 4)", "i is null", "i is not null", "not (i <=> 2)",
    "i <=> null", "s like 'ap%'", "s like '%ana'", "s like '%ric%'", "s in ('apple', null)",
    "not (s in ('apple', null))", "f > 1.5", "f = double('NaN')", "d = date'1970-01-02'",
    "ts < timestamp'1970-01-01 00:00:02'", "b", "not b", "p = 'x' and i >= 1", "p <> 'x'",
]


@pytest.mark.spark_smoke
def test_pushed_filters_return_the_rows_spark_returns_when_it_filters_itself(spark, s3_uri, storage_options):
    data = pa.table({
        "i": pa.array([1, 2, None, 4, 5], pa.int64()), "s": ["apple", "apricot", None, "banana", "cherry"],
        "f": [1.0, float("nan"), None, 2.0, -1.0], "d": pa.array([0, 1, 2, None, 1], pa.int32()).cast(pa.date32()),
        "ts": pa.array([0, 10**6, None, 3 * 10**6, 5], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "b": [True, False, None, True, False], "p": ["x", "y", None, "x", "y"]})
    for row in range(data.num_rows):  # one file per row: statistics prune, and rows are filtered
        write_table(s3_uri, data.slice(row, 1), partition_by=["p"], storage_options=storage_options)
    table = spark.read.format("dynacommit").options(**storage_options).load(s3_uri)
    materialized = table.localCheckpoint()  # Spark filters these rows itself
    for predicate in PREDICATES:
        pushed = sorted(map(str, table.where(predicate).collect()))
        assert pushed == sorted(map(str, materialized.where(predicate).collect())), predicate


def test_a_given_schema_reads_only_its_columns(spark, s3_uri, storage_options):
    frame(spark).write.format("dynacommit").mode("append").options(**storage_options).save(s3_uri)
    some = spark.read.format("dynacommit").options(**storage_options).schema("s string, id bigint").load(s3_uri)
    assert some.columns == ["s", "id"]
    assert sorted(tuple(r) for r in some.where("id < 2").collect()) == [("a0", 0), ("a1", 1)]
    with pytest.raises(PySparkException, match="'id' is bigint in the table, int in the schema given"):
        spark.read.format("dynacommit").options(**storage_options).schema("id int").load(s3_uri).collect()


# --- failed tasks and jobs -------------------------------------------------------------------------


class FailAfterFirstBatch:
    """Upstream of the writer: yields the partition's first batch, then fails (task ``task_id``, on the
    attempts before ``succeed_from``), recording each failing attempt in ``marker_dir``."""

    def __init__(self, marker_dir: Path, *, task_id: int, succeed_from: int):
        self.marker_dir, self.task_id, self.succeed_from = str(marker_dir), task_id, succeed_from

    def __call__(self, batches):
        context = TaskContext.get()
        failing = context.partitionId() == self.task_id and context.attemptNumber() < self.succeed_from
        for n, batch in enumerate(batches):
            if failing and n == 1:
                Path(self.marker_dir, f"failed-{context.attemptNumber()}").touch()
                raise RuntimeError("injected failure after the first batch")
            yield batch


def failing_frame(spark, marker_dir: Path, *, succeed_from: int):
    df = spark.range(0, 4000, 1, numPartitions=2).selectExpr("id", "cast(id % 3 as int) as p", "'x' as s")
    return df.mapInArrow(FailAfterFirstBatch(marker_dir, task_id=1, succeed_from=succeed_from), df.schema)


@pytest.fixture
def small_batches(spark):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    yield
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_a_failed_task_is_retried_and_its_rows_land_once_with_no_upload_left(spark, s3_uri, storage_options,
                                                                              tmp_path, small_batches):
    failing_frame(spark, tmp_path, succeed_from=1).write.format("dynacommit").mode("append") \
        .options(**storage_options).option("partitionBy", "p").save(s3_uri)
    assert [p.name for p in tmp_path.iterdir()] == ["failed-0"]
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 0
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(4000))
    assert uploads(s3_uri, storage_options) == []


def test_a_failed_job_commits_nothing_and_aborts_every_upload(spark, s3_uri, storage_options, tmp_path, small_batches):
    frame(spark, 9).write.format("dynacommit").mode("append").options(**storage_options) \
        .option("partitionBy", "p").save(s3_uri)
    with pytest.raises(PySparkException, match="injected failure after the first batch"):
        failing_frame(spark, tmp_path, succeed_from=99).write.format("dynacommit").mode("append") \
            .options(**storage_options).save(s3_uri)
    assert len(list(tmp_path.iterdir())) == 3  # task 1 failed spark.task.maxFailures times; task 0 staged
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 0
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(9))
    assert uploads(s3_uri, storage_options) == []


def test_merge_schema_adds_the_data_columns_and_overwrite_schema_replaces_the_schema(spark, s3_uri, storage_options):
    write = lambda df: df.write.format("dynacommit").options(**storage_options)  # noqa: E731
    write(frame(spark, 10)).mode("append").option("partitionBy", "p").save(s3_uri)
    wider = frame(spark, 5, start=100).selectExpr("id", "cast(p as smallint) as p", "'x' as note")  # no s, narrower p
    with pytest.raises(PySparkException, match="SchemaMismatchError"):
        write(wider).mode("append").save(s3_uri)
    write(wider).mode("append").option("mergeSchema", "true").save(s3_uri)
    table = Table(s3_uri, storage_options=storage_options)
    assert table.schema.names == ["id", "p", "s", "note"] and table.partition_columns == ["p"]
    assert table.history(1)[0].operation_parameters["canMergeSchema"] == "true"
    rows = {r["id"]: (r["s"], r["note"]) for r in table.to_pyarrow_table().to_pylist()}
    assert rows[0] == ("a0", None) and rows[100] == (None, "x") and len(rows) == 15

    with pytest.raises(PySparkException, match="overwriteSchema .* needs .mode\\('overwrite'\\)"):
        write(frame(spark, 3)).mode("append").option("overwriteSchema", "true").save(s3_uri)
    replaced = spark.range(0, 4, 1, numPartitions=1).selectExpr("cast(id as string) as key", "id * 2 as doubled")
    write(replaced).mode("overwrite").option("overwriteSchema", "true").option("partitionBy", "key").save(s3_uri)
    table = Table(s3_uri, storage_options=storage_options)
    assert table.schema.names == ["key", "doubled"] and table.partition_columns == ["key"]
    assert sorted(r["doubled"] for r in table.to_pyarrow_table().to_pylist()) == [0, 2, 4, 6]
    assert table.history(1)[0].operation_parameters["canOverwriteSchema"] == "true"
    assert uploads(s3_uri, storage_options) == []


def test_the_compression_option_writes_the_codec_spark_names(spark, s3_uri, storage_options, tmp_path):
    """``option("compression", ...)`` and ``write_dataframe(compression=...)``: the executors write the codec
    and name it in the file as Spark does; DuckDB reads the codec from the footers, deltalake the rows."""
    import deltalake
    import duckdb

    from spark_integration.write import write_dataframe
    from tests.support.fault_harness import deltalake_options

    frame(spark).write.format("dynacommit").mode("append").options(**storage_options) \
        .option("compression", "ZSTD").save(s3_uri)
    write_dataframe(frame(spark, 30, start=90, tag="b"), s3_uri, storage_options=storage_options, compression="gzip")

    table = Table(s3_uri, storage_options=storage_options)
    objects = open_object_store(s3_uri, storage_options=storage_options)
    by_version = {h.version: h for h in table.history()}
    assert set(by_version) == {0, 1}
    codecs = {}
    for n, add in enumerate(table.add_actions()):
        local = tmp_path / f"{n}.parquet"
        local.write_bytes(objects.get(table.uri.key(add.path)))
        [(codec,)] = duckdb.sql(f"SELECT DISTINCT compression FROM parquet_metadata('{local}')").fetchall()
        codecs.setdefault(add.path.rsplit("-", 1)[-1], set()).add(codec)
    assert codecs == {"c000.zstd.parquet": {"ZSTD"}, "c000.gz.parquet": {"GZIP"}}
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options)).to_pyarrow_table()
    assert sorted(theirs.column("id").to_pylist()) == list(range(120))
    with pytest.raises(PySparkException, match="option compression: unknown compression 'zstandard'"):
        frame(spark).write.format("dynacommit").mode("append").options(**storage_options) \
            .option("compression", "zstandard").save(s3_uri)
    assert Table(s3_uri, storage_options=storage_options).version == 1


def test_spark_writes_follow_the_tables_codec(spark, s3_uri, storage_options):
    """A table created with ``delta.parquet.compression.codec`` (and ``delta.targetFileSize``): Spark appends
    without a ``compression`` option write the table's codec; the option still wins."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    first = frame(spark).toPandas()
    write_table(s3_uri, pa.Table.from_pandas(first, preserve_index=False).slice(0, 1),
                configuration={"delta.parquet.compression.codec": "zstd", "delta.targetFileSize": "64mb"},
                storage_options=storage_options)
    frame(spark, 30, start=90, tag="b").write.format("dynacommit").mode("append").options(**storage_options) \
        .save(s3_uri)
    frame(spark, 10, start=200, tag="c").write.format("dynacommit").mode("append").options(**storage_options) \
        .option("compression", "snappy").save(s3_uri)
    table = Table(s3_uri, storage_options=storage_options)
    objects = open_object_store(s3_uri, storage_options=storage_options)
    codecs = {}
    for add in table.add_actions():
        footer = pq.read_metadata(pa.BufferReader(objects.get(table.uri.key(add.path))))
        codecs.setdefault(add.path.rsplit(".", 2)[-2], set()).add(footer.row_group(0).column(0).compression)
    assert codecs == {"zstd": {"ZSTD"}, "snappy": {"SNAPPY"}}
    got = table.to_pyarrow_table()
    assert sorted(got.column("id").to_pylist()) == [0, *range(90, 120), *range(200, 210)]
    assert pc.count_distinct(got.column("id")).as_py() == got.num_rows
