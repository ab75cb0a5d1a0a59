"""Column mapping (PROTOCOL.md, "Column Mapping"): every column, nested or not, has a logical name (the one
users see, which RENAME changes), a physical name (the one data files, partition values and statistics
use, which never changes) and an id (``delta.columnMapping.id``, the Parquet field id).

:class:`Layout` is a table's mapping, derived once from its ``metaData``: the logical and the physical
Arrow schema (same shapes, other names, each physical field carrying its Parquet field id), and each
top-level column's physical name. With mode ``none`` (or no mapping in the protocol) both schemas are the
logical one, so readers and writers go through the same code either way:

- readers build their pyarrow datasets over the physical schema (partition values and statistics are
  keyed by physical names) and give rows back under logical names (:func:`relabel`, zero-copy); files are
  pruned by a filter over logical names with their statistics renamed (:func:`logical_stats`), and rows
  filtered once named logically;
- writers write physical names and field ids (:meth:`Layout.physical_table`), and record partition values
  and statistics by physical name.

New columns (a table created with ``delta.columnMapping.mode``, a schema merge, an ADD COLUMN) get ids above
``delta.columnMapping.maxColumnId`` and physical names ``col-<uuid>`` (:func:`assign`), so a physical name is
never reused across the table's history; a table switched to ``name`` mode keeps its columns' current
names as their physical names, so no file is rewritten.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from table.log.schema import delta_to_arrow

__all__ = ["ID", "MAX_ID", "MODE", "PHYSICAL", "Layout", "assign", "layout_of", "logical_stats", "logical_values",
           "relabel"]

MODE = "delta.columnMapping.mode"
MAX_ID = "delta.columnMapping.maxColumnId"
ID = "delta.columnMapping.id"
PHYSICAL = "delta.columnMapping.physicalName"
FIELD_ID = b"PARQUET:field_id"
NESTED_IDS = "delta.columnMapping.nested.ids"


@dataclasses.dataclass(frozen=True)
class Layout:
    """A table's column mapping (module docstring). Picklable: Spark tasks carry it."""

    mode: str                      # "none", "name" or "id"
    logical: pa.Schema
    physical: pa.Schema
    names: Mapping[str, str]       # top-level logical name -> physical name

    @property
    def mapped(self) -> bool:
        return self.mode != "none"

    def physical_name(self, column: str) -> str:
        return self.names.get(column, column)

    def physical_columns(self, columns: Sequence[str]) -> list[str]:
        return [self.physical_name(c) for c in columns]

    def physical_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Partition values keyed by logical names, keyed by physical names (as the log keeps them)."""
        return {self.physical_name(k): v for k, v in values.items()}

    def physical_table(self, data: pa.Table) -> pa.Table:
        """Rows under logical names (the logical schema's columns) under physical names, field ids attached."""
        if not self.mapped:
            return data
        fields = [self.physical.field(self.physical_name(name)) for name in data.column_names]
        return pa.Table.from_arrays([_view(column, f.type) for column, f in zip(data.columns, fields)],
                                    schema=pa.schema(fields))

    def with_unmapped(self, field: pa.Field) -> Layout:
        """This layout with one more column, named alike in files and API: the ``_change_type`` column
        of change data files, which column mapping leaves alone."""
        return dataclasses.replace(self, logical=self.logical.append(field), physical=self.physical.append(field),
                                   names={**self.names, field.name: field.name})

    def logical_table(self, data: pa.Table | pa.RecordBatch, columns: Sequence[str] | None = None
                      ) -> pa.Table | pa.RecordBatch:
        """Rows read under physical names, under logical ones (``columns``: the logical names, in order; by
        default the whole logical schema)."""
        if not self.mapped:
            return data
        return relabel(data, columns if columns is not None else self.logical.names, self.logical)


def layout_of(schema_string: str, configuration: Mapping[str, str | None], *, supported: bool = True) -> Layout:
    """The layout of a table with this ``schemaString`` and properties; ``supported``: the protocol allows
    column mapping (else the property is not honoured, PROTOCOL.md)."""
    return _layout(schema_string, (configuration.get(MODE) or "none").lower() if supported else "none")


@functools.lru_cache(maxsize=64)
def _layout(schema_string: str, mode: str) -> Layout:
    logical = delta_to_arrow(schema_string)
    if mode not in ("name", "id"):
        return Layout("none", logical, logical, {})
    fields = json.loads(schema_string)["fields"]
    physical = pa.schema([_physical_field(f, arrow) for f, arrow in zip(fields, logical)])
    names = {f["name"]: _physical_name(f) for f in fields}
    return Layout(mode, logical, physical, names)


def _physical_name(field: Mapping[str, Any]) -> str:
    return (field.get("metadata") or {}).get(PHYSICAL, field["name"])


def _physical_field(field: Mapping[str, Any], arrow: pa.Field) -> pa.Field:
    metadata = field.get("metadata") or {}
    nested = metadata.get(NESTED_IDS)
    physical_type = _physical_type(field["type"], arrow.type, nested if isinstance(nested, Mapping) else {},
                                   _physical_name(field))
    out = pa.field(_physical_name(field), physical_type, nullable=arrow.nullable)
    if ID in metadata:
        out = out.with_metadata({FIELD_ID: str(metadata[ID]).encode()})
    return out


def _physical_type(delta_type: Any, arrow_type: pa.DataType, nested: Mapping[str, Any], path: str) -> pa.DataType:
    """``arrow_type`` under physical names; the element of an array and the key and value of a map get the
    field ids ``nested`` (the nearest field's ``delta.columnMapping.nested.ids``) gives them under ``path``
    (IcebergCompatV2 writes them)."""
    if not isinstance(delta_type, Mapping):
        return arrow_type
    kind = delta_type.get("type")
    if kind == "struct":
        return pa.struct([_physical_field(f, arrow_type.field(i)) for i, f in enumerate(delta_type["fields"])])
    if kind == "array":
        element = arrow_type.value_field
        inner = _physical_type(delta_type["elementType"], element.type, nested, f"{path}.element")
        return pa.list_(_with_nested_id(element.with_type(inner), nested, f"{path}.element"))
    if kind == "map":
        key = _physical_type(delta_type["keyType"], arrow_type.key_type, nested, f"{path}.key")
        value = _physical_type(delta_type["valueType"], arrow_type.item_type, nested, f"{path}.value")
        return pa.map_(_with_nested_id(arrow_type.key_field.with_type(key), nested, f"{path}.key"),
                       _with_nested_id(arrow_type.item_field.with_type(value), nested, f"{path}.value"))
    return arrow_type


def _with_nested_id(field: pa.Field, nested: Mapping[str, Any], path: str) -> pa.Field:
    value = nested.get(path)
    return field if value is None else field.with_metadata({FIELD_ID: str(value).encode()})


def logical_stats(stats: str | None, layout: Layout) -> str | None:
    """A file's statistics (keyed by physical names in the log) keyed by logical names, nested fields too:
    what pruning by a logical filter needs."""
    if stats is None or not layout.mapped:
        return stats
    try:
        parsed = json.loads(stats)
    except ValueError:
        return stats
    names = _logical_names(layout)
    for key in ("minValues", "maxValues", "nullCount"):
        if isinstance(parsed.get(key), dict):
            parsed[key] = _rename_tree(parsed[key], names)
    return json.dumps(parsed)


def logical_values(values: Mapping[str, Any], layout: Layout) -> dict[str, Any]:
    """Partition values keyed by physical names, keyed by logical ones."""
    if not layout.mapped:
        return dict(values)
    back = {physical: logical for logical, physical in layout.names.items()}
    return {back.get(k, k): v for k, v in values.items()}


def _logical_names(layout: Layout) -> dict[str, Any]:
    """physical name -> (logical name, the same map for its struct fields)."""
    def of(physical: pa.DataType, logical: pa.DataType) -> dict[str, Any]:
        if not pa.types.is_struct(physical):
            return {}
        return {p.name: (lo.name, of(p.type, lo.type)) for p, lo in zip(physical, logical)}

    return {p.name: (lo.name, of(p.type, lo.type)) for p, lo in zip(layout.physical, layout.logical)}


def _rename_tree(tree: Mapping[str, Any], names: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        logical, inner = names.get(key, (key, {}))
        out[logical] = _rename_tree(value, inner) if isinstance(value, dict) else value
    return out


def relabel(data: pa.Table | pa.RecordBatch, columns: Sequence[str], logical: pa.Schema) -> pa.Table | pa.RecordBatch:
    """``data`` (physical columns, in the order of ``columns``) under the logical names and nested names of
    ``logical``: the same buffers, viewed with the logical types."""
    fields = [logical.field(c) for c in columns]
    arrays = [_view(column, field.type) for column, field in zip(data.columns, fields)]
    schema = pa.schema(fields)
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    return pa.Table.from_arrays(arrays, schema=schema)


def _view(column: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if column.type == target:
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([chunk.view(target) for chunk in column.chunks], type=target)
    return column.view(target)


def assign(schema: Mapping[str, Any], max_id: int) -> tuple[dict[str, Any], int]:
    """``schema`` (a Delta struct) with an id and a physical name for every field lacking them (new columns:
    ids after ``max_id``, names ``col-<uuid>``); and the new maximum id."""
    counter = [max_id]

    def field(f: Mapping[str, Any]) -> dict[str, Any]:
        metadata = dict(f.get("metadata") or {})
        if ID not in metadata:
            counter[0] += 1
            metadata[ID] = counter[0]
        metadata.setdefault(PHYSICAL, f"col-{uuid.uuid4()}")
        return {**f, "type": kind(f["type"]), "metadata": metadata}

    def kind(t: Any) -> Any:
        if not isinstance(t, Mapping):
            return t
        if t.get("type") == "struct":
            return {**t, "fields": [field(f) for f in t["fields"]]}
        if t.get("type") == "array":
            return {**t, "elementType": kind(t["elementType"])}
        if t.get("type") == "map":
            return {**t, "keyType": kind(t["keyType"]), "valueType": kind(t["valueType"])}
        return t

    out = {**schema, "fields": [field(f) for f in schema["fields"]]}
    return out, counter[0]


def keep_names(schema: Mapping[str, Any], max_id: int) -> tuple[dict[str, Any], int]:
    """``schema`` switched to column mapping: every field keeps its current name as its physical name (the
    files already use it) and gets an id."""
    def named(t: Any) -> Any:
        if not isinstance(t, Mapping):
            return t
        if t.get("type") == "struct":
            return {**t, "fields": [{**f, "type": named(f["type"]),
                                     "metadata": {PHYSICAL: f["name"], **(f.get("metadata") or {})}}
                                    for f in t["fields"]]}
        if t.get("type") == "array":
            return {**t, "elementType": named(t["elementType"])}
        if t.get("type") == "map":
            return {**t, "keyType": named(t["keyType"]), "valueType": named(t["valueType"])}
        return t

    return assign(named(schema), max_id)


def max_column_id(configuration: Mapping[str, str | None]) -> int:
    try:
        return int(configuration.get(MAX_ID) or 0)
    except ValueError:
        return 0
