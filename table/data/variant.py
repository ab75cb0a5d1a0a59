"""Checking variant values before they are written: each must be a metadata and a value in the Variant
binary encoding the Parquet format defines (its "Variant Encoding" specification), which Delta's
protocol asks writers to store.

Variant values reach a writer as their unshredded form, the struct ``{metadata: binary, value: binary}`` they
read as here (Spark's ``VariantVal`` and deltalake hand over the same two byte strings). Nothing here builds
variants; :func:`check_column` walks each value's encoding (headers, sizes, offsets, dictionary ids) and
raises ``InvalidArgumentError`` at the first malformed one, so that no reader meets bytes it cannot decode.
Rows copied from the table's own files are not checked again.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import InvalidArgumentError
from table.log.schema_arrow import is_variant

__all__ = ["check_column", "check_rows", "has_variants", "problem"]

_PRIMITIVE_SIZES = {0: 0, 1: 0, 2: 0, 3: 1, 4: 2, 5: 4, 6: 8, 7: 8, 8: 5, 9: 9, 10: 17, 11: 4, 12: 8, 13: 8, 14: 4,
                    17: 8, 18: 8, 19: 8, 20: 16}
"""Bytes after the header of each fixed-size primitive type id (15 binary and 16 string carry a length)."""

_MAX_DEPTH = 1000


def has_variants(arrow_type: pa.DataType | pa.Schema) -> bool:
    """Whether a schema or type holds a variant column anywhere."""
    if isinstance(arrow_type, pa.Schema):
        return any(has_variants(f.type) for f in arrow_type)
    if is_variant(arrow_type):
        return True
    if pa.types.is_struct(arrow_type):
        return any(has_variants(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    if pa.types.is_map(arrow_type):
        return has_variants(arrow_type.key_type) or has_variants(arrow_type.item_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return has_variants(arrow_type.value_type)
    return False


def check_rows(rows: pa.Table, *, table: str) -> None:
    """Refuse ``rows`` (in the table's types) if a variant anywhere in them, nested ones included, is
    malformed."""
    for name, column in zip(rows.column_names, rows.columns):
        for chunk in column.chunks:
            _check_nested(chunk, name, table)


def _check_nested(array: pa.Array, name: str, table: str) -> None:
    t = array.type
    if not has_variants(t):
        return
    if is_variant(t):
        check_column(array, column_name=name, table=table)
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            _check_nested(pc.struct_field(array, [i]), f"{name}.{t.field(i).name}", table)
    elif pa.types.is_map(t):
        _check_nested(array.keys, f"{name}.key", table)
        _check_nested(array.items, f"{name}.value", table)
    else:
        _check_nested(array.flatten(), f"{name}.element", table)


def check_column(column: pa.Array | pa.ChunkedArray, *, column_name: str, table: str) -> None:
    """Refuse ``column`` (struct of ``metadata`` and ``value`` binaries) if a non-null row is not a valid
    variant."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    row = 0
    for chunk in chunks:
        metadata, value = pc.struct_field(chunk, "metadata"), pc.struct_field(chunk, "value")
        valid = chunk.is_valid()
        for i in range(len(chunk)):
            if valid[i].as_py():
                found = problem(metadata[i].as_py(), value[i].as_py())
                if found is not None:
                    raise InvalidArgumentError(
                        f"row {row + i} of variant column {column_name!r} (table {table}) is not a value in the "
                        f"Variant binary encoding: {found}; nothing was written. Build variant values with an "
                        f"encoder (Spark's parse_json / VariantVal.parseJson, or read them from a variant column)")
        row += len(chunk)


def problem(metadata: bytes | None, value: bytes | None) -> str | None:
    """What is wrong with one variant (None: nothing)."""
    if metadata is None or value is None:
        return "its metadata or value is null"
    try:
        size = _metadata(metadata)
        end = _value(value, 0, size, 0)
    except _Malformed as exc:
        return str(exc)
    if end != len(value):
        return f"its value holds {len(value) - end} byte(s) after the encoded value"
    return None


class _Malformed(Exception):
    pass


def _int(data: bytes, at: int, size: int, what: str) -> int:
    if size < 1 or at + size > len(data):
        raise _Malformed(f"{what} runs past the end")
    return int.from_bytes(data[at:at + size], "little")


def _metadata(metadata: bytes) -> int:
    """Check the metadata (a versioned dictionary of strings); returns its number of strings."""
    header = _int(metadata, 0, 1, "the metadata header")
    if header & 0x0F != 1:
        raise _Malformed(f"its metadata has version {header & 0x0F}, not 1")
    offset_size = ((header >> 6) & 0x03) + 1
    count = _int(metadata, 1, offset_size, "the dictionary size")
    offsets = [_int(metadata, 1 + offset_size * (k + 1), offset_size, "a dictionary offset") for k in range(count + 1)]
    start = 1 + offset_size * (count + 2)
    if offsets[0] != 0 or any(b < a for a, b in zip(offsets, offsets[1:])) or start + offsets[-1] > len(metadata):
        raise _Malformed("its metadata's dictionary offsets are out of order or past the end")
    return count


def _value(value: bytes, at: int, strings: int, depth: int) -> int:
    """Check the value starting at ``at``; returns where it ends."""
    if depth > _MAX_DEPTH:
        raise _Malformed("it nests deeper than 1000 levels")
    header = _int(value, at, 1, "a value header")
    basic, rest = header & 0x03, header >> 2
    if basic == 0:  # primitive
        if rest in (15, 16):
            length = _int(value, at + 1, 4, "a binary or string length")
            end = at + 5 + length
        elif rest in _PRIMITIVE_SIZES:
            end = at + 1 + _PRIMITIVE_SIZES[rest]
        else:
            raise _Malformed(f"primitive type id {rest} is not defined")
        if end > len(value):
            raise _Malformed("a primitive value runs past the end")
        return end
    if basic == 1:  # short string
        end = at + 1 + rest
        if end > len(value):
            raise _Malformed("a short string runs past the end")
        return end
    obj = basic == 2
    offset_size = (rest & 0x03) + 1
    id_size = ((rest >> 2) & 0x03) + 1 if obj else 0
    large = bool(rest >> (4 if obj else 2) & 0x01)
    count = _int(value, at + 1, 4 if large else 1, "an element count")
    ids_at = at + 1 + (4 if large else 1)
    offsets_at = ids_at + id_size * count
    for k in range(count if obj else 0):
        if _int(value, ids_at + id_size * k, id_size, "a field id") >= strings:
            raise _Malformed("an object names a field id that the metadata's dictionary does not have")
    offsets = [_int(value, offsets_at + offset_size * k, offset_size, "an element offset") for k in range(count + 1)]
    data_at = offsets_at + offset_size * (count + 1)
    for k in range(count):
        element_end = _value(value, data_at + offsets[k], strings, depth + 1)
        if element_end > data_at + offsets[-1]:
            raise _Malformed("an element runs past its object or array")
    end = data_at + offsets[-1]
    if end > len(value):
        raise _Malformed("an object or array runs past the end")
    return end
