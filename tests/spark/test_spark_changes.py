"""Time travel by timestamp and the change data feed through Spark (the shared local[2,3] session, the moto
stack): ``timestampAsOf``, ``readChangeFeed`` in batch and in a stream restarted from its checkpoint, and the
errors, each compared with what the library gives in-process. Tables have in-commit timestamps, so that
every version's commit time is the one ``Table.history()`` reports."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from spark_integration import register
from table.data.write import write_table
from table.table import Table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableInCommitTimestamps": "true"}


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    register(spark)


def spark_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def commit_times(uri: str, options: dict[str, str]) -> dict[int, int]:
    return {h.version: h.timestamp for h in Table(uri, storage_options=options).history()}


def changes_table(uri: str, options: dict[str, str]) -> None:
    """0: ids 0-2; 1: id 1 updated; 2: id 3 inserted; 3: ids >= 2 deleted (commits at least 20 ms apart)."""
    write_table(uri, pa.table({"id": pa.array([0, 1, 2], pa.int64()), "v": ["a", "b", "c"]}),
                configuration=PROPERTIES, storage_options=options)
    time.sleep(0.02)
    Table(uri, storage_options=options).update({"v": "'B'"}, predicate="id = 1")
    time.sleep(0.02)
    write_table(uri, pa.table({"id": pa.array([3], pa.int64()), "v": ["d"]}), storage_options=options)
    time.sleep(0.02)
    Table(uri, storage_options=options).delete("id >= 2")


def spark_rows(rows) -> list[tuple]:
    """Spark's rows as sorted tuples, timestamps as instants (Spark gives naive local datetimes)."""
    return sorted(tuple(v.timestamp() if isinstance(v, dt.datetime) else v for v in r) for r in rows)


def library_rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(v.timestamp() if isinstance(v, dt.datetime) else v for v in r.values())
                  for r in table.to_pylist())


def test_timestamp_as_of_and_a_change_feed_read_give_what_the_library_gives(spark, s3_uri, storage_options):
    changes_table(s3_uri, storage_options)
    times = commit_times(s3_uri, storage_options)
    def read():  # a DataFrameReader keeps its options: a new one for each read
        return spark.read.format("dynacommit").options(**storage_options)

    between = times[1] + (times[2] - times[1]) // 2

    as_of = read().option("timestampAsOf", spark_time(between)).load(s3_uri)
    assert spark_rows(as_of.collect()) == library_rows(Table(s3_uri, version=1, storage_options=storage_options)
                                                       .to_pyarrow_table())
    exact = read().option("timestampAsOf", spark_time(times[2])).load(s3_uri)
    assert sorted(r.id for r in exact.collect()) == [0, 1, 2, 3]

    library = Table(s3_uri, storage_options=storage_options)
    feed = read().option("readChangeFeed", "true").option("startingVersion", 1).load(s3_uri)
    assert feed.columns == ["id", "v", "_change_type", "_commit_version", "_commit_timestamp"]
    assert feed.rdd.getNumPartitions() == 3  # one task per version
    assert spark_rows(feed.collect()) == library_rows(library.load_cdf(1).read_all())
    from_moment = (read().option("readChangeFeed", "true").option("startingTimestamp", spark_time(between))
                   .option("endingVersion", 2).load(s3_uri))
    assert spark_rows(from_moment.collect()) == library_rows(library.load_cdf(2, 2).read_all())


@pytest.mark.parametrize(("options", "message"), [
    ({"versionAsOf": "0", "timestampAsOf": "2026-01-01"}, "versionAsOf and timestampAsOf both pick the version"),
    ({"timestampAsOf": "2000-01-01 00:00:00"}, "before the earliest version available"),
    ({"readChangeFeed": "true"}, "needs where to start: give startingVersion or startingTimestamp"),
])
def test_read_errors_name_the_problem(spark, s3_uri, storage_options, options, message):
    write_table(s3_uri, pa.table({"id": pa.array([1], pa.int64())}), storage_options=storage_options)
    with pytest.raises(PySparkException, match=message):
        spark.read.format("dynacommit").options(**storage_options, **options).load(s3_uri).collect()


def test_a_change_feed_stream_delivers_the_snapshot_then_each_change_once_across_a_restart(spark, s3_uri,
                                                                                          storage_options, tmp_path):
    write_table(s3_uri, pa.table({"id": pa.array([0, 1, 2], pa.int64()), "v": ["a", "b", "c"]}),
                configuration=PROPERTIES, storage_options=storage_options)
    write_table(s3_uri, pa.table({"id": pa.array([3], pa.int64()), "v": ["d"]}), storage_options=storage_options)
    batches: dict[int, list[tuple]] = {}
    deliveries: list[int] = []

    def collect(df, batch_id):
        deliveries.append(batch_id)
        batches[batch_id] = spark_rows(df.collect())

    def follow() -> None:
        query = (spark.readStream.format("dynacommit").options(**storage_options).option("readChangeFeed", "true")
                 .option("maxFilesPerTrigger", 1).load(s3_uri)
                 .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()

    follow()  # batch 0: the snapshot at version 1, as inserts
    snapshot_time = commit_times(s3_uri, storage_options)[1] / 1000
    current = Table(s3_uri, version=1, storage_options=storage_options).to_pyarrow_table().to_pylist()
    assert batches == {0: sorted((r["id"], r["v"], "insert", 1, snapshot_time) for r in current)}

    library = Table(s3_uri, storage_options=storage_options)
    library.update({"v": "'B'"}, predicate="id = 1")  # version 2
    library.delete("id = 3")                          # version 3
    follow()  # batches 1 and 2: one version each (maxFilesPerTrigger=1)
    assert sorted(batches) == [0, 1, 2]
    assert sorted(r for b in (1, 2) for r in batches[b]) == library_rows(library.load_cdf(2).read_all())

    delivered = dict(batches)
    (tmp_path / "cp" / "commits" / "2").unlink()  # a crash after batch 2 ran, before Spark recorded it
    (tmp_path / "cp" / "commits" / ".2.crc").unlink()
    deliveries.clear()
    follow()
    assert deliveries == [2] and batches == delivered  # replanned from its logged offsets: the same rows

    later = spark_time(commit_times(s3_uri, storage_options)[3] + 1)
    with pytest.raises(PySparkException, match=r"startingTimestamp .* is after its newest commit \(version 3"):
        query = (spark.readStream.format("dynacommit").options(**storage_options).option("startingTimestamp", later)
                 .load(s3_uri).writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp2"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
