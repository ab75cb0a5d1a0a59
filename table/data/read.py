"""Reading a table's rows with pyarrow: exactly the snapshot's files, typed partition columns, pruning.

The entry points (a dataset, a table, a stream of batches, each file on its own) over the pieces below
them: the files as fragments with guarantees (``table.data.fragments``), how their bytes come in
(``table.data.fetching``), and the rows deletion vectors keep (``table.data.vector_rows``). A table with
column mapping is read under its physical names and named logically here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from logstore import StorageOptions, TableUri, deadline
from logstore.errors import ArgumentTypeError, InvalidArgumentError, TableNotFoundError
from table.data import fetching
from table.data.deletion_vectors import surviving
from table.data.fetching import (
    STREAM_BATCHES,
    Readable,
    Reading,
    fetched_windows,
    objects_for,
    read_once,
    readahead_for,
    retried_read,
)
from table.data.files import fetch_each, filesystem_for
from table.data.fragments import (
    FileRow,
    buffer_fragment,
    file_path,
    file_row,
    file_rows,
    kept_indices,
    logical_row,
    parquet_format,
    plain_dataset,
    prune_adds,
    prune_files,
)
from table.data.scanned import ScannedDataset, StreamedFilesDataset
from table.data.vector_rows import deleted_in, deleted_rows_of, physical_row_count, surviving_batches, surviving_rows
from table.errors import CorruptDataError
from table.log.actions import AddFile
from table.log.column_mapping import Layout
from table.log.snapshot import Snapshot

# prune_files, prune_adds, fetched_windows, parquet_format, surviving_batches, deleted_rows_of and
# physical_row_count live with their concern and are importable from here as before.
__all__ = ["deleted_rows_of", "fetched_windows", "files_dataset", "parquet_format", "physical_row_count",
           "prune_adds", "prune_files", "read_each_file", "surviving_batches", "to_pyarrow_dataset",
           "to_pyarrow_reader", "to_pyarrow_table"]


def to_pyarrow_dataset(table: Readable, *, filesystem: pafs.FileSystem | None = None) -> ds.Dataset:
    """A dataset over exactly the files of ``table``'s snapshot, schema = the table schema in table order.

    Filters given to the dataset skip files by partition values and stats. ``filesystem`` replaces
    the one built from the table's storage options (paths are ``bucket/key``). A table whose files pyarrow
    can scan as they are is a ``FileSystemDataset`` (files of 8 MiB or more on average: a
    :class:`~table.data.scanned.StreamedFilesDataset`, whose streaming scans read one file at a time); one
    with deletion vectors or column mapping is a
    :class:`~table.data.scanned.ScannedDataset`, each of whose scans streams :func:`to_pyarrow_reader`'s
    batches of the snapshot (vectors applied batch by batch, columns renamed), lazily and as often as asked.
    """
    snapshot = _snapshot(table)
    if not snapshot.layout.mapped and not _has_vectors(snapshot):
        files = _dataset(table, snapshot, filesystem, with_stats=True)
        # Files of a row group or more are streamed one at a time, as to_pyarrow_reader streams them.
        return files if readahead_for(snapshot) > 4 else StreamedFilesDataset.of(files)
    pinned = _Pinned(table.uri, snapshot, table.storage_options)  # every scan reads this snapshot
    fs = filesystem if filesystem is not None else filesystem_for(table.uri, table.storage_options)

    def open_stream(columns: Sequence[str] | None, filter: pc.Expression | None) -> pa.RecordBatchReader:
        return to_pyarrow_reader(pinned, None if columns is None else list(columns), filter, filesystem=fs)

    return ScannedDataset(snapshot.layout.logical, open_stream,
                          what=f"table {table.uri.table_path} at version {snapshot.version}")


class _Pinned(NamedTuple):
    """A table as of one snapshot: what a dataset's later scans read."""

    uri: TableUri
    snapshot: Snapshot
    storage_options: StorageOptions


def _has_vectors(snapshot: Snapshot) -> bool:
    vectors = snapshot.state.files.to_arrow()["deletionVector"]
    return vectors.null_count < len(vectors)


def files_dataset(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], files: Sequence[AddFile],
                  filesystem: pafs.FileSystem, *, with_stats: bool = False, layout: Layout | None = None) -> ds.Dataset:
    """A dataset over ``files`` (add actions of the table at ``uri``) with the table's ``schema``:
    partition columns filled from each file's typed partition values, columns a file lacks as nulls,
    rows a deletion vector deletes left out, columns under their logical names (``layout``: the table's
    column mapping; files then hold physical names, read and renamed, which pyarrow cannot do lazily, so
    such a dataset is read into memory). The building block of every read, including Spark's executors,
    which read their share of a snapshot's files with it."""
    rows = [file_row(add) for add in files]
    if layout is None or not layout.mapped:
        return _dataset_of(uri, schema, partition_columns, rows, filesystem, with_stats=with_stats)
    physical = _dataset_of(uri, layout.physical, layout.physical_columns(partition_columns), rows, filesystem,
                           with_stats=with_stats)
    return ds.InMemoryDataset([layout.logical_table(batch) for batch in physical.to_batches()], schema=layout.logical)


def _dataset_of(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[FileRow],
                filesystem: pafs.FileSystem, *, with_stats: bool) -> ds.Dataset:
    """A dataset over ``rows``: their files as they are, and the files with a deletion vector as a dataset
    of their surviving rows, read when this is called (see :func:`_surviving_dataset`)."""
    plain = [r for r in rows if r.deletion_vector is None]
    files = plain_dataset(uri, schema, partition_columns, plain, filesystem, with_stats=with_stats)
    vectored = [r for r in rows if r.deletion_vector is not None]
    if not vectored:
        return files
    return ds.UnionDataset(schema, [files, _surviving_dataset(uri, schema, partition_columns, vectored, filesystem)])


def _surviving_dataset(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[FileRow],
                       filesystem: pafs.FileSystem) -> ds.Dataset:
    """The rows the deletion vectors of ``rows``' files keep, read now, batch by batch (pyarrow has no
    dataset whose scan could drop rows by position, so these rows are held in memory)."""
    return ds.InMemoryDataset(list(surviving_rows(uri, schema, partition_columns, rows, filesystem)),
                              schema=schema)


def to_pyarrow_table(table: Readable, columns: list[str] | None = None, filter: pc.Expression | None = None, *,
                     filesystem: pafs.FileSystem | None = None) -> pa.Table:
    """The rows of ``table`` (``columns`` in the order given, default all), those matching ``filter``.

    Files that provably hold no matching row are not opened (:func:`prune_files` tells which are).
    An empty table gives an empty result with the table's schema. Transient failures (no answer, a 5xx,
    throttling, a response cut short) are retried within the table's deadline (``DYNACOMMIT_TIMEOUT_SECONDS``)
    and never reported as corruption: see :class:`Reading`.
    """
    if filter is not None and not isinstance(filter, pc.Expression):
        raise ArgumentTypeError(f"filter must be a pyarrow.compute.Expression (e.g. pc.field('x') > 1), got {type(filter).__name__}")
    if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
        raise ArgumentTypeError(f"columns must be a list of column names, got {columns!r}")
    snapshot = _snapshot(table)
    fs = filesystem if filesystem is not None else filesystem_for(table.uri, table.storage_options)
    layout = snapshot.layout
    if layout.mapped:  # the files hold physical names: read those, by position, and name the result logically
        wanted = list(columns) if columns is not None else layout.logical.names
        unknown = [c for c in wanted if c not in layout.logical.names]
        if unknown:
            raise InvalidArgumentError(f"cannot read columns {unknown} of table {table.uri.table_path}: its columns "
                                       f"are {layout.logical.names}")
        rows = file_rows(snapshot)
        if filter is None:
            return layout.logical_table(_physical_read(table, snapshot, fs, rows,
                                                       columns=layout.physical_columns(wanted), filter=None), wanted)
        # Files are pruned by logical names (their statistics renamed), rows filtered once named logically:
        # pyarrow binds a filter to each file's own columns, which are physical.
        rows = [rows[i] for i in kept_indices(layout.logical, snapshot.partition_columns,
                                              [logical_row(r, layout) for r in rows], filter)]
        every = layout.logical_table(_physical_read(table, snapshot, fs, rows, columns=None, filter=None))
        try:
            return every.filter(filter).select(wanted)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgumentError(f"cannot read table {table.uri.table_path} with the filter given: {exc}; the "
                                       f"table's columns are {layout.logical.names}") from None
    return _physical_read(table, snapshot, fs, file_rows(snapshot), columns=columns, filter=filter)


def to_pyarrow_reader(table: Readable, columns: list[str] | None = None, filter: pc.Expression | None = None, *,
                      filesystem: pafs.FileSystem | None = None) -> pa.RecordBatchReader:
    """The rows :func:`to_pyarrow_table` gives, as a stream of batches read as they are consumed: files
    without deletion vectors through one pyarrow scan, then the files with vectors, each batch cut by its
    file's vector as it comes (:func:`surviving_rows`). Memory is the scans' read-ahead whatever the
    table's size. DuckDB (``duckdb.sql("SELECT ... FROM reader")``) and polars (``pl.from_arrow(reader)``)
    read it as it streams. Files are pruned as :func:`to_pyarrow_table` prunes them; a file gone or
    unreadable mid-stream raises the same errors, without the retry (a stream cannot be read again)."""
    if filter is not None and not isinstance(filter, pc.Expression):
        raise ArgumentTypeError(f"filter must be a pyarrow.compute.Expression (e.g. pc.field('x') > 1), got {type(filter).__name__}")
    if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
        raise ArgumentTypeError(f"columns must be a list of column names, got {columns!r}")
    snapshot = _snapshot(table)
    fs = filesystem if filesystem is not None else filesystem_for(table.uri, table.storage_options)
    layout = snapshot.layout
    logical = layout.logical if layout.mapped else snapshot.schema
    try:  # a bad column or filter is the caller's error, raised before any file is read
        result = ds.dataset([], schema=logical).scanner(columns=columns, filter=filter).projected_schema
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(f"cannot read table {table.uri.table_path} with columns={columns!r} and the "
                                   f"filter given: {exc}; the table's columns are {logical.names}") from None
    rows = file_rows(snapshot)
    if filter is not None:
        pruning = [logical_row(r, layout) for r in rows] if layout.mapped else rows
        rows = [rows[i] for i in kept_indices(logical, snapshot.partition_columns, pruning, filter)]
    schema, partitions = layout.physical, layout.physical_columns(snapshot.partition_columns)
    # A mapped table's files hold physical names: read them whole, name each batch, then filter.
    scan_columns, scan_filter = (None, None) if layout.mapped else (columns, filter)
    plain = plain_dataset(table.uri, schema, partitions, [r for r in rows if r.deletion_vector is None], fs,
                          with_stats=False)
    vectored = [r for r in rows if r.deletion_vector is not None]

    # Files of a row group or more are read one at a time: each file read ahead holds a decoded row group.
    readahead = readahead_for(snapshot) if readahead_for(snapshot) > 4 else 1

    def physical() -> Iterator[pa.RecordBatch]:
        yield from plain.scanner(columns=scan_columns, filter=scan_filter, fragment_readahead=readahead,
                                 batch_readahead=STREAM_BATCHES if readahead == 1 else 16).to_batches()
        yield from surviving_rows(table.uri, schema, partitions, vectored, fs, columns=scan_columns,
                                  filter=scan_filter, readahead=readahead, objects=objects_for(table, fs))

    def batches() -> Iterator[pa.RecordBatch]:
        source = physical()
        while True:
            batch = read_once(table, snapshot, lambda: next(source, None))
            if batch is None:
                return
            if layout.mapped:
                named = layout.logical_table(pa.Table.from_batches([batch]))
                named = named.filter(filter) if filter is not None else named
                batch = named.select(result.names).combine_chunks().to_batches()
                yield from (b for b in batch if b.num_rows)
            elif batch.num_rows:
                yield batch

    return pa.RecordBatchReader.from_batches(result, batches())


def _physical_read(table: Readable, snapshot: Snapshot, fs: pafs.FileSystem, rows: list[FileRow], *,
                   columns: list[str] | None, filter: pc.Expression | None) -> pa.Table:
    """The rows of ``rows``' files under their physical names (the column mapping's, or the logical ones):
    files without deletion vectors through :func:`_read_table`, the others as their vectors say."""
    schema, partitions = snapshot.layout.physical, snapshot.layout.physical_columns(snapshot.partition_columns)
    vectored = [r for r in rows if r.deletion_vector is not None]
    if not vectored:
        return _read_table(table, snapshot, rows, fs, columns=columns, filter=filter)
    rows = [r for r in rows if r.deletion_vector is None]
    plain = _read_table(table, snapshot, rows, fs, columns=columns, filter=filter)
    kept = vectored if filter is None else [vectored[i] for i in kept_indices(schema, partitions, vectored, filter)]
    if columns is not None or filter is not None:
        try:  # a bad column or filter is the caller's error, raised before any file is read
            ds.dataset([], schema=schema).scanner(columns=columns, filter=filter)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgumentError(f"cannot read table {table.uri.table_path} with columns={columns!r} and the "
                                       f"filter given: {exc}; the table's columns are {snapshot.schema.names}") from None
    result = plain.schema

    def read_survivors() -> pa.Table:
        return pa.Table.from_batches(list(surviving_rows(table.uri, schema, partitions, kept, fs, columns=columns,
                                                         filter=filter, readahead=readahead_for(snapshot),
                                                         objects=objects_for(table, fs))), schema=result)
    survivors = retried_read(table, snapshot, read_survivors)
    return pa.concat_tables([plain, survivors])


def _read_table(table: Readable, snapshot: Snapshot, rows: list[FileRow], fs: pafs.FileSystem, *,
                columns: list[str] | None, filter: pc.Expression | None) -> pa.Table:
    """The rows of files without deletion vectors (``rows``), as :func:`to_pyarrow_table` reads them."""
    # Without a filter there is nothing to prune: the stats are not even parsed.
    layout = snapshot.layout
    dataset = plain_dataset(table.uri, layout.physical, layout.physical_columns(snapshot.partition_columns), rows,
                            fs, with_stats=filter is not None)
    readahead = readahead_for(snapshot)
    try:  # binding columns and filter to the schema opens no file: what fails here is the request
        scanner = dataset.scanner(columns=columns, filter=filter, fragment_readahead=readahead)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(f"cannot read table {table.uri.table_path} with columns={columns!r} and the "
                                   f"filter given: {exc}; the table's columns are {snapshot.schema.names}") from None
    opened = list(dataset.get_fragments(filter=filter)) if filter is not None else list(dataset.get_fragments())
    if not opened:
        return scanner.to_table()  # every file ruled out: nothing is opened
    files = {file_path(table.uri, row.path): row for row in rows}
    with deadline.deadline(table.storage_options.timeout_seconds,
                           f"read of {table.uri.table_path} at version {snapshot.version}"):
        return Reading(table, snapshot, dataset, files, columns=columns, filter=filter, readahead=readahead).run(opened)


def read_each_file(table: Readable, snapshot: Snapshot, files: Sequence[AddFile], *,
                   columns: Sequence[str] | None = None) -> Iterator[tuple[pa.Table, pa.Array | None]]:
    """The rows of each of ``files`` (add actions of ``snapshot``), one table per file and in order, with
    the snapshot's schema (partition columns filled from the log), ``columns`` only if given; and, for a
    file with a deletion vector, the position in the file of each row kept (None: every row, in order).
    Small files are fetched whole, many at once, as :func:`to_pyarrow_table` fetches them; errors are the
    project's, naming the table and version."""
    fs = filesystem_for(table.uri, table.storage_options)
    rows = [file_row(add) for add in files]
    layout = snapshot.layout
    logical_columns = list(columns) if columns is not None else layout.logical.names
    columns = layout.physical_columns(logical_columns) if columns is not None else None
    dataset = plain_dataset(table.uri, layout.physical, layout.physical_columns(snapshot.partition_columns), rows,
                            fs, with_stats=False)
    fragments = list(dataset.get_fragments())
    fmt = dataset.format
    reading = Reading(table, snapshot, dataset, {f.path: row for f, row in zip(fragments, rows)}, columns=None,
                      filter=None, readahead=4)
    small = [f.path for f, row in zip(fragments, rows) if row.size <= fetching.WHOLE_FILE]
    fetched = fetch_each(fs, small, ahead=fetching.WINDOW, objects=reading.fetch_through)
    try:
        for fragment, row in zip(fragments, rows):
            if row.size <= fetching.WHOLE_FILE:
                with deadline.deadline(table.storage_options.timeout_seconds,
                                       f"read of {row.path} of {table.uri.table_path}"):
                    whole = reading.whole(next(fetched))  # fetched again after a transient failure
                fragment = buffer_fragment(fmt, whole, dataset.schema, fragment.partition_expression)
            one = ds.FileSystemDataset([fragment], dataset.schema, fmt, fs)
            try:
                read = retried_read(table, snapshot,
                                    lambda: one.to_table(columns=None if columns is None else list(columns)))
            except CorruptDataError as exc:
                raise CorruptDataError(f"{row.path}: {exc}") from exc.__cause__
            read = layout.logical_table(read, logical_columns)
            if row.deletion_vector is None:
                yield read, None
                continue
            deleted = deleted_in(table.uri, fs, row)
            mask = surviving(deleted, read.num_rows)
            yield read.filter(mask), pc.indices_nonzero(mask)
    finally:
        fetched.close()


def _snapshot(table: Readable) -> Snapshot:
    snapshot = table.snapshot
    if snapshot is None:
        raise TableNotFoundError(f"no table at {table.uri.table_path} yet: nothing has been written to it")
    return snapshot


def _dataset(table: Readable, snapshot: Snapshot, filesystem: pafs.FileSystem | None, *,
             with_stats: bool) -> ds.Dataset:
    fs = filesystem if filesystem is not None else filesystem_for(table.uri, table.storage_options)
    return _dataset_of(table.uri, snapshot.schema, snapshot.partition_columns, file_rows(snapshot), fs,
                       with_stats=with_stats)
