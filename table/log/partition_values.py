"""Partition values as the log stores them: serialized as PROTOCOL.md's "Partition Value Serialization"
asks, parsed back to typed Python values, and compared as values rather than text.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa

from table.errors import UnsupportedTypeError
from table.log.schema_arrow import DeltaType, arrow_type_to_delta, decimal_of, type_name

__all__ = ["parse_partition_value", "partition_key", "partition_value_to_string", "to_float32"]


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def partition_value_to_string(value: Any, pa_type: pa.DataType) -> str | None:
    """Serialize one partition value as PROTOCOL.md's "Partition Value Serialization" asks.

    ``value`` is a Python value (as ``Scalar.as_py()`` gives) or a ``pyarrow.Scalar``. None and the empty
    string give None (a null partition value: Delta reads ``""`` as null anyway, so we say so
    explicitly). Timestamps are written as UTC ``YYYY-MM-DD HH:MM:SS.ffffff``, as delta-rs writes them;
    naive datetimes for a zoned column are taken as UTC, as Arrow stores them.
    """
    if isinstance(value, pa.Scalar):
        value = _scalar_to_py(value)
    if value is None:
        return None
    delta_type = arrow_type_to_delta(pa_type, column="partition value")
    if not isinstance(delta_type, str):
        raise UnsupportedTypeError(
            "partition value", pa_type, cast_to="a primitive type (partition columns cannot be nested)"
        )
    if delta_type == "string":
        _expect(value, str, delta_type)
        return value or None
    if delta_type == "boolean":
        _expect(value, bool, delta_type)
        return "true" if value else "false"
    if delta_type in ("long", "integer", "short", "byte"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"a {delta_type} partition value must be an int, got {value!r}")
        return str(value)
    if delta_type in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"a {delta_type} partition value must be a float, got {value!r}")
        value = float(value)
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if delta_type.startswith("decimal"):
        if isinstance(value, bool) or not isinstance(value, (Decimal, int)):
            raise TypeError(f"a {delta_type} partition value must be a Decimal, got {value!r}")
        return format(Decimal(value), "f")
    if delta_type == "date":
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            raise TypeError(f"a date partition value must be a datetime.date, got {value!r}")
        return value.isoformat()
    if delta_type in ("timestamp", "timestamp_ntz"):
        _expect(value, dt.datetime, delta_type)
        if delta_type == "timestamp" and value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        elif delta_type == "timestamp_ntz" and value.tzinfo is not None:
            raise TypeError(f"a timestamp_ntz partition value must be a naive datetime, got {value!r}")
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if delta_type == "binary":
        _expect(value, bytes, delta_type)
        return value.decode("latin-1") or None
    raise UnsupportedTypeError("partition value", pa_type)


def partition_key(values: Mapping[str, str | None], types: Mapping[str, DeltaType]) -> tuple:
    """Partition values compared as values, not text (``types``: the Delta type of each partition column, by
    the name the values use): another writer may spell the same timestamp or number differently
    (``2024-01-01 00:00:00`` vs ``2024-01-01 00:00:00.000000``). Values that do not parse compare as text."""
    try:
        return tuple((c, parse_partition_value(values.get(c), t)) for c, t in types.items())
    except ValueError:
        return tuple((c, values.get(c) or None) for c in types)


def parse_partition_value(s: str | None, delta_type: DeltaType) -> Any:
    """The Python value of a serialized partition value (None and "" are null).

    Numbers give int/float/Decimal, ``date`` a ``datetime.date``, ``timestamp`` an aware UTC
    ``datetime`` (the zone-less form is read as UTC, as delta-rs does), ``timestamp_ntz`` a naive one,
    ``binary`` bytes (one byte per character), ``float`` the float32 value as a Python float. Raises ``ValueError`` for a value that does not parse.
    """
    if s is None or s == "":
        return None
    if not isinstance(delta_type, str):
        raise ValueError(f"partition columns must have a primitive type, not {type_name(delta_type)}")
    try:
        if delta_type == "string":
            return s
        if delta_type == "boolean":
            lowered = s.lower()
            if lowered not in ("true", "false"):
                raise ValueError("expected true or false")
            return lowered == "true"
        if delta_type in ("long", "integer", "short", "byte"):
            return int(s)
        if delta_type == "double":
            return float(s)
        if delta_type == "float":
            return to_float32(float(s))
        if decimal_of(delta_type) is not None:
            return Decimal(s)
        if delta_type == "date":
            return dt.date.fromisoformat(s)
        if delta_type == "timestamp":
            parsed = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                return parsed.replace(tzinfo=dt.timezone.utc)
            return parsed.astimezone(dt.timezone.utc)
        if delta_type == "timestamp_ntz":
            parsed = dt.datetime.fromisoformat(s)
            if parsed.tzinfo is not None:
                raise ValueError("a timestamp_ntz value has no time zone")
            return parsed
        if delta_type == "binary":
            return s.encode("latin-1")
    except (ValueError, ArithmeticError, UnicodeEncodeError) as exc:
        raise ValueError(f"partition value {s!r} is not a valid {delta_type}: {exc}") from None
    raise ValueError(f"partition values of type {delta_type!r} are not supported")


def to_float32(value: float) -> float:
    """``value`` rounded to the nearest float32, as a Python float.

    A ``float`` column's value written as the shortest decimal for a float32 ("0.1") parses to a
    different double than the float32 itself (0.10000000149...); comparisons must use the latter.
    """
    return struct.unpack("f", struct.pack("f", value))[0]


def _expect(value: Any, kind: type, delta_type: str) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"a {delta_type} partition value must be a {kind.__name__}, got {value!r}")


def _scalar_to_py(scalar: pa.Scalar) -> Any:
    """``Scalar.as_py()``, except timestamps, which come back as datetimes in UTC (or naive) without
    going through a time zone database and without losing precision silently."""
    t = scalar.type
    if not pa.types.is_timestamp(t) or not scalar.is_valid:
        return scalar.as_py()
    micros = scalar.cast(pa.timestamp("us", tz=t.tz)).value
    moment = _EPOCH + dt.timedelta(microseconds=micros)
    return moment if t.tz is not None else moment.replace(tzinfo=None)
