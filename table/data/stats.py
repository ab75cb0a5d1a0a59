"""Per-file statistics (``add.stats``): writing them, merging them, and what they prove to a reader.

:class:`StatsCollector` writes PROTOCOL.md's "Per-file Statistics" for the rows of one data file:
``numRecords``, and ``minValues``/``maxValues``/``nullCount`` mirroring the (nested) schema. The values
come from the Parquet footer the writer produced anyway (its column-chunk statistics), plus null and NaN
counts taken as batches are written; what is left here is Delta's rules. Bounds are written only where
they are both meaningful and *safe*: a reader skips a file on their word, so a bound that is not a true
bound loses rows. Hence:

- strings: the minimum is cut to a 32-character prefix (a prefix is never greater than the string);
  a maximum longer than 32 characters is left out rather than cut (a prefix could be below it);
- timestamps: millisecond precision, as the protocol asks; the minimum is rounded down and the
  maximum *up*, so both stay bounds (delta-rs and Spark round the maximum down and compensate when
  reading; rounding up is correct for either kind of reader);
- floating point: no bounds for a column holding NaN, and an infinite bound is left out (JSON has
  no infinity);
- booleans, binary, arrays and maps: no bounds, only ``nullCount``.

:func:`parse_stats` reads them back; what they prove to a reader is :mod:`table.data.skipping`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstore.errors import InvalidArgumentError
from table.log.schema import arrow_to_delta, delta_to_arrow
from table.log.schema_arrow import is_variant

__all__ = [
    "STRING_PREFIX_LENGTH",
    "Stats",
    "StatsCollector",
    "check_stats_columns",
    "compute_stats",
    "parse_stats",
    "resolve_stats_columns",
]

STRING_PREFIX_LENGTH = 32
"""Characters of a string kept in ``minValues`` (Spark's default ``dataSkippingStringPrefixLength``)."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_UNITS_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


# --- writing stats ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Leaf:
    """A column the stats cover: its path in the schema and the index of its Parquet column."""

    path: tuple[str, ...]
    arrow_type: pa.DataType
    parquet_index: int
    nulls: int = 0
    nan: bool = False


class StatsCollector:
    """The ``stats`` of one data file, from what the writer saw and what the Parquet footer holds.

    Bounds come from the footer's column-chunk statistics (the Parquet writer computed them already);
    what the footer cannot tell is counted as batches go by: null counts (the footer's are per Parquet
    leaf, which a list column does not have) and NaNs of floating-point columns (Parquet leaves NaN out of
    its bounds, and a bound that ignores a NaN is no bound for a reader that orders NaN above every
    number, as Spark does). Which columns get statistics: ``columns``, the file's column paths
    ``delta.dataSkippingStatsColumns`` names (:func:`resolve_stats_columns`; a struct stands for all its
    fields) when the table sets it, else the first ``num_indexed_cols`` leaf columns in schema order
    (``delta.dataSkippingNumIndexedCols``, -1: all), as Delta readers expect. Feed it every batch written
    (:meth:`add`), then call :meth:`stats` with the closed file's metadata.
    """

    def __init__(self, schema: pa.Schema, *, num_indexed_cols: int = 32,
                 columns: Iterable[tuple[str, ...]] | None = None):
        self.schema = schema
        self.leaves: list[_Leaf] = []
        chosen = None if columns is None else frozenset(tuple(c) for c in columns)
        budget = [math.inf if num_indexed_cols < 0 or chosen is not None else num_indexed_cols]
        position = [0]
        for field in schema:
            self._walk(field, (field.name,), budget, position, chosen)

    def _walk(self, field: pa.Field, path: tuple[str, ...], budget: list[float], position: list[int],
              chosen: frozenset[tuple[str, ...]] | None) -> None:
        """Depth first, as Parquet numbers its leaf columns."""
        t = field.type
        if is_variant(t):  # one column for Delta: its nullCount only, as Spark writes it
            if (chosen is None or any(path[:n] in chosen for n in range(1, len(path) + 1))) and budget[0] > 0:
                budget[0] -= 1
                self.leaves.append(_Leaf(path, t, position[0]))
            position[0] += _parquet_leaves(t)
            return
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                child = t.field(i)
                self._walk(child, (*path, child.name), budget, position, chosen)
            return
        named = chosen is None or any(path[:n] in chosen for n in range(1, len(path) + 1))
        if named and budget[0] > 0:
            budget[0] -= 1
            self.leaves.append(_Leaf(path, t, position[0]))
        position[0] += _parquet_leaves(t)

    def bounded_columns(self) -> list[str]:
        """The Parquet column paths whose footer statistics give this file's bounds (the indexed leaves of a
        type that gets bounds): the only columns a writer needs Parquet statistics for."""
        return [".".join(leaf.path) for leaf in self.leaves if _has_bounds(leaf.arrow_type)]

    def add(self, data: pa.Table) -> None:
        """Count the nulls (and NaNs) of a batch being written."""
        for leaf in self.leaves:
            column = _leaf_column(data, leaf.path)
            leaf.nulls += column.null_count
            if pa.types.is_floating(leaf.arrow_type) and not leaf.nan and len(column) > column.null_count:
                leaf.nan = bool(pc.any(pc.is_nan(column)).as_py())

    def stats(self, metadata: pq.FileMetaData) -> str:
        """The ``stats`` JSON of the file whose footer is ``metadata`` (see the module docstring's rules)."""
        rows = metadata.num_rows
        trees: tuple[dict, dict, dict] = ({}, {}, {})
        for leaf in self.leaves:
            _put(trees[2], leaf.path, leaf.nulls)
            if leaf.nulls >= rows:
                continue
            bounds = _footer_bounds(metadata, leaf)
            if bounds is None:
                continue
            for tree, bound in zip(trees[:2], bounds):
                if bound is not None:
                    _put(tree, leaf.path, bound)
        return _to_json({"numRecords": rows, "minValues": trees[0], "maxValues": trees[1], "nullCount": trees[2]})


def compute_stats(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], *, num_indexed_cols: int = 32,
                  columns: Iterable[tuple[str, ...]] | None = None) -> str:
    """The ``stats`` JSON of a data file holding ``data`` (partition columns already removed), as the
    staging writer computes it: the data, cast to Delta's types, is written to an in-memory Parquet file
    and its footer read. ``num_indexed_cols`` and ``columns``: as :class:`StatsCollector` takes them."""
    table = _as_table(data)
    table = table.cast(delta_to_arrow(arrow_to_delta(table.schema)))  # Delta's types, as the writer casts
    collector = StatsCollector(table.schema, num_indexed_cols=num_indexed_cols, columns=columns)
    collector.add(table)
    sink = io.BytesIO()
    writer = pq.ParquetWriter(sink, table.schema)
    writer.write_table(table)
    writer.close()
    return collector.stats(writer.writer.metadata)


def resolve_stats_columns(columns: Iterable[Sequence[str]], logical: pa.Schema, physical: pa.Schema | None = None,
                          ) -> list[tuple[tuple[str, ...], tuple[str, ...], pa.DataType]]:
    """Each column ``delta.dataSkippingStatsColumns`` names (logical paths, matched as Delta matches
    names: exactly, else without regard to case) that ``logical`` has: ``(its logical path, its path
    in the data files, its type)``. ``physical``: the same schema under the names data files use
    (column mapping); statistics are keyed by those. A name the schema lacks is left out: a reader of a
    table written by someone else must not fail on it (:func:`check_stats_columns` refuses it when the
    property is set)."""
    physical = logical if physical is None else physical
    found = []
    for path in columns:
        fields_logical: Any = logical
        fields_physical: Any = physical
        logical_path: list[str] = []
        physical_path: list[str] = []
        kind: pa.DataType | None = None
        for name in path:
            index = _field_index(fields_logical, name) if fields_logical is not None else None
            if index is None:
                kind = None
                break
            field_logical, field_physical = fields_logical.field(index), fields_physical.field(index)
            logical_path.append(field_logical.name)
            physical_path.append(field_physical.name)
            kind = field_logical.type
            both_structs = pa.types.is_struct(kind) and pa.types.is_struct(field_physical.type)
            fields_logical, fields_physical = (kind, field_physical.type) if both_structs else (None, None)
        if kind is not None:
            found.append((tuple(logical_path), tuple(physical_path), kind))
    return found


def _field_index(fields: pa.Schema | pa.StructType, name: str) -> int | None:
    names = [fields.field(i).name for i in range(len(fields) if isinstance(fields, pa.Schema) else fields.num_fields)]
    if name in names:
        return names.index(name)
    folded = [i for i, n in enumerate(names) if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def check_stats_columns(columns: Sequence[Sequence[str]], schema: pa.Schema, partition_columns: Sequence[str], *,
                        table: str) -> None:
    """Refuse a ``delta.dataSkippingStatsColumns`` that Delta refuses, naming the column and what to do: a
    column the table does not have, a partition column (its value is in the log already), a column (or a
    field of a struct) of a type without an order (booleans, binary, arrays, maps)."""
    resolved = {tuple(p.lower() for p in logical): kind for logical, _, kind in resolve_stats_columns(columns, schema)}
    partitions = {c.lower() for c in partition_columns}
    for path in columns:
        shown = ".".join(path)
        kind = resolved.get(tuple(p.lower() for p in path))
        if kind is None:
            raise InvalidArgumentError(
                f"delta.dataSkippingStatsColumns names {shown!r}, which is not a column of {table} (its columns: "
                f"{schema.names}); name existing columns, nested fields as a.b")
        if len(path) == 1 and path[0].lower() in partitions:
            raise InvalidArgumentError(
                f"delta.dataSkippingStatsColumns names partition column {shown!r} of {table}; partition values "
                f"are in the log already, so leave it out")
        unordered = _unordered_leaf(kind, shown)
        if unordered is not None:
            raise InvalidArgumentError(
                f"delta.dataSkippingStatsColumns names {shown!r} of {table}, but {unordered[0]!r} has type "
                f"{unordered[1]}, which has no statistics for data skipping; name columns of numeric, string, "
                f"date or timestamp types")


def _unordered_leaf(kind: pa.DataType, name: str) -> tuple[str, pa.DataType] | None:
    if pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            found = _unordered_leaf(kind.field(i).type, f"{name}.{kind.field(i).name}")
            if found is not None:
                return found
        return None
    return None if _has_bounds(kind) else (name, kind)


def _as_table(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    batches = list(data)
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches)


def _parquet_leaves(t: pa.DataType) -> int:
    """How many Parquet leaf columns a column of this Arrow type is stored as."""
    if pa.types.is_struct(t):
        return sum(_parquet_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _parquet_leaves(t.key_type) + _parquet_leaves(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _parquet_leaves(t.value_type)
    return 1


def _leaf_column(data: pa.Table, path: tuple[str, ...]) -> pa.ChunkedArray | pa.Array:
    """The values of a (nested) column; a struct's nulls count as nulls of its fields, as in Parquet."""
    column: pa.ChunkedArray = data.column(path[0])
    for name in path[1:]:
        column = pc.struct_field(column, [column.type.get_field_index(name)])
    return column


def _put(tree: dict, path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


def _footer_bounds(metadata: pq.FileMetaData, leaf: _Leaf) -> tuple[Any, Any] | None:
    """(min, max) of a leaf over every row group, as JSON-ready values, either None when not safe; None
    when the type gets no bounds or a row group holding values has no statistics."""
    t = leaf.arrow_type
    textual = pa.types.is_string(t) or pa.types.is_large_string(t)
    if not _has_bounds(t) or leaf.nan:
        return None
    lows, highs = [], []
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(leaf.parquet_index)
        statistics = chunk.statistics
        if statistics is not None and statistics.has_null_count and statistics.null_count == chunk.num_values:
            continue  # every value of this row group is null
        if statistics is None or not statistics.has_min_max:
            return None
        if pa.types.is_timestamp(t):
            lows.append(statistics.min_raw)
            highs.append(statistics.max_raw)
        else:
            lows.append(statistics.min)
            highs.append(statistics.max)
    if not lows:
        return None
    low, high = min(lows), max(highs)
    if pa.types.is_timestamp(t):
        return _timestamp_bound(low, t, round_up=False), _timestamp_bound(high, t, round_up=True)
    if pa.types.is_floating(t):
        return (low if math.isfinite(low) else None), (high if math.isfinite(high) else None)
    if pa.types.is_date(t):
        return low.isoformat(), high.isoformat()
    if textual:
        return low[:STRING_PREFIX_LENGTH], (high if len(high) <= STRING_PREFIX_LENGTH else None)
    return low, high


def _has_bounds(t: pa.DataType) -> bool:
    """Whether Delta statistics hold bounds for a column of this type (module docstring)."""
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    textual = pa.types.is_string(t) or pa.types.is_large_string(t)
    return numeric or textual or pa.types.is_date(t) or pa.types.is_timestamp(t)


def _timestamp_bound(value: int, arrow_type: pa.TimestampType, *, round_up: bool) -> str | None:
    """ISO-8601 at millisecond precision, ``Z``-suffixed for zoned timestamps, rounded as asked."""
    per_ms = _UNITS_PER_MS[arrow_type.unit]
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
    return text + "Z" if arrow_type.tz is not None else text


class _JsonNumber(Decimal):
    """A JSON number read exactly, remembering its text so that it is written back unchanged."""

    __slots__ = ("text",)

    def __new__(cls, text: str) -> _JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)``, without building an encoder for every value (as ``dumps`` does
for any argument but the defaults)."""


_ENCODE_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _to_json(value: Any) -> str:
    """Compact JSON that writes Decimals as exact JSON numbers (``json.dumps`` cannot)."""
    if _plain(value):  # nothing but what the encoder writes as below: one call for the whole tree
        return _ENCODE_COMPACT(value)
    return _to_json_by_parts(value)


def _plain(value: Any) -> bool:
    """Whether ``value`` is dicts (string keys) of strings, ints, bools, None and finite floats only."""
    if isinstance(value, dict):
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if type(value) is float:
        return math.isfinite(value)
    return value is None or type(value) in (str, int, bool)


def _to_json_by_parts(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{_ENCODE(k)}:{_to_json_by_parts(v)}" for k, v in value.items()) + "}"
    if isinstance(value, _JsonNumber):
        return value.text
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return _ENCODE(value)


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


_STATS_DECODER = json.JSONDecoder(parse_float=_JsonNumber)
"""``json.loads(..., parse_float=_JsonNumber)`` without a decoder built per call (a table's files' stats are
parsed one by one when files are pruned)."""


def parse_stats(stats_json: str | None) -> Stats | None:
    """The :class:`Stats` of an ``add``; None when it has none or they are not a JSON object (statistics
    are hints: a file with unusable stats is simply never skipped)."""
    if not stats_json:
        return None
    try:
        raw = _STATS_DECODER.decode(stats_json)
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
