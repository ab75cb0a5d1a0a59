"""Reading a table's rows with pyarrow: exactly the snapshot's files, typed partition columns, pruning.

A Delta table is not a directory of Parquet files: files under the table that the log does not
reference (an aborted job's, a removed file awaiting VACUUM) must not be read, and partition values
live in the log, typed by the table schema, not in directory names (which are escaped and may be
anything). So the dataset is built from the snapshot's ``add`` actions, one fragment per file, each
with a ``partition_expression``: a guarantee true for every row of the file, made of its typed
partition values (``p == 5``, ``is_null(q)``) and of what its stats prove (``x >= 1 and x <= 9``,
``is_null(y)``: ``table.data.stats.stats_guarantee``). pyarrow fills a partition column from that
expression, and skips, without opening it, a fragment whose guarantee contradicts the filter; the
filter is then applied to the rows of the files it does open. The filter is never taken apart here:
what pyarrow cannot prove only costs pruning.

A table of small files (streaming appends, many small jobs) is bound by request latency: the files of
at most ``_WHOLE_FILE`` bytes that a read opens are fetched whole, many at once (``fetch_each``), and
decoded from memory, window by window, as fragments of the same dataset, with the same guarantee: the
result is the one the dataset gives (same rows in the same order, same schema), only the I/O differs.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import operator
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple
from typing import Protocol as TypingProtocol
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from logstore import DynacommitError, ObjectStore, StorageOptions, TableUri, deadline, open_object_store
from logstore.errors import (
    ArgumentTypeError,
    CorruptLogError,
    DeadlineExceededError,
    InvalidArgumentError,
    StorageError,
    TableNotFoundError,
)
from table.data.deletion_vectors import deleted_rows, stored_at, surviving
from table.data.files import Fetched, arrow_buffer, data_path, fetch_each, fetch_one, filesystem_for
from table.data.scanned import ScannedDataset, StreamedFilesDataset
from table.data.skipping import stats_guarantee
from table.data.stats import parse_stats
from table.errors import CorruptDataError, DataFileMissingError, UnsupportedFeatureError
from table.log.actions import AddFile, DeletionVectorDescriptor
from table.log.actionset import DELETION_VECTOR_STRUCT, plain_value
from table.log.column_mapping import Layout, logical_stats, logical_values
from table.log.schema import TYPE_CHANGES, arrow_type_to_delta, parse_partition_value
from table.log.snapshot import Snapshot

__all__ = ["deleted_rows_of", "files_dataset", "physical_row_count", "prune_adds", "prune_files", "read_each_file",
           "surviving_batches", "to_pyarrow_dataset", "to_pyarrow_reader", "to_pyarrow_table"]

log = logging.getLogger(__name__)


class _Readable(TypingProtocol):
    """What reading needs of a :class:`table.table.Table` (kept structural: ``table.table`` imports us)."""

    @property
    def uri(self) -> TableUri: ...

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def storage_options(self) -> StorageOptions: ...


def to_pyarrow_dataset(table: _Readable, *, filesystem: pafs.FileSystem | None = None) -> ds.Dataset:
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
        return files if _readahead(snapshot) > 4 else StreamedFilesDataset.of(files)
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
    rows = [_row(add) for add in files]
    if layout is None or not layout.mapped:
        return _dataset_of(uri, schema, partition_columns, rows, filesystem, with_stats=with_stats)
    physical = _dataset_of(uri, layout.physical, layout.physical_columns(partition_columns), rows, filesystem,
                           with_stats=with_stats)
    return ds.InMemoryDataset([layout.logical_table(batch) for batch in physical.to_batches()], schema=layout.logical)


def fetched_windows(uri: TableUri, dataset: ds.Dataset, files: Sequence[AddFile], objects: ObjectStore | None, *,
                    filter: pc.Expression | None = None) -> Iterator[ds.Dataset]:
    """``dataset`` (a :func:`files_dataset` over ``files``) as consecutive datasets of at most ``_WINDOW``
    of the files ``filter`` does not rule out, in order, each file of up to ``_WHOLE_FILE`` bytes (its
    ``add`` action's size) fetched whole through ``objects``, one GET and no HEAD, a window ahead, and
    decoded from memory. A file whose fetch fails or brings another size than the log's is left to
    pyarrow's own read of it (which raises what is wrong, if anything still is). Without ``objects``, or
    for a dataset that is not one of plain files (deletion vectors, column mapping), ``dataset`` itself.
    Spark's read tasks read their share of the files this way."""
    if objects is None or not isinstance(dataset, ds.FileSystemDataset):
        yield dataset
        return
    sizes = {_file_path(uri, add.path): add.size for add in files}
    opened = list(dataset.get_fragments(filter=filter)) if filter is not None else list(dataset.get_fragments())

    def small(fragment: ds.Fragment) -> bool:
        return sizes.get(fragment.path, _WHOLE_FILE + 1) <= _WHOLE_FILE

    fmt = dataset.format
    fetched = fetch_each(dataset.filesystem, [f.path for f in opened if small(f)], ahead=_WINDOW, objects=objects)
    try:
        for start in range(0, len(opened), _WINDOW):
            window = []
            for fragment in opened[start:start + _WINDOW]:
                if small(fragment):
                    got = next(fetched)
                    if got.error is None and got.buffer.size == got.announced == sizes[fragment.path]:
                        fragment = fmt.make_fragment(got.buffer, partition_expression=fragment.partition_expression)
                window.append(fragment)
            yield ds.FileSystemDataset(window, dataset.schema, fmt, dataset.filesystem)
    finally:
        fetched.close()


def _dataset_of(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[_FileRow],
                filesystem: pafs.FileSystem, *, with_stats: bool) -> ds.Dataset:
    """A dataset over ``rows``: their files as they are, and the files with a deletion vector as a dataset
    of their surviving rows, read when this is called (see :func:`_surviving_dataset`)."""
    plain = [r for r in rows if r.deletion_vector is None]
    files = _files_dataset(uri, schema, partition_columns, plain, filesystem, with_stats=with_stats)
    vectored = [r for r in rows if r.deletion_vector is not None]
    if not vectored:
        return files
    return ds.UnionDataset(schema, [files, _surviving_dataset(uri, schema, partition_columns, vectored, filesystem)])


def _surviving_dataset(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[_FileRow],
                       filesystem: pafs.FileSystem) -> ds.Dataset:
    """The rows the deletion vectors of ``rows``' files keep, read now, batch by batch (pyarrow has no
    dataset whose scan could drop rows by position, so these rows are held in memory)."""
    return ds.InMemoryDataset(list(_surviving_batches(uri, schema, partition_columns, rows, filesystem)),
                              schema=schema)


class _FileRow(NamedTuple):
    """What reading needs of an ``add``: without the rest of the action, so that a snapshot's columns give
    it without building action objects."""

    path: str
    size: int
    partition_values: Mapping[str, str | None]
    stats: str | None
    deletion_vector: DeletionVectorDescriptor | None = None


def _row(add: AddFile) -> _FileRow:
    return _FileRow(add.path, add.size, add.partition_values, add.stats, add.deletion_vector)


def _file_rows(snapshot: Snapshot) -> list[_FileRow]:
    """The snapshot's live files, by path, from its columns."""
    table = snapshot.state.files.to_arrow()
    table = table.take(pc.sort_indices(table["path"]))
    values = [None if v is None else dict(v) for v in table["partitionValues"].to_pylist()]
    vectors = [None] * table.num_rows
    if table["deletionVector"].null_count < table.num_rows:
        vectors = [None if v is None else DeletionVectorDescriptor.model_validate(
            plain_value(v, DELETION_VECTOR_STRUCT)) for v in table["deletionVector"].to_pylist()]
    return [_FileRow(*row) for row in zip(table["path"].to_pylist(), table["size"].to_pylist(), values,
                                          table["stats"].to_pylist(), vectors)]


def _files_dataset(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[_FileRow],
                   filesystem: pafs.FileSystem, *, with_stats: bool) -> ds.FileSystemDataset:
    fmt = parquet_format()
    paths = [_file_path(uri, row.path) for row in rows]
    return ds.FileSystemDataset(_fragments(schema, partition_columns, rows, paths, fmt, filesystem,
                                           with_stats=with_stats), schema, fmt, filesystem)


def to_pyarrow_table(table: _Readable, columns: list[str] | None = None, filter: pc.Expression | None = None, *,
                     filesystem: pafs.FileSystem | None = None) -> pa.Table:
    """The rows of ``table`` (``columns`` in the order given, default all), those matching ``filter``.

    Files that provably hold no matching row are not opened (:func:`prune_files` tells which are).
    An empty table gives an empty result with the table's schema. Transient failures (no answer, a 5xx,
    throttling, a response cut short) are retried within the table's deadline (``DYNACOMMIT_TIMEOUT_SECONDS``)
    and never reported as corruption: see :class:`_Reading`.
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
        rows = _file_rows(snapshot)
        if filter is None:
            return layout.logical_table(_physical_read(table, snapshot, fs, rows,
                                                       columns=layout.physical_columns(wanted), filter=None), wanted)
        # Files are pruned by logical names (their statistics renamed), rows filtered once named logically:
        # pyarrow binds a filter to each file's own columns, which are physical.
        rows = [rows[i] for i in _kept(layout.logical, snapshot.partition_columns,
                                       [_logical_row(r, layout) for r in rows], filter)]
        every = layout.logical_table(_physical_read(table, snapshot, fs, rows, columns=None, filter=None))
        try:
            return every.filter(filter).select(wanted)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgumentError(f"cannot read table {table.uri.table_path} with the filter given: {exc}; the "
                                       f"table's columns are {layout.logical.names}") from None
    return _physical_read(table, snapshot, fs, _file_rows(snapshot), columns=columns, filter=filter)


def to_pyarrow_reader(table: _Readable, columns: list[str] | None = None, filter: pc.Expression | None = None, *,
                      filesystem: pafs.FileSystem | None = None) -> pa.RecordBatchReader:
    """The rows :func:`to_pyarrow_table` gives, as a stream of batches read as they are consumed: files
    without deletion vectors through one pyarrow scan, then the files with vectors, each batch cut by its
    file's vector as it comes (:func:`_surviving_batches`). Memory is the scans' read-ahead whatever the
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
    rows = _file_rows(snapshot)
    if filter is not None:
        pruning = [_logical_row(r, layout) for r in rows] if layout.mapped else rows
        rows = [rows[i] for i in _kept(logical, snapshot.partition_columns, pruning, filter)]
    schema, partitions = layout.physical, layout.physical_columns(snapshot.partition_columns)
    # A mapped table's files hold physical names: read them whole, name each batch, then filter.
    scan_columns, scan_filter = (None, None) if layout.mapped else (columns, filter)
    plain = _files_dataset(table.uri, schema, partitions, [r for r in rows if r.deletion_vector is None], fs,
                           with_stats=False)
    vectored = [r for r in rows if r.deletion_vector is not None]

    # Files of a row group or more are read one at a time: each file read ahead holds a decoded row group.
    readahead = _readahead(snapshot) if _readahead(snapshot) > 4 else 1

    def physical() -> Iterator[pa.RecordBatch]:
        yield from plain.scanner(columns=scan_columns, filter=scan_filter, fragment_readahead=readahead,
                                 batch_readahead=_STREAM_BATCHES if readahead == 1 else 16).to_batches()
        yield from _surviving_batches(table.uri, schema, partitions, vectored, fs, columns=scan_columns,
                                      filter=scan_filter, readahead=readahead, objects=_objects_for(table, fs))

    def batches() -> Iterator[pa.RecordBatch]:
        source = physical()
        while True:
            batch = _read_once(table, snapshot, lambda: next(source, None))
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


def _logical_row(row: _FileRow, layout: Layout) -> _FileRow:
    """A file of a mapped table with its partition values and statistics under logical names."""
    return row._replace(partition_values=logical_values(row.partition_values, layout),
                        stats=logical_stats(row.stats, layout))


def _physical_read(table: _Readable, snapshot: Snapshot, fs: pafs.FileSystem, rows: list[_FileRow], *,
                   columns: list[str] | None, filter: pc.Expression | None) -> pa.Table:
    """The rows of ``rows``' files under their physical names (the column mapping's, or the logical ones):
    files without deletion vectors through :func:`_read_table`, the others as their vectors say."""
    schema, partitions = snapshot.layout.physical, snapshot.layout.physical_columns(snapshot.partition_columns)
    vectored = [r for r in rows if r.deletion_vector is not None]
    if not vectored:
        return _read_table(table, snapshot, rows, fs, columns=columns, filter=filter)
    rows = [r for r in rows if r.deletion_vector is None]
    plain = _read_table(table, snapshot, rows, fs, columns=columns, filter=filter)
    kept = vectored if filter is None else [vectored[i] for i in _kept(schema, partitions, vectored, filter)]
    if columns is not None or filter is not None:
        try:  # a bad column or filter is the caller's error, raised before any file is read
            ds.dataset([], schema=schema).scanner(columns=columns, filter=filter)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgumentError(f"cannot read table {table.uri.table_path} with columns={columns!r} and the "
                                       f"filter given: {exc}; the table's columns are {snapshot.schema.names}") from None
    result = plain.schema

    def read_survivors() -> pa.Table:
        return pa.Table.from_batches(list(_surviving_batches(table.uri, schema, partitions, kept, fs, columns=columns,
                                                             filter=filter, readahead=_readahead(snapshot),
                                                             objects=_objects_for(table, fs))), schema=result)
    survivors = _read(table, snapshot, read_survivors)
    return pa.concat_tables([plain, survivors])


def _read_table(table: _Readable, snapshot: Snapshot, rows: list[_FileRow], fs: pafs.FileSystem, *,
                columns: list[str] | None, filter: pc.Expression | None) -> pa.Table:
    """The rows of files without deletion vectors (``rows``), as :func:`to_pyarrow_table` reads them."""
    # Without a filter there is nothing to prune: the stats are not even parsed.
    layout = snapshot.layout
    dataset = _files_dataset(table.uri, layout.physical, layout.physical_columns(snapshot.partition_columns), rows,
                             fs, with_stats=filter is not None)
    readahead = _readahead(snapshot)
    try:  # binding columns and filter to the schema opens no file: what fails here is the request
        scanner = dataset.scanner(columns=columns, filter=filter, fragment_readahead=readahead)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(f"cannot read table {table.uri.table_path} with columns={columns!r} and the "
                                   f"filter given: {exc}; the table's columns are {snapshot.schema.names}") from None
    opened = list(dataset.get_fragments(filter=filter)) if filter is not None else list(dataset.get_fragments())
    if not opened:
        return scanner.to_table()  # every file ruled out: nothing is opened
    files = {_file_path(table.uri, row.path): row for row in rows}
    with deadline.deadline(table.storage_options.timeout_seconds,
                           f"read of {table.uri.table_path} at version {snapshot.version}"):
        return _Reading(table, snapshot, dataset, files, columns=columns, filter=filter, readahead=readahead).run(opened)


_SMALL_FILE = 8 * 1024 * 1024
_SMALL_FILES_READAHEAD = 32
_WHOLE_FILE = 1024 * 1024
"""Files up to this size are fetched whole and decoded from memory."""
_WINDOW = 32
"""Files decoded together from memory, while as many are fetched for the next window: at most 64 small
files (64 MiB) are held at once."""
_RETRY_PAUSE = 0.1
_RETRY_MAX_PAUSE = 2.0


class _Reading:
    """The rows of the ``opened`` fragments of ``dataset`` (those the filter does not rule out), as
    ``dataset.to_table`` gives them: in ``_WINDOW``s of consecutive fragments, each small file's replaced by
    a fragment over its fetched bytes with the same ``partition_expression``, bigger files read by pyarrow
    as they are.

    What can go wrong, and what is done about it:

    * A small file that fails to arrive, or arrives shorter than its store announced (a response cut
      short), is fetched again. One whose store announces another size than the ``add`` action's is checked
      with a HEAD through the log store's client before anything is concluded: only an object whose size
      really differs from the log's is corrupt (:class:`CorruptDataError`), only one really absent is
      missing (:class:`DataFileMissingError`).
    * A window that fails in pyarrow is read again: after an I/O error, once its bigger files are known to
      be there (HEAD); after a decoding error, once each of its files was read cleanly and decoded alone.
      A file that fails that is corrupt (a small file's bytes are already a clean read: their length is the
      log's); otherwise the failure was the network's.
    * Every retry waits a jittered, growing pause; past the read's deadline the last failure is raised as a
      retryable :class:`StorageError` naming the file or window. Nothing is returned until every window is
      read: a reader never sees part of a table.
    """

    def __init__(self, table: _Readable, snapshot: Snapshot, dataset: ds.FileSystemDataset,
                 files: Mapping[str, _FileRow], *, columns: list[str] | None, filter: pc.Expression | None,
                 readahead: int):
        self.table, self.snapshot, self.dataset, self.files = table, snapshot, dataset, files
        self.columns, self.filter, self.readahead = columns, filter, readahead
        self._objects: ObjectStore | None = None

    @functools.cached_property
    def fetch_through(self) -> ObjectStore | None:
        """The object store small files are fetched whole through (:func:`_fetch_through`)."""
        return self.objects if _fetch_through(self.table, self.dataset.filesystem) else None

    @property
    def objects(self) -> ObjectStore:
        """The table's object store, through the log store's clients: what a check is asked of."""
        if self._objects is None:
            self._objects = open_object_store(self.table.uri, storage_options=self.table.storage_options)
        return self._objects

    def run(self, opened: Sequence[ds.FileFragment]) -> pa.Table:
        small = [f.path for f in opened if self.files[f.path].size <= _WHOLE_FILE]
        fetched = fetch_each(self.dataset.filesystem, small, ahead=_WINDOW, objects=self.fetch_through)
        tables = []
        try:
            for start in range(0, len(opened), _WINDOW):
                window = list(opened[start:start + _WINDOW])
                buffers = {f.path: self.whole(next(fetched)) for f in window if self.files[f.path].size <= _WHOLE_FILE}
                tables.append(self._window(window, buffers))
        finally:
            fetched.close()  # on failure, the files fetched ahead are let go and the rest never fetched
        return pa.concat_tables(tables)

    # --- small files ------------------------------------------------------------------------------------
    def whole(self, fetched: Fetched) -> pa.Buffer:
        """The bytes of a small file, exactly the ``add`` action's size of them."""
        row = self.files[fetched.path]
        attempt = 0
        while True:
            if fetched.error is None and fetched.buffer.size == fetched.announced == row.size:
                return fetched.buffer
            problem = self._fetch_problem(fetched, row)
            self._pause(attempt, f"data file {row.path}", problem)
            attempt += 1
            fetched = fetch_one(self.dataset.filesystem, fetched.path, self.fetch_through)

    def _fetch_problem(self, fetched: Fetched, row: _FileRow) -> str:
        """What went wrong with a fetch, when it may be transient; raises when the file is really missing or
        of another size than the log says."""
        if fetched.error is not None:
            if isinstance(fetched.error, DeadlineExceededError):
                raise fetched.error  # the operation's own deadline passed: nothing to retry within it
            if isinstance(fetched.error, FileNotFoundError):
                self._check_object(row)
            return str(fetched.error)
        if fetched.buffer.size != fetched.announced:
            return f"the response was cut short: {fetched.buffer.size} of {fetched.announced} bytes"
        self._check_object(row)
        return f"the store announced {fetched.announced} bytes, the log says {row.size}, a HEAD says {row.size}"

    # --- windows ----------------------------------------------------------------------------------------
    def _window(self, window: list[ds.FileFragment], buffers: Mapping[str, pa.Buffer]) -> pa.Table:
        fmt = self.dataset.format
        fragments = [fmt.make_fragment(buffers[f.path], partition_expression=f.partition_expression)
                     if f.path in buffers else f for f in window]
        part = ds.FileSystemDataset(fragments, self.dataset.schema, fmt, self.dataset.filesystem)
        attempt = 0
        while True:
            try:
                return part.to_table(columns=self.columns, filter=self.filter, fragment_readahead=self.readahead)
            except pa.ArrowInvalid as exc:
                self._check_decodable(window, fragments, exc)
                problem = str(exc)
            except OSError as exc:
                for fragment in window:
                    if fragment.path not in buffers:
                        self._check_object(self.files[fragment.path])
                problem = str(exc)
            except pa.ArrowException as exc:  # a file whose columns do not fit the table's types
                raise self._corrupt(f"{exc}") from exc
            self._pause(attempt, f"{len(window)} data files", problem)
            attempt += 1

    def _check_decodable(self, window: list[ds.FileFragment], fragments: list[ds.Fragment],
                         error: pa.ArrowInvalid) -> None:
        """Raise CorruptDataError naming the file of ``window`` that is not Parquet when read cleanly; return
        when every file decodes (the failure came from a read that broke off)."""
        schema = self.dataset.schema
        for original, fragment in zip(window, fragments):
            row = self.files[original.path]
            if fragment is original:  # read by pyarrow from the store: read it again, whole, and check it
                body = self._clean_body(row)
                fragment = self.dataset.format.make_fragment(arrow_buffer(body),
                                                             partition_expression=original.partition_expression)
            try:
                fragment.to_table(schema=schema)
            except pa.ArrowInvalid as alone:
                raise self._corrupt(f"{original.path}: {alone}") from error

    def _clean_body(self, row: _FileRow) -> bytes:
        """The whole object of a file through the log store's client (which checks the length it is sent
        and retries failures); DataFileMissingError or CorruptDataError when it is not the log's file."""
        key = self.table.uri.key(unquote(row.path))
        try:
            body = self.objects.get(key)
        except FileNotFoundError:
            raise self._missing(row.path) from None
        if len(body) != row.size:
            raise self._corrupt(f"{row.path} holds {len(body)} bytes, its add action says {row.size}")
        return body

    def _check_object(self, row: _FileRow) -> None:
        """HEAD the file: DataFileMissingError if it is gone, CorruptDataError if its size is not the log's;
        a HEAD that itself fails says nothing (the caller tries again)."""
        if "://" in row.path:
            return
        try:
            found = self.objects.head(self.table.uri.key(unquote(row.path)))
        except (DynacommitError, OSError):
            return
        if found is None:
            raise self._missing(row.path)
        if found.size != row.size:
            raise self._corrupt(f"{row.path} holds {found.size} bytes, its add action says {row.size}")

    # --- outcomes ---------------------------------------------------------------------------------------
    def _pause(self, attempt: int, what: str, problem: str) -> None:
        pause = min(_RETRY_MAX_PAUSE, _RETRY_PAUSE * 2 ** attempt) * random.uniform(0.5, 1.0)
        if deadline.remaining() <= pause:
            found = deadline.current()
            raise StorageError(
                f"reading the data of table {self.table.uri.table_path} at version {self.snapshot.version} failed: "
                f"{what}: {problem} (tried {attempt + 1} times within "
                f"{found.seconds if found is not None else 0:g} s); nothing is wrong with the table's files as far "
                f"as could be seen: retry later", operation="s3:GetObject", retryable=True)
        log.info("reading %s at version %d: %s: %s; reading it again in %.2f s", self.table.uri.table_path,
                 self.snapshot.version, what, problem, pause)
        deadline.sleep(pause)

    def _corrupt(self, detail: str) -> CorruptDataError:
        return CorruptDataError(
            f"a data file of table {self.table.uri.table_path} at version {self.snapshot.version} is not readable "
            f"Parquet ({detail}): it was cut short or overwritten behind the log's back; restore it from a backup "
            f"or an S3 object version, or remove it from the table with an overwrite of its partition")

    def _missing(self, path: str) -> DataFileMissingError:
        return DataFileMissingError(
            f"data file {path} of table {self.table.uri.table_path} at version {self.snapshot.version} is gone: it "
            f"was vacuumed while this snapshot still needed it, or deleted behind the log's back; read a newer "
            f"version (Table.refresh()) or keep vacuum's retention longer than your longest reader")


def _fetch_through(table: _Readable, fs: pafs.FileSystem) -> bool:
    """Whether small files are fetched whole through the table's own object store (one GET each, no HEAD):
    when ``fs`` is the table's own S3 filesystem; not (through ``fs``, a HEAD and a GET) when the caller gave
    another filesystem."""
    return table.uri.scheme in ("s3", "s3a") and fs.equals(filesystem_for(table.uri, table.storage_options))


def _objects_for(table: _Readable, fs: pafs.FileSystem) -> ObjectStore | None:
    """The table's object store when small files are fetched through it (:func:`_fetch_through`), else None."""
    return open_object_store(table.uri, storage_options=table.storage_options) if _fetch_through(table, fs) else None


def _readahead(snapshot: Snapshot) -> int:
    """How many files a scan reads at once. pyarrow's default (4) suits big files; a table of small files
    (streaming appends, many small jobs) is bound by each GET's latency, so more are read side by side,
    which costs little memory because each is small."""
    sizes = snapshot.state.files.to_arrow()["size"]
    mean = pc.mean(sizes).as_py() if len(sizes) else None
    return _SMALL_FILES_READAHEAD if mean is not None and mean < _SMALL_FILE else 4


def _read(table: _Readable, snapshot: Snapshot, read: Callable[[], pa.Table]) -> pa.Table:
    """Run a pyarrow read that can be run again, turning its errors into the project's, naming the table and
    version, and running it again after a transient failure (within the deadline, as :class:`_Reading`).

    pyarrow reports a missing S3 object as a plain OSError, so on failure the snapshot's files are
    checked (a bounded number of HEADs, on the error path only) to tell a vacuumed file from an outage.
    """
    attempt = 0
    with deadline.deadline(table.storage_options.timeout_seconds,
                           f"read of {table.uri.table_path} at version {snapshot.version}"):
        while True:
            try:
                return _read_once(table, snapshot, read)
            except StorageError as exc:
                pause = min(_RETRY_MAX_PAUSE, _RETRY_PAUSE * 2 ** attempt) * random.uniform(0.5, 1.0)
                if not exc.retryable or deadline.remaining() <= pause:
                    raise
                log.info("reading %s at version %d: %s; reading it again in %.2f s", table.uri.table_path,
                         snapshot.version, exc, pause)
                deadline.sleep(pause)
                attempt += 1


def _read_once(table: _Readable, snapshot: Snapshot, read: Callable[[], pa.Table]) -> pa.Table:
    try:
        return read()
    except pa.ArrowInvalid as exc:
        raise CorruptDataError(
            f"a data file of table {table.uri.table_path} at version {snapshot.version} is not readable Parquet "
            f"({exc}): it was cut short or overwritten behind the log's back; restore it from a backup or an S3 "
            f"object version, or remove it from the table with an overwrite of its partition") from exc
    except OSError as exc:
        missing = _first_missing(table, snapshot) if not isinstance(exc, FileNotFoundError) else str(exc)
        if missing is not None:
            raise DataFileMissingError(
                f"data file {missing} of table {table.uri.table_path} at version {snapshot.version} is gone: it "
                f"was vacuumed while this snapshot still needed it, or deleted behind the log's back; read a "
                f"newer version (Table.refresh()) or keep vacuum's retention longer than your longest reader"
            ) from exc
        raise StorageError(f"reading the data of table {table.uri.table_path} at version {snapshot.version} "
                           f"failed: {exc}", operation="s3:GetObject", retryable=True) from exc


_MISSING_CHECK_LIMIT = 200


def _first_missing(table: _Readable, snapshot: Snapshot) -> str | None:
    objects = open_object_store(table.uri, storage_options=table.storage_options)
    for add in _file_rows(snapshot)[:_MISSING_CHECK_LIMIT]:
        if "://" not in add.path:
            try:
                if objects.head(table.uri.key(unquote(add.path))) is None:
                    return add.path
            except (DynacommitError, OSError):
                return None
    return None


def prune_files(snapshot: Snapshot, filter: pc.Expression) -> list[AddFile]:
    """The snapshot's files that a read with ``filter`` opens: those whose partition values and stats
    do not rule out every row. Opens nothing."""
    rows = _file_rows(snapshot)
    layout = snapshot.layout
    named = [_logical_row(r, layout) for r in rows] if layout.mapped else rows
    kept = _kept(layout.logical, snapshot.partition_columns, named, filter)
    return [snapshot.state.files[rows[i].path] for i in kept]


def prune_adds(schema: pa.Schema, partition_columns: Sequence[str], files: Sequence[AddFile],
               filter: pc.Expression, *, columns: Sequence[str] = (), layout: Layout | None = None) -> list[AddFile]:
    """Those of ``files`` (add actions of a table with ``schema``) that a read with ``filter`` opens, as
    :func:`prune_files` decides for a snapshot's files. Opens nothing.

    ``columns`` (those ``filter`` references) sharpens it: a file with some nulls in one of them gets no
    range for it from its statistics (a comparison is never true for a null, so a range would rule out
    ``is_null``), so such a file is also tried as two parts, its rows where the column is null and the
    others, and skipped when the filter contradicts both."""
    rows = [_row(add) for add in files]
    if layout is not None and layout.mapped:
        rows = [_logical_row(r, layout) for r in rows]
    kept = _kept(schema, partition_columns, rows, filter)
    if columns:
        kept = [i for i in kept if not _both_parts_ruled_out(schema, partition_columns, rows[i], filter, columns)]
    return [files[i] for i in kept]


def _both_parts_ruled_out(schema: pa.Schema, partition_columns: Sequence[str], row: _FileRow,
                          filter: pc.Expression, columns: Sequence[str]) -> bool:
    stats = parse_stats(row.stats)
    if stats is None:
        return False
    partition_fields = [schema.field(c) for c in partition_columns]
    data_schema = _stats_schema(schema, partition_columns)
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


def _kept(schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[_FileRow],
          filter: pc.Expression) -> list[int]:
    fmt = parquet_format()
    fs = pafs.LocalFileSystem()  # never touched: a fragment's path is only its index here
    fragments = _fragments(schema, partition_columns, rows, [str(i) for i in range(len(rows))], fmt, fs,
                           with_stats=True)
    dataset = ds.FileSystemDataset(fragments, schema, fmt, fs)
    return [int(fragment.path) for fragment in dataset.get_fragments(filter=filter)]


def read_each_file(table: _Readable, snapshot: Snapshot, files: Sequence[AddFile], *,
                   columns: Sequence[str] | None = None) -> Iterator[tuple[pa.Table, pa.Array | None]]:
    """The rows of each of ``files`` (add actions of ``snapshot``), one table per file and in order, with
    the snapshot's schema (partition columns filled from the log), ``columns`` only if given; and, for a
    file with a deletion vector, the position in the file of each row kept (None: every row, in order).
    Small files are fetched whole, many at once, as :func:`to_pyarrow_table` fetches them; errors are the
    project's, naming the table and version."""
    fs = filesystem_for(table.uri, table.storage_options)
    rows = [_row(add) for add in files]
    layout = snapshot.layout
    logical_columns = list(columns) if columns is not None else layout.logical.names
    columns = layout.physical_columns(logical_columns) if columns is not None else None
    dataset = _files_dataset(table.uri, layout.physical, layout.physical_columns(snapshot.partition_columns), rows,
                             fs, with_stats=False)
    fragments = list(dataset.get_fragments())
    fmt = dataset.format
    reading = _Reading(table, snapshot, dataset, {f.path: row for f, row in zip(fragments, rows)}, columns=None,
                       filter=None, readahead=4)
    fetched = fetch_each(fs, [f.path for f, row in zip(fragments, rows) if row.size <= _WHOLE_FILE], ahead=_WINDOW,
                         objects=reading.fetch_through)
    try:
        for fragment, row in zip(fragments, rows):
            if row.size <= _WHOLE_FILE:
                with deadline.deadline(table.storage_options.timeout_seconds,
                                       f"read of {row.path} of {table.uri.table_path}"):
                    whole = reading.whole(next(fetched))  # fetched again after a transient failure
                fragment = fmt.make_fragment(whole, partition_expression=fragment.partition_expression)
            one = ds.FileSystemDataset([fragment], dataset.schema, fmt, fs)
            try:
                read = _read(table, snapshot, lambda: one.to_table(columns=None if columns is None else list(columns)))
            except CorruptDataError as exc:
                raise CorruptDataError(f"{row.path}: {exc}") from exc.__cause__
            read = layout.logical_table(read, logical_columns)
            if row.deletion_vector is None:
                yield read, None
                continue
            deleted = _deleted_rows(table.uri, fs, row)
            mask = surviving(deleted, read.num_rows)
            yield read.filter(mask), pc.indices_nonzero(mask)
    finally:
        fetched.close()


def physical_row_count(uri: TableUri, fs: pafs.FileSystem, add: AddFile) -> int:
    """The rows of ``add``'s data file, deleted ones included: its statistics' ``numRecords``, else its
    Parquet footer (a read of the file's tail)."""
    stats = parse_stats(add.stats)
    if stats is not None and isinstance(stats.num_records, int):
        return stats.num_records
    with fs.open_input_file(_file_path(uri, add.path)) as file:
        return pq.ParquetFile(file).metadata.num_rows


def deleted_rows_of(uri: TableUri, fs: pafs.FileSystem, add: AddFile):
    """The rows the deletion vector of ``add`` deletes (a pyroaring ``BitMap64``; it must have one)."""
    return _deleted_rows(uri, fs, _row(add))


def _deleted_rows(uri: TableUri, fs: pafs.FileSystem, row: _FileRow):
    """The rows the deletion vector of a file deletes (a pyroaring ``BitMap64``)."""
    assert row.deletion_vector is not None

    def read(path: str, offset: int, length: int) -> bytes:
        with fs.open_input_file(_file_path(uri, path)) as file:
            return bytes(file.read_at(length, offset))

    return deleted_rows(row.deletion_vector, read, where=row.path)


def _surviving_batches(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[_FileRow],
                       fs: pafs.FileSystem, *, columns: Sequence[str] | None = None,
                       filter: pc.Expression | None = None, readahead: int = 4,
                       objects: ObjectStore | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of files with deletion vectors that the vectors keep (and ``filter`` selects; ``columns``
    only, if given), batch by batch, in the table's schema: pyarrow scans decode the files (several at
    once, on its threads) and hand back each file's batches in order, so a row's position in its file is
    known; each batch is cut by its file's vector as it comes. The vectors are fetched while the files
    are (:func:`_vector_fetches`: one read per vector file); with ``objects``, files of up to
    ``_WHOLE_FILE`` bytes are fetched whole through it, a window ahead (:func:`fetched_windows`), as
    :func:`to_pyarrow_table` fetches files without vectors. Memory: the vectors, and the scans'
    read-ahead, never a file's rows."""
    if not rows:
        return
    dataset = _files_dataset(uri, schema, partition_columns, rows, fs, with_stats=False)
    # The filter is applied after the vector (it would change positions), so it needs every column.
    names = list(columns) if columns is not None and filter is None else schema.names
    with concurrent.futures.ThreadPoolExecutor(max_workers=_VECTOR_FETCHES) as pool:
        vectors = _vector_fetches(uri, fs, rows, pool)
        positions = [0] * len(rows)
        first = 0  # index in ``rows`` of the window's first file
        for window in fetched_windows(uri, dataset, rows, objects):  # type: ignore[arg-type]
            scanner = window.scanner(columns=[*names, _FRAGMENT], use_threads=True, fragment_readahead=readahead,
                                     batch_readahead=_STREAM_BATCHES if readahead == 1 else 16)
            for batch in scanner.to_batches():
                if not batch.num_rows:
                    continue
                fragment = first + batch.column(len(names))[0].as_py()
                batch = batch.drop_columns([_FRAGMENT])
                count, position, dead = batch.num_rows, positions[fragment], vectors[fragment]()
                positions[fragment] = position + count
                low, high = np.searchsorted(dead, position), np.searchsorted(dead, position + count)
                if low < high:
                    keep = np.ones(count, dtype=bool)
                    keep[dead[low:high] - position] = False
                    batch = batch.filter(pa.array(keep))
                if filter is not None:
                    batch = batch.filter(filter)
                    if columns is not None:
                        batch = batch.select(list(columns))
                if batch.num_rows:
                    yield batch
            first += len(list(window.get_fragments()))


def _vector_fetches(uri: TableUri, fs: pafs.FileSystem, rows: Sequence[_FileRow],
                    pool: concurrent.futures.Executor) -> list[Callable[[], np.ndarray]]:
    """For each of ``rows``, a call giving the positions its vector deletes (ascending), fetched on ``pool``
    from now on. The vectors one file holds for many data files (a DELETE writes one file for all the
    vectors it makes) are read in one request per run of them less than ``_VECTOR_GAP`` bytes apart."""
    places: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        try:
            place = stored_at(row.deletion_vector)  # type: ignore[arg-type]
        except ValueError:
            continue  # an unusable descriptor: deleted_rows reports it when its turn comes
        if place is not None:
            path, offset, length = place
            places.setdefault(path, []).append((offset, offset + length))
    spans: dict[str, list[tuple[int, int]]] = {}
    for path, ranges in places.items():
        merged: list[tuple[int, int]] = []
        for low, high in sorted(ranges):
            if merged and low - merged[-1][1] < _VECTOR_GAP:
                merged[-1] = (merged[-1][0], max(merged[-1][1], high))
            else:
                merged.append((low, high))
        spans[path] = merged

    def fetch(path: str, low: int, high: int) -> tuple[int, bytes]:
        with fs.open_input_file(_file_path(uri, path)) as file:
            return low, bytes(file.read_at(high - low, low))

    fetched = {(path, low): pool.submit(fetch, path, low, high)
               for path, merged in spans.items() for low, high in merged}

    def read(path: str, offset: int, length: int) -> bytes:
        low = max(start for start, _ in spans[path] if start <= offset)
        start, body = fetched[(path, low)].result()
        return body[offset - start:offset - start + length]

    def positions(row: _FileRow) -> np.ndarray:
        return np.asarray(deleted_rows(row.deletion_vector, read, where=row.path).to_array(), dtype=np.int64)

    futures = [pool.submit(positions, row) for row in rows]
    return [functools.partial(_result, future) for future in futures]


def _result(future: concurrent.futures.Future):
    return future.result()


def surviving_batches(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], files: Sequence[AddFile],
                      filesystem: pafs.FileSystem, *, columns: Sequence[str] | None = None,
                      filter: pc.Expression | None = None, objects: ObjectStore | None = None
                      ) -> Iterator[pa.RecordBatch]:
    """The rows the deletion vectors of ``files`` (add actions with a vector, of a table without column
    mapping) keep, streamed batch by batch as :func:`to_pyarrow_reader` streams them (Spark's read tasks);
    ``objects``: the table's object store, to fetch small files whole through it."""
    return _surviving_batches(uri, schema, partition_columns, [_row(add) for add in files], filesystem,
                              columns=columns, filter=filter, objects=objects)


_VECTOR_GAP = 1024 * 1024
"""Vectors of one file fewer bytes apart than this are read in one request (the bytes between them too)."""

_VECTOR_FETCHES = 16
"""Deletion vector reads (one small ranged GET each) under way at once."""

_STREAM_BATCHES = 4
"""Batches a stream of big files decodes ahead of its consumer."""

_FRAGMENT = "__fragment_index"
"""The scan's own column naming the fragment (file) a batch comes from."""


def _snapshot(table: _Readable) -> Snapshot:
    snapshot = table.snapshot
    if snapshot is None:
        raise TableNotFoundError(f"no table at {table.uri.table_path} yet: nothing has been written to it")
    return snapshot


def _dataset(table: _Readable, snapshot: Snapshot, filesystem: pafs.FileSystem | None, *,
             with_stats: bool) -> ds.Dataset:
    fs = filesystem if filesystem is not None else filesystem_for(table.uri, table.storage_options)
    return _dataset_of(table.uri, snapshot.schema, snapshot.partition_columns, _file_rows(snapshot), fs,
                       with_stats=with_stats)


def _fragments(schema: pa.Schema, partition_columns: Sequence[str], files: Sequence[_FileRow], paths: list[str],
               fmt: ds.ParquetFileFormat, fs: pafs.FileSystem, *, with_stats: bool) -> list[ds.Fragment]:
    """One fragment per file, its ``partition_expression`` the guarantee of the module docstring."""
    partition_fields = [schema.field(c) for c in partition_columns]
    data_schema = _stats_schema(schema, partition_columns) if with_stats else None
    return [
        fmt.make_fragment(path, filesystem=fs, file_size=add.size,
                          partition_expression=_guarantee(add, partition_fields, data_schema))
        for add, path in zip(files, paths)
    ]


def parquet_format() -> ds.ParquetFileFormat:
    """How data files are decoded: INT96 timestamps (older Spark writers) as microseconds, Delta's unit, so
    that values outside the nanosecond range (year 1, 9999) read instead of overflowing."""
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))


def _stats_schema(schema: pa.Schema, partition_columns: Sequence[str]) -> pa.Schema:
    """The columns whose statistics a file's guarantee may use: the data columns, except those widened by
    type widening (marked by ``table.log.schema.delta_to_arrow``): files written before the change keep
    statistics of the older type (a float's ``3.4`` is not the double the file's value reads as)."""
    partitions = set(partition_columns)
    return pa.schema([f for f in schema if f.name not in partitions
                      and TYPE_CHANGES.encode() not in (f.metadata or {})])


def _file_path(uri: TableUri, path: str) -> str:
    """The filesystem path (``bucket/key``) of an ``add.path``: relative to the table root and
    URI-encoded, or (shallow clones, some writers) an absolute URI in the same store."""
    if "://" in path:
        scheme, _, rest = path.partition("://")
        if scheme not in ("s3", "s3a", "s3n", uri.scheme):
            raise UnsupportedFeatureError(f"data file {path!r} of table {uri.table_path} is not in S3; dynacommit "
                                          f"reads only S3 tables", feature="data files outside S3")
        return unquote(rest)
    return data_path(uri, uri.key(unquote(path)))


def _guarantee(add: _FileRow, partition_fields: list[pa.Field], data_schema: pa.Schema | None) -> pc.Expression:
    """``p == value and is_null(q) ...`` and, with ``data_schema``, what the stats prove: true for every
    row of the file, typed as the table says."""
    terms = []
    for field in partition_fields:
        delta_type = arrow_type_to_delta(field.type, column=field.name)
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
