"""write_dataframe / read_dataframe on the shared local[2,3] session against the moto stack."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

import pyarrow as pa
import pytest

from logstore import TableUri, open_object_store
from spark_integration import read_dataframe, write_dataframe
from table.errors import SchemaMismatchError, TableExistsError
from table.table import Table

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def frame(spark, n: int = 300, *, start: int = 0, partitions: int = 2):
    return spark.range(start, start + n, 1, numPartitions=partitions).selectExpr(
        "id", "cast(id % 3 as int) as p", "concat('v', cast(id as string)) as s",
        "timestamp_seconds(id) as ts", "date_add(date'2024-01-01', cast(id % 2 as int)) as d",
    )


def rows_of(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def pending_uploads(uri: str, options: dict[str, str]) -> list:
    return open_object_store(uri, storage_options=options).list_uploads(TableUri.parse(uri).key(""))


def test_partitioned_write_reads_back_the_same_rows_in_deltalake_and_read_dataframe(spark, s3_uri, storage_options,
                                                                                      local_stack):
    deltalake = pytest.importorskip("deltalake")
    df = frame(spark)
    result = write_dataframe(df, s3_uri, partition_by=["p", "d"], storage_options=storage_options)
    assert result.version == 0
    assert result.metrics["numOutputRows"] == "300"
    assert result.metrics["numTasks"] == "2"

    back = read_dataframe(spark, s3_uri, storage_options=storage_options)
    assert back.columns == ["id", "p", "s", "ts", "d"]
    assert rows_of(back) == rows_of(df)

    peer = deltalake.DeltaTable(s3_uri, storage_options={
        "AWS_ENDPOINT_URL": local_stack.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
    })
    assert peer.version() == 0
    assert peer.metadata().partition_columns == ["p", "d"]
    theirs = peer.to_pyarrow_table().select(["id", "p", "s", "ts", "d"])
    # pyspark gives naive local datetimes, deltalake aware UTC ones: compare instants
    peer_rows = {(r["id"], r["p"], r["s"], r["ts"].timestamp(), r["d"]) for r in theirs.to_pylist()}
    assert len(peer_rows) == theirs.num_rows == 300
    assert peer_rows == {(r[0], r[1], r[2], r[3].timestamp(), r[4]) for r in rows_of(back)}
    assert pending_uploads(s3_uri, storage_options) == []


@pytest.mark.spark_smoke
def test_read_dataframe_matches_pyarrow_and_time_travels(spark, s3_uri, storage_options):
    write_dataframe(frame(spark, 100), s3_uri, partition_by=["p"], storage_options=storage_options)
    second = write_dataframe(frame(spark, 50, start=100), s3_uri, storage_options=storage_options,
                             user_metadata="late rows")
    assert second.version == 1
    assert Table(s3_uri, storage_options=storage_options).history(limit=1)[0].user_metadata == "late rows"

    latest = read_dataframe(spark, s3_uri, storage_options=storage_options)
    arrow = Table(s3_uri, storage_options=storage_options).to_pyarrow_table()
    assert latest.count() == arrow.num_rows == 150
    assert sorted(r.id for r in latest.select("id").collect()) == sorted(arrow.column("id").to_pylist())
    old = read_dataframe(spark, s3_uri, version=0, storage_options=storage_options)
    assert sorted(r.id for r in old.select("id").collect()) == list(range(100))


def test_timestamps_and_dates_round_trip_as_instants(spark, s3_uri, storage_options):
    write_dataframe(frame(spark, 10), s3_uri, partition_by=["d"], storage_options=storage_options)
    schema = Table(s3_uri, storage_options=storage_options).schema
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert schema.field("d").type == pa.date32()
    back = {r.id: r for r in read_dataframe(spark, s3_uri, storage_options=storage_options).collect()}
    assert back[7].d == dt.date(2024, 1, 2)
    assert back[7].ts.timestamp() == 7  # pyspark hands out naive local datetimes


def test_empty_table_reads_as_an_empty_dataframe_with_the_schema(spark, s3_uri, storage_options):
    empty = spark.createDataFrame([], "id bigint, name string, p int")
    result = write_dataframe(empty, s3_uri, partition_by=["p"], storage_options=storage_options)
    assert result.version == 0
    back = read_dataframe(spark, s3_uri, storage_options=storage_options)
    assert back.count() == 0
    assert [(f.name, f.dataType.simpleString()) for f in back.schema] == [("id", "bigint"), ("name", "string"),
                                                                          ("p", "int")]


def test_dynamic_partition_overwrite_replaces_only_written_partitions(spark, s3_uri, storage_options):
    write_dataframe(frame(spark, 90), s3_uri, partition_by=["p"], storage_options=storage_options)
    replacement = spark.range(1000, 1010, 1, numPartitions=1).selectExpr(
        "id", "1 as p", "'new' as s", "timestamp_seconds(id) as ts", "date'2024-01-01' as d")
    result = write_dataframe(replacement, s3_uri, mode="overwrite", partition_overwrite="dynamic",
                             storage_options=storage_options)
    assert result.version == 1
    back = read_dataframe(spark, s3_uri, storage_options=storage_options)
    by_partition = {p: sorted(r.id for r in back.where(f"p = {p}").collect()) for p in (0, 1, 2)}
    assert by_partition[1] == list(range(1000, 1010))
    assert by_partition[0] == [i for i in range(90) if i % 3 == 0]
    assert by_partition[2] == [i for i in range(90) if i % 3 == 2]


def test_same_app_version_twice_commits_once(spark, s3_uri, storage_options):
    df = frame(spark, 30)
    first = write_dataframe(df, s3_uri, storage_options=storage_options, app_id="nightly", app_version=7)
    again = write_dataframe(df, s3_uri, storage_options=storage_options, app_id="nightly", app_version=7)
    assert again.version == first.version == 0
    assert again.metrics.get("skipped") == "true"
    assert read_dataframe(spark, s3_uri, storage_options=storage_options).count() == 30
    assert pending_uploads(s3_uri, storage_options) == []


def test_modes_error_and_ignore_run_no_job_on_an_existing_table(spark, s3_uri, storage_options):
    write_dataframe(frame(spark, 10), s3_uri, storage_options=storage_options)
    with pytest.raises(TableExistsError):
        write_dataframe(frame(spark, 10), s3_uri, mode="error", storage_options=storage_options)
    ignored = write_dataframe(frame(spark, 10), s3_uri, mode="ignore", storage_options=storage_options)
    assert ignored.version == 0 and ignored.metrics == {"skipped": "true"}


def test_a_dataframe_that_does_not_fit_the_table_is_refused_before_any_task_runs(spark, s3_uri, storage_options):
    write_dataframe(frame(spark, 10), s3_uri, storage_options=storage_options)
    with pytest.raises(SchemaMismatchError, match="s"):
        write_dataframe(frame(spark, 10).selectExpr("id", "p", "cast(s as binary) as s", "ts", "d"), s3_uri,
                        storage_options=storage_options)
    assert pending_uploads(s3_uri, storage_options) == []


def test_credentials_are_not_in_the_plan_or_the_log(spark, local_stack, caplog, capsys):
    secret = f"secret-{uuid.uuid4().hex}"
    options = dict(local_stack.storage_options(), AWS_SECRET_ACCESS_KEY=secret)  # moto accepts any secret
    uri = f"s3://{local_stack.bucket}/tables/{uuid.uuid4().hex[:12]}"
    from logstore import StorageOptions
    from spark_integration.write import (
        TASK_RESULT_SCHEMA,
        StageTask,
        arrow_write_schema,
    )

    df = frame(spark, 20)
    task = StageTask(table_path=uri, options=StorageOptions.resolve(options), schema=arrow_write_schema(df.schema),
                     partition_by=(), job_id=str(uuid.uuid4()))
    staged = df.mapInArrow(task, TASK_RESULT_SCHEMA)
    staged.explain(extended=True)
    plan = staged._jdf.queryExecution().toString() + capsys.readouterr().out
    assert "StageTask" in plan
    assert secret not in plan
    assert secret not in repr(task)

    with caplog.at_level(logging.DEBUG):
        write_dataframe(df, uri, storage_options=options)
        read_dataframe(spark, uri, storage_options=options).collect()
    assert "stages" in caplog.text  # the debug log includes the staging plan
    assert secret not in caplog.text
    assert secret not in capsys.readouterr().out


def _largest_batch(batches):
    yield pa.RecordBatch.from_pydict({"rows": [max((b.num_rows for b in batches), default=0)]})


def test_a_writing_job_asks_for_bigger_arrow_batches_and_leaves_the_session_as_it_was(spark):
    from spark_integration.session import ARROW_BATCH_ROWS, arrow_batches_for_writing, batch_rows

    df = spark.range(0, 60_000, 1, numPartitions=1)
    largest = lambda: max(r.rows for r in df.mapInArrow(_largest_batch, "rows long").collect())  # noqa: E731
    assert largest() == 10_000  # Spark's default
    wanted = batch_rows(pa.schema([("id", pa.int64())]))
    assert wanted > 60_000
    with arrow_batches_for_writing(spark, wanted):
        assert largest() == 60_000
    assert spark.conf.get(ARROW_BATCH_ROWS) == "10000" and largest() == 10_000
    spark.conf.set(ARROW_BATCH_ROWS, "5000")  # the user's choice is kept
    try:
        with arrow_batches_for_writing(spark, wanted):
            assert largest() == 5_000
    finally:
        spark.conf.set(ARROW_BATCH_ROWS, "10000")


def test_spark_tasks_write_statistics_for_the_columns_the_table_lists(spark, s3_uri, storage_options):
    import json

    from table.log import properties

    df = frame(spark, 200, partitions=2)
    write_dataframe(df, s3_uri, partition_by=["p"], storage_options=storage_options,
                    configuration={properties.STATS_COLUMNS: "s,id"})
    files = Table(s3_uri, storage_options=storage_options).snapshot.files
    assert len(files) >= 2
    for add in files:
        stats = json.loads(add.stats)
        assert set(stats["nullCount"]) == set(stats["minValues"]) == {"s", "id"}


def test_spark_and_python_writes_return_the_same_typed_metrics_and_snapshot(spark, s3_uri, storage_options):
    """One count (the job commit's, from the staged files) behind both writers: for the same rows, one task
    each, ``write_dataframe`` and ``write_table`` return the same metrics type and the same counts, each
    equal to what its commit holds; each result's snapshot is its table at that version."""
    from table import write_table
    from table.operations.metrics import WriteMetrics

    rows = pa.table({"id": pa.array(range(12), pa.int64()), "p": pa.array([i % 3 for i in range(12)], pa.int32())})
    spark_uri, python_uri = s3_uri + "-spark", s3_uri + "-python"
    df = spark.createDataFrame(rows.to_pylist(), "id long, p int").coalesce(1)
    ours = write_dataframe(df, spark_uri, partition_by=["p"], storage_options=storage_options)
    theirs = write_table(python_uri, rows, partition_by=["p"], storage_options=storage_options)
    assert type(ours.metrics) is type(theirs.metrics) is WriteMetrics
    fields = ("num_files", "num_output_rows", "num_removed_files", "num_removed_bytes", "num_tasks", "num_attempts",
              "skipped")
    assert {f: getattr(ours.metrics, f) for f in fields} == {f: getattr(theirs.metrics, f) for f in fields}
    assert (ours.metrics.num_files, ours.metrics.num_output_rows) == (3, 12)
    for uri, result in ((spark_uri, ours), (python_uri, theirs)):
        fresh = Table(uri, version=result.version, storage_options=storage_options)
        files = fresh.snapshot.files
        assert result.metrics.num_files == len(files)
        assert result.metrics.num_output_bytes == sum(f.size for f in files)
        assert result.snapshot.version == fresh.version == 0
        assert {f.path for f in result.snapshot.files} == {f.path for f in files}
        assert result.snapshot.schema == fresh.schema
