"""Spark's pushed-down filters as pyarrow expressions, only where both mean exactly the same rows.

A filter :meth:`DataSourceReader.pushFilters` accepts is no longer evaluated by Spark: the reader must
return exactly the rows Spark would have kept. So a filter is converted only when pyarrow's result is
Spark's for every row, nulls included; anything else is handed back to Spark unchanged, and costs
only pruning. The converted expression serves twice: to skip whole files by their partition values and
statistics (:func:`table.data.read.prune_files`), and to filter the rows of the files that are read.

Converted: ``EqualTo``, ``EqualNullSafe``, ``GreaterThan(OrEqual)``, ``LessThan(OrEqual)``, ``In``,
``IsNull``, ``IsNotNull``, ``StringStartsWith``/``EndsWith``/``Contains`` and ``Not`` of those, on a
top-level column of an integer, string, boolean, date, decimal or timestamp type. Not converted:

- floating-point columns: Spark orders NaN above every number and makes ``NaN = NaN`` true, pyarrow
  makes every comparison with NaN false;
- ``Not(In)`` whose list holds a null (never true in Spark, true for other values in pyarrow);
- nested columns, binary columns, literals that do not fit the column's type.

Null semantics agree for the rest: a comparison with a null is null in both, and a null result drops
the row in both. ``EqualNullSafe`` becomes ``field == v and is_valid(field)`` (Kleene logic), which is
false, not null, for a null field, so that its negation keeps those rows as Spark's does.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

__all__ = ["combine", "to_expression"]

_COMPARISONS = {
    EqualTo: operator.eq,
    GreaterThan: operator.gt,
    GreaterThanOrEqual: operator.ge,
    LessThan: operator.lt,
    LessThanOrEqual: operator.le,
}


def to_expression(filter: Filter, schema: pa.Schema) -> pc.Expression | None:
    """The pyarrow expression selecting exactly the rows Spark's ``filter`` keeps, or None when there
    is none we can be sure of (see the module docstring). ``schema`` is the table's Arrow schema."""
    if isinstance(filter, Not):
        if isinstance(filter.child, In) and any(v is None for v in filter.child.value):
            return None
        inner = to_expression(filter.child, schema)
        return None if inner is None else ~inner
    field = _field(filter, schema)
    if field is None:
        return None
    column = pc.field(field.name)
    if isinstance(filter, IsNull):
        return column.is_null()
    if isinstance(filter, IsNotNull):
        return column.is_valid()
    if not _comparable(field.type):
        return None
    if isinstance(filter, EqualNullSafe):
        if filter.value is None:
            return column.is_null()
        value = _literal(filter.value, field.type)
        return None if value is None else pc.and_kleene(column == value, column.is_valid())
    compare = _COMPARISONS.get(type(filter))
    if compare is not None:
        value = _literal(filter.value, field.type)
        return None if value is None else compare(column, value)
    if isinstance(filter, In):
        values = [_literal(v, field.type) for v in filter.value if v is not None]
        if any(v is None for v in values):
            return None
        return column.isin(pa.array([v.as_py() for v in values], type=field.type))
    if isinstance(filter, (StringStartsWith, StringEndsWith, StringContains)):
        return _string_match(filter, column, field.type)
    return None


def combine(expressions: Iterable[pc.Expression]) -> pc.Expression | None:
    """The conjunction of ``expressions`` (None for none)."""
    found = list(expressions)
    return functools.reduce(operator.and_, found) if found else None


def _field(filter: Filter, schema: pa.Schema) -> pa.Field | None:
    attribute: Sequence[str] = getattr(filter, "attribute", ())
    if len(attribute) != 1 or attribute[0] not in schema.names:
        return None
    field = schema.field(attribute[0])
    return None if pa.types.is_nested(field.type) else field


def _comparable(arrow_type: pa.DataType) -> bool:
    return (pa.types.is_integer(arrow_type) or pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            or pa.types.is_boolean(arrow_type) or pa.types.is_date32(arrow_type) or pa.types.is_decimal(arrow_type)
            or pa.types.is_timestamp(arrow_type))


def _literal(value: Any, arrow_type: pa.DataType) -> pa.Scalar | None:
    """``value`` as a scalar of the column's type, or None if it is not exactly one (no silent casts:
    ``1.5`` for an integer column, a string for a date column)."""
    if value is None:
        return None
    if pa.types.is_boolean(arrow_type) != isinstance(value, bool):
        return None
    if pa.types.is_integer(arrow_type) and not isinstance(value, int):
        return None
    if (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)) and not isinstance(value, str):
        return None
    if pa.types.is_date32(arrow_type) and (not isinstance(value, dt.date) or isinstance(value, dt.datetime)):
        return None
    if pa.types.is_timestamp(arrow_type):
        value = _instant(value, arrow_type)
        if value is None:
            return None
    try:
        return pa.scalar(value, type=arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None


def _instant(value: Any, arrow_type: pa.TimestampType) -> dt.datetime | None:
    """A timestamp literal as pyarrow reads it for the column: Spark hands ``TimestampType`` literals
    over as aware datetimes and ``TimestampNTZType`` ones as naive datetimes; anything else (a naive
    value for an instant column, whose zone would be a guess) is not converted."""
    if not isinstance(value, dt.datetime):
        return None
    aware = value.tzinfo is not None
    if arrow_type.tz is not None:
        return value if aware else None
    return None if aware else value


def _string_match(filter: StringStartsWith | StringEndsWith | StringContains, column: pc.Expression,
                  arrow_type: pa.DataType) -> pc.Expression | None:
    if not (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)) or not isinstance(filter.value, str):
        return None
    if isinstance(filter, StringEndsWith):
        return pc.ends_with(column, pattern=filter.value)
    if isinstance(filter, StringContains):
        return pc.match_substring(column, pattern=filter.value)
    match = pc.starts_with(column, pattern=filter.value)
    # Every string starting with p lies in [p, successor(p)) in UTF-8 byte order (which is code point
    # order): the same rows, plus a range that file statistics can rule out.
    bounds = [column >= filter.value] if filter.value else []
    upper = _successor(filter.value)
    if upper is not None:
        bounds.append(column < upper)
    return functools.reduce(operator.and_, [*bounds, match])


def _successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (None: there is none)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        following = last + 1
        if 0xD800 <= following <= 0xDFFF:  # surrogates are not characters
            following = 0xE000
        if following <= 0x10FFFF:
            return "".join(chars) + chr(following)
    return None
