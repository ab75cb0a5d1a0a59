"""DELETE on Spark: the rows a Spark SQL condition selects are removed in Spark tasks.

Three cases, as the Python operation (:mod:`table.operations.delete`) has them:

1. **No condition**: every file is removed, nothing read (the Python operation itself does it).
2. **A condition over partition columns only** (DataFusion binds its text to the partition columns
   alone): Spark evaluates it on one row per file, holding the file's partition values, and the files it
   selects are removed whole, none read.
3. **Otherwise**: the files pruning cannot rule out (:mod:`spark_integration.dml.pruning`) are read in
   Spark tasks; each row gets the action "delete" where the condition is true; each task rewrites the
   files of its read tasks that hold a deleted row, without those rows (no shuffle: a read task's files
   reach the rewrite in the same Spark task, each whole and in order; the rewrite checks it). A file
   whose rows are all deleted is removed and nothing replaces it. With deletion vectors
   (:func:`~table.operations.rewrite.writes_deletion_vectors`, the Python operations' rule) a file keeps
   its other rows and its deleted ones are marked in its vector (:func:`spark_integration.dml.job.removals`).

Then one commit through :func:`table.operations.rewrite.execute` (re-planned on conflicts). Metrics are
Delta's (``numDeletedRows``, ``numCopiedRows``, ``numRemovedFiles``, ...).
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from spark_integration import _hooks
from spark_integration.dml import job
from spark_integration.dml.common import (
    as_column,
    backticked,
    check_condition,
    describe,
    functions_of,
    predicate_parameter,
)
from spark_integration.dml.pruning import binds_to, pruning_filter
from spark_integration.dml.tasks import ACTION, FILE, ROW, RewriteTask, out_column
from table.data.writer_settings import WriterSettings
from table.data.writespec import CommitResult
from table.log import properties
from table.log.constraints import rules_of
from table.log.snapshot import Snapshot
from table.operations import delete as delete_op
from table.operations import scan
from table.operations.rewrite import Staged, execute, removes_of, writes_deletion_vectors
from table.table import Table
from table.transaction import Transaction

__all__ = ["delete"]


def delete(spark: SparkSession, table: Table, condition: Any = None, *, alias: str | None = None) -> CommitResult:
    """Delete the rows of ``table`` where ``condition`` (Spark SQL text or a Column) is true; every row
    without one. See the module docstring."""
    if condition is None:
        return delete_op.delete(table, None)
    check_condition(condition, "the delete condition")
    return execute(table, "DELETE", lambda txn, job_id: _stage(spark, txn, txn.snapshot, condition, alias,
                                                                    job_id), staging_timed=False)


def _stage(spark: SparkSession, table: Transaction, snapshot: Snapshot, condition: Any, alias: str | None, job_id: str
           ) -> Staged:
    started = time.monotonic()
    parameters = predicate_parameter(condition)
    pruning = pruning_filter(snapshot.schema, condition, target_alias=alias)
    found = scan.read(table, pruning.filter, pruning.columns, predicate=describe(condition))
    whole = _partition_files(spark, snapshot, found.files, condition, alias)
    if whole is not None:
        removed = [found.files[i] for i in whole]
        metrics = delete_op.delete_metrics(snapshot, found, removed, deleted=scan.record_count(removed), copied=0,
                                           scan_seconds=time.monotonic() - started, rewrite_seconds=0.0)
        return Staged("DELETE", removes_of(removed), (), None, parameters, metrics)
    planned = time.monotonic() - started
    frame = job.target_frame(spark, snapshot, found.files, table.storage_options)
    if alias:
        frame = frame.alias(alias)
    F = functions_of(spark)  # noqa: N806 - pyspark's conventional name
    hit = F.coalesce(as_column(condition, "the delete condition", F), F.lit(False))
    rows = frame.select(frame[FILE], frame[ROW], F.when(hit, F.lit(0)).otherwise(F.lit(-1)).alias(ACTION),
                        *[frame[backticked(name)].alias(out_column(i)) for i, name in enumerate(snapshot.schema.names)])
    task = RewriteTask(table_path=snapshot.table_path, options=table.storage_options, schema=snapshot.schema,
                       partition_by=snapshot.partition_columns, job_id=job_id,
                       clauses=list(delete_op.CLAUSES), expected_rows=job.expected_rows(found.files),
                       change_data=properties.change_data_feed(snapshot.configuration), has_preimage=False,
                       repeats_allowed=False, settings=WriterSettings.of(snapshot.configuration),
                        layout=snapshot.layout,
                       deletion_vectors=writes_deletion_vectors(snapshot),
                       rules=rules_of(snapshot.protocol, snapshot.metadata))
    done = job.run_rewrite(rows, task, table_path=snapshot.table_path, options=table.storage_options,
                           operation="DELETE")
    touched = [found.files[i] for i in done.touched]
    metrics = delete_op.delete_metrics(snapshot, found, touched, deleted=done.clause_rows[0], copied=done.copied,
                                       scan_seconds=planned, rewrite_seconds=done.seconds)
    if not touched:
        return Staged("DELETE", (), (), None, parameters, metrics)
    gone = job.removals(table, snapshot, job_id, found.files, done)
    _hooks.staged()
    return Staged("DELETE", gone.removes, done.pendingsets(with_changes=True), None, parameters, metrics,
                  completer=job.completer(spark, snapshot.table_path, table.storage_options),
                  stray_uploads_possible=True, vector_adds=gone.vector_adds, rewriter=gone.rewriter)


def _partition_files(spark: SparkSession, snapshot: Snapshot, files: tuple, condition: Any, alias: str | None
                     ) -> list[int] | None:
    """Case 2 of the module docstring: the indices of ``files`` the condition selects by their partition
    values alone, or None when the condition needs other columns."""
    partition_schema = pa.schema([snapshot.schema.field(c) for c in snapshot.partition_columns])
    if not snapshot.partition_columns or not files or not binds_to(partition_schema, condition, alias=alias):
        return None
    values = scan.partition_values_table(snapshot, files)
    frame: DataFrame = spark.createDataFrame(values)
    if alias:
        frame = frame.alias(alias)
    try:
        F = functions_of(spark)  # noqa: N806 - pyspark's conventional name
        selected = frame.where(F.coalesce(as_column(condition, "the delete condition", F), F.lit(False)))
        selected.schema  # noqa: B018 - analysis, before the job
    except AnalysisException:  # Spark reads a name DataFusion took for a partition column otherwise
        return None
    return sorted(row[0] for row in selected.select(FILE).collect())

