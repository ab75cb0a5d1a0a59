"""``format("dynacommit")``: the table as a Spark Python data source, for batch and streaming.

``register(spark)`` (classic or Spark Connect session) registers :class:`DynacommitDataSource`. Spark
then runs the staging committer itself:

- **batch write** (``df.write.format("dynacommit").mode("append" | "overwrite").save(uri)``):
  :meth:`DynacommitDataSource.writer` runs once on the driver (plans the job: already in the table?
  partition columns, schema, job id); each task's :meth:`DynacommitWriter.write` stages its rows as
  incomplete multipart uploads and returns its PendingSet as the task's commit message; the driver's
  :meth:`DynacommitWriter.commit` runs the job commit (one log entry), :meth:`DynacommitWriter.abort`
  aborts the uploads of a failed job (those reported, and by the job id those of attempts that
  reported nothing);
- **batch read** (``spark.read.format("dynacommit").load(uri)``): :class:`DynacommitReader`, at the
  newest version, ``versionAsOf`` or ``timestampAsOf`` (the version by Delta's rules,
  :mod:`table.log.timestamps`);
- **streaming**: :mod:`spark_integration.streaming` (sink and source);
- **the change data feed** (``readChangeFeed=true``, batch and streaming): :mod:`spark_integration.changes`.

What Spark 4.3 allows a Python data source, found by running it (see the README's Spark section):
``.partitionBy(...)`` is refused by Spark ("partitioning ... do not match the existing table's"), so
partition columns are the ``partitionBy`` option (``"a,b"``); ``mode("error")`` and ``mode("ignore")``
are refused by Spark (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``) before the source is asked, so the
source serves ``append`` and ``overwrite`` (``write_dataframe`` keeps ``error``/``ignore``); column
pruning is not pushed to Python data sources (the scan builder implements ``SupportsPushDownFilters``
only), so a read returns every column of its schema; pass ``.schema("a bigint, b string")`` to read
fewer; filters are pushed only with ``spark.sql.python.filterPushdown.enabled=true``, which
:func:`register` sets (a reader that takes filters fails when it is false). Spark 4.0 pushes no filter to a
Python data source: there every file of the version is read and Spark filters (:mod:`spark_integration.compat`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from logstore import TableUri, open_object_store
from logstore.errors import InvalidArgumentError
from spark_integration.changes import ChangeFeedReader, ChangeFeedStreamReader, change_feed_schema
from spark_integration.commit import commit_job, commit_replace_on, commit_replace_where
from spark_integration.compat import FEATURES, log_degradations
from spark_integration.options import (
    ReadOptions,
    WriteOptions,
    parse_read,
    parse_schema_options,
    parse_stream_read,
    parse_write,
)
from spark_integration.read import (
    OPEN_COST_BYTES,
    check_columns,
    partitions_of,
    plan_read_tasks,
    read_partition,
    spark_schema,
)
from spark_integration.session import executor_python
from spark_integration.streaming import DynacommitStreamReader, DynacommitStreamWriter
from spark_integration.write import (
    StageTask,
    abort_job,
    arrow_write_schema,
    select_pendingsets,
)
from table.data.writer_settings import WriterSettings
from table.data.pendingset import PendingSet
from table.data.read import prune_files
from table.data.uploads import abort_pending
from table.data.writespec import WritePlan, WriteSpec
from table.operations import replace_on as replace_on_op
from table.operations.replace_on import ReplaceOn
from table.operations.replace_where import SPARK, ReplaceWhere, check_spec
from table.table import Table

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter

__all__ = ["FILTER_PUSHDOWN_CONF", "DynacommitDataSource", "DynacommitReader", "DynacommitWriter", "StagedMessage",
           "register"]

log = logging.getLogger(__name__)

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark) -> None:
    """Register the ``dynacommit`` data source in ``spark`` (a classic or a Spark Connect session) and
    turn on filter pushdown for Python data sources in it where pyspark has it; what the installed
    pyspark lacks is logged once (:mod:`spark_integration.compat`). Safe to call more than once."""
    executor_python(spark)
    spark.dataSource.register(DynacommitDataSource)
    if FEATURES.filter_pushdown:
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    log_degradations()


class DynacommitDataSource(DataSource):
    """The ``dynacommit`` format. Options: see :mod:`spark_integration.options`. Planning runs in Spark's
    Python workers on the driver; what they decide travels to the tasks as plain picklable data."""

    @classmethod
    def name(cls) -> str:
        return "dynacommit"

    def schema(self) -> StructType:
        """The table's schema at the version read (``versionAsOf``, the version of ``timestampAsOf``, or the
        latest), which the read is then pinned to: Spark pickles this instance, with the version, into the
        reader's planning. For the change data feed: its schema, pinned to the range's end."""
        parsed = parse_schema_options(self.options)
        if parsed.change_feed is not None:
            schema, self._pinned_end = change_feed_schema(parsed)
            return schema
        table = Table(parsed.uri, version=parsed.version, timestamp=parsed.timestamp, storage_options=parsed.storage)
        self._pinned_version = table.version
        return spark_schema(table.schema)

    def reader(self, schema: StructType) -> DynacommitReader | ChangeFeedReader:
        parsed = parse_read(self.options)
        if parsed.change_feed is not None:
            return ChangeFeedReader(parsed, schema, end=getattr(self, "_pinned_end", None))
        version = parsed.version if parsed.version is not None else getattr(self, "_pinned_version", None)
        if version is None and parsed.timestamp is not None:  # a schema given with .schema(): schema() did not run
            version = Table(parsed.uri, timestamp=parsed.timestamp, storage_options=parsed.storage).version
        return DynacommitReader(parsed, schema, version=version)

    def writer(self, schema: StructType, overwrite: bool) -> DynacommitWriter:
        return DynacommitWriter.plan(parse_write(self.options), schema, overwrite=overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DynacommitStreamWriter:  # noqa: N802 - Spark's
        return DynacommitStreamWriter.plan(self.options, schema, overwrite=overwrite)

    def streamReader(self, schema: StructType) -> DynacommitStreamReader:  # noqa: N802 - Spark's name
        if parse_stream_read(self.options).change_feed:
            return ChangeFeedStreamReader(self.options, schema)
        return DynacommitStreamReader(self.options, schema)


# --- batch write -------------------------------------------------------------------------------------


@dataclass
class StagedMessage(WriterCommitMessage):
    """A task's commit message: its PendingSet as JSON (None when the job had nothing to stage), and the
    further ones it staged (a replaceWhere's ``insert`` change data)."""

    pendingset: str | None
    more: list[str] | None = None
    keys: bytes | None = None  # a replaceOn / replaceUsing task's kept values (Arrow IPC)


class DynacommitWriter(DataSourceArrowWriter):
    """One batch write job. Built on the driver by :meth:`plan`, pickled to every task and to the
    driver's commit; holds plain data only (never a Table or a client)."""

    def __init__(self, *, options: WriteOptions, spec: WriteSpec, plan: WritePlan, job_id: str,
                 replace_where: ReplaceWhere | ReplaceOn | None = None):
        self.options = options
        self.spec = spec
        self.job = plan
        self.job_id = job_id
        self.replace_where = replace_where
        self.table_path = TableUri.parse(options.uri).table_path
        self.planned_at = time.time()

    @classmethod
    def plan(cls, options: WriteOptions, schema: StructType, *, overwrite: bool) -> DynacommitWriter:
        """Job setup on the driver, before any task runs: refuses what cannot be written (schema, partition
        columns, options) and skips a job the table already holds (``txnAppId`` + ``txnVersion``)."""
        if options.schema_mode == "overwrite" and (not overwrite or options.partition_overwrite == "dynamic"):
            raise InvalidArgumentError(
                "option overwriteSchema replaces the table's schema: it needs .mode('overwrite') with a static "
                "(whole-table) overwrite; use option mergeSchema to add the data's new columns while appending")
        spec = WriteSpec.of(mode="overwrite" if overwrite else "append", partition_by=options.partition_by,
                            partition_overwrite=options.partition_overwrite, app_id=options.app_id,
                            app_version=options.app_version, user_metadata=options.user_metadata,
                            schema_mode=options.schema_mode, configuration=options.configuration,
                            cluster_by=options.cluster_by)
        table = Table.for_write(options.uri, storage_options=options.storage)
        replace_where: ReplaceWhere | ReplaceOn | None = None
        matching = options.replace_on is not None or options.replace_using is not None
        if matching:
            replace_on_op.check_spec(table, spec, on=options.replace_on, using=options.replace_using,
                                     spelling=replace_on_op.SPARK, replace_where=options.replace_where)
        elif options.source_alias is not None or options.target_alias is not None:
            raise InvalidArgumentError("options sourceAlias and targetAlias name the two sides of replaceOn; "
                                       "give option replaceOn too, or leave them out")
        elif options.replace_where is not None:
            check_spec(table, spec, SPARK)
        plan = spec.plan(table, arrow_write_schema(schema))
        if matching and plan.done is None:
            replace_where = ReplaceOn.plan(table, spec, arrow_write_schema(schema), on=options.replace_on,
                                           using=options.replace_using, source_alias=options.source_alias,
                                           target_alias=options.target_alias, spelling=replace_on_op.SPARK,
                                           write_schema=plan.schema)
        elif options.replace_where is not None and plan.done is None:
            replace_where = ReplaceWhere.plan(table, spec, options.replace_where, SPARK)
        return cls(options=options, spec=spec, plan=plan, job_id=str(uuid.uuid4()), replace_where=replace_where)

    def __repr__(self) -> str:
        return f"DynacommitWriter(job={self.job_id}, table={self.table_path})"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        """Task side: stage this task's rows; the PendingSet is the commit message."""
        if self.job.done is not None:
            return StagedMessage(pendingset=None)
        context = TaskContext.get()
        task = StageTask(table_path=self.table_path, options=self.options.storage, schema=self.job.schema,
                         partition_by=self.job.partition_by, job_id=self.job_id,
                         settings=WriterSettings.of(self.job.configuration, compression=self.options.compression,
                                                    target_file_size=self.options.target_file_size),
                         fill_missing=self.job.fill_missing, layout=self.job.layout,
                         replace_where=self.replace_where, rules=self.job.rules)
        staged, keys = task.run_keeping(iterator, task_id=context.partitionId(), attempt_id=context.attemptNumber())
        return StagedMessage(pendingset=staged[0].model_dump_json(),
                             more=[p.model_dump_json() for p in staged[1:]] or None, keys=keys)

    def commit(self, messages: Sequence[StagedMessage | None]) -> None:
        """Driver side, every task done: one log entry for the job (or nothing, if it has nothing to do)."""
        if self.job.done is not None:
            log.info("job %s: nothing to write to %s (%s)", self.job_id, self.table_path, self.job.done.metrics)
            return
        kept, strays = select_pendingsets(_pendingsets(messages))
        table = Table.for_write(self.options.uri, storage_options=self.options.storage)
        if strays:
            abort_pending(table.objects, strays)
        if isinstance(self.replace_where, ReplaceOn):
            keys = {(p.task_id, p.attempt_id): m.keys for m in messages if m is not None and m.keys is not None
                    and m.pendingset is not None for p in [PendingSet.load(m.pendingset)]}
            result = commit_replace_on(table, self.replace_where, kept, keys, self.spec, self.job, job_id=self.job_id,
                                       upload_seconds=time.time() - self.planned_at)
        elif self.replace_where is not None:
            result = commit_replace_where(table, self.replace_where, kept, self.spec, self.job, job_id=self.job_id,
                                          upload_seconds=time.time() - self.planned_at)
        else:
            result = commit_job(table, kept, self.spec, self.job, job_id=self.job_id,
                                upload_seconds=time.time() - self.planned_at)
        log.info("job %s committed %d task(s) to %s: %s", self.job_id, len(kept), self.table_path, result)

    def abort(self, messages: Sequence[StagedMessage | None]) -> None:
        """Driver side, the job failed: abort what the tasks reported, then every other upload of the job."""
        if self.job.done is not None:
            return
        uri = TableUri.parse(self.options.uri)
        objects = open_object_store(uri, storage_options=self.options.storage)
        aborted = abort_pending(objects, _pendingsets(messages))
        aborted += abort_job(objects, uri, self.job_id, tasks_may_run=True)
        log.warning("job %s writing %s failed: nothing was committed; %d staged upload(s) aborted", self.job_id,
                    uri.table_path, aborted)


def _pendingsets(messages: Sequence[StagedMessage | None]) -> list[PendingSet]:
    return [PendingSet.load(text) for m in messages if m is not None
            for text in ([m.pendingset] if m.pendingset is not None else []) + list(m.more or ())]


# --- batch read --------------------------------------------------------------------------------------


class DynacommitReader(DataSourceReader):
    """One batch read: the table at one version; the filters Spark pushes that mean the same in pyarrow
    (:mod:`spark_integration.filters`) prune files and rows; every task gets only its own files.

    Pickled into Spark's read function after :meth:`pushFilters` and before :meth:`partitions`, so it
    holds the options, the version, the schema asked for and the filter expression, never the files.
    """

    def __init__(self, options: ReadOptions, schema: StructType, *, version: int | None):
        self.options = options
        self.schema = schema
        self.version = version
        self.filter: pc.Expression | None = None

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 - Spark's name
        """Keep the filters with an exact pyarrow equivalent; give the others back to Spark. Only a pyspark
        with filter pushdown calls it, and only such a pyspark has the Filter classes that module reads."""
        from spark_integration import filters as spark_filters

        arrow = arrow_write_schema(self.schema)
        taken = []
        for f in filters:
            expression = spark_filters.to_expression(f, arrow)
            if expression is None:
                yield f
            else:
                taken.append(expression)
        self.filter = spark_filters.combine(taken)

    def partitions(self) -> list[InputPartition]:
        table = Table(self.options.uri, version=self.version, storage_options=self.options.storage)
        snapshot = table.snapshot
        assert snapshot is not None
        check_columns(self.schema, table.schema, table=table.uri.table_path)
        files = snapshot.files if self.filter is None else prune_files(snapshot, self.filter)
        log.info("read of %s at version %d: %d of %d file(s) after pruning", table.uri.table_path, table.version,
                 len(files), len(snapshot.files))
        tasks = plan_read_tasks(files, min_tasks=self.options.min_partitions, open_cost=OPEN_COST_BYTES)
        return partitions_of(tasks, table_path=table.uri.table_path, version=table.version,
                             table_schema=table.schema, partition_columns=table.partition_columns,
                             layout=snapshot.layout)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, options=self.options.storage, schema=self.schema, filter=self.filter)
