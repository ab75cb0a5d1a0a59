"""Time travel by timestamp and the change data feed in the ``dynacommit`` data source, without a JVM: the
objects Spark drives (schema, reader, partitions pickled to the tasks, stream offsets) on in-process
(``memory://``) tables whose commit times the tests set. Each read is compared with what the library gives
in-process: ``Table(uri, version=...)`` and ``Table.load_cdf(...)``."""

from __future__ import annotations

import datetime as dt
import json
import pickle

import pyarrow as pa
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

import logstore.objects
from logstore.errors import InvalidArgumentError, VersionNotFoundError
from spark_integration.changes import ChangeFeedStreamReader, ChangePartition, version_runs
from spark_integration.compat import ReadAllAvailable, ReadMaxFiles
from spark_integration.datasource import DynacommitDataSource
from table.data.write import write_table
from table.table import Table

pytestmark = [pytest.mark.spark_smoke]  # no JVM: seconds, and the change feed's planning on every pyspark

CDF = {"delta.enableChangeDataFeed": "true"}
MINUTE = 60_000
T0 = 1_795_600_800_000  # 2026-11-25 10:00:00 UTC


@pytest.fixture
def clock(monkeypatch):
    """The in-memory object store's clock: every object written is written at ``clock[0]``."""
    now = [T0]
    monkeypatch.setattr(logstore.objects, "_now_ms", lambda: now[0])
    return now


def spark_time(ms: int) -> str:
    """Spark's timestamp format, ``yyyy-MM-dd HH:mm:ss.SSS`` (UTC)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def source(uri: str, **options: str) -> DynacommitDataSource:
    return DynacommitDataSource(CaseInsensitiveDict({"path": uri, **options}))


def batch_rows(ds: DynacommitDataSource, schema: StructType | None = None) -> tuple[list, list[dict]]:
    """What a batch read returns: the planned partitions and every task's rows (each task gets a pickled
    reader and its own pickled partition, as in Spark)."""
    reader = ds.reader(ds.schema() if schema is None else schema)
    reader = pickle.loads(pickle.dumps(reader))
    partitions = reader.partitions()
    out = []
    for partition in partitions:
        task = pickle.loads(pickle.dumps(reader))
        out.extend(r for b in task.read(pickle.loads(pickle.dumps(partition))) for r in b.to_pylist())
    return partitions, out


def ordered(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(sorted(r.items())) for r in rows)


def cdf_table(uri: str, clock: list[int]) -> None:
    """Versions 0-4, one minute apart: insert 0..2, update id 1, insert 3, compaction (no change), delete
    ids >= 2."""
    write_table(uri, pa.table({"id": pa.array([0, 1, 2], pa.int64()), "v": ["a", "b", "c"]}), configuration=CDF)
    clock[0] += MINUTE
    Table(uri).update({"v": "'B'"}, predicate="id = 1")
    clock[0] += MINUTE
    write_table(uri, pa.table({"id": pa.array([3], pa.int64()), "v": ["d"]}))
    clock[0] += MINUTE
    Table(uri).optimize()
    clock[0] += MINUTE
    Table(uri).delete("id >= 2")


# --- time travel by timestamp -------------------------------------------------------------------------


def test_timestamp_as_of_reads_the_version_of_that_moment_pinned_between_schema_and_read(memory_uri, clock):
    for version in range(3):
        write_table(memory_uri, pa.table({"id": pa.array([version], pa.int64())}))
        clock[0] += MINUTE
    log = Table(memory_uri).log_store
    assert [log.stat_file(f"{v:020d}.json").last_modified_ms for v in range(3)] == [T0, T0 + MINUTE, T0 + 2 * MINUTE]
    for moment, version in ((T0 + MINUTE, 1), (T0 + MINUTE + 30_000, 1), (T0 + 2 * MINUTE - 1, 1), (T0, 0)):
        ds = source(memory_uri, timestampAsOf=spark_time(moment))
        schema = ds.schema()
        write_table(memory_uri, pa.table({"id": pa.array([99], pa.int64())}))  # after the schema: not read
        _, got = batch_rows_of(ds, schema)
        assert ordered(got) == ordered(Table(memory_uri, version=version).to_pyarrow_table().to_pylist())
    given = StructType([StructField("id", LongType())])  # .schema(...): schema() does not run
    _, got = batch_rows(source(memory_uri, timestampAsOf="2026-11-25T11:01:00+01:00"), given)
    assert ordered(got) == ordered([{"id": 0}, {"id": 1}])
    with pytest.raises(VersionNotFoundError, match="before the earliest version available"):
        source(memory_uri, timestampAsOf=spark_time(T0 - 1)).schema()
    with pytest.raises(InvalidArgumentError, match="versionAsOf and timestampAsOf both pick the version"):
        source(memory_uri, versionAsOf="1", timestampAsOf=spark_time(T0)).schema()


def batch_rows_of(ds: DynacommitDataSource, schema: StructType) -> tuple[list, list[dict]]:
    reader = pickle.loads(pickle.dumps(ds.reader(schema)))
    partitions = reader.partitions()
    return partitions, [r for p in partitions for b in reader.read(p) for r in b.to_pylist()]


# --- batch change feed --------------------------------------------------------------------------------


def test_a_change_feed_read_gives_load_cdfs_rows_one_task_per_version_in_order(memory_uri, clock):
    cdf_table(memory_uri, clock)
    ds = source(memory_uri, readChangeFeed="true", startingVersion="1")
    schema = ds.schema()
    assert [(f.name, f.dataType) for f in schema][-3:] == [
        ("_change_type", StringType()), ("_commit_version", LongType()), ("_commit_timestamp", TimestampType())]
    partitions, got = batch_rows(ds)
    assert [(p.first, p.last) for p in partitions] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert ordered(got) == ordered(Table(memory_uri).load_cdf(1).read_all().to_pylist())
    assert {r["_change_type"] for r in got} == {"update_preimage", "update_postimage", "insert", "delete"}

    _, got = batch_rows(source(memory_uri, readChangeFeed="true", startingVersion="0", endingVersion="2"))
    assert ordered(got) == ordered(Table(memory_uri).load_cdf(0, 2).read_all().to_pylist())
    by_time = source(memory_uri, readChangeFeed="true", startingTimestamp=spark_time(T0 + 1),
                     endingTimestamp=spark_time(T0 + 2 * MINUTE + 1))
    _, got = batch_rows(by_time)
    assert ordered(got) == ordered(Table(memory_uri).load_cdf(1, 2).read_all().to_pylist())
    subset = StructType([StructField("_commit_version", LongType()), StructField("id", LongType())])
    _, got = batch_rows(source(memory_uri, readChangeFeed="true", startingVersion="4"), subset)
    assert sorted(got, key=lambda r: r["id"]) == [{"_commit_version": 4, "id": 2}, {"_commit_version": 4, "id": 3}]


def test_a_change_feed_read_is_pinned_to_the_end_its_schema_saw(memory_uri, clock):
    cdf_table(memory_uri, clock)
    ds = source(memory_uri, readChangeFeed="true", startingVersion="3")
    schema = ds.schema()
    write_table(memory_uri, pa.table({"id": pa.array([7], pa.int64()), "v": ["x"]}))  # version 5
    partitions, got = batch_rows_of(ds, schema)
    assert [p.last for p in partitions] == [3, 4] and {r["_commit_version"] for r in got} == {4}


def test_change_feed_read_errors_are_load_cdfs(memory_uri, clock):
    cdf_table(memory_uri, clock)
    with pytest.raises(VersionNotFoundError, match="from version 9 to 4 cannot be read: its versions go up to 4"):
        batch_rows(source(memory_uri, readChangeFeed="true", startingVersion="9"))
    with pytest.raises(VersionNotFoundError, match="ending_version 9 .* does not exist"):
        source(memory_uri, readChangeFeed="true", startingVersion="0", endingVersion="9").schema()
    with pytest.raises(InvalidArgumentError, match="needs where to start"):
        batch_rows(source(memory_uri, readChangeFeed="true"))
    plain = memory_uri + "-plain"
    write_table(plain, pa.table({"id": pa.array([1], pa.int64())}))
    ds = source(plain, readChangeFeed="true", startingVersion="0")
    assert [type(p) for p in ds.reader(ds.schema()).partitions()] == [ChangePartition]  # planning reads nothing
    with pytest.raises(InvalidArgumentError, match="did not record change data at version 0"):
        batch_rows(source(plain, readChangeFeed="true", startingVersion="0"))


def test_version_runs_cut_long_ranges_into_ordered_runs():
    assert version_runs([1, 2, 3], 128) == [(1, 1), (2, 2), (3, 3)]
    assert version_runs(list(range(10)), 3) == [(0, 2), (3, 5), (6, 9)]
    assert version_runs([2, 5, 9], 2) == [(2, 2), (5, 9)]
    assert version_runs([], 4) == []


# --- streams ------------------------------------------------------------------------------------------


def stream(uri: str, **options: str):
    ds = source(uri, **options)
    return ds.streamReader(ds.schema())


def micro_batch(reader, start: dict, end: dict) -> list[dict]:
    """The rows of micro-batch ``start``..``end``: planned on the driver, read by pickled tasks."""
    task = pickle.loads(pickle.dumps(reader))
    return [r for p in reader.partitions(start, end) for b in task.read(pickle.loads(pickle.dumps(p)))
            for r in b.to_pylist()]


def drain(reader, start: dict, limit=None) -> list[dict]:
    """Every offset from ``start`` on (Spark's loop of latestOffset calls)."""
    offsets = [start]
    while (nxt := reader.latestOffset(offsets[-1], limit or ReadAllAvailable())) != offsets[-1]:
        offsets.append(nxt)
    return offsets


def test_starting_timestamp_starts_a_stream_at_the_first_commit_at_or_after_it(memory_uri, clock):
    for version in range(3):
        write_table(memory_uri, pa.table({"id": pa.array([version], pa.int64())}))
        clock[0] += MINUTE
    for moment, version in ((T0 - MINUTE, 0), (T0, 0), (T0 + 1, 1), (T0 + 2 * MINUTE, 2)):
        reader = stream(memory_uri, startingTimestamp=spark_time(moment))
        start = reader.initialOffset()
        assert (start["reservoirVersion"], start["isStartingVersion"]) == (version, False)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert sorted(r["id"] for r in micro_batch(reader, start, end)) == list(range(version, 3))
    with pytest.raises(VersionNotFoundError, match=r"after its newest commit \(version 2, committed at "
                                                   r"2026-11-25T10:02:00.000\+00:00\).*startingVersion=latest"):
        stream(memory_uri, startingTimestamp=spark_time(T0 + 2 * MINUTE + 1)).initialOffset()


def test_a_change_stream_starts_with_the_snapshot_as_inserts_then_each_versions_changes(memory_uri, clock):
    write_table(memory_uri, pa.table({"id": pa.array([0, 1, 2], pa.int64()), "v": ["a", "b", "c"]}),
                configuration=CDF)
    clock[0] += MINUTE
    write_table(memory_uri, pa.table({"id": pa.array([3], pa.int64()), "v": ["d"]}))       # version 1
    reader = stream(memory_uri, readChangeFeed="true")
    assert isinstance(reader, ChangeFeedStreamReader)
    start = reader.initialOffset()
    assert (start["reservoirVersion"], start["isStartingVersion"]) == (1, True)
    first = reader.latestOffset(start, ReadAllAvailable())
    snapshot = micro_batch(reader, start, first)
    expected = [{**r, "_change_type": "insert", "_commit_version": 1,
                 "_commit_timestamp": dt.datetime.fromtimestamp((T0 + MINUTE) / 1000, tz=dt.timezone.utc)}
                for r in Table(memory_uri, version=1).to_pyarrow_table().to_pylist()]
    assert ordered(snapshot) == ordered(expected)

    clock[0] += MINUTE
    Table(memory_uri).update({"v": "'B'"}, predicate="id = 1")                             # version 2
    clock[0] += MINUTE
    Table(memory_uri).optimize()                                                            # version 3: nothing
    clock[0] += MINUTE
    Table(memory_uri).delete("id = 3")                                                      # version 4
    offsets = drain(reader, first)
    assert [o["reservoirVersion"] for o in offsets] == [2, 5]
    changes = micro_batch(reader, offsets[0], offsets[1])
    assert ordered(changes) == ordered(Table(memory_uri).load_cdf(2).read_all().to_pylist())
    assert reader.latestOffset(offsets[-1], ReadAllAvailable()) == offsets[-1]


def test_a_change_stream_takes_whole_versions_up_to_max_files_and_replans_the_same_after_a_restart(memory_uri,
                                                                                                      clock):
    cdf_table(memory_uri, clock)
    reader = stream(memory_uri, readChangeFeed="true", startingVersion="0", maxFilesPerTrigger="1")
    assert reader.getDefaultReadLimit() == ReadMaxFiles(1)
    offsets = drain(reader, reader.initialOffset(), ReadMaxFiles(1))
    assert [o["reservoirVersion"] for o in offsets] == [0, 1, 2, 3, 5]  # version 3 (a compaction) rides along
    batches = [micro_batch(reader, a, b) for a, b in zip(offsets, offsets[1:])]
    assert [sorted({r["_commit_version"] for r in b}) for b in batches] == [[0], [1], [2], [4]]
    assert ordered([r for b in batches for r in b]) == ordered(Table(memory_uri).load_cdf(0).read_all().to_pylist())

    # A restarted query: a new reader, Spark's logged offsets (JSON), the unfinished batch planned again.
    restarted = stream(memory_uri, readChangeFeed="true", startingVersion="0", maxFilesPerTrigger="1")
    logged = [json.loads(json.dumps(o)) for o in offsets]
    assert micro_batch(restarted, logged[2], logged[3]) == batches[2]
    assert restarted.latestOffset(logged[3], ReadMaxFiles(1)) == logged[4]
    with pytest.raises(InvalidArgumentError, match="a change feed stream reads whole versions"):
        restarted.latestOffset({**logged[1], "index": 0}, ReadAllAvailable())


def test_a_change_stream_over_versions_without_the_feed_fails_as_load_cdf_does(memory_uri, clock):
    write_table(memory_uri, pa.table({"id": pa.array([0], pa.int64())}))
    write_table(memory_uri, pa.table({"id": pa.array([1], pa.int64())}))
    reader = stream(memory_uri, readChangeFeed="true", startingVersion="1")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    with pytest.raises(InvalidArgumentError, match="did not record change data at version 1"):
        micro_batch(reader, start, end)
