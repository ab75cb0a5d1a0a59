"""Structured Streaming on dynacommit tables: the sink (exactly once across restarts) and the source.

**Sink** (``df.writeStream.format("dynacommit").option("checkpointLocation", cp).start(uri)``), as
Delta's sink does it: every micro-batch is one job of the staging committer whose commit carries a
``txn`` action with the query's id as application id and the batch id as version. Spark replays a
batch whose offsets it logged but whose completion it did not (a crash between our commit and its
``commits/N``): the replay finds its txn in the table, aborts what it staged and writes nothing. The
query id is Spark's ``StreamingQuery.id``, kept in the checkpoint, so it is the same for every run of
the query from that checkpoint (and new if the checkpoint is deleted, which reprocesses everything,
as with Delta); two queries writing one table have two ids and never skip each other's batches.
Spark gives the tasks, not the driver's commit, the query id and batch id (task properties
``sql.streaming.queryId``, ``streaming.sql.batchId``): each task reports them with its PendingSet.
Output modes: ``append``; ``complete`` (each batch replaces the table's rows: Spark passes
``overwrite``); ``update`` is refused by Spark for Python sinks ("does not support Update mode").

**Source** (``spark.readStream.format("dynacommit").load(uri)``): offsets are positions in the log,
Delta's ``(reservoirVersion, index, isStartingVersion)``: the table's files at the version the query
starts from (``isStartingVersion``, sorted by path), then, commit by commit, the files each adds with
``dataChange=true``, in log order; ``index`` is the last file of that version already read (-1:
none). ``startingVersion=N`` starts at commit N instead of the snapshot (``latest``: after the newest
commit); ``startingTimestamp=T`` at the first commit made at or after T (Delta's ``DeltaSource``: the
earliest commit for a T before all of them, an error for a T after the newest commit);
``maxFilesPerTrigger`` (default 1000, Delta's) bounds a micro-batch (where pyspark has admission control:
:mod:`spark_integration.compat`). Commits whose actions
all have ``dataChange=false`` (compaction) add nothing to read and are passed over. A commit removing
data (``remove`` with ``dataChange=true``: a delete, an overwrite) fails the stream with an error
naming the version, unless ``skipChangeCommits=true``, which passes over such commits whole (their
adds included), as Delta does. A change of the table's schema fails the stream. With
``readChangeFeed=true`` the source delivers every change as a row instead:
:mod:`spark_integration.changes`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from logstore import (
    DynacommitError,
    LogStore,
    TableUri,
    open_log_store,
    open_object_store,
)
from logstore.errors import InvalidArgumentError, VersionNotFoundError
from spark_integration.commit import commit_job
from spark_integration.compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    StreamArrowWriter,
    SupportsTriggerAvailableNow,
)
from spark_integration.options import (
    SinkOptions,
    StreamReadOptions,
    parse_sink,
    parse_stream_read,
)
from spark_integration.read import (
    OPEN_COST_BYTES,
    partitions_of,
    plan_read_tasks,
    read_partition,
)
from spark_integration.write import (
    StageTask,
    abort_job,
    arrow_write_schema,
    select_pendingsets,
)
from table.data.writer_settings import WriterSettings
from table.data.pendingset import PendingSet
from table.data.uploads import abort_pending
from table.data.writespec import StreamingUpdate, WritePlan, WriteSpec
from table.errors import ChangeCommitError
from table.log.actions import Action, AddFile, Metadata, RemoveFile
from table.log.snapshot import read_commit
from table.log.timestamps import commit_timestamps, first_at_or_after
from table.table import Table

__all__ = ["DynacommitStreamReader", "DynacommitStreamWriter", "Position", "SourceState", "StreamMessage",
           "micro_batch_of"]

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
_MICRO_BATCH_JOB = re.compile(r"^[0-9a-f]{32}-b(\d+)$")
"""The job id of a micro-batch: ``DynacommitStreamWriter.job_id``."""


# --- the sink ---------------------------------------------------------------------------------------


@dataclass
class StreamMessage(WriterCommitMessage):
    """A task's commit message in a micro-batch: its PendingSet, and the query and batch it belongs to."""

    pendingset: str
    query_id: str
    batch_id: int


class DynacommitStreamWriter(StreamArrowWriter):
    """One micro-batch of a streaming query into a table. Spark builds one on the driver for the tasks
    (:meth:`plan`, every batch) and another for the commit: plain data only."""

    def __init__(self, *, options: SinkOptions, spec: WriteSpec, plan: WritePlan, run_id: str):
        self.options = options
        self.spec = spec
        self.job = plan
        self.run_id = run_id
        self.table_path = TableUri.parse(options.uri).table_path

    @classmethod
    def plan(cls, raw_options: Mapping[str, str], schema: StructType, *, overwrite: bool) -> DynacommitStreamWriter:
        options = parse_sink(raw_options)
        spec = WriteSpec.of(mode="overwrite" if overwrite else "append", partition_by=options.partition_by,
                            user_metadata=options.user_metadata)
        table = Table.for_write(options.uri, storage_options=options.storage)
        return cls(options=options, spec=spec, plan=spec.plan(table, arrow_write_schema(schema)),
                   run_id=uuid.uuid4().hex)

    def __repr__(self) -> str:
        return f"DynacommitStreamWriter(table={self.table_path})"

    def job_id(self, batch_id: int) -> str:
        """Unique per run of the query and batch: a replayed batch never stages onto the keys of its
        earlier run (whose files may be in the table already)."""
        return f"{self.run_id}-b{batch_id}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamMessage:
        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        if batch_id is None or query_id is None:
            raise DynacommitError(f"Spark gave this streaming task no {BATCH_ID_PROPERTY}/{QUERY_ID_PROPERTY} "
                                  f"property; the dynacommit sink needs Spark's micro-batch execution")
        task = StageTask(table_path=self.table_path, options=self.options.storage, schema=self.job.schema,
                         partition_by=self.job.partition_by, job_id=self.job_id(int(batch_id)),
                         settings=WriterSettings.of(self.job.configuration, compression=self.options.compression,
                                                    target_file_size=self.options.target_file_size),
                         layout=self.job.layout, rules=self.job.rules)
        staged = task.run(iterator, task_id=context.partitionId(), attempt_id=context.attemptNumber())
        return StreamMessage(pendingset=staged[0].model_dump_json(), query_id=query_id, batch_id=int(batch_id))

    def commit(self, messages: Sequence[StreamMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        """Commit micro-batch ``batchId``: one log entry with ``txn(queryId, batchId)``, or nothing when
        the table holds that txn already (a replayed batch) or an append has no rows."""
        pendingsets, query_id, job_id = _batch(messages, batchId)
        kept, strays = select_pendingsets(pendingsets)
        table = Table.for_write(self.options.uri, storage_options=self.options.storage)
        if strays:
            abort_pending(table.objects, strays)
        if query_id is None or job_id is None:
            log.info("batch %d into %s: no task reported; nothing to commit", batchId, self.table_path)
            return
        output_mode = "Complete" if self.spec.mode == "overwrite" else "Append"
        spec = dataclasses.replace(self.spec, partition_by=self.job.partition_by, app_id=query_id, app_version=batchId,
                                   streaming=StreamingUpdate(query_id, batchId, output_mode))
        try:
            # the table may have changed since the batch was planned: refused now, the batch's uploads go
            job = spec.plan(table, self.job.schema)
        except DynacommitError as refused:
            aborted = abort_pending(table.objects, kept) + abort_job(table.objects, table.uri, job_id)
            if len(refused.args) == 1 and isinstance(refused.args[0], str) and str(refused) == refused.args[0]:
                refused.args = (f"{refused.args[0]} The micro-batch's {aborted} staged upload(s), never "
                                f"completed, were aborted.",)
            raise
        if job.done is not None:
            aborted = abort_pending(table.objects, kept) + abort_job(table.objects, table.uri, job_id)
            log.info("batch %d of query %s is in %s already (version %d): replay skipped, %d upload(s) aborted",
                     batchId, query_id, self.table_path, job.done.version, aborted)
            return
        if spec.mode == "append" and not any(p.files for p in kept):
            log.info("batch %d of query %s into %s has no rows; nothing to commit", batchId, query_id,
                     self.table_path)
            return
        result = commit_job(table, kept, spec, job, job_id=job_id)
        log.info("batch %d of query %s committed to %s: %s", batchId, query_id, self.table_path, result)

    def abort(self, messages: Sequence[StreamMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        uri = TableUri.parse(self.options.uri)
        objects = open_object_store(uri, storage_options=self.options.storage)
        reported = [PendingSet.load(m.pendingset) for m in messages if m is not None]
        aborted = abort_pending(objects, reported)
        for job_id in sorted({p.job_id for p in reported}):
            aborted += abort_job(objects, uri, job_id, tasks_may_run=True)
        log.warning("batch %d into %s failed: nothing committed, %d staged upload(s) aborted", batchId,
                    uri.table_path, aborted)


def micro_batch_of(job_id: str) -> int | None:
    """The batch id in the job id of a micro-batch commit (``commitInfo.operationMetrics.jobId``), or None
    for the job id of anything else."""
    found = _MICRO_BATCH_JOB.match(job_id)
    return None if found is None else int(found.group(1))


def _batch(messages: Sequence[StreamMessage | None], batch_id: int) -> tuple[list[PendingSet], str | None, str | None]:
    """The PendingSets of a batch's messages, and the one query id and job id they all carry."""
    present = [m for m in messages if m is not None]
    queries = {m.query_id for m in present}
    batches = {m.batch_id for m in present}
    if len(queries) > 1 or batches - {batch_id}:
        raise DynacommitError(f"the commit messages of batch {batch_id} come from queries {sorted(queries)} and "
                              f"batches {sorted(batches)}; nothing was committed")
    pendingsets = [PendingSet.load(m.pendingset) for m in present]
    jobs = {p.job_id for p in pendingsets}
    if len(jobs) > 1:
        raise DynacommitError(f"the tasks of batch {batch_id} staged under jobs {sorted(jobs)}; nothing was committed")
    return pendingsets, next(iter(queries), None), next(iter(jobs), None)


# --- the source -------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Position:
    """A place in the stream: after file ``index`` of the files of ``version`` (the snapshot's files if
    ``starting``, else the files commit ``version`` adds). The JSON offset is Delta's field names."""

    version: int
    starting_rank: int  # 0 for the snapshot at ``version``, 1 for commit ``version``: the unit's order
    index: int

    @property
    def starting(self) -> bool:
        return self.starting_rank == 0

    @classmethod
    def at(cls, version: int, index: int = -1, *, starting: bool = False) -> Position:
        return cls(version, 0 if starting else 1, index)

    def unit(self) -> tuple[int, int]:
        return self.version, self.starting_rank

    def next_unit(self) -> Position:
        return Position.at(self.version + 1)

    def to_offset(self, reservoir_id: str) -> dict:
        return {"sourceVersion": 1, "reservoirId": reservoir_id, "reservoirVersion": self.version,
                "index": self.index, "isStartingVersion": self.starting}

    @classmethod
    def from_offset(cls, offset: Mapping, reservoir_id: str, table: str) -> Position:
        if offset.get("reservoirId") != reservoir_id:
            raise InvalidArgumentError(
                f"the stream's checkpoint was written for table id {offset.get('reservoirId')}, but {table} is table "
                f"id {reservoir_id} (the table was replaced); start the query with a new checkpoint location")
        return cls.at(int(offset["reservoirVersion"]), int(offset["index"]), starting=bool(offset["isStartingVersion"]))


class DynacommitStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The source. Spark keeps one instance on the driver for the query's life (offsets, planning) and
    pickles another into the read tasks, which read their partitions only: no I/O at construction."""

    CACHED_UNITS = 64

    def __init__(self, raw_options: Mapping[str, str], schema: StructType):
        self.options: StreamReadOptions = parse_stream_read(raw_options)
        self.schema = schema
        self.table_path = TableUri.parse(self.options.uri).table_path
        self._state: SourceState | None = None

    def __getstate__(self) -> dict:
        return {"options": self.options, "schema": self.schema, "table_path": self.table_path, "_state": None}

    # --- Spark's calls, on the driver -------------------------------------------------------------
    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        state = self._load()
        latest = state.table.version
        start = self.options.starting_version
        if self.options.starting_timestamp is not None:
            position = Position.at(self._first_version_at(state))
        elif start is None:
            position = Position.at(latest, starting=True)
        elif start == "latest":
            position = Position.at(latest + 1)
        elif start > latest:
            raise InvalidArgumentError(f"startingVersion {start} of the stream on {self.table_path} is after its "
                                       f"newest version {latest}; give a version up to {latest}, or 'latest'")
        else:
            position = Position.at(start)
        state.offset = position.to_offset(state.reservoir_id)
        return state.offset

    def _first_version_at(self, state: SourceState) -> int:
        """The first version committed at or after ``startingTimestamp``; a timestamp after the newest
        commit is an error (Delta's default: the stream would otherwise start at a version that may never
        come)."""
        table, moment = state.table, self.options.starting_timestamp
        version = first_at_or_after(table.log_store, table.snapshot, moment)
        if version > table.version:
            stamp = commit_timestamps(table.log_store, table.snapshot.configuration)(table.version, None)
            shown = dt.datetime.fromtimestamp(stamp / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")
            raise VersionNotFoundError(
                f"startingTimestamp {moment} of the stream on {self.table_path} is after its newest commit (version "
                f"{table.version}, committed at {shown}); give a timestamp at or before {shown}, or "
                f"startingVersion=latest to read only the commits still to come")
        return version

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        return ReadMaxFiles(self.options.max_files_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        state = self._load()
        state.until = state.latest()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:  # noqa: N802
        """The end of the next micro-batch (:meth:`_next_end`). A pyspark without admission control
        (:mod:`spark_integration.compat`) passes neither argument: the batch then starts where the last
        one this reader saw ended and takes everything new; with none seen yet (a restart), it ends after
        the newest commit."""
        state = self._load()
        if start is None:
            if state.offset is None:
                state.offset = Position.at(state.latest() + 1).to_offset(state.reservoir_id)
                return state.offset
            start, limit = state.offset, ReadAllAvailable()
        state.offset = self._next_end(start, limit, state)
        return state.offset

    def _next_end(self, start: dict, limit: ReadLimit, state: SourceState) -> dict:
        """Every file after ``start`` up to the newest commit, at most ``limit`` files; ``start`` itself when
        there is nothing new. A commit that removes data ends the batch before it, and fails the call that
        starts at it."""
        origin = Position.from_offset(start, state.reservoir_id, self.table_path)
        latest = state.latest() if state.until is None else state.until
        budget = None if isinstance(limit, ReadAllAvailable) else getattr(limit, "max_files", None)
        position, end, taken = origin, origin, 0
        while position.starting or position.version <= latest:
            try:
                files = self._unit(position)
            except ChangeCommitError:
                if taken == 0:
                    raise
                break  # deliver what comes before it first
            remaining = len(files) - (position.index + 1)
            if budget is not None and taken + remaining >= budget:
                end = Position(position.version, position.starting_rank, position.index + (budget - taken))
                if end.index == len(files) - 1:
                    end = position.next_unit()
                break
            taken += remaining
            position = position.next_unit()
            if remaining > 0:
                end = position
        return start if end == origin else end.to_offset(state.reservoir_id)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        state = self._load()
        state.offset = end
        first = Position.from_offset(start, state.reservoir_id, self.table_path)
        last = Position.from_offset(end, state.reservoir_id, self.table_path)
        files: list[AddFile] = []
        position = first
        while position.unit() < last.unit():
            files.extend(self._unit(position)[position.index + 1:])
            position = position.next_unit()
        if last.index > position.index:
            files.extend(self._unit(position)[position.index + 1:last.index + 1])
        tasks = plan_read_tasks(files, min_tasks=self.options.min_partitions, open_cost=OPEN_COST_BYTES)
        newest = last.version if last.starting or last.index >= 0 else last.version - 1
        return partitions_of(tasks, table_path=self.table_path, version=newest, table_schema=state.table.schema,
                             partition_columns=state.table.partition_columns, layout=state.table.snapshot.layout)

    def commit(self, end: dict) -> None:
        if self._state is not None:
            done = Position.from_offset(end, self._state.reservoir_id, self.table_path)
            for unit in [u for u in self._state.units if u < done.unit()]:
                del self._state.units[unit]

    # --- in the read tasks ------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, options=self.options.storage, schema=self.schema)

    # --- the log ----------------------------------------------------------------------------------
    def _load(self) -> SourceState:
        if self._state is None:
            table = Table(self.options.uri, storage_options=self.options.storage)
            self._state = SourceState(table=table, reservoir_id=table.snapshot.metadata.id,
                                       schema_string=table.snapshot.metadata.schema_string,
                                       log_store=open_log_store(table.uri, storage_options=self.options.storage),
                                       newest=table.version, configuration=dict(table.snapshot.configuration),
                                       configured_at=table.version)
        return self._state

    def _unit(self, position: Position) -> list[AddFile]:
        """The files of ``position``'s unit: the snapshot's (sorted by path) or a commit's data additions."""
        state = self._load()
        cached = state.units.get(position.unit())
        if cached is None:
            if position.starting:
                cached = Table(self.options.uri, version=position.version,
                               storage_options=self.options.storage).add_actions()
            else:
                cached = self._commit_files(state, position.version)
            state.units[position.unit()] = cached
            while len(state.units) > self.CACHED_UNITS:
                state.units.popitem(last=False)
        return cached

    def _commit_files(self, state: SourceState, version: int) -> list[AddFile]:
        actions = self._commit_actions(state, version)
        removes = [a for a in actions if isinstance(a, RemoveFile) and a.data_change]
        if removes:
            if self.options.skip_change_commits:
                log.info("version %d of %s removes data: skipped (skipChangeCommits)", version, self.table_path)
                return []
            raise ChangeCommitError(
                f"version {version} of {self.table_path} removes {len(removes)} data file(s) (a delete, update or "
                f"overwrite), which a stream of appends cannot follow; the stream stopped before it. Set the "
                f"option skipChangeCommits=true to pass over such commits, or restart from a later startingVersion")
        return [a for a in actions if isinstance(a, AddFile) and a.data_change]

    def _commit_actions(self, state: SourceState, version: int) -> list[Action]:
        """The actions of commit ``version``; a change of the schema fails the stream."""
        actions = read_commit(state.log_store, version)
        for action in actions:
            if isinstance(action, Metadata) and action.schema_string != state.schema_string:
                raise InvalidArgumentError(
                    f"the schema of {self.table_path} changed at version {version}; the stream reads the schema it "
                    f"started with. Restart the query with a new checkpoint location to read the new schema")
            if isinstance(action, Metadata) and version > state.configured_at:
                state.configuration, state.configured_at = dict(action.configuration or {}), version
        return actions


@dataclass
class SourceState:
    """What the driver's reader keeps between Spark's calls: the table as the query found it, the
    newest version seen, the Trigger.AvailableNow bound, the files of recently read units, and the table's
    properties as of the newest commit read (they say which commit timestamps are in-commit ones), and the
    last offset exchanged."""

    table: Table
    reservoir_id: str
    schema_string: str
    log_store: LogStore
    newest: int
    configuration: dict[str, str | None]
    configured_at: int
    until: int | None = None
    offset: dict | None = None
    """The newest offset Spark and this reader exchanged (the start of the next batch on a pyspark that
    calls ``latestOffset()`` without one)."""
    units: OrderedDict[tuple[int, int], list[AddFile]] = field(default_factory=OrderedDict)

    def latest(self) -> int:
        """The newest version (one DynamoDB query), listed from the newest seen if DynamoDB has none."""
        self.newest = max(self.newest, self.log_store.latest_version(start=self.newest))
        return self.newest
