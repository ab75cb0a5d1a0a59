"""The rows of files with deletion vectors that their vectors keep, streamed batch by batch.

pyarrow has no scan that drops rows by position, so files with a vector are scanned in order, each
batch cut by its file's vector as it comes; the vectors are fetched meanwhile, the many a DELETE stores
in one file in a few ranged reads. Memory is the vectors and the scans' read-ahead, never a file's rows.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from logstore import ObjectStore, TableUri
from table.data.deletion_vectors import deleted_rows, stored_at
from table.data.fetching import STREAM_BATCHES, fetched_windows
from table.data.fragments import FileRow, file_path, file_row, plain_dataset
from table.data.stats import parse_stats
from table.log.actions import AddFile

__all__ = ["deleted_in", "deleted_rows_of", "physical_row_count", "surviving_batches", "surviving_rows"]


def physical_row_count(uri: TableUri, fs: pafs.FileSystem, add: AddFile) -> int:
    """The rows of ``add``'s data file, deleted ones included: its statistics' ``numRecords``, else its
    Parquet footer (a read of the file's tail)."""
    stats = parse_stats(add.stats)
    if stats is not None and isinstance(stats.num_records, int):
        return stats.num_records
    with fs.open_input_file(file_path(uri, add.path)) as file:
        return pq.ParquetFile(file).metadata.num_rows


def deleted_rows_of(uri: TableUri, fs: pafs.FileSystem, add: AddFile):
    """The rows the deletion vector of ``add`` deletes (a pyroaring ``BitMap64``; it must have one)."""
    return deleted_in(uri, fs, file_row(add))


def deleted_in(uri: TableUri, fs: pafs.FileSystem, row: FileRow):
    """The rows the deletion vector of a file deletes (a pyroaring ``BitMap64``)."""
    assert row.deletion_vector is not None

    def read(path: str, offset: int, length: int) -> bytes:
        with fs.open_input_file(file_path(uri, path)) as file:
            return bytes(file.read_at(length, offset))

    return deleted_rows(row.deletion_vector, read, where=row.path)


def surviving_batches(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], files: Sequence[AddFile],
                      filesystem: pafs.FileSystem, *, columns: Sequence[str] | None = None,
                      filter: pc.Expression | None = None, objects: ObjectStore | None = None
                      ) -> Iterator[pa.RecordBatch]:
    """The rows the deletion vectors of ``files`` (add actions with a vector, of a table without column
    mapping) keep, streamed batch by batch as :func:`to_pyarrow_reader` streams them (Spark's read tasks);
    ``objects``: the table's object store, to fetch small files whole through it."""
    return surviving_rows(uri, schema, partition_columns, [file_row(add) for add in files], filesystem,
                          columns=columns, filter=filter, objects=objects)


def surviving_rows(uri: TableUri, schema: pa.Schema, partition_columns: Sequence[str], rows: Sequence[FileRow],
                   fs: pafs.FileSystem, *, columns: Sequence[str] | None = None,
                   filter: pc.Expression | None = None, readahead: int = 4,
                   objects: ObjectStore | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of files with deletion vectors that the vectors keep (and ``filter`` selects; ``columns``
    only, if given), batch by batch, in the table's schema: pyarrow scans decode the files (several at
    once, on its threads) and hand back each file's batches in order, so a row's position in its file is
    known; each batch is cut by its file's vector as it comes. The vectors are fetched while the files
    are (:func:`_vector_fetches`: one read per vector file); with ``objects``, files of up to
    ``WHOLE_FILE`` bytes are fetched whole through it, a window ahead (:func:`fetched_windows`), as
    :func:`to_pyarrow_table` fetches files without vectors. Memory: the vectors, and the scans'
    read-ahead, never a file's rows."""
    if not rows:
        return
    dataset = plain_dataset(uri, schema, partition_columns, rows, fs, with_stats=False)
    # The filter is applied after the vector (it would change positions), so it needs every column.
    names = list(columns) if columns is not None and filter is None else schema.names
    with concurrent.futures.ThreadPoolExecutor(max_workers=_VECTOR_FETCHES) as pool:
        vectors = _vector_fetches(uri, fs, rows, pool)
        positions = [0] * len(rows)
        first = 0  # index in ``rows`` of the window's first file
        for window in fetched_windows(uri, dataset, rows, objects):  # type: ignore[arg-type]
            scanner = window.scanner(columns=[*names, _FRAGMENT], use_threads=True, fragment_readahead=readahead,
                                     batch_readahead=STREAM_BATCHES if readahead == 1 else 16)
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


def _vector_fetches(uri: TableUri, fs: pafs.FileSystem, rows: Sequence[FileRow],
                    pool: concurrent.futures.Executor) -> list[Callable[[], np.ndarray]]:
    """For each of ``rows``, a call giving the positions its vector deletes (ascending), fetched on ``pool``
    from now on. The vectors one file holds for many data files (a DELETE writes one file for all the
    vectors it makes) are read in one request per run of them less than ``VECTOR_GAP`` bytes apart."""
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
            if merged and low - merged[-1][1] < VECTOR_GAP:
                merged[-1] = (merged[-1][0], max(merged[-1][1], high))
            else:
                merged.append((low, high))
        spans[path] = merged

    def fetch(path: str, low: int, high: int) -> tuple[int, bytes]:
        with fs.open_input_file(file_path(uri, path)) as file:
            return low, bytes(file.read_at(high - low, low))

    fetched = {(path, low): pool.submit(fetch, path, low, high)
               for path, merged in spans.items() for low, high in merged}

    def read(path: str, offset: int, length: int) -> bytes:
        low = max(start for start, _ in spans[path] if start <= offset)
        start, body = fetched[(path, low)].result()
        return body[offset - start:offset - start + length]

    def positions(row: FileRow) -> np.ndarray:
        return np.asarray(deleted_rows(row.deletion_vector, read, where=row.path).to_array(), dtype=np.int64)

    futures = [pool.submit(positions, row) for row in rows]
    return [functools.partial(_result, future) for future in futures]


def _result(future: concurrent.futures.Future):
    return future.result()


VECTOR_GAP = 1024 * 1024
"""Vectors of one file fewer bytes apart than this are read in one request (the bytes between them too)."""


_VECTOR_FETCHES = 16
"""Deletion vector reads (one small ranged GET each) under way at once."""


_FRAGMENT = "__fragment_index"
"""The scan's own column naming the fragment (file) a batch comes from."""
