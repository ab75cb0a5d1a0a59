"""IcebergCompatV1 and IcebergCompatV2 (PROTOCOL.md): the rules a writer keeps on a table where one is active.

Pure functions, no I/O. A version is *active* when the protocol lists its writer feature (``icebergCompatV1``
/ ``icebergCompatV2``) and ``delta.enableIcebergCompatV1`` / ``...V2`` is true. Then every writer here:

- refuses the table unless column mapping is in ``name`` or ``id`` mode (:func:`check_table`), V1 unless the
  protocol lacks ``deletionVectors``, V2 unless V1 is inactive and deletion vectors are not turned on;
  refuses a schema with types the version does not allow (V1: no ``array``, ``map`` or ``void``; V2: only
  its allow-list), V2 an ``array`` or ``map`` whose nested fields have no ids
  (``delta.columnMapping.nested.ids``), and recorded type changes Iceberg cannot follow;
- writes each data file with its partition values materialized as columns after the data columns
  (:attr:`table.data.writer_settings.WriterSettings.materialize_partitions`), nested ids as Parquet field
  ids (:mod:`table.log.column_mapping`), timestamps as INT64 (as every file here);
- refuses a commit whose new file lacks ``numRecords`` (:func:`check_files`) and a replacement of a
  partitioned table's metadata that renames its partition columns (:func:`check_replace`).

Each refusal names the rule; nothing else about the table is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from table.errors import UnsupportedFeatureError
from table.log import properties
from table.log.actions import Action, AddFile, Metadata, Protocol

__all__ = ["ENABLE", "NESTED_IDS", "active_version", "check_files", "check_replace", "check_table",
           "enabled_versions"]

ENABLE = {1: "delta.enableIcebergCompatV1", 2: "delta.enableIcebergCompatV2"}
FEATURE = {1: "icebergCompatV1", 2: "icebergCompatV2"}
NESTED_IDS = "delta.columnMapping.nested.ids"

_V2_TYPES = frozenset({"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean",
                       "timestamp", "timestamp_ntz", "date"})
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_INTEGRAL = ("byte", "short", "integer", "long")


def enabled_versions(configuration: Mapping[str, str | None]) -> list[int]:
    """The versions whose ``delta.enableIcebergCompatV*`` property is true."""
    return [v for v, key in ENABLE.items() if properties.boolean_property(configuration, key)]


def active_version(protocol: Protocol | None, configuration: Mapping[str, str | None]) -> int | None:
    """The active version (the newest one, if a table claims both), or None."""
    listed = set(protocol.writer_features or []) if protocol is not None and protocol.min_writer_version >= 7 \
        else set()
    active = [v for v in enabled_versions(configuration) if FEATURE[v] in listed]
    return max(active) if active else None


def _refuse(version: int, why: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"the table has IcebergCompatV{version} (writer feature {FEATURE[version]}, "
                                   f"{ENABLE[version]}=true), and {why}", feature=FEATURE[version])


def check_table(protocol: Protocol, metadata: Metadata) -> None:
    """Refuse writing a table with ``protocol`` and ``metadata`` whose active IcebergCompat version's rules
    on the table itself are broken (module docstring)."""
    version = active_version(protocol, metadata.configuration)
    if version is None:
        return
    mode = (metadata.configuration.get("delta.columnMapping.mode") or "none").lower()
    if mode not in ("name", "id"):
        raise _refuse(version, "it requires column mapping in 'name' or 'id' mode (delta.columnMapping.mode is "
                               f"{mode!r}); set delta.columnMapping.mode to 'name' (with the property when creating the table, or "
                               f"t.alter.set_table_properties)")
    if version == 1 and "deletionVectors" in (protocol.writer_features or []):
        raise _refuse(1, "it requires that the protocol does not support deletionVectors, which this one does; the "
                         "table cannot be written until the feature is dropped (delta-spark's ALTER TABLE ... DROP "
                         "FEATURE deletionVectors)")
    if version == 2 and 1 in enabled_versions(metadata.configuration) and "icebergCompatV1" in \
            (protocol.writer_features or []):
        raise _refuse(2, "IcebergCompatV1 is active too, which V2 forbids; set delta.enableIcebergCompatV1=false")
    if version == 2 and properties.deletion_vectors(metadata.configuration):
        raise _refuse(2, "deletion vectors are turned on (delta.enableDeletionVectors=true), which it forbids; set "
                         "delta.enableDeletionVectors=false")
    schema = json.loads(metadata.schema_string)
    for where, problem in _type_problems(schema, version):
        raise _refuse(version, f"column {where!r} {problem}")
    for where, change in _type_changes(schema):
        if not _iceberg_widening(change.get("fromType"), change.get("toType")):
            raise _refuse(version, f"column {where!r} was changed from {change.get('fromType')!r} to "
                                   f"{change.get('toType')!r}, a type change Iceberg cannot follow")


def check_replace(before: Metadata | None, after: Metadata, protocol: Protocol | None, *, table: str) -> None:
    """Refuse new metadata that renames the partition columns of a partitioned IcebergCompat table (PROTOCOL.md:
    "block replacing partitioned tables with a differently-named partition spec")."""
    if before is None or not before.partition_columns or after.partition_columns == before.partition_columns:
        return
    version = active_version(protocol, before.configuration)
    if version is None:
        return
    raise _refuse(version, f"replacing table {table}'s partition columns {before.partition_columns} with "
                           f"{after.partition_columns} is forbidden; keep the partition columns (their types may change)")


def check_files(actions: Iterable[Action], protocol: Protocol | None, configuration: Mapping[str, str | None]) -> None:
    """Refuse a commit adding a file without the ``numRecords`` statistic to an IcebergCompat table."""
    version = active_version(protocol, configuration)
    if version is None:
        return
    for action in actions:
        if isinstance(action, AddFile) and action.data_change and _num_records(action) is None:
            raise _refuse(version, f"file {action.path!r} has no numRecords statistic, which it requires of every file; "
                                   f"nothing was committed")


def _num_records(add: AddFile) -> int | None:
    try:
        value = json.loads(add.stats or "{}").get("numRecords")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _type_problems(schema: Mapping[str, Any], version: int) -> Iterable[tuple[str, str]]:
    for field in schema.get("fields") or []:
        yield from _field_problems(field["name"], field["type"], field, version, (field.get("metadata") or {})
                                   .get("delta.columnMapping.physicalName", field["name"]))


def _field_problems(where: str, delta_type: Any, field: Mapping[str, Any], version: int, id_path: str
                    ) -> Iterable[tuple[str, str]]:
    if isinstance(delta_type, str):
        if version == 1 and delta_type == "void":
            yield where, "has type void, which IcebergCompatV1 forbids"
        elif version == 2 and delta_type not in _V2_TYPES and not _DECIMAL.match(delta_type):
            yield where, f"has type {delta_type}, which is not among the types IcebergCompatV2 allows"
        return
    kind = delta_type.get("type")
    if kind == "struct":
        for child in delta_type.get("fields") or []:
            physical = (child.get("metadata") or {}).get("delta.columnMapping.physicalName", child["name"])
            yield from _field_problems(f"{where}.{child['name']}", child["type"], child, version, physical)
        return
    if version == 1:
        yield where, f"has type {kind}, which IcebergCompatV1 forbids (no array, map or void columns)"
        return
    ids = (field.get("metadata") or {}).get(NESTED_IDS) or {}
    parts = [("element", delta_type.get("elementType"))] if kind == "array" else \
        [("key", delta_type.get("keyType")), ("value", delta_type.get("valueType"))]
    for name, inner in parts:
        path = f"{id_path}.{name}"
        if not isinstance(ids, Mapping) or path not in ids:
            yield where, (f"is a {kind} whose {name} has no id in {NESTED_IDS} (IcebergCompatV2 requires one); write "
                          f"the table with delta-spark, which assigns them")
            return
        yield from _field_problems(where, inner, field, version, path)  # a struct's fields carry their own ids


def _type_changes(schema: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    stack: list[tuple[str, Any]] = [(f["name"], f) for f in schema.get("fields") or []]
    while stack:
        where, field = stack.pop()
        changes = (field.get("metadata") or {}).get("delta.typeChanges") or []
        if isinstance(changes, str):
            try:
                changes = json.loads(changes)
            except ValueError:
                changes = []
        for change in changes if isinstance(changes, list) else []:
            if isinstance(change, Mapping):
                yield where + (f".{change['fieldPath']}" if change.get("fieldPath") else ""), change
        node = field.get("type")
        nested = [node]
        while nested:
            current = nested.pop()
            if not isinstance(current, Mapping):
                continue
            if current.get("type") == "struct":
                stack.extend((f"{where}.{c['name']}", c) for c in current.get("fields") or [])
            elif current.get("type") == "array":
                nested.append(current.get("elementType"))
            elif current.get("type") == "map":
                nested.extend([current.get("keyType"), current.get("valueType")])


def _iceberg_widening(source: Any, target: Any) -> bool:
    """Type changes Iceberg's schema evolution allows: integers to wider integers (Iceberg stores byte and
    short as int), float to double, a decimal's precision raised with its scale kept."""
    if not isinstance(source, str) or not isinstance(target, str):
        return False
    if source in _INTEGRAL and target in _INTEGRAL:
        return _INTEGRAL.index(source) <= _INTEGRAL.index(target)
    if (source, target) == ("float", "double"):
        return True
    a, b = _DECIMAL.match(source), _DECIMAL.match(target)
    return bool(a and b and a.group(2) == b.group(2) and int(a.group(1)) <= int(b.group(1)))
