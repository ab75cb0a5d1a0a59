"""The transaction an operation runs in: one snapshot read, what was read of it, one commit.

A :class:`Transaction` starts from a snapshot at version R (None: the table does not exist yet). The
operation reads through it and records what it read as it reads it (:meth:`Transaction.read_files`,
:meth:`~Transaction.read_predicate`, :meth:`~Transaction.read_partitions`,
:meth:`~Transaction.read_whole_table`: delta-spark's ``filterFiles``), so the commit's
:class:`~table.log.commit.ReadScope` is what the operation did, not what it declares afterwards. Its commit
goes through the one commit path (:func:`table.log.transaction.commit`: Delta's conflict rules, rebase and
retry); a transaction commits at most once, and a re-planning operation starts a new one on the newest
version (:meth:`Transaction.restart`). The handle that opened it (:class:`table.table.Table`) learns the
new snapshot through ``on_commit``; nothing else changes the handle.

The newest snapshot this process saw of each table is kept (:func:`newest_snapshot`), so that opening a
table again reads only the commits written since.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Protocol as TypingProtocol

from logstore import LogStore, ObjectStore, StorageOptions, TableUri
from logstore.errors import InvalidArgumentError, TableNotFoundError
from logstore.pool import Pool
from table.errors import ReadOnlySnapshotError
from table.location import TableLocation
from table.log import transaction as commit_loop
from table.log.actions import AddFile
from table.log.commit import Commit, FileMatcher, ReadKind, ReadScope
from table.log.snapshot import Snapshot, load_snapshot, update

__all__ = ["REUSE_SECONDS", "TableView", "Transaction", "forget_snapshots", "newest_snapshot", "snapshot_for_write",
           "transaction_of"]

REUSE_SECONDS = 30.0
"""How long an appending writer that names the table by URI (``write_table(uri, ...)``) takes this
process's last snapshot of the table as it is, without reading the log: its commit checks anyway
whether the version is still free, and rebases if it is not. Older snapshots are brought up to date
first (only the commits since are read)."""


class _Snapshots:
    """The newest snapshot this process saw of each table (a bounded LRU)."""

    def __init__(self, capacity: int = 32):
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, StorageOptions], tuple[Snapshot, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, StorageOptions]) -> tuple[Snapshot, float] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[str, StorageOptions], snapshot: Snapshot | None) -> None:
        if snapshot is None or snapshot.time_travel:
            return
        with self._lock:
            found = self._entries.get(key)
            if found is None or snapshot.version >= found[0].version:
                self._entries[key] = (snapshot, time.monotonic())
                self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_SNAPSHOTS = _Snapshots()


def forget_snapshots() -> None:
    """Forget every snapshot this process saw: the next ``Table(uri)`` reads each table from its checkpoint
    again, as a new process would (a repair tool, or a test that changed a log behind its back)."""
    _SNAPSHOTS.clear()


def remember(location: TableLocation, snapshot: Snapshot | None) -> None:
    """Keep ``snapshot`` as the newest this process saw of the table (unless it saw a newer one)."""
    _SNAPSHOTS.put(location.cache_key, snapshot)


def newest_snapshot(location: TableLocation, known: Snapshot | None = None) -> Snapshot:
    """The newest snapshot: from ``known`` or this process's last one when there is one (reading only the
    commits since), else from the table's checkpoint. Raises ``TableNotFoundError``."""
    if known is None or known.time_travel:
        cached = _SNAPSHOTS.get(location.cache_key)
        known = None if cached is None else cached[0]
    snapshot = load_snapshot(location.log_store) if known is None else update(location.log_store, known)
    remember(location, snapshot)
    return snapshot


def snapshot_for_write(location: TableLocation, *, reuse: bool = False) -> Snapshot | None:
    """The snapshot a writer starts from: the newest (None when there is no table yet, so that the first
    commit creates it). ``reuse``: a snapshot this process saw less than :data:`REUSE_SECONDS` ago is taken
    as it is (for blind appends, whose commit checks the version anyway)."""
    cached = _SNAPSHOTS.get(location.cache_key)
    if reuse and cached is not None and time.monotonic() - cached[1] < REUSE_SECONDS:
        return cached[0]
    try:
        return newest_snapshot(location)
    except TableNotFoundError:
        return None


_REFRESH = Pool(4, "dynacommit-refresh")
"""Where :meth:`Transaction.refresh_later` reads (a pool of its own: the reading waits for requests on the
log store's pool)."""


class TableView(TypingProtocol):
    """What reading a table needs: its stores and the snapshot read (a :class:`Transaction`, or a
    :class:`table.table.Table`)."""

    @property
    def location(self) -> TableLocation: ...

    @property
    def uri(self) -> TableUri: ...

    @property
    def storage_options(self) -> StorageOptions: ...

    @property
    def log_store(self) -> LogStore: ...

    @property
    def objects(self) -> ObjectStore: ...

    @property
    def snapshot(self) -> Snapshot | None: ...


class Opens(TypingProtocol):
    """A handle that opens transactions (:class:`table.table.Table`)."""

    def transaction(self) -> Transaction: ...


class Observer(TypingProtocol):
    """Who opened a transaction and follows it (:class:`table.table.Table`): told of each newer snapshot the
    transaction reads, and of its commit's outcome once the commit is over."""

    def observed(self, snapshot: Snapshot) -> None: ...

    def committed(self, outcome: commit_loop.CommitOutcome) -> None: ...


class Transaction:
    """One attempt of an operation on one snapshot (module docstring), followed by ``observer``."""

    def __init__(self, location: TableLocation, snapshot: Snapshot | None, *, observer: Observer | None = None,
                 behind: commit_loop.CommitOutcome | None = None):
        self.location = location
        self._observer = observer
        # ``behind``: the outcome of the handle's previous commit, whose catch-up (``CommitOutcome.catch_up``)
        # is not run yet. The transaction reads that catch-up's base, which holds the newest protocol,
        # metadata and schema (every version after it only appended): enough for an append, whose commit goes
        # past those versions unread (``table.log.outcome.may_go_past``); any other commit reads them.
        pending = None if behind is None else behind.catch_up
        self._behind = behind if pending is not None and pending.base is not None else None
        self._snapshot = snapshot if self._behind is None else self._behind.catch_up.base  # type: ignore[union-attr]
        self._reads: list[ReadScope] = []
        self.outcome: commit_loop.CommitOutcome | None = None

    # --- the table, as this transaction reads it ----------------------------------------------------
    @property
    def uri(self) -> TableUri:
        return self.location.uri

    @property
    def storage_options(self) -> StorageOptions:
        return self.location.storage_options

    @property
    def log_store(self) -> LogStore:
        return self.location.log_store

    @property
    def objects(self) -> ObjectStore:
        return self.location.objects

    @property
    def snapshot(self) -> Snapshot | None:
        """The snapshot read (version R); None when the table does not exist yet."""
        return self._snapshot

    def require(self, operation: str) -> Snapshot:
        """The snapshot ``operation`` works on: the table must exist and not be pinned to an older version."""
        snapshot = self._snapshot
        if snapshot is None:
            raise TableNotFoundError(f"no table at {self.uri.table_path}: nothing to {operation}")
        if snapshot.time_travel:
            raise ReadOnlySnapshotError(f"this Table is pinned to version {snapshot.version}; {operation} runs on the "
                                        f"newest version: open the table without a version")
        return snapshot

    def refresh(self) -> Snapshot | None:
        """Move to the newest version, before anything is read (None: still no table)."""
        self._check_open()
        if self._reads:
            raise InvalidArgumentError("a transaction moves to the newest version only before it reads")
        try:
            self._snapshot = newest_snapshot(self.location, self._caught_up())
        except TableNotFoundError:
            if self._snapshot is not None:
                raise
            return None
        if self._observer is not None:
            self._observer.observed(self._snapshot)
        return self._snapshot

    def at(self, snapshot: Snapshot) -> Transaction:
        """A new transaction of the same table reading ``snapshot`` (one the operation was planned on), followed
        by the same observer."""
        if snapshot.table_path != self.uri.table_path:
            raise InvalidArgumentError(f"snapshot of {snapshot.table_path} given to a transaction of {self.uri.table_path}")
        return Transaction(self.location, snapshot, observer=self._observer)

    def refresh_later(self) -> Future[Snapshot]:
        """:meth:`refresh`'s reading of the newest version, started in the background while the operation plans
        on the version held (its first plan; an operation's handle usually holds the newest version): the
        future's snapshot, when newer, is then planned on again (:meth:`newer`). Checked as :meth:`refresh` is."""
        self._check_open()
        if self._reads or self._snapshot is None:
            raise InvalidArgumentError("a transaction reads the newest version in the background only from a "
                                       "snapshot, before it reads")
        return _REFRESH.submit(newest_snapshot, self.location, self._snapshot)

    def newer(self, snapshot: Snapshot) -> Transaction:
        """A new transaction of the same operation on ``snapshot``, a newer version read while this one was
        planned (an operation's first plan is staged while the newest version is read); the observer is told."""
        if self._observer is not None:
            self._observer.observed(snapshot)
        return Transaction(self.location, snapshot, observer=self._observer)

    def restart(self) -> Transaction:
        """A new transaction of the same operation on the newest version (a re-plan after a conflict)."""
        fresh = Transaction(self.location, self._snapshot, observer=self._observer)
        fresh.refresh()
        return fresh

    # --- what was read ----------------------------------------------------------------------------
    def read_whole_table(self) -> None:
        """Every file was read (a full overwrite, a schema change, a restore)."""
        self._reads.append(ReadScope.whole_table())

    def read_partitions(self, values: Sequence[Mapping[str, str | None]]) -> None:
        """The files of these partitions were read (a dynamic partition overwrite)."""
        self._reads.append(ReadScope.of_partitions(values))

    def read_files(self, paths: Sequence[str]) -> None:
        """Exactly these files were read, and nothing else matters (a compaction)."""
        self._reads.append(ReadScope.of_files(paths))

    def read_predicate(self, files: Sequence[AddFile], matcher: FileMatcher, predicate: str | None) -> None:
        """``files`` were read to find the rows ``predicate`` selects; ``matcher`` tells whether a file another
        writer adds may hold such rows (a DELETE, UPDATE or MERGE)."""
        self._reads.append(ReadScope.of_predicate([f.path for f in files], matcher, predicate))

    @property
    def read_scope(self) -> ReadScope:
        """What was read, as one scope: nothing (a blind append), or the union of the reads."""
        reads = self._reads
        if not reads:
            return ReadScope.blind_append()
        if len(reads) == 1:
            return reads[0]
        kinds = {r.kind for r in reads}
        if ReadKind.WHOLE_TABLE in kinds:
            return ReadScope.whole_table()
        if kinds == {ReadKind.PARTITIONS}:
            return ReadScope.of_partitions([dict(spec) for r in reads for spec in r.partitions])
        if kinds == {ReadKind.FILES}:
            return ReadScope.of_files([p for r in reads for p in r.files])
        if kinds <= {ReadKind.FILES, ReadKind.PREDICATE}:
            matchers = [r.matcher for r in reads if r.kind is ReadKind.PREDICATE]
            predicates = [r.predicate for r in reads if r.predicate is not None]
            return ReadScope.of_predicate(
                [p for r in reads for p in r.files],
                lambda add: any(m is None or m(add) for m in matchers),
                " OR ".join(f"({p})" for p in predicates) or None)
        return ReadScope.whole_table()  # reads of different kinds: judged as a read of everything

    # --- the commit -------------------------------------------------------------------------------
    def commit(self, commit: Commit, *, before_commit: Callable[[], object] | None = None
               ) -> commit_loop.CommitOutcome:
        """Commit on top of the snapshot read (see :func:`table.log.transaction.commit` for what it raises).
        ``commit.read_scope`` is this transaction's when the commit says it read nothing and reads were
        recorded."""
        self._check_open()
        if self._reads and commit.read_scope.kind is ReadKind.NOTHING:
            commit = dataclasses.replace(commit, read_scope=self.read_scope)
        snapshot, behind = self._snapshot, None
        if self._behind is not None:
            pending = self._behind.catch_up
            if pending is not None and commit_loop.may_go_past(commit, pending):
                snapshot, behind = pending.base, pending
            else:
                snapshot = self._caught_up()
        outcome = commit_loop.commit(self.log_store, snapshot, commit, timeout=self.storage_options.timeout_seconds,
                                     before_commit=before_commit, behind=behind)
        self.outcome = outcome
        if outcome.known is not None:
            remember(self.location, outcome.known)
        if self._observer is not None:
            self._observer.committed(outcome)
        return outcome

    def _caught_up(self) -> Snapshot | None:
        """The snapshot read, brought past the versions an earlier commit went past unread (``behind``): they
        are read now (once for the handle too: ``CommitOutcome.snapshot`` keeps what it read)."""
        behind, self._behind = self._behind, None
        if behind is not None:
            after = behind.snapshot
            if after is not None:
                self._snapshot = after
        return self._snapshot

    def _check_open(self) -> None:
        if self.outcome is not None:
            raise InvalidArgumentError("this transaction has committed already; start a new one (Table.transaction())")

    @property
    def committed_snapshot(self) -> Snapshot | None:
        """The table after the commit (reading winners judged by their entries if need be); None before it,
        or when it cannot be computed (reload)."""
        return None if self.outcome is None else self.outcome.snapshot


def transaction_of(target: Transaction | Opens) -> Transaction:
    """The transaction to run in: ``target`` itself, or a new one its handle opens."""
    return target if isinstance(target, Transaction) else target.transaction()
