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

0. **source** (Spark): persisted once (memory and disk, unless the caller cached it); one aggregate over it
   gives its number of rows and the key ranges step 1 prunes with, and materializes it, so every later use
   (the join) reads the same rows, even of a non-deterministic source; unpersisted when the MERGE ends.
1. **plan** (driver): candidate files. With ``not matched by source`` clauses every file; otherwise the
   files the condition's target-only conjuncts do not rule out (:mod:`spark_integration.dml.pruning`),
   nor, for each conjunct ``target.k = source.c``, the source's values of ``c`` (their set up to
   ``KEY_VALUES`` of them, else their range, from step 0's aggregate), as the Python MERGE prunes.
2. **join** (Spark): the candidates' rows (:class:`~spark_integration.dml.tasks.TargetReadTask`, each
   with its file and row number) LEFT OUTER joined with the source, FULL OUTER when there are ``not
   matched`` clauses, so that every target row of a candidate file is seen once per matching source
   row, and every unmatched source row once. Spark computes per row the clause that applies and the
   columns after it, and keeps only the rows a clause applies to and the matched ones. An insert-only
   MERGE joins LEFT ANTI instead (source rows matching no target row), and rewrites no file. Of the
   target's columns only those the conditions and values name are read into Spark (found in the analyzed
   plan of a probe, the join with those expressions over it, in a classic session; Spark Connect reads
   them all; the MERGE's own plan is then built once): the rewrite task takes the others from the file
   it reads anyway.
3. **rewrite** (Spark tasks): those rows shuffled by file and sorted by row number, so each task gets
   all of a file's rows together, in order; :class:`~spark_integration.dml.tasks.RewriteTask` reads each
   file holding an updated or deleted row again itself (its unchanged rows never cross from Python to
   the JVM and back), writes it with the changed rows in place, writes the inserted rows, all staged as
   multipart uploads, and reports target rows matched twice.
4. **commit** (driver, :func:`table.operations.rewrite.execute`): one log entry, ``remove`` of each
   rewritten file (with deletion vectors, as the Python MERGE: the file kept with its changed rows marked
   deleted in its vector, :func:`spark_integration.dml.job.removals`); re-planned on a conflict. Change
   data (``delta.enableChangeDataFeed``) is kept only when some row was updated or deleted, as the Python
   operation does.

Metrics and ``operationParameters`` are Delta's (``numTargetRowsInserted``, ``numTargetRowsUpdated``,
``numTargetRowsDeleted``, ``numTargetRowsCopied``, ``numTargetFilesAdded``/``Removed``, ``numSourceRows``,
``matchedPredicates`` ...).
"""

from __future__ import annotations

import functools
import logging
import operator
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from spark_integration import _hooks
from spark_integration.dml import job
from spark_integration.dml.common import (
    as_column,
    backticked,
    check_condition,
    describe,
    functions_of,
    source_alias,
)
from spark_integration.dml.pruning import pruning_filter
from spark_integration.dml.tasks import ACTION, FILE, ROW, RewriteTask, out_column, pre_column
from spark_integration.read import default_parallelism, spark_schema
from spark_integration.write import arrow_write_schema
from table.data.writer_settings import WriterSettings
from table.data.writespec import CommitResult, WritePlan
from table.errors import SchemaMismatchError, UnsupportedTypeError
from table.log import properties
from table.log.constraints import rules_of
from table.log.snapshot import Snapshot
from table.operations import scan
from table.engine import INTERNAL_PREFIX, check_user_columns, values_filter
from table.operations.merge import (
    KEY_VALUES,
    MATCHED,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    ApiNames,
    Clause,
    all_columns,
    check_assigned,
    clause_counts,
    insert_defaults,
    merge_metrics,
    merge_parameters,
    merge_write_plan,
    repeats_allowed,
)
from table.operations.rewrite import Staged, execute, writes_deletion_vectors
from table.operations.update import resolve_columns
from table.table import Table
from table.transaction import Transaction

__all__ = ["merge"]

log = logging.getLogger(__name__)

INSERT_ROWS_PER_TASK = 2_000_000
"""A MERGE spreads its inserted rows over one rewrite task per this many source rows (at most one per core)."""
_NAMES = ApiNames("whenMatchedUpdateAll", "whenNotMatchedInsertAll", "call withSchemaEvolution()")
_TARGET_PRESENT = INTERNAL_PREFIX + "target_present"
_KEY = INTERNAL_PREFIX + "key"
_MATCHED = INTERNAL_PREFIX + "matched"
_SOURCE_PRESENT = INTERNAL_PREFIX + "source_present"


def merge(spark: SparkSession, table: Table, source: DataFrame, condition: Any, clauses: list[Clause], *,
          target_alias: str | None, schema_evolution: bool) -> CommitResult:
    """Run the MERGE as one commit (re-planned on conflicts); see the module docstring."""
    if not isinstance(source, DataFrame):
        raise ArgumentTypeError(f"the merge source must be a pyspark DataFrame, got {type(source).__name__}")
    check_condition(condition, "the merge condition")
    if not clauses:
        raise InvalidArgumentError("the merge has no WHEN clause; add whenMatchedUpdateAll(), "
                                   "whenNotMatchedInsertAll() or another clause before execute()")
    check_user_columns(source.columns, "the merge source")
    persisted = not source.is_cached
    if persisted:  # step 0 of the module docstring
        source = source.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        facts = _SourceFacts(source, functions_of(spark))
        return execute(table, "MERGE", lambda txn, job_id: _Merge(
            spark, txn, txn.snapshot, source, condition, clauses, target_alias, schema_evolution, job_id,
            facts).stage(), staging_timed=False,
            removes_data=any(c.action != "insert" for c in clauses))
    finally:
        if persisted:
            source.unpersist()


class _SourceFacts:
    """What the MERGE needs to know of the persisted source before the join: its number of rows and, for each
    source column of a ``target.k = source.c`` conjunct, its minimum, maximum, non-null count and approximate
    number of distinct values. One aggregate computes them all, and, as the first action over the persisted
    source, materializes it: every later use (the join) reads those rows. Kept across the attempts of a
    re-planned MERGE; a column an attempt needs and no earlier one did costs one more aggregate."""

    def __init__(self, source: DataFrame, functions: Any):
        self.source, self.functions = source, functions
        self.rows: int | None = None
        self.keys: dict[str, dict[str, Any]] = {}
        self.seconds = 0.0

    def need(self, columns: list[str]) -> None:
        missing = list(dict.fromkeys(c for c in columns if c not in self.keys))
        if self.rows is not None and not missing:
            return
        F = self.functions  # noqa: N806 - pyspark's conventional name
        started = time.monotonic()
        parts = [F.count(F.lit(1)).alias("rows")]
        for i, name in enumerate(missing):
            column = F.col(backticked(name))
            # the number of distinct values only chooses between two exact filters (see _Merge._key_filter),
            # so an estimate (one pass, no shuffle of every distinct value) does
            parts += [F.min(column).alias(f"low{i}"), F.max(column).alias(f"high{i}"),
                      F.count(column).alias(f"rows{i}"), F.approx_count_distinct(column, 0.05).alias(f"distinct{i}")]
        row = self.source.agg(*parts).first()
        self.seconds += time.monotonic() - started
        self.rows = int(row["rows"]) if row is not None else 0
        for i, name in enumerate(missing):
            self.keys[name] = {k: (row[f"{k}{i}"] if row is not None else None)
                               for k in ("low", "high", "rows", "distinct")}


class _Merge:
    """One attempt of a merge on one snapshot."""

    def __init__(self, spark: SparkSession, table: Transaction, snapshot: Snapshot, source: DataFrame, condition: Any,
                 clauses: list[Clause], target_alias: str | None, schema_evolution: bool, job_id: str,
                 facts: _SourceFacts):
        self.spark, self.table, self.snapshot, self.source = spark, table, snapshot, source
        self.condition, self.clauses, self.alias = condition, clauses, target_alias
        self.schema_evolution, self.job_id = schema_evolution, job_id
        self.facts = facts
        self.started, self.facts_before = time.monotonic(), facts.seconds
        _refuse_variant_sources(source)
        self.plan = self._evolve()
        self.schema, self.metadata = self.plan.schema, self.plan.metadata
        self.types = {f.name: f.dataType for f in spark_schema(self.schema)}
        self.functions = functions_of(spark)

    # --- planning -------------------------------------------------------------------------------------

    def _source_arrow(self) -> pa.Schema | None:
        try:
            return arrow_write_schema(self.source.schema)
        except (UnsupportedTypeError, SchemaMismatchError, TypeError, ValueError):
            return None

    def _evolve(self) -> WritePlan:
        """The schema rows are written with, the table's new metadata and protocol: the Python MERGE's plan
        (:func:`table.operations.merge.merge_write_plan`), over the source's columns in Delta's types."""
        brought = self._source_arrow()
        if brought is None and self.schema_evolution:
            raise InvalidArgumentError("the merge source has column types a Delta table cannot hold; schema "
                                       "evolution cannot add them")
        plan = merge_write_plan(self.snapshot, brought if brought is not None else pa.schema([]), self.clauses,
                                merge_schema=self.schema_evolution)
        if plan.metadata is not None:
            log.info("MERGE into %s evolves the schema", self.snapshot.table_path)
        return plan

    def _candidates(self) -> scan.Candidates:
        snapshot = self.snapshot
        described = describe(self.condition)
        if any(c.kind == NOT_MATCHED_BY_SOURCE for c in self.clauses):
            self.facts.need([])
            return scan.read(self.table, None, predicate=described)
        pruning = pruning_filter(snapshot.schema, self.condition, target_alias=self.alias,
                                 source_alias=source_alias(self.source), source_schema=self._source_arrow())
        self.facts.need([c for _, c in pruning.keys])
        if pruning.dropped:
            log.debug("MERGE into %s: conjuncts not used for pruning: %s", snapshot.table_path, pruning.dropped)
        terms = [t for t in (pruning.filter, *(self._key_filter(k, c) for k, c in pruning.keys)) if t is not None]
        combined = functools.reduce(operator.and_, terms) if terms else None
        return scan.read(self.table, combined, sorted({*pruning.columns, *(k for k, _ in pruning.keys)}),
                         predicate=described)

    def _key_filter(self, target_column: str, source_column: str) -> pc.Expression | None:
        """For ``target.k = source.c``: target rows must have ``k`` among the source's values of ``c`` (their
        set when there are at most :data:`~table.operations.merge.KEY_VALUES`, else their range), as the
        Python MERGE prunes; the range from :class:`_SourceFacts`, the values (few) collected exactly."""
        F = self.functions  # noqa: N806 - pyspark's conventional name
        column = F.col(backticked(source_column))
        row = self.facts.keys[source_column]
        if not row["rows"]:
            return pc.scalar(False)  # no source key: "=" matches no target row
        values = None
        if row["distinct"] <= 2 * KEY_VALUES:
            values = [r[0] for r in self.source.select(column).where(column.isNotNull()).distinct()
                      .limit(KEY_VALUES + 1).collect()]
            if len(values) > KEY_VALUES:
                values = None
        arrow_type = self.snapshot.schema.field(target_column).type
        return values_filter(target_column, arrow_type, row["low"], row["high"], values)

    def _assignments(self, clause: Clause, source_columns: set[str]) -> dict[str, Any]:
        """``{target column: value}`` of an update or insert clause (values: SQL text, Columns)."""
        names = self.schema.names
        if clause.assignments is None:
            assigned = {c: self.source[backticked(c)] for c in all_columns(
                clause, names, source_columns, merge_schema=self.schema_evolution, names_of=_NAMES,
                computed=rules_of(self.snapshot.protocol, self.snapshot.metadata).computed_columns)}
        else:
            resolve_columns([c for c, _ in clause.assignments], self.schema, f"the WHEN {clause.kind.upper()} clause")
            assigned = dict(clause.assignments)
        check_assigned(clause, list(assigned), self.snapshot)
        for default in insert_defaults(clause, list(assigned), self.snapshot):
            assigned[default.column] = default.expression  # Spark SQL, as Delta stores it
        return assigned

    # --- running --------------------------------------------------------------------------------------

    def stage(self) -> Staged:
        snapshot = self.snapshot
        found = self._candidates()
        source_columns = set(self.source.columns)
        assignments = [self._assignments(c, source_columns) if c.action != "delete" else {} for c in self.clauses]
        self.facts.need([])
        # the source's aggregate is its materialization (materializeSourceTimeMs), not planning
        planned = time.monotonic() - self.started - (self.facts.seconds - self.facts_before)
        joining = any(c.kind != NOT_MATCHED for c in self.clauses)
        from_file: dict[int, tuple[int, ...]] = {}
        if joining:
            rows, from_file = self._join(found.files, assignments)
        else:
            rows = self._inserts_only(self._target(found.files, None), assignments)
        change_data = properties.change_data_feed(snapshot.configuration)
        task = RewriteTask(
            table_path=snapshot.table_path, options=self.table.storage_options, schema=self.schema,
            partition_by=snapshot.partition_columns, job_id=self.job_id,
            clauses=[c.shape for c in self.clauses], expected_rows=job.expected_rows(found.files),
            change_data=change_data, has_preimage=self._has_preimage(change_data),
            repeats_allowed=repeats_allowed(self.clauses),
            settings=WriterSettings.of(snapshot.configuration),
            layout=self.plan.layout, deletion_vectors=writes_deletion_vectors(snapshot),
            rules=rules_of(snapshot.protocol, snapshot.metadata),
            copies=job.file_reader(snapshot, self.table.storage_options) if joining else None, files=found.files,
            from_file=from_file)
        done = job.run_rewrite(rows, task, table_path=snapshot.table_path, options=self.table.storage_options,
                               operation="MERGE")
        return self._staged(found, done, planned, change_data)

    def _has_preimage(self, change_data: bool) -> bool:
        return change_data and any(c.action == "update" for c in self.clauses)

    def _target(self, files: list, read: set[str] | None) -> DataFrame:
        """The candidates' rows with FILE and ROW, aliased as the target; of the table's columns only those
        in ``read`` (None: all of them), in the written schema (:meth:`_conform`)."""
        columns = None if read is None else [n for n in self.snapshot.schema.names if n in read]
        target = job.target_frame(self.spark, self.snapshot, files, self.table.storage_options, columns=columns)
        target = self._conform(target, read)
        return target.alias(self.alias) if self.alias else target

    def _conform(self, target: DataFrame, read: set[str] | None) -> DataFrame:
        """The target's rows in the written schema: columns schema evolution added as nulls, widened ones
        cast; of the table's other columns only those in ``read`` (None: all)."""
        if self.metadata is None and read is None:
            return target
        F = self.functions  # noqa: N806 - pyspark's conventional name
        have = set(self.snapshot.schema.names)
        columns = []
        for name in self.schema.names:
            data_type = self.types[name]
            if name not in have:
                columns.append(F.lit(None).cast(data_type).alias(name))
            elif read is not None and name not in read:
                continue
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

    def _join(self, files: list, assignments: list[dict[str, Any]]) -> tuple[DataFrame, dict[int, tuple[int, ...]]]:
        """The rows step 3 needs, and the columns the rewrite tasks take from the file (see
        :meth:`_read_columns`): ``{position: the clauses that assign it}``."""
        full = self._target(files, None)
        read = self._read_columns(full, assignments)
        if read is not None:
            try:
                rows = self._joined(self._target(files, read), assignments, read)
                rows.schema  # noqa: B018 - analysis only: every reference resolves without the other columns
            except AnalysisException:
                log.debug("MERGE into %s reads every column into the join", self.snapshot.table_path)
            else:
                unread = [i for i, n in enumerate(self.schema.names) if n not in read and n in self._have]
                return rows, {i: tuple(k for k, values in enumerate(assignments)
                                       if self.clauses[k].action == "update" and self.schema.names[i] in values)
                              for i in unread}
        return self._joined(full, assignments, None), {}

    @property
    def _have(self) -> set[str]:
        return set(self.snapshot.schema.names)

    def _read_columns(self, target: DataFrame, assignments: list[dict[str, Any]]) -> set[str] | None:
        """The target columns the join must carry: those the merge condition, a clause's condition or an
        assigned value refer to. The others never cross from Python into Spark for the join: a rewrite
        task takes them from the file it reads anyway (a row's columns no clause assigns are the file's).
        Found in the analyzed plan of a probe (:meth:`_probe`: the join and those expressions over it, not
        the whole MERGE, which is built once, with the columns found): the references of the join and of
        the nodes above it (a classic session; None, read every column, for Spark Connect or a plan this
        cannot follow; a probe Spark cannot analyse leaves its error to the MERGE's own build)."""
        own = getattr(target, "_jdf", None)
        if own is None:
            return None
        try:
            jdf = getattr(self._probe(target, assignments), "_jdf", None)
            if jdf is None:
                return None
            names = {}
            output = own.queryExecution().analyzed().output()
            for i in range(output.size()):
                attribute = output.apply(i)
                names[attribute.exprId().id()] = attribute.name()
            referenced: set[str] = set()
            todo = [jdf.queryExecution().analyzed()]
            while todo:
                node = todo.pop()
                references = node.references().toSeq()
                for i in range(references.size()):
                    name = names.get(references.apply(i).exprId().id())
                    if name is not None:
                        referenced.add(name)
                if node.getClass().getSimpleName() == "Join":
                    continue  # below it: the target's own projections (every column) and the source's plan
                children = node.children()
                todo.extend(children.apply(i) for i in range(children.size()))
        except Exception:  # noqa: BLE001 - a plan this cannot walk: read every column
            log.debug("MERGE into %s: the join's plan could not be walked", self.snapshot.table_path, exc_info=True)
            return None
        return referenced & self._have

    def _probe(self, target: DataFrame, assignments: list[dict[str, Any]]) -> DataFrame:
        """The join of the target and the source, and over it every expression of the MERGE that may name a
        target column (the merge condition, the clauses' conditions and assigned values, as the user gave
        them, with the defaults of unassigned columns): what :meth:`_read_columns` walks. Analysed, never run."""
        parts = []
        for clause, values in zip(self.clauses, assignments):
            if clause.condition is not None:
                parts.append(self._column(clause.condition, f"the WHEN {clause.kind.upper()} condition"))
            parts += [self._column(value, f"the value of {name!r}") for name, value in values.items()]
        joined = target.join(self.source, self._column(self.condition, "the merge condition"), "left_outer")
        return joined.select(*parts) if parts else joined

    def _joined(self, target: DataFrame, assignments: list[dict[str, Any]], read: set[str] | None) -> DataFrame:
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
        base = {name: target[backticked(name)] if read is None or name in read or name not in self._have
                else F.lit(None).cast(self.types[name]) for name in self.schema.names}
        rows = joined.select(target[FILE], target[ROW], action.alias(ACTION), *self._values(action, assignments, base),
                             *self._preimage(base), (present & seen).alias(_MATCHED))
        # the rows a task needs: those a clause applies to, and matched ones (the cardinality rule counts
        # every match, as the Python MERGE does); the task reads a rewritten file's other rows itself
        needed = F.col(ACTION) >= 0
        if not repeats_allowed(self.clauses):
            needed = needed | F.col(_MATCHED)
        return self._by_file(rows.where(needed).drop(_MATCHED), inserting)

    def _by_file(self, rows: DataFrame, inserting: bool) -> DataFrame:
        """Step 3 of the module docstring: the rows of each file a clause changes (or matched), together and
        in row order, in one task (Spark shuffles them by file and sorts them by row number); inserted rows
        spread by their values over a few groups (each writes a file per table partition it inserts into:
        more groups, more small files)."""
        F = self.functions  # noqa: N806 - pyspark's conventional name
        parallel = default_parallelism(self.spark) or 2
        slots = max(1, min(parallel, -(-self.facts.rows // INSERT_ROWS_PER_TASK))) if inserting else 1
        # Spark's hash() refuses maps and variants; the spread needs only some of the values
        values = [F.col(out_column(i)) for i in range(len(self.schema))
                  if _hashable(rows.schema[out_column(i)].dataType)]
        spread = F.lit(-1) - F.pmod(F.hash(*values), F.lit(slots)) if values else F.lit(-1)
        return (rows.withColumn(_KEY, F.coalesce(F.col(FILE).cast("long"), spread.cast("long")))
                .repartition(_KEY).sortWithinPartitions(_KEY, ROW).drop(_KEY))

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
        counts = clause_counts(self.clauses, done.clause_rows)
        updated = counts["updated_matched"] + counts["updated_by_source"]
        deleted = counts["deleted_matched"] + counts["deleted_by_source"]
        inserted = counts["inserted"]
        metrics = {**merge_metrics(counts, inserted=inserted, copied=done.copied, source_rows=self.facts.rows,
                                   materialize_seconds=self.facts.seconds, scan_seconds=planned,
                                   rewrite_seconds=done.seconds),
                   **found.metrics()}
        parameters = merge_parameters(self.condition, self.clauses, merge_schema=self.metadata is not None,
                                      shown=describe)
        touched = [found.files[i] for i in done.touched]
        with_changes = change_data and bool(updated or deleted)
        if change_data and not with_changes:
            job.drop_changes(done, self.table.storage_options, self.snapshot.table_path)
        if not touched and not inserted and self.metadata is None:
            return Staged("MERGE", (), (), None, parameters, metrics)
        gone = job.removals(self.table, self.snapshot, self.job_id, found.files, done)
        _hooks.staged()
        return Staged("MERGE", gone.removes, done.pendingsets(with_changes=with_changes), None, parameters,
                      metrics, metadata=self.metadata, protocol=self.plan.protocol, stray_uploads_possible=True,
                      vector_adds=gone.vector_adds, rewriter=gone.rewriter,
                      completer=job.completer(self.spark, self.snapshot.table_path, self.table.storage_options))


def _hashable(data_type: Any) -> bool:
    """Whether Spark's ``hash()`` takes a value of ``data_type`` (no map or variant anywhere in it)."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.MapType) or type(data_type).__name__ == "VariantType":
        return False
    if isinstance(data_type, T.StructType):
        return all(_hashable(f.dataType) for f in data_type.fields)
    if isinstance(data_type, T.ArrayType):
        return _hashable(data_type.elementType)
    return True


def _refuse_variant_sources(source: DataFrame) -> None:
    """A MERGE source column of Spark's VariantType cannot reach a variant column: Spark casts a variant to
    the struct of binaries a variant column reads as by its content (variant_get), not by its encoding, so
    every assignment of it fails or is wrong. Refused before any job runs, with what works."""
    variants = [f.name for f in source.schema.fields if not _variant_free(f.dataType)]
    if variants:
        raise InvalidArgumentError(
            f"the MERGE source has VariantType column(s) {', '.join(repr(v) for v in variants)}, which a Spark MERGE "
            f"here cannot carry into a variant column (Spark casts a variant to the struct of metadata and value "
            f"binaries by its content, not its encoding); nothing was written. Append such rows with "
            f"write_dataframe or df.write.format('dynacommit') (both write VariantType values as they are), or give "
            f"the MERGE the struct form a variant column reads as (spark.read.format('dynacommit') of a variant "
            f"column), or merge from Python (Table.merge with the values as pyarrow structs)")


def _variant_free(data_type: Any) -> bool:
    """Whether ``data_type`` holds no Spark VariantType anywhere."""
    from pyspark.sql import types as T

    if type(data_type).__name__ == "VariantType":
        return False
    if isinstance(data_type, T.StructType):
        return all(_variant_free(f.dataType) for f in data_type.fields)
    if isinstance(data_type, T.ArrayType):
        return _variant_free(data_type.elementType)
    if isinstance(data_type, T.MapType):
        return _variant_free(data_type.keyType) and _variant_free(data_type.valueType)
    return True
