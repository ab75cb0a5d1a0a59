"""The change data feed in Spark (``readChangeFeed=true``): batch reads of a range of versions and streams of
every change, with Delta's option names and the rows ``Table.load_cdf`` gives.

**Batch** (``spark.read.format("dynacommit").option("readChangeFeed", "true").option("startingVersion", 3)``,
with ``endingVersion``, or ``startingTimestamp`` / ``endingTimestamp``): the driver resolves the range as
``Table.load_cdf`` does (:func:`~table.data.cdf.plan_cdf`: the same rules and errors, nothing read) and cuts
it into runs of consecutive versions, in version order: one version per task, or :data:`CHANGE_TASKS` runs
of several for a longer range (each task loads the snapshot before its first version once). Each task
reads its versions with the library's reader (:func:`~table.data.cdf.read_changes`) in the executor. The
rows: the table's columns (its schema at the end of the range) then ``_change_type`` (string),
``_commit_version`` (long) and ``_commit_timestamp`` (timestamp). A version that did not record changes
(``delta.enableChangeDataFeed`` not true there) fails the task reading it with ``load_cdf``'s error. The
range's end is pinned when Spark asks for the schema, as ``versionAsOf`` is.

**Streaming** (``spark.readStream.format("dynacommit").option("readChangeFeed", "true")``): the offsets are
the file source's (:class:`~spark_integration.streaming.Position`, Delta's JSON fields), always at whole
versions (``index`` -1). Without ``startingVersion`` / ``startingTimestamp`` the first micro-batch is the
table's snapshot as ``insert`` rows whose ``_commit_version`` is the snapshot's version (Delta's), then
every later version's changes; with one, the changes from that version on. ``maxFilesPerTrigger``
(default 1000) counts the files a version's changes are read from (its change data files, or else the
data files it adds and removes; for the snapshot, its files) and takes whole versions, at least one per
micro-batch, as Delta's change feed source does. Versions without data changes (a compaction) are
passed over. A change of the table's schema fails the stream, as in the file source; a restart from the
checkpoint re-plans an unfinished micro-batch from its logged offsets, so each change is delivered once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from logstore.errors import InvalidArgumentError
from spark_integration.compat import ReadAllAvailable, ReadLimit, to_arrow_schema
from spark_integration.options import ReadOptions
from spark_integration.read import (
    OPEN_COST_BYTES,
    ReadPartition,
    check_columns,
    partitions_of,
    plan_read_tasks,
    read_partition,
    spark_schema,
)
from spark_integration.streaming import DynacommitStreamReader, Position, SourceState
from table.data.cdf import COMMIT_TIMESTAMP, COMMIT_VERSION, ChangeFeed, change_schema, plan_cdf, read_changes
from table.data.staging import CHANGE_TYPE
from table.log.actions import Action, AddFile, Cdc, RemoveFile
from table.log.timestamps import commit_timestamps
from table.table import Table

__all__ = ["CHANGE_COLUMNS", "CHANGE_TASKS", "ChangeFeedReader", "ChangeFeedStreamReader", "ChangePartition",
           "SnapshotInsertsPartition", "change_feed_schema", "version_runs"]

log = logging.getLogger(__name__)

CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
CHANGE_TASKS = 128
"""A read of up to this many versions (or ``minPartitions``, if more) is one task per version; a longer one is
cut into this many runs of consecutive versions."""


def change_feed_schema(options: ReadOptions) -> tuple[StructType, int]:
    """For ``DataSource.schema()``: the Spark schema of a change feed read (the table's at the end of the
    range, then the change columns) and that end version, which the batch read is then pinned to. A stream's
    range has no end: the newest version's schema."""
    assert options.change_feed is not None
    table = Table(options.uri, storage_options=options.storage)
    feed = plan_cdf(table, ending_version=options.change_feed.ending_version,
                    ending_timestamp=options.change_feed.ending_timestamp)
    return spark_schema(feed.schema), feed.end


def version_runs(versions: Sequence[int], tasks: int) -> list[tuple[int, int]]:
    """``versions`` (ascending) cut into at most ``tasks`` runs of about as many versions each, in order:
    ``(first, last)`` of each (versions between them that are not in ``versions`` have no changes)."""
    count = min(len(versions), max(1, tasks))
    runs = []
    for i in range(count):
        chunk = versions[i * len(versions) // count:(i + 1) * len(versions) // count]
        runs.append((chunk[0], chunk[-1]))
    return runs


@dataclass
class ChangePartition(InputPartition):
    """One read task: versions ``first`` .. ``last`` of a change feed read (the plan is plain data)."""

    index: int
    feed: ChangeFeed
    first: int
    last: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, self.index)

    def __repr__(self) -> str:
        return f"ChangePartition({self.index}, {self.feed.table_path}, versions {self.first}..{self.last})"


@dataclass
class SnapshotInsertsPartition(InputPartition):
    """One read task of a change feed stream's first micro-batch: some files of the snapshot it starts
    from, whose rows come as ``insert`` changes of the snapshot's version."""

    index: int
    files: ReadPartition
    version: int
    timestamp_ms: int  # the version's commit timestamp

    def __post_init__(self) -> None:
        InputPartition.__init__(self, self.index)

    def __repr__(self) -> str:
        return f"SnapshotInsertsPartition({self.index}, version {self.version}, {len(self.files.files)} files)"


class ChangeFeedReader(DataSourceReader):
    """A batch change feed read (module docstring). Pickled into Spark's planning: it holds the options,
    the schema asked for and the pinned end of the range, never the plan."""

    def __init__(self, options: ReadOptions, schema: StructType, *, end: int | None):
        assert options.change_feed is not None
        self.options = options
        self.schema = schema
        self.end = end

    def partitions(self) -> list[InputPartition]:
        wanted = self.options.change_feed
        table = Table(self.options.uri, storage_options=self.options.storage)
        pinned = self.end is not None
        feed = plan_cdf(table, wanted.starting_version, self.end if pinned else wanted.ending_version,
                        starting_timestamp=wanted.starting_timestamp,
                        ending_timestamp=None if pinned else wanted.ending_timestamp)
        check_columns(self.schema, feed.schema, table=table.uri.table_path)
        columns = [n for n in self.schema.fieldNames() if n not in CHANGE_COLUMNS]
        if columns != feed.schema.names[:-len(CHANGE_COLUMNS)]:
            feed = feed.with_columns(columns)
        runs = version_runs(list(feed.versions), max(CHANGE_TASKS, self.options.min_partitions))
        log.info("change feed read of %s: versions %d..%d in %d task(s)", feed.table_path, feed.start, feed.end,
                 len(runs))
        return [ChangePartition(i, feed, first, last) for i, (first, last) in enumerate(runs)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChangePartition):  # an empty plan is one task with InputPartition(None)
            yield from change_rows(partition, self.schema)


def change_rows(partition: ChangePartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    """The rows of a task's versions, in Spark's column order and Arrow schema."""
    target = to_arrow_schema(schema)
    for batch in read_changes(partition.feed, partition.first, partition.last):
        yield _conform(batch.select(target.names), target)


def snapshot_rows(partition: SnapshotInsertsPartition, schema: StructType, *, options) -> Iterator[pa.RecordBatch]:
    """The rows of some files of the snapshot a change feed stream starts from, as ``insert`` changes."""
    target = to_arrow_schema(schema)
    columns = StructType([f for f in schema if f.name not in CHANGE_COLUMNS])
    for batch in read_partition(partition.files, options=options, schema=columns):
        rows = batch.num_rows
        added = {
            CHANGE_TYPE: pa.array(["insert"] * rows, pa.string()),
            COMMIT_VERSION: pa.array([partition.version] * rows, pa.int64()),
            COMMIT_TIMESTAMP: pa.array([partition.timestamp_ms * 1000] * rows, pa.int64()).cast(
                pa.timestamp("us", tz="UTC")),
        }
        arrays = [added[f.name] if f.name in added else batch.column(f.name) for f in target]
        yield _conform(pa.RecordBatch.from_arrays(arrays, names=target.names), target)


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` in Spark's Arrow schema: the types agree (checked when planning), nullability may not."""
    if batch.schema.equals(target):
        return batch
    return pa.Table.from_batches([batch]).cast(target).combine_chunks().to_batches()[0]


class ChangeFeedStreamReader(DynacommitStreamReader):
    """A change feed stream (module docstring): the file source's offsets, starting options, read limit
    and Trigger.AvailableNow bound, over whole versions whose changes the executors read."""

    # --- Spark's calls, on the driver -------------------------------------------------------------
    def _next_end(self, start: dict, limit: ReadLimit, state: SourceState) -> dict:
        """The end of the next micro-batch: whole versions after ``start`` up to the newest, while the files
        their changes are read from stay within ``limit`` (at least one version); ``start`` itself when no
        version has changes."""
        origin = self._position(start, state)
        latest = state.latest() if state.until is None else state.until
        budget = None if isinstance(limit, ReadAllAvailable) else getattr(limit, "max_files", None)
        position, end, taken = origin, origin, 0
        while position.starting or position.version <= latest:
            files = len(self._unit(position))
            if budget is not None and taken > 0 and taken + files > budget:
                break
            taken += files
            position = position.next_unit()
            if files > 0:
                end = position
            if budget is not None and taken >= budget:
                break
        return start if end == origin else end.to_offset(state.reservoir_id)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        state = self._load()
        state.offset = end
        position, last = self._position(start, state), self._position(end, state)
        parts: list[InputPartition] = []
        if position.starting:
            parts.extend(self._snapshot_partitions(state, position.version))
            position = position.next_unit()
        changed = [v for v in range(position.version, last.version) if self._unit(Position.at(v))]
        if changed:
            feed = ChangeFeed(table_path=self.table_path, storage_options=self.options.storage, start=changed[0],
                              end=changed[-1], schema=change_schema(state.table.schema), columns=None,
                              layout=state.table.snapshot.layout, configuration=dict(state.configuration))
            for first, final in version_runs(changed, max(CHANGE_TASKS, self.options.min_partitions)):
                parts.append(ChangePartition(len(parts), feed, first, final))
        return parts

    # --- in the read tasks ------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChangePartition):
            return change_rows(partition, self.schema)
        if isinstance(partition, SnapshotInsertsPartition):
            return snapshot_rows(partition, self.schema, options=self.options.storage)
        return iter(())

    # --- the log ----------------------------------------------------------------------------------
    def _position(self, offset: dict, state: SourceState) -> Position:
        position = Position.from_offset(offset, state.reservoir_id, self.table_path)
        if position.index != -1:
            raise InvalidArgumentError(
                f"the stream's checkpoint holds an offset inside version {position.version} of {self.table_path}, "
                f"which a stream without readChangeFeed wrote; a change feed stream reads whole versions: start it "
                f"with a new checkpoint location")
        return position

    def _snapshot_partitions(self, state: SourceState, version: int) -> list[SnapshotInsertsPartition]:
        files = self._unit(Position.at(version, starting=True))
        tasks = plan_read_tasks(files, min_tasks=self.options.min_partitions, open_cost=OPEN_COST_BYTES)
        reads = partitions_of(tasks, table_path=self.table_path, version=version, table_schema=state.table.schema,
                              partition_columns=state.table.partition_columns, layout=state.table.snapshot.layout)
        stamp = commit_timestamps(state.log_store, state.configuration)(version, None)
        return [SnapshotInsertsPartition(index=r.index, files=r, version=version, timestamp_ms=stamp) for r in reads]

    def _commit_files(self, state: SourceState, version: int) -> list[Action]:
        """The actions whose files the changes of ``version`` are read from: its change data files, or else
        the data files it adds and removes (none for a compaction)."""
        actions = self._commit_actions(state, version)
        changes = [a for a in actions if isinstance(a, Cdc)]
        return changes or [a for a in actions if isinstance(a, (AddFile, RemoveFile)) and a.data_change]
