"""Which files a Spark SQL condition may touch: file pruning for DELETE, UPDATE and MERGE on Spark.

Spark evaluates every condition of a row-level operation; this module only decides which files Spark
need not read. Pruning must never drop a file that Spark's semantics could match: a file wrongly left out
keeps rows a DELETE should remove, or inserts a MERGE row twice. So a file is ruled out only by
conjuncts that mean the same rows in Spark and in the pyarrow filter that prunes files by partition
values and statistics (``table.data.read``).

**The rule.** The condition is bound by DataFusion (the binder of the Python operations,
:mod:`table.engine`) to the table's columns, and each top-level conjunct is kept only if,
*as written* (before DataFusion coerces a type or folds a constant):

1. every comparison (``=``, ``<``, ..., ``IN``, ``BETWEEN``, ``LIKE``, arithmetic) between a column and
   a literal, or two columns, is within one type family: an integer literal against an integer or decimal
   column, a decimal against a decimal, a string literal against a string column, a boolean against a
   boolean; a date column against an ISO ``'YYYY-MM-DD'`` string or ``DATE '...'``. Floating-point
   columns (NaN: Spark orders it above every number and makes ``NaN = NaN`` true, statistics leave it out)
   and timestamp columns (Spark reads a literal in the session's time zone, DataFusion in UTC) are
   never compared; so ``s = 5`` on a string column (Spark casts the column: ``'05'`` matches, where
   ``s = '5'`` would prune the file holding ``'05'``) is dropped, and so is ``id = '5'``;
2. every part without a column is a plain literal: DataFusion would fold ``substr('abc', 0, 2)`` with
   its own function semantics (``'a'``; Spark's is ``'ab'``);
3. no cast of a column changes its family (``CAST(s AS INT) = 5``);
4. no string literal holds a backslash or a quote (Spark reads ``'a\\tb'`` as a tab and ``'a''b'`` as
   ``'ab'``; DataFusion as written and as ``a'b``).

The kept conjuncts are then optimized by DataFusion (``IN`` lists and ``BETWEEN`` expanded, literals
typed as their column) and translated as the Python operations translate theirs
(:func:`~table.engine.to_arrow_filter`). A condition DataFusion cannot bind at all (Spark-only
syntax such as ``"double-quoted"`` strings or ``5L``, case-insensitive column names, a
:class:`~pyspark.sql.Column` instead of text) prunes nothing: every file is read, and Spark decides.

**Why not Spark's own pushed filters** (:mod:`spark_integration.filters`, which reads use): Spark pushes
filters into a scan only below a ``WHERE``; a row-level operation must read *every* row of each file it
rewrites (its unchanged rows are copied), and a MERGE joins the target with an outer join whose
condition Spark never pushes into the target's scan. Spark's analyzed condition is not reachable from a
Spark Connect client either. DataFusion's binder, restricted to what both engines read alike, is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import InvalidArgumentError
from table.engine import INTERNAL_PREFIX, Engine, facts_of, quote, to_arrow_filter

__all__ = ["Pruning", "binds_to", "pruning_filter"]

log = logging.getLogger(__name__)

TARGET = INTERNAL_PREFIX + "spark_target"
SOURCE = INTERNAL_PREFIX + "spark_source"

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_COMPARING = {"BinaryExpr", "InList", "Between", "Like", "ILike", "SimilarTo"}
_LOGICAL = {"AND", "OR"}


@dataclasses.dataclass(frozen=True)
class Pruning:
    """What prunes the table's files for one condition: a pyarrow filter every row Spark selects satisfies
    (None: nothing; read every file), the columns it references, and the conjuncts left out and why."""

    filter: pc.Expression | None
    columns: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    keys: tuple[tuple[str, str], ...] = ()
    """Of a MERGE condition: the kept conjuncts ``target.k = source.c`` (bare columns on both sides, of one
    type family), as ``(k, c)``: target rows can match only where ``k`` is among the source's ``c``."""


class _Unsafe(Exception):
    """A conjunct DataFusion and Spark may read differently (the module docstring's rules)."""


def pruning_filter(schema: pa.Schema, condition: Any, *, target_alias: str | None = None,
                   source_alias: str | None = None, source_schema: pa.Schema | None = None) -> Pruning:
    """The :class:`Pruning` of ``condition`` (Spark SQL text; anything else prunes nothing) over a table
    of ``schema``, whose rows the condition names ``target_alias`` (or by bare column names). For a
    MERGE, ``source_alias`` and ``source_schema`` name the source: only conjuncts about the target alone
    then prune (DataFusion's optimizer pushes them onto the target's scan)."""
    if not isinstance(condition, str):
        return Pruning(None, dropped=("the condition is a Column, not SQL text",))
    engine = Engine()
    engine.register(TARGET, schema.empty_table())
    scope = f"SELECT * FROM {quote(TARGET)}" + (f" AS {quote(target_alias)}" if target_alias else "")
    tables: dict[str, pa.Schema] = {target_alias or TARGET: schema}
    if source_schema is not None:
        if not source_alias:
            return Pruning(None, dropped=("the source DataFrame has no alias this process can see",))
        engine.register(SOURCE, source_schema.empty_table())
        scope += f" CROSS JOIN {quote(SOURCE)} AS {quote(source_alias)}"
        tables[source_alias] = source_schema
    try:
        text = engine.check_expression(condition, scope, what="the condition")
        written = _filter_predicate(engine.written_plan_of(f"{scope} WHERE ({text})", what="the condition"))
    except InvalidArgumentError as exc:
        return Pruning(None, dropped=(f"DataFusion does not bind it ({exc})",))
    if written is None:
        return Pruning(None, dropped=("DataFusion's plan has no filter",))
    checker = _Checker(tables)
    kept, dropped = [], []
    for conjunct in _conjuncts(written):
        try:
            checker.visit(conjunct)
        except _Unsafe as reason:
            dropped.append(f"{conjunct.canonical_name()}: {reason}")
            continue
        kept.append(conjunct)
    keys = tuple(pair for pair in (_key_pair(c, target_alias or TARGET, source_alias) for c in kept)
                 if pair is not None) if source_schema is not None else ()
    if not kept:
        return Pruning(None, dropped=tuple(dropped))
    try:
        facts = facts_of(engine.filtered_plan_of(scope, kept, what="the condition"), TARGET)
    except InvalidArgumentError as exc:
        return Pruning(None, dropped=(*dropped, f"DataFusion does not plan it ({exc})"))
    if facts.empty:
        # DataFusion proved the kept conjuncts false for every row: so does Spark (rules 1-4), and a file
        # read anyway changes nothing; reading none is the same result.
        return Pruning(pc.scalar(False), (), tuple(dropped))
    return Pruning(to_arrow_filter(facts.filters, schema), tuple(sorted(facts.columns)), tuple(dropped), keys)


def _key_pair(conjunct: Any, target: str, source: str | None) -> tuple[str, str] | None:
    """``(target column, source column)`` of a kept conjunct ``target.k = source.c`` (either order)."""
    kind, variant = _variant(conjunct)
    if kind != "BinaryExpr" or variant.op() != "=":
        return None
    sides = []
    for side in (variant.left(), variant.right()):
        side_kind, column = _variant(side)
        if side_kind != "Column":
            return None
        sides.append((column.relation(), column.name()))
    by_relation = dict(sides)
    if len(by_relation) != 2 or target not in by_relation or source not in by_relation:
        return None
    return by_relation[target], by_relation[source]


def binds_to(schema: pa.Schema, condition: Any, *, alias: str | None = None) -> bool:
    """Whether ``condition`` (Spark SQL text) binds to the columns of ``schema`` alone, read by DataFusion
    (stricter than Spark: column names are exact). False for a Column, or for text DataFusion cannot read."""
    if not isinstance(condition, str):
        return False
    engine = Engine()
    engine.register(TARGET, schema.empty_table())
    scope = f"SELECT * FROM {quote(TARGET)}" + (f" AS {quote(alias)}" if alias else "")
    try:
        engine.check_expression(condition, scope, what="the condition")
    except InvalidArgumentError:
        return False
    return True


def _filter_predicate(plan) -> Any:
    variant = plan.to_variant()
    if type(variant).__name__ == "Filter":
        return variant.predicate()
    for child in plan.inputs():
        found = _filter_predicate(child)
        if found is not None:
            return found
    return None


def _variant(expr) -> tuple[str, Any]:
    try:
        variant = expr.to_variant()
    except ValueError:  # variants the Python API does not expose (scalar functions, ...)
        return "", None
    return type(variant).__name__, variant


def _conjuncts(expr) -> list[Any]:
    kind, variant = _variant(expr)
    if kind == "BinaryExpr" and variant.op() == "AND":
        return [*_conjuncts(variant.left()), *_conjuncts(variant.right())]
    return [expr]


def _family(arrow_type: pa.DataType) -> str | None:
    """The type family a comparison may stay within; None for types that never prune (rule 1)."""
    if pa.types.is_integer(arrow_type):
        return "integer"
    if pa.types.is_decimal(arrow_type):
        return "decimal"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_date32(arrow_type):
        return "date"
    return None


def _iso_date(text: Any) -> bool:
    if not isinstance(text, str) or not _ISO_DATE.fullmatch(text):
        return False
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


_COMPATIBLE = {
    ("integer", "integer"), ("decimal", "integer"), ("integer", "decimal"), ("decimal", "decimal"),
    ("string", "string"), ("boolean", "boolean"), ("date", "date"),
}


class _Checker:
    """Walks one conjunct as written; raises :class:`_Unsafe` at the first rule it breaks."""

    def __init__(self, tables: dict[str, pa.Schema]):
        self.tables = tables

    def visit(self, expr) -> bool:
        """Whether ``expr`` references a column; raises _Unsafe."""
        rex = str(expr.rex_type())
        if rex.endswith("Reference"):
            self._column_type(expr)
            return True
        if rex.endswith("Literal"):
            self._check_literal(expr)
            return False
        if not rex.endswith("Call"):
            raise _Unsafe(f"{expr.canonical_name()} is neither a column, a literal nor a call")
        operands = list(expr.rex_call_operands())
        with_columns = [self.visit(o) for o in operands]
        if not any(with_columns):
            if self._date_literal(expr) is not None:
                return False
            raise _Unsafe(f"{expr.canonical_name()} has no column: DataFusion would fold it with its own semantics")
        kind, variant = _variant(expr)
        if kind in ("Cast", "TryCast"):
            inner = variant.expr()
            if str(inner.rex_type()).endswith("Reference"):
                before = _family(self._column_type(inner))
                after = self._type_family_of(expr)
                if before is None or before != after:
                    raise _Unsafe("a cast of a column to another type family")
        if kind in _COMPARING and not (kind == "BinaryExpr" and variant.op() in _LOGICAL):
            self._check_families(operands)
        return True

    def _column_type(self, expr) -> pa.DataType:
        variant = expr.to_variant()
        name, relation = variant.name(), variant.relation()
        schemas = [self.tables[relation]] if relation in self.tables else list(self.tables.values())
        for schema in schemas:
            if name in schema.names:
                return schema.field(name).type
        raise _Unsafe(f"column {name!r} of {relation!r} is not one this process knows")

    def _type_family_of(self, expr) -> str | None:
        try:
            return _SQL_FAMILY.get(str(expr.types().sql_type))
        except Exception:  # noqa: BLE001 - a type DataFusion cannot name here: treated as unknown
            return None

    def _check_literal(self, expr) -> None:
        value = expr.python_value()
        if isinstance(value, pa.Scalar) and _family(value.type) == "string" and value.is_valid:
            text = value.as_py()
            if "\\" in text or "'" in text:
                raise _Unsafe("a string literal with a backslash or a quote (Spark reads escapes DataFusion does not)")

    def _date_literal(self, expr) -> dt.date | None:
        """``DATE 'YYYY-MM-DD'`` (DataFusion: a cast of a string literal to a date), as its date."""
        kind, variant = _variant(expr)
        if kind != "Cast" or not str(variant.expr().rex_type()).endswith("Literal"):
            return None
        if _SQL_FAMILY.get(str(expr.types().sql_type)) != "date":
            return None
        value = variant.expr().python_value()
        text = value.as_py() if isinstance(value, pa.Scalar) else None
        return dt.date.fromisoformat(text) if _iso_date(text) else None

    def _operand(self, expr) -> tuple[str, Any] | None:
        """``("column", family)`` / ``("literal", scalar)`` of a direct operand; None for anything else."""
        rex = str(expr.rex_type())
        if rex.endswith("Reference"):
            return "column", _family(self._column_type(expr))
        if rex.endswith("Literal"):
            value = expr.python_value()
            return "literal", value if isinstance(value, pa.Scalar) else pa.scalar(value)
        if self._date_literal(expr) is not None:
            return "literal", pa.scalar(self._date_literal(expr), pa.date32())
        return None

    def _check_families(self, operands: list[Any]) -> None:
        found = [o for o in (self._operand(x) for x in operands) if o is not None]
        columns = [family for kind, family in found if kind == "column"]
        literals = [value for kind, value in found if kind == "literal" and value.is_valid]
        if not columns:
            return
        if any(c is None for c in columns):
            raise _Unsafe("a comparison on a floating-point, timestamp or other column that never prunes")
        for left in columns:
            for right in columns:
                if (left, right) not in _COMPATIBLE:
                    raise _Unsafe(f"a comparison of columns of the {left} and {right} families")
            for value in literals:
                family = _family(value.type)
                if left == "date" and family == "string" and _iso_date(value.as_py()):
                    continue
                if (left, family) not in _COMPATIBLE:
                    raise _Unsafe(f"a comparison of a column of the {left} family with a literal of type {value.type} "
                                  f"(Spark and DataFusion coerce it differently)")


_SQL_FAMILY = {"SqlType.DATE": "date", "SqlType.VARCHAR": "string", "SqlType.CHAR": "string",
               "SqlType.BOOLEAN": "boolean", "SqlType.DECIMAL": "decimal", "SqlType.TINYINT": "integer",
               "SqlType.SMALLINT": "integer", "SqlType.INTEGER": "integer", "SqlType.BIGINT": "integer"}
