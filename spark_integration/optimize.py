"""OPTIMIZE as a Spark job: the bins of a compaction or of a Z-order rewritten in Spark tasks, one commit on
the driver.

The operation is :func:`table.operations.optimize.optimize` itself: the same plan (``plan_bins``), the same
per-bin rewrite (``BinWork.rewrite``), the same commit and re-planning. Only where the bins run differs:

1. **plan** (driver): the bins of the newest snapshot; ``where`` (a Spark SQL predicate over partition
   columns, delta-spark's ``optimize().where(...)``) picks the files first, evaluated by Spark on one row
   of partition values per file, as DELETE does for a predicate over partition columns;
2. **rewrite** (Spark): ``spark.range(bins).mapInArrow(BinTask)``, one task per bin: it reads the bin's
   files through the project's reader (deletion vectors applied, column mapping resolved) and stages the
   new files as incomplete multipart uploads; its PendingSet is its result. A failing attempt aborts its
   own uploads (``BinWork.rewrite``) and Spark retries it; of duplicate results (speculation) one is
   kept, the others' uploads are aborted;
3. **commit** (driver): one log entry, ``dataChange=false``, through the job commit.

If the job fails, every upload of the job is aborted (found by the job id in their keys) and
:class:`~table.errors.SparkJobError` raised: nothing was committed. A driver that dies between 2 and 3
leaves only incomplete uploads, invisible to every reader (``dynacommit uploads abort`` removes them);
a test's hook (:mod:`spark_integration._hooks`) runs exactly there.

Use it when the table outgrows one process: the bins then rewrite in parallel on the cluster's
executors, each holding one bin (a Z-ordered partition is one bin, held in memory by its task).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from logstore import StorageOptions, TableUri, open_object_store
from logstore.errors import InvalidArgumentError
from spark_integration import _hooks
from spark_integration.dml.common import as_column, check_condition, describe, functions_of
from spark_integration.session import cli_session, executor_python
from spark_integration.worker import freeze_imports
from spark_integration.write import abort_job, root_cause
from table.data.files import filesystem_for
from table.data.pendingset import PendingSet
from table.data.uploads import abort_pending
from table.data.writespec import CommitResult
from table.errors import SparkJobError
from table.log.actions import AddFile
from table.log.snapshot import Snapshot
from table.operations import scan
from table.operations.optimize import Bin, BinWork, OptimizeReport, optimize
from table.operations.scan import FILE
from table.table import Table

__all__ = ["BinTask", "DynacommitOptimizeBuilder", "optimize_from_cli", "optimize_on_spark"]

log = logging.getLogger(__name__)

_RESULT_SCHEMA = "bin int, attempt int, data string"
_RESULT_ARROW = pa.schema([("bin", pa.int32()), ("attempt", pa.int32()), ("data", pa.string())])

class BinTask:
    """Task ``i`` of ``spark.range(n).mapInArrow(task, ...)`` rewrites ``bins[i]`` as task ``i`` of the job.
    Plain data (no client): it opens its own object store from the storage options it carries."""

    def __init__(self, *, work: BinWork, bins: Sequence[Bin], job_id: str, options: StorageOptions,
                 ):
        self.work = work
        self.bins = list(bins)
        self.job_id = job_id
        self.options = options
        self.hook = _hooks.installed().task  # None but in tests (spark_integration._hooks)
        self.__name__ = "BinTask"  # pyspark names the Python UDF of the plan after it

    def __repr__(self) -> str:
        return f"BinTask(table={self.work.table_path}, job={self.job_id}, bins={len(self.bins)})"

    def __call__(self, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        attempt = TaskContext.get().attemptNumber()
        uri = TableUri.parse(self.work.table_path)
        objects = open_object_store(uri, storage_options=self.options)
        filesystem = filesystem_for(uri, self.options)
        for batch in ids:
            for index in batch.column(0).to_pylist():
                pending = self.work.rewrite(self.bins[index], objects=objects, filesystem=filesystem,
                                            job_id=self.job_id, task_id=index, attempt_id=attempt)
                if self.hook is not None:
                    try:
                        self.hook(self, pending)
                    except BaseException:
                        abort_pending(objects, [pending])
                        raise
                yield pa.RecordBatch.from_pydict({"bin": [index], "attempt": [attempt],
                                                  "data": [pending.model_dump_json()]}, schema=_RESULT_ARROW)


class DynacommitOptimizeBuilder:
    """An OPTIMIZE being described (delta-spark's ``DeltaOptimizeBuilder``): ``where`` narrows it to some
    partitions, ``executeCompaction`` / ``executeZOrderBy`` run it. Made by ``DynacommitTable.optimize()``."""

    def __init__(self, spark: SparkSession, table: Callable[[], Table], *, target_size: int | None = None):
        self._spark = spark
        self._table = table
        self._where: Any = None
        self._target_size = target_size

    def where(self, partitionFilter: Any) -> DynacommitOptimizeBuilder:  # noqa: N803 - delta-spark's name
        """Only the partitions where ``partitionFilter`` (Spark SQL text or a Column over partition
        columns) is true; ``where`` again replaces it."""
        check_condition(partitionFilter, "the optimize predicate")
        self._where = partitionFilter
        return self

    def executeCompaction(self) -> CommitResult:  # noqa: N802 - delta-spark's name
        """Compact the small files (bin-packing) in Spark tasks, one commit; its version and Delta's metrics."""
        return self._execute(None)

    def executeZOrderBy(self, *cols: str) -> CommitResult:  # noqa: N802 - delta-spark's name
        """Rewrite every file of each chosen partition clustered by ``cols`` (Z-order) in Spark tasks."""
        columns = [c for group in cols for c in ([group] if isinstance(group, str) else group)]
        return self._execute(columns)

    def _execute(self, z_order: list[str] | None) -> CommitResult:
        table = self._table()
        report = optimize_on_spark(self._spark, table, where=self._where, z_order=z_order,
                                   target_size=self._target_size)
        if report.result is not None:
            return report.result
        return CommitResult.of(report.version, report.metrics, operation="OPTIMIZE", snapshot=table.snapshot)

    def __repr__(self) -> str:
        return f"DynacommitOptimizeBuilder(where={None if self._where is None else describe(self._where)!r})"


def optimize_on_spark(spark: SparkSession, table: Table, *, where: Any = None, z_order: Sequence[str] | None = None,
                      target_size: int | None = None, partition: Mapping[str, str | None] | None = None,
                      full: bool = False) -> OptimizeReport:
    """OPTIMIZE ``table`` with its bins rewritten in Spark tasks (module docstring); ``where``: a Spark SQL
    predicate (text or Column) over partition columns; ``partition``: one partition, as in-process."""
    executor_python(spark)
    if where is not None:
        check_condition(where, "the optimize predicate")
    select = None if where is None else (lambda snapshot, files: _where(spark, snapshot, files, where))
    return optimize(table, target_size=target_size, z_order=z_order, partition=partition,
                    run_bins=_runner(spark, table), select=select,
                    predicate=None if where is None else [describe(where)], full=full)


def optimize_from_cli(table: Table, *, master: str | None, target_size: int | None,
                      partition: Mapping[str, str | None] | None, z_order: Sequence[str] | None,
                      full: bool = False) -> OptimizeReport:
    """``dynacommit optimize --spark``: the same OPTIMIZE as a Spark job, in the session of
    :func:`~spark_integration.session.cli_session`."""
    with cli_session(master, app_name="dynacommit-optimize") as spark:
        return optimize_on_spark(spark, table, z_order=z_order, target_size=target_size, partition=partition,
                                 full=full)


def _where(spark: SparkSession, snapshot: Snapshot, files: Sequence[AddFile], where: Any) -> list[AddFile]:
    """The files whose partition values satisfy ``where`` (step 1 of the module docstring)."""
    if not files:
        return []
    partitions = set(snapshot.partition_columns)
    values = scan.partition_values_table(snapshot, files)
    frame = spark.createDataFrame(values.select([*snapshot.partition_columns, FILE]))
    try:
        F = functions_of(spark)  # noqa: N806 - pyspark's conventional name
        chosen = frame.where(F.coalesce(as_column(where, "the optimize predicate", F), F.lit(False)))
        chosen.schema  # noqa: B018 - analysis, before the job
    except AnalysisException as exc:
        raise InvalidArgumentError(
            f"optimize().where({describe(where)!r}) must name partition columns only (the table is partitioned by "
            f"{sorted(partitions) or 'nothing'}); to Z-order or compact part of the table, select partitions. "
            f"Spark: {str(exc).splitlines()[0]}") from None
    return [files[row[0]] for row in chosen.select(FILE).collect()]


def _runner(spark: SparkSession, table: Table):
    def run(bins: Sequence[Bin], work: BinWork, job_id: str) -> list[PendingSet]:
        uri = table.uri
        objects = open_object_store(uri, storage_options=table.storage_options)
        task = BinTask(work=work, bins=bins, job_id=job_id, options=table.storage_options)
        staged = spark.range(0, len(bins), 1, numPartitions=len(bins)).mapInArrow(task, _RESULT_SCHEMA)
        try:
            rows = staged.collect()
        except Exception as exc:
            aborted = abort_job(objects, uri, job_id, tasks_may_run=True)
            raise SparkJobError(
                f"the Spark job {job_id} of the OPTIMIZE on table {uri.table_path} failed before its commit: "
                f"nothing was committed and {aborted} staged upload(s) were aborted. Cause: {root_cause(exc)}"
            ) from exc
        except BaseException:
            abort_job(objects, uri, job_id, tasks_may_run=True)
            raise
        kept: dict[int, PendingSet] = {}
        strays: list[PendingSet] = []
        for row in rows:
            pending = PendingSet.load(row["data"])
            if row["bin"] in kept:
                strays.append(pending)
            else:
                kept[row["bin"]] = pending
        if strays:
            log.info("job %s: %d duplicate task result(s) discarded", job_id, len(strays))
            abort_pending(objects, strays)
        missing = sorted(set(range(len(bins))) - set(kept))
        if missing:  # Spark reports every task of a finished job; a gap is a bug, never a partial commit
            abort_job(objects, uri, job_id)
            raise SparkJobError(f"the Spark job {job_id} of the OPTIMIZE on table {uri.table_path} returned no "
                                f"result for bin(s) {missing}: nothing was committed")
        _hooks.staged()
        return [kept[i] for i in range(len(bins))]

    return run
