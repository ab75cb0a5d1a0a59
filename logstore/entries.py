"""A table's DynamoDB entries as a whole: what recovery would do to each unfinished one (the dry run of
``dynacommit recover``), telling a table deleted from S3 from a live one, and dropping the entries of a
deleted table (``dynacommit drop-table``).

The one invariant: entries are judged deleted only when ``_delta_log/`` holds no object at all. A live
table always holds its newest commit file or a checkpoint there (log cleanup never deletes past the newest
checkpoint), and a commit in flight holds its temp file; entries expired by TTL only make the entries
fewer, never the files. So expired entries, log cleanup, a writer that bypasses DynamoDB, a reader that
may not finish a commit: none of them looks like a deleted table.

Reads go through the store's hooks (``_all_entries``, ``_latest_entry``, the object store), so the
in-memory store and DynamoDB behave the same.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

from logstore.base import LogStore, RecoveryOutcome
from logstore.errors import ConfigurationError, InvalidArgumentError
from logstore.external import CommitEntry, ExternalLogStore

__all__ = ["DropReport", "PlannedRecovery", "deleted_table_error", "drop_entries", "plan_recovery"]

_SHOWN_OBJECTS = 1000
"""Objects listed, at most, to say what is left of a deleted table in S3 (one LIST page)."""


@dataclasses.dataclass(frozen=True)
class PlannedRecovery:
    """What ``recover`` would do to the entry of ``version``: ``outcome`` is the :class:`RecoveryOutcome` it
    would report, ``action`` says in words what it would write or delete."""

    version: int
    outcome: RecoveryOutcome
    action: str

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "outcome": self.outcome.name, "wouldDo": self.action}


def plan_recovery(store: LogStore, version: int | None = None) -> list[PlannedRecovery]:
    """What ``store.recover_all()`` (or ``store.recover(version)``) would do, found by reading only: the
    entries, and whether each one's temp file and commit file exist. Recovery decides again when it runs:
    a writer may finish an entry between the two."""
    external = _external(store, "planning a recovery")
    if version is None:
        entries = list(external._incomplete_entries())
    else:
        found = external._get_entry(version)
        if found is None:
            return [PlannedRecovery(version, RecoveryOutcome.NOTHING_TO_RECOVER, "nothing: no entry")]
        entries = [found]
    return [_plan(external, entry) for entry in entries]


def _plan(store: ExternalLogStore, entry: CommitEntry) -> PlannedRecovery:
    if entry.complete:
        return PlannedRecovery(entry.version, RecoveryOutcome.ALREADY_COMPLETE, "nothing: the entry is complete")
    final = f"_delta_log/{entry.file_name}"
    temp = store.temp_key(entry.temp_path)
    published = store.objects.head(store.commit_key(entry.version)) is not None
    temp_there = store.objects.head(temp) is not None
    if temp_there and not published:
        return PlannedRecovery(entry.version, RecoveryOutcome.COPIED_AND_COMPLETED,
                               f"write {final} from the temp file _delta_log/{entry.temp_path}, mark the entry "
                               f"complete, delete the temp file")
    if temp_there:
        if store.objects.get(store.commit_key(entry.version)) != store.objects.get(temp):
            return PlannedRecovery(entry.version, RecoveryOutcome.SUPERSEDED,
                                   f"mark the entry complete and keep the temp file: {final} holds another "
                                   f"writer's commit")
        return PlannedRecovery(entry.version, RecoveryOutcome.COMPLETED,
                               "mark the entry complete, delete the temp file")
    if published:
        return PlannedRecovery(entry.version, RecoveryOutcome.COMPLETED, "mark the entry complete")
    # Temp file and N.json both gone: the content is lost. Recovery marks the entry stuck (if it is not
    # yet) and abandons it once the grace period, counted from the mark, is over.
    now = time.time()
    grace = store.stuck_grace_seconds
    left = (entry.stuck_since if entry.stuck_since is not None else now) + grace - now
    if left > 0:
        action = (f"leave the stuck entry: it may be abandoned in {left:.0f} s" if entry.stuck_since is not None
                  else f"mark the entry stuck (temp file and {entry.file_name} both gone: its content is lost); "
                       f"it may be abandoned {grace:g} s later")
        return PlannedRecovery(entry.version, RecoveryOutcome.STUCK_MARKED, action)
    first = "" if entry.stuck_since is not None else "mark the entry stuck (its content is lost) and "
    return PlannedRecovery(entry.version, RecoveryOutcome.ABANDONED,
                           f"{first}abandon (delete) it: version {entry.version} can be written again")


# --- deleted tables ---------------------------------------------------------------------------------


def deleted_table_error(store: LogStore) -> ConfigurationError | None:
    """The error for a table deleted from S3 whose entries are still in the external store (see the module
    docstring), or None when that is not the situation."""
    if not isinstance(store, ExternalLogStore) or _log_objects(store, 1):
        return None
    newest = store._latest_entry()
    if newest is None:
        return None
    entries = list(store._all_entries())
    return ConfigurationError(
        f"table {store.table_path} was deleted from S3 but {_place(store)} still holds {len(entries)} entr"
        f"{'y' if len(entries) == 1 else 'ies'} for it (tablePath {store.table_path!r}, versions up to "
        f"{newest.version}): _delta_log/ is empty, so there is no table to read, and no table can be created "
        f"at this path while the entries remain. Run `dynacommit drop-table {store.table_path}` to see them and "
        f"`dynacommit drop-table {store.table_path} --execute` to delete them, then write the table again (or "
        f"write it at another path)")


@dataclasses.dataclass(frozen=True)
class DropReport:
    """What :func:`drop_entries` found and did (``dry_run``: what it would do)."""

    table: str
    place: str
    entries: tuple[CommitEntry, ...]
    dropped: tuple[int, ...]
    changed: tuple[int, ...]
    """Versions whose entry changed between reading and deleting it: left alone."""
    objects_left: tuple[str, ...]
    """Keys still under the table's prefix outside ``_delta_log/`` (at most a LIST page of them)."""
    dry_run: bool

    @property
    def incomplete(self) -> int:
        return sum(not e.complete for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "entriesIn": self.place, "dryRun": self.dry_run,
                "entries": [{"version": e.version, "fileName": e.file_name, "complete": e.complete,
                             "tempPath": e.temp_path} for e in self.entries],
                "deleted": list(self.dropped), "changedMeanwhile": list(self.changed),
                "objectsLeft": list(self.objects_left),
                "objectsLeftTruncated": len(self.objects_left) >= _SHOWN_OBJECTS}


def drop_entries(store: LogStore, *, dry_run: bool = True) -> DropReport:
    """Delete every entry of a table whose ``_delta_log/`` is empty (a table deleted from S3); with
    ``dry_run`` (the default) only say which. A table whose log holds any object is refused with
    ``ConfigurationError``: its entries are how its writers agree on versions. Each entry is deleted only
    if it is still as read; the log is looked at again right before deleting."""
    if not isinstance(dry_run, bool):
        raise InvalidArgumentError(f"dry_run must be True or False, got {dry_run!r}")
    external = _external(store, "dropping a table's entries")
    _refuse_live(external)
    entries = tuple(external._all_entries())
    left = tuple(o.key for o in itertools.islice(external.objects.list(external.uri.key("")), _SHOWN_OBJECTS))
    dropped: list[int] = []
    changed: list[int] = []
    if not dry_run and entries:
        _refuse_live(external)
        for entry in entries:
            (dropped if external._drop_entry(entry) else changed).append(entry.version)
    return DropReport(external.table_path, _place(external), entries, tuple(dropped), tuple(changed), left, dry_run)


def _refuse_live(store: ExternalLogStore) -> None:
    found = _log_objects(store, 3)
    if found:
        shown = ", ".join(key[len(store.log_prefix):] for key in found)
        raise ConfigurationError(
            f"table {store.table_path} is not deleted: _delta_log/ still holds {shown}"
            f"{', ...' if len(found) == 3 else ''}. drop-table removes the DynamoDB entries of a table whose S3 "
            f"files are gone, and never those of a live table (its writers agree on versions through them); "
            f"delete the table's S3 prefix first if the table is to go")


def _log_objects(store: ExternalLogStore, limit: int) -> list[str]:
    """Keys of at most ``limit`` objects under ``_delta_log/`` (temp files, checkpoints, anything)."""
    return [o.key for o in itertools.islice(store.objects.list(store.log_prefix), limit)]


def _place(store: ExternalLogStore) -> str:
    name = getattr(store, "ddb_table", None)
    return f"DynamoDB table {name}" if name else "the external store"


def _external(store: LogStore, what: str) -> ExternalLogStore:
    if not isinstance(store, ExternalLogStore):
        raise InvalidArgumentError(f"{what} needs a log store with external entries (DynamoDB), not "
                                   f"{type(store).__name__}")
    return store
