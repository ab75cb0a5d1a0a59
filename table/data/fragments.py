"""A table's data files as pyarrow fragments, each with a guarantee, and pruning by those guarantees.

A Delta table is not a directory of Parquet files: only the files the log references are read, and
partition values live in the log, typed by the table schema, not in directory names. So each ``add``
becomes one fragment whose ``partition_expression`` is a guarantee true for every row of the file: its
typed partition values (``p == 5``, ``is_null(q)``) and what its stats prove (``x >= 1 and x <= 9``:
``table.data.skipping.stats_guarantee``). pyarrow fills partition columns from it and skips, unopened, a
fragment whose guarantee contradicts a filter. The filter is never taken apart here: what pyarrow cannot
prove only costs pruning.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from logstore import TableUri
from logstore.errors import CorruptLogError
from table.data.files import data_path
from table.data.shredding import reading_files, reassembled_file
from table.data.skipping import Guarantees, stats_guarantee
from table.data.stats import parse_stats
from table.data.variant import has_variants
from table.errors import UnsupportedFeatureError
from table.log.actions import AddFile, DeletionVectorDescriptor
from table.log.actionset import DELETION_VECTOR_STRUCT, plain_value
from table.log.column_mapping import Layout, logical_stats, logical_values
from table.log.schema import TYPE_CHANGES, arrow_type_to_delta, parse_partition_value
from table.log.snapshot import Snapshot

__all__ = ["FileRow", "buffer_fragment", "file_fragments", "file_path", "file_row", "file_rows", "kept_indices",
           "logical_row", "parquet_format", "plain_dataset", "prune_adds", "prune_files"]


class FileRow(NamedTuple):
    """What reading needs of an ``add``: without the rest of the action, so that a snapshot's columns give
    it without building action objects."""

    path: str
    size: int
    partition_values: Mapping[str, str | None]
    stats: str | None
    deletion_vector: DeletionVectorDescriptor | None = None


def file_row(add: AddFile) -> FileRow:
    """What reading needs of ``add``."""
    return FileRow(add.path, add.size, add.partition_values, add.stats, add.deletion_vector)


def file_rows(snapshot: Snapshot) -> list[FileRow]:
    """The snapshot's live files, by path, from its columns."""
    table = snapshot.state.files.to_arrow()
    table = table.take(pc.sort_indices(table["path"]))
    values = [None if v is None else dict(v) for v in table["partitionValues"].to_pylist()]
    vectors = [None] * table.num_rows
    if table["deletionVector"].null_count < table.num_rows:
        vectors = [None if v is None else DeletionVectorDescriptor.model_validate(
            plain_value(v, DELETION_VECTOR_STRUCT)) for v in table["deletionVector"].to_pylist()]
    return [FileRow(*row) for row in zip(table["path"].to_pylist(), table["size"].to_pylist(), values,
                                         table["stats"].to_pylist(), vectors)]


def logical_row(row: FileRow, layout: Layout) -> FileRow:
    """A file of a mapped table with its partition values and statistics under logical names."""
    return row._replace(partition_values=logical_values(row.partition_values, layout),
                        stats=logical_stats(row.stats, layout))


def plain_dataset(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[FileRow],
                  filesystem: pafs.FileSystem, *, with_stats: bool) -> ds.FileSystemDataset:
    fmt = parquet_format()
    paths = [file_path(uri, row.path) for row in rows]
    return ds.FileSystemDataset(file_fragments(schema, partition_columns, rows, paths, fmt, filesystem,
                                               with_stats=with_stats), schema, fmt, filesystem)


def file_fragments(schema: pa.Schema, partition_columns: Sequence[str], files: Sequence[FileRow], paths: list[str],
                   fmt: ds.ParquetFileFormat, fs: pafs.FileSystem, *, with_stats: bool,
                   stats_columns: Sequence[str] = ()) -> list[ds.Fragment]:
    """One fragment per file, its ``partition_expression`` the guarantee of the module docstring (from the
    statistics of ``stats_columns`` only, when given); guarantees are kept for the next call
    (:data:`_GUARANTEES`)."""
    partition_fields = [schema.field(c) for c in partition_columns]
    data_schema = _stats_schema(schema, partition_columns, stats_columns) if with_stats else None
    known = _GUARANTEES.of(partition_fields, data_schema)
    fs = reading_files(fs, schema)  # shredded variant files read as unshredded ones
    fragments = []
    for add, path in zip(files, paths):
        key = (add.stats if data_schema is not None else None,
               tuple(add.partition_values.items()) if add.partition_values else ())
        guarantee = known.get(key)
        if guarantee is None:
            guarantee = known[key] = _guarantee(add, partition_fields, data_schema)
        fragments.append(fmt.make_fragment(path, filesystem=fs, file_size=add.size, partition_expression=guarantee))
    return fragments


def buffer_fragment(fmt: ds.ParquetFileFormat, buffer: pa.Buffer, schema: pa.Schema,
                    partition_expression: pc.Expression) -> ds.Fragment:
    """A fragment over a data file's fetched bytes, for a dataset of ``schema``: a file that stores a
    variant column shredded is rewritten unshredded first (:mod:`table.data.shredding`)."""
    rewritten = None
    if has_variants(schema):
        try:
            rewritten = reassembled_file(pa.BufferReader(buffer), schema)
        except (pa.ArrowInvalid, OSError):
            pass  # not Parquet as it is: the scan of the bytes as they came reports what is wrong
    return fmt.make_fragment(buffer if rewritten is None else rewritten, partition_expression=partition_expression)


_GUARANTEES = Guarantees()
"""The guarantees of the files this process pruned or read (:class:`~table.data.skipping.Guarantees`)."""


def parquet_format() -> ds.ParquetFileFormat:
    """How data files are decoded: INT96 timestamps (older Spark writers) as microseconds, Delta's unit, so
    that values outside the nanosecond range (year 1, 9999) read instead of overflowing."""
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))


def _stats_schema(schema: pa.Schema, partition_columns: Sequence[str], columns: Sequence[str] = ()) -> pa.Schema:
    """The columns whose statistics a file's guarantee may use: the data columns (those of ``columns`` only,
    when given), except those widened by type widening (marked by ``table.log.schema.delta_to_arrow``): files
    written before the change keep statistics of the older type (a float's ``3.4`` is not the double the
    file's value reads as)."""
    partitions = set(partition_columns)
    wanted = set(columns) if columns else None
    return pa.schema([f for f in schema if f.name not in partitions and (wanted is None or f.name in wanted)
                      and TYPE_CHANGES.encode() not in (f.metadata or {})])


def file_path(uri: TableUri, path: str) -> str:
    """The filesystem path (``bucket/key``) of an ``add.path``: relative to the table root and
    URI-encoded, or (shallow clones, some writers) an absolute URI in the same store."""
    if "://" in path:
        scheme, _, rest = path.partition("://")
        if scheme not in ("s3", "s3a", "s3n", uri.scheme):
            raise UnsupportedFeatureError(f"data file {path!r} of table {uri.table_path} is not in S3; dynacommit "
                                          f"reads only S3 tables", feature="data files outside S3")
        return unquote(rest)
    return data_path(uri, uri.key(unquote(path)))


@functools.lru_cache(maxsize=1024)
def _delta_type(field: pa.Field) -> Any:
    """The Delta type of a partition column, worked out once per column rather than once per file."""
    return arrow_type_to_delta(field.type, column=field.name)


def _guarantee(add: FileRow, partition_fields: list[pa.Field], data_schema: pa.Schema | None) -> pc.Expression:
    """``p == value and is_null(q) ...`` and, with ``data_schema``, what the stats prove: true for every
    row of the file, typed as the table says."""
    terms = []
    for field in partition_fields:
        delta_type = _delta_type(field)
        try:
            value: Any = parse_partition_value(add.partition_values.get(field.name), delta_type)
        except (ValueError, TypeError) as exc:
            raise CorruptLogError(f"the add action of {add.path!r} has an unusable value for partition column "
                                  f"{field.name!r}: {exc}") from None
        if value is None:
            terms.append(pc.field(field.name).is_null())
        else:
            terms.append(pc.field(field.name) == pa.scalar(value, type=field.type))
    if data_schema is not None and add.stats:
        terms.append(stats_guarantee(add.stats, data_schema))
    return functools.reduce(operator.and_, terms, pc.scalar(True))


def prune_files(snapshot: Snapshot, filter: pc.Expression, *, columns: Sequence[str] = ()) -> list[AddFile]:
    """The snapshot's files that a read with ``filter`` opens: those whose partition values and stats
    do not rule out every row. Opens nothing. ``columns``, when given, are all the columns ``filter``
    references: only their statistics are read (the others cannot rule out a row of it)."""
    rows = file_rows(snapshot)
    layout = snapshot.layout
    named = [logical_row(r, layout) for r in rows] if layout.mapped else rows
    kept = kept_indices(layout.logical, snapshot.partition_columns, named, filter, columns=columns)
    return [snapshot.state.files[rows[i].path] for i in kept]


def prune_adds(schema: pa.Schema, partition_columns: Sequence[str], files: Sequence[AddFile],
               filter: pc.Expression, *, columns: Sequence[str] = (), layout: Layout | None = None) -> list[AddFile]:
    """Those of ``files`` (add actions of a table with ``schema``) that a read with ``filter`` opens, as
    :func:`prune_files` decides for a snapshot's files. Opens nothing.

    ``columns`` (those ``filter`` references) sharpens it: a file with some nulls in one of them gets no
    range for it from its statistics (a comparison is never true for a null, so a range would rule out
    ``is_null``), so such a file is also tried as two parts, its rows where the column is null and the
    others, and skipped when the filter contradicts both. Only the statistics of ``columns`` are then read
    (the filter references no other column)."""
    rows = [file_row(add) for add in files]
    if layout is not None and layout.mapped:
        rows = [logical_row(r, layout) for r in rows]
    kept = kept_indices(schema, partition_columns, rows, filter, columns=columns)
    if columns:
        kept = [i for i in kept if not _both_parts_ruled_out(schema, partition_columns, rows[i], filter, columns)]
    return [files[i] for i in kept]


def _both_parts_ruled_out(schema: pa.Schema, partition_columns: Sequence[str], row: FileRow,
                          filter: pc.Expression, columns: Sequence[str]) -> bool:
    stats = parse_stats(row.stats)
    if stats is None:
        return False
    partition_fields = [schema.field(c) for c in partition_columns]
    data_schema = _stats_schema(schema, partition_columns, columns)
    fmt, fs = parquet_format(), pafs.LocalFileSystem()
    for column in columns:
        nulls = stats.null_count.get(column)
        if column not in data_schema.names or not isinstance(nulls, int) or not 0 < nulls < stats.num_records:
            continue
        parts = [fmt.make_fragment(str(i), filesystem=fs, file_size=row.size, partition_expression=_guarantee(
            row, partition_fields, None) & stats_guarantee(stats, data_schema, part=(column, nulls_part)))
            for i, nulls_part in enumerate((True, False))]
        if not list(ds.FileSystemDataset(parts, schema, fmt, fs).get_fragments(filter=filter)):
            return True
    return False


def kept_indices(schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[FileRow],
                 filter: pc.Expression, *, columns: Sequence[str] = ()) -> list[int]:
    """The indexes of ``rows`` whose guarantee does not contradict ``filter``; ``columns`` (when given: every
    column ``filter`` references) limits the statistics read to theirs."""
    fmt = parquet_format()
    fs = pafs.LocalFileSystem()  # never touched: a fragment's path is only its index here
    fragments = file_fragments(schema, partition_columns, rows, [str(i) for i in range(len(rows))], fmt, fs,
                               with_stats=True, stats_columns=columns)
    dataset = ds.FileSystemDataset(fragments, schema, fmt, fs)
    return [int(fragment.path) for fragment in dataset.get_fragments(filter=filter)]
