"""Whether data fits a table's schema, and the schema that holds both (Delta's ``mergeSchema``).

Schemas are compared as Delta types, so Arrow encodings of one Delta type are not differences. Every
check raises the project's errors listing each problem in words: a column missing, extra, of another
type or nullability, a name Delta refuses, a change only an overwrite of the schema may make.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from logstore.errors import InvalidArgumentError
from table.errors import SchemaMismatchError
from table.log.schema_arrow import DeltaType, SchemaLike, arrow_to_delta, decimal_of, type_name
from table.log.type_changes import evolution_widens, widening_allowed

__all__ = ["check_column_names", "check_schema", "evolve_schema", "schema_diff"]


# --- comparing schemas ------------------------------------------------------------------------------


def schema_diff(table_schema: SchemaLike, data_schema: SchemaLike) -> list[str]:
    """The differences that stop ``data_schema`` being written into a table of ``table_schema``, in words.

    Both sides are compared as Delta types, so Arrow encodings that store the same Delta type
    (``large_string`` vs ``string``, timestamp units and zones) are not differences. A nullable data
    column into a non-nullable table column is a difference; the reverse is not. Column order does
    not matter. An empty list means the data fits. Raises ``UnsupportedTypeError`` if the data has a
    type Delta cannot store.
    """
    key = _diff_key(table_schema, data_schema)
    if key is not None:
        known = _DIFFS.get(key)
        if known is not None:
            return list(known)
    table_fields = _delta_fields(table_schema)
    data_fields = _delta_fields(data_schema)
    differences: list[str] = []
    _diff_fields(table_fields, data_fields, "", differences)
    if key is not None:
        if len(_DIFFS) >= _DIFFS_KEPT:
            _DIFFS.clear()
        _DIFFS[key] = tuple(differences)
    return differences


_DIFFS: dict[tuple[bytes, bytes], tuple[str, ...]] = {}
""":func:`schema_diff` of Arrow schemas already compared, by their serialized forms (every name, type,
nullability and field metadata: what the comparison reads). A writer appending to one table compares the
same two schemas at every write, once when planning it and once when staging its rows."""

_DIFFS_KEPT = 256


def _diff_key(table_schema: SchemaLike, data_schema: SchemaLike) -> tuple[bytes, bytes] | None:
    if not isinstance(table_schema, pa.Schema) or not isinstance(data_schema, pa.Schema):
        return None
    try:
        return table_schema.serialize().to_pybytes(), data_schema.serialize().to_pybytes()
    except (pa.ArrowException, ValueError, TypeError):  # a type IPC cannot carry: compared every time
        return None


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
                out.append(f"missing column {path!r} ({type_name(field['type'])}): the data has no such column")
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
            out.append(f"extra column {prefix + name!r} ({type_name(field['type'])}) is not in the table")


def _diff_types(expected: DeltaType, found: DeltaType, path: str, out: list[str]) -> None:
    e_kind = expected.get("type") if isinstance(expected, Mapping) else expected
    f_kind = found.get("type") if isinstance(found, Mapping) else found
    if expected == "variant" and _variant_struct(found):
        return  # variant values handed over as their struct of binaries (how they read)
    if e_kind != f_kind or (isinstance(expected, str) and expected != found):
        out.append(f"column {path!r}: type differs: expected {type_name(expected)}, found {type_name(found)}")
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


def _variant_struct(found: DeltaType) -> bool:
    """A Delta struct of exactly the binary fields ``metadata`` and ``value``: a variant's unshredded form."""
    if not isinstance(found, Mapping) or found.get("type") != "struct":
        return False
    fields = found.get("fields") or []
    return sorted(f["name"] for f in fields) == ["metadata", "value"] and all(f["type"] == "binary" for f in fields)


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
        changes.append(f"added column {prefix + field['name']!r} ({type_name(field['type'])})")
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
    problems.append(f"column {path!r} is {type_name(current)} in the table and {type_name(update)} in the data; "
                    f"merging the schema cannot change a column's type (overwrite the schema to replace it)")
    return current


def _fits(data: str, table: str) -> bool:
    """Whether values of the primitive Delta type ``data`` are written into a ``table`` column unchanged
    (a cast that never loses anything)."""
    integers = ("byte", "short", "integer", "long")
    if data in integers and table in integers:
        return integers.index(data) <= integers.index(table)
    if decimal_of(data) is not None and decimal_of(table) is not None:
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
