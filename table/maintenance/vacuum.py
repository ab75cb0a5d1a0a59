"""Removing what failed or superseded writes leave behind: unreferenced data files and pending uploads.

The staging committer's one moment of visibility is the log entry, so a writer that dies before it
leaves objects no version references (completed uploads of a job that crashed mid-commit) and
incomplete multipart uploads (tasks that never reported, jobs that never committed). Neither is ever
read, but both cost storage. Superseded files (removed by an overwrite) must stay while time travel
to a version that references them is allowed.

- :func:`vacuum` deletes data files (and deletion vector files) under the table that the current version
  does not reference, whose tombstone (if any) is older than the retention, and whose object is older
  than the retention, as delta-spark's VACUUM decides. It never touches ``_delta_log/`` or other hidden
  paths (``_``/``.`` prefixes; change data files under ``_change_data/`` are vacuumed like data files).
  Its retention defaults to the table's ``delta.deletedFileRetentionDuration`` (7 days unless set), and
  one below that needs ``force=True``: a shorter one can delete files that a running job completed but
  has not committed yet, or that a reader of a recent version is reading, and checkpoints drop a
  tombstone after that long, so vacuum never relies on a tombstone a checkpoint has dropped.
- :func:`abort_pending_uploads` aborts incomplete multipart uploads under the table initiated more than
  ``older_than_hours`` ago (default 24: running jobs keep theirs for hours at most).

Both are dry runs unless told otherwise, and return a report whose ``str`` says what was (or would be) done
and whose ``to_dict()`` is its JSON form (``dynacommit ... --json``). Deleting and aborting report their
progress to :mod:`table.progress`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any
from urllib.parse import unquote

from logstore import ObjectStore, TableUri
from logstore.errors import InvalidArgumentError
from logstore.objects import ObjectInfo
from table import progress
from table.data.deletion_vectors import vector_file
from table.data.pendingset import CHANGE_DATA_DIR
from table.log.actions import DeletionVectorDescriptor
from table.log.actionset import DELETION_VECTOR_STRUCT, plain_value
from table.log.properties import TOMBSTONE_RETENTION, tombstone_retention_ms
from table.log.protocol import check_writable
from table.maintenance.common import (
    HOUR_MS,
    Maintained,
    check_hours,
    newest_snapshot,
)

__all__ = ["DELETE_BATCH", "MIN_RETENTION_HOURS", "RETENTION_CHECK_CONF", "Judged", "VacuumFile", "VacuumReport", "VacuumRules", "plan_vacuum",
           "vacuum"]

MIN_RETENTION_HOURS = 168.0
"""Delta's default ``delta.deletedFileRetentionDuration`` (7 days): vacuum's retention on a table that does
not set it, below which vacuum needs ``force``."""
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
"""delta-spark's session setting that turns vacuum's retention check off (``DynacommitTable.vacuum`` reads it)."""
DELETE_BATCH = 1000
"""Keys per delete request (S3's DeleteObjects limit), and so per step of the progress report."""


@dataclasses.dataclass(frozen=True)
class VacuumFile:
    """A data file vacuum deletes: its key relative to the table root, size and modification time."""

    path: str
    size: int
    last_modified_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "lastModified": self.last_modified_ms}


@dataclasses.dataclass(frozen=True)
class VacuumReport:
    """What :func:`vacuum` deleted (or, in a dry run, would delete)."""

    table: str
    version: int
    dry_run: bool
    retention_hours: float
    deleted: tuple[VacuumFile, ...]
    """The files deleted (in a dry run: that would be), in key order."""
    kept_unreferenced: int
    """Unreferenced files kept because they (or their tombstones) are newer than the retention."""
    nested_tables: tuple[str, ...] = ()
    """Directories under the table that hold a table of their own (a ``_delta_log/``): never touched."""

    @property
    def files(self) -> tuple[str, ...]:
        """The deleted files' keys relative to the table root."""
        return tuple(f.path for f in self.deleted)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.deleted)

    @property
    def count(self) -> int:
        return len(self.deleted)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``dynacommit vacuum --json``); times in milliseconds since the epoch."""
        return {"table": self.table, "version": self.version, "dryRun": self.dry_run,
                "retentionHours": self.retention_hours, "count": self.count, "bytes": self.bytes,
                "keptUnreferenced": self.kept_unreferenced, "files": [f.to_dict() for f in self.deleted],
                "nestedTables": list(self.nested_tables)}

    def __str__(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        lines = [f"vacuum {self.table} at version {self.version} (retention {self.retention_hours:g} h): "
                 f"{verb} {self.count} file(s), {self.bytes} bytes; kept {self.kept_unreferenced} unreferenced "
                 f"file(s) newer than the retention"]
        lines += [f"  {path}" for path in self.files]
        if self.nested_tables:
            lines.append(f"left alone: {len(self.nested_tables)} table(s) nested inside this one: "
                         + ", ".join(self.nested_tables))
        if self.dry_run and self.files:
            lines.append("dry run: nothing was deleted; pass dry_run=False (CLI: --execute) to delete")
        return "\n".join(lines)


def vacuum(table: Maintained, *, retention_hours: float | None = None, dry_run: bool = True,
           force: bool = False) -> VacuumReport:
    """Delete data files the table's current version does not need (see the module docstring).

    ``retention_hours`` defaults to the table's ``delta.deletedFileRetentionDuration`` (Delta's default:
    :data:`MIN_RETENTION_HOURS`, 7 days), as Delta's VACUUM does; a shorter one needs ``force``: checkpoints
    keep a removed file's tombstone only that long, and readers of a version that old may still read it.
    Raises InvalidArgumentError for a retention that is not a number of hours from 0 to 100 years, or under
    the table's without ``force``, or for a Table pinned to an old version; UnsupportedFeatureError for a
    table whose writer protocol dynacommit does not implement.
    """
    rules = plan_vacuum(table, retention_hours=retention_hours, force=force)
    uri, objects = table.uri, table.objects
    judged = rules.judge([(uri.relative(obj.key), obj) for obj in objects.list(uri.key(""))])
    if not dry_run and judged.deleted:
        _delete(objects, [uri.key(f.path) for f in judged.deleted])
    return rules.report(judged, dry_run=dry_run)


@dataclasses.dataclass(frozen=True)
class Judged:
    """What :meth:`VacuumRules.judge` decided about a listing: the files to delete (in key order), how many
    unreferenced files it kept for the retention, and the nested tables it left alone."""

    deleted: tuple[VacuumFile, ...]
    kept_unreferenced: int
    nested_tables: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class VacuumRules:
    """Vacuum's decision for one table version, as plain data (a Spark job ships it to its executors):
    which listed objects go. :func:`vacuum` applies it to one listing of the table; the Spark vacuum
    (``spark_integration.vacuum``) to the listings of its tasks, each of a part of the table's keys."""

    table: str
    version: int
    retention_hours: float
    cutoff_ms: int
    live: frozenset[str]
    recently_removed: frozenset[str]
    partition_columns: frozenset[str]

    def skipped_directory(self, directory: str) -> bool:
        """Whether every key under ``directory`` (relative, ending in ``/``) is hidden from vacuum."""
        return _hidden(directory + "x", set(self.partition_columns))

    def judge(self, listed: list[tuple[str, ObjectInfo]]) -> Judged:
        """Decide about ``listed`` (keys relative to the table root, with their objects). A table nested in
        a directory (a ``_delta_log/`` below the root) is recognised within the listing, so a listing must
        hold every key under each directory it touches."""
        nested = sorted({relative.split("/_delta_log/", 1)[0] + "/" for relative, _ in listed
                         if "/_delta_log/" in relative})
        partition_columns = set(self.partition_columns)
        doomed: list[VacuumFile] = []
        kept = 0
        for relative, obj in listed:
            if relative in self.live or _hidden(relative, partition_columns) or relative.startswith(tuple(nested)):
                continue
            if relative in self.recently_removed or obj.last_modified_ms > self.cutoff_ms:
                kept += 1
                continue
            doomed.append(VacuumFile(relative, obj.size, obj.last_modified_ms))
        return Judged(tuple(doomed), kept, tuple(n.rstrip("/") for n in nested))

    def report(self, judged: Judged, *, dry_run: bool) -> VacuumReport:
        return VacuumReport(table=self.table, version=self.version, dry_run=dry_run,
                            retention_hours=self.retention_hours, deleted=judged.deleted,
                            kept_unreferenced=judged.kept_unreferenced, nested_tables=judged.nested_tables)


def plan_vacuum(table: Maintained, *, retention_hours: float | None = None, force: bool = False) -> VacuumRules:
    """The checks of :func:`vacuum` (the same errors) and its decision for the table's newest version."""
    snapshot = newest_snapshot(table, "vacuum")
    # Deleting files is a write: a table whose writer protocol we do not implement may keep files we do not
    # know it needs (PROTOCOL.md's vacuumProtocolCheck asks exactly this check, for every table).
    check_writable(snapshot.protocol, metadata=snapshot.metadata)
    table_hours = tombstone_retention_ms(snapshot.state.configuration) / HOUR_MS
    retention_hours = table_hours if retention_hours is None else check_hours("retention_hours", retention_hours)
    if retention_hours < table_hours and not force:
        raise InvalidArgumentError(
            f"a retention of {retention_hours:g} h is under the table's {table_hours:g} h "
            f"({TOMBSTONE_RETENTION}, 7 days unless the table sets it): it can delete files of a job that is "
            f"committing right now, or that readers of versions within that time are reading. If no writer or reader "
            f"can be active, turn the check off: Table.vacuum(enforce_retention_duration=False), "
            f"vacuum(force=True), the CLI's --force, or on Spark the session setting {RETENTION_CHECK_CONF}=false "
            f"(delta-spark's)")
    uri = table.uri
    cutoff = int(time.time() * 1000 - retention_hours * HOUR_MS)
    live = {_relative(uri, path) for path in snapshot.state.files} | _vector_files(uri, _live_vectors(snapshot))
    recent = [rm for rm in snapshot.state.tombstones.values() if (rm.deletion_timestamp or 0) > cutoff]
    recently_removed = {_relative(uri, rm.path) for rm in recent} | _vector_files(
        uri, [rm.deletion_vector for rm in recent if rm.deletion_vector is not None])
    return VacuumRules(table=uri.table_path, version=snapshot.version, retention_hours=retention_hours,
                       cutoff_ms=cutoff, live=frozenset(live), recently_removed=frozenset(recently_removed),
                       partition_columns=frozenset(snapshot.partition_columns))


def _live_vectors(snapshot) -> list[DeletionVectorDescriptor]:
    """The deletion vectors of the live files (from the files' column: no action objects are built)."""
    column = snapshot.state.files.to_arrow()["deletionVector"]
    if column.null_count == len(column):
        return []
    return [DeletionVectorDescriptor.model_validate(plain_value(v, DELETION_VECTOR_STRUCT))
            for v in column.to_pylist() if v is not None]


def _vector_files(uri: TableUri, vectors: list[DeletionVectorDescriptor]) -> set[str]:
    """The keys, relative to the table root, of the files holding ``vectors`` (inline ones have none)."""
    found = set()
    for vector in vectors:
        where = vector_file(vector)
        if where is not None:
            found.add(_relative(uri, where) if "://" in where else where)
    return found


def _delete(objects: ObjectStore, keys: list[str]) -> None:
    with progress.task("deleting files", total=len(keys)) as task:
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start:start + DELETE_BATCH]
            objects.delete(batch)
            task.advance(len(batch))


def _relative(uri: TableUri, path: str) -> str:
    """The key relative to the table root of an ``add``/``remove`` path (URI-encoded; absolute URIs of
    files under this table are accepted, others can never match a listed key)."""
    if "://" in path:
        root = f"{uri.bucket}/{uri.key('')}"
        rest = unquote(path.partition("://")[2])
        return rest[len(root):] if rest.startswith(root) else path
    return unquote(path)


def _hidden(relative: str, partition_columns: set[str]) -> bool:
    """Delta's rule: a path segment starting with ``_`` or ``.`` is hidden (``_delta_log``, ``.tmp``),
    except a partition directory such as ``_p=1`` of a column ``_p``, and ``_change_data``: change data
    files are never part of a version's files, so vacuum deletes those older than the retention, as
    delta-spark's does (readers of the change feed must not read further back than the retention)."""
    for segment in relative.split("/"):
        if segment == CHANGE_DATA_DIR:
            continue
        if segment[:1] in ("_", "."):
            column = segment.partition("=")[0]
            if "=" not in segment or column not in partition_columns:
                return True
    return False
