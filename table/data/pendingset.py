"""The persisted records of the staging committer: what a task staged, and their validation.

A task attempt that staged its files as incomplete multipart uploads (``table.data.staging``) reports them
as a :class:`PendingSet`: per file its key, upload id, ordered part ETags, size, row count, stats and
partition values. It is Spark's task result or a local value, and may be persisted as JSON, so it is
a frozen pydantic model with a format version, validated when loaded (:meth:`PendingSet.load`) and,
before the job commits anything, against the job and table (:meth:`PendingSet.validate_for`,
:func:`validate_pendingsets`), as the S3A design's security section asks: a tampered or buggy
PendingSet must not commit parts out of order or write outside the table.

The key layout lives here too, since validation checks it: ``[partition dirs/]part-{task:05d}-{job_id}-
c{n:03d}.snappy.parquet`` (the codec's extension: :mod:`table.compression`) for data files,
``_change_data/[partition dirs/]cdc-{task:05d}-...`` for the
change data files a row-level operation writes on a table with the change data feed, partition
directories Hive-style (``col=value``, value percent-escaped as delta-rs escapes it,
``__HIVE_DEFAULT_PARTITION__`` for null), and the ``add`` path the relative key, URI-encoded
(PROTOCOL.md: "relative path ... URI-encoded").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from logstore import TableUri
from logstore.errors import InvalidArgumentError
from table import compression
from table.errors import PendingSetError

__all__ = [
    "CHANGE_DATA_DIR",
    "HIVE_NULL",
    "MAX_PARTS",
    "PendingSet",
    "PendingSetError",
    "StagedFile",
    "StagedPart",
    "check_job_id",
    "data_file_job",
    "data_file_name",
    "encode_path",
    "escape_path_name",
    "partition_dir",
    "validate_pendingsets",
]

MAX_PARTS = 10_000
"""S3's maximum number of parts of one upload."""
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_ETAG = re.compile(r'^(?:"[0-9a-fA-F]{16,64}(?:-[0-9]{1,5})?"|[0-9a-fA-F]{16,64}(?:-[0-9]{1,5})?)$')
_FILE_NAME = re.compile(r"^(part|cdc)-(\d{5,})-(.+)-c(\d{3,})(?:\.(?:%s))?\.parquet$" % "|".join(
    re.escape(e) for e in compression.extensions()))
CHANGE_DATA_DIR = "_change_data"
"""Where change data files live, under the table root (PROTOCOL.md, "Change Data Files")."""


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


def data_file_name(task_id: int, job_id: str, counter: int, *, change_data: bool = False,
                   codec: compression.Codec = compression.DEFAULT) -> str:
    """``part-00000-<job>-c000.snappy.parquet``: the extension names the codec (:mod:`table.compression`)."""
    prefix = "cdc" if change_data else "part"
    return f"{prefix}-{task_id:05d}-{job_id}-c{counter:03d}{codec.extension}.parquet"


def encode_path(relative: str) -> str:
    """The ``add.path`` of a key relative to the table root: URI-encoded, ``/`` and ``=`` kept.

    Escaping already turned a value's ``%`` into ``%25`` in the key, so the path holds ``%2525``; a
    reader decodes the path once to get the key back (delta-rs writes the same).
    """
    return quote(relative, safe="/=")


def data_file_job(file_name: str) -> str | None:
    """The job id in a data file's name (the last segment of its key); None if it is not one of ours."""
    found = _FILE_NAME.match(file_name)
    return None if found is None else found.group(3)


def check_job_id(job_id: str) -> str:
    """A job id goes into every key: letters, digits, ``-`` and ``_`` only."""
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise InvalidArgumentError(f"job id {job_id!r} must be 1-128 letters, digits, '-' or '_' (a UUID is typical)")
    return job_id


# --- the PendingSet ---------------------------------------------------------------------------------


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")


class StagedPart(_Record):
    number: int
    etag: str


class StagedFile(_Record):
    """One Parquet file staged as an incomplete multipart upload, or (only within one process) held in
    memory: ``held`` bytes, no upload id, no parts, written by one PUT at job commit. A held file never
    travels: its bytes are left out of the JSON, so a PendingSet that went through JSON holding one is
    refused by validation."""

    path: str = Field(description="relative to the table root, URI-encoded, as in the add action")
    key: str = Field(description="the S3 key the upload will create")
    upload_id: str
    parts: list[StagedPart]
    size: int
    num_records: int
    stats: str
    partition_values: dict[str, str | None]
    change_data: bool = Field(default=False, description="a change data file (a cdc action), not a data file")
    held: bytes | None = Field(default=None, exclude=True, repr=False)


class PendingSet(_Record):
    """What one task attempt staged: the task result sent to the job committer. Persisted as JSON."""

    format_version: Literal[1] = 1
    table_path: str
    job_id: str
    task_id: int
    attempt_id: int
    files: list[StagedFile]
    identity: dict[str, list[int]] = Field(default_factory=dict, description=(
        "per identity column, the first and the last value this task handed out (table.data.rules)"))

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
    if (segments[0] == CHANGE_DATA_DIR) != staged.change_data:
        expected = "inside" if staged.change_data else "outside"
        raise PendingSetError(f"{staged.key!r} must lie {expected} {CHANGE_DATA_DIR}/ (change_data is "
                              f"{staged.change_data})", field=f"{where}.key")
    prefix = "cdc" if staged.change_data else "part"
    name = _FILE_NAME.match(segments[-1])
    if name is None or name.group(1) != prefix or name.group(3) != job_id or int(name.group(2)) != task_id:
        raise PendingSetError(
            f"file name {segments[-1]!r} is not {prefix}-{task_id:05d}-{job_id}-cNNN[.codec].parquet",
            field=f"{where}.key")
    if staged.change_data:
        segments = segments[1:]
    if staged.path.startswith("/") or "://" in staged.path or unquote(staged.path) != relative:
        raise PendingSetError(f"{staged.path!r} does not decode to the key's relative path {relative!r}",
                              field=f"{where}.path")
    if staged.held is not None:
        if staged.upload_id or staged.parts or len(staged.held) != staged.size:
            raise PendingSetError("a file held in memory has no upload id nor parts, and its size is its bytes'",
                                  field=f"{where}.held")
    elif not staged.upload_id or not staged.upload_id.isprintable() or len(staged.upload_id) > 1024:
        raise PendingSetError("empty, too long or not printable", field=f"{where}.upload_id")
    if staged.held is None and not 1 <= len(staged.parts) <= MAX_PARTS:
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
