"""Conversion between pyarrow schemas and Delta's schema JSON.

Delta stores a table's schema as Spark's struct JSON (PROTOCOL.md, "Schema Serialization Format"):

    {"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}, ...]}

with ``{"type":"array","elementType":..,"containsNull":..}`` and
``{"type":"map","keyType":..,"valueType":..,"valueContainsNull":..}`` for nested types. Here a Delta
*type* is that JSON already parsed: a string for primitives, a dict for struct/array/map.

Arrow → Delta is many-to-one (every timestamp unit maps to Delta's microsecond timestamps,
``large_string`` and dictionaries of strings to ``string``); writers cast data to
``delta_to_arrow(...)`` before writing files. Arrow types Delta cannot store raise
:class:`~table.errors.UnsupportedTypeError` saying what to cast to, rather than being narrowed silently.
Column metadata is not carried into Arrow: tables keep their own ``schemaString``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc

from table.errors import UnsupportedFeatureError, UnsupportedTypeError

__all__ = ["DeltaType", "SchemaLike", "TYPE_CHANGES", "VARIANT_ARROW_TYPE", "VARIANT_FIELD_MARK", "arrow_to_delta",
           "arrow_type_to_delta", "cast_settled", "changes_of", "decimal_of", "delta_to_arrow", "delta_type_to_arrow", "is_variant",
           "null_array", "schema_problem", "schema_string", "type_changes_within", "type_name", "variant_shaped"]

DeltaType = Union[str, dict[str, Any]]
"""A Delta type as parsed JSON: ``"long"``, ``"decimal(10,2)"`` or a struct/array/map dict."""

SchemaLike = Union[pa.Schema, Mapping[str, Any], str]
"""An Arrow schema, a Delta struct as a dict, or a ``schemaString``."""

_PRIMITIVE_TO_ARROW: Mapping[str, pa.DataType] = {
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
}

_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")

VARIANT_FIELD_MARK = {b"delta.variant": b"true"}
"""Field metadata on the two fields of :data:`VARIANT_ARROW_TYPE`: what tells a variant column from a struct."""

VARIANT_ARROW_TYPE = pa.struct([pa.field("metadata", pa.binary(), nullable=False, metadata=VARIANT_FIELD_MARK),
                                pa.field("value", pa.binary(), nullable=False, metadata=VARIANT_FIELD_MARK)])
"""How a ``variant`` column reads: its unshredded Parquet form, the variant binary encoding's metadata and
value (PROTOCOL.md lets a reader expose this struct when its engine has no variant type; pyarrow has none).
Its fields carry :data:`VARIANT_FIELD_MARK`, so the type converts back to ``variant``."""


def is_variant(arrow_type: pa.DataType) -> bool:
    """Whether ``arrow_type`` is :data:`VARIANT_ARROW_TYPE` (its fields marked), not a struct like it."""
    return (pa.types.is_struct(arrow_type) and arrow_type.num_fields == 2
            and {arrow_type.field(i).name for i in range(2)} == {"metadata", "value"}
            and all((arrow_type.field(i).metadata or {}).get(b"delta.variant") == b"true" for i in range(2)))


def null_array(length: int, arrow_type: pa.DataType) -> pa.Array:
    """``length`` nulls of ``arrow_type``. ``pa.nulls`` leaves a struct's fields null too, which a NOT NULL
    field inside it (a variant's ``metadata`` and ``value``) refuses on a cast; Arrow's builder gives such a
    struct valid (empty) field values under its null."""
    if pa.types.is_struct(arrow_type):
        return pa.array([None] * length, arrow_type)
    return pa.nulls(length, arrow_type)


def variant_shaped(arrow_type: pa.DataType) -> bool:
    """Whether data of ``arrow_type`` can be a variant column's: a struct of exactly the binary fields
    ``metadata`` and ``value`` (marked or not: how a user or another engine hands variant values over)."""
    return (pa.types.is_struct(arrow_type) and arrow_type.num_fields == 2
            and {arrow_type.field(i).name for i in range(2)} == {"metadata", "value"}
            and all(pa.types.is_binary(arrow_type.field(i).type) or pa.types.is_large_binary(arrow_type.field(i).type)
                    for i in range(2)))

TYPE_CHANGES = "delta.typeChanges"
"""Column metadata of type widening: the history of a column's type changes. Also the key of the Arrow
field metadata that marks a widened column (its statistics may be in an older type, see
:func:`delta_to_arrow`)."""
_MAX_DECIMAL_PRECISION = 38

# What to tell a user whose column has an Arrow type Delta cannot store.
_CAST_ADVICE: Mapping[str, str] = {
    "uint8": "int16",
    "uint16": "int32",
    "uint32": "int64",
    "uint64": "int64 (if the values fit) or decimal128(20, 0)",
    "halffloat": "float32",
    "null": "the type the column is meant to have (e.g. string or int64)",
}


# --- Arrow -> Delta ---------------------------------------------------------------------------------


def arrow_to_delta(schema: pa.Schema) -> dict[str, Any]:
    """The Delta struct JSON (as a dict) for an Arrow schema; raises ``UnsupportedTypeError``."""
    return {"type": "struct", "fields": [_field_to_delta(f, f.name) for f in schema]}


def schema_string(schema: pa.Schema) -> str:
    """``metaData.schemaString`` for an Arrow schema: the compact JSON of :func:`arrow_to_delta`."""
    return json.dumps(arrow_to_delta(schema), separators=(",", ":"))


def _field_to_delta(field: pa.Field, path: str) -> dict[str, Any]:
    return {
        "name": field.name,
        "type": arrow_type_to_delta(field.type, column=path),
        "nullable": field.nullable,
        "metadata": {},
    }


def arrow_type_to_delta(arrow_type: pa.DataType, *, column: str) -> DeltaType:
    """The Delta type for one Arrow type; ``column`` (a dotted path) names it in errors."""
    t = arrow_type
    if pa.types.is_dictionary(t):
        return arrow_type_to_delta(t.value_type, column=column)
    if _is(t, "is_run_end_encoded"):
        return arrow_type_to_delta(t.value_type, column=column)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_signed_integer(t):
        return {8: "byte", 16: "short", 32: "integer", 64: "long"}[t.bit_width]
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if _is(t, "is_string", "is_large_string", "is_string_view"):
        return "string"
    if _is(t, "is_binary", "is_large_binary", "is_binary_view", "is_fixed_size_binary"):
        return "binary"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        if t.precision > _MAX_DECIMAL_PRECISION or t.scale < 0 or t.scale > t.precision:
            raise UnsupportedTypeError(
                column, t, cast_to="decimal128 with precision <= 38 and 0 <= scale <= precision"
            )
        return f"decimal({t.precision},{t.scale})"
    if is_variant(t):
        return "variant"
    if pa.types.is_struct(t):
        children = [t.field(i) for i in range(t.num_fields)]
        return {"type": "struct", "fields": [_field_to_delta(f, f"{column}.{f.name}") for f in children]}
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": arrow_type_to_delta(t.key_type, column=f"{column}.key"),
            "valueType": arrow_type_to_delta(t.item_type, column=f"{column}.value"),
            "valueContainsNull": t.item_field.nullable,
        }
    if _is(t, "is_list", "is_large_list", "is_fixed_size_list", "is_list_view", "is_large_list_view"):
        return {
            "type": "array",
            "elementType": arrow_type_to_delta(t.value_type, column=f"{column}.element"),
            "containsNull": t.value_field.nullable,
        }
    if pa.types.is_time(t):
        raise UnsupportedTypeError(column, t, cast_to="int64 (e.g. microseconds since midnight) or string")
    if pa.types.is_duration(t) or pa.types.is_interval(t):
        raise UnsupportedTypeError(column, t, cast_to="int64 (e.g. a number of microseconds)")
    raise UnsupportedTypeError(column, t, cast_to=_CAST_ADVICE.get(str(t)))


def _is(t: pa.DataType, *predicates: str) -> bool:
    """Whether any of the named ``pyarrow.types`` predicates holds; a predicate missing from an older
    pyarrow (the view types arrived in 16) means that pyarrow cannot produce such a type."""
    return any(getattr(pa.types, name, lambda _t: False)(t) for name in predicates)


# --- Delta -> Arrow ---------------------------------------------------------------------------------


def schema_problem(schema_string: object, partition_columns: Sequence[str] = ()) -> str | None:
    """What makes a ``metaData.schemaString`` unusable (not JSON, not a struct, a field without a name
    or type, a partition column that is not a top-level field), or None. Types are not judged here: a
    type we cannot read is an unsupported feature, found when the schema is converted."""
    if not isinstance(schema_string, str):
        return f"schemaString is a {type(schema_string).__name__}, not a string"
    try:
        parsed = json.loads(schema_string)
    except ValueError as exc:
        return f"schemaString is not JSON ({exc})"
    if not isinstance(parsed, Mapping) or parsed.get("type") != "struct" or not isinstance(parsed.get("fields"), list):
        return "schemaString is not a struct with a list of fields"
    names = []
    for field in parsed["fields"]:
        if not isinstance(field, Mapping) or not isinstance(field.get("name"), str) or "type" not in field:
            return f"schemaString has a field without a name or a type: {field!r}"
        names.append(field["name"])
    missing = [c for c in partition_columns if c not in names]
    if missing:
        return f"partition columns {missing} are not columns of the schema {names}"
    return None


def delta_to_arrow(delta_schema: Mapping[str, Any] | str) -> pa.Schema:
    """The Arrow schema of a Delta struct (dict, or the ``schemaString`` itself).

    Types Delta defines but this project cannot read (``interval``...) raise ``UnsupportedFeatureError``
    naming the column. A top-level column whose type was widened (it, or a field inside it, has
    ``delta.typeChanges``) carries that key in its Arrow field metadata: files written before the change
    hold the older type, and so do their statistics, which readers must then not prune with.
    """
    parsed = json.loads(delta_schema) if isinstance(delta_schema, str) else delta_schema
    if not isinstance(parsed, Mapping) or parsed.get("type") != "struct":
        raise ValueError(f"a Delta schema must be a struct, found {parsed!r}")
    fields = []
    for field in parsed["fields"]:
        arrow_field = _field_to_arrow(field, field["name"])
        changes = type_changes_within(field)
        if changes:
            arrow_field = arrow_field.with_metadata({TYPE_CHANGES: json.dumps(changes)})
        fields.append(arrow_field)
    return pa.schema(fields)


def _field_to_arrow(field: Mapping[str, Any], path: str) -> pa.Field:
    arrow_type = delta_type_to_arrow(field["type"], column=path)
    return pa.field(field["name"], arrow_type, nullable=field.get("nullable", True))


def delta_type_to_arrow(delta_type: DeltaType, *, column: str = "?") -> pa.DataType:
    """The Arrow type Delta readers and writers use for ``delta_type`` (timestamps in microseconds)."""
    if isinstance(delta_type, str):
        if delta_type in _PRIMITIVE_TO_ARROW:
            return _PRIMITIVE_TO_ARROW[delta_type]
        if delta_type == "variant":
            return VARIANT_ARROW_TYPE
        if delta_type == "decimal":
            return pa.decimal128(10, 0)  # Spark's default precision and scale for a bare "decimal"
        m = _DECIMAL.match(delta_type)
        if m:
            return pa.decimal128(int(m.group(1)), int(m.group(2)))
        raise UnsupportedFeatureError(
            f"column {column!r} has Delta type {delta_type!r}, which dynacommit cannot read; "
            "use delta-spark or delta-rs for this table",
            feature=delta_type,
        )
    kind = delta_type.get("type")
    if kind == "struct":
        return pa.struct([_field_to_arrow(f, f"{column}.{f['name']}") for f in delta_type["fields"]])
    if kind == "array":
        element = delta_type_to_arrow(delta_type["elementType"], column=f"{column}.element")
        return pa.list_(pa.field("element", element, nullable=delta_type.get("containsNull", True)))
    if kind == "map":
        key = delta_type_to_arrow(delta_type["keyType"], column=f"{column}.key")
        value = delta_type_to_arrow(delta_type["valueType"], column=f"{column}.value")
        return pa.map_(key, pa.field("value", value, nullable=delta_type.get("valueContainsNull", True)))
    if kind == "variant":
        return VARIANT_ARROW_TYPE
    raise UnsupportedFeatureError(
        f"column {column!r} has Delta type {json.dumps(delta_type)}, which dynacommit cannot read; "
        "use delta-spark or delta-rs for this table",
        feature=str(kind),
    )


# --- reading types: decimals, recorded type changes, names in words --------------------------------


def decimal_of(delta_type: str) -> tuple[int, int] | None:
    if delta_type == "decimal":
        return 10, 0
    match = _DECIMAL.match(delta_type)
    return (int(match.group(1)), int(match.group(2))) if match else None


def changes_of(field: Mapping[str, Any]) -> list[Any]:
    changes = (field.get("metadata") or {}).get(TYPE_CHANGES)
    if isinstance(changes, str):  # some writers store the list as a JSON string
        try:
            changes = json.loads(changes)
        except ValueError:
            return [changes]
    if changes is None:
        return []
    return changes if isinstance(changes, list) else [changes]


def type_changes_within(field: Mapping[str, Any]) -> list[Any]:
    """Every recorded type change of ``field`` and of the fields nested in it."""
    found = list(changes_of(field))
    stack = [field.get("type")]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        kind = node.get("type")
        if kind == "struct":
            for child in node.get("fields") or []:
                found.extend(changes_of(child))
                stack.append(child.get("type"))
        elif kind == "array":
            stack.append(node.get("elementType"))
        elif kind == "map":
            stack.extend([node.get("keyType"), node.get("valueType")])
    return found


def type_name(delta_type: DeltaType) -> str:
    """A short readable spelling: ``long``, ``array<string>``, ``struct<a: long, b: string>``."""
    if isinstance(delta_type, str):
        return delta_type
    kind = delta_type.get("type")
    if kind == "array":
        return f"array<{type_name(delta_type['elementType'])}>"
    if kind == "map":
        return f"map<{type_name(delta_type['keyType'])}, {type_name(delta_type['valueType'])}>"
    if kind == "struct":
        return "struct<" + ", ".join(f"{f['name']}: {type_name(f['type'])}" for f in delta_type["fields"]) + ">"
    return json.dumps(delta_type)


def cast_settled(column: pa.ChunkedArray | pa.Array, target: pa.DataType) -> pa.Array:
    """``column`` cast to ``target`` with the nulls a NOT NULL field holds only under a null struct (or
    list element) replaced by an empty value of its type; a null under a present struct still fails."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_struct(target) and pa.types.is_struct(column.type) and \
            [f.name for f in column.type] == [f.name for f in target]:
        absent = column.is_null()
        children = []
        for i, field in enumerate(target):
            child = cast_settled(pc.struct_field(column, [i]), field.type)
            if not field.nullable and child.null_count:
                empty = _EMPTY.get(str(field.type))
                if empty is not None:
                    child = pc.if_else(absent, pc.fill_null(child, pa.scalar(empty, field.type)), child)
            if not field.nullable and child.null_count and pc.any(pc.and_(child.is_null(), pc.invert(absent))).as_py():
                raise pa.ArrowInvalid(f"field {field.name!r} is NOT NULL, and a present struct holds a null in it")
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(target), mask=absent)
    if pa.types.is_list(target) and pa.types.is_list(column.type) and column.offset == 0:
        values = cast_settled(column.values, target.value_type)
        return pa.ListArray.from_arrays(column.offsets, values, type=target, mask=column.is_null())
    return column.cast(target)


_EMPTY = {"binary": b"", "large_binary": b"", "string": "", "large_string": "", "bool": False, "int8": 0,
          "int16": 0, "int32": 0, "int64": 0, "float": 0.0, "double": 0.0}
