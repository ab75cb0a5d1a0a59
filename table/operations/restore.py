"""RESTORE: make the table's newest version hold what an earlier version held, as Delta's RestoreTableCommand
does (delta-spark ``restoreToVersion`` / ``restoreToTimestamp``, deltalake ``DeltaTable.restore``).

One commit, on top of the log (history is kept; time travel to the versions in between still works):

- a ``remove`` (``dataChange=true``) of every live file the target version did not have, and an ``add``
  (``dataChange=true``, with its statistics, deletion vector and modification time as the target had them)
  of every file of the target version that is not live now; files are told apart by their logical key (path
  and deletion vector), so a file whose deletion vector changed since is swapped back to its old vector;
- the target version's ``metaData`` when it differs (schema, properties, partitioning as they were);
- the protocol: the current one and the target's together (no feature is dropped: a downgrade could
  strand readers of files written since), or the target's alone with ``protocol_downgrade_allowed``.

Before anything is committed, every file the restore adds back is looked for (one HEAD each): a file that
VACUUM deleted since cannot be restored, and the restore is refused naming how many are missing, unless
``ignore_missing_files`` (Delta's ``spark.sql.files.ignoreMissingFiles``), which leaves them out.

The commit read the whole table: a concurrent change conflicts with it (Delta's rules), and the restore is
planned again on the newest version, as every operation here is (:mod:`table.operations.rewrite`).
Metrics are Delta's: ``tableSizeAfterRestore``, ``numOfFilesAfterRestore``, ``numRemovedFiles``,
``numRestoredFiles``, ``removedFilesSize``, ``restoredFilesSize``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

from logstore import TableUri
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.data.deletion_vectors import vector_file
from table.data.writespec import CommitResult
from table.errors import DataFileMissingError
from table.log.actions import AddFile, Protocol, RemoveFile
from table.log.protocol import check_writable, merged_protocol, upgraded_protocol
from table.log.snapshot import Snapshot, load_snapshot
from table.log.timestamps import version_at
from table.operations.rewrite import Staged, execute
from table.transaction import Opens, TableView, Transaction


__all__ = ["RestorePlan", "plan_restore", "restore"]

_LOOKUPS = 16
"""HEAD requests in flight while looking for the files a restore adds back."""


@dataclasses.dataclass(frozen=True)
class RestorePlan:
    """What a restore of ``target_version`` does on the snapshot of ``version``."""

    version: int
    target_version: int
    restored: tuple[AddFile, ...]
    removed: tuple[AddFile, ...]
    missing: tuple[str, ...]
    """Files of the target version that are gone from storage (left out with ``ignore_missing_files``)."""
    metadata_changed: bool
    protocol: Protocol | None
    files_after: int
    size_after: int

    def metrics(self) -> dict[str, str]:
        return {"tableSizeAfterRestore": str(self.size_after), "numOfFilesAfterRestore": str(self.files_after),
                "numRemovedFiles": str(len(self.removed)), "numRestoredFiles": str(len(self.restored)),
                "removedFilesSize": str(sum(f.size for f in self.removed)),
                "restoredFilesSize": str(sum(f.size for f in self.restored))}

    def to_dict(self) -> dict[str, object]:
        return {"version": self.version, "targetVersion": self.target_version,
                "restoredFiles": [unquote(f.path) for f in self.restored],
                "removedFiles": [unquote(f.path) for f in self.removed], "missingFiles": list(self.missing),
                "metadataChanged": self.metadata_changed, "metrics": self.metrics()}


def restore(table: Transaction | Opens, target: int | str | dt.datetime | dt.date, *, ignore_missing_files: bool = False,
            protocol_downgrade_allowed: bool = False) -> CommitResult:
    """Restore ``table`` to ``target``: a version number, or a moment (a ``datetime``, naive meaning UTC, or
    an ISO-8601 string) whose version Delta's time travel rules pick. See the module docstring. Restoring
    to what the table already holds commits nothing. The Table is left at the version committed."""
    _check_target(target)

    def stage(txn: Transaction, _job_id: str) -> Staged:
        plan = plan_restore(txn, txn.snapshot, target, ignore_missing_files=ignore_missing_files,
                            protocol_downgrade_allowed=protocol_downgrade_allowed)
        txn.read_whole_table()  # what stays, what goes, what comes back: every file decides it
        return _staged(txn, txn.snapshot, plan, target)

    return execute(table, "RESTORE", stage)


def plan_restore(table: TableView, snapshot: Snapshot, target: int | str | dt.datetime | dt.date, *,
                 ignore_missing_files: bool = False, protocol_downgrade_allowed: bool = False) -> RestorePlan:
    """What :func:`restore` would commit on ``snapshot`` (nothing is written; the files it adds back are looked
    for). Raises VersionNotFoundError for a version the log no longer holds, InvalidArgumentError for a
    version after ``snapshot``'s, DataFileMissingError when files to add back are gone."""
    _check_target(target)
    log_store = table.log_store
    version = target if isinstance(target, int) else version_at(log_store, snapshot, target)
    if version > snapshot.version:
        raise InvalidArgumentError(
            f"cannot restore {table.uri.table_path} to version {version}: its newest version is {snapshot.version}")
    old = load_snapshot(log_store, version)
    now_files = {f.logical_key: f for f in snapshot.files}
    old_files = {f.logical_key: f for f in old.files}
    restored = [f for key, f in old_files.items() if key not in now_files]
    removed = [f for key, f in now_files.items() if key not in old_files]
    missing = _missing(table.uri, table.objects, restored)
    if missing and not ignore_missing_files:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise DataFileMissingError(
            f"cannot restore {table.uri.table_path} to version {version}: {len(missing)} of its files are gone "
            f"from storage (VACUUM deleted them, or they were removed by hand): {shown}. Restore a later version, "
            f"or pass ignore_missing_files=True (CLI: --ignore-missing-files) to restore without them; "
            f"nothing was written")
    if missing:
        gone = set(missing)
        restored = [f for f in restored if _relative(table.uri, f.path) not in gone and
                    not _vector_missing(table.uri, f, gone)]
    protocol = _protocol(snapshot, old, protocol_downgrade_allowed)
    if protocol is not None:
        check_writable(protocol, metadata=old.metadata)
    kept = [f for key, f in now_files.items() if key in old_files]
    after = [*kept, *restored]
    return RestorePlan(version=snapshot.version, target_version=version, restored=tuple(restored),
                       removed=tuple(removed), missing=tuple(missing),
                       metadata_changed=old.metadata != snapshot.metadata, protocol=protocol,
                       files_after=len(after), size_after=sum(f.size for f in after))


def _check_target(target: object) -> None:
    if isinstance(target, bool) or not isinstance(target, (int, str, dt.datetime, dt.date)):
        raise ArgumentTypeError(f"restore needs a version (int) or a moment (datetime or ISO-8601 string), got "
                                f"{type(target).__name__}")
    if isinstance(target, int) and target < 0:
        raise InvalidArgumentError(f"cannot restore to version {target}: versions start at 0")


def _staged(table: TableView, snapshot: Snapshot, plan: RestorePlan, target: object) -> Staged:
    now = int(time.time() * 1000)
    removes: tuple[RemoveFile, ...] = tuple(f.remove(deletion_timestamp=now) for f in plan.removed)
    adds = tuple(f.model_copy(update={"data_change": True}) for f in plan.restored)
    parameters = {"version": str(plan.target_version)} if isinstance(target, int) else {
        "timestamp": json.dumps(str(target)), "version": str(plan.target_version)}
    # The target's metadata goes in whenever the restore changes anything, as Delta's RESTORE always updates
    # it: a commit changing the metadata conflicts with every concurrent append (conflict rule 6), so the
    # restore is planned again and the table ends exactly as the target version was.
    changes = bool(plan.restored or plan.removed or plan.metadata_changed or plan.protocol is not None)
    old_metadata = load_snapshot(table.log_store, plan.target_version).metadata if changes else None
    protocol = plan.protocol
    if old_metadata is not None:
        needed = upgraded_protocol(protocol or snapshot.protocol, old_metadata.schema_string,
                                   old_metadata.configuration)
        protocol = needed or protocol
    return Staged("RESTORE", removes, (), None, parameters, plan.metrics(),
                  metadata=old_metadata, vector_adds=adds, protocol=protocol)


def _protocol(now: Snapshot, old: Snapshot, downgrade: bool) -> Protocol | None:
    """The protocol the restore commits (None: the current one stays)."""
    if downgrade:
        return None if old.protocol == now.protocol else old.protocol
    merged = merged_protocol(now.protocol, old.protocol)
    return None if merged == now.protocol else merged


def _relative(uri: TableUri, path: str) -> str:
    if "://" in path:
        root = f"{uri.bucket}/{uri.key('')}"
        rest = unquote(path.partition("://")[2])
        return rest[len(root):] if rest.startswith(root) else path
    return unquote(path)


def _vector_missing(uri: TableUri, add: AddFile, gone: set[str]) -> bool:
    if add.deletion_vector is None:
        return False
    where = vector_file(add.deletion_vector)
    return where is not None and _relative(uri, where) in gone


def _missing(uri: TableUri, objects, files: list[AddFile]) -> list[str]:
    """The paths (relative to the table root) of the data and deletion vector files of ``files`` that are not
    in storage. Absolute URIs in the table's bucket are looked for by their key; files in another bucket are
    not looked for."""
    wanted: list[str] = []
    for add in files:
        wanted.append(_relative(uri, add.path))
        if add.deletion_vector is not None:
            where = vector_file(add.deletion_vector)
            if where is not None:
                wanted.append(_relative(uri, where))
    keys = {path: _key_of(uri, path) for path in dict.fromkeys(wanted)}
    keys = {path: key for path, key in keys.items() if key is not None}
    if not keys:
        return []
    with ThreadPoolExecutor(max_workers=min(_LOOKUPS, len(keys))) as pool:
        found = list(pool.map(lambda key: objects.head(key) is not None, keys.values()))
    return sorted(path for path, present in zip(keys, found) if not present)


def _key_of(uri: TableUri, path: str) -> str | None:
    """The object key of a file path (relative to the table root, or an absolute URI, as a shallow clone's
    files are) in the table's bucket; None for a file in another bucket, which is not looked for."""
    if "://" not in path:
        return uri.key(path)
    scheme, _, rest = path.partition("://")
    bucket, _, key = rest.partition("/")
    return key if scheme in ("s3", "s3a", "s3n", uri.scheme) and bucket == uri.bucket else None
