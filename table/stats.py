"""Per-file statistics (``add.stats``) and the file pruning they allow.

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

``file_may_match`` is the reader's side: given an ``add`` and conjunctive conditions
``(column, op, value)``, it answers False only when the file provably holds no matching row, reading
stats written by any writer conservatively (string maxima that may be truncated prefixes,
timestamp maxima rounded down). ``predicates_from_expression`` extracts such conditions from a
pyarrow compute expression; what it cannot understand it drops, which only costs pruning, since the
full filter is applied to the rows read.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime as dt
import json
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc

from table.actions import AddFile
from table.errors import UnsupportedTypeError
from table.schema import DeltaType, SchemaLike, arrow_type_to_delta, parse_partition_value, to_float32

__all__ = [
    "OPS",
    "STRING_PREFIX_LENGTH",
    "Predicate",
    "Stats",
    "compute_stats",
    "file_may_match",
    "parse_stats",
    "predicates_from_expression",
]

STRING_PREFIX_LENGTH = 32
"""Characters of a string kept in ``minValues`` (Spark's default ``dataSkippingStringPrefixLength``)."""

OPS = frozenset({"==", "!=", "<", "<=", ">", ">=", "in", "is_null", "not_null"})

Column = Union[str, tuple[str, ...]]
"""A top-level column name, or the path of a nested field (``("a", "b")`` for ``a.b``)."""

Predicate = tuple[Column, str, Any]
"""``(column, op, value)``; ``value`` is a sequence for ``in`` (None in it matches nulls) and ignored
for ``is_null``/``not_null``."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_UNITS_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}
_INTEGERS = ("long", "integer", "short", "byte")


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
    text = f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}"
    return text + "Z" if scalar.type.tz is not None else text


def _to_json(value: Any) -> str:
    """Compact JSON that writes Decimals as exact JSON numbers (``json.dumps`` cannot)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


# --- reading stats ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Stats:
    """Parsed ``add.stats``. Values are raw JSON (numbers as int or Decimal, so nothing is rounded);
    :func:`file_may_match` gives them their column's type."""

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
        return found if isinstance(found, int) and not isinstance(found, bool) else None


def parse_stats(stats_json: str | None) -> Stats | None:
    """The :class:`Stats` of an ``add``; None when it has none or they are not a JSON object (statistics
    are hints: a file with unusable stats is simply never skipped)."""
    if not stats_json:
        return None
    try:
        raw = json.loads(stats_json, parse_float=Decimal)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    num_records = raw.get("numRecords")
    tight = raw.get("tightBounds")
    return Stats(
        num_records=num_records if isinstance(num_records, int) and not isinstance(num_records, bool) else None,
        min_values=_mapping(raw.get("minValues")),
        max_values=_mapping(raw.get("maxValues")),
        null_count=_mapping(raw.get("nullCount")),
        tight_bounds=tight if isinstance(tight, bool) else None,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _lookup(tree: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = tree
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return None if isinstance(node, Mapping) else node


# --- pruning ----------------------------------------------------------------------------------------


class _Unknown(Exception):
    """A value that cannot be compared with the column: the answer is "may match"."""


def file_may_match(
    add: AddFile,
    partition_schema: SchemaLike | None,
    data_schema: SchemaLike | None,
    predicates: Iterable[Predicate],
) -> bool:
    """False only if no row of ``add`` can satisfy all ``predicates`` (an AND of ``(column, op, value)``).

    Schemas are Arrow schemas, Delta struct dicts or schema strings; a condition on a partition
    column is decided by ``add.partitionValues``, one on a data column by ``add.stats``. Null semantics are Arrow's filter
    semantics: a comparison with a null is never true. Anything unknown (no stats, a column missing
    from the stats, a value of another type) means "may match".
    """
    partition_types = _column_types(partition_schema)
    data_types = _column_types(data_schema)
    stats: Stats | None = None
    stats_parsed = False
    for column, op, value in predicates:
        if op not in OPS:
            raise ValueError(f"unknown operator {op!r}; expected one of {', '.join(sorted(OPS))}")
        path = (column,) if isinstance(column, str) else tuple(column)
        try:
            if len(path) == 1 and path in partition_types:
                if not _partition_may_match(add, path[0], partition_types[path], op, value):
                    return False
            elif path in data_types:
                if not stats_parsed:
                    stats, stats_parsed = parse_stats(add.stats), True
                if stats is not None and not _stats_may_match(stats, path, data_types[path], op, value):
                    return False
        except _Unknown:
            continue
    return True


def _column_types(schema: SchemaLike | None) -> dict[tuple[str, ...], DeltaType]:
    """Every column path (nested struct fields included) with its Delta type."""
    if schema is None:
        return {}
    if isinstance(schema, str):
        schema = json.loads(schema)
    if isinstance(schema, pa.Schema):
        fields = []
        for f in schema:
            try:
                fields.append({"name": f.name, "type": arrow_type_to_delta(f.type, column=f.name)})
            except UnsupportedTypeError:
                continue
    else:
        fields = list(schema["fields"])
    out: dict[tuple[str, ...], DeltaType] = {}

    def walk(prefix: tuple[str, ...], items: Iterable[Mapping[str, Any]]) -> None:
        for f in items:
            path = prefix + (f["name"],)
            out[path] = f["type"]
            if isinstance(f["type"], Mapping) and f["type"].get("type") == "struct":
                walk(path, f["type"]["fields"])

    walk((), fields)
    return out


def _partition_may_match(add: AddFile, name: str, delta_type: DeltaType, op: str, value: Any) -> bool:
    if name not in add.partition_values:
        raise _Unknown
    try:
        raw = parse_partition_value(add.partition_values[name], delta_type)
    except ValueError:
        raise _Unknown from None
    if op == "is_null":
        return raw is None
    if op == "not_null":
        return raw is not None
    if op == "in":
        if raw is None:
            return any(v is None for v in value)
        actual = _key(raw, delta_type)
        if isinstance(actual, float) and math.isnan(actual):
            raise _Unknown
        return any(v is not None and actual == _key(v, delta_type) for v in value)
    if raw is None:
        return False
    if value is None:
        raise _Unknown
    actual, wanted = _key(raw, delta_type), _key(value, delta_type)
    return _compare(actual, op, wanted)


_OPERATORS = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _compare(a: Any, op: str, b: Any) -> bool:
    try:
        return bool(_OPERATORS[op](a, b))
    except TypeError:
        raise _Unknown from None


def _stats_may_match(stats: Stats, path: tuple[str, ...], delta_type: DeltaType, op: str, value: Any) -> bool:
    rows = stats.num_records
    if rows == 0:
        return False
    nulls = stats.null_count_of(path)
    all_null = nulls is not None and rows is not None and nulls >= rows
    if op == "is_null":
        return nulls != 0
    if op == "not_null":
        return not all_null
    if op == "in" and nulls != 0 and any(v is None for v in value):
        return True
    if all_null:
        return False
    if not isinstance(delta_type, str):
        raise _Unknown
    bounds = _Bounds(stats, path, delta_type)
    if op == "in":
        wanted_values = [_key(v, delta_type) for v in value if v is not None]
        if any(isinstance(v, float) and math.isnan(v) for v in wanted_values):
            raise _Unknown  # is_in matches NaN to NaN, and bounds say nothing about NaN
        return any(bounds.may_equal(v) for v in wanted_values)
    if value is None:
        raise _Unknown
    wanted = _key(value, delta_type)
    if isinstance(wanted, float) and math.isnan(wanted):
        raise _Unknown
    if op == "==":
        return bounds.may_equal(wanted)
    if op == "!=":
        return not bounds.all_equal(wanted)
    if op == "<":
        return bounds.low is None or _compare(bounds.low, "<", wanted)
    if op == "<=":
        return bounds.low is None or _compare(bounds.low, "<=", wanted)
    if op == ">":
        return bounds.may_exceed(wanted, strictly=True)
    return bounds.may_exceed(wanted, strictly=False)


class _Bounds:
    """A column's min/max from stats, as bounds that hold whoever wrote them.

    ``low`` is a lower bound as written (string prefixes and timestamps rounded down are still lower
    bounds). The maximum needs care: a string maximum may be a truncated prefix of the real one, and
    a timestamp maximum may have been rounded *down* to the millisecond.
    """

    def __init__(self, stats: Stats, path: tuple[str, ...], delta_type: str):
        self.delta_type = delta_type
        self.low = _stat_key(stats.min_value(path), delta_type)
        self.high = _stat_key(stats.max_value(path), delta_type)
        if self.high is not None and delta_type in ("timestamp", "timestamp_ntz"):
            self.high += 999  # microseconds: the true maximum is below the next millisecond

    def may_exceed(self, wanted: Any, *, strictly: bool) -> bool:
        if self.high is None:
            return True
        if self.delta_type == "string":
            if not isinstance(wanted, str):
                raise _Unknown
            # Any string starting with the stored maximum may be the real maximum.
            return wanted.startswith(self.high) or _compare(self.high, ">" if strictly else ">=", wanted)
        return _compare(self.high, ">" if strictly else ">=", wanted)

    def may_equal(self, wanted: Any) -> bool:
        if self.low is not None and _compare(self.low, ">", wanted):
            return False
        return self.may_exceed(wanted, strictly=False)

    def all_equal(self, wanted: Any) -> bool:
        """Whether every non-null value provably equals ``wanted``; only for types stored exactly."""
        exact = self.delta_type in _INTEGERS or self.delta_type == "date" or self.delta_type.startswith("decimal")
        return exact and self.low is not None and self.low == self.high and _compare(self.low, "==", wanted)


def _stat_key(raw: Any, delta_type: str) -> Any:
    """A stats value in the comparable form :func:`_key` gives predicate values; None if unusable."""
    if raw is None or isinstance(raw, (dict, list)):
        return None
    try:
        if delta_type in _INTEGERS:
            number = Decimal(raw) if not isinstance(raw, (bool, str)) else None
            return int(number) if number is not None and number == number.to_integral_value() else None
        if delta_type == "double":
            return float(raw) if not isinstance(raw, (bool, str)) else None
        if delta_type == "float":
            return to_float32(float(raw)) if not isinstance(raw, (bool, str)) else None
        if delta_type == "decimal" or delta_type.startswith("decimal("):
            return Decimal(raw) if not isinstance(raw, (bool, str)) else None
        if delta_type == "boolean":
            return raw if isinstance(raw, bool) else None
        if delta_type == "string":
            return raw if isinstance(raw, str) else None
        if delta_type == "date":
            return dt.date.fromisoformat(raw[:10]) if isinstance(raw, str) else None
        if delta_type in ("timestamp", "timestamp_ntz"):
            return _timestamp_key(_parse_timestamp(raw)) if isinstance(raw, str) else None
    except (ValueError, ArithmeticError, OverflowError):
        return None
    return None


def _parse_timestamp(text: str) -> dt.datetime:
    """ISO-8601 with ``T`` or a space, optional ``Z``/offset (Python 3.10's parser lacks ``Z``)."""
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return dt.datetime.fromisoformat(text)


def _timestamp_key(moment: dt.datetime) -> int:
    """Microseconds since the epoch; naive datetimes are wall-clock time read as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _key(value: Any, delta_type: DeltaType) -> Any:
    """A predicate or partition value in a form comparable with the column's stats; raises _Unknown
    when the value does not belong to the column's type."""
    if not isinstance(delta_type, str):
        raise _Unknown
    if delta_type in _INTEGERS or delta_type in ("float", "double") or delta_type.startswith("decimal"):
        if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
            raise _Unknown
        return value
    if delta_type == "boolean":
        if not isinstance(value, bool):
            raise _Unknown
        return value
    if delta_type == "string":
        if not isinstance(value, str):
            raise _Unknown
        return value
    if delta_type == "binary":
        if not isinstance(value, bytes):
            raise _Unknown
        return value
    if delta_type == "date":
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            raise _Unknown
        return value
    if delta_type in ("timestamp", "timestamp_ntz"):
        if not isinstance(value, dt.datetime):
            raise _Unknown
        if delta_type == "timestamp_ntz" and value.tzinfo is not None:
            raise _Unknown
        return _timestamp_key(value)
    raise _Unknown


# --- predicates from a pyarrow expression -----------------------------------------------------------

_COMPARISONS = {
    "equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">=",
}
_FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_CONJUNCTIONS = ("and", "and_kleene")
_NULL_MATCHING_MATCH = 0  # SetLookupOptions.null_matching_behavior: a null in the value set matches nulls


def predicates_from_expression(expr: pc.Expression) -> list[Predicate]:
    """The simple conditions ANDed at the top of ``expr``, as :data:`Predicate` tuples.

    Understood: ``and``; comparisons between a field and a literal (either side); ``is_in``;
    ``is_null`` (only without ``nan_is_null``); ``is_valid`` and ``~is_null``. Everything else (``or``,
    casts, arithmetic, literals that are null or finer than microseconds) is dropped, which keeps the
    result a necessary condition of ``expr``.

    The expression is read through its pickled form (Arrow's own expression serialization: an IPC file
    whose ordered schema metadata spells the tree in prefix order, literals in its columns), not its
    display string, so no field name or string literal can be misread.
    """
    try:
        tokens, literals = _serialized_tree(expr)
        tree, _ = _parse_node(tokens, 0, literals)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, pa.ArrowException):
        return []
    return _conjuncts(tree)


def _serialized_tree(expr: pc.Expression) -> tuple[list[tuple[str, str]], pa.Table]:
    _, (buffer,) = expr.__reduce__()
    literals = pa.ipc.open_file(buffer).read_all()
    return _ordered_metadata(literals.schema), literals


class _ArrowSchemaStruct(ctypes.Structure):
    """The Arrow C data interface's ``struct ArrowSchema`` (a stable ABI)."""

    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


# Our own prototype of the C API function: setting argtypes on ``ctypes.pythonapi.PyCapsule_GetPointer``
# would change it for every other user in the process.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _ordered_metadata(schema: pa.Schema) -> list[tuple[str, str]]:
    """Schema metadata as an ordered list with repeated keys, which ``Schema.metadata`` (a dict) loses.

    Read from the C data interface export, whose metadata encoding is specified: an int32 count, then
    for each pair an int32 length and the key bytes, an int32 length and the value bytes.
    """
    capsule = schema.__arrow_c_schema__()
    exported = _ArrowSchemaStruct.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    address = exported.metadata
    if not address:
        return []

    def read_bytes() -> bytes:
        nonlocal address
        length = ctypes.c_int32.from_address(address).value
        address += 4
        data = ctypes.string_at(address, length)
        address += length
        return data

    count = ctypes.c_int32.from_address(address).value
    address += 4
    pairs = []
    for _ in range(count):
        key = read_bytes()
        pairs.append((key.decode("utf-8"), read_bytes().decode("utf-8")))
    del capsule  # releases the exported schema; nothing above outlives it
    return pairs


def _parse_node(tokens: list[tuple[str, str]], i: int, literals: pa.Table) -> tuple[tuple, int]:
    kind, value = tokens[i]
    if kind == "literal":
        return ("literal", literals.column(int(value))[0]), i + 1
    if kind == "field_ref":
        return ("field", (value,)), i + 1
    if kind == "nested_field_ref":
        count = int(value)
        names = []
        for kind_, name in tokens[i + 1 : i + 1 + count]:
            if kind_ != "field_ref":
                raise ValueError("malformed nested field reference")
            names.append(name)
        return ("field", tuple(names)), i + 1 + count
    if kind != "call":
        raise ValueError(f"unexpected token {kind}")
    args = []
    options = None
    i += 1
    while tokens[i][0] not in ("end", "options"):
        arg, i = _parse_node(tokens, i, literals)
        args.append(arg)
    if tokens[i][0] == "options":
        options = literals.column(int(tokens[i][1]))[0]
        i += 1
    if tokens[i] != ("end", value):
        raise ValueError(f"call {value} is not closed")
    return ("call", value, args, options), i + 1


def _conjuncts(node: tuple) -> list[Predicate]:
    if node[0] != "call":
        return []
    _, name, args, options = node
    if name in _CONJUNCTIONS:
        return [p for arg in args for p in _conjuncts(arg)]
    predicate = _simple(name, args, options)
    return [] if predicate is None else [predicate]


def _simple(name: str, args: list[tuple], options: pa.StructScalar | None) -> Predicate | None:
    if name in _COMPARISONS and len(args) == 2:
        op = _COMPARISONS[name]
        (left_kind, left), (right_kind, right) = args[0][:2], args[1][:2]
        if left_kind == "field" and right_kind == "literal":
            column, literal = left, right
        elif left_kind == "literal" and right_kind == "field":
            column, literal, op = right, left, _FLIPPED[op]
        else:
            return None
        value = _literal(literal)
        return None if value is None else (_column(column), op, value)
    if name in ("is_null", "is_valid") and len(args) == 1 and args[0][0] == "field":
        if name == "is_null":
            if options is not None and options["nan_is_null"].as_py():
                return None  # NaN counts as null here, but not in nullCount
            return (_column(args[0][1]), "is_null", None)
        return (_column(args[0][1]), "not_null", None)
    if name == "invert" and len(args) == 1 and args[0][0] == "call" and args[0][1] == "is_null":
        inner = args[0][2]
        if len(inner) == 1 and inner[0][0] == "field":
            return (_column(inner[0][1]), "not_null", None)
        return None
    if name == "is_in" and len(args) == 1 and args[0][0] == "field" and options is not None:
        return _is_in(_column(args[0][1]), options)
    return None


def _is_in(column: Column, options: pa.StructScalar) -> Predicate | None:
    option_names = {options.type.field(i).name for i in range(options.type.num_fields)}
    if "null_matching_behavior" in option_names:
        nulls_match = options["null_matching_behavior"].as_py() == _NULL_MATCHING_MATCH
    elif "skip_nulls" in option_names:
        nulls_match = not options["skip_nulls"].as_py()
    else:
        return None
    values: list[Any] = []
    for scalar in options["value_set"].values:
        if not scalar.is_valid:
            if nulls_match:
                values.append(None)
            continue
        value = _literal(scalar)
        if value is None:
            return None
        values.append(value)
    return (column, "in", values)


def _column(names: tuple[str, ...]) -> Column:
    return names[0] if len(names) == 1 else names


def _literal(scalar: pa.Scalar) -> Any:
    """The Python value of a literal, None if it is null or not exactly representable (sub-µs time)."""
    if not isinstance(scalar, pa.Scalar) or not scalar.is_valid:
        return None
    t = scalar.type
    if pa.types.is_timestamp(t):
        try:
            micros = scalar.cast(pa.timestamp("us", tz=t.tz)).value
        except pa.ArrowInvalid:
            return None
        moment = _EPOCH + dt.timedelta(microseconds=micros)
        return moment if t.tz is not None else moment.replace(tzinfo=None)
    try:
        return scalar.as_py()
    except (ValueError, NotImplementedError):
        return None
