"""Writing a Spark DataFrame into a dynacommit table: the S3A staging committer, on Spark.

The job runs the steps of docs/protocol.md ("The staging committer"); each is one function here:

1. **Job setup** (driver, :func:`write_dataframe`): :meth:`~table.data.writespec.WriteSpec.plan` (is the job
   already in the table? which partition columns?), a job id (a UUID, carried by every data file's
   key), the table's Arrow schema from the DataFrame's Spark schema (:func:`arrow_write_schema`), and a
   :class:`StageTask`: plain picklable data (table URI, storage options, schema, job id).
2. **Stage** (executors, :meth:`StageTask.__call__` through ``df.mapInArrow``): each Spark task streams
   its partition's Arrow batches through :class:`~table.data.staging.StagingWriter` straight into multipart
   uploads of the final keys and never completes them.
3. **Task commit**: ``finish()`` gives the task's :class:`~table.data.staging.PendingSet`, returned as the
   task's *result* (one row: task id, attempt, PendingSet JSON) and collected on the driver. Nothing
   lists S3 to find work. A task that fails after staging aborts its own uploads, then re-raises, and
   Spark retries it (the retry stages afresh under another upload id).
4. **Select** (driver, :func:`select_pendingsets`): exactly one PendingSet per task id, the first one
   seen; any other (a speculative duplicate) is a stray, and its uploads are aborted.
5. **Job commit** (driver, :func:`spark_integration.commit.commit_job`, the table's job commit):
   completes every kept upload in parallel (a job of many files on the executors, a Spark job over the
   PendingSets: :mod:`spark_integration.completion`; a smaller one on the driver's bounded pool), then
   commits ONE log entry (retrying on lost races, idempotent with ``app_id``), then aborts the uploads
   of the job that no kept PendingSet names (attempts whose result never reached the driver: found by the
   job id in their keys). On a definite failure it deletes what it completed and aborts the rest; on
   ``CommitStateUnknownError`` it leaves everything, since the commit may be visible.
6. **Job abort** (driver, :func:`abort_job`): when the Spark job fails, every upload of the job is
   aborted (by the job id in their keys); no version was written, so nothing of the job is visible.

Credentials reach executors only inside the pickled :class:`StageTask` (the closure), never in a column
expression: the query plan shows ``StageTask(...)`` with the table and the job id, the ``repr`` of
:class:`~logstore.options.StorageOptions` hides secrets, and nothing here logs the options.

Limits, as in the S3A design: a task attempt that Spark kills (a losing speculative attempt, a job
cancelled mid-flight) may still be creating uploads after the job's sweep. A failed job sweeps a second time
once Spark has ended the tasks it cancelled (:data:`KILLED_TASK_GRACE_SECONDS`); what a killed attempt
creates after that stays incomplete, so invisible, until the bucket's lifecycle rule or
``dynacommit uploads abort`` removes it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from logstore import (
    DynacommitError,
    ObjectStore,
    StorageOptions,
    TableUri,
    open_object_store,
)
from logstore.errors import InvalidArgumentError
from spark_integration import completion
from spark_integration.commit import commit_job, commit_replace_on, commit_replace_where
from spark_integration.compat import to_arrow_schema
from spark_integration.session import arrow_batches_for_writing, batch_rows, executor_python
from spark_integration.worker import freeze_imports
from table.compression import codec
from table.data.pendingset import PendingSet
from table.data.staging import StagingWriter
from table.data.writer_settings import WriterSettings
from table.data.uploads import abort_pending, abort_stray_uploads
from table.data.writespec import CommitResult, WritePlan, WriteSpec
from table.errors import SparkJobError
from table.log.column_mapping import Layout
from table.log.constraints import TableRules
from table.log.schema import arrow_to_delta, delta_to_arrow
from table.operations import replace_on as replace_on_op
from table.operations.replace_on import ReplaceOn, encode_keys
from table.operations.replace_where import ReplaceWhere, check_spec
from table.table import Table

__all__ = ["SparkJobError", "StageTask", "abort_job", "arrow_write_schema", "plan_text", "select_pendingsets",
           "write_dataframe"]

IDENTITY_SLOTS = 1 << 12
"""How many tasks share a job's identity values when their number is not known beforehand (the data
source's and streaming writes, Spark's DML): task ``i`` hands out ``first + step * (i + IDENTITY_SLOTS * k)``,
so values are unique across tasks but spaced out (Delta's writers leave gaps too). A task whose index
is this large is refused (table.data.rules)."""

log = logging.getLogger(__name__)

TASK_RESULT_SCHEMA = "task_id int, attempt int, pendingset string, keys binary"
_RESULT_ARROW = pa.schema([("task_id", pa.int32()), ("attempt", pa.int32()), ("pendingset", pa.string()),
                          ("keys", pa.binary())])

TaskHook = Callable[["StageTask", PendingSet], Iterable[PendingSet] | None]
"""Test seam: runs in the task right after ``finish()``. Raising fails the attempt after staging; PendingSets
it returns are reported as further task results (a simulated speculative attempt)."""


def write_dataframe(df: DataFrame, uri: str, *, mode: str = "append", partition_by: Sequence[str] | None = None,
                    storage_options: dict[str, str] | StorageOptions | None = None, app_id: str | None = None,
                    app_version: int | None = None, partition_overwrite: str = "static",
                    target_file_size: int | None = None, user_metadata: str | None = None,
                    schema_mode: str | None = None, compression: str | None = None,
                    configuration: Mapping[str, str] | None = None, replace_where: str | None = None,
                    cluster_by: Sequence[str] | None = None, replace_on: str | None = None,
                    replace_using: str | Sequence[str] | None = None, source_alias: str | None = None,
                    target_alias: str | None = None) -> CommitResult:
    """Write ``df`` to the table at ``uri`` as one commit; returns its ``CommitResult`` (version, typed
    ``WriteMetrics`` counted as ``write_table`` counts them, the table's snapshot at that version).

    ``mode`` is ``append``, ``overwrite``, ``error`` or ``ignore``; with ``overwrite``,
    ``partition_overwrite="dynamic"`` replaces only the partitions ``df`` writes to. ``app_id`` and
    ``app_version`` make the job idempotent: a commit whose version is not newer than the table's for
    that ``app_id`` is skipped. ``target_file_size`` (bytes) bounds each data file. ``user_metadata`` is
    recorded in the commit's ``commitInfo`` (Delta's ``userMetadata``). ``schema_mode`` is
    ``write_table``'s: ``"merge"`` adds the data's new columns (Delta's ``mergeSchema``), ``"overwrite"``
    (with ``mode="overwrite"``) replaces the schema (``overwriteSchema``). The executors reach
    S3 with ``storage_options`` (delta-rs key names, falling back to the environment). ``compression`` is
    the data files' Parquet codec under Spark's names (``snappy``, the default; ``zstd``, ``gzip``,
    ``lz4``, ``lz4_raw``, ``brotli``, ``none``), named in the files' names as Spark names them
    (``part-00000-<job>-c000.zstd.parquet``). ``configuration``: the Delta table properties of a table this
    write creates (``write_table``'s; ``{"delta.enableChangeDataFeed": "true"}``). ``replace_where`` (with
    ``mode="overwrite"``; Delta's ``replaceWhere``, ``write_table``'s ``predicate``): replace only the rows this
    SQL predicate selects; every row of ``df`` must satisfy it (:mod:`table.operations.replace_where`).
    ``cluster_by``: the liquid clustering columns of a table this write creates (``write_table``'s,
    delta-spark's ``clusterBy``). ``replace_on`` / ``replace_using`` (with ``mode="overwrite"``; Delta's
    ``replaceOn`` / ``replaceUsing``, ``write_table``'s): replace the table's rows that match a row of ``df``
    and add ``df``, in one commit (:mod:`table.operations.replace_on`); ``source_alias`` / ``target_alias``
    name ``df`` and the table in ``replace_on`` (default ``source`` / ``target``).
    """
    return _write_dataframe(df, uri, mode=mode, partition_by=partition_by, storage_options=storage_options,
                            app_id=app_id, app_version=app_version, partition_overwrite=partition_overwrite,
                            target_file_size=target_file_size, user_metadata=user_metadata, schema_mode=schema_mode,
                            compression=compression, configuration=configuration, replace_where=replace_where,
                            cluster_by=cluster_by, replace_on=replace_on, replace_using=replace_using,
                            source_alias=source_alias, target_alias=target_alias)


def _write_dataframe(df: DataFrame, uri: str, *, mode: str = "append", partition_by: Sequence[str] | None = None,
                     storage_options: dict[str, str] | StorageOptions | None = None, app_id: str | None = None,
                     app_version: int | None = None, partition_overwrite: str = "static",
                     target_file_size: int | None = None, user_metadata: str | None = None,
                     schema_mode: str | None = None, task_hook: TaskHook | None = None,
                     job_id: str | None = None, compression: str | None = None,
                     complete_min_files: int | None = None,
                     complete_files_per_task: int = completion.FILES_PER_TASK,
                     complete_failpoints: str | None = None,
                     configuration: Mapping[str, str] | None = None, replace_where: str | None = None,
                     cluster_by: Sequence[str] | None = None, replace_on: str | None = None,
                     replace_using: str | Sequence[str] | None = None, source_alias: str | None = None,
                     target_alias: str | None = None) -> CommitResult:
    """:func:`write_dataframe` with test seams: ``task_hook`` (see :data:`TaskHook`), a fixed ``job_id``, and
    the executor completion's thresholds and failpoints (:class:`~spark_integration.completion.ExecutorCompleter`)."""
    spec = WriteSpec.of(mode=mode, partition_by=partition_by, partition_overwrite=partition_overwrite,
                        app_id=app_id, app_version=app_version, user_metadata=user_metadata, schema_mode=schema_mode,
                        configuration=configuration, cluster_by=cluster_by)
    parquet_codec = codec(compression) if compression is not None else None  # a bad name fails here, early
    executor_python(df.sparkSession)
    options = StorageOptions.resolve(storage_options)
    table_uri = TableUri.parse(uri)

    # 1. Job setup.
    table = Table.for_write(uri, storage_options=options)
    matching = replace_on is not None or replace_using is not None
    if matching:
        replace_on_op.check_spec(table, spec, on=replace_on, using=replace_using, replace_where=replace_where)
    elif source_alias is not None or target_alias is not None:
        raise InvalidArgumentError("source_alias and target_alias name the two sides of replace_on; give "
                                   "replace_on too, or leave them out")
    elif replace_where is not None:
        check_spec(table, spec)
    plan = spec.plan(table, arrow_write_schema(df.schema))
    if plan.done is not None:
        return plan.done
    replacing: ReplaceWhere | ReplaceOn | None = None
    if matching:
        replacing = ReplaceOn.plan(table, spec, arrow_write_schema(df.schema), on=replace_on, using=replace_using,
                                   source_alias=source_alias, target_alias=target_alias, write_schema=plan.schema)
    elif replace_where is not None:
        replacing = ReplaceWhere.plan(table, spec, replace_where)
    job_id = job_id or str(uuid.uuid4())
    settings = WriterSettings.of(plan.configuration, compression=parquet_codec, target_file_size=target_file_size)
    task = StageTask(table_path=table_uri.table_path, options=options, schema=plan.schema,
                     partition_by=plan.partition_by, job_id=job_id, settings=settings,
                     hook=task_hook, fill_missing=plan.fill_missing, layout=plan.layout, replace_where=replacing,
                     rules=plan.rules,
                     identity_slots=_partitions(df) if plan.rules.identity else IDENTITY_SLOTS)
    staged = df.mapInArrow(task, TASK_RESULT_SCHEMA)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("job %s stages %s with the plan:\n%s", job_id, table_uri.table_path, plan_text(staged))

    # 2.-3. Stage in the executors; each task's PendingSet comes back as its result.
    objects = open_object_store(table_uri, storage_options=options)
    started = time.monotonic()
    try:
        with arrow_batches_for_writing(df.sparkSession, batch_rows(plan.schema)):
            rows = staged.collect()
    except Exception as exc:
        aborted = abort_job(objects, table_uri, job_id, tasks_may_run=True)
        raise SparkJobError(
            f"the Spark job {job_id} writing table {table_uri.table_path} failed before its commit: nothing "
            f"was committed and {aborted} staged upload(s) were aborted. Cause: {root_cause(exc)}"
        ) from exc
    except BaseException:
        abort_job(objects, table_uri, job_id, tasks_may_run=True)
        raise
    upload_seconds = time.monotonic() - started

    # 4. One PendingSet per task; abort the others' uploads now, the sweep below catches the rest.
    keys = {(row.task_id, row.attempt): row["keys"] for row in rows if row["keys"] is not None}
    try:
        kept, strays = select_pendingsets(PendingSet.load(row.pendingset) for row in rows)
    except BaseException:
        abort_job(objects, table_uri, job_id)
        raise
    if strays:
        log.info("job %s: %d duplicate task attempt(s) discarded (tasks %s)", job_id, len(strays),
                 sorted({p.task_id for p in strays}))
        abort_pending(objects, strays)

    # 5. Job commit (it cleans up after itself on a definite failure).
    completer = completion.ExecutorCompleter(df.sparkSession, table_path=table_uri.table_path, options=options,
                                             min_files=completion.min_files(df.sparkSession, complete_min_files),
                                             files_per_task=complete_files_per_task,
                                             failpoints=complete_failpoints)
    if isinstance(replacing, ReplaceOn):
        result = commit_replace_on(table, replacing, kept, keys, spec, plan, job_id=job_id,
                                   upload_seconds=upload_seconds)
    elif replacing is not None:
        result = commit_replace_where(table, replacing, kept, spec, plan, job_id=job_id, upload_seconds=upload_seconds)
    else:
        result = commit_job(table, kept, spec, plan, job_id=job_id, upload_seconds=upload_seconds,
                            completer=completer)
    log.info("job %s committed %d task(s) to %s: %s", job_id, len(kept), table_uri.table_path, result)
    return result


def root_cause(exc: BaseException) -> str:
    """The last line of a Python worker's traceback (what failed in the task), or the error itself."""
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if not line.startswith((" ", "\t", "at ", "Caused by", "File ")) and ":" in line:
            return line.strip()
    return lines[-1].strip() if lines else type(exc).__name__


def arrow_write_schema(spark_schema: StructType) -> pa.Schema:
    """The Arrow schema of a DataFrame, in Delta's Arrow types, every column nullable: Spark's nullability
    is a property of a plan, not of the data, so a new table is created as delta-spark creates it, and
    into an existing table the data is written with the table's schema (``WriteSpec.plan``), its NOT NULL
    columns checked batch by batch in the tasks."""
    data = to_arrow_schema(spark_schema)
    return pa.schema([f.with_nullable(True) for f in delta_to_arrow(arrow_to_delta(data))])


def select_pendingsets(pendingsets: Iterable[PendingSet]) -> tuple[list[PendingSet], list[PendingSet]]:
    """``(kept, strays)``: the first PendingSet of each task id (ordered by task id), and every other one.

    Spark returns one result per task, but a speculative or re-executed attempt may also have staged
    (and, in tests, reported) its output: committing both would write the task's rows twice.
    """
    kept: dict[int, PendingSet] = {}
    strays: list[PendingSet] = []
    for pending in pendingsets:
        if pending.task_id in kept:
            strays.append(pending)
        else:
            kept[pending.task_id] = pending
    return [kept[t] for t in sorted(kept)], strays


KILLED_TASK_GRACE_SECONDS = 3.0
"""How long after a failed job's first sweep the second one runs. When one task fails the job, Spark kills
the job's other running tasks, but a killed task's Python worker runs on (and may create uploads) until
``spark.python.task.killTimeout`` (2 s by default) has passed and Spark ends it."""


def abort_job(objects: ObjectStore, uri: TableUri, job_id: str, *, tasks_may_run: bool = False) -> int:
    """Job abort: abort every incomplete upload of ``job_id`` under the table. Best effort (a failing
    listing is logged, not raised: it runs while another error propagates). ``tasks_may_run``: the Spark job
    failed, so tasks Spark is killing may still be staging: sweep again once they are gone
    (:data:`KILLED_TASK_GRACE_SECONDS`). Returns how many it aborted."""
    aborted = _sweep(objects, uri, job_id)
    if tasks_may_run and aborted is not None:
        time.sleep(KILLED_TASK_GRACE_SECONDS)
        again = _sweep(objects, uri, job_id)
        aborted += again or 0
    if aborted is not None:
        log.info("job %s failed before its commit: aborted %d staged upload(s) under %s", job_id, aborted,
                 uri.table_path)
    return aborted or 0


def _sweep(objects: ObjectStore, uri: TableUri, job_id: str) -> int | None:
    try:
        return abort_stray_uploads(objects, uri, job_id, ())
    except (DynacommitError, OSError) as exc:  # must not hide the job's own failure
        log.warning("job %s failed and its uploads under %s could not be listed for abort (%s); run "
                    "`dynacommit uploads abort %s --execute` to remove them", job_id, uri.table_path, exc,
                    uri.table_path)
        return None


def plan_text(df: DataFrame) -> str:
    """The extended plan of ``df`` as text, through the DataFrame API only (a Spark Connect DataFrame has
    no JVM handle): what ``df.explain(extended=True)`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(extended=True)
    return out.getvalue()


def _partitions(df: DataFrame) -> int:
    """How many tasks will stage ``df``: its partitions (identity values are shared among them). A Spark
    Connect DataFrame has no RDD to ask: then :data:`IDENTITY_SLOTS`."""
    try:
        return max(1, df.rdd.getNumPartitions())
    except (AttributeError, NotImplementedError):  # Connect: PySparkNotImplementedError
        return IDENTITY_SLOTS


class StageTask:
    """The function each Spark task runs (``df.mapInArrow(task, TASK_RESULT_SCHEMA)``): stage, report.

    Plain picklable data: Spark ships it to the executors in the task closure, where it opens its own
    object store from ``options``. Its ``repr`` (what a query plan may show) names the table and the job
    only, never the options.
    """

    def __init__(self, *, table_path: str, options: StorageOptions, schema: pa.Schema, partition_by: tuple[str, ...],
                 job_id: str, settings: WriterSettings | None = None, hook: TaskHook | None = None,
                 fill_missing: bool = False, layout: Layout | None = None,
                 replace_where: ReplaceWhere | ReplaceOn | None = None, rules: TableRules | None = None,
                 identity_slots: int = IDENTITY_SLOTS):
        self.table_path = table_path
        self.options = options
        self.schema = schema
        self.partition_by = partition_by
        self.job_id = job_id
        #: The Parquet settings of the files (codec, target size, encodings: :mod:`table.data.writer_settings`).
        self.settings = settings if settings is not None else WriterSettings.of()
        self.hook = hook
        #: A write that merges the schema (``WritePlan.fill_missing``): the table's columns the data lacks are
        #: written as nulls, narrower types cast to the table's.
        self.fill_missing = fill_missing
        #: The table's column mapping (``WritePlan.layout``): files hold physical names and field ids.
        self.layout = layout
        #: A replaceWhere overwrite: every row is checked against its predicate, and the task stages under the
        #: task numbers it gives (with the change data feed, also the rows' ``insert`` change data). A
        #: replaceOn / replaceUsing overwrite likewise, and the task keeps the values the condition reads.
        self.replace_where = replace_where
        #: The table's rules on rows (``WritePlan.rules``), enforced by each task's writer; identity values are
        #: shared out among ``identity_slots`` tasks (task ``i`` takes every ``identity_slots``-th from slot ``i``).
        self.rules = rules
        self.identity_slots = identity_slots
        self.__name__ = "StageTask"  # pyspark names the Python UDF of the plan after it

    def __repr__(self) -> str:
        return f"StageTask(job={self.job_id}, table={self.table_path})"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        context = TaskContext.get()
        task_id, attempt = context.partitionId(), context.attemptNumber()
        reported, keys = self.run_keeping(batches, task_id=task_id, attempt_id=attempt)
        yield pa.RecordBatch.from_pydict(
            {"task_id": [p.task_id for p in reported], "attempt": [p.attempt_id for p in reported],
             "pendingset": [p.model_dump_json() for p in reported],
             "keys": [keys if i == 0 else None for i in range(len(reported))]},
            schema=_RESULT_ARROW,
        )

    def run(self, batches: Iterable[pa.RecordBatch | pa.Table], *, task_id: int, attempt_id: int) -> list[PendingSet]:
        """Stage ``batches`` as task ``task_id``, attempt ``attempt_id``; returns what to report.

        On any failure, before or after ``finish()``, this attempt's uploads are aborted and the error
        re-raised (task abort), so a retried task leaves nothing of its failed attempt behind.
        """
        return self.run_keeping(batches, task_id=task_id, attempt_id=attempt_id)[0]

    def run_keeping(self, batches: Iterable[pa.RecordBatch | pa.Table], *, task_id: int, attempt_id: int
                    ) -> tuple[list[PendingSet], bytes | None]:
        """:meth:`run`, and for a replaceOn / replaceUsing overwrite the values the task kept (Arrow IPC bytes,
        :func:`~table.operations.replace_on.encode_keys`; None otherwise)."""
        keys: bytes | None = None
        conform = WritePlan(self.schema, tuple(self.partition_by), False, fill_missing=True,
                            rules=self.rules or TableRules()).conform \
            if self.fill_missing else None
        # the writer checks names, types and NOT NULL columns, and casts
        rows = (batch if conform is None else conform(batch) for batch in batches)
        if isinstance(self.replace_where, ReplaceOn):
            staged, _, kept = self.replace_where.stage(
                rows, lambda task, change_data: self.writer(task_id=task, attempt_id=attempt_id,
                                                            change_data=change_data, slot=task_id), index=task_id)
            keys = encode_keys(kept)
        elif self.replace_where is not None:
            staged, _ = self.replace_where.stage(
                rows, lambda task, change_data: self.writer(task_id=task, attempt_id=attempt_id,
                                                            change_data=change_data, slot=task_id), index=task_id)
        else:
            writer = self.writer(task_id=task_id, attempt_id=attempt_id)
            try:
                for batch in rows:
                    writer.write(batch)
                staged = [writer.finish()]
            except BaseException:
                writer.abort()
                raise
        try:
            extra = list(self.hook(self, staged[0]) or ()) if self.hook is not None else []
        except BaseException:
            abort_pending(open_object_store(TableUri.parse(self.table_path), storage_options=self.options), staged)
            raise
        log.debug("task %d attempt %d of job %s staged %d file(s)", task_id, attempt_id, self.job_id,
                  sum(len(p.files) for p in staged))
        return [*staged, *extra], keys

    def writer(self, *, task_id: int, attempt_id: int, change_data: bool = False,
               slot: int | None = None) -> StagingWriter:
        """A writer of this task's files; ``slot``: the task's share of identity values (default ``task_id``)."""
        uri = TableUri.parse(self.table_path)
        return StagingWriter(open_object_store(uri, storage_options=self.options), uri, schema=self.schema,
                             partition_by=list(self.partition_by), job_id=self.job_id, task_id=task_id,
                             attempt_id=attempt_id, layout=self.layout, settings=self.settings,
                             change_data=change_data, rules=self.rules,
                             slot=task_id if slot is None else slot, slots=self.identity_slots)
