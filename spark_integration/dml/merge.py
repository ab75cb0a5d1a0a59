"""MERGE on Spark: a source DataFrame upserted into the table, the join and the rewrites in Spark tasks.

Semantics are the Python operation's (:mod:`table.operations.merge`), which are Delta's: clauses of each
kind (``matched``, ``not matched``, ``not matched by source``) apply in order and the first whose
condition holds wins; only the last clause of a kind may omit its condition; a target row matched by
more than one source row is :class:`~table.errors.MergeCardinalityError` unless the only matched clause
is an unconditional delete; ``*All`` clauses assign columns by name; values are cast to their column's
type (Spark's cast); with schema evolution the source's other columns are added to the table and
integer columns widen. Conditions and values are Spark SQL (text or Columns) over the target's alias
(``DynacommitTable.alias``) and the source DataFrame's (``source.alias("s")``).

Execution (one pass over the target, one over the source):

1. **plan** (driver): candidate files. With ``not matched by source`` clauses every file; otherwise the
   files the condition's target-only conjuncts do not rule out (:mod:`spark_integration.dml.pruning`).
2. **join** (Spark): the candidates' rows (:class:`~spark_integration.dml.tasks.TargetReadTask`, each
   with its file and row number) LEFT OUTER joined with the source, FULL OUTER when there are ``not
   matched`` clauses, so that every target row of a candidate file is seen once per matching source
   row, and every unmatched source row once. Spark computes per row the clause that applies and the
   columns after it. An insert-only MERGE joins LEFT ANTI instead (source rows matching no target row),
   and rewrites no file.
3. **rewrite** (Spark tasks): a window over each file (Spark shuffles the rows by file and sorts them by
   row number) keeps the rows of the files holding an updated or deleted row, so each task gets whole
   files, in order, and the rows of the other files never cross to Python;
   :class:`~spark_integration.dml.tasks.RewriteTask` writes those files again and the inserted rows,
   staged as multipart uploads, and reports target rows matched twice.
4. **commit** (driver, :func:`table.operations.rewrite.execute`): one log entry, ``remove`` of each
   rewritten file; re-planned on a conflict. Change data (``delta.enableChangeDataFeed``) is kept only
   when some row was updated or deleted, as the Python operation does.

Metrics and ``operationParameters`` are Delta's (``numTargetRowsInserted``, ``numTargetRowsUpdated``,
``numTargetRowsDeleted``, ``numTargetRowsCopied``, ``numTargetFilesAdded``/``Removed``, ``numSourceRows``,
``matchedPredicates`` ...).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from spark_integration.dml import job
from spark_integration.dml.common import (
    as_column,
    backticked,
    check_condition,
    check_names,
    describe,
    functions_of,
    source_alias,
    window_of,
)
from spark_integration.dml.pruning import pruning_filter
from spark_integration.dml.tasks import ACTION, FILE, ROW, ClauseKind, RewriteTask, out_column, pre_column
from spark_integration.read import default_parallelism, spark_schema
from spark_integration.write import arrow_write_schema
from table.data.writespec import CommitResult
from table.errors import SchemaMismatchError, UnsupportedTypeError
from table.log import properties
from table.log.actions import Metadata
from table.log.commit import ReadScope
from table.log.schema import delta_to_arrow, evolve_schema
from table.log.snapshot import Snapshot
from table.operations import scan
from table.operations.engine import INTERNAL_PREFIX
from table.operations.merge import merge_metrics, merge_parameters
from table.operations.rewrite import Staged, execute, removes_of
from table.operations.update import resolve_columns
from table.table import Table

__all__ = ["MATCHED", "NOT_MATCHED", "NOT_MATCHED_BY_SOURCE", "Clause", "merge"]

log = logging.getLogger(__name__)

MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE = "matched", "not matched", "not matched by source"
INSERT_ROWS_PER_TASK = 2_000_000
"""A MERGE spreads its inserted rows over one rewrite task per this many source rows (at most one per core)."""
_TARGET_PRESENT = INTERNAL_PREFIX + "target_present"
_KEY = INTERNAL_PREFIX + "key"
_CHANGED = INTERNAL_PREFIX + "changed"
_SOURCE_PRESENT = INTERNAL_PREFIX + "source_present"


@dataclasses.dataclass(frozen=True)
class Clause:
    """One WHEN clause: its kind, action (``update``/``delete``/``insert``), condition (Spark SQL text, a
    Column, or None) and, for updates and inserts, the assignments (None: every column, ``*All``)."""

    kind: str
    action: str
    condition: Any = None
    assignments: tuple[tuple[str, Any], ...] | None = None

    def describe(self) -> dict[str, str]:
        """Delta's ``MergePredicate`` JSON: ``{"predicate": ..., "actionType": ...}``."""
        shown = {"actionType": self.action}
        if self.condition is not None:
            shown = {"predicate": describe(self.condition), **shown}
        return shown


def check_clauses(clauses: list[Clause], added: Clause) -> None:
    """Delta's rule: only the last clause of a kind may omit its condition."""
    earlier = [c for c in clauses if c.kind == added.kind]
    if earlier and earlier[-1].condition is None:
        raise InvalidArgumentError(
            f"a WHEN {added.kind.upper()} clause follows one without a condition, so it could never apply; only the "
            f"last {added.kind} clause may omit its condition (Delta's rule)")


def merge(spark: SparkSession, table: Table, source: DataFrame, condition: Any, clauses: list[Clause], *,
          target_alias: str | None, schema_evolution: bool, seams: job.Seams = job.NO_SEAMS) -> CommitResult:
    """Run the MERGE as one commit (re-planned on conflicts); see the module docstring."""
    if not isinstance(source, DataFrame):
        raise ArgumentTypeError(f"the merge source must be a pyspark DataFrame, got {type(source).__name__}")
    check_condition(condition, "the merge condition")
    if not clauses:
        raise InvalidArgumentError("the merge has no WHEN clause; add whenMatchedUpdateAll(), "
                                   "whenNotMatchedInsertAll() or another clause before execute()")
    check_names(source.columns, "the merge source")
    started = time.monotonic()
    source_rows = source.count()
    counted = time.monotonic() - started
    return execute(table, "MERGE", lambda snapshot, job_id: _Merge(
        spark, table, snapshot, source, condition, clauses, target_alias, schema_evolution, job_id, seams,
        source_rows, counted).stage(), staging_timed=False,
        removes_data=any(c.action != "insert" for c in clauses))


class _Merge:
    """One attempt of a merge on one snapshot."""

    def __init__(self, spark: SparkSession, table: Table, snapshot: Snapshot, source: DataFrame, condition: Any,
                 clauses: list[Clause], target_alias: str | None, schema_evolution: bool, job_id: str,
                 seams: job.Seams, source_rows: int, counted: float):
        self.spark, self.table, self.snapshot, self.source = spark, table, snapshot, source
        self.condition, self.clauses, self.alias = condition, clauses, target_alias
        self.schema_evolution, self.job_id, self.seams = schema_evolution, job_id, seams
        self.source_rows, self.counted = source_rows, counted
        self.started = time.monotonic()
        self.schema, self.metadata = self._evolve()
        self.types = {f.name: f.dataType for f in spark_schema(self.schema)}
        self.functions = functions_of(spark)

    # --- planning -------------------------------------------------------------------------------------

    def _source_arrow(self) -> pa.Schema | None:
        try:
            return arrow_write_schema(self.source.schema)
        except (UnsupportedTypeError, SchemaMismatchError, TypeError, ValueError):
            return None

    def _evolve(self) -> tuple[pa.Schema, Metadata | None]:
        """The schema rows are written with: the table's, or with schema evolution the table's evolved by
        the source's columns (when an ``*All`` clause brings them), as the Python operation evolves it."""
        snapshot = self.snapshot
        check_names(snapshot.schema.names, "the table")
        if not self.schema_evolution or not any(c.assignments is None for c in self.clauses
                                                if c.action != "delete"):
            return snapshot.schema, None
        brought = self._source_arrow()
        if brought is None:
            raise InvalidArgumentError("the merge source has column types a Delta table cannot hold; schema "
                                       "evolution cannot add them")
        merged, changes = evolve_schema(snapshot.metadata.schema_string, brought, table=snapshot.table_path)
        if changes and snapshot.layout.mapped:
            raise InvalidArgumentError(
                f"withSchemaEvolution() would add columns to {snapshot.table_path}, whose columns are mapped "
                f"(delta.columnMapping.mode); add them first with Table.alter.add_columns(...), then merge")
        if not changes:
            return snapshot.schema, None
        log.info("MERGE into %s evolves the schema: %s", snapshot.table_path, "; ".join(changes))
        text = json.dumps(merged, separators=(",", ":"))
        return delta_to_arrow(text), snapshot.metadata.model_copy(update={"schema_string": text})

    def _candidates(self) -> scan.Candidates:
        snapshot = self.snapshot
        if any(c.kind == NOT_MATCHED_BY_SOURCE for c in self.clauses):
            return scan.candidates(snapshot, None)
        pruning = pruning_filter(snapshot.schema, self.condition, target_alias=self.alias,
                                 source_alias=source_alias(self.source), source_schema=self._source_arrow())
        if pruning.dropped:
            log.debug("MERGE into %s: conjuncts not used for pruning: %s", snapshot.table_path, pruning.dropped)
        return scan.candidates(snapshot, pruning.filter, pruning.columns)

    def _assignments(self, clause: Clause, source_columns: set[str]) -> dict[str, Any]:
        """``{target column: value}`` of an update or insert clause (values: SQL text, Columns)."""
        names = self.schema.names
        if clause.assignments is None:
            missing = [c for c in names if c not in source_columns]
            if missing and not self.schema_evolution:
                raise InvalidArgumentError(
                    f"{'whenMatchedUpdateAll' if clause.action == 'update' else 'whenNotMatchedInsertAll'} needs "
                    f"every column of the table in the source, which lacks {missing}; add them to the source, or "
                    f"call withSchemaEvolution() (then they keep their value on update and are null on insert)")
            return {c: self.source[backticked(c)] for c in names if c in source_columns}
        resolve_columns([c for c, _ in clause.assignments], self.schema, f"the WHEN {clause.kind.upper()} clause")
        return dict(clause.assignments)

    # --- running --------------------------------------------------------------------------------------

    def stage(self) -> Staged:
        snapshot = self.snapshot
        found = self._candidates()
        source_columns = set(self.source.columns)
        assignments = [self._assignments(c, source_columns) if c.action != "delete" else {} for c in self.clauses]
        target = job.target_frame(self.spark, snapshot, found.files, self.table.storage_options)
        target = self._conform(target)
        if self.alias:
            target = target.alias(self.alias)
        planned = time.monotonic() - self.started
        if any(c.kind != NOT_MATCHED for c in self.clauses):
            rows = self._join(target, assignments)
        else:
            rows = self._inserts_only(target, assignments)
        change_data = properties.change_data_feed(snapshot.configuration)
        matched = [c for c in self.clauses if c.kind == MATCHED]
        task = RewriteTask(
            table_path=snapshot.table_path, options=self.table.storage_options, schema=self.schema,
            partition_by=snapshot.partition_columns, job_id=self.job_id,
            clauses=[ClauseKind(c.kind, c.action) for c in self.clauses], expected_rows=job.expected_rows(found.files),
            change_data=change_data, has_preimage=self._has_preimage(change_data),
            repeats_allowed=len(matched) == 1 and matched[0].action == "delete" and matched[0].condition is None,
            num_indexed_cols=properties.num_indexed_cols(snapshot.configuration), hook=self.seams.rewrite,
            layout=snapshot.layout)
        done = job.run_rewrite(rows, task, table_path=snapshot.table_path, options=self.table.storage_options,
                               operation="MERGE")
        return self._staged(found, done, planned, change_data)

    def _has_preimage(self, change_data: bool) -> bool:
        return change_data and any(c.action == "update" for c in self.clauses)

    def _conform(self, target: DataFrame) -> DataFrame:
        """The target's rows in the written schema: columns schema evolution added as nulls, widened ones cast."""
        if self.metadata is None:
            return target
        F = self.functions  # noqa: N806 - pyspark's conventional name
        have = set(self.snapshot.schema.names)
        columns = []
        for name in self.schema.names:
            data_type = self.types[name]
            if name not in have:
                columns.append(F.lit(None).cast(data_type).alias(name))
            elif self.snapshot.schema.field(name).type != self.schema.field(name).type:
                columns.append(target[backticked(name)].cast(data_type).alias(name))
            else:
                columns.append(target[backticked(name)])
        return target.select(*columns, target[FILE], target[ROW])

    def _column(self, value: Any, what: str) -> Column:
        return as_column(value, what, self.functions)

    def _check_scope(self, frame: DataFrame, clause: Clause, values: dict[str, Any], side: str) -> None:
        """A ``not matched`` clause sees the source alone, a ``not matched by source`` one the target alone."""
        parts = [self._column(v, f"the value of {c!r}") for c, v in values.items()]
        if clause.condition is not None:
            parts.append(self._column(clause.condition, f"the WHEN {clause.kind.upper()} condition"))
        if not parts:
            return
        try:
            frame.select(*parts).schema  # noqa: B018 - analysis only
        except AnalysisException as exc:
            raise InvalidArgumentError(f"the WHEN {clause.kind.upper()} clause may use {side} columns only: "
                                       f"{str(exc).splitlines()[0]}") from None

    def _join(self, target: DataFrame, assignments: list[dict[str, Any]]) -> DataFrame:
        F = self.functions  # noqa: N806 - pyspark's conventional name
        target = target.withColumn(_TARGET_PRESENT, F.lit(True))
        source = self.source.withColumn(_SOURCE_PRESENT, F.lit(True))
        for clause, values in zip(self.clauses, assignments):
            if clause.kind == NOT_MATCHED:
                self._check_scope(self.source, clause, values, "source")
            elif clause.kind == NOT_MATCHED_BY_SOURCE:
                self._check_scope(target, clause, values, "target")
        inserting = any(c.kind == NOT_MATCHED for c in self.clauses)
        joined = target.join(source, self._column(self.condition, "the merge condition"),
                             "full_outer" if inserting else "left_outer")
        present, seen = target[_TARGET_PRESENT].isNotNull(), source[_SOURCE_PRESENT].isNotNull()
        action = self._action({MATCHED: present & seen, NOT_MATCHED: ~present, NOT_MATCHED_BY_SOURCE: ~seen})
        base = {name: target[backticked(name)] for name in self.schema.names}
        rows = joined.select(target[FILE], target[ROW], action.alias(ACTION), *self._values(action, assignments, base),
                             *self._preimage(base))
        rows = rows.where(F.col(FILE).isNotNull() | (F.col(ACTION) >= 0))
        return self._by_file(rows, inserting)

    def _by_file(self, rows: DataFrame, inserting: bool) -> DataFrame:
        """Step 3 of the module docstring: the rows of each file that holds a changed row, together and in
        row order, in one task (a window over the file: Spark shuffles by it and sorts by row number; the
        rows of other files are dropped there, before they cross to Python); inserted rows spread by their
        values over a few groups (each writes a file per table partition it inserts into: more groups,
        more small files)."""
        F = self.functions  # noqa: N806 - pyspark's conventional name
        parallel = default_parallelism(self.spark) or 2
        slots = max(1, min(parallel, -(-self.source_rows // INSERT_ROWS_PER_TASK))) if inserting else 1
        values = [F.col(out_column(i)) for i in range(len(self.schema))]
        spread = F.lit(-1) - F.pmod(F.hash(*values), F.lit(slots))
        window = window_of(self.spark)
        over = window.partitionBy(_KEY).orderBy(ROW).rowsBetween(window.unboundedPreceding, window.unboundedFollowing)
        return (rows.withColumn(_KEY, F.coalesce(F.col(FILE).cast("long"), spread.cast("long")))
                .withColumn(_CHANGED, F.max((F.col(ACTION) >= 0).cast("int")).over(over))
                .where(F.col(_CHANGED) == 1).drop(_KEY, _CHANGED))

    def _inserts_only(self, target: DataFrame, assignments: list[dict[str, Any]]) -> DataFrame:
        F = self.functions  # noqa: N806 - pyspark's conventional name
        for clause, values in zip(self.clauses, assignments):
            self._check_scope(self.source, clause, values, "source")
        joined = self.source.join(target, self._column(self.condition, "the merge condition"), "left_anti")
        action = self._action({NOT_MATCHED: F.lit(True)})
        base = {name: F.lit(None).cast(self.types[name]) for name in self.schema.names}
        rows = joined.select(F.lit(None).cast("int").alias(FILE), F.lit(None).cast("long").alias(ROW),
                             action.alias(ACTION), *self._values(action, assignments, base))
        return rows.where(F.col(ACTION) >= 0)

    def _action(self, tests: dict[str, Column]) -> Column:
        """The index of the first clause whose kind and condition hold for the row, -1 for none."""
        F = self.functions  # noqa: N806 - pyspark's conventional name
        action = None
        for index, clause in enumerate(self.clauses):
            test = tests[clause.kind]
            if clause.condition is not None:
                holds = self._column(clause.condition, f"the WHEN {clause.kind.upper()} condition")
                test = test & F.coalesce(holds, F.lit(False))
            action = F.when(test, F.lit(index)) if action is None else action.when(test, F.lit(index))
        return action.otherwise(F.lit(-1))

    def _values(self, action: Column, assignments: list[dict[str, Any]], base: dict[str, Column]) -> list[Column]:
        """Each column after the row's clause (cast to its type), as ``out<i>``."""
        F = self.functions  # noqa: N806 - pyspark's conventional name
        out = []
        for position, name in enumerate(self.schema.names):
            value = None
            for index, values in enumerate(assignments):
                if name not in values:
                    continue
                new = self._column(values[name], f"the value of {name!r}").cast(self.types[name])
                test = action == F.lit(index)
                value = F.when(test, new) if value is None else value.when(test, new)
            column = base[name] if value is None else value.otherwise(base[name])
            out.append(column.alias(out_column(position)))
        return out

    def _preimage(self, base: dict[str, Column]) -> list[Column]:
        if not self._has_preimage(properties.change_data_feed(self.snapshot.configuration)):
            return []
        return [base[name].alias(pre_column(i)) for i, name in enumerate(self.schema.names)]

    # --- the commit -----------------------------------------------------------------------------------

    def _staged(self, found: scan.Candidates, done: job.Rewritten, planned: float, change_data: bool) -> Staged:
        counts = dict.fromkeys(("updated_matched", "updated_by_source", "deleted_matched", "deleted_by_source",
                                "inserted"), 0)
        for clause, rows in zip(self.clauses, done.clause_rows):
            if clause.action == "insert":
                counts["inserted"] += rows
            else:
                side = "matched" if clause.kind == MATCHED else "by_source"
                counts[f"{'updated' if clause.action == 'update' else 'deleted'}_{side}"] += rows
        updated = counts["updated_matched"] + counts["updated_by_source"]
        deleted = counts["deleted_matched"] + counts["deleted_by_source"]
        inserted = counts["inserted"]
        metrics = {**merge_metrics(counts, inserted=inserted, copied=done.copied, source_rows=self.source_rows,
                                   materialize_seconds=self.counted, scan_seconds=planned,
                                   rewrite_seconds=done.seconds),
                   **found.metrics()}
        parameters = merge_parameters(describe(self.condition), self.clauses, merge_schema=self.metadata is not None)
        touched = [found.files[i] for i in done.touched]
        read = ReadScope.of_predicate([f.path for f in found.files], found.matcher(self.snapshot),
                                      describe(self.condition))
        with_changes = change_data and bool(updated or deleted)
        if change_data and not with_changes:
            job.drop_changes(done, self.table.storage_options, self.snapshot.table_path)
        if not touched and not inserted and self.metadata is None:
            return Staged("MERGE", (), (), read, parameters, metrics)
        job.staged(self.seams)
        return Staged("MERGE", removes_of(touched), done.pendingsets(with_changes=with_changes), read, parameters,
                      metrics, metadata=self.metadata, stray_uploads_possible=True)
