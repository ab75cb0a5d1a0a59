"""How a read's data files come in: small files fetched whole, a window ahead, and failures retried or
named.

A table of small files (streaming appends, many small jobs) is bound by request latency: the files of at
most ``WHOLE_FILE`` bytes that a read opens are fetched whole, many at once (``fetch_each``), and decoded
from memory, window by window, as fragments with the same guarantee as the files': the result is the one
the dataset gives, only the I/O differs. A failure is retried within the read's deadline when it may be
transient, and otherwise raised as the project's error (a missing file, a corrupt one).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol as TypingProtocol
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from logstore import DynacommitError, ObjectStore, StorageOptions, TableUri, deadline, open_object_store, retry
from logstore.errors import DeadlineExceededError, StorageError
from table.data.files import Fetched, arrow_buffer, fetch_each, fetch_one, filesystem_for, within_deadline
from table.data.fragments import FileRow, buffer_fragment, file_path, file_rows
from table.errors import CorruptDataError, DataFileMissingError
from table.log.actions import AddFile
from table.log.snapshot import Snapshot

__all__ = ["STREAM_BATCHES", "WHOLE_FILE", "WINDOW", "Readable", "Reading", "fetched_windows", "objects_for",
           "read_once", "readahead_for", "retried_read"]

log = logging.getLogger(__name__)


class Readable(TypingProtocol):
    """What reading needs of a :class:`table.table.Table` (kept structural: ``table.table`` imports us)."""

    @property
    def uri(self) -> TableUri: ...

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def storage_options(self) -> StorageOptions: ...


_SMALL_FILE = 8 * 1024 * 1024
_SMALL_FILES_READAHEAD = 32
WHOLE_FILE = 1024 * 1024
"""Files up to this size are fetched whole and decoded from memory."""
WINDOW = 32
"""Files decoded together from memory, while as many are fetched for the next window: at most 64 small
files (64 MiB) are held at once."""


def fetched_windows(uri: TableUri, dataset: ds.Dataset, files: Sequence[AddFile], objects: ObjectStore | None, *,
                    filter: pc.Expression | None = None) -> Iterator[ds.Dataset]:
    """``dataset`` (a :func:`table.data.read.files_dataset` over ``files``) as consecutive datasets of at
    most ``WINDOW`` of the files ``filter`` does not rule out, in order, each file of up to ``WHOLE_FILE``
    bytes (its ``add`` action's size) fetched whole through ``objects``, one GET and no HEAD, a window
    ahead, and decoded from memory. A file whose fetch fails or brings another size than the log's is left to
    pyarrow's own read of it (which raises what is wrong, if anything still is). Without ``objects``, or
    for a dataset that is not one of plain files (deletion vectors, column mapping), ``dataset`` itself.
    Spark's read tasks read their share of the files this way."""
    if objects is None or not isinstance(dataset, ds.FileSystemDataset):
        yield dataset
        return
    sizes = {file_path(uri, add.path): add.size for add in files}
    opened = list(dataset.get_fragments(filter=filter)) if filter is not None else list(dataset.get_fragments())

    def small(fragment: ds.Fragment) -> bool:
        return sizes.get(fragment.path, WHOLE_FILE + 1) <= WHOLE_FILE

    fmt = dataset.format
    fetched = fetch_each(dataset.filesystem, [f.path for f in opened if small(f)], ahead=WINDOW, objects=objects)
    try:
        for start in range(0, len(opened), WINDOW):
            window = []
            for fragment in opened[start:start + WINDOW]:
                if small(fragment):
                    got = next(fetched)
                    if got.error is None and got.buffer.size == got.announced == sizes[fragment.path]:
                        fragment = buffer_fragment(fmt, got.buffer, dataset.schema, fragment.partition_expression)
                window.append(fragment)
            yield ds.FileSystemDataset(window, dataset.schema, fmt, dataset.filesystem)
    finally:
        fetched.close()


class Reading:
    """The rows of the ``opened`` fragments of ``dataset`` (those the filter does not rule out), as
    ``dataset.to_table`` gives them: in ``WINDOW``s of consecutive fragments, each small file's replaced by
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

    def __init__(self, table: Readable, snapshot: Snapshot, dataset: ds.FileSystemDataset,
                 files: Mapping[str, FileRow], *, columns: list[str] | None, filter: pc.Expression | None,
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
        small = [f.path for f in opened if self.files[f.path].size <= WHOLE_FILE]
        fetched = fetch_each(self.dataset.filesystem, small, ahead=WINDOW, objects=self.fetch_through)
        tables = []
        try:
            for start in range(0, len(opened), WINDOW):
                window = list(opened[start:start + WINDOW])
                buffers = {f.path: self.whole(next(fetched)) for f in window if self.files[f.path].size <= WHOLE_FILE}
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

    def _fetch_problem(self, fetched: Fetched, row: FileRow) -> str:
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
        fragments = [buffer_fragment(fmt, buffers[f.path], self.dataset.schema, f.partition_expression)
                     if f.path in buffers else f for f in window]
        part = ds.FileSystemDataset(fragments, self.dataset.schema, fmt, self.dataset.filesystem)
        attempt = 0
        while True:
            try:
                return within_deadline(lambda: part.to_table(columns=self.columns, filter=self.filter,
                                                             fragment_readahead=self.readahead))
            except DeadlineExceededError:
                raise  # a TimeoutError, so an OSError, but not the network's: the read's time is up
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
                fragment = buffer_fragment(self.dataset.format, arrow_buffer(body), schema,
                                           original.partition_expression)
            try:
                fragment.to_table(schema=schema)
            except pa.ArrowInvalid as alone:
                raise self._corrupt(f"{original.path}: {alone}") from error

    def _clean_body(self, row: FileRow) -> bytes:
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

    def _check_object(self, row: FileRow) -> None:
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
        log.info("reading %s at version %d: %s: %s; reading it again", self.table.uri.table_path,
                 self.snapshot.version, what, problem)
        if not retry.RELOAD.wait(attempt + 1):
            found = deadline.current()
            raise StorageError(
                f"reading the data of table {self.table.uri.table_path} at version {self.snapshot.version} failed: "
                f"{what}: {problem} (tried {attempt + 1} times within "
                f"{found.seconds if found is not None else 0:g} s); nothing is wrong with the table's files as far "
                f"as could be seen: retry later", operation="s3:GetObject", retryable=True)

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


def _fetch_through(table: Readable, fs: pafs.FileSystem) -> bool:
    """Whether small files are fetched whole through the table's own object store (one GET each, no HEAD):
    when ``fs`` is the table's own S3 filesystem; not (through ``fs``, a HEAD and a GET) when the caller gave
    another filesystem."""
    return table.uri.scheme in ("s3", "s3a") and fs.equals(filesystem_for(table.uri, table.storage_options))


def objects_for(table: Readable, fs: pafs.FileSystem) -> ObjectStore | None:
    """The table's object store when small files are fetched through it (:func:`_fetch_through`), else None."""
    return open_object_store(table.uri, storage_options=table.storage_options) if _fetch_through(table, fs) else None


def readahead_for(snapshot: Snapshot) -> int:
    """How many files a scan reads at once. pyarrow's default (4) suits big files; a table of small files
    (streaming appends, many small jobs) is bound by each GET's latency, so more are read side by side,
    which costs little memory because each is small."""
    sizes = snapshot.state.files.to_arrow()["size"]
    mean = pc.mean(sizes).as_py() if len(sizes) else None
    return _SMALL_FILES_READAHEAD if mean is not None and mean < _SMALL_FILE else 4


def retried_read(table: Readable, snapshot: Snapshot, read: Callable[[], pa.Table]) -> pa.Table:
    """Run a pyarrow read that can be run again, turning its errors into the project's, naming the table and
    version, and running it again after a transient failure (within the deadline, as :class:`Reading`).

    pyarrow reports a missing S3 object as a plain OSError, so on failure the snapshot's files are
    checked (a bounded number of HEADs, on the error path only) to tell a vacuumed file from an outage.
    """
    with deadline.deadline(table.storage_options.timeout_seconds,
                           f"read of {table.uri.table_path} at version {snapshot.version}"):
        return retry.retry(lambda: read_once(table, snapshot, read), policy=retry.RELOAD, level=logging.INFO,
                           retryable=lambda exc: isinstance(exc, StorageError) and exc.retryable,
                           what=f"reading {table.uri.table_path} at version {snapshot.version}")


def read_once(table: Readable, snapshot: Snapshot, read: Callable[[], pa.Table]) -> pa.Table:
    try:
        return within_deadline(read)
    except DeadlineExceededError:
        raise  # a TimeoutError, so an OSError, but not the network's: the read's time is up
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


def _first_missing(table: Readable, snapshot: Snapshot) -> str | None:
    objects = open_object_store(table.uri, storage_options=table.storage_options)
    for add in file_rows(snapshot)[:_MISSING_CHECK_LIMIT]:
        if "://" not in add.path:
            try:
                if objects.head(table.uri.key(unquote(add.path))) is None:
                    return add.path
            except (DynacommitError, OSError):
                return None
    return None


STREAM_BATCHES = 4
"""Batches a stream of big files decodes ahead of its consumer."""
