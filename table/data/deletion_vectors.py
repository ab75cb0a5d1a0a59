"""Deletion vectors (PROTOCOL.md, "Deletion Vectors" and "Deletion Vector Format"): the rows of a data file
that are logically deleted, read and written.

A ``deletionVector`` descriptor on an ``add`` says where the set of deleted row indexes (0-based positions
in the Parquet file) is kept:

- ``u``: in a file under the table root, ``[<random prefix>/]deletion_vector_<uuid>.bin``, the UUID being
  the last 20 characters of ``pathOrInlineDv`` in Z85 and the prefix the characters before them;
- ``p``: in a file at an absolute path (``pathOrInlineDv``);
- ``i``: inline, ``pathOrInlineDv`` being the Z85 of the serialized bitmap.

A file holds one or more vectors: a version byte (1), then per vector its size (4 bytes, big-endian), the
serialized bitmap, and its CRC-32 (4 bytes, big-endian); the descriptor's ``offset`` points at a vector's
size. The serialized bitmap is a magic number (1681511377, 4 bytes, little-endian) followed by a 64-bit
Roaring bitmap in the standard portable format, which pyroaring's ``BitMap64`` reads and writes.

Everything is checked: the magic number, the size against ``sizeInBytes``, the checksum, the number of rows
against ``cardinality``; a vector that fails any is :class:`~table.errors.CorruptDataError`, never a
guess (a wrong vector means wrong rows).
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Callable, Sequence
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
from pyroaring import BitMap, BitMap64

from table.errors import CorruptDataError
from table.log.actions import DeletionVectorDescriptor

__all__ = ["MAGIC", "decode_z85", "deleted_rows", "dv_file_name", "encode_z85", "serialize", "stored_at",
           "surviving", "vector_file", "write_file"]

MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
_VERSION = 1
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = {c: i for i, c in enumerate(_Z85)}


def encode_z85(data: bytes) -> str:
    """Z85 (ZeroMQ's Base85, https://rfc.zeromq.org/spec/32/) of ``data``; its length must be a multiple of 4."""
    if len(data) % 4:
        raise ValueError(f"Z85 encodes multiples of 4 bytes, got {len(data)}")
    out = []
    for (word,) in struct.iter_unpack(">I", data):
        chunk = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            chunk.append(_Z85[digit])
        out.extend(reversed(chunk))
    return "".join(out)


def decode_z85(text: str) -> bytes:
    """The bytes of a Z85 string (its length a multiple of 5).

    A last group that starts with ``#`` is the padded tail of the Rust ``z85`` crate, which delta-rs and
    delta-kernel-rs write inline vectors with: no Z85 group may start with ``#`` (84 * 85^4 > 2^32 - 1), so
    ``k`` leading ``#`` mean the group holds ``4 - k`` bytes, big-endian, in its other ``5 - k`` characters.
    Delta's own encoder pads the bytes with zeros instead, which decodes as any group."""
    if len(text) % 5:
        raise ValueError(f"Z85 text comes in groups of 5 characters, got {len(text)}")
    out = bytearray()
    for start in range(0, len(text), 5):
        group = text[start:start + 5]
        missing = len(group) - len(group.lstrip("#")) if start + 5 == len(text) else 0
        if missing > 3:
            raise ValueError(f"Z85 group {group!r} holds no byte")
        word = 0
        for char in group[missing:]:
            if char not in _Z85_VALUES:
                raise ValueError(f"{char!r} is not a Z85 character")
            word = word * 85 + _Z85_VALUES[char]
        if word >= 1 << (8 * (4 - missing)):
            raise ValueError(f"Z85 group {group!r} is out of range")
        out += word.to_bytes(4 - missing, "big")
    return bytes(out)


def dv_file_name(identifier: uuid.UUID) -> str:
    return f"deletion_vector_{identifier}.bin"


def vector_file(descriptor: DeletionVectorDescriptor) -> str | None:
    """Where a vector's file is: a path relative to the table root (``u``), an absolute URI (``p``), or
    None (inline)."""
    if descriptor.storage_type == "u":
        return _relative_file(descriptor)
    if descriptor.storage_type == "p":
        return descriptor.path_or_inline_dv
    return None


def _relative_file(descriptor: DeletionVectorDescriptor) -> str:
    """The path, relative to the table root, of a ``u`` vector's file."""
    text = descriptor.path_or_inline_dv
    if len(text) < 20:
        raise ValueError(f"pathOrInlineDv {text!r} is shorter than the 20 characters of a Z85 UUID")
    prefix, encoded = text[:-20], text[-20:]
    name = dv_file_name(uuid.UUID(bytes=decode_z85(encoded)))
    return f"{prefix}/{name}" if prefix else name


def stored_at(descriptor: DeletionVectorDescriptor) -> tuple[str, int, int] | None:
    """Where a stored vector's bytes are, as :func:`deleted_rows` reads them: ``(path, offset, length)``, the
    path relative to the table root (URI-decoded) or an absolute URI, the bytes its size, bitmap and
    checksum; None for an inline vector. Readers fetching many vectors of one file read its span once."""
    if descriptor.storage_type not in ("u", "p"):
        return None
    path = _relative_file(descriptor) if descriptor.storage_type == "u" else unquote(descriptor.path_or_inline_dv)
    return path, descriptor.offset or 0, 4 + descriptor.size_in_bytes + 4


def deleted_rows(descriptor: DeletionVectorDescriptor, read: Callable[[str, int, int], bytes], *,
                 where: str) -> BitMap64:
    """The row indexes ``descriptor`` deletes. ``read(path, offset, length)`` reads bytes of a file: ``path``
    relative to the table root (URI-decoded) or an absolute URI. ``where`` names the data file in errors."""
    try:
        if descriptor.storage_type == "i":
            data = decode_z85(descriptor.path_or_inline_dv)[:descriptor.size_in_bytes]
        elif descriptor.storage_type in ("u", "p"):
            path, offset, length = stored_at(descriptor)  # type: ignore[misc]
            framed = read(path, offset, length)
            (size,) = struct.unpack(">i", framed[:4])
            if size != descriptor.size_in_bytes:
                raise ValueError(f"the vector's size is {size} bytes, its descriptor says {descriptor.size_in_bytes}")
            data = framed[4:4 + size]
            (checksum,) = struct.unpack(">I", framed[4 + size:8 + size])
            if zlib.crc32(data) != checksum:
                raise ValueError("its checksum does not match its bytes")
        else:
            raise ValueError(f"storage type {descriptor.storage_type!r} is none of u, i, p")
        rows = _deserialize(data)
    except (ValueError, struct.error, OSError) as exc:
        raise CorruptDataError(f"the deletion vector of data file {where} ({descriptor.unique_id}) cannot be read: "
                               f"{exc}; restore the deletion vector file, or the table cannot be read") from exc
    if len(rows) != descriptor.cardinality:
        raise CorruptDataError(f"the deletion vector of data file {where} deletes {len(rows)} rows, its descriptor "
                               f"says {descriptor.cardinality}; restore the deletion vector file")
    return rows


def _deserialize(data: bytes) -> BitMap64:
    """A ``RoaringBitmapArray``: the portable format (magic 1681511377, little-endian), or the native one
    of early Delta writers (magic 1681511376, big-endian, then the number of 32-bit bitmaps and each one's
    size, big-endian: bitmap ``i`` holds the rows whose high 32 bits are ``i``); PROTOCOL.md's inline
    example is in the native format."""
    if len(data) < 4:
        raise ValueError("it is too short to hold the magic number")
    if struct.unpack("<I", data[:4])[0] == MAGIC:
        return BitMap64.deserialize(data[4:])
    if struct.unpack(">I", data[:4])[0] != NATIVE_MAGIC:
        raise ValueError(f"magic number {struct.unpack('<I', data[:4])[0]}, expected {MAGIC} (or {NATIVE_MAGIC})")
    (count,) = struct.unpack(">i", data[4:8])
    rows, at = BitMap64(), 8
    for high in range(count):
        (size,) = struct.unpack(">i", data[at:at + 4])
        low = BitMap.deserialize(data[at + 4:at + 4 + size])
        rows.update(np.fromiter(low, dtype=np.uint64, count=len(low)) + np.uint64(high << 32))
        at += 4 + size
    return rows


def serialize(rows: BitMap64) -> bytes:
    """A bitmap in Delta's ``RoaringBitmapArray`` format: the magic number, then the portable 64-bit bitmap."""
    return struct.pack("<I", MAGIC) + rows.serialize()


def write_file(vectors: Sequence[BitMap64]) -> tuple[bytes, list[tuple[int, int]]]:
    """A deletion vector file holding ``vectors``, and each one's ``(offset, sizeInBytes)``."""
    body = bytearray([_VERSION])
    places = []
    for rows in vectors:
        data = serialize(rows)
        places.append((len(body), len(data)))
        body += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    return bytes(body), places


def surviving(rows: BitMap64, count: int) -> pa.Array:
    """A boolean mask over ``count`` rows: true for the rows ``rows`` does not delete."""
    mask = np.ones(count, dtype=bool)
    if len(rows):
        deleted = np.fromiter(rows, dtype=np.int64, count=len(rows))
        mask[deleted[deleted < count]] = False
    return pa.array(mask)
