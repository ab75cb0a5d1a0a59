"""pyarrow filesystems for a table's data files, and the file-like sink that stages them.

Readers hand pyarrow the exact list of files a snapshot references, so all they need from a filesystem
is to open objects by ``bucket/key``. For ``s3://`` and ``s3a://`` tables that is pyarrow's own
:class:`pyarrow.fs.S3FileSystem`, configured from :class:`~logstore.options.StorageOptions` so that one
``storage_options`` dict configures commits, reads and delta-rs alike. For a scheme registered with
``logstore.register_scheme`` (the tests' in-process ``memory://``) it is :class:`MemoryFileSystemHandler`,
a :class:`pyarrow.fs.PyFileSystem` handler over the :class:`~logstore.objects.ObjectStore` that the log
store writes to.

Paths given to these filesystems are ``bucket/key``, as pyarrow's S3 filesystem expects.

Reading a table of small files is bound by each request's latency, not by bandwidth: :func:`fetch_whole`
fetches such files whole, many at once on a pool of the process's own (pyarrow's I/O pool is shared by
the whole process and has 8 threads by default), for the reader to decode from memory. Given the table's
:class:`~logstore.objects.ObjectStore` (``objects``), a file of its bucket is one GET through the log
store's clients (logstore/lean.py); through a pyarrow filesystem, which opens an S3 object by path only,
it is a HEAD and a GET.

Writing goes the other way round: :class:`MultipartSink` is the file object a Parquet writer streams
into, backed by an incomplete multipart upload (see :mod:`table.data.staging`).
"""

from __future__ import annotations

import contextvars
import functools
import io
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from typing import NamedTuple, TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from logstore import DynacommitError, ObjectStore, Part, StorageOptions, TableUri, deadline, open_object_store, pool
from table.buffers import arrow_buffer

__all__ = ["Fetched", "MemoryFileSystemHandler", "MultipartSink", "arrow_buffer", "data_path", "fetch_each", "fetch_one",
           "fetch_whole", "filesystem_for", "s3_filesystem"]


def filesystem_for(uri: TableUri, options: StorageOptions | dict[str, str] | None = None) -> pafs.FileSystem:
    """The pyarrow filesystem that reads the data files of the table at ``uri``."""
    if uri.scheme not in ("s3", "s3a"):  # a registered scheme (logstore/schemes.py): read through its store
        return pafs.PyFileSystem(MemoryFileSystemHandler(open_object_store(uri, storage_options=options)))
    return s3_filesystem(StorageOptions.resolve(options))


@functools.lru_cache(maxsize=32)
def s3_filesystem(options: StorageOptions) -> pafs.S3FileSystem:
    """pyarrow's S3 filesystem with ``options``' region, endpoint and credentials, one per process and
    options (its client and connection pool are reused by every read, as the log store's clients are).

    Credentials left unset fall back to pyarrow's own chain (environment, profile, instance metadata),
    the same chain boto3 uses for the log store; that chain refreshes expiring credentials itself.
    """
    kwargs: dict[str, object] = {"region": options.region}
    if options.access_key_id and options.secret_access_key:
        kwargs.update(access_key=options.access_key_id, secret_key=options.secret_access_key,
                      session_token=options.session_token)
    if options.endpoint_url:
        # pyarrow wants the host (and port) and the scheme apart; a path in the endpoint is not supported
        # by S3-compatible stores we know of, so it is kept as part of the override, as given.
        parts = urlsplit(options.endpoint_url)
        kwargs.update(endpoint_override=parts.netloc + parts.path.rstrip("/"), scheme=parts.scheme)
    return pafs.S3FileSystem(**kwargs)


def data_path(uri: TableUri, key: str) -> str:
    """The filesystem path (``bucket/key``) of the object ``key`` of the table's bucket."""
    return f"{uri.bucket}/{key}"


FETCH_THREADS = 32
"""Threads fetching whole small files for every reader of the process."""


class Fetched(NamedTuple):
    """One file fetched whole by :func:`fetch_each`: its ``path``, the size its store announced (``announced``,
    what a HEAD said), and what came back: the ``buffer`` or the ``error``. A buffer shorter than
    ``announced`` is a response cut short."""

    path: str
    announced: int | None
    buffer: pa.Buffer | None
    error: Exception | None


def fetch_each(filesystem: pafs.FileSystem, paths: Sequence[str], *, ahead: int,
               objects: ObjectStore | None = None) -> Iterator[Fetched]:
    """Each of ``paths`` (``bucket/key``), in order, read whole into memory; a failure is handed over as a
    :class:`Fetched` like a success, so the caller can fetch that file again and go on. With ``objects``,
    the files of its bucket are fetched through it (:func:`fetch_one`).

    Up to ``ahead`` files are under way at once on a pool shared by every reader of the process, so the
    memory held is bounded by ``ahead`` files beyond the one the caller holds: callers pass only small
    files. Files not yet reached when the caller stops are not fetched. The fetches run in the caller's
    context: under its deadline.
    """
    pending: deque[Future[Fetched]] = deque()
    remaining = iter(paths)

    def submit(path: str) -> None:
        pending.append(_FETCH_POOL.submit(contextvars.copy_context().run, fetch_one, filesystem, path, objects))

    try:
        for path in remaining:
            submit(path)
            if len(pending) >= max(1, ahead):
                break
        while pending:
            fetched = pending.popleft().result()
            for path in remaining:  # one more under way for each one handed over
                submit(path)
                break
            yield fetched
    finally:
        for future in pending:
            future.cancel()


def fetch_whole(filesystem: pafs.FileSystem, paths: Sequence[str], *, ahead: int,
                objects: ObjectStore | None = None) -> Iterator[pa.Buffer]:
    """:func:`fetch_each`'s buffers; a failed fetch is raised when its turn comes."""
    for fetched in fetch_each(filesystem, paths, ahead=ahead, objects=objects):
        if fetched.error is not None:
            raise fetched.error
        yield fetched.buffer


def fetch_one(filesystem: pafs.FileSystem, path: str, objects: ObjectStore | None = None) -> Fetched:
    """``path`` read whole, as a :class:`Fetched` (never raises for an I/O error or a storage error).

    With ``objects`` and a path in its bucket: one GET of the whole object through it (its client checks
    that the body has the length announced, and retries what fails transiently), ``announced`` being the
    length received. Otherwise through ``filesystem``: pyarrow's Python API opens an S3 object by path only,
    so that is a HEAD then one GET of the whole object, on this pool, not on pyarrow's I/O pool."""
    if objects is not None and path.startswith(objects.bucket + "/"):
        try:
            body = objects.get(path[len(objects.bucket) + 1:])
        except (OSError, DynacommitError) as exc:
            return Fetched(path, None, None, exc)
        return Fetched(path, len(body), arrow_buffer(body), None)
    try:
        with filesystem.open_input_file(path) as file:
            announced = file.size()
            return Fetched(path, announced, file.read_buffer(), None)
    except (OSError, pa.ArrowException) as exc:
        return Fetched(path, None, None, exc)


_FETCH_POOL = pool.Pool(FETCH_THREADS, "dynacommit-fetch")

T = TypeVar("T")

ARROW_THREADS = 8
"""Threads running pyarrow reads under a deadline (:func:`within_deadline`) for every reader of the process."""


def within_deadline(read: Callable[[], T]) -> T:
    """``read()``, a pyarrow read, returned only if it ends before the current deadline (logstore/deadline.py).

    pyarrow's S3 client does not know the operation's deadline: it retries and waits on its own, and on
    Linux has no read timeout. So under a deadline the read runs on a thread of its own while the caller
    waits no longer than the deadline allows; past it, :class:`~logstore.errors.DeadlineExceededError` is
    raised (a read changes nothing, so nothing is left to clean up) and the read, which cannot be
    interrupted, runs to its end in the background, its result dropped. Without a deadline it runs here."""
    found = deadline.current()
    if found is None or _guarded.get():  # no deadline, or already on the pool: a read within a read
        return read()
    deadline.check()
    future = _ARROW_POOL.submit(_guarded_run, read)
    wait([future], timeout=max(0.0, found.remaining()))
    if not future.done():
        future.cancel()  # not started yet (the pool busy): it never will be
        raise found.error()
    return future.result()


def _guarded_run(read: Callable[[], T]) -> T:
    _guarded.set(True)  # in the task's own copy of the caller's context
    return read()


_guarded: contextvars.ContextVar[bool] = contextvars.ContextVar("dynacommit_arrow_guarded", default=False)
_ARROW_POOL = pool.Pool(ARROW_THREADS, "dynacommit-arrow")


class MemoryFileSystemHandler(pafs.FileSystemHandler):
    """A pyarrow filesystem over one :class:`ObjectStore` bucket, with S3's flat-keyspace semantics.

    Directories do not exist as objects: a "directory" is any prefix of a key, creating one is a
    no-op, and listing a directory lists the keys under it, as pyarrow's S3 filesystem does.
    """

    def __init__(self, objects: ObjectStore):
        self.objects = objects

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemoryFileSystemHandler) and other.objects is self.objects

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return "dynacommit-memory"

    def normalize_path(self, path: str) -> str:
        return path.strip("/")

    def _key(self, path: str) -> str:
        bucket, _, key = self.normalize_path(path).partition("/")
        if bucket != self.objects.bucket:
            raise FileNotFoundError(f"{path}: this filesystem holds only bucket {self.objects.bucket!r}")
        return key

    def _info(self, path: str) -> pafs.FileInfo:
        key = self._key(path)
        if not key:
            return pafs.FileInfo(self.normalize_path(path), pafs.FileType.Directory)
        found = self.objects.head(key)
        if found is not None:
            return pafs.FileInfo(self.normalize_path(path), pafs.FileType.File, size=found.size,
                                 mtime_ns=found.last_modified_ms * 1_000_000)
        if next(iter(self.objects.list(key.rstrip("/") + "/")), None) is not None:
            return pafs.FileInfo(self.normalize_path(path), pafs.FileType.Directory)
        return pafs.FileInfo(self.normalize_path(path), pafs.FileType.NotFound)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        base = self._key(selector.base_dir).rstrip("/")
        prefix = base + "/" if base else ""
        bucket = self.objects.bucket
        infos: dict[str, pafs.FileInfo] = {}
        for obj in self.objects.list(prefix):
            rest = obj.key[len(prefix):].split("/")
            # every intermediate prefix is a directory entry; recursion decides how deep to report
            depth = len(rest) if selector.recursive else 1
            for level in range(1, min(depth, len(rest) - 1) + 1):
                sub = f"{bucket}/{prefix}" + "/".join(rest[:level])
                infos.setdefault(sub, pafs.FileInfo(sub, pafs.FileType.Directory))
            if selector.recursive or len(rest) == 1:
                infos[f"{bucket}/{obj.key}"] = pafs.FileInfo(
                    f"{bucket}/{obj.key}", pafs.FileType.File, size=obj.size,
                    mtime_ns=obj.last_modified_ms * 1_000_000)
        if not infos and base and not selector.allow_not_found:
            raise FileNotFoundError(f"{selector.base_dir} does not exist")
        return list(infos.values())

    def create_dir(self, path: str, recursive: bool) -> None:
        """Directories are implicit in a keyspace: nothing to create."""

    def delete_dir(self, path: str) -> None:
        self.delete_dir_contents(path, missing_dir_ok=False)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        prefix = self._key(path).rstrip("/") + "/"
        keys = [o.key for o in self.objects.list(prefix)]
        if not keys and not missing_dir_ok:
            raise FileNotFoundError(f"{path} does not exist")
        self.objects.delete(keys)

    def delete_root_dir_contents(self) -> None:
        self.objects.delete([o.key for o in self.objects.list("")])

    def delete_file(self, path: str) -> None:
        key = self._key(path)
        if self.objects.head(key) is None:
            raise FileNotFoundError(f"{path} does not exist")
        self.objects.delete([key])

    def move(self, src: str, dest: str) -> None:
        self.copy_file(src, dest)
        self.objects.delete([self._key(src)])

    def copy_file(self, src: str, dest: str) -> None:
        self.objects.put(self._key(dest), self.objects.get(self._key(src)))

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self.objects.get(self._key(path)))

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self.objects.get(self._key(path)))

    def open_output_stream(self, path: str, metadata: dict | None = None) -> pa.NativeFile:
        return pa.PythonFile(_PutOnClose(self.objects, self._key(path)), mode="w")

    def open_append_stream(self, path: str, metadata: dict | None = None) -> pa.NativeFile:
        key = self._key(path)
        existing = self.objects.get(key) if self.objects.head(key) is not None else b""
        return pa.PythonFile(_PutOnClose(self.objects, key, existing), mode="w")


class _PutOnClose:
    """A writable file that PUTs its whole content as one object when closed (objects appear whole)."""

    def __init__(self, objects: ObjectStore, key: str, initial: bytes = b""):
        self._objects = objects
        self._key = key
        self._buffer = bytearray(initial)
        self.closed = False

    def write(self, data: bytes) -> int:
        self._buffer += data
        return len(data)

    def tell(self) -> int:
        return len(self._buffer)

    def flush(self) -> None:
        """Nothing reaches the store before close."""

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._objects.put(self._key, bytes(self._buffer))


class MultipartSink(io.RawIOBase):
    """A write-only file that streams into an S3 multipart upload it never completes.

    Each time ``part_size`` bytes are buffered they go up as the next part, in the background: up to
    ``max_inflight`` parts are uploading at once (on a thread pool shared by every sink of the process)
    while the writer goes on producing the next, so memory stays bounded by ``max_inflight + 1`` parts.
    :meth:`finish` uploads the rest as the last part (S3 lets only the last part be smaller than 5 MiB),
    waits for every part and returns them in order; completing the upload is the job committer's
    business. A failed part upload is raised by the next :meth:`write` or :meth:`finish`. The upload is
    created on construction, so whoever holds the sink can always abort it, except with ``hold_small``:
    then it is created when the first part fills, and a smaller file is only ever held in memory.
    """

    def __init__(self, objects: ObjectStore, key: str, *, part_size: int, max_inflight: int = 4,
                 hold_small: bool = False):
        super().__init__()
        self.objects = objects
        self.key = key
        self.part_size = part_size
        self.max_inflight = max(1, max_inflight)
        #: An earlier, unanswered attempt of the create may have started another upload of ``key``.
        self.create_retried = False
        self.upload_id = ""
        #: With ``hold_small``, a file that never fills a part is not uploaded: :meth:`finish` leaves its
        #: bytes here (for a job in this process, which PUTs them at job commit: one request, not three).
        self.held: bytes | None = None
        self._hold_small = hold_small
        if not hold_small:
            self._start()
        self.parts: list[Part] = []
        self._inflight: deque[tuple[int, Future[str]]] = deque()
        self._next_number = 1
        # What the writer handed over since the last part, as given: a part is joined from these once
        # (one copy of its bytes), never grown in and then sliced out of one buffer (three copies).
        self._pieces: deque[bytes] = deque()
        self._buffered = 0
        self._written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        size = len(data)
        # pyarrow hands over a fresh bytes object per write: kept as it is. Anything mutable is copied,
        # since the caller may reuse it.
        self._pieces.append(data if isinstance(data, bytes) else bytes(data))
        self._buffered += size
        self._written += size
        while self._buffered >= self.part_size:
            self._upload(self._take(self.part_size))
        return size

    def _take(self, size: int) -> bytes:
        """The first ``size`` buffered bytes as one bytes object; the rest stays buffered."""
        taken, count = [], 0
        while count < size:
            piece = self._pieces.popleft()
            if count + len(piece) > size:  # split the piece that crosses the part's end
                keep = size - count
                self._pieces.appendleft(piece[keep:])
                piece = piece[:keep]
            taken.append(piece)
            count += len(piece)
        self._buffered -= size
        return taken[0] if len(taken) == 1 else b"".join(taken)

    def _take_all(self) -> bytes:
        return self._take(self._buffered) if self._buffered else b""

    def tell(self) -> int:
        return self._written

    def _start(self) -> None:
        started = self.objects.create_upload(self.key)
        self.upload_id = started.upload_id
        self.create_retried = started.retried

    def _upload(self, chunk: bytes) -> None:
        if not self.upload_id:
            self._start()
        while len(self._inflight) >= self.max_inflight:
            self._collect_oldest()
        number, self._next_number = self._next_number, self._next_number + 1
        self._inflight.append((number, _PART_POOL.submit(self.objects.upload_part, self.key, self.upload_id,
                                                           number, chunk)))

    def _collect_oldest(self) -> None:
        number, future = self._inflight.popleft()
        self.parts.append(Part(number, future.result()))

    def finish(self) -> list[Part]:
        """Upload what is buffered as the last part and wait for every part; the upload stays incomplete.
        Returns every part, in order."""
        if self._hold_small and not self.upload_id:
            self.held = self._take_all()
            self.close()
            return []
        if self._buffered or self._next_number == 1:
            self._upload(self._take_all())
        while self._inflight:
            self._collect_oldest()
        self.close()
        return list(self.parts)

    def abort(self) -> None:
        """Stop, let the parts under way end (their result no longer matters), abort the upload."""
        self._pieces, self._buffered = deque(), 0
        inflight, self._inflight = list(self._inflight), deque()
        for _, future in inflight:
            future.cancel()
        wait([future for _, future in inflight])
        if self.upload_id:
            with deadline.cleanup(f"aborting upload {self.upload_id} of {self.key}"):  # the deadline may be why
                self.objects.abort_upload(self.key, self.upload_id)
        self.close()


PART_UPLOAD_THREADS = 8
"""Threads uploading parts for every sink of the process (S3 takes many parallel part uploads)."""
_PART_POOL = pool.Pool(PART_UPLOAD_THREADS, "dynacommit-part")
