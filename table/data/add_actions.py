"""The live files of a snapshot as one Arrow table, in the shape of deltalake's ``get_add_actions``.

One row per ``add``: ``path``, ``size_bytes``, ``modification_time`` (milliseconds since the epoch),
``num_records``, then the per-column statistics as three structs (``null_count``, ``min``, ``max``) and the
partition values as a ``partition`` struct; ``flatten=True`` turns each struct into columns named
``min.<column>`` and so on, as deltalake does. Columns are named by their logical names on column-mapped
tables. Statistics are typed by the table's schema (timestamps, dates and decimals parsed from their JSON
text); a bound that a writer left out, or that does not parse as its column's type, is null. Nested columns
and types without statistics (booleans, binary) appear in ``null_count`` only.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from table.data.stats import Stats, parse_stats
from table.log.snapshot import Snapshot

__all__ = ["add_actions_table"]


def add_actions_table(snapshot: Snapshot, *, flatten: bool = False) -> pa.Table:
    """The ``add`` actions of ``snapshot`` (module docstring), ordered by path."""
    adds = sorted(snapshot.files, key=lambda add: add.path)
    layout = snapshot.layout
    partition_names = snapshot.partition_columns
    data_fields = [f for f in snapshot.schema if f.name not in partition_names]
    ranged = [f for f in data_fields if _parser(f.type) is not None]
    stats = [parse_stats(add.stats) for add in adds]

    columns: dict[str, pa.Array] = {
        "path": pa.array([unquote(add.path) for add in adds], pa.string()),
        "size_bytes": pa.array([add.size for add in adds], pa.int64()),
        "modification_time": pa.array([add.modification_time for add in adds], pa.int64()),
        "num_records": pa.array([None if s is None else s.num_records for s in stats], pa.int64()),
    }
    groups: dict[str, list[tuple[str, pa.Array]]] = {
        "null_count": [(f.name, pa.array([_count(s, layout.physical_name(f.name)) for s in stats], pa.int64()))
                       for f in data_fields],
        "min": [(f.name, _bounds(stats, layout.physical_name(f.name), f.type, upper=False)) for f in ranged],
        "max": [(f.name, _bounds(stats, layout.physical_name(f.name), f.type, upper=True)) for f in ranged],
    }
    if partition_names:
        types = {f.name: f.type for f in snapshot.schema}
        groups["partition"] = [
            (name, _partition_values([add.partition_values.get(layout.physical_name(name)) for add in adds],
                                     types[name]))
            for name in partition_names]
    for group, fields in groups.items():
        if not fields:
            continue
        if flatten:
            columns.update({f"{group}.{name}": array for name, array in fields})
        else:
            columns[group] = pa.StructArray.from_arrays([array for _, array in fields],
                                                        names=[name for name, _ in fields])
    return pa.table(columns)


def _count(stats: Stats | None, column: str) -> int | None:
    return None if stats is None else stats.null_count_of((column,))


def _bounds(stats: list[Stats | None], column: str, arrow_type: pa.DataType, *, upper: bool) -> pa.Array:
    parse = _parser(arrow_type)
    assert parse is not None
    values = []
    for s in stats:
        raw = None if s is None else (s.max_value((column,)) if upper else s.min_value((column,)))
        try:
            values.append(None if raw is None or isinstance(raw, bool) else parse(raw))
        except (TypeError, ValueError, ArithmeticError, InvalidOperation):
            values.append(None)
    try:
        return pa.array(values, arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.nulls(len(values), arrow_type)


def _parser(arrow_type: pa.DataType):
    """How to read a JSON statistics value of a column of this type (None: the type has no min/max)."""
    if pa.types.is_integer(arrow_type):
        return int
    if pa.types.is_floating(arrow_type):
        return float
    if pa.types.is_decimal(arrow_type):
        return lambda raw: Decimal(str(raw))
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return str
    if pa.types.is_date(arrow_type):
        return lambda raw: dt.date.fromisoformat(str(raw)[:10])
    if pa.types.is_timestamp(arrow_type):
        return _timestamp(zoned=arrow_type.tz is not None)
    return None


def _timestamp(*, zoned: bool):
    def parse(raw: Any) -> dt.datetime:
        text = str(raw)
        value = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        if zoned:
            return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        return value.replace(tzinfo=None)
    return parse


def _partition_values(values: list[str | None], arrow_type: pa.DataType) -> pa.Array:
    """Partition values as the log keeps them (strings); typed when every one casts to the column's type."""
    strings = pa.array(values, pa.string())
    try:
        return strings.cast(arrow_type)
    except (pa.ArrowException, TypeError, ValueError):
        return strings
