"""Every Parquet writer setting of the data files dynacommit writes, decided in one place.

Appends (``write_table``, Spark tasks, streaming micro-batches), row-level rewrites (DELETE, UPDATE,
MERGE, in process or on Spark), OPTIMIZE and change data files all stage through
:class:`~table.data.staging.StagingWriter`, which takes a :class:`WriterSettings` and opens each file with
:meth:`WriterSettings.parquet_options`. What is decided here, and why (figures: BENCHMARKS.md, "Parquet
file size"; script: ``tests/benchmarks/file_size.py``):

- **Codec**: a write's ``compression`` option, else the table's ``delta.parquet.compression.codec``, else
  snappy (Spark's and Delta's default). zstd at Arrow's default level (1): level 3 costs about 1.5x the
  CPU for files no smaller once the encodings below are chosen.
- **File size**: a write's ``targetFileSize`` option, else the table's ``delta.targetFileSize``, else
  128 MiB.
- **Encodings, per column, from the first rows of each file**: a near-unique column (more distinct values
  than half of its non-null values in the sample) gets no dictionary: a dictionary as large as the data
  only costs CPU until the writer falls back to plain pages, and its first pages stay dictionary-encoded.
  Among those, an integer-backed column (integers, dates, timestamps, times) whose consecutive
  differences span far fewer bits than the type (ids, sequence numbers, event times) gets
  ``DELTA_BINARY_PACKED``; other near-unique columns are written ``PLAIN``. Columns with repeats keep
  dictionary encoding. Nested and boolean columns keep Arrow's defaults. Every reader of Delta tables
  reads these encodings (they are in Parquet's format 2.x and parquet-mr, arrow-rs, DuckDB and polars
  decode them).
- **Statistics**: Parquet column statistics only for the columns whose Delta statistics the table asks
  for (``delta.dataSkippingStatsColumns`` when set, else ``delta.dataSkippingNumIndexedCols``): the footer
  is where the Delta statistics come from, and computing bounds nobody reads costs CPU.
- **Row groups**: one per ``row_group_bytes`` (64 MiB) of Arrow data, at most the file's target size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import InvalidArgumentError
from table.compression import Codec, codec
from table.log import iceberg_compat, properties

__all__ = ["DEFAULT_ROW_GROUP_BYTES", "DEFAULT_TARGET_FILE_SIZE", "SAMPLE_ROWS", "WriterSettings"]

MiB = 1024 * 1024
DEFAULT_TARGET_FILE_SIZE = 128 * MiB
DEFAULT_ROW_GROUP_BYTES = 64 * MiB
SAMPLE_ROWS = 16_384
"""Rows of a file's first write that decide its columns' encodings."""

_NEAR_UNIQUE = 0.5
"""A column whose sample holds more distinct values than this share of its non-null values is near-unique."""

_DELTA_SPARE_BITS = 8
"""``DELTA_BINARY_PACKED`` when the differences between neighbours need this many bits fewer than the type."""


@dataclass(frozen=True)
class WriterSettings:
    """What a writer needs to write a table's data files: plain, frozen, picklable (Spark ships it to tasks)."""

    codec: Codec
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    num_indexed_cols: int = properties.DEFAULT_NUM_INDEXED_COLS
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    stats_columns: tuple[tuple[str, ...], ...] | None = None
    """``delta.dataSkippingStatsColumns`` as logical column paths (None: ``num_indexed_cols`` decides)."""
    materialize_partitions: bool = False
    """Data files hold the partition columns too, after the data columns (IcebergCompatV1/V2 require it:
    :mod:`table.log.iceberg_compat`); otherwise they hold the data columns only, as Delta writes them."""

    def __post_init__(self) -> None:
        if self.target_file_size <= 0 or self.row_group_bytes <= 0:
            raise InvalidArgumentError(f"target_file_size ({self.target_file_size}) and row_group_bytes "
                                       f"({self.row_group_bytes}) must be positive numbers of bytes")

    @classmethod
    def of(cls, configuration: Mapping[str, str | None] | None = None, *, compression: str | Codec | None = None,
           target_file_size: int | None = None, row_group_bytes: int | None = None) -> WriterSettings:
        """The settings of a write to a table with properties ``configuration``: a write's own
        ``compression`` and ``target_file_size`` come first, then the table's properties, then the
        defaults (module docstring)."""
        configuration = configuration or {}
        chosen = codec(compression if compression is not None else properties.parquet_codec(configuration))
        size = target_file_size if target_file_size is not None else properties.target_file_size(configuration)
        return cls(codec=chosen, target_file_size=DEFAULT_TARGET_FILE_SIZE if size is None else size,
                   num_indexed_cols=properties.num_indexed_cols(configuration),
                   stats_columns=properties.stats_columns(configuration),
                   materialize_partitions=bool(iceberg_compat.enabled_versions(configuration)),
                   row_group_bytes=DEFAULT_ROW_GROUP_BYTES if row_group_bytes is None else row_group_bytes)

    def parquet_options(self, file_schema: pa.Schema, sample: pa.Table, stats_columns: Sequence[str]) -> dict:
        """Keyword arguments of ``pyarrow.parquet.ParquetWriter`` for a file of ``file_schema`` whose first
        rows are ``sample``; ``stats_columns``: the Parquet column paths whose statistics are written."""
        dictionary, encodings = column_encodings(sample.slice(0, SAMPLE_ROWS))
        return {"compression": self.codec.arrow, "use_dictionary": dictionary,
                "column_encoding": encodings or None, "write_statistics": list(stats_columns),
                "store_schema": True}


def column_encodings(sample: pa.Table) -> tuple[list[str], dict[str, str]]:
    """``(columns that keep dictionary encoding, {column: encoding} of the others)`` (module docstring)."""
    dictionary: list[str] = []
    encodings: dict[str, str] = {}
    for field, column in zip(sample.schema, sample.columns):
        encoding = _encoding(field.type, column)
        if encoding is None:
            dictionary.append(field.name)
        else:
            encodings[field.name] = encoding
    return dictionary, encodings


def _encoding(t: pa.DataType, column: pa.ChunkedArray) -> str | None:
    """The encoding of one top-level column, or None for dictionary encoding (with Arrow's fallback)."""
    if pa.types.is_nested(t) or pa.types.is_boolean(t) or pa.types.is_dictionary(t):
        return None
    values = len(column) - column.null_count
    if values == 0:
        return None
    # At least one distinct value: below two values the count is known without counting.
    if values * _NEAR_UNIQUE >= 1 and pc.count_distinct(column).as_py() <= values * _NEAR_UNIQUE:
        return None
    width = _integer_width(t)
    if width is not None and values > 1 and _delta_bits(column, t) <= width - _DELTA_SPARE_BITS:
        return "DELTA_BINARY_PACKED"
    return "PLAIN"


def _integer_width(t: pa.DataType) -> int | None:
    """Bits of the Parquet physical integer a column of type ``t`` is stored as (None: not an integer)."""
    if pa.types.is_integer(t):
        return 64 if t.bit_width == 64 else 32
    if pa.types.is_date32(t) or (pa.types.is_time(t) and t.bit_width == 32):
        return 32
    if pa.types.is_timestamp(t) or pa.types.is_date64(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        return 64
    return None


def _delta_bits(column: pa.ChunkedArray, t: pa.DataType) -> int:
    """Bits the spread of the differences between neighbouring non-null values needs (wrapped differences
    of extreme values look wide, which only keeps such a column ``PLAIN``)."""
    values = pc.drop_null(column.combine_chunks())
    if not pa.types.is_integer(t):
        values = values.view(pa.int32() if _integer_width(t) == 32 else pa.int64())
    diffs = pc.pairwise_diff(values.cast(pa.int64(), safe=False)).slice(1)
    bounds = pc.min_max(diffs)
    return (bounds["max"].as_py() - bounds["min"].as_py()).bit_length()
