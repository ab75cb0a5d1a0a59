"""The staging committer's task side: Parquet streamed into multipart uploads that are never completed.

This is the data path of DESIGN.md ("The data path: multipart staging"), after the S3A staging
committer (seeds/s3a-committers-architecture):

1. **Stage.** A task's :class:`StagingWriter` splits its rows by partition, streams each Parquet file
   into an S3 multipart upload of the file's final key, uploads a part each time ``part_size`` bytes are
   buffered, and never completes the upload: no reader can see a byte of it.
2. **Task commit.** :meth:`StagingWriter.finish` returns a :class:`PendingSet` (keys, upload ids, ordered
   part ETags, sizes, row counts, stats, partition values). It is Spark's task result (or, for
   ``write_table``, a local value): plain, frozen, picklable data, not a listing of S3.
3. **Job commit** (:mod:`table.write`): the driver validates every PendingSet (:meth:`PendingSet.validate_for`,
   as the S3A design's security section asks: a tampered file must not commit parts out of order or
   write outside the table), completes all uploads in parallel (:func:`complete_pending`) and commits one
   log entry with their ``add`` actions: the single moment of visibility.
4. **Cleanup.** On a definite failure the job deletes what it completed (:func:`delete_completed`) and
   aborts the rest (:func:`abort_pending`); uploads of attempts whose PendingSet never reached the driver
   are found by the job id in their key (:func:`abort_stray_uploads`).

Keys are ``[partition dirs/]part-{task:05d}-{job_id}-c{n:03d}.snappy.parquet``; partition directories are
Hive-style (``col=value``, value percent-escaped as delta-rs escapes it, ``__HIVE_DEFAULT_PARTITION__``
for null). The ``add`` path is that relative key, URI-encoded (PROTOCOL.md: "relative path ...
URI-encoded"). Nothing here imports pyspark.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from decimal import Decimal
from typing import Any, Literal
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from logstore import DynacommitError, ObjectStore, Part, StorageError, TableUri
from logstore.objects import MemoryObjectStore
from table.actions import AddFile
from table.errors import SchemaMismatchError, UnsupportedTypeError
from table.fs import MultipartSink
from table.schema import arrow_to_delta, delta_to_arrow, partition_value_to_string, schema_diff
from table.stats import compute_stats

__all__ = [
    "MIN_PART_SIZE",
    "PendingSet",
    "PendingSetError",
    "StagedFile",
    "StagedPart",
    "StagingWriter",
    "abort_pending",
    "abort_stray_uploads",
    "complete_pending",
    "data_file_name",
    "delete_completed",
    "encode_path",
    "partition_dir",
    "validate_pendingsets",
]

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB
"""S3's minimum size of every part of a multipart upload but the last."""
MAX_PARTS = 10_000
"""S3's maximum number of parts of one upload."""
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_ETAG = re.compile(r'^(?:"[0-9a-fA-F]{16,64}(?:-[0-9]{1,5})?"|[0-9a-fA-F]{16,64}(?:-[0-9]{1,5})?)$')
_TIMESTAMP_STAT = re.compile(r"^(-?\d+)-(\d+)-(\d+)[T ](\d+):(\d+):(\d+)(?:\.(\d+))?Z?$")
_FILE_NAME = re.compile(r"^part-(\d{5,})-(.+)-c(\d{3,})\.snappy\.parquet$")


# --- names ------------------------------------------------------------------------------------------


def escape_path_name(text: str) -> str:
    """Escape a partition column name or value for a directory name as delta-rs does: every character
    but RFC 3986's unreserved ones (letters, digits, ``-._~``) becomes ``%XX`` of its UTF-8 bytes.

    Spark escapes fewer characters (Hive's list: ``/``, ``=``, ``%``, ``:`` ...), and readers that go by
    the ``add`` path accept either; but some (polars) turn the decoded path back into a URL, which
    only finds the object when the key needs no further escaping, as delta-rs's keys do.
    """
    return quote(text, safe="-._~")


def partition_dir(partition_columns: Sequence[str], values: dict[str, str | None]) -> str:
    """``col=value/...`` for serialized partition values, in table order ("" for an unpartitioned table)."""
    return "".join(
        f"{escape_path_name(col)}={HIVE_NULL if values[col] is None else escape_path_name(values[col])}/"
        for col in partition_columns
    )


def data_file_name(task_id: int, job_id: str, counter: int) -> str:
    return f"part-{task_id:05d}-{job_id}-c{counter:03d}.snappy.parquet"


def encode_path(relative: str) -> str:
    """The ``add.path`` of a key relative to the table root: URI-encoded, ``/`` and ``=`` kept.

    Escaping already turned a value's ``%`` into ``%25`` in the key, so the path holds ``%2525``; a
    reader decodes the path once to get the key back (delta-rs writes the same).
    """
    return quote(relative, safe="/=")


def check_job_id(job_id: str) -> str:
    """A job id goes into every key: letters, digits, ``-`` and ``_`` only."""
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise ValueError(f"job id {job_id!r} must be 1-128 letters, digits, '-' or '_' (a UUID is typical)")
    return job_id


# --- the PendingSet ---------------------------------------------------------------------------------


class PendingSetError(DynacommitError, ValueError):
    """A PendingSet is malformed or does not belong to this job and table; ``field`` names what is wrong.

    Raised before anything is completed, so nothing of the job became visible. A PendingSet can only be
    this wrong through a bug or tampering (seeds/s3a-committers-architecture, "Security").
    """

    def __init__(self, message: str, *, field: str):
        super().__init__(f"invalid PendingSet: {field}: {message}")
        self.field = field
        self.detail = message

    def __reduce__(self):
        return _rebuild_pendingset_error, (self.detail, self.field)


def _rebuild_pendingset_error(message: str, field: str) -> PendingSetError:
    return PendingSetError(message, field=field)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")


class StagedPart(_Record):
    number: int
    etag: str


class StagedFile(_Record):
    """One Parquet file staged as an incomplete multipart upload."""

    path: str = Field(description="relative to the table root, URI-encoded, as in the add action")
    key: str = Field(description="the S3 key the upload will create")
    upload_id: str
    parts: list[StagedPart]
    size: int
    num_records: int
    stats: str
    partition_values: dict[str, str | None]


class PendingSet(_Record):
    """What one task attempt staged: the task result sent to the job committer. Persisted as JSON."""

    format_version: Literal[1] = 1
    table_path: str
    job_id: str
    task_id: int
    attempt_id: int
    files: list[StagedFile]

    @classmethod
    def load(cls, data: str | bytes) -> PendingSet:
        """Parse and type-check the JSON of :meth:`model_dump_json`; raises :class:`PendingSetError`."""
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "(document)"
            raise PendingSetError(f"{err['msg']} ({exc.error_count()} problem(s) in all)", field=field) from None

    def validate_for(self, uri: TableUri, job_id: str, *, partition_columns: Sequence[str] | None = None) -> None:
        """Check that every upload belongs to ``job_id`` under the table at ``uri`` and is well formed.

        Keys lie under the table root (not in ``_delta_log/``), are unique, carry the job and task id,
        and match ``path`` once it is decoded; parts are numbered 1..n in order; ETags look like ETags;
        sizes and counts are >= 0; stats are a JSON object agreeing with ``num_records``. With
        ``partition_columns``, partition values name exactly those columns and match the key's directories.
        Raises :class:`PendingSetError` naming the first offending field.
        """
        if self.table_path != uri.table_path:
            raise PendingSetError(f"{self.table_path!r} is not this table ({uri.table_path!r})", field="table_path")
        if self.job_id != job_id:
            raise PendingSetError(f"{self.job_id!r} is not the committing job ({job_id!r})", field="job_id")
        if self.task_id < 0:
            raise PendingSetError(f"{self.task_id} is negative", field="task_id")
        if self.attempt_id < 0:
            raise PendingSetError(f"{self.attempt_id} is negative", field="attempt_id")
        seen: set[str] = set()
        for index, staged in enumerate(self.files):
            where = f"files[{index}]"
            if staged.key in seen:
                raise PendingSetError(f"key {staged.key!r} appears twice", field=f"{where}.key")
            seen.add(staged.key)
            _validate_file(staged, where, uri, self.job_id, self.task_id, partition_columns)


def _validate_file(staged: StagedFile, where: str, uri: TableUri, job_id: str, task_id: int,
                   partition_columns: Sequence[str] | None) -> None:
    root = uri.key("")
    if not staged.key.startswith(root) or staged.key == root:
        raise PendingSetError(f"{staged.key!r} is not under the table root {root!r}", field=f"{where}.key")
    relative = uri.relative(staged.key)
    segments = relative.split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise PendingSetError(f"{staged.key!r} has an empty, '.' or '..' segment", field=f"{where}.key")
    if segments[0] == "_delta_log":
        raise PendingSetError(f"{staged.key!r} is inside the log directory", field=f"{where}.key")
    name = _FILE_NAME.match(segments[-1])
    if name is None or name.group(2) != job_id or int(name.group(1)) != task_id:
        raise PendingSetError(
            f"file name {segments[-1]!r} is not part-{task_id:05d}-{job_id}-cNNN.snappy.parquet", field=f"{where}.key"
        )
    if staged.path.startswith("/") or "://" in staged.path or unquote(staged.path) != relative:
        raise PendingSetError(f"{staged.path!r} does not decode to the key's relative path {relative!r}",
                              field=f"{where}.path")
    if not staged.upload_id or not staged.upload_id.isprintable() or len(staged.upload_id) > 1024:
        raise PendingSetError("empty, too long or not printable", field=f"{where}.upload_id")
    if not 1 <= len(staged.parts) <= MAX_PARTS:
        raise PendingSetError(f"{len(staged.parts)} parts; an upload has 1 to {MAX_PARTS}", field=f"{where}.parts")
    for number, part in enumerate(staged.parts, start=1):
        if part.number != number:
            raise PendingSetError(f"part {number} has number {part.number}; parts must be numbered 1..n in order",
                                  field=f"{where}.parts[{number - 1}].number")
        if not _ETAG.match(part.etag):
            raise PendingSetError(f"{part.etag!r} is not an ETag", field=f"{where}.parts[{number - 1}].etag")
    if staged.size < 0:
        raise PendingSetError(f"{staged.size} is negative", field=f"{where}.size")
    if staged.num_records < 0:
        raise PendingSetError(f"{staged.num_records} is negative", field=f"{where}.num_records")
    try:
        stats = json.loads(staged.stats)
    except ValueError:
        raise PendingSetError("not JSON", field=f"{where}.stats") from None
    if not isinstance(stats, dict) or stats.get("numRecords", staged.num_records) != staged.num_records:
        raise PendingSetError("not a JSON object whose numRecords equals num_records", field=f"{where}.stats")
    if partition_columns is not None:
        if set(staged.partition_values) != set(partition_columns):
            raise PendingSetError(f"names {sorted(staged.partition_values)}, the table is partitioned by "
                                  f"{list(partition_columns)}", field=f"{where}.partition_values")
        expected_dir = partition_dir(partition_columns, staged.partition_values)
        if "/".join(segments[:-1]) + ("/" if len(segments) > 1 else "") != expected_dir:
            raise PendingSetError(f"key directory does not match the partition values (expected {expected_dir!r})",
                                  field=f"{where}.partition_values")


def validate_pendingsets(pendingsets: Sequence[PendingSet], uri: TableUri, job_id: str, *,
                         partition_columns: Sequence[str] | None = None) -> None:
    """Validate each PendingSet and what they must satisfy together: one attempt per task, no key twice."""
    tasks: set[int] = set()
    keys: set[str] = set()
    for index, pending in enumerate(pendingsets):
        pending.validate_for(uri, job_id, partition_columns=partition_columns)
        if pending.task_id in tasks:
            raise PendingSetError(f"task {pending.task_id} has more than one PendingSet; keep one attempt per task",
                                  field=f"pendingsets[{index}].task_id")
        tasks.add(pending.task_id)
        for staged in pending.files:
            if staged.key in keys:
                raise PendingSetError(f"key {staged.key!r} is staged by two tasks", field=f"pendingsets[{index}].files")
            keys.add(staged.key)


# --- task side: the writer --------------------------------------------------------------------------


class WriterState(enum.Enum):
    OPEN = "open"
    FINISHED = "finished"
    ABORTED = "aborted"


class StagingWriter:
    """Stage rows of one task as Parquet files in incomplete multipart uploads (see the module docstring).

    ``schema`` is the table schema including partition columns; files hold the other columns only, as
    Delta and Spark write them. Memory is bounded per open file (one file per partition seen, at most
    ``max_open_files``, the least recently written closed first) by one part plus one row group.
    Use as a context manager, or call :meth:`abort` on failure: uploads left behind cost money.
    """

    def __init__(self, objects: ObjectStore, uri: TableUri, *, schema: pa.Schema, partition_by: Sequence[str],
                 job_id: str, task_id: int, attempt_id: int = 0, target_file_size: int = 128 * MiB,
                 part_size: int = 8 * MiB, max_open_files: int = 64, num_indexed_cols: int = 32,
                 _allow_small_parts: bool = False):
        small_ok = _allow_small_parts and isinstance(objects, MemoryObjectStore)
        if part_size < MIN_PART_SIZE and not small_ok:
            raise ValueError(f"part_size {part_size} is below S3's minimum part size of {MIN_PART_SIZE} bytes")
        if part_size <= 0 or target_file_size <= 0 or max_open_files <= 0:
            raise ValueError("part_size, target_file_size and max_open_files must be positive")
        if task_id < 0 or attempt_id < 0:
            raise ValueError(f"task id {task_id} and attempt id {attempt_id} must be >= 0")
        missing = [c for c in partition_by if c not in schema.names]
        if missing:
            raise ValueError(f"partition columns {missing} are not in the table schema {schema.names}")
        self.objects = objects
        self.uri = uri
        # The schema files are written with: Delta's Arrow types (microsecond timestamps, plain strings).
        self.schema = delta_to_arrow(arrow_to_delta(schema))
        self.partition_by = list(partition_by)
        for column in self.partition_by:
            field = self.schema.field(column)
            if pa.types.is_nested(field.type):
                raise UnsupportedTypeError(column, field.type, cast_to="a primitive type (partition columns cannot be nested)")
        self.file_schema = pa.schema([f for f in self.schema if f.name not in self.partition_by])
        self.job_id = check_job_id(job_id)
        self.task_id = task_id
        self.attempt_id = attempt_id
        self.target_file_size = target_file_size
        self.part_size = part_size
        self.max_open_files = max_open_files
        self.num_indexed_cols = num_indexed_cols
        self.state = WriterState.OPEN
        self._open: OrderedDict[str, _OpenFile] = OrderedDict()
        self._counters: dict[str, int] = {}
        self._staged: list[StagedFile] = []
        self._checked_schema: pa.Schema | None = None
        self._row_group_bytes = min(target_file_size, 64 * MiB)

    def __enter__(self) -> StagingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.state is WriterState.OPEN:
            self.abort()

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Add rows. Raises SchemaMismatchError (naming each difference, or a missing partition column)
        or UnsupportedTypeError before anything of ``data`` is staged."""
        if self.state is not WriterState.OPEN:
            raise ValueError(f"this writer is {self.state.value}; create a new one")
        table = self._conform(data)
        if table.num_rows == 0:
            return
        for directory, values, rows in self._split(table):
            self._append(directory, values, rows)

    def finish(self) -> PendingSet:
        """Close every file and upload its last part; the uploads stay incomplete. Returns the task's
        PendingSet (task commit). On failure call :meth:`abort`."""
        if self.state is not WriterState.OPEN:
            raise ValueError(f"this writer is {self.state.value}; create a new one")
        while self._open:
            self._close_file(next(iter(self._open)))
        self.state = WriterState.FINISHED
        return PendingSet(table_path=self.uri.table_path, job_id=self.job_id, task_id=self.task_id,
                          attempt_id=self.attempt_id, files=list(self._staged))

    def abort(self) -> None:
        """Abort every upload this writer started, finished files included. Best effort: a failing abort
        is logged, not raised, so it cannot hide the error that led here."""
        self.state = WriterState.ABORTED
        open_files, self._open = list(self._open.values()), OrderedDict()
        for handle in open_files:
            handle.discard()
        abort_pending(self.objects, [PendingSet(table_path=self.uri.table_path, job_id=self.job_id,
                                                task_id=self.task_id, attempt_id=self.attempt_id,
                                                files=self._staged)])

    # -- steps ---------------------------------------------------------------------------------------

    def _conform(self, data: pa.RecordBatch | pa.Table) -> pa.Table:
        """``data`` checked against the table schema, columns in table order, cast to Delta's types."""
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        elif not isinstance(data, pa.Table):
            raise TypeError(f"expected a pyarrow Table or RecordBatch, got {type(data).__name__}")
        if data.schema != self._checked_schema:
            self._check_schema(data.schema)
            self._checked_schema = data.schema
        nulls = [f"column {f.name!r} is NOT NULL in the table, but the data holds {data.column(f.name).null_count} "
                 f"null(s) in it" for f in self.schema if not f.nullable and data.column(f.name).null_count]
        if nulls:
            raise SchemaMismatchError(nulls, table=self.uri.table_path)
        try:
            return data.select(self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError([f"the values do not fit the table's types: {exc}"],
                                      table=self.uri.table_path) from None

    def _check_schema(self, data_schema: pa.Schema) -> None:
        """Names and types must match the table's. A nullable data column may go into a NOT NULL one:
        Arrow data from most sources is nullable by type, so its values are checked instead, batch by
        batch, as Delta writers enforce NOT NULL."""
        missing = [c for c in self.partition_by if c not in data_schema.names]
        if missing:
            raise SchemaMismatchError(
                [f"partition column {c!r} is missing from the data (the table is partitioned by "
                 f"{self.partition_by})" for c in missing], table=self.uri.table_path)
        relaxed = pa.schema([f.with_nullable(True) for f in self.schema])
        differences = schema_diff(relaxed, data_schema)
        if differences:
            raise SchemaMismatchError(differences, table=self.uri.table_path)

    def _split(self, table: pa.Table) -> Iterable[tuple[str, dict[str, str | None], pa.Table]]:
        """``(directory, serialized partition values, rows without partition columns)`` per partition."""
        if not self.partition_by:
            yield "", {}, table
            return
        keys = table.select(self.partition_by)
        row_ids = pc.indices_nonzero(pc.is_null(pa.nulls(table.num_rows, pa.int8())))
        groups = keys.append_column("__row", row_ids).group_by(self.partition_by, use_threads=False).aggregate(
            [("__row", "list")])
        data = table.drop_columns(self.partition_by)
        for i in range(groups.num_rows):
            values = {c: partition_value_to_string(groups.column(c)[i], self.schema.field(c).type)
                      for c in self.partition_by}
            rows = data.take(groups.column("__row_list")[i].values)
            yield partition_dir(self.partition_by, values), values, rows

    def _append(self, directory: str, values: dict[str, str | None], rows: pa.Table) -> None:
        handle = self._open.get(directory)
        if handle is None:
            if len(self._open) >= self.max_open_files:
                self._close_file(next(iter(self._open)))
            handle = self._open_file(directory, values)
        self._open.move_to_end(directory)
        handle.append(rows, self._row_group_bytes)
        if handle.sink.tell() >= self.target_file_size:
            self._close_file(directory)

    def _open_file(self, directory: str, values: dict[str, str | None]) -> _OpenFile:
        counter = self._counters.get(directory, 0)
        self._counters[directory] = counter + 1
        relative = directory + data_file_name(self.task_id, self.job_id, counter)
        handle = _OpenFile(self.objects, self.uri.key(relative), encode_path(relative), values,
                           self.file_schema, part_size=self.part_size, num_indexed_cols=self.num_indexed_cols)
        self._open[directory] = handle
        return handle

    def _close_file(self, directory: str) -> None:
        handle = self._open.pop(directory)
        self._staged.append(handle.finish())


class _OpenFile:
    """One Parquet file being staged: its writer, its multipart sink, rows waiting for a row group."""

    def __init__(self, objects: ObjectStore, key: str, path: str, values: dict[str, str | None],
                 file_schema: pa.Schema, *, part_size: int, num_indexed_cols: int):
        self.key = key
        self.path = path
        self.values = values
        self.sink = MultipartSink(objects, key, part_size=part_size)
        try:
            self.writer = pq.ParquetWriter(self.sink, file_schema, compression="snappy")
        except BaseException:
            self.sink.abort()
            raise
        self.stats = _StatsAccumulator(file_schema, num_indexed_cols)
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.rows = 0

    def append(self, rows: pa.Table, row_group_bytes: int) -> None:
        self.pending.append(rows)
        self.pending_bytes += rows.nbytes
        self.rows += rows.num_rows
        if self.pending_bytes >= row_group_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        group = pa.concat_tables(self.pending)
        self.pending, self.pending_bytes = [], 0
        self.stats.add(group)
        self.writer.write_table(group)

    def finish(self) -> StagedFile:
        self.flush()
        self.writer.close()
        parts = self.sink.finish()
        return StagedFile(path=self.path, key=self.key, upload_id=self.sink.upload_id,
                          parts=[StagedPart(number=p.number, etag=p.etag) for p in parts],
                          size=self.sink.tell(), num_records=self.rows, stats=self.stats.result(),
                          partition_values=self.values)

    def discard(self) -> None:
        """Abort the upload; the Parquet writer's last bytes go nowhere."""
        self.pending = []
        self.sink.abort()
        try:
            self.writer.close()
        except (pa.ArrowException, OSError, ValueError) as exc:
            log.debug("closing the discarded writer of %s: %s", self.key, exc)


class _StatsAccumulator:
    """A file's stats JSON, built from the stats of its row groups (the file never sits in memory).

    Merging per leaf column of ``schema``: ``numRecords`` and ``nullCount`` add up; a bound exists only
    if every row group holding a non-null value has one (``compute_stats`` leaves out unsafe bounds:
    NaN, infinities, long string maxima), and is then the least minimum (greatest maximum).
    """

    def __init__(self, schema: pa.Schema, num_indexed_cols: int):
        self.schema = schema
        self.num_indexed_cols = num_indexed_cols
        self.merged: dict[str, Any] | None = None

    def add(self, rows: pa.Table) -> None:
        stats = json.loads(compute_stats(rows, num_indexed_cols=self.num_indexed_cols), parse_float=Decimal)
        self.merged = stats if self.merged is None else _merge_stats(self.schema, self.merged, stats)

    def result(self) -> str:
        if self.merged is None:
            return '{"numRecords":0,"minValues":{},"maxValues":{},"nullCount":{}}'
        return _stats_json(self.merged)


def _merge_stats(schema: pa.Schema, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    rows = (a["numRecords"], b["numRecords"])
    out: dict[str, Any] = {"numRecords": rows[0] + rows[1], "minValues": {}, "maxValues": {}, "nullCount": {}}
    for field in schema:
        _merge_column(field, rows, (a, b), (out["minValues"], out["maxValues"], out["nullCount"]))
    return out


def _merge_column(field: pa.Field, rows: tuple[int, int], sides: tuple[dict, dict],
                  targets: tuple[dict, dict, dict]) -> None:
    """Merge one column of two stats trees (``sides``) into ``targets`` (minValues, maxValues, nullCount)."""
    name = field.name
    if pa.types.is_struct(field.type):
        children = [{k: _get(side.get(k), name) for k in ("minValues", "maxValues", "nullCount")} for side in sides]
        sub: tuple[dict, dict, dict] = ({}, {}, {})
        for i in range(field.type.num_fields):
            _merge_column(field.type.field(i), rows, (children[0], children[1]), sub)
        for target, value in zip(targets, sub):
            if value:
                target[name] = value
        return
    nulls = [_get(side.get("nullCount"), name) for side in sides]
    if not all(isinstance(n, int) for n in nulls):
        return  # not an indexed column
    targets[2][name] = nulls[0] + nulls[1]
    holding = [i for i in (0, 1) if nulls[i] < rows[i]]
    is_timestamp = pa.types.is_timestamp(field.type)
    for stat, target, pick in (("minValues", targets[0], min), ("maxValues", targets[1], max)):
        bounds = [_get(sides[i].get(stat), name) for i in holding]
        if bounds and all(b is not None and not isinstance(b, dict) for b in bounds):
            target[name] = pick(bounds, key=_timestamp_order if is_timestamp else None)


def _get(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, dict) else None


def _timestamp_order(text: str) -> tuple[int, ...] | str:
    """Timestamp stats as numbers: as text they do not sort before year 1000 (``strftime`` does not
    zero-pad the year everywhere). All of one column share one form, so unknown forms sort as text."""
    found = _TIMESTAMP_STAT.match(text)
    if found is None:
        return text
    *whole, fraction = found.groups()
    return (*(int(g) for g in whole), int((fraction or "").ljust(9, "0")[:9]))


def _stats_json(value: Any) -> str:
    """Compact JSON writing Decimals exactly (stats were read with Decimal floats so as not to round)."""
    if isinstance(value, dict):
        items = ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_stats_json(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


# --- job side ---------------------------------------------------------------------------------------


def complete_pending(objects: ObjectStore, pendingsets: Sequence[PendingSet], *, max_workers: int = 16) -> list[AddFile]:
    """Complete every staged upload in parallel and return their ``add`` actions (in PendingSet order).

    All or nothing: if any completion fails, the objects completed so far are deleted and every other
    upload is aborted before the error is re-raised, so a failed job leaves no visible file behind.
    The caller must have validated the PendingSets (:func:`validate_pendingsets`).
    """
    files = [staged for pending in pendingsets for staged in pending.files]
    if not files:
        return []
    completed: dict[int, AddFile] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(files))),
                            thread_name_prefix="dynacommit-complete") as pool:
        futures = {pool.submit(_complete_one, objects, staged): index for index, staged in enumerate(files)}
        done, not_done = wait(futures, return_when=FIRST_EXCEPTION)
        for future in not_done:
            future.cancel()
        done, _ = wait(futures)
    failure: BaseException | None = None
    for future, index in futures.items():
        if future.cancelled():
            continue
        error = future.exception()
        if error is None:
            completed[index] = future.result()
        elif failure is None:
            failure = error
    if failure is not None:
        log.warning("completing the uploads of job %s failed (%s); deleting %d completed objects and aborting "
                    "the rest", pendingsets[0].job_id, failure, len(completed))
        _best_effort_delete(objects, [files[i].key for i in completed])
        abort_pending(objects, pendingsets, max_workers=max_workers)
        raise failure
    return [completed[i] for i in range(len(files))]


def _complete_one(objects: ObjectStore, staged: StagedFile) -> AddFile:
    parts = [Part(p.number, p.etag) for p in staged.parts]
    try:
        objects.complete_upload(staged.key, staged.upload_id, parts)
    except FileNotFoundError:
        # The upload is gone. If a retried CompleteMultipartUpload raced its own first, successful
        # attempt, the object is there with our size; otherwise the upload was aborted (e.g. by a
        # lifecycle rule or `uploads abort`) and the file is lost.
        found = objects.head(staged.key)
        if found is None or found.size != staged.size:
            raise
    return AddFile(path=staged.path, partition_values=dict(staged.partition_values), size=staged.size,
                   modification_time=int(time.time() * 1000), data_change=True, stats=staged.stats)


def abort_pending(objects: ObjectStore, pendingsets: Sequence[PendingSet], *, max_workers: int = 16) -> int:
    """Abort every upload of ``pendingsets`` (completed ones are unaffected). Best effort, as aborts run
    while handling another failure: a failing abort is logged, not raised. Returns how many were aborted."""
    files = [staged for pending in pendingsets for staged in pending.files]
    if not files:
        return 0

    def abort(staged: StagedFile) -> bool:
        try:
            objects.abort_upload(staged.key, staged.upload_id)
            return True
        except StorageError as exc:
            log.warning("could not abort upload %s of %s: %s; `dynacommit uploads abort` or a lifecycle rule "
                        "will remove it", staged.upload_id, staged.key, exc)
            return False

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(files))),
                            thread_name_prefix="dynacommit-abort") as pool:
        return sum(pool.map(abort, files))


def delete_completed(objects: ObjectStore, keys: Sequence[str]) -> None:
    """Delete objects a failed job completed: no log entry references them."""
    if keys:
        objects.delete(list(keys))


def _best_effort_delete(objects: ObjectStore, keys: Sequence[str]) -> None:
    try:
        delete_completed(objects, keys)
    except StorageError as exc:
        log.warning("could not delete %d unreferenced objects (%s); `dynacommit vacuum` will remove them",
                    len(keys), exc)


def abort_stray_uploads(objects: ObjectStore, uri: TableUri, job_id: str, keep_upload_ids: Iterable[str]) -> int:
    """Abort the job's incomplete uploads under the table that are not in ``keep_upload_ids``.

    These are the uploads of failed or speculative task attempts whose PendingSets never reached the
    driver: found by the job id in their file name. Returns how many were aborted.
    """
    check_job_id(job_id)
    keep = set(keep_upload_ids)
    aborted = 0
    for upload in objects.list_uploads(uri.key("")):
        name = _FILE_NAME.match(upload.key.rsplit("/", 1)[-1])
        if name is None or name.group(2) != job_id or upload.upload_id in keep:
            continue
        try:
            objects.abort_upload(upload.key, upload.upload_id)
            aborted += 1
        except StorageError as exc:
            log.warning("could not abort stray upload %s of %s: %s", upload.upload_id, upload.key, exc)
    return aborted
