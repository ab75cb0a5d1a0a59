"""The table's rules applied to the rows every writer stages: the one place CHECK constraints, invariants,
generated and identity columns and column defaults are enforced (:mod:`table.log.constraints` reads them).

Every data file goes through :class:`~table.data.staging.StagingWriter` (``write_table``, Spark's tasks,
streaming micro-batches, the rows DELETE, UPDATE and MERGE rewrite or insert, replaceWhere), which
calls :class:`RowRules` on each batch before a byte of it is encoded:

1. :meth:`RowRules.complete`, on the rows as given: a column with a default (``CURRENT_DEFAULT``) that the
   data omits gets the default's value (a NULL the data gives stays: it is a value; a MERGE insert that
   does not assign the column has its plan assign the default); a generated column the data omits (or
   leaves NULL) is computed from its expression, an identity column the data omits (or leaves NULL) gets
   the next values (``first``,
   ``first + step``, ...; a writer that is one of ``slots`` concurrent tasks takes every ``slots``-th value
   from its ``slot``, so tasks never hand out the same value); an identity column given with values is
   refused unless ``delta.identity.allowExplicitInsert`` is true;
2. :meth:`RowRules.check`, on the rows as the table's types hold them: every CHECK constraint and
   invariant must be TRUE (FALSE and NULL are violations, as delta-spark decides), and a generated column
   given by the data must equal its expression (NULL-safe). The first violating row fails the write with
   :class:`~table.errors.ConstraintViolationError`; the writer's files are then aborted and nothing is
   committed.

Rows a row-level operation copies from the table's files (``copies_rows``) keep their identity values
(only NULL ones, a MERGE's inserts, get new values) and have their generated columns computed again (an
UPDATE of a source column moves the generated value with it). Expressions are SQL, evaluated by
DataFusion as DML predicates are (:mod:`table.engine`).
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import InvalidArgumentError
from table.errors import ConstraintViolationError, UnsupportedFeatureError
from table.log.constraints import Identity, TableRules
from table.engine import INTERNAL_PREFIX, Engine, quote

__all__ = ["RowRules", "engine_sql"]

_ROWS = INTERNAL_PREFIX + "rows"
_SHOWN_CHARS = 200

_DATE_PARTS = re.compile(r"\b(year|month|day|dayofmonth|hour|minute|second)\s*\(", re.IGNORECASE)
_DIVERGENT = re.compile(r"\b(date_format|from_unixtime|unix_timestamp|to_date|to_timestamp)\s*\(", re.IGNORECASE)


def engine_sql(expression: str, *, what: str, feature: str = "checkConstraints") -> str:
    """A table's SQL expression (Spark SQL, as Delta writes it) as DataFusion evaluates it: Spark's
    ``year(x)``, ``month(x)``, ``day(x)``, ``hour(x)``, ``minute(x)``, ``second(x)`` become ``date_part``.
    Functions both know by name but that mean something else (Spark's date patterns against DataFusion's)
    are refused rather than evaluated wrongly."""
    divergent = _DIVERGENT.search(expression)
    if divergent:
        raise UnsupportedFeatureError(
            f"{what} ({expression}) uses {divergent.group(1)}(), whose Spark SQL meaning dynacommit does not "
            f"evaluate; write this table with delta-spark", feature=feature)
    return _DATE_PARTS.sub(lambda m: f"date_part('{'day' if m.group(1).lower() == 'dayofmonth' else m.group(1).lower()}', ",
                           expression)


class RowRules:
    """The rules of one table applied by one writer (module docstring). ``schema``: the table's columns and
    types (logical names). Identity values start above each column's high-water mark in ``rules`` (the
    same for every task of a job), at this writer's ``slot`` of ``slots``."""

    def __init__(self, rules: TableRules, schema: pa.Schema, *, table: str, copies_rows: bool = False,
                 slot: int = 0, slots: int = 1):
        self.rules = rules
        self.schema = schema
        self.table = table
        self.copies_rows = copies_rows
        self.slot, self.slots = slot, max(1, slots)
        if rules.identity and not 0 <= slot < self.slots:
            raise InvalidArgumentError(f"task {slot} of a write to {table} has no share of the identity values (they "
                                       f"are shared among {self.slots} tasks); write with fewer partitions")
        self._engine: Engine | None = None
        self._next: dict[str, int] = {i.column: i.first_free() + i.step * self.slot for i in rules.identity}
        #: Per identity column: ``[first, last]`` value this writer handed out (absent: none).
        self.handed_out: dict[str, list[int]] = {}
        self._computed: set[str] = set()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine()
        return self._engine

    # --- 1. complete ----------------------------------------------------------------------------------

    def complete(self, data: pa.Table) -> pa.Table:
        """``data`` with the defaults, generated and identity columns it omits filled in (step 1)."""
        self._computed = set()
        absent = [d for d in self.rules.defaults if d.column not in data.column_names]
        if absent:
            values = self._evaluate(data, [d.expression for d in absent], "a column default", "allowColumnDefaults") \
                if data.num_rows else [pa.nulls(0, self.schema.field(d.column).type) for d in absent]
            for d, column in zip(absent, values):
                data = _set_column(data, d.column, self._cast(column, d.column, f"the default of column {d.column!r} "
                                                                                f"({d.expression})"))
        for identity in self.rules.identity:
            data = self._identity(data, identity)
        missing = [g for g in self.rules.generated if g.column not in data.column_names or self.copies_rows
                   or data.column(g.column).null_count]
        if missing and data.num_rows:
            values = self._evaluate(data, [g.expression for g in missing], "a generation expression")
            for g, column in zip(missing, values):
                column = self._cast(column, g.column, f"generated column {g.column!r} ({g.expression})")
                if g.column in data.column_names and not self.copies_rows:
                    column = pc.coalesce(data.column(g.column), column)  # NULL: not given, computed
                else:
                    self._computed.add(g.column)
                data = _set_column(data, g.column, column)
        elif missing:
            for g in missing:
                data = _set_column(data, g.column, pa.nulls(0, self.schema.field(g.column).type))
        return data

    def _identity(self, data: pa.Table, identity: Identity) -> pa.Table:
        name = identity.column
        given = data.column(name) if name in data.column_names else None
        if given is not None and given.null_count == 0 and (identity.allow_explicit_insert or self.copies_rows):
            return data
        if given is not None and given.null_count < len(given) and not (identity.allow_explicit_insert
                                                                         or self.copies_rows):
            raise InvalidArgumentError(
                f"column {name!r} of table {self.table} is an identity column (GENERATED ALWAYS AS IDENTITY): its "
                f"values are generated, and the data gives some (delta.identity.allowExplicitInsert is false); "
                f"leave the column out of the data")
        needed = data.num_rows if given is None else given.null_count
        if not needed:
            return data
        step = identity.step * self.slots
        start = self._next[name]
        values = pa.array(range(start, start + step * needed, step), pa.int64())
        self._next[name] = start + step * needed
        first, last = start, start + step * (needed - 1)
        seen = self.handed_out.get(name)
        self.handed_out[name] = [first if seen is None else seen[0], last]
        if given is not None and given.null_count != len(given):
            positions = pc.cumulative_sum(pc.cast(pc.is_null(given), pa.int64()))
            filled = pc.take(values, pc.max_element_wise(pc.subtract(positions, 1), 0))
            values = pc.if_else(pc.is_null(given), filled, pc.cast(given, pa.int64()))
        self._computed.add(name)
        return _set_column(data, name, self._cast(values, name, f"identity column {name!r}"))

    # --- 2. check -------------------------------------------------------------------------------------

    def check(self, data: pa.Table) -> None:
        """Refuse ``data`` (the table's columns and types) if a row breaks a rule (step 2)."""
        if not data.num_rows:
            return
        engine = self.engine
        engine.register(_ROWS, data)
        for check in self.rules.checks:
            what = f"{check.kind} {check.name!r} ({check.expression})"
            sql = engine_sql(check.expression, what=what)
            found = engine.query(f"SELECT * FROM {quote(_ROWS)} WHERE NOT coalesce(({sql}\n), false) LIMIT 1",
                                 what=what)
            if found.num_rows:
                raise ConstraintViolationError(
                    f"{check.kind} {check.name} ({check.expression}) violated by row with values: "
                    f"{_row(found)} (table {self.table}); the write failed and nothing was committed. Fix or "
                    f"filter the rows, or drop the constraint", name=check.name, expression=check.expression)
        given = [g for g in self.rules.generated if g.column not in self._computed]
        if not given:
            return
        values = self._evaluate(data, [g.expression for g in given], "a generation expression")
        for g, expected in zip(given, values):
            expected = self._cast(expected, g.column, f"generated column {g.column!r} ({g.expression})")
            actual = data.column(g.column)
            same = pc.or_kleene(pc.equal(actual, expected), pc.and_(pc.is_null(actual), pc.is_null(expected)))
            wrong = pc.invert(pc.fill_null(same, False))
            if pc.any(wrong).as_py():
                index = pc.index(wrong, True).as_py()
                raise ConstraintViolationError(
                    f"generated column {g.column} ({g.expression}) violated by row with values: "
                    f"{_row(data.slice(index, 1))}: the data gives {actual[index].as_py()!r} where the expression "
                    f"gives {expected[index].as_py()!r} (table {self.table}); nothing was committed. Leave the "
                    f"column out of the data and it is computed", name=g.column, expression=g.expression)

    # --- helpers --------------------------------------------------------------------------------------

    def _evaluate(self, data: pa.Table, expressions: list[str], what: str,
                  feature: str = "generatedColumns") -> list[pa.ChunkedArray]:
        engine = self.engine
        engine.register(_ROWS, data)
        selects = ", ".join(f"({engine_sql(e, what=what, feature=feature)}\n) AS {quote(f'{INTERNAL_PREFIX}{i}')}"
                            for i, e in enumerate(expressions))
        result = engine.query(f"SELECT {selects} FROM {quote(_ROWS)}", what=what)
        return [result.column(i) for i in range(len(expressions))]

    def _cast(self, values: pa.Array | pa.ChunkedArray, column: str, what: str) -> pa.Array | pa.ChunkedArray:
        target = self.schema.field(column).type
        if values.type == target:
            return values
        try:
            return values.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgumentError(f"the values of {what} of table {self.table} do not fit the column's type "
                                       f"{target}: {exc}") from None


def _set_column(data: pa.Table, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    if name in data.column_names:
        return data.set_column(data.column_names.index(name), name, values)
    return data.append_column(name, values)


def _row(rows: pa.Table) -> str:
    row = rows.slice(0, 1).to_pylist()[0]
    shown = ", ".join(f"{k}={v!r}" for k, v in row.items() if not k.startswith(INTERNAL_PREFIX))
    return shown if len(shown) <= _SHOWN_CHARS else shown[:_SHOWN_CHARS] + "..."
