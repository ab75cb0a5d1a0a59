"""Partition filters derived from generated partition columns, as Delta derives them: a predicate on a
column ``ts`` of a table partitioned by ``day`` GENERATED ALWAYS AS ``CAST(ts AS DATE)`` (or ``year(ts)``
...) also bounds ``day``, so files of other partitions are skipped by their partition values alone, even
without statistics for ``ts``.

:func:`derived_filter` reads the comparisons of a source column with a literal among a predicate's
top-level conjuncts (DataFusion's optimized filters, :func:`table.engine.facts_of`) and gives
the pyarrow terms they imply on the partition columns. Only generation expressions whose value never
decreases as the source grows are used (``CAST(c AS DATE)`` and ``year(c)``); anything else derives
nothing. Every row the predicate selects satisfies the derived terms, so they only ever skip files that
hold none.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from table.log.constraints import Generated
from table.engine import _variant, column_name

__all__ = ["derived_filter"]

_CAST_DATE = re.compile(r"^\s*cast\s*\(\s*`?(\w+)`?\s+as\s+date\s*\)\s*$", re.IGNORECASE)
_YEAR = re.compile(r"^\s*year\s*\(\s*`?(\w+)`?\s*\)\s*$", re.IGNORECASE)


def _to_date(value: Any) -> dt.date | None:
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.date()
    if isinstance(value, dt.date):
        return value
    return None


def _to_year(value: Any) -> int | None:
    day = _to_date(value)
    return None if day is None else day.year


_KINDS: tuple[tuple[re.Pattern[str], Callable[[Any], Any]], ...] = ((_CAST_DATE, _to_date), (_YEAR, _to_year))


def derived_filter(filters: Iterable[Any], generated: Sequence[Generated], partition_columns: Sequence[str],
                   schema: pa.Schema) -> pc.Expression | None:
    """The pyarrow terms on generated partition columns implied by ``filters`` (DataFusion Exprs, a
    conjunction), or None when none is implied."""
    sources: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}
    for g in generated:
        if g.column not in partition_columns:
            continue
        for pattern, convert in _KINDS:
            found = pattern.match(g.expression)
            if found and found.group(1) in schema.names:
                sources.setdefault(found.group(1), []).append((g.column, convert))
    if not sources:
        return None
    terms: list[pc.Expression] = []
    for expr in _conjuncts(filters):
        kind, variant = _variant(expr)
        if kind != "BinaryExpr" or variant.op() not in ("=", "<", "<=", ">", ">="):
            continue
        op, left, right = variant.op(), variant.left(), variant.right()
        name = column_name(left)
        literal = right
        if name is None:
            name, literal = column_name(right), left
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}[op]
        if name not in sources or _variant(literal)[0] != "Literal":
            continue
        value = literal.python_value()
        for column, convert in sources[name]:
            bound = convert(value)
            if bound is None:
                continue
            try:
                scalar = pc.scalar(pa.scalar(bound, type=schema.field(column).type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                continue
            field = pc.field(column)
            # the generated value is monotonic (non-decreasing) in the source: strictness is lost
            terms.append(field == scalar if op == "=" else field >= scalar if op in (">", ">=") else field <= scalar)
    if not terms:
        return None
    result = terms[0]
    for term in terms[1:]:
        result = result & term
    return result


def _conjuncts(filters: Iterable[Any]) -> Iterable[Any]:
    for expr in filters:
        kind, variant = _variant(expr)
        if kind == "BinaryExpr" and variant.op() == "AND":
            yield from _conjuncts([variant.left(), variant.right()])
        else:
            yield expr
