"""Conversion between pyarrow schemas and Delta's schema JSON, and partition value (de)serialization.

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

import datetime as dt
import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Union

import pyarrow as pa

from logstore.errors import InvalidArgumentError
from table.errors import (
    SchemaMismatchError,
    UnsupportedFeatureError,
    UnsupportedTypeError,
)

__all__ = [
    "DeltaType",
    "SchemaLike",
    "arrow_to_delta",
    "arrow_type_to_delta",
    "check_column_names",
    "check_schema",
    "delta_to_arrow",
    "delta_type_to_arrow",
    "evolve_schema",
    "evolution_widens",
    "record_type_changes",
    "parse_partition_value",
    "partition_key",
    "partition_value_to_string",
    "required_features",
    "schema_diff",
    "schema_problem",
    "schema_string",
    "to_float32",
    "type_change_problems",
    "TYPE_CHANGES",
    "VARIANT_ARROW_TYPE",
    "widening_allowed",
]

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

VARIANT_ARROW_TYPE = pa.struct([pa.field("metadata", pa.binary(), nullable=False),
                                pa.field("value", pa.binary(), nullable=False)])
"""How a ``variant`` column reads: its unshredded Parquet form, the variant binary encoding's metadata and
value (PROTOCOL.md lets a reader expose this struct when its engine has no variant type; pyarrow has none)."""

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

# Column metadata keys that only a writer implementing the named feature may write under.
_METADATA_FEATURES: tuple[tuple[str, str], ...] = (
    ("delta.invariants", "invariants"),
    ("delta.generationExpression", "generatedColumns"),
    ("delta.identity.", "identityColumns"),
    ("delta.columnMapping.", "columnMapping"),
    ("CURRENT_DEFAULT", "allowColumnDefaults"),
    ("delta.typeChanges", "typeWidening"),
)


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
        changes = _type_changes_within(field)
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


# --- type widening ----------------------------------------------------------------------------------

_WIDER_INTEGERS = ("byte", "short", "integer", "long")


def widening_allowed(from_type: str, to_type: str) -> bool:
    """Whether PROTOCOL.md's type widening allows ``from_type`` → ``to_type`` (primitive Delta types):
    integers to a wider integer, ``float`` → ``double``, ``byte``/``short``/``integer`` → ``double``,
    ``date`` → ``timestamp_ntz``, ``decimal(p, s)`` → ``decimal(p + k1, s + k2)`` with ``k1 >= k2 >= 0``,
    and integers to a decimal with room for their digits (``decimal(10 + k1, k2)`` for up to ``integer``,
    ``decimal(20 + k1, k2)`` for ``long``)."""
    if from_type in _WIDER_INTEGERS and to_type in _WIDER_INTEGERS:
        return _WIDER_INTEGERS.index(from_type) < _WIDER_INTEGERS.index(to_type)
    if (from_type, to_type) in {("float", "double"), ("date", "timestamp_ntz")}:
        return True
    if from_type in ("byte", "short", "integer") and to_type == "double":
        return True
    target = _decimal_of(to_type)
    if target is None:
        return False
    if from_type in _WIDER_INTEGERS:
        digits = 20 if from_type == "long" else 10
        source = (digits, 0)
    else:
        source = _decimal_of(from_type)
        if source is None:
            return False
    k1, k2 = target[0] - source[0], target[1] - source[1]
    return k1 >= k2 >= 0


def evolution_widens(from_type: str, to_type: str) -> bool:
    """Whether schema evolution (``schema_mode="merge"``, MERGE's schema evolution) widens a column of
    ``from_type`` to ``to_type`` on its own when type widening is enabled: the changes Delta applies
    automatically, within one family (integers to a wider integer, ``float`` -> ``double``, a decimal to a
    wider decimal, ``date`` -> ``timestamp_ntz``). Integers to ``double`` or to a decimal take an explicit
    ``alter.change_column_type``, as in delta-spark."""
    if not widening_allowed(from_type, to_type):
        return False
    if from_type in _WIDER_INTEGERS:
        return to_type in _WIDER_INTEGERS
    return True


def _textual(delta_type: object) -> bool:
    return isinstance(delta_type, str) and (delta_type == "string" or re.fullmatch(r"(var)?char\(\d+\)",
                                                                                    delta_type) is not None)


def record_type_changes(old_schema: Mapping[str, Any] | str, new_schema: Mapping[str, Any]) -> dict[str, Any]:
    """``new_schema`` with every primitive type that differs from ``old_schema``'s (fields matched by name)
    recorded in ``delta.typeChanges`` of its nearest ancestor struct field, after the changes already there
    (PROTOCOL.md, "Type Change Metadata"): ``fromType``, ``toType`` and, for an array element or a map key
    or value, ``fieldPath`` (``element``, ``key``, ``value``, dotted when nested)."""
    old = json.loads(old_schema) if isinstance(old_schema, str) else old_schema
    return {**new_schema, "fields": _record_fields(old.get("fields") or [], new_schema["fields"])}


def _record_fields(old_fields: Sequence[Mapping[str, Any]], new_fields: Sequence[Mapping[str, Any]]
                   ) -> list[dict[str, Any]]:
    before = {f["name"]: f for f in old_fields}
    out = []
    for field in new_fields:
        previous = before.get(field["name"])
        if previous is None:
            out.append(dict(field))
            continue
        changes: list[dict[str, str]] = []
        new_type = _record_type(previous["type"], field["type"], "", changes)
        updated = {**field, "type": new_type}
        if changes:
            metadata = dict(field.get("metadata") or {})
            metadata[TYPE_CHANGES] = [*_changes_of(field), *changes]
            updated["metadata"] = metadata
        out.append(updated)
    return out


def _record_type(old: DeltaType, new: DeltaType, path: str, changes: list[dict[str, str]]) -> DeltaType:
    if isinstance(old, str) and isinstance(new, str):
        if old != new:
            changes.append({"fromType": old, "toType": new, **({"fieldPath": path} if path else {})})
        return new
    if not isinstance(old, Mapping) or not isinstance(new, Mapping) or old.get("type") != new.get("type"):
        return new
    kind = new.get("type")
    if kind == "struct":
        return {**new, "fields": _record_fields(old["fields"], new["fields"])}
    joined = (path + ".") if path else ""
    if kind == "array":
        return {**new, "elementType": _record_type(old["elementType"], new["elementType"], joined + "element",
                                                   changes)}
    if kind == "map":
        return {**new, "keyType": _record_type(old["keyType"], new["keyType"], joined + "key", changes),
                "valueType": _record_type(old["valueType"], new["valueType"], joined + "value", changes)}
    return new


def _decimal_of(delta_type: str) -> tuple[int, int] | None:
    if delta_type == "decimal":
        return 10, 0
    match = _DECIMAL.match(delta_type)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _changes_of(field: Mapping[str, Any]) -> list[Any]:
    changes = (field.get("metadata") or {}).get(TYPE_CHANGES)
    if isinstance(changes, str):  # some writers store the list as a JSON string
        try:
            changes = json.loads(changes)
        except ValueError:
            return [changes]
    if changes is None:
        return []
    return changes if isinstance(changes, list) else [changes]


def _type_changes_within(field: Mapping[str, Any]) -> list[Any]:
    """Every recorded type change of ``field`` and of the fields nested in it."""
    found = list(_changes_of(field))
    stack = [field.get("type")]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        kind = node.get("type")
        if kind == "struct":
            for child in node.get("fields") or []:
                found.extend(_changes_of(child))
                stack.append(child.get("type"))
        elif kind == "array":
            stack.append(node.get("elementType"))
        elif kind == "map":
            stack.extend([node.get("keyType"), node.get("valueType")])
    return found


def type_change_problems(delta_schema: Mapping[str, Any] | str) -> list[str]:
    """The recorded type changes (``delta.typeChanges``) of a schema that PROTOCOL.md's type widening does
    not allow, in words; empty when every change is one a reader converts exactly."""
    parsed = json.loads(delta_schema) if isinstance(delta_schema, str) else delta_schema
    problems = []
    for field in parsed.get("fields") or []:
        for change in _type_changes_within(field):
            if not isinstance(change, Mapping):
                problems.append(f"column {field.get('name')!r} has a malformed type change {change!r}")
                continue
            source, target = change.get("fromType"), change.get("toType")
            where = f"{field.get('name')}" + (f".{change['fieldPath']}" if change.get("fieldPath") else "")
            if _textual(source) and _textual(target):
                continue  # char/varchar/string: the same Parquet values; Delta's readers let them pass too
            if not (isinstance(source, str) and isinstance(target, str) and widening_allowed(source, target)):
                problems.append(f"column {where!r} changed from {source!r} to {target!r}, which is not a type "
                                f"widening Delta defines")
    return problems


# --- comparing schemas ------------------------------------------------------------------------------


def schema_diff(table_schema: SchemaLike, data_schema: SchemaLike) -> list[str]:
    """The differences that stop ``data_schema`` being written into a table of ``table_schema``, in words.

    Both sides are compared as Delta types, so Arrow encodings that store the same Delta type
    (``large_string`` vs ``string``, timestamp units and zones) are not differences. A nullable data
    column into a non-nullable table column is a difference; the reverse is not. Column order does
    not matter. An empty list means the data fits. Raises ``UnsupportedTypeError`` if the data has a
    type Delta cannot store.
    """
    table_fields = _delta_fields(table_schema)
    data_fields = _delta_fields(data_schema)
    differences: list[str] = []
    _diff_fields(table_fields, data_fields, "", differences)
    return differences


def check_column_names(schema: pa.Schema, *, table: str | None = None, mapped: bool = False) -> None:
    """Refuse a schema Delta cannot hold: no columns, an empty name, a name with a character Delta refuses
    (``' ,;{}()\\n\\t='``; allowed with column mapping, ``mapped``, as files then use physical names), or
    two names equal up to case (Delta resolves column names case-insensitively), at any nesting level.
    Raises InvalidArgumentError."""
    where = f" for table {table}" if table else ""
    if len(schema) == 0:
        raise InvalidArgumentError(f"the data has no columns{where}: a Delta table needs at least one column")
    _check_names([f for f in schema], "", where, mapped)


_INVALID_NAME_CHARACTERS = frozenset(" ,;{}()\n\t=")
"""What Delta (without column mapping) refuses in a column name: Parquet readers and Hive paths trip on them."""


def _check_names(fields: list[pa.Field], prefix: str, where: str, mapped: bool = False) -> None:
    seen: dict[str, str] = {}
    for field in fields:
        if not field.name:
            raise InvalidArgumentError(f"a column{' of ' + prefix.rstrip('.') if prefix else ''} has an empty "
                                       f"name{where}; name every column")
        bad = sorted(set(field.name) & _INVALID_NAME_CHARACTERS)
        if bad and not mapped:
            raise InvalidArgumentError(
                f"column {prefix + field.name!r}{where} contains {', '.join(repr(c) for c in bad)}, which Delta "
                f"does not allow in column names (any of ' ,;{{}}()\\n\\t='); rename it, e.g. with underscores")
        twin = seen.get(field.name.lower())
        if twin is not None:
            same = "twice" if twin == field.name else f"as {twin!r} and {field.name!r}"
            raise InvalidArgumentError(
                f"column {prefix + field.name!r} appears {same}{where}: Delta column names are case-insensitive "
                f"and must be unique; rename one of them")
        seen[field.name.lower()] = field.name
        inner = field.type
        while pa.types.is_list(inner) or pa.types.is_large_list(inner) or pa.types.is_fixed_size_list(inner):
            inner = inner.value_type
        if pa.types.is_struct(inner):
            _check_names([inner.field(i) for i in range(inner.num_fields)], prefix + field.name + ".", where, mapped)


def check_schema(table_schema: SchemaLike, data_schema: SchemaLike, *, table: str | None = None) -> None:
    """Raise ``SchemaMismatchError`` listing :func:`schema_diff` if there is any difference."""
    differences = schema_diff(table_schema, data_schema)
    if differences:
        raise SchemaMismatchError(differences, table=table)


def _delta_fields(schema: SchemaLike) -> list[dict[str, Any]]:
    if isinstance(schema, pa.Schema):
        return arrow_to_delta(schema)["fields"]
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    return list(parsed["fields"])


def _diff_fields(
    expected: list[Mapping[str, Any]], found: list[Mapping[str, Any]], prefix: str, out: list[str]
) -> None:
    expected_by_name = {f["name"]: f for f in expected}
    found_by_name = {f["name"]: f for f in found}
    # A data column that matches a missing table column only up to case is reported once, as such.
    missing_by_lower = {name.lower(): name for name in expected_by_name if name not in found_by_name}
    case_twins = {
        name: missing_by_lower[name.lower()]
        for name in found_by_name
        if name not in expected_by_name and name.lower() in missing_by_lower
    }
    for field in expected:
        path = prefix + field["name"]
        other = found_by_name.get(field["name"])
        if other is None:
            if field["name"] not in case_twins.values():
                out.append(f"missing column {path!r} ({_type_name(field['type'])}): the data has no such column")
            continue
        _diff_types(field["type"], other["type"], path, out)
        if other.get("nullable", True) and not field.get("nullable", True):
            out.append(f"column {path!r} is not nullable in the table, but the data column is nullable")
    for field in found:
        name = field["name"]
        if name in expected_by_name:
            continue
        if name in case_twins:
            out.append(
                f"column {prefix + name!r} differs only in case from the table's column {prefix + case_twins[name]!r}; "
                "rename it to match"
            )
        else:
            out.append(f"extra column {prefix + name!r} ({_type_name(field['type'])}) is not in the table")


def _diff_types(expected: DeltaType, found: DeltaType, path: str, out: list[str]) -> None:
    e_kind = expected.get("type") if isinstance(expected, Mapping) else expected
    f_kind = found.get("type") if isinstance(found, Mapping) else found
    if e_kind != f_kind or (isinstance(expected, str) and expected != found):
        out.append(f"column {path!r}: type differs: expected {_type_name(expected)}, found {_type_name(found)}")
        return
    if e_kind == "struct":
        _diff_fields(expected["fields"], found["fields"], path + ".", out)
    elif e_kind == "array":
        if found.get("containsNull", True) and not expected.get("containsNull", True):
            out.append(f"column {path!r}: the table's array cannot contain nulls, but the data's can")
        _diff_types(expected["elementType"], found["elementType"], f"{path}.element", out)
    elif e_kind == "map":
        if found.get("valueContainsNull", True) and not expected.get("valueContainsNull", True):
            out.append(f"column {path!r}: the table's map values cannot be null, but the data's can")
        _diff_types(expected["keyType"], found["keyType"], f"{path}.key", out)
        _diff_types(expected["valueType"], found["valueType"], f"{path}.value", out)


# --- schema evolution -------------------------------------------------------------------------------

_INTEGER_FAMILY = ("byte", "short", "integer")
"""Parquet stores these three as INT32, so any file of one reads as another: Delta widens among them when
merging schemas, with or without the type widening feature."""


def evolve_schema(table_schema: SchemaLike, data_schema: pa.Schema, *, table: str | None = None,
                  type_widening: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The table schema that also holds ``data_schema`` (Delta's ``mergeSchema``), and what changed, in words.

    Columns of the data the table lacks are added at the end (of the table, or of their struct), nullable;
    ``byte``, ``short`` and ``integer`` widen to the wider of the two; everything else of the table stays
    as it is (field metadata, nullability, order). A data column whose type the table's does not hold (a
    ``long`` into an ``integer`` column, a string into a number) raises SchemaMismatchError naming each,
    as Delta's "failed to merge fields" does: such a change needs an overwrite of the schema. Data types
    narrower than the table's (an ``integer`` into a ``long`` column) are written as the table's type.
    With ``type_widening`` (the table has ``delta.enableTypeWidening=true``) a column also widens to the
    data's type where Delta's automatic widening does (:func:`evolution_widens`); the caller records the
    changes (:func:`record_type_changes`).
    """
    fields = [dict(f) for f in _delta_fields(table_schema)]
    problems: list[str] = []
    changes: list[str] = []
    merged = _evolve_fields(fields, arrow_to_delta(data_schema)["fields"], "", problems, changes, type_widening)
    if problems:
        raise SchemaMismatchError(problems, table=table)
    return {"type": "struct", "fields": merged}, changes


def _evolve_fields(table_fields: list[dict[str, Any]], data_fields: list[Mapping[str, Any]], prefix: str,
                   problems: list[str], changes: list[str], widen: bool) -> list[dict[str, Any]]:
    by_name = {f["name"]: f for f in data_fields}
    lowered = {f["name"].lower(): f["name"] for f in table_fields}
    out = []
    for field in table_fields:
        other = by_name.get(field["name"])
        if other is None:
            out.append(field)
            continue
        merged_type = _evolve_type(field["type"], other["type"], prefix + field["name"], problems, changes, widen)
        out.append({**field, "type": merged_type})
    for field in data_fields:
        if field["name"] in {f["name"] for f in table_fields}:
            continue
        twin = lowered.get(field["name"].lower())
        if twin is not None:
            problems.append(f"column {prefix + field['name']!r} differs only in case from the table's column "
                            f"{prefix + twin!r}; rename it to match")
            continue
        out.append({"name": field["name"], "type": _nullable(field["type"]), "nullable": True, "metadata": {}})
        changes.append(f"added column {prefix + field['name']!r} ({_type_name(field['type'])})")
    return out


def _evolve_type(current: DeltaType, update: DeltaType, path: str, problems: list[str], changes: list[str],
                 widen: bool) -> DeltaType:
    if current == update:
        return current
    kind = current.get("type") if isinstance(current, Mapping) else None
    other = update.get("type") if isinstance(update, Mapping) else None
    if kind == "struct" and other == "struct":
        return {**current, "fields": _evolve_fields([dict(f) for f in current["fields"]], update["fields"],
                                                    path + ".", problems, changes, widen)}
    if kind == "array" and other == "array":
        return {**current, "elementType": _evolve_type(current["elementType"], update["elementType"],
                                                       path + ".element", problems, changes, widen)}
    if kind == "map" and other == "map":
        return {**current, "keyType": _evolve_type(current["keyType"], update["keyType"], path + ".key", problems,
                                                   changes, widen),
                "valueType": _evolve_type(current["valueType"], update["valueType"], path + ".value", problems,
                                          changes, widen)}
    if isinstance(current, str) and isinstance(update, str):
        if current in _INTEGER_FAMILY and update in _INTEGER_FAMILY:
            wider = max(current, update, key=_INTEGER_FAMILY.index)
            if wider != current:
                changes.append(f"widened column {path!r} from {current} to {wider}")
            return wider
        if _fits(update, current):
            return current
        if evolution_widens(current, update):
            if widen:
                changes.append(f"widened column {path!r} from {current} to {update}")
                return update
            problems.append(f"column {path!r} is {current} in the table and {update} in the data; merging the schema "
                            f"widens a column only on a table with delta.enableTypeWidening=true (set it with "
                            f"t.alter.set_table_properties), or cast the data to {current}")
            return current
    problems.append(f"column {path!r} is {_type_name(current)} in the table and {_type_name(update)} in the data; "
                    f"merging the schema cannot change a column's type (overwrite the schema to replace it)")
    return current


def _fits(data: str, table: str) -> bool:
    """Whether values of the primitive Delta type ``data`` are written into a ``table`` column unchanged
    (a cast that never loses anything)."""
    integers = ("byte", "short", "integer", "long")
    if data in integers and table in integers:
        return integers.index(data) <= integers.index(table)
    if _decimal_of(data) is not None and _decimal_of(table) is not None:
        return widening_allowed(data, table)
    return (data, table) in {("float", "double"), ("date", "timestamp"), ("date", "timestamp_ntz")} or (
        data in ("byte", "short", "integer") and table == "double")


def _nullable(delta_type: DeltaType) -> DeltaType:
    """A new column's type as Delta adds it: every nested field nullable too."""
    if isinstance(delta_type, str):
        return delta_type
    kind = delta_type.get("type")
    if kind == "struct":
        return {**delta_type, "fields": [{**f, "nullable": True, "type": _nullable(f["type"])}
                                         for f in delta_type["fields"]]}
    if kind == "array":
        return {**delta_type, "elementType": _nullable(delta_type["elementType"]), "containsNull": True}
    if kind == "map":
        return {**delta_type, "valueType": _nullable(delta_type["valueType"]), "valueContainsNull": True}
    return delta_type


def _type_name(delta_type: DeltaType) -> str:
    """A short readable spelling: ``long``, ``array<string>``, ``struct<a: long, b: string>``."""
    if isinstance(delta_type, str):
        return delta_type
    kind = delta_type.get("type")
    if kind == "array":
        return f"array<{_type_name(delta_type['elementType'])}>"
    if kind == "map":
        return f"map<{_type_name(delta_type['keyType'])}, {_type_name(delta_type['valueType'])}>"
    if kind == "struct":
        return "struct<" + ", ".join(f"{f['name']}: {_type_name(f['type'])}" for f in delta_type["fields"]) + ">"
    return json.dumps(delta_type)


def required_features(delta_schema: Mapping[str, Any] | str) -> set[str]:
    """Table features (PROTOCOL.md names) that a table with this schema must list in its protocol.

    ``timestampNtz`` for any ``timestamp_ntz`` column (it then needs reader 3 / writer 7), and the
    writer features implied by column metadata (``delta.invariants`` → ``invariants``, generated and
    identity columns, column mapping, defaults, type widening), so a writer that implements none of
    them can refuse such a schema rather than ignore its rules.
    """
    parsed = json.loads(delta_schema) if isinstance(delta_schema, str) else delta_schema
    features: set[str] = set()
    _collect_features(parsed, features)
    return features


def _collect_features(delta_type: DeltaType, out: set[str]) -> None:
    if isinstance(delta_type, str):
        if delta_type == "timestamp_ntz":
            out.add("timestampNtz")
        elif delta_type == "variant":
            out.add("variantType")
        return
    kind = delta_type.get("type")
    if kind == "variant":
        out.add("variantType")
    elif kind == "struct":
        for field in delta_type["fields"]:
            for key in field.get("metadata") or {}:
                out.update(feature for prefix, feature in _METADATA_FEATURES if key.startswith(prefix))
            _collect_features(field["type"], out)
    elif kind == "array":
        _collect_features(delta_type["elementType"], out)
    elif kind == "map":
        _collect_features(delta_type["keyType"], out)
        _collect_features(delta_type["valueType"], out)


# --- partition values -------------------------------------------------------------------------------

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
        raise ValueError(f"partition columns must have a primitive type, not {_type_name(delta_type)}")
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
        if delta_type == "decimal" or _DECIMAL.match(delta_type):
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
