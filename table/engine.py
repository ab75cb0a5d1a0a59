"""The SQL engine of row-level operations and of the rules every write checks (constraints, generated
columns): DataFusion over Arrow tables, one session per use.

Predicates and expressions of ``delete``, ``update`` and ``merge`` are SQL strings, evaluated here by
DataFusion, never by a parser of ours. DataFusion was chosen over DuckDB by measurement (BENCHMARKS.md,
"The SQL engine of row-level operations"): it evaluated a predicate, an UPDATE projection and a MERGE
join over Arrow 1.3-2x faster, and it is the engine of deltalake (delta-rs), so a predicate written for
deltalake's ``delete``/``update``/``merge`` means the same here. Identifiers are case-sensitive and
never folded to lower case (deltalake's parser options), so ``userId`` names the column ``userId``.

What this module gives the operations:

- :class:`Engine`: Arrow tables registered under names, SQL run to an Arrow table, and user expressions
  checked to be exactly one expression over a given scope before they are put into a query (so a
  string cannot change the shape of the query it is put in). Every engine error becomes an
  :class:`~logstore.errors.InvalidArgumentError` naming the expression and what DataFusion said.
- :func:`Engine.plan_of`: the optimized logical plan of a query, from which :mod:`table.operations.scan`
  reads what a predicate says about one table (its conjuncts pushed onto that table's scan, the columns
  it needs, the equi-join keys of a merge), typed by DataFusion's own binder.
- :func:`to_arrow_filter`: a predicate over one table as a pyarrow expression that a row satisfying it
  satisfies too (used only to skip files: what cannot be translated is left out, never guessed).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["INTERNAL_PREFIX", "Engine", "PlanFacts", "quote", "to_arrow_filter"]

INTERNAL_PREFIX = "__dynacommit_"
"""Columns the operations add to the tables they query (file and row numbers); user columns may not
start with it."""


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier (DataFusion's double quotes)."""
    return '"' + name.replace('"', '""') + '"'


def _datafusion():
    # Imported on first use: reading and appending never need the engine.
    import datafusion

    return datafusion


@dataclasses.dataclass(frozen=True)
class PlanFacts:
    """What an optimized plan says about one registered table: the columns it reads of it, and the
    predicates applied to its scan alone (conjuncts that refer to nothing else)."""

    columns: frozenset[str]
    filters: tuple[Any, ...]  # datafusion Expr
    empty: bool = False       # the optimizer proved the query returns no row


class Engine:
    """One DataFusion session: the Arrow tables of one operation, and queries over them."""

    def __init__(self) -> None:
        datafusion = _datafusion()
        config = (datafusion.SessionConfig()
                  .set("datafusion.sql_parser.enable_ident_normalization", "false")
                  .set("datafusion.execution.time_zone", "UTC"))
        self._ctx = datafusion.SessionContext(config)
        self._names: set[str] = set()

    # --- tables -------------------------------------------------------------------------------------

    def register(self, name: str, table: pa.Table) -> None:
        """Make ``table`` queryable as ``name`` (replacing a table registered under it before)."""
        if name in self._names:
            self._ctx.deregister_table(name)
        self._ctx.from_arrow(table, name=name)
        self._names.add(name)

    # --- queries ------------------------------------------------------------------------------------

    def query(self, sql: str, *, what: str) -> pa.Table:
        """Run ``sql``; ``what`` names the user's part of it in errors (e.g. "the delete predicate")."""
        try:
            return self._ctx.sql(sql).to_arrow_table()
        except Exception as exc:  # noqa: BLE001 - DataFusion raises Exception/ValueError; translated once, here
            raise _engine_error(exc, what) from None

    def plan_of(self, sql: str, *, what: str):
        """The optimized logical plan of ``sql`` (a datafusion ``LogicalPlan``); nothing is executed."""
        try:
            return self._ctx.sql(sql).optimized_logical_plan()
        except Exception as exc:  # noqa: BLE001 - see query()
            raise _engine_error(exc, what) from None

    def written_plan_of(self, sql: str, *, what: str):
        """The logical plan of ``sql`` as written: bound to the registered tables, before the optimizer
        coerces types or folds constants (a datafusion ``LogicalPlan``); nothing is executed."""
        try:
            return self._ctx.sql(sql).logical_plan()
        except Exception as exc:  # noqa: BLE001 - see query()
            raise _engine_error(exc, what) from None

    def filtered_plan_of(self, sql: str, predicates: Sequence[Any], *, what: str):
        """The optimized logical plan of ``SELECT 1`` over the rows of ``sql`` for which every one of
        ``predicates`` (datafusion Exprs bound in the scope of ``sql``, e.g. taken from
        :meth:`written_plan_of`) holds; nothing is executed."""
        datafusion = _datafusion()
        try:
            frame = self._ctx.sql(sql)
            for predicate in predicates:
                frame = frame.filter(predicate if isinstance(predicate, datafusion.Expr) else datafusion.Expr(predicate))
            return frame.select(datafusion.lit(1)).optimized_logical_plan()
        except Exception as exc:  # noqa: BLE001 - see query()
            raise _engine_error(exc, what) from None

    def key_summary(self, sql_from: str, expression: Any, *, max_values: int, what: str
                    ) -> tuple[Any, Any, list[Any] | None, int]:
        """Of ``expression`` (a datafusion Expr bound in the scope of ``sql_from``) over the rows of
        ``sql_from``: its minimum, maximum, its distinct non-null values when there are at most
        ``max_values`` of them (else None), and how many rows have a non-null value."""
        datafusion = _datafusion()
        f = datafusion.functions
        expr = expression if isinstance(expression, datafusion.Expr) else datafusion.Expr(expression)
        try:
            frame = self._ctx.sql(sql_from)
            row = frame.aggregate([], [f.min(expr).alias("low"), f.max(expr).alias("high"),
                                       f.count(expr, distinct=True).alias("distinct"),
                                       f.count(expr).alias("rows")]).to_arrow_table().to_pylist()[0]
            values = None
            if row["distinct"] <= max_values:
                listed = frame.aggregate([], [f.array_agg(expr, distinct=True).alias("v")]).to_arrow_table()
                values = [v for v in (listed.column("v")[0].as_py() or []) if v is not None]
        except Exception as exc:  # noqa: BLE001 - see query()
            raise _engine_error(exc, what) from None
        return row["low"], row["high"], values, row["rows"]

    # --- user expressions ---------------------------------------------------------------------------

    def check_expression(self, text: object, scope_sql: str, *, what: str) -> str:
        """``text`` if it is one SQL expression that binds in the scope of ``scope_sql`` (a ``SELECT *
        FROM ...`` over registered tables, with the aliases the expression may use); else
        ArgumentTypeError / InvalidArgumentError naming ``what``. Returns the text ready to be put in
        parentheses in a query (a trailing ``--`` comment cannot swallow what follows it)."""
        if not isinstance(text, str):
            raise ArgumentTypeError(f"{what} must be a SQL expression string, got {type(text).__name__} {text!r}")
        if not text.strip():
            raise InvalidArgumentError(f"{what} is empty; give a SQL expression such as \"id = 5\"")
        schema = self._scope_schema(scope_sql, what)
        try:
            self._ctx.parse_sql_expr(text, schema)
        except Exception as exc:  # noqa: BLE001 - see query()
            raise _engine_error(exc, what, text) from None
        return text + "\n"

    def _scope_schema(self, scope_sql: str, what: str):
        try:
            return self._ctx.sql(scope_sql).logical_plan().to_variant().schema()
        except Exception as exc:  # noqa: BLE001 - see query()
            raise _engine_error(exc, what) from None


_INTERNAL_QUALIFIER = re.compile(re.escape(INTERNAL_PREFIX) + r"\w+\.")


def _engine_error(exc: Exception, what: str, text: str | None = None) -> Exception:
    if isinstance(exc, (MemoryError, RecursionError)):  # not about the SQL: let it through as it is
        return exc
    message = str(exc).replace("DataFusion error: ", "").strip()
    message = _INTERNAL_QUALIFIER.sub("", message)  # the tables we registered are no names of the user's
    shown = f" {text.strip()!r}" if text is not None else ""
    return InvalidArgumentError(f"{what}{shown} is not valid SQL for this table: {message}")


# --- what a plan says about one table ---------------------------------------------------------------


def facts_of(plan, table_name: str) -> PlanFacts:
    """The :class:`PlanFacts` of the registered table ``table_name`` in an optimized plan: the columns
    its scans read and the filters directly above them (conjuncts the optimizer pushed onto that
    table alone). A plan the optimizer reduced to no rows is ``empty``."""
    columns: set[str] = set()
    filters: list[Any] = []

    def walk(node, above_filter) -> bool:
        variant = node.to_variant()
        kind = type(variant).__name__
        if kind == "EmptyRelation":
            return True
        if kind == "TableScan":
            if variant.table_name() == table_name:
                columns.update(name for _, name in variant.projection())
                filters.extend(variant.filters())
                if above_filter is not None:
                    filters.append(above_filter)
            return False
        passing = variant.predicate() if kind == "Filter" else (above_filter if kind in ("Projection", "SubqueryAlias")
                                                               else None)
        found_empty = False
        for child in node.inputs():
            found_empty = walk(child, passing) or found_empty
        return found_empty

    empty = walk(plan, None)
    return PlanFacts(frozenset(columns), tuple(filters), empty=empty and not columns)


def join_keys(plan) -> list[tuple[Any, Any, bool]]:
    """The equi-join pairs ``(left expr, right expr, nulls equal)`` of the first join of an optimized plan;
    nulls are equal for a key joined with ``IS NOT DISTINCT FROM``."""

    def walk(node):
        variant = node.to_variant()
        if type(variant).__name__ == "Join":
            null_equal = bool(variant.null_equals_null())
            return [(left, right, null_equal) for left, right in variant.on()]
        for child in node.inputs():
            found = walk(child)
            if found is not None:
                return found
        return None

    return walk(plan) or []


def _variant(expr) -> tuple[str, Any]:
    """``(kind, variant)`` of a DataFusion Expr; kind ``""`` for variants the Python API does not expose
    (scalar functions, ...): nothing is then known about them."""
    try:
        variant = expr.to_variant()
    except ValueError:
        return "", None
    return type(variant).__name__, variant


def column_name(expr) -> str | None:
    """The column an expression is, if it is a bare column reference (any qualifier)."""
    kind, variant = _variant(expr)
    return variant.name() if kind == "Column" else None


# --- predicates as pyarrow filters, for skipping files ------------------------------------------------

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq,
            "!=": operator.ne}


def to_arrow_filter(predicates: Iterable[Any], schema: pa.Schema) -> pc.Expression | None:
    """A pyarrow expression implied by the conjunction of ``predicates`` (DataFusion Exprs over one table,
    from :func:`facts_of`), over the columns of ``schema``; None when nothing can be said.

    Every row for which the predicates are TRUE satisfies the result, so a file whose partition values
    and statistics contradict it holds no such row. Comparisons of a top-level column with a literal
    (as DataFusion's optimizer leaves them: ``IN`` and ``BETWEEN`` already expanded, literals already
    cast to the column's type), ``IS [NOT] NULL``, ``AND``, ``OR`` and ``NOT`` are translated; anything
    else is left out of an ``AND`` (the rest still holds), and makes an ``OR`` or ``NOT`` unknown.
    """
    terms = [t for t in (_translate(p, schema)[0] for p in predicates) if t is not None]
    return functools.reduce(operator.and_, terms) if terms else None


def _translate(expr, schema: pa.Schema) -> tuple[pc.Expression | None, bool]:
    """(pyarrow expression implied by ``expr`` or None, whether it is exactly ``expr``)."""
    kind, variant = _variant(expr)
    if kind == "BinaryExpr":
        op = variant.op()
        if op in ("AND", "OR"):
            left, left_exact = _translate(variant.left(), schema)
            right, right_exact = _translate(variant.right(), schema)
            if op == "AND":
                if left is None or right is None:
                    return (left if right is None else right), False
                return left & right, left_exact and right_exact
            if left is None or right is None:
                return None, False
            return left | right, left_exact and right_exact
        if op in _COMPARE:
            return _comparison(variant.left(), op, variant.right(), schema), True
        return None, False
    if kind == "Not":
        inner, exact = _translate(variant.expr(), schema)
        return (~inner, True) if inner is not None and exact else (None, False)
    if kind in ("IsNull", "IsNotNull"):
        field = _field(variant.expr(), schema)
        if field is None:
            return None, False
        return (field.is_null() if kind == "IsNull" else field.is_valid()), True
    if kind == "Literal":
        value = expr.python_value()
        if isinstance(value, bool):
            return pc.scalar(value), True
        return None, False
    if kind == "Column":
        name = variant.name()
        if name in schema.names and pa.types.is_boolean(schema.field(name).type):
            return pc.field(name) == pc.scalar(True), True
    return None, False


def _comparison(left, op: str, right, schema: pa.Schema) -> pc.Expression | None:
    field_expr, literal, flipped = _field(left, schema), right, False
    if field_expr is None:
        field_expr, literal, flipped = _field(right, schema), left, True
    if field_expr is None or _variant(literal)[0] != "Literal":
        return None
    name = column_name(right if flipped else left)
    value = _scalar(literal, schema.field(name).type)
    if value is None:
        return None
    return _COMPARE[_FLIP[op] if flipped else op](field_expr, value)


def _field(expr, schema: pa.Schema) -> pc.Expression | None:
    name = column_name(expr)
    if name is None or name not in schema.names or pa.types.is_nested(schema.field(name).type):
        return None
    return pc.field(name)


def _scalar(literal, arrow_type: pa.DataType) -> pc.Expression | None:
    """The literal as a pyarrow scalar of the column's type, or None when it does not convert exactly
    (DataFusion casts literals to the column's type; a mismatch left here is not worth guessing)."""
    value = literal.python_value()
    if value is None:
        return None
    try:
        scalar = pa.scalar(value, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    return pc.scalar(scalar)


def values_filter(column: str, arrow_type: pa.DataType, low: Any, high: Any, values: Sequence[Any] | None
                  ) -> pc.Expression | None:
    """``column`` between ``low`` and ``high`` (and among ``values`` when given): what a merge's target
    rows must satisfy to equal some source key whose range or set that is. None when the bounds do not
    convert to the column's type."""
    try:
        if values is not None:
            return pc.field(column).isin(pa.array(values, type=arrow_type))
        terms = []
        if low is not None:
            terms.append(pc.field(column) >= pc.scalar(pa.scalar(low, type=arrow_type)))
        if high is not None:
            terms.append(pc.field(column) <= pc.scalar(pa.scalar(high, type=arrow_type)))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    return functools.reduce(operator.and_, terms) if terms else None


def check_user_columns(names: Iterable[str], where: str) -> None:
    """Refuse column names the operations reserve for themselves."""
    reserved = sorted(n for n in names if n.startswith(INTERNAL_PREFIX))
    if reserved:
        raise InvalidArgumentError(f"{where} has column(s) {reserved} whose names start with {INTERNAL_PREFIX!r}, "
                                   f"which row-level operations reserve; rename them")


def literal_sql(value: Any) -> str:
    """A Python value as a SQL literal DataFusion reads back exactly (for values of our own, never user
    text): None, bools, ints and strings."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def mapping_items(mapping: object, what: str) -> list[tuple[str, str]]:
    """The ``column -> SQL expression`` pairs of an ``updates``/``values`` argument, checked."""
    if not isinstance(mapping, Mapping):
        raise ArgumentTypeError(f"{what} must be a dict of column name to SQL expression, got {type(mapping).__name__}")
    if not mapping:
        raise InvalidArgumentError(f"{what} is empty; name at least one column and its new value")
    items = []
    for key, value in mapping.items():
        if not isinstance(key, str) or not key:
            raise ArgumentTypeError(f"{what} keys must be column names, got {key!r}")
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{what}[{key!r}] must be a SQL expression string, got "
                                    f"{type(value).__name__} {value!r}; write it as SQL, e.g. \"'{value}'\"")
        items.append((key, value))
    return items
