"""Checking variant values before they are written: each must be a metadata and a value in the Variant
binary encoding the Parquet format defines (its "Variant Encoding" specification), which Delta's
protocol asks writers to store.

Variant values reach a writer as their unshredded form, the struct ``{metadata: binary, value: binary}`` they
read as here (Spark's ``VariantVal`` and deltalake hand over the same two byte strings). Nothing here builds
variants; :func:`check_column` checks each value's encoding (headers, sizes, offsets, dictionary ids) and
raises ``InvalidArgumentError`` at the first malformed one, naming its row, so that no reader meets bytes it
cannot decode. Rows copied from the table's own files are not checked again.

Two readings of the encoding, one judge: :func:`suspects` reads a whole column at once (numpy over the
value bytes, each distinct metadata once) and clears the rows it proves well formed; :func:`problem` walks
one value and decides, with its message, every row ``suspects`` did not clear. ``suspects`` never clears a
malformed row (the unit tests hold it to ``problem``'s verdict on damaged values).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import InvalidArgumentError
from table.log.schema_arrow import is_variant

__all__ = ["check_column", "check_rows", "has_variants", "problem", "suspects"]

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
    variant. :func:`suspects` proves most rows valid at once; each row it cannot is judged by
    :func:`problem`, in row order, and the first malformed one fails the write naming its row."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    row = 0
    for chunk in chunks:
        flagged = np.flatnonzero(suspects(chunk))
        if len(flagged):
            metadata, value = pc.struct_field(chunk, "metadata"), pc.struct_field(chunk, "value")
            for i in flagged.tolist():
                found = problem(metadata[i].as_py(), value[i].as_py())
                if found is not None:
                    raise InvalidArgumentError(
                        f"row {row + i} of variant column {column_name!r} (table {table}) is not a value in the "
                        f"Variant binary encoding: {found}; nothing was written. Build variant values with an "
                        f"encoder (Spark's parse_json / VariantVal.parseJson, or read them from a variant column)")
        row += len(chunk)


def suspects(chunk: pa.Array) -> np.ndarray:
    """Per row of ``chunk`` (struct of ``metadata`` and ``value`` binaries): False where the row is null or
    provably a valid variant, True where :func:`problem` must judge it. Never False for a malformed row.

    Each distinct metadata is read once (:func:`_metadata`); the values are walked level by level over the
    whole chunk at once (:func:`_values_end`), with numpy over the value bytes."""
    n = len(chunk)
    present = _mask(chunk.is_valid(), n)
    metadata, value = pc.struct_field(chunk, "metadata"), pc.struct_field(chunk, "value")
    out = present & ~(_mask(metadata.is_valid(), n) & _mask(value.is_valid(), n))
    rows = np.flatnonzero(present & ~out)
    if not len(rows):
        return out
    strings = _strings(metadata)[rows]
    data, starts, ends = _binary(value)
    known = strings >= 0
    ok = np.zeros(len(rows), dtype=bool)
    ok[known] = _values_end(data, starts[rows[known]], ends[rows[known]], strings[known])
    out[rows[~ok]] = True
    return out


def _mask(valid: pa.Array, n: int) -> np.ndarray:
    return np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool) if n else np.zeros(0, dtype=bool)


def _strings(metadata: pa.Array) -> np.ndarray:
    """Per row: how many strings its metadata's dictionary holds, -1 where it is null or malformed."""
    encoded = pc.dictionary_encode(metadata)
    counts = np.full(len(encoded.dictionary) + 1, -1, dtype=np.int64)
    for k, distinct in enumerate(encoded.dictionary.to_pylist()):
        try:
            counts[k] = _metadata(distinct)
        except _Malformed:
            pass
    return counts[encoded.indices.fill_null(len(encoded.dictionary)).to_numpy(zero_copy_only=False)]


def _binary(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bytes of a binary array and each row's start and end in them (no copy of the bytes)."""
    wide = pa.types.is_large_binary(array.type)
    validity, offsets, data = array.buffers()[:3]
    positions = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)[array.offset:array.offset + len(array) + 1]
    positions = positions.astype(np.int64)
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    return raw, positions[:-1], positions[1:]


_SIZES = np.full(64, -1, dtype=np.int64)
for _id, _size in _PRIMITIVE_SIZES.items():
    _SIZES[_id] = _size


def _read(data: np.ndarray, at: np.ndarray, size: np.ndarray | int) -> np.ndarray:
    """Little-endian unsigned integers of ``size`` (1 to 4) bytes at ``at`` (all in bounds)."""
    out = np.zeros(len(at), dtype=np.int64)
    size = np.broadcast_to(np.asarray(size, dtype=np.int64), at.shape)
    for k in range(4):
        use = size > k
        if not use.any():
            break
        out[use] |= data[at[use] + k].astype(np.int64) << (8 * k)
    return out


def _values_end(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, strings: np.ndarray) -> np.ndarray:
    """Per value (bytes ``data[starts[i]:ends[i]]``, its metadata holding ``strings[i]`` strings): whether it is
    a well-formed value that fills its bytes, as :func:`_value` and :func:`problem` decide.

    Every element of every value waiting at one depth is read at once: ``owner`` (the value it belongs
    to), ``at`` (where it starts) and ``bound`` (where its container's data ends; the value's end for the
    value itself, which it must reach exactly). A value fails as soon as one of its elements does."""
    good = np.ones(len(starts), dtype=bool)
    owner = np.arange(len(starts))
    at, bound, exact = starts.copy(), ends.copy(), np.ones(len(starts), dtype=bool)
    depth = 0
    while len(owner):
        if depth > _MAX_DEPTH:
            good[owner] = False
            break
        limit = ends[owner]
        fits = at + 1 <= limit
        header = np.zeros(len(at), dtype=np.int64)
        header[fits] = data[at[fits]]
        basic, rest = header & 0x03, header >> 2
        end = np.full(len(at), -1, dtype=np.int64)
        # primitives: fixed sizes, or a 4-byte length (15 binary, 16 string)
        primitive = fits & (basic == 0)
        long = primitive & ((rest == 15) | (rest == 16))
        long_fits = long & (at + 5 <= limit)
        end[long_fits] = at[long_fits] + 5 + _read(data, at[long_fits] + 1, 4)
        fixed = primitive & ~long
        size = _SIZES[rest[fixed]]
        end[fixed] = np.where(size >= 0, at[fixed] + 1 + size, -1)
        short = fits & (basic == 1)
        end[short] = at[short] + 1 + rest[short]
        # objects (2) and arrays (3): their ids and offsets, then their elements one depth down
        container = fits & (basic >= 2)
        obj = basic == 2
        offset_size = (rest & 0x03) + 1
        id_size = np.where(obj, ((rest >> 2) & 0x03) + 1, 0)
        large = np.where(obj, rest >> 4, rest >> 2) & 0x01
        count_size = np.where(large == 1, 4, 1)
        counted = container & (at + 1 + count_size <= limit)
        count = np.zeros(len(at), dtype=np.int64)
        count[counted] = _read(data, at[counted] + 1, count_size[counted])
        ids_at = at + 1 + count_size
        offsets_at = ids_at + id_size * count
        data_at = offsets_at + offset_size * (count + 1)
        listed = counted & (data_at <= limit)
        last = np.zeros(len(at), dtype=np.int64)
        last[listed] = _read(data, offsets_at[listed] + offset_size[listed] * count[listed], offset_size[listed])
        end[listed] = data_at[listed] + last[listed]
        # an element ends where it must: exactly at the value's end, or within its container's data
        end_ok = (end >= 0) & (end <= limit) & np.where(exact, end == bound, end <= bound)
        good[owner[~end_ok]] = False
        # the next depth: each element of the containers whose value is still good
        parent = np.flatnonzero(listed & end_ok & good[owner] & (count > 0))
        counts = count[parent]
        which = np.repeat(parent, counts)
        k = np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)
        ids = _read(data, ids_at[which] + id_size[which] * k, id_size[which])
        bad_id = obj[which] & (ids >= strings[owner[which]])
        good[owner[which[bad_id]]] = False
        element_at = data_at[which] + _read(data, offsets_at[which] + offset_size[which] * k, offset_size[which])
        keep = good[owner[which]]
        owner, at, bound = owner[which[keep]], element_at[keep], end[which[keep]]
        exact = np.zeros(len(owner), dtype=bool)
        depth += 1
    return good


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
