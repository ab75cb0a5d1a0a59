"""The Parquet compression codec of written data files, under the names Spark's Parquet writer accepts.

A write's ``compression`` (the Spark option, ``write_dataframe``'s and ``write_table``'s argument) takes
Spark's values, case-insensitively: ``snappy`` (the default, as in Spark and Delta), ``zstd``, ``gzip``,
``lz4``, ``lz4_raw``, ``brotli``, ``none`` / ``uncompressed``. The file name carries the codec as
parquet-mr names it, so a file reads the same in a listing as one Spark wrote:
``part-00000-<job>-c000.zstd.parquet``, ``.snappy.parquet``, ``.gz.parquet``, ``.lz4raw.parquet``,
``.br.parquet``, and plain ``.parquet`` without compression. Readers never look at the name: the codec is
recorded in each column chunk.

``lz4`` differs from Spark's: pyarrow writes only Parquet's ``LZ4_RAW`` codec (Spark's ``lz4`` is the
Hadoop-framed ``LZ4``, which pyarrow cannot write), so ``lz4`` and ``lz4_raw`` both write ``LZ4_RAW``
files named ``.lz4raw.parquet``, as parquet-mr names that codec; Spark 3.4+ reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from logstore.errors import InvalidArgumentError

__all__ = ["CODECS", "DEFAULT", "Codec", "codec", "extensions"]


@dataclass(frozen=True)
class Codec:
    """One codec: the name Spark gives it, pyarrow's name for it, and the file name's extension."""

    name: str
    arrow: str
    extension: str  # ".zstd", or "" for uncompressed files


CODECS: dict[str, Codec] = {
    "snappy": Codec("snappy", "snappy", ".snappy"),
    "zstd": Codec("zstd", "zstd", ".zstd"),
    "gzip": Codec("gzip", "gzip", ".gz"),
    "lz4": Codec("lz4_raw", "lz4", ".lz4raw"),  # pyarrow's lz4 is LZ4_RAW (module docstring)
    "lz4_raw": Codec("lz4_raw", "lz4_raw", ".lz4raw"),
    "brotli": Codec("brotli", "brotli", ".br"),
    "uncompressed": Codec("uncompressed", "none", ""),
}
_ALIASES = {"none": "uncompressed"}
DEFAULT = CODECS["snappy"]

_NOT_WRITABLE = {"lzo": "pyarrow cannot write LZO-compressed Parquet"}


def codec(value: str | Codec | None) -> Codec:
    """The codec named ``value`` (Spark's names, any case; None: snappy). Raises InvalidArgumentError
    naming the value and the accepted names."""
    if value is None:
        return DEFAULT
    if isinstance(value, Codec):
        return value
    if not isinstance(value, str):
        raise InvalidArgumentError(f"compression must be a codec name (str), got {type(value).__name__}")
    name = value.strip().lower()
    name = _ALIASES.get(name, name)
    if name in CODECS:
        return CODECS[name]
    accepted = ", ".join([*CODECS, *_ALIASES])
    reason = f" ({_NOT_WRITABLE[name]})" if name in _NOT_WRITABLE else ""
    raise InvalidArgumentError(f"unknown compression {value!r}{reason}: use one of {accepted}")


def extensions() -> tuple[str, ...]:
    """Every codec's file name extension, without its dot ("" excluded)."""
    return tuple(c.extension[1:] for c in CODECS.values() if c.extension)
