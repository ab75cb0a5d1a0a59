"""UPDATE on Spark: set columns to Spark SQL expressions on the rows a condition selects, in Spark tasks.

The files pruning cannot rule out (:mod:`spark_integration.dml.pruning`) are read in Spark tasks; Spark
evaluates the condition (all rows without one) and each new value, cast to its column's type with
Spark's cast (under ANSI mode, a value that does not fit fails the job, and nothing is committed);
each task rewrites the files of its read tasks that hold an updated row, their other rows copied (no
shuffle, as DELETE). Partition columns may be updated: rows move to their new partition. With the change
data feed, each updated row is written as ``update_preimage`` and ``update_postimage``. One commit
through :func:`table.operations.rewrite.execute`; Delta's metrics (``numUpdatedRows``,
``numCopiedRows``, ...).
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import SparkSession

from spark_integration import _hooks
from spark_integration.dml import job
from spark_integration.dml.common import (
    as_column,
    backticked,
    check_condition,
    describe,
    functions_of,
    predicate_parameter,
    setting_items,
)
from spark_integration.dml.pruning import pruning_filter
from spark_integration.dml.tasks import ACTION, FILE, ROW, RewriteTask, out_column, pre_column
from spark_integration.read import spark_schema
from table.data.writer_settings import WriterSettings
from table.data.writespec import CommitResult
from table.log import properties
from table.log.constraints import rules_of
from table.log.snapshot import Snapshot
from table.operations import scan
from table.operations.rewrite import Staged, execute, writes_deletion_vectors
from table.operations.update import CLAUSES as UPDATE_CLAUSES
from table.operations.update import resolve_columns, update_metrics
from table.table import Table
from table.transaction import Transaction

__all__ = ["update"]


def update(spark: SparkSession, table: Table, condition: Any, assignments: Any, *, alias: str | None = None
           ) -> CommitResult:
    """Set ``assignments`` (column -> Spark SQL text or Column) on the rows where ``condition`` is true
    (every row for None). See the module docstring."""
    items = setting_items(assignments, "set")
    if condition is not None:
        check_condition(condition, "the update condition")
    return execute(table, "UPDATE", lambda txn, job_id: _stage(spark, txn, txn.snapshot, condition, items, alias,
                                                                    job_id), staging_timed=False)


def _stage(spark: SparkSession, table: Transaction, snapshot: Snapshot, condition: Any, items: list[tuple[str, Any]],
           alias: str | None, job_id: str) -> Staged:
    started = time.monotonic()
    schema = snapshot.schema
    resolve_columns([c for c, _ in items], schema, "set")
    rules_of(snapshot.protocol, snapshot.metadata).check_assigned([c for c, _ in items], update=True,
                                                                  table=snapshot.table_path, what="the update")
    parameters = predicate_parameter(condition)
    if condition is None:
        found = scan.read(table, None, predicate=None)
    else:
        pruning = pruning_filter(schema, condition, target_alias=alias)
        found = scan.read(table, pruning.filter, pruning.columns, predicate=describe(condition))
    planned = time.monotonic() - started
    frame = job.target_frame(spark, snapshot, found.files, table.storage_options)
    if alias:
        frame = frame.alias(alias)
    F = functions_of(spark)  # noqa: N806 - pyspark's conventional name
    hit = F.lit(True) if condition is None else F.coalesce(as_column(condition, "the update condition", F),
                                                           F.lit(False))
    types = {f.name: f.dataType for f in spark_schema(schema)}
    new = {column: as_column(value, f"set[{column!r}]", F).cast(types[column]) for column, value in items}
    out = [F.when(hit, new[name]).otherwise(frame[backticked(name)]) if name in new else frame[backticked(name)]
           for name in schema.names]
    change_data = properties.change_data_feed(snapshot.configuration)
    pre = [frame[backticked(name)].alias(pre_column(i)) for i, name in enumerate(schema.names)] if change_data else []
    rows = frame.select(frame[FILE], frame[ROW], F.when(hit, F.lit(0)).otherwise(F.lit(-1)).alias(ACTION),
                        *[value.alias(out_column(i)) for i, value in enumerate(out)], *pre)
    task = RewriteTask(table_path=snapshot.table_path, options=table.storage_options, schema=schema,
                       partition_by=snapshot.partition_columns, job_id=job_id,
                       clauses=list(UPDATE_CLAUSES), expected_rows=job.expected_rows(found.files),
                       change_data=change_data, has_preimage=change_data, repeats_allowed=False,
                       settings=WriterSettings.of(snapshot.configuration), 
                       layout=snapshot.layout, deletion_vectors=writes_deletion_vectors(snapshot),
                       rules=rules_of(snapshot.protocol, snapshot.metadata))
    done = job.run_rewrite(rows, task, table_path=snapshot.table_path, options=table.storage_options,
                           operation="UPDATE")
    touched = [found.files[i] for i in done.touched]
    metrics = update_metrics(found, updated=done.clause_rows[0], copied=done.copied, touched=len(touched),
                             scan_seconds=planned, rewrite_seconds=done.seconds)
    if not touched:
        return Staged("UPDATE", (), (), None, parameters, metrics)  # nothing to commit
    gone = job.removals(table, snapshot, job_id, found.files, done)
    _hooks.staged()
    return Staged("UPDATE", gone.removes, done.pendingsets(with_changes=True), None, parameters, metrics,
                  completer=job.completer(spark, snapshot.table_path, table.storage_options),
                  stray_uploads_possible=True, vector_adds=gone.vector_adds, rewriter=gone.rewriter)
