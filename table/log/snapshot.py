"""Loading a table's state at a version: newest checkpoint, then only the commits after it.

``load_snapshot(log_store)`` costs, whatever the length of the history:

1. one GET of ``_delta_log/_last_checkpoint`` (the hint);
2. the checkpoint it names (one GET per part; a V2 checkpoint, one GET per sidecar too), read column-wise
   (``table.log.checkpoint_read``);
3. ``log_store.latest_version(start=checkpoint)``: ONE DynamoDB query (newest entry first), which also
   finishes that entry if its writer died, and ONE listing of ``_delta_log/`` after that entry (the
   newest entry is a lower bound: items expire, and a writer that bypasses DynamoDB writes none);
4. one GET per commit after the checkpoint (at most ``delta.checkpointInterval`` of them when every
   writer checkpoints).

``update(log_store, snapshot)`` costs steps 3 and 4 only: a ``Table`` kept open, or opened again in the
same process (``table.table`` remembers each table's newest snapshot), reads only what is new.

Without a hint, or for time travel to a version older than the hint, ``_delta_log/`` is listed (in key
order, stopping past the target version) to find the newest complete checkpoint at or below the target;
without any, commits are replayed from 0.

A checkpoint whose row count differs from the hint's ``size`` is used anyway (with a warning): the hint is
suspect, not the checkpoint, when the checkpoint parses and holds a protocol and a metaData. A checkpoint
that is missing, unreadable parquet, or holds rows that are not actions is corrupt. Policy: log a warning
naming the file and the mismatch,
then rebuild the state without it, from an older complete checkpoint found by listing or from version 0,
**provided every commit needed for that still exists**; if one is gone (log cleanup), raise
``CorruptLogError`` naming the checkpoint, what mismatched and the missing commit. Falling back is
correct, never a guess: the commits are the source of truth and a checkpoint is only their summary.

A commit file that is not valid (not JSON, cut short, not an action) raises ``CorruptLogError`` naming the
version and the line. Tables needing a reader feature we do not implement raise
``UnsupportedFeatureError`` (``table.log.protocol.check_readable``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import pyarrow as pa

from logstore import deadline, retry
from logstore.base import LogStore
from logstore.entries import deleted_table_error
from logstore.errors import (
    ArgumentTypeError,
    CorruptLogError,
    InvalidArgumentError,
    StorageError,
    TableNotFoundError,
    VersionNotFoundError,
)
from table.log.actions import (
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    Txn,
    parse_commit,
)
from table.log.checkpoint_files import (
    LAST_CHECKPOINT,
    CheckpointRef,
    LastCheckpoint,
    listed_checkpoints,
    read_last_checkpoint,
)
from table.log.checkpoint_read import load_checkpoint
from table.log.cleanup import earliest_readable_version
from table.log.column_mapping import Layout, layout_of
from table.log.protocol import check_readable, column_mapping_supported
from table.log.schema import delta_to_arrow
from table.log.state import TableState, empty_state, replay

__all__ = ["Snapshot", "advance", "load_snapshot", "read_commit", "update"]

log = logging.getLogger(__name__)

_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A table at one version: its :class:`TableState` plus where it was loaded from.

    ``txn_versions`` maps an ``appId`` to the version of the commit holding its latest ``txn``, for the
    applications whose txn was seen in a commit replayed here; a txn that came from the checkpoint
    is not in it (checkpoints do not say which commit wrote a txn). ``time_travel`` is True when the
    snapshot was loaded at an explicit version: such a snapshot is never written on.
    ``in_commit_timestamp`` is the ``commitInfo.inCommitTimestamp`` of the commit at ``version`` when that
    commit was read here and has one (None when the snapshot's version came from a checkpoint).
    """

    state: TableState
    table_path: str
    checkpoint_version: int | None = None
    txn_versions: Mapping[str, int] = dataclasses.field(default_factory=lambda: _EMPTY)
    time_travel: bool = False
    in_commit_timestamp: int | None = None

    @property
    def version(self) -> int:
        return self.state.version

    @property
    def protocol(self) -> Protocol:
        assert self.state.protocol is not None
        return self.state.protocol

    @property
    def metadata(self) -> Metadata:
        assert self.state.metadata is not None
        return self.state.metadata

    @functools.cached_property
    def schema(self) -> pa.Schema:
        """The table's pyarrow schema, partition columns included, in the table's column order."""
        return delta_to_arrow(self.metadata.schema_string)

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @functools.cached_property
    def layout(self) -> Layout:
        """The table's column mapping (logical and physical schemas; ``table.log.column_mapping``)."""
        return layout_of(self.metadata.schema_string, self.metadata.configuration,
                         supported=column_mapping_supported(self.protocol))

    @property
    def configuration(self) -> dict[str, str | None]:
        return dict(self.metadata.configuration)

    @property
    def files(self) -> list[AddFile]:
        """The live data files, ordered by path (built once per state; a large table's readers and writers
        that need only some columns take ``state.files.to_arrow()`` instead)."""
        return self.state.files.sorted_actions()


def read_commit(log_store: LogStore, version: int) -> list[Action]:
    """The actions of commit ``version`` (finishing the entry first if its writer died).

    Raises ``VersionNotFoundError`` when there is no such commit, ``CorruptLogError`` naming the version
    and line when it does not parse.
    """
    body = log_store.read(version)
    return parse_commit(body, version=version, where=f"{log_store.table_path}/_delta_log/{version:020d}.json")


def advance(snapshot: Snapshot | None, commits: Sequence[tuple[int, Sequence[Action]]], *,
            table_path: str | None = None) -> Snapshot:
    """The snapshot after applying consecutive ``commits`` (already read) to ``snapshot``.

    Pure: no I/O. ``snapshot=None`` starts from before version 0 (then ``table_path`` is required).
    """
    if snapshot is None:
        if table_path is None:
            raise ValueError("advance(None, ...) needs the table_path")
        snapshot = Snapshot(state=empty_state(), table_path=table_path)
    if not commits:
        return snapshot
    state = replay(commits, state=snapshot.state if snapshot.state.version >= 0 else None)
    check_readable(state.protocol, metadata=state.metadata)  # type: ignore[arg-type]
    txn_versions = dict(snapshot.txn_versions)
    for version, actions in commits:
        for action in actions:
            if isinstance(action, Txn):
                txn_versions[action.app_id] = version
    info = next((a for a in commits[-1][1] if isinstance(a, CommitInfo)), None)
    return dataclasses.replace(snapshot, state=state, txn_versions=MappingProxyType(txn_versions), time_travel=False,
                               in_commit_timestamp=None if info is None else info.in_commit_timestamp)


# --- loading ----------------------------------------------------------------------------------------


def load_snapshot(log_store: LogStore, version: int | None = None) -> Snapshot:
    """The table at ``version`` (default: the newest), see the module docstring for cost and policy.

    Raises ``TableNotFoundError`` when there is no table, ``VersionNotFoundError`` when ``version`` does
    not exist, ``CorruptLogError``, ``UnsupportedFeatureError``.
    """
    if version is not None:
        if not isinstance(version, int) or isinstance(version, bool):
            raise ArgumentTypeError(f"version must be an int, got {type(version).__name__} {version!r}")
        if version < 0:
            raise InvalidArgumentError(f"version must be >= 0, got {version}")
    def load() -> Snapshot:
        hint = read_last_checkpoint(log_store)
        latest: int | None = None
        if version is None:
            target = latest = _latest_version(log_store, hint)
        else:
            target = version
        return _load(log_store, target, hint, latest)

    snapshot = _retrying(log_store, load, "loading")
    return dataclasses.replace(snapshot, time_travel=version is not None)


def _retrying(log_store: LogStore, read: Callable[[], Snapshot], what: str) -> Snapshot:
    """``read()``, run again after a transient storage error (no answer, a 5xx, throttling; each request
    was already retried) with the pauses of :data:`logstore.retry.RELOAD`, within the log store's deadline
    (``DYNACOMMIT_TIMEOUT_SECONDS``): loading only reads, so it can always start over. The last error is
    raised when the deadline would pass."""
    seconds = getattr(log_store, "timeout_seconds", None)
    with deadline.deadline(seconds, f"{what} a snapshot of {log_store.table_path}"):
        return retry.retry(read, policy=retry.RELOAD, level=logging.INFO,
                           retryable=lambda exc: isinstance(exc, StorageError) and exc.retryable,
                           what=f"{what} a snapshot of {log_store.table_path}")


def _latest_version(log_store: LogStore, hint: LastCheckpoint | None) -> int:
    """The newest version. A log whose commits were all cleaned up but that holds a checkpoint (and no
    hint) is at the checkpoint's version: a checkpoint is only written once its version is committed."""
    try:
        return log_store.latest_version(start=hint.version if hint is not None else 0)
    except TableNotFoundError:
        names = [info.name for info in log_store.list_files()]
        found = listed_checkpoints(names)
        if not found:
            raise
        return found[0].version


def _load(log_store: LogStore, target: int, hint: LastCheckpoint | None, latest: int | None) -> Snapshot:
    failed: dict[tuple[str, ...], CorruptLogError] = {}
    if hint is not None and hint.version <= target:
        try:
            base = _from_checkpoint(log_store, hint.checkpoint, hint.size)
        except CorruptLogError as exc:
            log.warning("table %s: %s; rebuilding the state without that checkpoint", log_store.table_path, exc)
            failed[hint.checkpoint.names] = exc
        else:
            return _replay_to(log_store, base, target, latest)
    candidates = _listed_checkpoints(log_store, target)
    for ref in candidates:
        if ref.names in failed:
            continue
        try:
            base = _from_checkpoint(log_store, ref, None)
        except CorruptLogError as exc:
            log.warning("table %s: %s; trying another checkpoint", log_store.table_path, exc)
            failed[ref.names] = exc
            continue
        return _replay_to(log_store, base, target, latest, failed=failed)
    base = Snapshot(state=empty_state(), table_path=log_store.table_path)
    return _replay_to(log_store, base, target, latest, failed=failed)


def _from_checkpoint(log_store: LogStore, ref: CheckpointRef, hinted_size: int | None) -> Snapshot:
    """The state of checkpoint ``ref``. A row count other than the hint's ``size`` makes the hint suspect,
    not the checkpoint: the checkpoint is used when it parses and holds a protocol and a metaData (its
    replay checks both), as delta-kernel does."""
    loaded = load_checkpoint(log_store, ref)
    state = loaded.state
    if hinted_size is not None and hinted_size != loaded.actions:
        log.warning("table %s: %s says the checkpoint of version %d holds %d actions, it holds %d; the hint is "
                    "stale or was written for another file, the checkpoint itself is whole", log_store.table_path,
                    LAST_CHECKPOINT, ref.version, hinted_size, loaded.actions)
    check_readable(state.protocol, metadata=state.metadata)  # type: ignore[arg-type]
    return Snapshot(state=state, table_path=log_store.table_path, checkpoint_version=ref.version)


def _replay_to(log_store: LogStore, base: Snapshot, target: int, latest: int | None, *,
               failed: Mapping[tuple[str, ...], CorruptLogError] | None = None) -> Snapshot:
    """Read and apply commits ``base.version + 1 .. target``.

    ``latest`` is the newest version when the caller asked for it (None for time travel). A commit
    missing at or below the newest version is corruption (deleted behind the log's back, or by log
    cleanup with no checkpoint to stand in); a target above it is a version that does not exist yet.
    ``failed`` are the corrupt checkpoints skipped on the way here: a missing commit is then reported
    together with them, since it is what made the fallback impossible.
    """
    try:
        commits = [(v, read_commit(log_store, v)) for v in range(base.version + 1, target + 1)]
    except VersionNotFoundError as exc:
        if latest is None:
            try:
                latest = log_store.latest_version()
            except TableNotFoundError:
                raise TableNotFoundError(f"no table at {log_store.table_path}: {exc}") from None
        if target > latest:
            raise VersionNotFoundError(
                f"version {target} of table {log_store.table_path} does not exist; its versions go up to "
                f"{latest}") from None
        earliest = earliest_readable_version(log_store)
        if earliest is not None and target < earliest:
            raise VersionNotFoundError(
                f"version {target} of table {log_store.table_path} can no longer be read: log cleanup removed the "
                f"log files before version {earliest} (delta.logRetentionDuration); the oldest readable version "
                f"is {earliest}") from None
        gone = deleted_table_error(log_store)  # the table deleted from S3, its DynamoDB entries left
        if gone is not None:
            raise gone from None
        if failed:
            reasons = "; ".join(str(e) for e in failed.values())
            raise CorruptLogError(
                f"table {log_store.table_path}: {reasons}. The state cannot be rebuilt without that checkpoint "
                f"because a commit it summarizes is gone ({exc}). Restore the checkpoint file, or write a new "
                f"checkpoint with a client that can still read the table"
            ) from None
        raise CorruptLogError(
            f"table {log_store.table_path}: the table has versions up to {latest}, but a commit needed to read "
            f"version {target} is gone ({exc}) and no readable checkpoint at or below version {target} covers "
            f"it: it was deleted behind the log's back (or by log cleanup without a checkpoint). Restore the "
            f"missing _delta_log file from a backup or an S3 object version; until then the table cannot be "
            f"read at that version"
        ) from None
    return advance(base, commits)


def _listed_checkpoints(log_store: LogStore, target: int) -> list[CheckpointRef]:
    """Complete checkpoints at or below ``target``, newest first, from one listing of ``_delta_log/``
    that skips the temp files (``.tmp/`` sorts before the digits) and stops past ``target``."""
    stop = f"{target + 1:020d}"
    names = []
    for info in log_store.list_files():
        if info.name >= stop:
            break
        names.append(info.name)
    return listed_checkpoints(names)


def update(log_store: LogStore, snapshot: Snapshot) -> Snapshot:
    """The newest snapshot, reading only what ``snapshot`` lacks: one DynamoDB query, then the commits
    after ``snapshot.version``. When the gap is longer than the checkpoint interval and a newer
    checkpoint exists, that checkpoint is read instead of the commits it summarizes."""
    def read() -> Snapshot:
        latest = log_store.latest_version(start=snapshot.version)
        if latest <= snapshot.version:
            return dataclasses.replace(snapshot, time_travel=False)
        if latest - snapshot.version > snapshot.state.checkpoint_interval:
            hint = read_last_checkpoint(log_store)
            if hint is not None and snapshot.version < hint.version <= latest:
                return _load(log_store, latest, hint, latest)
        commits = [(v, read_commit(log_store, v)) for v in range(snapshot.version + 1, latest + 1)]
        return advance(snapshot, commits)

    return _retrying(log_store, read, "updating")
