"""The driver side shared by DELETE, UPDATE and MERGE on Spark: candidates, the target's rows as a
DataFrame, the rewrite job, and what it hands to the one commit path.

Every operation is a ``stage(snapshot, job_id) -> Staged`` function run by
:func:`table.operations.rewrite.execute`, the loop the Python operations use: it stages on the newest
snapshot, commits the ``Staged`` through the table's job commit (uploads completed, ONE log entry with a
``remove`` per rewritten file, an ``add`` per new file and a ``cdc`` per change data file, Delta's conflict
checks against what was read), and on a conflict plans and runs the Spark jobs again on the newer
version. The Spark jobs do not count against the operation's deadline (``DYNACOMMIT_TIMEOUT_SECONDS``,
``execute(staging_timed=False)``): a MERGE of a big table takes minutes; the deadline bounds the commits
and the re-planning. Staging here is:

1. **plan** (driver): the candidate files (:mod:`spark_integration.dml.pruning`), the target's rows
   as a DataFrame read by :class:`~spark_integration.dml.tasks.TargetReadTask` (each row with its file
   and row number);
2. **compute** (Spark): the operation's DataFrame over those rows (the condition, the MERGE join, the
   new values, cast to the columns' types, all Spark SQL);
3. **rewrite** (Spark tasks): :class:`~spark_integration.dml.tasks.RewriteTask` stages the files that
   hold a changed row, and the change data, as incomplete multipart uploads; each task's PendingSets and
   report are its result (:func:`run_rewrite`);
4. **select** (driver): one result per task (the others' uploads aborted), the files rewritten, the
   metrics. If the job fails, every upload of the job is aborted (found by the job id in their keys) and
   :class:`~table.errors.SparkJobError` raised: nothing was committed.

A driver that dies between 4 and the commit leaves only incomplete uploads, invisible to every reader,
which ``dynacommit uploads abort`` (or the bucket's lifecycle rule) removes; a test's hook
(:mod:`spark_integration._hooks`) runs exactly there.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from logstore import StorageOptions, TableUri, open_object_store
from spark_integration.dml.tasks import (
    RESULT_SCHEMA,
    Report,
    RewriteTask,
    TargetReadTask,
    result_row_values,
    with_row_ids,
)
from spark_integration.completion import ExecutorCompleter, min_files
from spark_integration.compat import to_arrow_schema
from spark_integration.read import OPEN_COST_BYTES, default_parallelism, plan_read_tasks, spark_schema
from spark_integration.session import arrow_batches_for_writing, batch_rows
from spark_integration.write import abort_job, root_cause
from table.data.pendingset import PendingSet
from table.data.stats import parse_stats
from table.data.uploads import abort_pending
from table.errors import MergeCardinalityError, SparkJobError
from table.data.files import filesystem_for
from table.data.read import deleted_rows_of, physical_row_count
from table.log.actions import AddFile, RemoveFile
from table.log.snapshot import Snapshot
from table.operations.rewrite import Rewriter, removes_of, writes_deletion_vectors
from table.operations.scan import ROW
from table.transaction import TableView

__all__ = ["Removals", "Rewritten", "completer", "file_reader", "removals", "run_rewrite", "target_frame"]

log = logging.getLogger(__name__)


def target_frame(spark: SparkSession, snapshot: Snapshot, files: Sequence[AddFile], options: StorageOptions, *,
                 columns: Sequence[str] | None = None) -> DataFrame:
    """The rows of ``files`` (candidates of ``snapshot``) with the table's columns (only ``columns`` of
    them, if given) plus FILE (the file's index in ``files``) and ROW (the row's position in its file),
    read in Spark tasks."""
    schema = spark_schema(snapshot.schema)
    if columns is not None:
        schema = StructType([f for f in schema.fields if f.name in set(columns)])
    if not files:
        return spark.createDataFrame([], with_row_ids(schema))
    index = {f.path: i for i, f in enumerate(files)}
    packed = plan_read_tasks(list(files), min_tasks=default_parallelism(spark) or 2, open_cost=OPEN_COST_BYTES)
    tasks = [[(index[f.path], f) for f in sorted(task, key=lambda f: index[f.path])] for task in packed]
    reader = TargetReadTask(table_path=snapshot.table_path, version=snapshot.version, table_schema=snapshot.schema,
                            partition_columns=snapshot.partition_columns, tasks=tasks, options=options, schema=schema,
                            layout=snapshot.layout)
    return spark.range(0, len(tasks), 1, numPartitions=len(tasks)).mapInArrow(reader, with_row_ids(schema))


def file_reader(snapshot: Snapshot, options: StorageOptions) -> TargetReadTask:
    """A reader of single candidate files of ``snapshot`` for rewrite tasks (``RewriteTask(copies=...)``):
    their rows as :func:`target_frame` reads them."""
    return TargetReadTask(table_path=snapshot.table_path, version=snapshot.version, table_schema=snapshot.schema,
                          partition_columns=snapshot.partition_columns, tasks=[], options=options,
                          schema=spark_schema(snapshot.schema), layout=snapshot.layout)


def expected_rows(files: Sequence[AddFile]) -> list[int | None]:
    """Each file's rows as a read returns them: its ``numRecords`` less those its deletion vector deletes
    (None where its statistics lack it)."""
    counts: list[int | None] = []
    for add in files:
        stats = parse_stats(add.stats)
        if stats is None or not isinstance(stats.num_records, int):
            counts.append(None)
            continue
        deleted = add.deletion_vector.cardinality if add.deletion_vector is not None else 0
        counts.append(stats.num_records - deleted)
    return counts


@dataclasses.dataclass(frozen=True)
class Rewritten:
    """What the rewrite job staged: the kept tasks' PendingSets (data, then change data), the candidate
    indices of the files rewritten, rows per clause, rows copied, and the job's seconds."""

    data: tuple[PendingSet, ...]
    changes: tuple[PendingSet, ...]
    touched: tuple[int, ...]
    clause_rows: tuple[int, ...]
    copied: int
    seconds: float
    gone: Mapping[int, Sequence[int]] = dataclasses.field(default_factory=dict)
    """With deletion vectors: the row numbers (as read, 0..n-1) each touched file loses."""

    def pendingsets(self, *, with_changes: bool) -> tuple[PendingSet, ...]:
        return (*self.data, *(self.changes if with_changes else ()))


def run_rewrite(frame: DataFrame, task: RewriteTask, *, table_path: str, options: StorageOptions,
                operation: str) -> Rewritten:
    """Steps 3 and 4 of the module docstring: ``frame.mapInArrow(task)``, collected; see there."""
    uri = TableUri.parse(table_path)
    objects = open_object_store(uri, storage_options=options)
    started = time.monotonic()
    staged = frame.mapInArrow(task, RESULT_SCHEMA)
    try:
        staged.schema  # noqa: B018 - a Spark Connect plan is analyzed here, before any task runs
        # the rewrite tasks stream their rows into Parquet, as a write's tasks do: batches of a few MB
        with arrow_batches_for_writing(frame.sparkSession, _batch_rows(frame)):
            rows = staged.collect()
    except AnalysisException:
        abort_job(objects, uri, task.job_id)
        raise
    except Exception as exc:
        aborted = abort_job(objects, uri, task.job_id)
        raise SparkJobError(
            f"the Spark job {task.job_id} of the {operation} on table {table_path} failed before its commit: nothing "
            f"was committed and {aborted} staged upload(s) were aborted. Cause: {root_cause(exc)}") from exc
    except BaseException:
        abort_job(objects, uri, task.job_id)
        raise
    seconds = time.monotonic() - started

    kept: dict[int, tuple[PendingSet, PendingSet | None, Report]] = {}
    strays: list[PendingSet] = []
    try:
        for row in rows:
            partition, _, data, changes, report = result_row_values(row)
            loaded = (PendingSet.load(data), None if changes is None else PendingSet.load(changes), Report.load(report))
            if partition in kept:
                strays.extend(p for p in loaded[:2] if p is not None)
            else:
                kept[partition] = loaded
    except BaseException:
        abort_job(objects, uri, task.job_id)
        raise
    if strays:
        log.info("job %s: %d duplicate task result(s) discarded", task.job_id, len(strays))
        abort_pending(objects, strays)
    results = [kept[p] for p in sorted(kept)]
    repeated = sum(r.repeated for _, _, r in results)
    if repeated:
        abort_pending(objects, [p for d, c, _ in results for p in (d, c) if p is not None])
        abort_job(objects, uri, task.job_id)
        raise MergeCardinalityError(repeated, table_path)
    clause_rows = [0] * len(task.clauses)
    for _, _, report in results:
        for i, count in enumerate(report.clause_rows):
            clause_rows[i] += count
    return Rewritten(data=tuple(d for d, _, _ in results), changes=tuple(c for _, c, _ in results if c is not None),
                     touched=tuple(sorted(i for _, _, r in results for i in r.touched)), clause_rows=tuple(clause_rows),
                     copied=sum(r.copied for _, _, r in results), seconds=seconds,
                     gone={int(i): rows for _, _, r in results for i, rows in r.gone.items()})


def _batch_rows(frame: DataFrame) -> int:
    """Rows of a few-MB Arrow batch of ``frame``'s rows (Spark's default for a type Arrow cannot name here)."""
    try:
        return batch_rows(to_arrow_schema(frame.schema))
    except Exception:  # noqa: BLE001 - pyspark's own errors for a type Arrow cannot name
        return 0  # arrow_batches_for_writing then leaves the session's setting


@dataclasses.dataclass(frozen=True)
class Removals:
    """What a rewrite takes out of the table: ``remove`` actions, and (merge-on-read) the ``add`` of each
    file kept with a new deletion vector and the Rewriter that wrote the vectors' file."""

    removes: tuple[RemoveFile, ...]
    vector_adds: tuple[AddFile, ...] = ()
    rewriter: Rewriter | None = None


def removals(table: TableView, snapshot: Snapshot, job_id: str, files: Sequence[AddFile], done: Rewritten) -> Removals:
    """The files the job touched leave the table: removed (copy-on-write, their other rows rewritten by
    the tasks) or, when the table writes deletion vectors (:func:`writes_deletion_vectors`, the Python
    operations' rule), kept with their changed rows marked deleted, through the Python operations'
    :class:`~table.operations.rewrite.Rewriter` (rows of a file that held a vector are numbered as read:
    they are mapped back to their positions in the file first)."""
    touched = [files[i] for i in done.touched]
    if not writes_deletion_vectors(snapshot) or not touched:
        return Removals(removes_of(touched))
    rewriter = Rewriter(table, snapshot, job_id)
    fs = filesystem_for(table.uri, table.storage_options)
    for index in done.touched:
        add = files[index]
        numbers = np.asarray(done.gone.get(index, ()), dtype=np.int64)
        if add.deletion_vector is not None:
            deleted = np.fromiter(deleted_rows_of(table.uri, fs, add), dtype=np.int64)
            kept = np.setdiff1d(np.arange(physical_row_count(table.uri, fs, add), dtype=np.int64), deleted)
            numbers = kept[numbers]
        rewriter.replace(add, pa.table({ROW: pa.array(numbers, pa.int64())}), pa.array([True] * len(numbers)))
    rewriter.finish()  # the vectors' file; its own writers staged nothing
    return Removals(tuple(rewriter.removes), tuple(rewriter.vector_adds), rewriter)


def completer(spark: SparkSession, table_path: str, options: StorageOptions) -> ExecutorCompleter:
    """Who completes the job's uploads at its commit: the executors, as for a Spark write
    (:mod:`spark_integration.completion`; a job of few files is completed by the driver's pool)."""
    return ExecutorCompleter(spark, table_path=table_path, options=options, min_files=min_files(spark, None))


def drop_changes(rewritten: Rewritten, options: StorageOptions, table_path: str) -> None:
    """Abort the change data uploads of a job whose commit will not carry them."""
    pendingsets = [p for p in rewritten.changes if p.files]
    if pendingsets:
        abort_pending(open_object_store(TableUri.parse(table_path), storage_options=options), pendingsets)

