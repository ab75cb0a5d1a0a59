"""What a commit did (:class:`CommitOutcome`), and what happens after its commit point: the snapshot after
it (:class:`CatchUp`, reading winners judged by their entries alone), the version holding an application's
``txn`` (:func:`txn_version`) and the checkpoint every ``delta.checkpointInterval`` commits
(:func:`maybe_checkpoint`, which never fails the commit; :func:`checkpoint_later` after a commit that went past
versions unread), the snapshot an operation's result hands back
(:class:`SnapshotAfter`), and when a writer's next blind append may go past the versions a catch-up left
unread (:func:`may_go_past`). See ``table.log.transaction``."""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
from collections.abc import Callable

from logstore import deadline, pool
from logstore.base import LogStore
from logstore.errors import CorruptLogError, StorageError, VersionNotFoundError
from table.log import summary
from table.log.actions import Action, AddFile, Txn
from table.log.commit import Commit
from table.log.checkpoint import write_checkpoint
from table.log.snapshot import Snapshot, advance, load_snapshot, read_commit
from table.log.writer_features import in_commit_timestamps_enabled, row_tracking_active

__all__ = ["CatchUp", "CommitOutcome", "CommitStatus", "MAX_BEHIND", "SnapshotAfter", "TXN_SCAN_LIMIT",
           "checkpoint_later", "may_go_past", "maybe_checkpoint", "txn_version"]

log = logging.getLogger(__name__)

TXN_SCAN_LIMIT = 100
"""Commits read backwards, at most, to find which one holds an application's txn when the txn came
from a checkpoint (checkpoints do not record the version of each txn)."""


class CommitStatus(enum.Enum):
    COMMITTED = "committed"                  # our commit is at ``version``
    ALREADY_COMMITTED = "already_committed"  # our application's txn was already at ``version``
    SKIPPED = "skipped"                      # mode="ignore": the table was created concurrently


@dataclasses.dataclass(frozen=True)
class CommitOutcome:
    """What :func:`commit` did. ``version``: the version written, or the version holding the application's
    txn (if that txn came from a checkpoint and is older than the ``TXN_SCAN_LIMIT`` commits before it,
    the checkpoint's version: the txn is at or before it), or the version that created the table.
    ``known``: the table after it as the commit path knew it (None if computing it failed after the commit
    landed, or when the commit went on top of winners judged by their entries alone). ``catch_up``: reads
    the winners judged by their entries (not read on the commit path) and returns the snapshot after our
    commit; a caller that can wait (``Table.defer_snapshot``) calls it when the snapshot is next needed.
    ``snapshot``: the table after the commit, reading those winners now if need be (None only when it
    cannot be computed: reload)."""

    status: CommitStatus
    version: int
    attempts: int
    known: Snapshot | None
    catch_up: Callable[[], Snapshot | None] | None = None

    @property
    def snapshot(self) -> Snapshot | None:
        if self.known is None and self.catch_up is not None:
            object.__setattr__(self, "known", self.catch_up())
            object.__setattr__(self, "catch_up", None)
        return self.known

    @property
    def committed(self) -> bool:
        return self.status is CommitStatus.COMMITTED


class SnapshotAfter:
    """The table as a commit left it, for the operation's result: the snapshot the commit path computed (its
    base plus its own actions and the winners it read), so that no read of the log is spent on it. When the
    commit went on top of winners judged by their DynamoDB entries alone, those winners are read on first
    use (:attr:`CommitOutcome.snapshot`, shared with the handle that opened the transaction: they are read
    once); when the commit path could not compute it, the table is loaded at the committed version on first
    use. Either way it is computed once, and a failure to compute it is raised to the caller who asked (the
    commit stands)."""

    def __init__(self, snapshot: Snapshot | None = None, *, load: Callable[[], Snapshot] | None = None):
        if (snapshot is None) == (load is None):
            raise ValueError("SnapshotAfter needs a snapshot or a way to load it, not both")
        self._snapshot = snapshot
        self._load = load
        self._lock = threading.Lock()

    @classmethod
    def of(cls, log_store: LogStore, outcome: CommitOutcome) -> SnapshotAfter:
        """The snapshot after ``outcome``: its version's for a commit, the table as the commit found it when
        nothing was committed (the application's txn was there already, or mode ``ignore`` met a table)."""
        if outcome.known is not None:
            return cls(outcome.known)

        def load() -> Snapshot:
            after = outcome.snapshot
            if after is not None:
                return after
            # The commit path could not apply the commit (logged there): read the table at that version. It
            # was the newest the commit knew, so it is not a time-travel snapshot: a commit on it rebases.
            return dataclasses.replace(load_snapshot(log_store, outcome.version), time_travel=False)

        return cls(load=load)

    @property
    def computed(self) -> bool:
        """Whether the snapshot is at hand (no read of the log left to make)."""
        return self._snapshot is not None

    def __call__(self) -> Snapshot:
        if self._snapshot is None:
            with self._lock:
                if self._snapshot is None:
                    assert self._load is not None
                    self._snapshot = self._load()
                    self._load = None
        return self._snapshot


class CatchUp:
    """The snapshot after a commit that went on top of winners judged by their entries alone: reads those
    winners (all at once), checks that each still is what its entry said (a blind append: otherwise the
    entry was not ours to trust, and that is logged as an error), and applies them, the commits of ours
    made on top of them before (``known``: a blind append that went past an earlier catch-up, see
    :func:`table.log.outcome.may_go_past`) and our commit, in version order. None when that fails: the
    caller reloads the table."""

    def __init__(self, log_store: LogStore, base: Snapshot | None, unread: tuple[int, ...], version: int,
                 written: list[Action], *, judged: bool = True,
                 known: tuple[tuple[int, list[Action]], ...] = (), txns: dict[str, int] | None = None,
                 known_appends: int = 0):
        self.judged = judged  # False: the versions before ours were not judged by their entries (a group member)
        self.log_store = log_store
        self.base = base
        self.unread = unread
        self.version = version
        self.written = written
        self.known = known
        # how many of ``known``, from the first, are known to be blind appends (:func:`may_go_past` judged
        # them when it let this writer go past them): not summarized again for each commit after them
        self.known_appends = known_appends
        self.txns = dict(txns or {})  # application versions the unread winners' entries name (their summaries)
        self._lock = threading.Lock()
        self._done = False
        self._after: Snapshot | None = None

    @property
    def behind(self) -> int:
        """How many versions the base snapshot is behind the table after our commit."""
        return len(self.unread) + len(self.known) + 1

    def judge_by_entries(self) -> bool:
        """Judge the versions of a catch-up that were not judged (a group member's, whose leader could not vouch
        for the versions before its claim) by their DynamoDB entries, as a lost race judges its winners
        (:func:`table.log.summary.settle`): one Query for up to ``logstore.dynamodb.ENTRIES_FROM_LIMIT``
        versions, instead of a read of each ``N.json``. True, and judged from now on, when each only
        appended; False when one did more, an entry carries no summary (written by Delta or delta-rs) or is
        gone, the store keeps no entries, or the Query failed: the versions are then read, as before."""
        if self.judged:
            return True
        entries_from = getattr(self.log_store, "taken_from", None)
        if entries_from is None:
            return False
        wanted = sorted(self.unread)
        found: dict[int, object] = {}
        at = 0
        try:
            while at < len(wanted):
                found.update((e.version, e) for e in entries_from(wanted[at]))
                if wanted[at] not in found:
                    return False
                while at < len(wanted) and wanted[at] in found:
                    at += 1
        except (StorageError, CorruptLogError) as exc:
            log.debug("judging versions %s of %s by their entries failed (%s): they are read", wanted,
                      self.log_store.table_path, exc)
            return False
        named = summary.settle((getattr(found[v], "summary", None) for v in wanted), None)
        if named is None:
            return False
        for app_id, app_version in named.items():
            self.txns[app_id] = max(app_version, self.txns.get(app_id, app_version))
        self.judged = True
        return True

    def __call__(self) -> Snapshot | None:
        """The snapshot after our commit (None: reload), read once: a checkpoint written after the commit
        returned (:func:`checkpoint_later`) and the writer's handle share it."""
        with self._lock:
            if not self._done:
                self._after = self._read()
                self._done = True
            return self._after

    def _read(self) -> Snapshot | None:
        try:
            if self.base is not None and len(self.unread) > self.base.state.checkpoint_interval + 2:
                # Far behind (a writer that went past many versions unread): the table before our commit from
                # its newest checkpoint costs a checkpoint and at most an interval of commits, fewer reads.
                before = dataclasses.replace(load_snapshot(self.log_store, self.version - 1), time_travel=False)
                return advance(before, [(self.version, self.written)], table_path=self.log_store.table_path)
            reading = [(v, pool.submit(read_commit, self.log_store, v)) for v in self.unread]
            commits = [(v, future.result()) for v, future in reading]
            for v, actions in commits:
                kinds = summary.parse(summary.summarize(actions))
                if self.judged and (kinds is None or not kinds.appends_only):
                    log.error("table %s: version %d was judged a blind append by its DynamoDB entry's "
                              "commitSummary, but its commit holds more (%s); commit %d went on top of it "
                              "without a conflict check against those actions", self.log_store.table_path, v,
                              None if kinds is None else kinds.kinds, self.version)
            ordered = sorted([*commits, *self.known, (self.version, self.written)], key=lambda c: c[0])
            return advance(self.base, ordered, table_path=self.log_store.table_path)
        except Exception:  # noqa: BLE001 - the commit landed; the caller reloads the table instead
            log.warning("commit %d of %s landed; reading the versions before it failed, the table is reloaded",
                        self.version, self.log_store.table_path, exc_info=True)
            return None


MAX_BEHIND = 64
"""Versions, at most, that a blind append goes past unread (:func:`may_go_past`): beyond them it reads them
first, so that the snapshot a long-lived writer will read one day stays a bounded read away."""


def may_go_past(commit: Commit, behind: CatchUp) -> bool:
    """Whether ``commit`` may be made on top of ``behind`` (the catch-up an earlier commit of this writer left,
    ``CommitOutcome.catch_up``) without reading the versions it would read: its base snapshot, plus the winners
    judged by their entries and our own commits since, is all the commit needs, because

    - ``commit`` is a blind append of files only (no ``txn`` of an application, no identity re-plan): Delta's
      conflict rules never fail it against commits that only appended, and it reads no file list;
    - every version after the base is such a commit (``behind.judged``: each winner judged by its entry's
      summary, a group member's versions by their entries when its leader could not vouch for them,
      :meth:`CatchUp.judge_by_entries`, last, as it costs a Query; our own commits by their actions), so
      the base's protocol, metadata, domains and application transactions are the newest's;
    - the table's entries do not depend on the version (no row tracking, no in-commit timestamps), so an entry
      built on the base is the same as one built on the newest version.

    The versions stay unread on the commit path; the commit's ``catch_up`` reads them all with those it meets."""
    base = behind.base
    if (base is None or base.time_travel or behind.behind >= MAX_BEHIND
            or not commit.is_blind_append or not commit.actions or commit.app_id is not None
            or commit.replan is not None or not all(isinstance(a, AddFile) for a in commit.actions)):
        return False
    if row_tracking_active(base.protocol, base.configuration) or in_commit_timestamps_enabled(
            base.protocol, base.configuration):
        return False
    for _, written in (*behind.known[behind.known_appends:], (behind.version, behind.written)):
        kinds = summary.parse(summary.summarize(written))
        if kinds is None or not kinds.appends_only:
            return False
    return behind.judge_by_entries()


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


def checkpoint_later(log_store: LogStore, catch_up: CatchUp) -> None:
    """The checkpoint of a commit that went on top of versions it did not read (``catch_up``): written after the
    commit returns, as a finishing step of the log store (``finish_later``), because it needs those versions
    read first, a read of up to an interval of commits that the commit path skipped. A group commit's leader
    would otherwise make every append queued behind it wait for that read and the checkpoint. Stores without
    finishing steps write it at once. Never fails the commit (:func:`maybe_checkpoint`)."""

    def write() -> None:
        after = catch_up()
        if after is not None:
            maybe_checkpoint(log_store, after)

    later = getattr(log_store, "finish_later", None)
    if later is None:
        write()
        return
    later(write, f"checkpointing version {catch_up.version} of {log_store.table_path}")


def maybe_checkpoint(log_store: LogStore, snapshot: Snapshot) -> None:
    """Checkpoint every ``delta.checkpointInterval`` commits. The commit is durable already: a failure
    here must not make the caller believe it failed (a caller that retries without an app id would
    write the data twice), so every exception is logged with its traceback and swallowed."""
    version = snapshot.version
    if version <= 0 or version % snapshot.state.checkpoint_interval != 0:
        return
    try:
        # A commit acknowledged at its DynamoDB entry (DYNACOMMIT_COMMIT_ACK=durable) is checkpointed only once
        # its N.json holds it: a checkpoint must never describe a version the log does not hold.
        if not log_store.wait_published(version, timeout=deadline.remaining(None)):
            log.info("commit %d of %s is not published yet; its checkpoint is left to the next interval", version,
                     log_store.table_path)
            return
        write_checkpoint(log_store, snapshot)
    except Exception:  # noqa: BLE001 - see the docstring: a checkpoint never fails a commit
        log.exception("commit %d of %s succeeded, but writing its checkpoint failed; the next checkpoint "
                      "interval tries again", version, log_store.table_path)
