"""Delta's conflict rules: can our commit, built on version R, go on top of the commits that won R+1 ..?

:func:`check` takes our :class:`~table.log.commit.Commit` and ONE winning commit (its version and actions)
and returns a :data:`Verdict`, or raises. It is pure: no I/O, nothing mutated; the transaction calls it
for each winner in order (delta-spark's ``ConflictChecker``). The rules, in the order applied:

1. **Our job already committed.** The winner holds a ``txn`` for our ``app_id`` at our ``app_version`` or
   newer: :class:`AlreadyCommitted` (an idempotent job re-run, or another attempt of it, landed first).
2. **Concurrent create.** We were creating the table and the winner created it: by our ``on_existing``,
   go on as an append if its schema and partitioning are ours and its protocol and metadata are ones we
   may write (:class:`Rebase` with the commit turned into an append), raise ``TableExistsError``
   (mode ``error``), :class:`Skip` (mode ``ignore``), or conflict (an overwrite).
3. **ProtocolChanged / MetadataChanged.** The winner changed the protocol or the metadata: our actions
   assumed the old ones. Except a winner that only moved identity high-water marks (an append that handed
   out identity values, ``table.log.constraints.identity_only_change``) when ours is an append that hands
   out identity values too (``Commit.replan``): the transaction re-plans our values above the winner's
   instead (``table.data.identity``), so concurrent identity appends all commit, with distinct values.
4. **ConcurrentDeleteDelete.** The winner removed a file we remove too.
5. **ConcurrentDeleteRead.** The winner removed a file we read (any ``remove``, ``dataChange`` or not: a
   compaction that rewrote a file of the partition we overwrite would otherwise keep its rows alive).
6. **ConcurrentAppend.** The winner added data (``dataChange=true``) to what we read. Under
   ``WriteSerializable`` (the default) a winner that is a blind append never conflicts unless we change
   the metadata: the serial order puts it after us. Under ``Serializable`` it does.
7. **Metadata domains.** The winner changed a metadata domain (``domainMetadata``) that we change too
   (PROTOCOL.md: two overlapping transactions conflict on the same domain; delta-spark raises
   ConcurrentTransaction). Except ``delta.rowTracking``: its high-water mark is set afresh at every
   attempt, above the winner's (``table.log.writer_features``).

A blind append reads nothing, so only rules 1-4 can stop it: appends never conflict with each other. A
compaction reads exactly the files it rewrites: appends never conflict with it, a removal of one of its
files does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Union

from table.errors import CommitConflictError, ConflictKind, TableExistsError
from table.log.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from table.log.column_mapping import MODE, PHYSICAL
from table.log.commit import Commit, IsolationLevel, OnExisting, ReadKind
from table.log.constraints import TableRules, identity_only_change, rules_of
from table.log.protocol import check_writable
from table.log.schema import DeltaType
from table.log.writer_features import ROW_TRACKING_DOMAIN

__all__ = ["AlreadyCommitted", "Rebase", "Skip", "Verdict", "Winner", "check", "partition_types"]


@dataclasses.dataclass(frozen=True)
class Winner:
    """A commit that won a version we wanted: its version and actions, with what the rules need."""

    version: int
    actions: Sequence[Action]

    @property
    def info(self) -> CommitInfo | None:
        return next((a for a in self.actions if isinstance(a, CommitInfo)), None)

    @property
    def operation(self) -> str:
        info = self.info
        return (info.operation or "") if info is not None else ""

    @property
    def is_blind_append(self) -> bool:
        """The winner's own word (``commitInfo.isBlindAppend``); absent means no."""
        info = self.info
        return bool(info is not None and info.is_blind_append)

    @property
    def txn_id(self) -> str | None:
        info = self.info
        return None if info is None else getattr(info, "txnId", None)


@dataclasses.dataclass(frozen=True)
class Rebase:
    """No conflict: go on with ``commit`` (ours, or ours turned into an append to a created table)."""

    commit: Commit


@dataclasses.dataclass(frozen=True)
class AlreadyCommitted:
    """Our application's ``txn`` is in the winner at ``version``: nothing to write."""

    version: int


@dataclasses.dataclass(frozen=True)
class Skip:
    """mode="ignore" and the winner created the table: nothing to write."""

    version: int


Verdict = Union[Rebase, AlreadyCommitted, Skip]

PartitionLookup = Callable[[str], Mapping[str, str | None] | None]
"""The partition values of a live file by path (for a ``remove`` that does not carry them)."""


def check(commit: Commit, winner: Winner, *, creating: bool, isolation: IsolationLevel,
          types: Mapping[str, DeltaType], lookup: PartitionLookup, table: str,
          base_metadata: Metadata | None = None) -> Verdict:
    """Apply the rules of the module docstring to one winner; raise on a conflict.

    ``creating``: our commit creates the table (it was built on no snapshot). ``types``: the Delta types of
    the partition columns; ``lookup``: partition values of files of the snapshot ours was built on (and of
    files earlier winners added), for removes without them. ``base_metadata``: the table's metadata before
    the winner (to tell a change of identity high-water marks only).
    """

    def conflict(kind: ConflictKind, reason: str) -> CommitConflictError:
        return CommitConflictError(version=winner.version, operation=winner.operation, reason=reason, kind=kind)

    if commit.app_id is not None:
        for action in winner.actions:
            if isinstance(action, Txn) and action.app_id == commit.app_id and action.version >= commit.app_version:
                return AlreadyCommitted(winner.version)
    if creating:
        verdict = _concurrent_create(commit, winner, table, conflict)
        if verdict is not None:
            return verdict
    for action in winner.actions:
        if isinstance(action, Protocol):
            raise conflict(ConflictKind.PROTOCOL_CHANGED, "it changed the table's protocol, which this commit read")
        if isinstance(action, Metadata):
            if commit.replan is not None and identity_only_change(base_metadata, action):
                continue
            raise conflict(ConflictKind.METADATA_CHANGED,
                           "it changed the table's metadata (schema, partitioning or properties), which this commit read")
    ours = {a.domain for a in commit.actions if isinstance(a, DomainMetadata)} - {ROW_TRACKING_DOMAIN}
    for action in winner.actions:
        if isinstance(action, DomainMetadata) and action.domain in ours:
            raise conflict(ConflictKind.CONCURRENT_TRANSACTION,
                           f"it changed metadata domain {action.domain!r}, which this commit changes too")
    blind_appends_count = isolation is IsolationLevel.SERIALIZABLE or commit.changes_metadata
    scope = commit.read_scope
    for action in winner.actions:
        if isinstance(action, RemoveFile):
            if action.path in commit.removes:
                raise conflict(ConflictKind.CONCURRENT_DELETE_DELETE,
                               f"it also removed file {action.path!r}, which this commit removes")
            values = action.partition_values if action.partition_values is not None else lookup(action.path)
            if scope.kind is ReadKind.PREDICATE and not action.data_change:
                continue  # a compaction moved rows we read (and found nothing to change in) without changing them
            if scope.covers_file(action.path, values, types=types):
                raise conflict(ConflictKind.CONCURRENT_DELETE_READ,
                               f"it removed file {action.path!r}{_where(values)}, which this commit read")
        elif isinstance(action, AddFile) and action.data_change:
            if winner.is_blind_append and not blind_appends_count:
                continue
            if scope.covers_added(action, types=types):
                level = f" under isolation level {isolation.value}" if winner.is_blind_append else ""
                raise conflict(ConflictKind.CONCURRENT_APPEND,
                               f"it added file {action.path!r}{_where(action.partition_values)}, which this commit "
                               f"read{level}")
    return Rebase(commit)


def _concurrent_create(commit: Commit, winner: Winner, table: str, conflict) -> Verdict | None:
    """Rule 2: we were creating the table; the winner (version 0) created it. None: not a create."""
    theirs = next((a for a in winner.actions if isinstance(a, Metadata)), None)
    protocol = next((a for a in winner.actions if isinstance(a, Protocol)), None)
    if theirs is None or protocol is None:
        return None  # malformed version 0; the replay of the winner reports it
    if commit.on_existing is OnExisting.FAIL:
        raise TableExistsError(f"a table was created at {table} (version {winner.version}) while this write was "
                               f"running; nothing was committed. Use mode='append' or 'overwrite'")
    if commit.on_existing is OnExisting.SKIP:
        return Skip(winner.version)
    ours = commit.metadata
    assert ours is not None
    if commit.on_existing is OnExisting.CONFLICT:
        raise conflict(ConflictKind.CONCURRENT_CREATE,
                       "it created the table concurrently, and this overwrite cannot know what it would replace")
    if _schema_fields(theirs.schema_string) != _schema_fields(ours.schema_string) or \
            list(theirs.partition_columns) != list(ours.partition_columns):
        raise conflict(ConflictKind.CONCURRENT_CREATE,
                       f"it created the table concurrently with a different schema or partitioning (theirs: "
                       f"partition columns {theirs.partition_columns}, schema {theirs.schema_string}); write data "
                       f"that matches it")
    # Their protocol and properties rule the table now: we must be able to write it as they made it, and our
    # rows must have been checked against the same rules.
    check_writable(protocol, metadata=theirs)
    if _rules(protocol, theirs) != _rules(commit.protocol, ours):
        raise conflict(ConflictKind.CONCURRENT_CREATE,
                       "it created the table concurrently with other CHECK constraints, invariants, generated or "
                       "identity columns than the ones this write's rows were checked against; write again")
    return Rebase(commit.as_append_to_existing_table())


def _rules(protocol: Protocol | None, metadata: Metadata) -> TableRules:
    """The rules on rows a table sets, identity high-water marks aside."""
    rules = rules_of(protocol, metadata)
    return dataclasses.replace(rules, identity=tuple(dataclasses.replace(i, high_water_mark=None)
                                                     for i in rules.identity))


def _schema_fields(schema_string: str) -> list:
    """The schema's fields without column metadata, for comparing two creators' schemas."""

    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "metadata"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(json.loads(schema_string).get("fields", []))


def partition_types(metadata: Metadata | None) -> dict[str, DeltaType]:
    """The Delta type of each partition column of the table ``metadata`` describes, by the name partition
    values use (the physical name on a table with column mapping)."""
    if metadata is None:
        return {}
    columns = set(metadata.partition_columns)
    mapped = (metadata.configuration.get(MODE) or "none").lower() in ("name", "id")
    return {((f.get("metadata") or {}).get(PHYSICAL, f["name"]) if mapped else f["name"]): f["type"]
            for f in json.loads(metadata.schema_string).get("fields", []) if f["name"] in columns}


def _where(values: Mapping[str, str | None] | None) -> str:
    if not values:
        return ""
    return " in partition " + ", ".join(f"{k}={v if v is not None else 'null'}" for k, v in values.items())
