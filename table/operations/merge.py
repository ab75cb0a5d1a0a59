"""MERGE: upsert a source into the table, clause by clause, as Delta's MergeIntoCommand does.

``t.merge(source, "target.id = source.id").when_matched_update_all().when_not_matched_insert_all().execute()``

Semantics (delta-spark's, with deltalake's names):

- Each target row is *matched* when some source row satisfies the merge condition with it, else it is
  *not matched by source*; a source row that matches no target row is *not matched*. Clauses of each
  kind apply in the order given and the first whose condition holds wins; a row no clause applies to is
  left as it is (a target row is copied, a source row is dropped). Only the last clause of a kind may
  omit its condition.
- A target row matched by more than one source row is an error (:class:`MergeCardinalityError`):
  which source row should update it is ambiguous. The one exception is Delta's: when the only matched
  clause is an unconditional delete, duplicates just delete it.
- ``update_all`` / ``insert_all`` assign every column of the target from the source column of the same
  name. With ``merge_schema=True`` the source's other columns are added to the table (nullable, at the
  end) and ``byte``/``short``/``integer`` columns widen, as Delta's schema evolution does; target columns
  the source lacks are then left unchanged by ``update_all`` and null in ``insert_all``.
- Values are cast to their column's type; a value that does not fit is an error naming the column.

Execution, copy-on-write:

1. The source is materialized once (Arrow); the merge condition is bound by DataFusion.
2. **Pruning.** Without ``not matched by source`` clauses, only target files that can hold a matching row
   are read: the condition's conjuncts on the target alone, and for each equi-join key ``target.k =
   <source expression>`` the source's range (or, for up to :data:`KEY_VALUES` distinct keys, its values),
   prune files by partition values and statistics (:mod:`table.operations.scan`).
3. **Join** (DataFusion), window by window of candidate files: every target row with the clause that
   applies to it (a LEFT join, so unmatched target rows are seen too) and the values of its update
   clause. Files holding a row that is updated or deleted are written again (their other rows copied);
   other files are left alone. Source rows that matched are remembered.
4. **Inserts**: source rows that matched no target row, through the ``not matched`` clauses.
5. One commit (``table.operations.rewrite``): ``remove`` of each rewritten file, ``add`` of each new one;
   with the change data feed, ``update_preimage``/``update_postimage``/``delete``/``insert`` rows when any
   row was updated or deleted. An insert-only merge rewrites nothing.

The commit records what it read: the candidate files and the pruning filter, so a concurrent append of
rows the merge would have matched is a conflict (Delta's ConcurrentAppend) and the merge re-plans.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.data.rules import engine_sql
from table.data.writespec import CommitResult, WritePlan, schema_merge_plan
from table.errors import MergeCardinalityError
from table.log.constraints import Default, rules_of
from table.log.snapshot import Snapshot
from table.operations import scan
from table.engine import (
    INTERNAL_PREFIX,
    Engine,
    check_user_columns,
    column_name,
    facts_of,
    join_keys,
    mapping_items,
    quote,
    to_arrow_filter,
    values_filter,
)
from table.operations.rewrite import ClauseKind, Rewriter, Staged, abort_on_error, execute
from table.operations.update import cast_column, resolve_columns
from table.transaction import Opens, Transaction


__all__ = ["KEY_VALUES", "MATCHED", "NOT_MATCHED", "NOT_MATCHED_BY_SOURCE", "ApiNames", "Clause", "MergeBuilder",
           "add_clause", "all_columns", "as_arrow_table", "check_assigned", "clause_counts", "count_actions",
           "insert_defaults", "merge_metrics", "merge_parameters", "merge_write_plan", "repeats_allowed"]

KEY_VALUES = 100
"""A join key with at most this many distinct source values prunes target files by those values; more,
by the source's range of them."""

TARGET = INTERNAL_PREFIX + "merge_target"
SOURCE = INTERNAL_PREFIX + "merge_source"
SOURCE_ROW = INTERNAL_PREFIX + "source_row"
MATCHED = INTERNAL_PREFIX + "matched"
ACTION = INTERNAL_PREFIX + "action"

MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE = "matched", "not matched", "not matched by source"
_MATCHED, _NOT_MATCHED, _BY_SOURCE = MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE


@dataclasses.dataclass(frozen=True)
class Clause:
    """One WHEN clause of a MERGE, whichever engine runs it: its kind (:data:`MATCHED`,
    :data:`NOT_MATCHED`, :data:`NOT_MATCHED_BY_SOURCE`), its action (``update``/``delete``/``insert``),
    its condition, and for updates and inserts the assignments (``None``: every column,
    ``update_all``/``insert_all``, but ``except_cols``). Conditions and values are the engine's
    expressions: SQL text here, SQL text or Columns on Spark."""

    kind: str
    action: str
    condition: Any
    assignments: tuple[tuple[str, Any], ...] | None = None
    except_cols: tuple[str, ...] = ()

    @property
    def shape(self) -> ClauseKind:
        """The clause as an executor's rewrite task sees it."""
        return ClauseKind(self.kind, self.action)

    @property
    def brings_all(self) -> bool:
        """An ``update_all``/``insert_all``: every column of the source's names."""
        return self.action != "delete" and self.assignments is None

    def describe(self, shown: Callable[[Any], str] = str) -> dict[str, str]:
        """Delta's ``MergePredicate`` JSON: ``{"predicate": ..., "actionType": ...}`` (``shown``: an
        expression as the log records it)."""
        described = {"actionType": self.action}
        if self.condition is not None:
            described = {"predicate": shown(self.condition), **described}
        return described


def add_clause(clauses: list[Clause], clause: Clause) -> None:
    """Append ``clause`` to ``clauses`` under Delta's rule: only the last clause of a kind may omit its
    condition (a clause after one without a condition could never apply)."""
    earlier = [c for c in clauses if c.kind == clause.kind]
    if earlier and earlier[-1].condition is None:
        raise InvalidArgumentError(
            f"a WHEN {clause.kind.upper()} clause follows one without a condition, so it could never apply; "
            f"only the last {clause.kind} clause may omit its condition (Delta's rule)")
    clauses.append(clause)


@dataclasses.dataclass(frozen=True)
class ApiNames:
    """How an API names what :func:`all_columns`' errors point at."""

    update_all: str
    insert_all: str
    evolve: str


_PYTHON_NAMES = ApiNames("update_all", "insert_all", "pass merge_schema=True")


def all_columns(clause: Clause, table_columns: Sequence[str], source_columns: set[str], *, merge_schema: bool,
                names_of: ApiNames, computed: frozenset[str] = frozenset()) -> list[str]:
    """The table's columns an ``update_all``/``insert_all`` assigns from the source columns of the same names:
    every one but ``except_cols``. One the source lacks is an error, unless the schema evolves (then it
    keeps its value on update and is null on insert), or the writer computes it (``computed``: generated and
    identity columns, :mod:`table.data.rules`)."""
    unknown = sorted(set(clause.except_cols) - set(table_columns))
    if unknown:
        raise InvalidArgumentError(f"except_cols names {unknown}, which are not columns of the table")
    wanted = [c for c in table_columns if c not in clause.except_cols]
    missing = [c for c in wanted if c not in source_columns and c not in computed]
    if missing and not merge_schema:
        raise InvalidArgumentError(
            f"{names_of.update_all if clause.action == 'update' else names_of.insert_all} needs every column of the "
            f"table in the source, which lacks {missing}; add them to the source, "
            f"{'name them in except_cols, ' if names_of is _PYTHON_NAMES else ''}or {names_of.evolve} (then they "
            f"keep their value on update and are null on insert)")
    return [c for c in wanted if c in source_columns]


def check_assigned(clause: Clause, columns: Sequence[str], snapshot: Snapshot) -> None:
    """Refuse a clause that assigns an identity column (an update, or an insert the column forbids), as
    every engine's MERGE plans it (:meth:`table.log.constraints.TableRules.check_assigned`)."""
    rules_of(snapshot.protocol, snapshot.metadata).check_assigned(
        columns, update=clause.action == "update", table=snapshot.table_path,
        what=f"the WHEN {clause.kind.upper()} {clause.action} clause")


def insert_defaults(clause: Clause, columns: Sequence[str], snapshot: Snapshot) -> list[Default]:
    """The column defaults an insert clause that assigns ``columns`` writes in the others (Delta's implicit
    insert actions); none for other clauses."""
    if clause.action != "insert":
        return []
    return rules_of(snapshot.protocol, snapshot.metadata).defaults_left_out(columns)


def repeats_allowed(clauses: Sequence[Clause]) -> bool:
    """Delta's cardinality rule: a target row matched by more than one source row is an error
    (:class:`MergeCardinalityError`: which source row should change it is ambiguous), unless the only
    matched clause is an unconditional delete (the row is deleted once), or no clause changes target rows."""
    matched = [c for c in clauses if c.kind == MATCHED]
    if len(matched) == 1 and matched[0].action == "delete" and matched[0].condition is None:
        return True
    return all(c.kind == NOT_MATCHED for c in clauses)


def count_actions(actions: pa.Array, rows: list[int]) -> int:
    """Add to ``rows[i]`` the rows whose :data:`ACTION` (``actions``: the index of the clause that applies
    to each row, -1 or null for none) is ``i``; returns how many rows a clause applied to."""
    counts = pc.value_counts(actions)
    applied = 0
    for value, count in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()):
        if value is not None and value >= 0:
            rows[value] += count
            applied += count
    return applied


def clause_counts(clauses: Sequence[Clause], rows: Sequence[int]) -> dict[str, int]:
    """The rows each kind of change touched (the keys :func:`merge_metrics` takes, and ``inserted``), from
    the rows each clause applied to (``rows[i]`` for ``clauses[i]``)."""
    counts = dict.fromkeys(("updated_matched", "updated_by_source", "deleted_matched", "deleted_by_source",
                            "inserted"), 0)
    for clause, count in zip(clauses, rows):
        if clause.action == "insert":
            counts["inserted"] += count
        else:
            side = "matched" if clause.kind == MATCHED else "by_source"
            counts[f"{'updated' if clause.action == 'update' else 'deleted'}_{side}"] += count
    return counts


def as_arrow_table(data: Any, what: str = "source") -> pa.Table:
    """``data`` as a pyarrow Table: a Table, RecordBatch, RecordBatchReader, pandas DataFrame, or anything
    with the Arrow PyCapsule stream interface (polars, DuckDB results ...)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if type(data).__module__.startswith("pandas") and hasattr(data, "to_dict"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data).read_all()
    raise ArgumentTypeError(f"the merge {what} must be a pyarrow Table, RecordBatch or RecordBatchReader, a pandas "
                            f"DataFrame, or an object with the Arrow stream interface; got {type(data).__name__}")


class MergeBuilder:
    """A MERGE being described (deltalake's ``TableMerger``): add clauses, then :meth:`execute`.
    Each ``when_*`` method returns the builder. See the module docstring."""

    def __init__(self, table: Transaction | Opens, source: Any, predicate: str, *, source_alias: str = "source",
                 target_alias: str = "target", merge_schema: bool = False):
        if not isinstance(predicate, str):
            raise ArgumentTypeError(f"the merge predicate must be a SQL expression string, got "
                                    f"{type(predicate).__name__}")
        for name, alias in (("source_alias", source_alias), ("target_alias", target_alias)):
            if not isinstance(alias, str) or not alias:
                raise ArgumentTypeError(f"{name} must be a non-empty string, got {alias!r}")
        if source_alias == target_alias:
            raise InvalidArgumentError(f"source_alias and target_alias are both {source_alias!r}; give them "
                                       f"different names")
        if not isinstance(merge_schema, bool):
            raise ArgumentTypeError(f"merge_schema must be True or False, got {merge_schema!r}")
        self._table = table
        self._source = as_arrow_table(source)
        check_user_columns(self._source.column_names, "the merge source")
        self._predicate = predicate
        self._source_alias = source_alias
        self._target_alias = target_alias
        self._merge_schema = merge_schema
        self._clauses: list[Clause] = []

    # --- clauses (deltalake's names) ------------------------------------------------------------------

    def when_matched_update(self, updates: Mapping[str, str], predicate: str | None = None) -> MergeBuilder:
        """Matched target rows (where ``predicate`` holds) get ``updates`` (column -> SQL over both sides)."""
        return self._add(Clause(_MATCHED, "update", _condition(predicate), tuple(mapping_items(updates, "updates"))))

    def when_matched_update_all(self, predicate: str | None = None, except_cols: Sequence[str] | None = None
                                ) -> MergeBuilder:
        """Matched target rows get every column from the source column of the same name (but ``except_cols``)."""
        return self._add(Clause(_MATCHED, "update", _condition(predicate), None, _columns(except_cols)))

    def when_matched_delete(self, predicate: str | None = None) -> MergeBuilder:
        """Matched target rows (where ``predicate`` holds) are deleted."""
        return self._add(Clause(_MATCHED, "delete", _condition(predicate)))

    def when_not_matched_insert(self, updates: Mapping[str, str], predicate: str | None = None) -> MergeBuilder:
        """Source rows matching no target row (where ``predicate`` holds) are inserted with ``updates``
        (column -> SQL over the source); columns not named are null."""
        return self._add(Clause(_NOT_MATCHED, "insert", _condition(predicate),
                                tuple(mapping_items(updates, "updates"))))

    def when_not_matched_insert_all(self, predicate: str | None = None, except_cols: Sequence[str] | None = None
                                    ) -> MergeBuilder:
        """Source rows matching no target row are inserted, each column from the source column of its name."""
        return self._add(Clause(_NOT_MATCHED, "insert", _condition(predicate), None, _columns(except_cols)))

    def when_not_matched_by_source_update(self, updates: Mapping[str, str], predicate: str | None = None
                                          ) -> MergeBuilder:
        """Target rows no source row matches (where ``predicate`` holds) get ``updates`` (SQL over the target)."""
        return self._add(Clause(_BY_SOURCE, "update", _condition(predicate),
                                tuple(mapping_items(updates, "updates"))))

    def when_not_matched_by_source_delete(self, predicate: str | None = None) -> MergeBuilder:
        """Target rows no source row matches (where ``predicate`` holds) are deleted."""
        return self._add(Clause(_BY_SOURCE, "delete", _condition(predicate)))

    def _add(self, clause: Clause) -> MergeBuilder:
        add_clause(self._clauses, clause)
        return self

    # --- running --------------------------------------------------------------------------------------

    def execute(self) -> CommitResult:
        """Run the merge as one commit (re-planned on conflicts until the deadline); see the module
        docstring. The Table moves to the version committed."""
        if not self._clauses:
            raise InvalidArgumentError("the merge has no WHEN clause; add when_matched_update_all(), "
                                       "when_not_matched_insert_all() or another clause before execute()")
        started = time.monotonic()
        source = self._numbered_source()
        materialized = time.monotonic() - started
        return execute(self._table, "MERGE", lambda txn, job_id: _Merge(
            self, txn, source, job_id, materialized).stage(),
            removes_data=any(c.action != "insert" for c in self._clauses))

    def stage(self, txn: Transaction, job_id: str) -> Staged:
        """One attempt of the merge in ``txn`` (what it reads recorded there, its files staged as job
        ``job_id``), not committed: a replaceOn / replaceUsing overwrite (:mod:`table.operations.replace_on`)
        stages its delete part with it."""
        return _Merge(self, txn, self._numbered_source(), job_id, 0.0).stage()

    def _numbered_source(self) -> pa.Table:
        return self._source.append_column(SOURCE_ROW, pa.array(range(self._source.num_rows), pa.int64()))

    def __repr__(self) -> str:
        return (f"MergeBuilder({self._table.uri.table_path}, {self._predicate!r}, "
                f"{len(self._clauses)} clause(s))")


def merge_write_plan(snapshot: Snapshot, source_schema: pa.Schema, clauses: Sequence[Clause], *,
                     merge_schema: bool) -> WritePlan:
    """How a MERGE's rows are written, whichever engine runs it: in the table's schema, or with
    ``merge_schema`` in the table's schema evolved by the source's columns that an ``*_all`` clause brings
    (:func:`~table.data.writespec.schema_merge_plan`, the rule of ``schema_mode="merge"`` writes: new
    columns at the end, integers widened, column ids assigned on a column-mapped table, the protocol
    raised to the features the new schema needs)."""
    check_user_columns(snapshot.schema.names, "the table")
    bringing = [c for c in clauses if c.brings_all]
    if not merge_schema or not bringing:
        return WritePlan(snapshot.schema, tuple(snapshot.partition_columns), False, layout=snapshot.layout)
    brought = pa.schema([f for f in source_schema if not f.name.startswith(INTERNAL_PREFIX)
                         and not any(f.name in c.except_cols for c in bringing)])
    return schema_merge_plan(snapshot, brought)


def _condition(predicate: str | None) -> str | None:
    if predicate is not None and not isinstance(predicate, str):
        raise ArgumentTypeError(f"a clause predicate must be a SQL expression string (or None), got "
                                f"{type(predicate).__name__}")
    return predicate


def _columns(names: Sequence[str] | None) -> tuple[str, ...]:
    if names is None:
        return ()
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ArgumentTypeError(f"except_cols must be a list of column names, got {names!r}")
    return tuple(names)


class _Merge:
    """One attempt of a merge on one snapshot."""

    def __init__(self, spec: MergeBuilder, txn: Transaction, source: pa.Table, job_id: str, materialized: float):
        self.spec = spec
        self.table = txn
        self.snapshot = txn.snapshot
        self.source = source
        self.job_id = job_id
        self.materialized = materialized
        self.started = time.monotonic()
        self.t, self.s = quote(spec._target_alias), quote(spec._source_alias)
        self.engine = Engine()
        self.plan = self._evolve()
        self.schema, self.metadata = self.plan.schema, self.plan.metadata
        self.engine.register(TARGET, _with_ids(self.schema.empty_table()))
        self.engine.register(SOURCE, source)
        self.both = f"SELECT * FROM {quote(TARGET)} AS {self.t} CROSS JOIN {quote(SOURCE)} AS {self.s}"
        self.condition = self.engine.check_expression(spec._predicate, self.both, what="the merge predicate")
        self.clauses = spec._clauses
        self.assignments = [self._assignments(c) for c in self.clauses]
        self.conditions = [self._check_condition(c) for c in self.clauses]

    # --- binding --------------------------------------------------------------------------------------

    def _evolve(self) -> WritePlan:
        return merge_write_plan(self.snapshot, self.source.schema, self.spec._clauses,
                                merge_schema=self.spec._merge_schema)

    def _check_condition(self, clause: Clause) -> str | None:
        if clause.condition is None:
            return None
        return self.engine.check_expression(clause.condition, self._scope(clause),
                                            what=f"the WHEN {clause.kind.upper()} predicate")

    def _scope(self, clause: Clause) -> str:
        if clause.kind == _NOT_MATCHED:
            return f"SELECT * FROM {quote(SOURCE)} AS {self.s}"
        if clause.kind == _BY_SOURCE:
            return f"SELECT * FROM {quote(TARGET)} AS {self.t}"
        return self.both

    def _assignments(self, clause: Clause) -> list[tuple[str, str]]:
        """``(target column, SQL)`` of an update or insert clause, checked in the clause's scope."""
        if clause.action == "delete":
            return []
        names = self.schema.names
        if clause.assignments is None:
            source_columns = set(self.source.column_names) - {SOURCE_ROW}
            pairs = [(c, f"{self.s}.{quote(c)}") for c in all_columns(
                clause, names, source_columns, merge_schema=self.spec._merge_schema, names_of=_PYTHON_NAMES,
                computed=rules_of(self.snapshot.protocol, self.snapshot.metadata).computed_columns)]
        else:
            resolve_columns([c for c, _ in clause.assignments], self.schema, f"the WHEN {clause.kind.upper()} clause")
            pairs = list(clause.assignments)
        check_assigned(clause, [c for c, _ in pairs], self.snapshot)
        pairs += [(d.column, engine_sql(d.expression, what=f"the default of column {d.column!r}",
                                        feature="allowColumnDefaults"))
                  for d in insert_defaults(clause, [c for c, _ in pairs], self.snapshot)]
        scope = self._scope(clause)
        return [(column, self.engine.check_expression(sql, scope, what=f"the value of {column!r} in the WHEN "
                                                                        f"{clause.kind.upper()} clause"))
                for column, sql in pairs]

    # --- planning -------------------------------------------------------------------------------------

    def _prune(self) -> scan.Candidates:
        """Step 2 of the module docstring."""
        if any(c.kind == _BY_SOURCE for c in self.clauses):
            return scan.candidates(self.snapshot, None)
        if not any(c.kind == _MATCHED for c in self.clauses) and self.source.num_rows == 0:
            return scan.Candidates((), None, len(self.snapshot.files), sum(f.size for f in self.snapshot.files))
        plan = self.engine.plan_of(f"SELECT 1 FROM {quote(TARGET)} AS {self.t} JOIN {quote(SOURCE)} AS {self.s} "
                                   f"ON ({self.condition})", what="the merge predicate")
        facts = facts_of(plan, TARGET)
        if facts.empty:
            return scan.Candidates((), None, len(self.snapshot.files), sum(f.size for f in self.snapshot.files))
        terms = [t for t in [to_arrow_filter(facts.filters, self.snapshot.schema)] if t is not None]
        for left, right, null_equal in join_keys(plan):
            term = self._key_filter(left, right, null_equal)
            if term is not None:
                terms.append(term)
        combined = None
        for term in terms:
            combined = term if combined is None else combined & term
        return scan.candidates(self.snapshot, combined, sorted(facts.columns))

    def _key_filter(self, left: Any, right: Any, null_equal: bool):
        """For ``target.k = <source expression>``: target rows must have ``k`` among the source's values
        (or be null, when the key is joined with ``IS NOT DISTINCT FROM``: a null source key matches them)."""
        for target_side, source_side in ((left, right), (right, left)):
            name = column_name(target_side)
            if name is None or target_side.to_variant().relation() != self.spec._target_alias:
                continue
            if name not in self.snapshot.schema.names:
                return None
            low, high, values, rows = self.engine.key_summary(f"SELECT * FROM {quote(SOURCE)} AS {self.s}",
                                                              source_side, max_values=KEY_VALUES,
                                                              what="the merge predicate")
            arrow_type = self.snapshot.schema.field(name).type
            term = pc.scalar(False) if rows == 0 else values_filter(name, arrow_type, low, high, values)
            return term | pc.field(name).is_null() if null_equal else term
        return None

    # --- running --------------------------------------------------------------------------------------

    def stage(self) -> Staged:
        found = self._prune()
        self.table.read_predicate(found.files, found.matcher(self.snapshot), self.spec._predicate)
        rewriter = Rewriter(self.table, self.snapshot, self.job_id, schema=self.schema, layout=self.plan.layout)
        return abort_on_error(rewriter, lambda: self._run(found, rewriter))

    def _run(self, found: scan.Candidates, rewriter: Rewriter) -> Staged:
        clause_rows = [0] * len(self.clauses)
        copied = 0
        touched = []
        matched_sources: list[pa.Array] = []
        scanning = 0.0
        changed = False
        query = self._target_query()
        for start, end in scan.windows(found.files):
            began = time.monotonic()
            rows = _conform(scan.read_window(self.table, self.snapshot, found.files, start, end), self.plan)
            self.engine.register(TARGET, rows)
            joined = self.engine.query(query, what="the merge")
            scanning += time.monotonic() - began
            matched = pc.drop_null(joined[SOURCE_ROW]).combine_chunks()
            matched_sources.append(matched)
            joined = self._one_per_target_row(joined)
            by_file = scan.file_rows(rows)
            for index, outcome in scan.split_by_file(joined):
                actions = outcome[ACTION].combine_chunks()
                if not pc.any(pc.greater_equal(actions, 0)).as_py():
                    continue
                before = by_file[index]  # in row order, as ``outcome`` is
                after = self._apply(before, outcome, actions)
                applied = count_actions(actions, clause_rows)
                if not rewriter.deletion_vectors:  # with vectors the file keeps its other rows: none is copied
                    copied += before.num_rows - applied
                changed = True
                self._changes(rewriter, found.files[index], before, after, actions)
                touched.append(found.files[index])
        matched_all = pa.concat_arrays(matched_sources) if matched_sources else pa.array([], pa.int64())
        inserted = self._inserts(matched_all)
        inserted = rewriter.write(inserted)
        if changed:
            rewriter.change(inserted, "insert")
        return self._staged(found, rewriter, touched, clause_counts(self.clauses, clause_rows), copied,
                            inserted.num_rows, scanning)

    def _target_query(self) -> str:
        """Every target row of the window (LEFT join), its source row if matched, the clause that applies
        (:data:`ACTION`, -1 for none), and for each update clause the values it assigns."""
        matched = f"{self.s}.{quote(SOURCE_ROW)} IS NOT NULL"
        branches = []
        for index, clause in enumerate(self.clauses):
            if clause.kind == _NOT_MATCHED:
                continue
            test = matched if clause.kind == _MATCHED else f"NOT ({matched})"
            if self.conditions[index] is not None:
                test += f" AND coalesce(({self.conditions[index]}), false)"
            branches.append(f"WHEN {test} THEN {index}")
        action = f"CASE {' '.join(branches)} ELSE -1 END" if branches else "-1"
        values = [f"CASE WHEN ({action}) = {index} THEN ({sql}) END AS {quote(_value(index, column))}"
                  for index, clause in enumerate(self.clauses) if clause.kind != _NOT_MATCHED
                  for column, sql in self.assignments[index]]
        columns = [f"{self.t}.{quote(scan.FILE)}", f"{self.t}.{quote(scan.ROW)}", f"{self.s}.{quote(SOURCE_ROW)}",
                   f"{action} AS {quote(ACTION)}", *values]
        return (f"SELECT {', '.join(columns)} FROM {quote(TARGET)} AS {self.t} LEFT JOIN {quote(SOURCE)} AS {self.s} "
                f"ON ({self.condition})")

    def _one_per_target_row(self, joined: pa.Table) -> pa.Table:
        """Delta's cardinality rule: a target row matched by several source rows is an error, unless the only
        matched clause is an unconditional delete (then one of its rows is kept, to be deleted)."""
        if joined.num_rows == 0:
            return joined
        counts = joined.group_by([scan.FILE, scan.ROW]).aggregate([(SOURCE_ROW, "count")])
        repeated = counts.filter(pc.greater(counts[f"{SOURCE_ROW}_count"], 1))
        if repeated.num_rows == 0:
            return joined
        if not repeats_allowed(self.clauses):
            raise MergeCardinalityError(repeated.num_rows, self.table.uri.table_path)
        numbered = joined.append_column(_POSITION, pa.array(range(joined.num_rows), pa.int64()))
        first = numbered.group_by([scan.FILE, scan.ROW], use_threads=False).aggregate([(_POSITION, "min")])
        return joined.take(first[f"{_POSITION}_min"])

    def _apply(self, before: pa.Table, outcome: pa.Table, actions: pa.Array) -> pa.Table:
        """The file's rows after the merge (updated in place; those to delete flagged in :data:`_DELETING`)."""
        after = before.drop_columns([scan.FILE, scan.ROW])
        deleting = pa.array([False] * before.num_rows)
        for index, clause in enumerate(self.clauses):
            if clause.kind == _NOT_MATCHED:
                continue
            hit = pc.equal(actions, index)
            if not pc.any(hit).as_py():
                continue
            if clause.action == "delete":
                deleting = pc.or_(deleting, hit)
                continue
            for column, sql in self.assignments[index]:
                new = cast_column(outcome[_value(index, column)], self.schema.field(column).type, column, sql)
                position = self.schema.get_field_index(column)
                after = after.set_column(position, column, pc.if_else(hit, new, after.column(column)))
        return after.append_column(_DELETING, deleting)

    def _changes(self, rewriter: Rewriter, add, before: pa.Table, packed: pa.Table, actions: pa.Array) -> None:
        """One touched file: it loses every row a clause applied to, its updated rows are written anew, and
        the change data says what happened."""
        original = before.drop_columns([scan.FILE, scan.ROW])
        rows, deleting = packed.drop_columns([_DELETING]), packed[_DELETING]
        applied = pc.greater_equal(actions, 0)
        updating = pc.and_(applied, pc.invert(deleting))
        rewriter.replace(add, before, applied)
        written = rewriter.write(rows.filter(updating))
        rewriter.change(original.filter(updating), "update_preimage")
        rewriter.change(written, "update_postimage")
        rewriter.change(original.filter(deleting), "delete")

    def _inserts(self, matched: pa.Array) -> pa.Table:
        """Step 4: the rows the ``not matched`` clauses insert, in the table's schema."""
        inserting = [(i, c) for i, c in enumerate(self.clauses) if c.kind == _NOT_MATCHED]
        if not inserting:
            return self.schema.empty_table()
        flagged = self.source.append_column(MATCHED, pc.is_in(self.source[SOURCE_ROW], value_set=pc.unique(matched)))
        self.engine.register(SOURCE, flagged)
        branches = []
        for index, clause in inserting:
            test = "TRUE" if self.conditions[index] is None else f"coalesce(({self.conditions[index]}), false)"
            branches.append(f"WHEN {test} THEN {index}")
        action = f"CASE {' '.join(branches)} ELSE -1 END"
        values = [f"CASE WHEN ({action}) = {index} THEN ({sql}) END AS {quote(_value(index, column))}"
                  for index, _ in inserting for column, sql in self.assignments[index]]
        chosen = self.engine.query(
            f"SELECT * FROM (SELECT {action} AS {quote(ACTION)}{''.join(', ' + v for v in values)} "
            f"FROM {quote(SOURCE)} AS {self.s} WHERE NOT {self.s}.{quote(MATCHED)}) WHERE {quote(ACTION)} >= 0",
            what="the merge's inserts")
        self.engine.register(SOURCE, self.source)
        actions = chosen[ACTION].combine_chunks()
        columns = []
        for field in self.schema:
            value = pa.nulls(chosen.num_rows, field.type)
            for index, _ in inserting:
                assigned = dict(self.assignments[index]).get(field.name)
                if assigned is not None:
                    new = cast_column(chosen[_value(index, field.name)], field.type, field.name, assigned)
                    value = pc.if_else(pc.equal(actions, index), new, value)
            columns.append(value)
        return pa.Table.from_arrays(columns, schema=self.schema.with_metadata(None)).cast(self.schema) \
            if chosen.num_rows else self.schema.empty_table()

    def _staged(self, found: scan.Candidates, rewriter: Rewriter, touched: list, counts: dict[str, int],
                copied: int, inserted: int, scanning: float) -> Staged:
        metrics = {**merge_metrics(counts, inserted=inserted, copied=copied,
                                   source_rows=self.source.num_rows, materialize_seconds=self.materialized,
                                   scan_seconds=scanning, rewrite_seconds=time.monotonic() - self.started - scanning),
                   **found.metrics()}
        parameters = merge_parameters(self.spec._predicate, self.clauses, merge_schema=self.metadata is not None)
        if not touched and not inserted and self.metadata is None:
            rewriter.abort()
            return Staged("MERGE", (), (), None, parameters, metrics)
        pendingsets = tuple(rewriter.finish())
        return Staged("MERGE", tuple(rewriter.removes), pendingsets, None, parameters, metrics,
                      metadata=self.metadata, protocol=self.plan.protocol,
                      stray_uploads_possible=rewriter.stray_uploads_possible,
                      vector_adds=tuple(rewriter.vector_adds), rewriter=rewriter)


_DELETING = INTERNAL_PREFIX + "deleting"
_POSITION = INTERNAL_PREFIX + "position"


def _value(index: int, column: str) -> str:
    return f"{INTERNAL_PREFIX}value{index}_{column}"


def _with_ids(table: pa.Table) -> pa.Table:
    return table.append_column(scan.FILE, pa.array([], pa.int32())).append_column(scan.ROW, pa.array([], pa.int64()))


def _conform(rows: pa.Table, plan: WritePlan) -> pa.Table:
    """A window of the table's rows in the schema rows are written with: after a schema evolution, the
    columns it added as nulls and widened columns cast (``WritePlan.conform``)."""
    ids = [rows.column(scan.FILE), rows.column(scan.ROW)]
    data = plan.conform(rows.drop_columns([scan.FILE, scan.ROW]))
    return data.append_column(scan.FILE, ids[0]).append_column(scan.ROW, ids[1])


def merge_metrics(counts: Mapping[str, int], *, inserted: int, copied: int, source_rows: int,
                  materialize_seconds: float, scan_seconds: float, rewrite_seconds: float) -> dict[str, str]:
    """A MERGE's ``operationMetrics`` under delta-spark's names, from the rows each kind of clause changed
    (``updated_matched``, ``updated_by_source``, ``deleted_matched``, ``deleted_by_source``): the Python and
    the Spark MERGE report the same way."""
    updated = counts["updated_matched"] + counts["updated_by_source"]
    deleted = counts["deleted_matched"] + counts["deleted_by_source"]
    return {
        "numSourceRows": str(source_rows),
        "numTargetRowsInserted": str(inserted),
        "numTargetRowsUpdated": str(updated),
        "numTargetRowsMatchedUpdated": str(counts["updated_matched"]),
        "numTargetRowsNotMatchedBySourceUpdated": str(counts["updated_by_source"]),
        "numTargetRowsDeleted": str(deleted),
        "numTargetRowsMatchedDeleted": str(counts["deleted_matched"]),
        "numTargetRowsNotMatchedBySourceDeleted": str(counts["deleted_by_source"]),
        "numTargetRowsCopied": str(copied),
        "numOutputRows": str(inserted + updated + copied),
        "materializeSourceTimeMs": str(int(materialize_seconds * 1000)),
        "scanTimeMs": str(int(scan_seconds * 1000)),
        "rewriteTimeMs": str(int(rewrite_seconds * 1000)),
    }


def merge_parameters(predicate: Any, clauses: Sequence[Clause], *, merge_schema: bool,
                     shown: Callable[[Any], str] = str) -> dict[str, str]:
    """A MERGE's ``operationParameters`` under delta-spark's names: its condition and each kind's clauses
    (``shown``: an expression as the log records it)."""
    parameters = {
        "predicate": json.dumps([shown(predicate)]),
        "matchedPredicates": json.dumps([c.describe(shown) for c in clauses if c.kind == MATCHED]),
        "notMatchedPredicates": json.dumps([c.describe(shown) for c in clauses if c.kind == NOT_MATCHED]),
        "notMatchedBySourcePredicates": json.dumps([c.describe(shown) for c in clauses
                                                    if c.kind == NOT_MATCHED_BY_SOURCE]),
    }
    if merge_schema:
        parameters["mergeSchema"] = "true"
    return parameters
