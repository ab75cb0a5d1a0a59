"""Data skipping: what a file's statistics prove about every row of it.

:func:`stats_guarantee` turns a file's ``add.stats`` into a pyarrow expression true for every row of the
file. ``table.data.fragments`` makes it part of each fragment's ``partition_expression``, and pyarrow skips a
fragment whose guarantee contradicts the filter; nothing here looks inside a filter. Stats from any writer
are read conservatively (string maxima that may be truncated prefixes, timestamps truncated to the
millisecond, decimals that went through a double): a bound that is not sure is not used, since a file
skipped on a wrong bound loses rows.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from table.data.stats import STRING_PREFIX_LENGTH, Stats, _is_count, parse_stats

__all__ = ["stats_guarantee"]


_EXACT_DOUBLE_DIGITS = 15
"""Decimal digits that survive a trip through a double; delta-rs writes decimal stats as doubles."""
_DECIMAL_SLACK = Decimal("1e-12")
"""Relative widening of the bounds of wider decimals, far above a double's error (~1e-16)."""
_MILLISECOND_SLACK = dt.timedelta(microseconds=999)


def stats_guarantee(stats: str | Stats | None, schema: pa.Schema, *, part: tuple[str, bool] | None = None
                    ) -> pc.Expression:
    """What ``stats`` prove about every row of their file, as a pyarrow expression (``True``: nothing).

    ``schema`` holds the file's data columns (partition columns removed) with the table's types. Per
    top-level column with a known ``nullCount``:

    - every row null (``nullCount`` = ``numRecords``): ``is_null(c)``;
    - no row null: ``c >= min`` and ``c <= max``, each where the bound is sure whoever wrote it
      (:func:`_bound_reader`). A column with some nulls gets nothing: a comparison is never true for a
      null, so a range would also claim "no nulls" and wrongly rule out ``is_null(c)``.

    Types without a sure order get no range: floating point (NaN is outside any range), booleans,
    binary, and nested types (which get nothing).

    ``part=(column, nulls)`` describes part of the file's rows instead: for a column with some nulls, the
    rows where it is null (``nulls`` True: ``is_null(c)``) or the others (``c >= min and c <= max``). A
    file whose two parts both contradict a filter holds no row it selects, which the whole file's
    guarantee cannot show (see ``table.data.fragments.prune_adds``).
    """
    if not isinstance(stats, Stats):
        stats = parse_stats(stats)
    if stats is None:
        return pc.scalar(True)
    terms: list[pc.Expression] = []
    for field in schema:
        nulls = stats.null_count.get(field.name)
        if not _is_count(nulls) or pa.types.is_nested(field.type):
            continue
        if nulls == stats.num_records:
            terms.append(pc.field(field.name).is_null())
        elif part is not None and part[0] == field.name and part[1]:
            terms.append(pc.field(field.name).is_null())
        elif nulls == 0 or (part is not None and part[0] == field.name):
            read = _bound_reader(field.type)
            if read is None:
                continue
            low = _bound(read, stats.min_values.get(field.name), field.type, upper=False)
            high = _bound(read, stats.max_values.get(field.name), field.type, upper=True)
            if low is not None:
                terms.append(pc.field(field.name) >= low)
            if high is not None:
                terms.append(pc.field(field.name) <= high)
    return functools.reduce(operator.and_, terms) if terms else pc.scalar(True)


_Reader = Callable[[Any, bool], Any]


def _bound(read: _Reader, raw: Any, arrow_type: pa.DataType, *, upper: bool) -> pa.Scalar | None:
    if raw is None or isinstance(raw, (bool, dict, list)):
        return None
    try:
        value = read(raw, upper)
        return None if value is None else pa.scalar(value, type=arrow_type)
    except (TypeError, ValueError, ArithmeticError, OverflowError, pa.ArrowException):
        return None


@functools.lru_cache(maxsize=256)
def _bound_reader(arrow_type: pa.DataType) -> _Reader | None:
    """How to read a stats bound of a column of this type into a value that bounds every value of the
    file (None: not sure), or None for types that get no range.

    - integers: JSON integers only (a number with a fraction or exponent went through a double);
    - decimals: exact up to 15 digits of precision; wider ones are widened by a relative 1e-12, as
      delta-rs writes decimal stats through a double (a 38-digit maximum comes out *below* the value);
    - strings: the minimum always (a truncated prefix sorts before the value); the maximum only when
      shorter than the 32-character prefix length: writers cut longer maxima to 32 characters, which
      may be below the real maximum (counted in UTF-16 code units, which are never fewer than
      characters, so a writer counting either way is caught);
    - dates: ``YYYY-MM-DD``;
    - timestamps: ISO-8601 with ``Z``, an offset or (for ``timestamp_ntz``) none; widened by 999 µs
      both ways, as writers truncate to the millisecond (Spark and delta-rs the maximum, and a writer
      truncating towards zero before 1970 the minimum too).
    """
    if pa.types.is_integer(arrow_type):
        return _read_integer
    if pa.types.is_decimal(arrow_type):
        exponent = Decimal(1).scaleb(-arrow_type.scale)
        return functools.partial(_read_decimal, exponent=exponent,
                                 slack=_DECIMAL_SLACK if arrow_type.precision > _EXACT_DOUBLE_DIGITS else None)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return _read_string
    if pa.types.is_date(arrow_type):
        return _read_date
    if pa.types.is_timestamp(arrow_type):
        return functools.partial(_read_timestamp, zoned=arrow_type.tz is not None)
    return None


def _read_integer(raw: Any, upper: bool) -> int | None:
    return raw if isinstance(raw, int) else None


_DECIMAL_CONTEXT = Context(prec=100)
"""Exact for 38 digits and their slack (the default context rounds to 28 digits)."""


def _read_decimal(raw: Any, upper: bool, *, exponent: Decimal, slack: Decimal | None) -> Decimal | None:
    if not isinstance(raw, (int, Decimal)):
        return None
    value = Decimal(raw)
    if not value.is_finite():
        return None
    if slack is not None:
        widening = _DECIMAL_CONTEXT.multiply(_DECIMAL_CONTEXT.abs(value), slack)
        value = _DECIMAL_CONTEXT.add(value, widening) if upper else _DECIMAL_CONTEXT.subtract(value, widening)
    return value.quantize(exponent, rounding=ROUND_CEILING if upper else ROUND_FLOOR, context=_DECIMAL_CONTEXT)


def _read_string(raw: Any, upper: bool) -> str | None:
    if not isinstance(raw, str):
        return None
    if upper and (len(raw) >= STRING_PREFIX_LENGTH or len(raw.encode("utf-16-le")) >= 2 * STRING_PREFIX_LENGTH):
        return None
    return raw


def _read_date(raw: Any, upper: bool) -> dt.date | None:
    return dt.date.fromisoformat(raw) if isinstance(raw, str) else None


def _read_timestamp(raw: Any, upper: bool, *, zoned: bool) -> dt.datetime | None:
    if not isinstance(raw, str):
        return None
    text = raw[:-1] + "+00:00" if raw.endswith("Z") else raw  # Python 3.10's parser lacks Z
    moment = dt.datetime.fromisoformat(text)
    if not zoned:
        if moment.tzinfo is not None:
            return None  # a timestamp_ntz has no zone: an offset means we do not know what was written
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)  # zone-less stats are UTC, as delta-rs reads them
    return moment + _MILLISECOND_SLACK if upper else moment - _MILLISECOND_SLACK
