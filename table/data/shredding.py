"""Reassembling shredded variant columns into their unshredded form.

A table with the ``variantShredding`` feature may store a variant column as the group ``{metadata, value,
typed_value}`` that the Parquet format's "Variant Shredding" specification defines: a value of the type
``typed_value`` has is stored there (a primitive in the matching Parquet type, an array as a list whose
elements are again ``{value, typed_value}``, an object as a group with one ``{value, typed_value}`` per
shredded field), anything else in ``value`` in the Variant binary encoding; an object whose fields are not
all shredded keeps the other fields in ``value`` (a partially shredded object). Readers must reassemble.

:func:`unshred` turns such a column into the ``{metadata, value}`` struct unshredded files read as
(:data:`table.log.schema_arrow.VARIANT_ARROW_TYPE`): primitives are encoded from their typed column,
arrays and objects built from their elements and fields (object fields listed in the order of their names,
as the encoding asks), and every field name looked up in the row's own metadata, which the specification
requires to hold all of them. A missing top-level value of a present row, or a missing array element,
reads as a Variant null; a field stored both shredded and in a partially shredded object's ``value`` reads
as its shredded column (what apache/parquet-testing's cases expect of such invalid files).
"""

from __future__ import annotations

import decimal
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from logstore.errors import InvalidArgumentError
from table.data.variant import _Malformed, _value, has_variants
from table.log.schema_arrow import VARIANT_ARROW_TYPE, is_variant

__all__ = ["ReassemblingFiles", "is_shredded", "needs_reassembly", "reading_files", "reassembled", "reassembled_file",
           "unshred"]

_NULL = b"\x00"
_EXACT = decimal.Context(prec=100)  # a decimal's unscaled value, never rounded to the default 28 digits


def is_shredded(arrow_type: pa.DataType) -> bool:
    """Whether ``arrow_type`` is a shredded variant group: a struct of a binary ``metadata``, a ``typed_value``
    and optionally a binary ``value``."""
    if not pa.types.is_struct(arrow_type):
        return False
    names = {arrow_type.field(i).name for i in range(arrow_type.num_fields)}
    return "metadata" in names and "typed_value" in names and names <= {"metadata", "value", "typed_value"}


def unshred(column: pa.Array | pa.ChunkedArray, *, column_name: str = "variant") -> pa.Array:
    """The ``{metadata, value}`` variant struct of a shredded variant ``column`` (a struct that
    :func:`is_shredded`); null rows stay null. Raises InvalidArgumentError for data that breaks the
    specification (a field name missing from the metadata, a primitive in both value and typed_value, a
    typed_value of a type the specification does not shred to...)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    metadata = pc.struct_field(column, "metadata").to_pylist()
    value = _field(column, "value")
    typed = _field(column, "typed_value")
    dictionaries = _Dictionaries(metadata)
    try:
        encoded = _assemble(value, typed, list(range(len(column))), dictionaries)
    except _Malformed as exc:
        raise InvalidArgumentError(f"shredded variant column {column_name!r} does not follow the Parquet Variant "
                                   f"shredding specification: {exc}; rewrite the file with the engine that wrote "
                                   f"it") from None
    valid = column.is_valid().to_pylist()
    values = [(v if v is not None else _NULL) if ok else None for v, ok in zip(encoded, valid)]
    metas = [m if ok else None for m, ok in zip(metadata, valid)]
    mask = pa.array([not ok for ok in valid], pa.bool_())
    return pa.StructArray.from_arrays([pa.array(metas, pa.binary()), pa.array(values, pa.binary())],
                                      fields=list(VARIANT_ARROW_TYPE), mask=mask)


def _field(array: pa.Array, name: str) -> pa.Array | None:
    t = array.type
    if t.get_field_index(name) < 0:
        return None
    # flatten() carries the parent's nulls into the child: a null group has a null value and typed_value
    if isinstance(array, pa.StructArray):
        return array.flatten()[t.get_field_index(name)]
    return pc.struct_field(array, name)


class _Dictionaries:
    """Each row's metadata dictionary (field name -> id), parsed when first needed."""

    def __init__(self, metadata: list[bytes | None]):
        self.metadata = metadata
        self.parsed: dict[int, tuple[dict[str, int], list[str]]] = {}

    def of(self, row: int) -> tuple[dict[str, int], list[str]]:
        found = self.parsed.get(row)
        if found is None:
            names = _names(self.metadata[row])
            found = self.parsed[row] = ({n: k for k, n in enumerate(names)}, names)
        return found


def _names(metadata: bytes | None) -> list[str]:
    if metadata is None or len(metadata) < 2:
        raise _Malformed("a row's metadata is null or empty")
    header = metadata[0]
    if header & 0x0F != 1:
        raise _Malformed(f"a row's metadata has version {header & 0x0F}, not 1")
    size = ((header >> 6) & 0x03) + 1
    read = lambda at: int.from_bytes(metadata[at:at + size], "little")  # noqa: E731
    count = read(1)
    offsets = [read(1 + size * (k + 1)) for k in range(count + 1)]
    start = 1 + size * (count + 2)
    if start + offsets[-1] > len(metadata):
        raise _Malformed("a row's metadata dictionary runs past its end")
    try:
        return [metadata[start + a:start + b].decode("utf-8") for a, b in zip(offsets, offsets[1:])]
    except UnicodeDecodeError:
        raise _Malformed("a row's metadata holds a field name that is not UTF-8") from None


def _assemble(value: pa.Array | None, typed: pa.Array | None, rows: list[int],
              dictionaries: _Dictionaries) -> list[bytes | None]:
    """The encoded value of each position of a ``{value, typed_value}`` pair (None: missing); ``rows``
    gives the top-level row of each position, whose metadata its field names come from."""
    values = value.to_pylist() if value is not None else [None] * len(rows)
    if typed is None:
        return values
    t = typed.type
    if pa.types.is_struct(t):
        return _objects(values, typed, rows, dictionaries)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _arrays(values, typed, rows, dictionaries)
    encoded = _primitives(typed)
    out = []
    for v, e in zip(values, encoded):
        if e is not None and v is not None:
            raise _Malformed("a value is stored both in value and in a non-object typed_value")
        out.append(e if e is not None else v)
    return out


def _objects(values: list[bytes | None], typed: pa.StructArray, rows: list[int],
             dictionaries: _Dictionaries) -> list[bytes | None]:
    t = typed.type
    valid = typed.is_valid().to_pylist()
    children = typed.flatten()
    fields = []
    for i in range(t.num_fields):
        group = children[i]
        if not pa.types.is_struct(group.type):
            raise _Malformed(f"shredded object field {t.field(i).name!r} is not a group of value and typed_value")
        fields.append((t.field(i).name, _assemble(_field(group, "value"), _field(group, "typed_value"), rows,
                                                    dictionaries)))
    shredded = {name for name, _ in fields}
    out: list[bytes | None] = []
    for p, row in enumerate(rows):
        if not valid[p]:
            out.append(values[p])
            continue
        ids, names = dictionaries.of(row)
        members: dict[str, bytes] = {}
        if values[p] is not None:
            # a shredded field is never in value; a file that has it there anyway reads the shredded column
            members.update((k, v) for k, v in _object_members(values[p], names).items() if k not in shredded)
        for name, encoded in fields:
            if encoded[p] is not None:
                members[name] = encoded[p]
        for name in members:
            if name not in ids:
                raise _Malformed(f"field name {name!r} is not in the row's metadata")
        out.append(_object(members, ids))
    return out


def _arrays(values: list[bytes | None], typed: pa.Array, rows: list[int],
            dictionaries: _Dictionaries) -> list[bytes | None]:
    valid = typed.is_valid().to_pylist()
    offsets = typed.offsets.to_pylist() if not pa.types.is_fixed_size_list(typed.type) else None
    if offsets is None:
        n = typed.type.list_size
        offsets = [k * n for k in range(len(typed) + 1)]
    elements = typed.values
    element_rows = [0] * len(elements)
    for p, row in enumerate(rows):
        for k in range(offsets[p], offsets[p + 1]):
            element_rows[k] = row
    if not pa.types.is_struct(elements.type):
        raise _Malformed("a shredded array's element is not a group of value and typed_value")
    encoded = _assemble(_field(elements, "value"), _field(elements, "typed_value"), element_rows, dictionaries)
    out: list[bytes | None] = []
    for p in range(len(rows)):
        if not valid[p]:
            out.append(values[p])
            continue
        if values[p] is not None:
            raise _Malformed("an array is stored both in value and in typed_value")
        # an element can not be missing; one stored as missing anyway reads as a Variant null
        items = [_NULL if item is None else item for item in encoded[offsets[p]:offsets[p + 1]]]
        out.append(_container(items, None))
    return out


def _object_members(encoded: bytes, names: list[str]) -> dict[str, bytes]:
    """The fields of the object ``encoded`` (a partially shredded object's ``value``), by name."""
    header = encoded[0]
    if header & 0x03 != 2:
        raise _Malformed("the value of a partially shredded object is not an object")
    rest = header >> 2
    offset_size, id_size, large = (rest & 0x03) + 1, ((rest >> 2) & 0x03) + 1, bool(rest >> 4 & 0x01)
    count_size = 4 if large else 1
    count = int.from_bytes(encoded[1:1 + count_size], "little")
    ids_at = 1 + count_size
    offsets_at = ids_at + id_size * count
    data_at = offsets_at + offset_size * (count + 1)
    members = {}
    for k in range(count):
        field_id = int.from_bytes(encoded[ids_at + id_size * k:ids_at + id_size * (k + 1)], "little")
        start = data_at + int.from_bytes(encoded[offsets_at + offset_size * k:offsets_at + offset_size * (k + 1)],
                                         "little")
        if field_id >= len(names):
            raise _Malformed("an object names a field id the metadata does not have")
        members[names[field_id]] = encoded[start:_value(encoded, start, len(names), 0)]
    return members


def _size(n: int) -> int:
    return 1 if n < 1 << 8 else 2 if n < 1 << 16 else 3 if n < 1 << 24 else 4


def _object(members: dict[str, bytes], ids: dict[str, int]) -> bytes:
    ordered = sorted(members, key=lambda name: name.encode("utf-8"))
    return _container([members[n] for n in ordered], [ids[n] for n in ordered])


def _container(items: list[bytes], field_ids: list[int] | None) -> bytes:
    """An object (``field_ids`` given, in the order of the field names) or an array of encoded ``items``."""
    count = len(items)
    total = sum(len(i) for i in items)
    offset_size = _size(total)
    large = count > 0xFF
    if field_ids is not None:
        id_size = _size(max(field_ids, default=0))
        header = ((int(large) << 4) | ((id_size - 1) << 2) | (offset_size - 1)) << 2 | 2
    else:
        header = ((int(large) << 2) | (offset_size - 1)) << 2 | 3
    out = bytearray([header])
    out += count.to_bytes(4 if large else 1, "little")
    for field_id in field_ids or ():
        out += field_id.to_bytes(id_size, "little")
    at = 0
    for item in items:
        out += at.to_bytes(offset_size, "little")
        at += len(item)
    out += at.to_bytes(offset_size, "little")
    for item in items:
        out += item
    return bytes(out)


def _primitive(type_id: int, payload: bytes = b"") -> bytes:
    return bytes([type_id << 2]) + payload


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) < 64:
        return bytes([len(data) << 2 | 1]) + data
    return _primitive(16, len(data).to_bytes(4, "little") + data)


def _primitives(typed: pa.Array) -> list[bytes | None]:
    """The Variant encoding of each value of a primitive ``typed_value`` column (None where it is null)."""
    t = typed.type
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == "arrow.uuid":
            return [None if b is None else _primitive(20, b) for b in typed.storage.to_pylist()]
        typed, t = typed.storage, t.storage_type
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        unit_ids = {("us", True): 12, ("us", False): 13, ("ns", True): 18, ("ns", False): 19}
        if pa.types.is_time64(t):
            if t.unit != "us":
                raise _Malformed(f"typed_value of type {t} is not a Variant type")
            type_id = 17
        else:
            type_id = unit_ids.get((t.unit, t.tz is not None))
            if type_id is None:
                raise _Malformed(f"typed_value of type {t} is not a Variant type (timestamps are micro- or "
                                 f"nanoseconds)")
        return [None if v is None else _primitive(type_id, struct.pack("<q", v))
                for v in typed.cast(pa.int64()).to_pylist()]
    if pa.types.is_date32(t):
        return [None if v is None else _primitive(11, struct.pack("<i", v)) for v in typed.cast(pa.int32()).to_pylist()]
    if pa.types.is_decimal(t):
        type_id, width = (8, 4) if t.precision <= 9 else (9, 8) if t.precision <= 18 else (10, 16)
        return [None if v is None else _primitive(type_id, bytes([t.scale]) + int(v.scaleb(t.scale, _EXACT)).to_bytes(
            width, "little", signed=True)) for v in typed.to_pylist()]
    encoders = {
        pa.bool_(): lambda v: _primitive(1 if v else 2),
        pa.int8(): lambda v: _primitive(3, struct.pack("<b", v)),
        pa.int16(): lambda v: _primitive(4, struct.pack("<h", v)),
        pa.int32(): lambda v: _primitive(5, struct.pack("<i", v)),
        pa.int64(): lambda v: _primitive(6, struct.pack("<q", v)),
        pa.float32(): lambda v: _primitive(14, struct.pack("<f", v)),
        pa.float64(): lambda v: _primitive(7, struct.pack("<d", v)),
        pa.string(): _string, pa.large_string(): _string,
        pa.binary(): lambda v: _primitive(15, len(v).to_bytes(4, "little") + v),
        pa.large_binary(): lambda v: _primitive(15, len(v).to_bytes(4, "little") + v),
        pa.binary(16): lambda v: _primitive(20, v),
    }
    encode = encoders.get(t)
    if encode is None:
        raise _Malformed(f"typed_value of type {t} is not a type the specification shreds to")
    return [None if v is None else encode(v) for v in typed.to_pylist()]



# ----------------------------------------------------------------------------- files
def needs_reassembly(file_schema: pa.Schema, schema: pa.Schema) -> bool:
    """Whether a file of ``file_schema`` stores a variant column of the table ``schema`` (nested ones
    included) shredded."""
    return any(_shredded_within(file_schema.field(f.name).type, f.type) for f in schema
               if file_schema.get_field_index(f.name) >= 0)


def _shredded_within(found: pa.DataType, wanted: pa.DataType) -> bool:
    if is_variant(wanted):
        return is_shredded(found)
    if pa.types.is_struct(wanted) and pa.types.is_struct(found):
        return any(_shredded_within(found.field(found.get_field_index(wanted.field(i).name)).type, wanted.field(i).type)
                   for i in range(wanted.num_fields) if found.get_field_index(wanted.field(i).name) >= 0)
    if pa.types.is_map(wanted) and pa.types.is_map(found):
        return _shredded_within(found.item_type, wanted.item_type)
    if _is_list(wanted) and _is_list(found):
        return _shredded_within(found.value_type, wanted.value_type)
    return False


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def reassembled(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (a file's rows as stored) with every variant column of the table ``schema`` that it
    stores shredded reassembled, nested ones included; other columns as they are."""
    for i, name in enumerate(table.column_names):
        if schema.get_field_index(name) < 0:
            continue
        wanted = schema.field(name).type
        if _shredded_within(table.schema.field(i).type, wanted):
            column = table.column(i)
            chunks = [_conformed(chunk, wanted, name) for chunk in column.chunks]
            field = pa.field(name, chunks[0].type if chunks else wanted, table.schema.field(i).nullable)
            table = table.set_column(i, field, pa.chunked_array(chunks, field.type))
    return table


def _conformed(array: pa.Array, wanted: pa.DataType, name: str) -> pa.Array:
    found = array.type
    if not _shredded_within(found, wanted):
        return array
    if is_variant(wanted):
        return unshred(array, column_name=name)
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(wanted):
        children, fields = [], []
        for i in range(found.num_fields):
            child, field = array.field(i), found.field(i)
            index = wanted.get_field_index(field.name)
            if index >= 0:
                child = _conformed(child, wanted.field(index).type, f"{name}.{field.name}")
                field = pa.field(field.name, child.type, field.nullable)
            children.append(child)
            fields.append(field)
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    # the offsets index the whole child array (``values``, not ``flatten()``, which drops what null rows hold)
    if pa.types.is_map(wanted):
        entries = array.values
        items = _conformed(entries.field(1), wanted.item_type, f"{name}.value")
        return pa.MapArray.from_arrays(array.offsets, entries.field(0), items, mask=mask)
    values = _conformed(array.values, wanted.value_type, f"{name}.element")
    list_class = pa.LargeListArray if pa.types.is_large_list(found) else pa.ListArray
    return list_class.from_arrays(array.offsets, values, mask=mask)


def reassembled_file(source, schema: pa.Schema) -> pa.Buffer | None:
    """The bytes of an unshredded Parquet file with the rows of the Parquet file ``source`` (a buffer or a
    readable file), if it stores a variant column of ``schema`` shredded; None if it stores none."""
    parquet = pq.ParquetFile(source)
    if not needs_reassembly(parquet.schema_arrow, schema):
        return None
    rows = reassembled(parquet.read(), schema)
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    return sink.getvalue()


class ReassemblingFiles(pafs.FileSystemHandler):
    """A file system that reads through ``base``, handing each Parquet file that stores a variant column of
    ``schema`` shredded over as an unshredded one (read whole and rewritten in memory when it is opened,
    one file at a time); every other file, and every other call, goes to ``base`` as it is."""

    def __init__(self, base: pafs.FileSystem, schema: pa.Schema):
        self.base, self.schema = base, schema

    def get_type_name(self) -> str:
        return f"variant-reassembling+{self.base.type_name}"

    def equals(self, other) -> bool:
        return isinstance(other, ReassemblingFiles) and other.base.equals(self.base) and other.schema == self.schema

    def normalize_path(self, path: str) -> str:
        return self.base.normalize_path(path)

    def get_file_info(self, paths):
        return self.base.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.base.get_file_info(selector)

    def open_input_file(self, path: str):
        raw = self.base.open_input_file(path)
        rewritten = reassembled_file(raw, self.schema)
        if rewritten is None:
            raw.seek(0)
            return raw
        raw.close()
        return pa.BufferReader(rewritten)

    def open_input_stream(self, path: str):
        return self.open_input_file(path)

    def _read_only(self, *_args, **_kwargs):
        raise OSError("a file system for reading a table's data files is read-only")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = delete_file = _read_only
    move = copy_file = open_output_stream = open_append_stream = _read_only


def reading_files(base: pafs.FileSystem, schema: pa.Schema) -> pafs.FileSystem:
    """``base``, or, when ``schema`` has variant columns, ``base`` seen through :class:`ReassemblingFiles`."""
    if not has_variants(schema):
        return base
    return pafs.PyFileSystem(ReassemblingFiles(base, schema))
