"""Per-file statistics (``add.stats``): writing them, merging them, and what they prove to a reader.

``compute_stats`` writes PROTOCOL.md's "Per-file Statistics" for the rows of one data file:
``numRecords``, and ``minValues``/``maxValues``/``nullCount`` mirroring the (nested) schema. Bounds are
written only where they are both meaningful and *safe*: a reader skips a file on their word, so a
bound that is not a true bound loses rows. Hence:

- strings: the minimum is cut to a 32-character prefix (a prefix is never greater than the string);
  a maximum longer than 32 characters is left out rather than cut (a prefix could be below it);
- timestamps: millisecond precision, as the protocol asks; the minimum is rounded down and the
  maximum *up*, so both stay bounds (delta-rs and Spark round the maximum down and compensate when
  reading; rounding up is correct for either kind of reader);
- floating point: no bounds for a column holding NaN, and an infinite bound is left out (JSON has
  no infinity);
- booleans, binary, arrays and maps: no bounds, only ``nullCount``.

``merge_stats`` combines the stats of parts of one file (its row groups) into the file's.

``stats_guarantee`` is the reader's side: what a file's stats prove about *every* row of it, as a
pyarrow expression. ``table.data.read`` makes it part of each fragment's ``partition_expression``, and
pyarrow skips a fragment whose guarantee contradicts the filter; nothing here looks inside a filter.
Stats from any writer are read conservatively (string maxima that may be truncated prefixes,
timestamps truncated to the millisecond, decimals that went through a double).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "STRING_PREFIX_LENGTH",
    "Stats",
    "compute_stats",
    "merge_stats",
    "parse_stats",
    "stats_guarantee",
]

STRING_PREFIX_LENGTH = 32
"""Characters of a string kept in ``minValues`` (Spark's default ``dataSkippingStringPrefixLength``)."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_UNITS_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


# --- writing stats ----------------------------------------------------------------------------------


def compute_stats(
    data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], *, num_indexed_cols: int = 32
) -> str:
    """The ``stats`` JSON string for the rows of one data file (partition columns already removed).

    ``num_indexed_cols`` is ``delta.dataSkippingNumIndexedCols``: statistics cover the first that many
    leaf columns in schema order (-1: all), as Delta readers expect.
    """
    table = _as_table(data)
    budget = [math.inf if num_indexed_cols < 0 else num_indexed_cols]
    min_values: dict[str, Any] = {}
    max_values: dict[str, Any] = {}
    null_count: dict[str, Any] = {}
    for name, column in zip(table.column_names, table.columns):
        _column_stats(name, column, budget, min_values, max_values, null_count)
    stats = {"numRecords": table.num_rows, "minValues": min_values, "maxValues": max_values, "nullCount": null_count}
    return _to_json(stats)


def _as_table(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    batches = list(data)
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches)


def _column_stats(
    name: str, column: pa.ChunkedArray, budget: list[float], mins: dict, maxs: dict, nulls: dict
) -> None:
    if budget[0] <= 0:
        return
    t = column.type
    if pa.types.is_dictionary(t):
        column, t = column.cast(t.value_type), t.value_type
    elif pa.types.is_run_end_encoded(t):
        column = pc.run_end_decode(column)
        t = column.type
    if pa.types.is_struct(t):
        child_mins: dict[str, Any] = {}
        child_maxs: dict[str, Any] = {}
        child_nulls: dict[str, Any] = {}
        for i, child in enumerate(column.flatten()):
            _column_stats(t.field(i).name, child, budget, child_mins, child_maxs, child_nulls)
        for target, values in ((mins, child_mins), (maxs, child_maxs), (nulls, child_nulls)):
            if values:
                target[name] = values
        return
    budget[0] -= 1
    nulls[name] = column.null_count
    if column.null_count == len(column):
        return
    bounds = _bounds(column)
    if bounds is None:
        return
    low, high = bounds
    if low is not None:
        mins[name] = low
    if high is not None:
        maxs[name] = high


def _bounds(column: pa.ChunkedArray) -> tuple[Any, Any] | None:
    """(min, max) as JSON-ready values, either None when that bound would not be safe."""
    t = column.type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    textual = pa.types.is_string(t) or pa.types.is_large_string(t)
    if not (numeric or textual or pa.types.is_date(t) or pa.types.is_timestamp(t)):
        return None
    if pa.types.is_floating(t) and pc.any(pc.is_nan(column)).as_py():
        return None
    result = pc.min_max(column)
    low, high = result["min"], result["max"]
    if pa.types.is_timestamp(t):
        return _timestamp_bound(low, round_up=False), _timestamp_bound(high, round_up=True)
    low, high = low.as_py(), high.as_py()
    if pa.types.is_floating(t):
        return (low if math.isfinite(low) else None), (high if math.isfinite(high) else None)
    if pa.types.is_date(t):
        return low.isoformat(), high.isoformat()
    if textual:
        return low[:STRING_PREFIX_LENGTH], (high if len(high) <= STRING_PREFIX_LENGTH else None)
    return low, high


def _timestamp_bound(scalar: pa.TimestampScalar, *, round_up: bool) -> str | None:
    """ISO-8601 at millisecond precision, ``Z``-suffixed for zoned timestamps, rounded as asked."""
    unit, value = scalar.type.unit, scalar.value
    per_ms = _UNITS_PER_MS[unit]
    if per_ms is None:
        millis = value * 1000
    elif round_up:
        millis = -(-value // per_ms)
    else:
        millis = value // per_ms
    try:
        moment = _EPOCH + dt.timedelta(milliseconds=millis)
    except OverflowError:
        return None
    # isoformat, not strftime: strftime's %Y does not zero-pad years before 1000 ("999-01-01...").
    text = moment.replace(tzinfo=None).isoformat(timespec="milliseconds")
    return text + "Z" if scalar.type.tz is not None else text


class _JsonNumber(Decimal):
    """A JSON number read exactly, remembering its text so that it is written back unchanged."""

    __slots__ = ("text",)

    def __new__(cls, text: str) -> _JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _to_json(value: Any) -> str:
    """Compact JSON that writes Decimals as exact JSON numbers (``json.dumps`` cannot)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, _JsonNumber):
        return value.text
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


# --- reading stats ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Stats:
    """Parsed ``add.stats``. Values are raw JSON (numbers as int or Decimal, so nothing is rounded);
    :func:`stats_guarantee` gives them their column's type."""

    num_records: int | None
    min_values: Mapping[str, Any]
    max_values: Mapping[str, Any]
    null_count: Mapping[str, Any]
    tight_bounds: bool | None = None

    def min_value(self, path: Sequence[str]) -> Any:
        return _lookup(self.min_values, path)

    def max_value(self, path: Sequence[str]) -> Any:
        return _lookup(self.max_values, path)

    def null_count_of(self, path: Sequence[str]) -> int | None:
        found = _lookup(self.null_count, path)
        return found if _is_count(found) else None


def parse_stats(stats_json: str | None) -> Stats | None:
    """The :class:`Stats` of an ``add``; None when it has none or they are not a JSON object (statistics
    are hints: a file with unusable stats is simply never skipped)."""
    if not stats_json:
        return None
    try:
        raw = json.loads(stats_json, parse_float=_JsonNumber)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    num_records = raw.get("numRecords")
    tight = raw.get("tightBounds")
    return Stats(
        num_records=num_records if _is_count(num_records) else None,
        min_values=_mapping(raw.get("minValues")),
        max_values=_mapping(raw.get("maxValues")),
        null_count=_mapping(raw.get("nullCount")),
        tight_bounds=tight if isinstance(tight, bool) else None,
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _lookup(tree: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = tree
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return None if isinstance(node, Mapping) else node


# --- merging stats ----------------------------------------------------------------------------------


def merge_stats(parts: Iterable[str | Stats | None]) -> str:
    """The ``stats`` JSON of a file whose parts (its row groups) have the stats ``parts``.

    ``numRecords`` and each ``nullCount`` add up (unknown in one part: left out). A bound is the least
    minimum (greatest maximum) of the parts, and is left out when a part holding a non-null value
    has none: a part leaves a bound out because it would not be safe (NaN, a long string, an
    infinity), and that stays true of the whole. A part whose column is all null (``nullCount`` =
    ``numRecords``) needs no bound, as in :func:`compute_stats`; so merging the stats of row groups
    gives what ``compute_stats`` gives for the whole file.

    Bounds compare as JSON values: numbers exactly, strings by code point, which orders strings,
    ``YYYY-MM-DD`` dates and the fixed-width ``Z`` timestamps ``compute_stats`` writes. Stats whose
    timestamps carry different UTC offsets cannot be merged this way; a column whose bounds are of
    different JSON types in different parts gets none.
    """
    parsed = [part if isinstance(part, Stats) else parse_stats(part) for part in parts]
    stats = [p if p is not None else Stats(None, {}, {}, {}) for p in parsed]
    counts = [s.num_records for s in stats]
    rows = sum(counts) if all(c is not None for c in counts) else None  # type: ignore[arg-type]
    merged: dict[str, Any] = {} if rows is None else {"numRecords": rows}
    trees: tuple[dict, dict, dict] = ({}, {}, {})
    _merge_level(counts, [(s.min_values, s.max_values, s.null_count) for s in stats], trees)
    merged.update(minValues=trees[0], maxValues=trees[1], nullCount=trees[2])
    if any(s.tight_bounds is False for s in stats):
        merged["tightBounds"] = False
    return _to_json(merged)


def _merge_level(counts: list[int | None], levels: list[tuple[Mapping, Mapping, Mapping]],
                 out: tuple[dict, dict, dict]) -> None:
    """Merge one level of the (minValues, maxValues, nullCount) trees of every part into ``out``."""
    names = dict.fromkeys(name for level in levels for tree in (level[2], level[0], level[1]) for name in tree)
    for name in names:
        nodes = [tuple(_mapping(tree).get(name) for tree in level) for level in levels]
        if any(isinstance(node, dict) for part in nodes for node in part):
            children: tuple[dict, dict, dict] = ({}, {}, {})
            _merge_level(counts, [tuple(_mapping(node) for node in part) for part in nodes], children)
            for target, child in zip(out, children):
                if child:
                    target[name] = child
            continue
        lows, highs, nulls = zip(*nodes)
        if all(_is_count(n) for n in nulls):
            out[2][name] = sum(nulls)
        holding = [i for i, n in enumerate(nulls) if not (_is_count(n) and counts[i] is not None and n >= counts[i])]
        for bounds, target, pick in ((lows, out[0], min), (highs, out[1], max)):
            values = [bounds[i] for i in holding]
            kinds = {_kind(v) for v in values}
            if values and len(kinds) == 1 and None not in kinds:
                target[name] = pick(values)


def _kind(value: Any) -> str | None:
    """The comparable kind of a bound; None when it is not one."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, Decimal)):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


# --- what stats prove to a reader -------------------------------------------------------------------

_EXACT_DOUBLE_DIGITS = 15
"""Decimal digits that survive a trip through a double; delta-rs writes decimal stats as doubles."""
_DECIMAL_SLACK = Decimal("1e-12")
"""Relative widening of the bounds of wider decimals, far above a double's error (~1e-16)."""
_MILLISECOND_SLACK = dt.timedelta(microseconds=999)


def stats_guarantee(stats: str | Stats | None, schema: pa.Schema) -> pc.Expression:
    """What ``stats`` prove about every row of their file, as a pyarrow expression (``True``: nothing).

    ``schema`` holds the file's data columns (partition columns removed) with the table's types. Per
    top-level column with a known ``nullCount``:

    - every row null (``nullCount`` = ``numRecords``): ``is_null(c)``;
    - no row null: ``c >= min`` and ``c <= max``, each where the bound is sure whoever wrote it
      (:func:`_bound_reader`). A column with some nulls gets nothing: a comparison is never true for a
      null, so a range would also claim "no nulls" and wrongly rule out ``is_null(c)``.

    Types without a sure order get no range: floating point (NaN is outside any range), booleans,
    binary, and nested types (which get nothing).
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
        elif nulls == 0:
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
