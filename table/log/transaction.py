"""Optimistic transactions: write version R+1, and on losing it check the winners, rebase and retry.

A transaction read the table at version R (its :class:`Snapshot`), built actions, and says what it read
(:class:`ReadScope`). :func:`commit` adds ``commitInfo`` (and ``txn`` for an application id) and writes
R+1 through the log store, whose conditional put in DynamoDB makes exactly one writer win each version.
When the version is taken, the commits that won (R+1 .. latest) are read and checked against this
transaction with Delta's rules (delta-spark ``ConflictChecker``), in this order, per winning commit:

1. its ``txn`` for our ``app_id`` is at least our ``app_version``: another attempt of our job landed
   first; we return ``skipped`` (idempotent jobs);
2. we were creating the table and it created it: same schema and partition columns → our ``protocol``
   and ``metaData`` are dropped and we go on as an append; otherwise a conflict;
3. it changed the ``protocol`` or the ``metaData`` → conflict (our actions assumed the old ones);
4. it removed a file we remove → conflict (ConcurrentDeleteDelete: the file's rows would be deleted
   twice, or rewritten twice);
5. it removed (``dataChange``) a file in a partition our read scope covers → conflict
   (ConcurrentDeleteRead: what we read is gone);
6. it added (``dataChange``) a file in a partition our read scope covers → conflict (ConcurrentAppend:
   we would have read those rows, e.g. an overwrite would have had to remove them).

A blind append reads nothing, so only rules 1-4 can stop it: concurrent appends never conflict. A
commit that changes ``metaData`` is checked as if it read the whole table. Without a conflict the
snapshot is rebased onto the winners (pure, from the commits just read) and R+1 becomes the next
version, after a pause with exponential backoff and full jitter. Work per commit does not grow with the
history: a write (HEAD, GetItem, PUT temp, PutItem, PUT N.json, DELETE temp, UpdateItem) and, per lost
race, one DynamoDB query plus one GET per winning commit; a listing only when DynamoDB's newest entry is
near expiry (see ``LogStore.latest_version``). An attempt of ours found among the winners (by
``commitInfo.txnId``: a won version whose answer was lost) ends the transaction at that version.

After a commit at ``v`` with ``v % delta.checkpointInterval == 0`` a checkpoint is written; it never
fails the commit.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import random
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata as importlib_metadata

from logstore.base import LogStore
from logstore.errors import (
    CorruptLogError,
    DynacommitError,
    VersionExistsError,
    VersionNotFoundError,
)
from table.errors import AppendOnlyError, CommitConflictError
from table.log.actions import (
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
    serialize_commit,
)
from table.log.checkpoint import write_checkpoint
from table.log.protocol import check_writable
from table.log.schema import DeltaType, parse_partition_value
from table.log.snapshot import Snapshot, advance, read_commit

__all__ = [
    "CommitOutcome",
    "CommitRetriesExhaustedError",
    "ReadOnlySnapshotError",
    "ReadScope",
    "client_version",
    "commit",
    "txn_version",
]

log = logging.getLogger(__name__)

BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 2.0
TXN_SCAN_LIMIT = 100
"""Commits read backwards, at most, to find which one holds an application's txn when the txn came
from a checkpoint (checkpoints do not record the version of each txn)."""


class CommitRetriesExhaustedError(DynacommitError):
    """Every attempt lost the race for the next version to a commit that did not conflict, until
    ``max_attempts`` or ``max_seconds`` ran out. Nothing of this transaction was committed."""

    def __init__(self, table: str, attempts: int, seconds: float, last_version: int):
        super().__init__(
            f"could not commit to table {table}: {attempts} attempts in {seconds:.1f}s all lost the race for "
            f"the next version (last tried {last_version}) to other writers; nothing was committed. The table "
            f"is very busy: retry later, batch more data per commit, or raise max_attempts/max_seconds"
        )
        self.table = table
        self.attempts = attempts
        self.seconds = seconds
        self.last_version = last_version

    def __reduce__(self):
        return type(self), (self.table, self.attempts, self.seconds, self.last_version)


class ReadOnlySnapshotError(DynacommitError, ValueError):
    """A commit was attempted on a snapshot loaded at an explicit version (time travel)."""


@dataclasses.dataclass(frozen=True)
class ReadScope:
    """What a transaction read, for conflict detection: nothing (a blind append), the whole table, or
    the partitions matching any of ``specs`` (each some partition columns and their serialized values;
    None or "" is the null partition). Build one with the three class methods."""

    kind: str
    specs: tuple[tuple[tuple[str, str | None], ...], ...] = ()

    @classmethod
    def blind_append(cls) -> ReadScope:
        """Read nothing: the transaction only adds files, so no concurrent change can invalidate it."""
        return cls("blind_append")

    @classmethod
    def whole_table(cls) -> ReadScope:
        """Read every file (a full overwrite, a schema change)."""
        return cls("whole_table")

    @classmethod
    def partitions(cls, values: Sequence[Mapping[str, str | None]]) -> ReadScope:
        """Read the partitions matching any of ``values``; ``{"p": "a"}`` covers every file with p=a
        whatever its other partition columns."""
        return cls("partitions", tuple(tuple(sorted((k, v or None) for k, v in d.items())) for d in values))

    def covers(self, partition_values: Mapping[str, str | None] | None, *,
               types: Mapping[str, DeltaType] | None = None) -> bool:
        """Whether a file with these partition values is inside what was read (unknown values: yes).

        ``types`` are the Delta types of the partition columns (:func:`commit` passes the table's):
        values then compare as the values they denote, since writers serialize the same value
        differently (delta-rs writes the timestamp ``2024-01-01 00:00:00``, we write
        ``2024-01-01 00:00:00.000000``), and telling those apart would miss a conflict. A value that
        does not parse as its type is taken as covering. Without ``types``, values compare as strings.
        """
        if self.kind == "blind_append":
            return False
        if self.kind == "whole_table" or partition_values is None:
            return True
        types = types or {}
        return any(all(_same_partition_value(partition_values.get(k) or None, v, types.get(k)) for k, v in spec)
                   for spec in self.specs)


def _same_partition_value(found: str | None, read: str | None, delta_type: DeltaType | None) -> bool:
    if found == read:
        return True
    if found is None or read is None or delta_type is None:
        return False
    try:
        a, b = _parse_partition_value(found, delta_type), _parse_partition_value(read, delta_type)
    except (ValueError, TypeError):
        return True  # cannot tell: taken as the same partition, as a missed conflict could lose data
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


_parse_partition_value = functools.lru_cache(maxsize=4096)(parse_partition_value)
"""Values are parsed again for every file a winning commit touches; most repeat."""


@dataclasses.dataclass(frozen=True)
class CommitOutcome:
    """What :func:`commit` did. ``version`` is the version written, or when ``skipped`` the version that
    holds the application's txn (if that txn came from a checkpoint and is older than the
    ``TXN_SCAN_LIMIT`` commits before it, the checkpoint's version: the txn is at or before it).
    ``snapshot`` is the table after the commit, or the current one when skipped."""

    version: int
    skipped: bool
    attempts: int
    snapshot: Snapshot


def client_version() -> str:
    """``dynacommit-<version>``, as written to ``commitInfo.clientVersion``."""
    try:
        return f"dynacommit-{importlib_metadata.version('dynacommit')}"
    except importlib_metadata.PackageNotFoundError:
        return "dynacommit-unknown"


@dataclasses.dataclass
class _Txn:
    """The mutable state of one :func:`commit` call across its attempts."""

    actions: list[Action]
    read_scope: ReadScope
    app_id: str | None
    app_version: int | None
    creating: bool
    removes: frozenset[str]


def commit(log_store: LogStore, snapshot: Snapshot | None, actions: Sequence[Action], *, operation: str,
           operation_parameters: dict[str, str], read_scope: ReadScope, app_id: str | None = None,
           app_version: int | None = None, operation_metrics: dict[str, str] | None = None,
           engine_info: str | None = None, max_attempts: int = 20, max_seconds: float = 120.0) -> CommitOutcome:
    """Commit ``actions`` on top of ``snapshot`` (None: create the table at version 0), see the module
    docstring for the conflict rules.

    Raises ``CommitConflictError`` on a conflict, ``CommitRetriesExhaustedError`` when the attempts or
    time run out, ``AppendOnlyError`` for data removal on an append-only table (before writing),
    ``UnsupportedFeatureError`` for a table we may not write, ``ReadOnlySnapshotError`` for a
    time-travelled snapshot. ``CommitStateUnknownError`` from the log store propagates untouched: the
    commit may have happened, and nothing is cleaned up.
    """
    txn = _prepare(snapshot, actions, operation_parameters, read_scope, app_id, app_version, max_attempts)
    if snapshot is not None and app_id is not None:
        held = snapshot.state.app_version(app_id)
        if held is not None and held >= app_version:  # type: ignore[operator]
            return CommitOutcome(txn_version(log_store, snapshot, app_id), True, 0, snapshot)
    started = time.monotonic()
    attempts = 0
    tried: set[str] = set()  # commitInfo.txnId of each attempt: one of them may be among the winners
    while True:
        attempts += 1
        version = -1 if snapshot is None else snapshot.version
        version += 1
        # The attempt number goes into the commit itself, so history shows how contended each commit was.
        metrics = {**(operation_metrics or {}), "numAttempts": str(attempts)}
        txn_id = str(uuid.uuid4())
        tried.add(txn_id)
        info = _commit_info(operation, operation_parameters, metrics, engine_info, txn,
                            read_version=None if snapshot is None else snapshot.version, txn_id=txn_id)
        extra: list[Action] = [] if app_id is None else [
            Txn(app_id=app_id, version=app_version, last_updated=info.timestamp)]  # type: ignore[arg-type]
        written = [info, *extra, *txn.actions]
        try:
            log_store.write(version, serialize_commit(written))
        except VersionExistsError:
            winners = _read_winners(log_store, version)
            landed = _own_attempt(winners, tried)
            if landed is not None:
                # An earlier attempt of ours won (its answer was lost); the log holds this transaction once.
                snapshot = advance(snapshot, [w for w in winners if w[0] <= landed], table_path=log_store.table_path)
                return CommitOutcome(landed, False, attempts, snapshot)
            skipped_at = _check_winners(winners, snapshot, txn)
            snapshot = advance(snapshot, winners, table_path=log_store.table_path)
            if skipped_at is not None:
                return CommitOutcome(skipped_at, True, attempts, snapshot)
            elapsed = time.monotonic() - started
            if attempts >= max_attempts or elapsed >= max_seconds:
                raise CommitRetriesExhaustedError(log_store.table_path, attempts, elapsed, version) from None
            delay = random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempts - 1)))
            log.debug("lost version %d of %s to %d commit(s) without conflict; retrying in %.3fs",
                      version, log_store.table_path, len(winners), delay)
            time.sleep(min(delay, max(0.0, max_seconds - elapsed)))
            continue
        after = advance(snapshot, [(version, written)], table_path=log_store.table_path)
        _maybe_checkpoint(log_store, after)
        return CommitOutcome(version, False, attempts, after)


def _prepare(snapshot: Snapshot | None, actions: Sequence[Action], operation_parameters: Mapping[str, str],
             read_scope: ReadScope, app_id: str | None, app_version: int | None, max_attempts: int) -> _Txn:
    """Validate the arguments and the table before anything is written."""
    if (app_id is None) != (app_version is None):
        raise ValueError("app_id and app_version must be given together")
    if app_version is not None and (not isinstance(app_version, int) or isinstance(app_version, bool)):
        raise ValueError(f"app_version must be an int, got {app_version!r}")
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    for key, value in operation_parameters.items():
        if not isinstance(value, str):
            raise ValueError(f"operation parameter {key!r} must be a string (Delta stores them as strings), "
                             f"got {value!r}; encode it, e.g. with json.dumps")
    actions = list(actions)
    if any(isinstance(a, CommitInfo) for a in actions):
        raise ValueError("do not pass a commitInfo action: commit() writes it")
    if app_id is not None and any(isinstance(a, Txn) and a.app_id == app_id for a in actions):
        raise ValueError(f"do not pass a txn action for app_id {app_id!r}: commit() writes it")
    protocol = next((a for a in actions if isinstance(a, Protocol)), None)
    new_metadata = next((a for a in actions if isinstance(a, Metadata)), None)
    if snapshot is None:
        if protocol is None or new_metadata is None:
            raise ValueError("creating a table (snapshot=None) needs a protocol and a metaData action")
        check_writable(protocol, metadata=new_metadata)
        append_only = False
    else:
        if snapshot.time_travel:
            raise ReadOnlySnapshotError(
                f"the snapshot of table {snapshot.table_path} was loaded at version {snapshot.version} (time "
                f"travel) and cannot be written on; open the table without a version to write")
        check_writable(protocol or snapshot.protocol, metadata=new_metadata or snapshot.metadata)
        append_only = snapshot.state.append_only
    removes = frozenset(a.path for a in actions if isinstance(a, RemoveFile))
    if append_only and any(isinstance(a, RemoveFile) and a.data_change for a in actions):
        raise AppendOnlyError(
            f"table {snapshot.table_path} has delta.appendOnly=true and this {len(removes)}-file removal would "  # type: ignore[union-attr]
            f"delete data; nothing was written. Append instead, or set delta.appendOnly=false on the table")
    if snapshot is not None and new_metadata is not None:
        read_scope = ReadScope.whole_table()
    return _Txn(actions, read_scope, app_id, app_version, snapshot is None, removes)


def _commit_info(operation: str, parameters: Mapping[str, str], metrics: Mapping[str, str] | None,
                 engine_info: str | None, txn: _Txn, *, read_version: int | None, txn_id: str) -> CommitInfo:
    fields: dict[str, object] = {
        "timestamp": int(time.time() * 1000),
        "operation": operation,
        "operation_parameters": dict(parameters),
        "is_blind_append": txn.read_scope.kind == "blind_append" and not txn.removes,
        "engine_info": engine_info or f"dynacommit python/{sys.version_info.major}.{sys.version_info.minor}",
        "client_version": client_version(),
        "txnId": txn_id,
    }
    if metrics:
        fields["operation_metrics"] = dict(metrics)
    if read_version is not None:
        fields["readVersion"] = read_version
    return CommitInfo(**fields)


def _read_winners(log_store: LogStore, lost: int) -> list[tuple[int, list[Action]]]:
    """The commits from ``lost`` (known to exist) to the newest: one DynamoDB query, one GET each."""
    latest = max(lost, log_store.latest_version(start=lost))
    return [(v, read_commit(log_store, v)) for v in range(lost, latest + 1)]


def _own_attempt(winners: Sequence[tuple[int, Sequence[Action]]], tried: set[str]) -> int | None:
    """The version among ``winners`` written by one of our own attempts (by ``commitInfo.txnId``)."""
    for version, actions in winners:
        if any(isinstance(a, CommitInfo) and getattr(a, "txnId", None) in tried for a in actions):
            return version
    return None


def _check_winners(winners: Sequence[tuple[int, Sequence[Action]]], snapshot: Snapshot | None,
                   txn: _Txn) -> int | None:
    """Apply the rules of the module docstring to each winner in order. Returns the winner's version
    when our application's txn is already there (skip); raises CommitConflictError on a conflict;
    rewrites ``txn`` when a concurrent create matches ours."""
    known: dict[str, Mapping[str, str | None]] = (
        {} if snapshot is None else {p: a.partition_values for p, a in snapshot.state.files.items()})
    types = _partition_types(snapshot.metadata if snapshot is not None else
                             next((a for a in txn.actions if isinstance(a, Metadata)), None))
    for version, actions in winners:
        operation = next((a.operation or "" for a in actions if isinstance(a, CommitInfo)), "")

        def conflict(reason: str) -> CommitConflictError:
            return CommitConflictError(version=version, operation=operation, reason=reason)  # noqa: B023

        if txn.app_id is not None:
            for action in actions:
                if isinstance(action, Txn) and action.app_id == txn.app_id and action.version >= txn.app_version:
                    return version
        metadata_changed = any(isinstance(a, (Protocol, Metadata)) for a in actions)
        if txn.creating:
            _check_concurrent_create(version, actions, txn, conflict)
        elif metadata_changed:
            kinds = sorted({"protocol" if isinstance(a, Protocol) else "metadata (schema, partitioning or "
                            "properties)" for a in actions if isinstance(a, (Protocol, Metadata))})
            raise conflict(f"it changed the table's {' and '.join(kinds)}, which this transaction read")
        for action in actions:
            if isinstance(action, RemoveFile):
                if action.path in txn.removes:
                    raise conflict(f"it also removed file {action.path!r}, which this transaction removes "
                                   f"(concurrent delete)")
                values = action.partition_values if action.partition_values is not None else known.get(action.path)
                if action.data_change and txn.read_scope.covers(values, types=types):
                    raise conflict(f"it removed file {action.path!r}{_where(values)}, which this transaction read")
            elif isinstance(action, AddFile):
                known[action.path] = action.partition_values
                if action.data_change and txn.read_scope.covers(action.partition_values, types=types):
                    raise conflict(f"it added file {action.path!r}{_where(action.partition_values)}, which this "
                                   f"transaction read (concurrent append)")
    return None


def _partition_types(metadata: Metadata | None) -> dict[str, DeltaType]:
    """The Delta type of each partition column of the table ``metadata`` describes."""
    if metadata is None:
        return {}
    columns = set(metadata.partition_columns)
    return {f["name"]: f["type"] for f in json.loads(metadata.schema_string).get("fields", []) if f["name"] in columns}


def _check_concurrent_create(version: int, actions: Sequence[Action], txn: _Txn,
                             conflict: Callable[[str], CommitConflictError]) -> None:
    """We were creating the table and lost version 0: go on as an append if theirs is the same table."""
    theirs = next((a for a in actions if isinstance(a, Metadata)), None)
    ours = next(a for a in txn.actions if isinstance(a, Metadata))
    if theirs is None:
        raise conflict("the table was created concurrently, and this transaction also tried to create it")
    same_schema = _schema_fields(theirs.schema_string) == _schema_fields(ours.schema_string)
    if not same_schema or list(theirs.partition_columns) != list(ours.partition_columns):
        raise conflict(
            f"it created the table concurrently with a different schema or partitioning (theirs: partition "
            f"columns {theirs.partition_columns}, schema {theirs.schema_string}); write data that matches it")
    txn.actions = [a for a in txn.actions if not isinstance(a, (Protocol, Metadata))]
    txn.creating = False


def _schema_fields(schema_string: str) -> list:
    """The schema's fields without column metadata, for comparing two creators' schemas."""

    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "metadata"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(json.loads(schema_string).get("fields", []))


def _where(values: Mapping[str, str | None] | None) -> str:
    if not values:
        return ""
    return " in partition " + ", ".join(f"{k}={v if v is not None else 'null'}" for k, v in values.items())


def txn_version(log_store: LogStore, snapshot: Snapshot, app_id: str) -> int:
    """The version of the commit holding ``app_id``'s latest txn (see :class:`CommitOutcome`)."""
    known = snapshot.txn_versions.get(app_id)
    if known is not None:
        return known
    held = snapshot.state.app_txns[app_id]
    newest = snapshot.checkpoint_version if snapshot.checkpoint_version is not None else snapshot.version
    for version in range(newest, max(-1, newest - TXN_SCAN_LIMIT), -1):
        try:
            actions = read_commit(log_store, version)
        except (VersionNotFoundError, CorruptLogError):
            break  # cleaned up (or unreadable): the checkpoint's version is the best answer left
        if any(isinstance(a, Txn) and a.app_id == app_id and a.version == held.version for a in actions):
            return version
    log.info("txn of %s in %s is older than the %d commits before its checkpoint; reporting version %d",
             app_id, log_store.table_path, TXN_SCAN_LIMIT, newest)
    return newest


def _maybe_checkpoint(log_store: LogStore, snapshot: Snapshot) -> None:
    """Checkpoint every ``delta.checkpointInterval`` commits. The commit is durable already: a failure
    here must not make the caller believe it failed (a caller that retries without an app id would
    write the data twice), so every exception is logged with its traceback and swallowed."""
    version = snapshot.version
    if version <= 0 or version % snapshot.state.checkpoint_interval != 0:
        return
    try:
        write_checkpoint(log_store, snapshot)
    except Exception:  # noqa: BLE001 - see the docstring: a checkpoint never fails a commit
        log.exception("commit %d of %s succeeded, but writing its checkpoint failed; the next checkpoint "
                      "interval tries again", version, log_store.table_path)
