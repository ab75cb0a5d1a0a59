"""Optimistic transactions: write version R+1; on losing it, check the winners, rebase onto the newest
version and try again, until committed, in conflict, or out of time.

:func:`commit` takes a :class:`~table.log.commit.Commit` built on a snapshot at version R (None: the
table does not exist yet, and the commit creates it at version 0). The steps, with the names of the
failpoints between them:

1. **validate**: before anything is written, refuse a commit the table cannot take (time-travelled
   snapshot, a protocol we may not write, data removal on an append-only table, bad arguments), and
   return at once when the snapshot already holds the commit's ``app_id`` at ``app_version``;
2. **write** R+1 through the log store (``commitInfo`` with a fresh ``txnId`` and the attempt number,
   then our ``txn``, then the actions, as the table's features want them for version R+1: in-commit
   timestamp, row ids, see ``table.log.writer_features``): the log store's conditional put makes exactly
   one writer win each version (failpoints ``table.commit.before_write`` / ``table.commit.after_write``);
3. on "version taken", for a blind append of files whose bytes are the same at any version, **judge the
   winner by its entry** (``table.log.summary``, the ``commitSummary`` the refusal returned): when it only
   appended, under another application id, try the next version **at once** (no pause, unless the
   winner's entry carries the waiting mark of a writer that lost more: :meth:`_Attempts._yield_pause`) with
   the same bytes in the temp file already written, and read the winner later (``CommitOutcome.catch_up``);
   otherwise **back off** a short pause, the shorter the more races this commit lost (writers take turns:
   :class:`~table.log.contention.Contention`; a new commit whose newest entry a waiting writer marked
   first lets those that lost go; with group commit nobody takes turns: a blind append that lost queues
   at once, and a new commit leads a group of those waiting, see ``table.log.group`` and
   :meth:`~table.log.group_member.GroupMember._group_attempt`), then **rebase**: read every commit from
   the lost version to the NEWEST one (all at once) and check each against ours with Delta's rules
   (``table.log.conflicts``); a commit of ours among them (its ``txnId``: an attempt whose answer was
   lost) ends the transaction as committed; our application's ``txn`` among them ends it as already
   committed; a conflict ends it with ``CommitConflictError``; otherwise the
   snapshot advances to the newest version and we go to step 2 with the next version. Rebasing onto the
   newest version after the pause, not before it, is what keeps writers from starving: the version we
   try is the one after the newest commit we know of, not one that was taken while we slept. An attempt
   that fails before its commit point with a transient storage error is tried again after a pause;
4. **checkpoint** every ``delta.checkpointInterval`` commits; it never fails the commit. A commit that went on
   top of versions it did not read writes it after it returns, as a finishing step of the log store.

Retries are bounded by time, not by a count: the whole transaction runs under the operation's deadline
(``DYNACOMMIT_TIMEOUT_SECONDS``, default 120 s, see ``logstore.deadline``); when it passes before any
attempt landed, :class:`~table.errors.CommitTimeoutError`.

What an exception means: :class:`~logstore.errors.CommitStateUnknownError` (from the log store) means
the commit may have landed, and nothing may be cleaned up. Every other exception raised by :func:`commit`
means it did not land: each attempt before the last definitively lost its version, and nothing after a
successful write raises. Callers rely on this to delete a failed job's files without reading the log.

Work per commit does not grow with the history: one write (a few requests, see ``logstore.external``)
and, per lost race, one more conditional put when the winner's entry settles it, else one DynamoDB query,
one LIST and one GET per winning commit.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import random
import time
import uuid
from collections.abc import Callable

from logstore import deadline, failpoints, pool, retry
from logstore.base import LogStore
from logstore.writer import WAIT_MARK_LOSSES
from logstore.errors import (
    DeadlineExceededError,
    StorageError,
    TableNotFoundError,
    VersionExistsError,
    VersionNotFoundError,
)
from table.errors import CommitConflictError, CommitTimeoutError
from table.log.actions import Action, AddFile, CommitInfo, Txn, serialize_commit
from table.log.commit import Commit, IsolationLevel, ReadScope
from table.log import group, summary
from table.log.conflicts import (
    AlreadyCommitted,
    Rebase,
    Skip,
    Winner,
    check,
    partition_types,
)
from table.log.contention import (
    BACKOFF_BASE_SECONDS,
    CONTENDED_SECONDS,  # noqa: F401 - part of this module's surface (tests read it here)
    QUEUE_LENGTH,
    QUEUE_SPREAD,
    contention,
)
from table.log.outcome import (
    MAX_BEHIND,  # noqa: F401 - part of this module's surface (tests read it here)
    CatchUp,
    CommitOutcome,
    CommitStatus,
    checkpoint_later,
    may_go_past,
    maybe_checkpoint,
    txn_version,
)
from table.log.group_member import _ALONE, AFTER_WRITE, GroupMember, _Claimed
from table.log.snapshot import Snapshot, advance, read_commit
from table.log.writer_features import enables_in_commit_timestamps, in_commit_timestamps_enabled, prepare_entry

__all__ = ["CatchUp", "CommitOutcome", "CommitStatus", "MAX_BEHIND", "commit", "may_go_past", "txn_version"]

log = logging.getLogger(__name__)

FAILURE_BACKOFF = retry.Backoff(base=0.05, cap=1.0)
"""Pauses after an attempt that failed before its commit point with a transient storage error, or a rebase
that did (:attr:`_Attempts.failures` counts both): full-jitter exponential, until the deadline."""

BEFORE_WRITE = failpoints.declare(
    "table.commit.before_write", "the commit is built and validated; this attempt has written nothing")
AFTER_LOST = failpoints.declare(
    "table.commit.after_lost_race", "the attempt lost its version; the winners are not read yet")

def commit(log_store: LogStore, snapshot: Snapshot | None, commit: Commit, *,
           timeout: float | None = None, before_commit: Callable[[], object] | None = None,
           behind: CatchUp | None = None) -> CommitOutcome:
    """Commit ``commit`` on top of ``snapshot`` (None: create the table), see the module docstring.
    ``before_commit`` goes to every attempt's ``LogStore.write`` (called right before its commit point).
    ``behind``: the catch-up this writer's previous commit left (``CommitOutcome.catch_up``), whose base is
    ``snapshot``; when :func:`may_go_past` allows it, the commit goes on top of it without reading the
    versions it would read (its own ``catch_up`` reads them later), otherwise they are read first.

    Raises ``CommitConflictError``, ``CommitTimeoutError``, ``TableExistsError`` (a concurrent create with
    ``OnExisting.FAIL``), ``AppendOnlyError``, ``UnsupportedFeatureError``, ``ReadOnlySnapshotError``,
    ``InvalidArgumentError``/``ArgumentTypeError`` (all: nothing committed), or
    ``CommitStateUnknownError`` (maybe committed; nothing may be cleaned up).
    """
    table = log_store.table_path
    if behind is not None:
        if behind.base is not snapshot:
            raise ValueError("commit(behind=...) needs the catch-up's base snapshot as snapshot")
        if not may_go_past(commit, behind):
            snapshot = behind() or snapshot  # None: the versions are read by the rebase of a lost race
            behind = None
    if snapshot is None:
        commit.check_against(None, None, table=table, append_only=False)
    else:
        Commit.check_base(snapshot.time_travel, snapshot.version, table)
        commit.check_against(snapshot.protocol, snapshot.metadata, table=table,
                             append_only=snapshot.state.append_only)
        if commit.app_id is not None:
            held = snapshot.state.app_version(commit.app_id)
            if held is not None and held >= commit.app_version:  # type: ignore[operator]
                return CommitOutcome(CommitStatus.ALREADY_COMMITTED, txn_version(log_store, snapshot, commit.app_id),
                                     0, snapshot)
        if commit.changes_metadata and not commit.appends_only:
            # The new schema or properties apply to every file: it read them all. An append that evolves the
            # schema (new nullable columns) reads nothing: files others append meanwhile fit either schema.
            commit = dataclasses.replace(commit, read_scope=ReadScope.whole_table())
    with deadline.deadline(timeout, f"commit to {table}") as limit:
        return _Attempts(log_store, commit, snapshot, limit, before_commit, behind).run()

class _Attempts(GroupMember):
    """The loop of steps 2-3 for one commit."""

    def __init__(self, log_store: LogStore, commit: Commit, snapshot: Snapshot | None, limit: deadline.Deadline,
                 before_commit: Callable[[], object] | None = None, behind: CatchUp | None = None):
        self.log_store = log_store
        # passed only when given, so that a LogStore written before the parameter existed still works
        self.write_options = {} if before_commit is None else {"before_commit": before_commit}
        self.table = log_store.table_path
        self.commit = commit
        self.snapshot = snapshot
        self.creating = snapshot is None
        self.limit = limit
        self.attempts = 0
        self.failures = 0  # attempts and rebases that failed before a commit point (storage errors)
        self.tried: set[str] = set()  # commitInfo.txnId of each attempt: one of them may be among the winners
        self._previous_ict: tuple[int, int | None] = (-1, None)  # (version, its inCommitTimestamp) once read
        self.started = time.monotonic()
        self.contention = contention(self.table)
        self.keeps_temp = _keeps_temp(log_store)
        self.written: list[Action] = []
        # A lost race judged from the winner's entry alone (table.log.summary): the versions so judged, not
        # read yet (the snapshot stays before them), and the attempt's body and kept temp file, written
        # once and tried again at the next version.
        self.unread: list[int] = [] if behind is None else list(behind.unread)
        # Our own earlier commits after the snapshot, gone past unread with the winners (may_go_past).
        self.known: list[tuple[int, list[Action]]] = [] if behind is None else [
            *behind.known, (behind.version, behind.written)]
        self.known_appends = len(self.known)  # may_go_past judged each a blind append
        self.body: bytes | None = None
        self.kept = None  # logstore.external.KeptTemp
        self.reusable = False  # whether self.body is the same at any version (and the store keeps temp files)
        # Group commit (table.log.group): our queued item once this append met contention, the entry that
        # beat our last group attempt, and the application ids of the versions judged by their entries.
        self.member = None  # logstore.group.QueuedAppend
        self.member_txn: str | None = None
        self.just_queued = False  # queued since the last group attempt
        # A look at our item was sent and no answer came: it may have deleted the item, claimed.
        self.look_unanswered = False
        self.group_winner = None
        self.regroup: list | None = None  # the queue as our last group attempt read it, when it lost a version
        self.unread_txns: dict[str, int] = {} if behind is None else dict(behind.txns)
        for _, actions in self.known:
            for action in actions:
                if isinstance(action, Txn):
                    self.unread_txns[action.app_id] = max(action.version, self.unread_txns.get(action.app_id,
                                                                                               action.version))
        self.groups = (commit is not None and _groups(log_store) and commit.is_blind_append and bool(commit.actions)
                       and all(isinstance(a, AddFile) for a in commit.actions))

    def run(self) -> CommitOutcome:
        """The loop; a queued append that ends without its own commit withdraws first, and learns then
        whether a group took it after all (table.log.group)."""
        try:
            outcome = self._run()
        except Exception:
            if self.member is None:
                raise
            claimed = self._withdraw()
            found = None if claimed is None else self._claimed(claimed)
            if found is None:
                raise
            return found
        if self.member is not None:
            if outcome.status is CommitStatus.COMMITTED:
                self._forget_member()
            else:
                claimed = self._withdraw()
                found = None if claimed is None else self._claimed(claimed)
                if found is not None:
                    return found
        return outcome

    def _run(self) -> CommitOutcome:
        try:
            self._take_turn()
        except DeadlineExceededError as exc:
            raise self._timeout(0 if self.snapshot is None else self.snapshot.version + 1) from exc
        first_attempt_at = time.monotonic()
        try:
            while True:
                version = self._next_version()
                try:
                    written = self._attempt(version)
                except DeadlineExceededError as exc:
                    raise self._timeout(version) from exc
                except StorageError as exc:
                    self._after_failure(version, exc)  # before the commit point: nothing of it landed
                    continue
                except VersionNotFoundError as exc:
                    if version - 1 not in self.unread:
                        raise
                    # The version we lost last, judged by its entry and not read, turned out stuck (its
                    # content lost: marked now) or abandoned: read from the snapshot on and try it again.
                    log.info("commit to %s: version %d, judged by its entry, is not in the log (%s); reading "
                             "the table again", self.table, version - 1, exc)
                    try:
                        verdict = self._rebase_retrying(version - 1)
                    except DeadlineExceededError as timeout:
                        raise self._timeout(version) from timeout
                    if verdict is not None:
                        return verdict
                    continue
                if isinstance(written, _Claimed):
                    outcome = self._claimed(written.item, written.actions)
                    if outcome is not None:
                        return outcome
                    continue
                if written is not None:
                    # a group leader that judged the versions taken while it waited wrote after them
                    version = self._next_version()
                    if self.attempts == 1:
                        self.contention.measured_commit(time.monotonic() - first_attempt_at)
                    return self._committed(version, written)
                failpoints.hit(AFTER_LOST)
                self.contention.lost_at = time.monotonic()
                # The version lost: a group attempt that judged the versions taken while it waited by their
                # entries tried the one after them (``self.unread`` holds them now).
                version = self._next_version()
                try:
                    joins = self._joins()
                    if self._settled_by_entry(version):
                        # The next attempt is a check and a put, the bytes already in storage: no pause,
                        # unless a writer that lost more races waits (the winner's waiting mark).
                        if not joins:
                            deadline.sleep(self._yield_pause())
                        self._queue()
                        verdict = None
                    else:
                        if not joins:
                            deadline.sleep(self._backoff())
                        rebasing = time.monotonic()
                        verdict = self._rebase_retrying(version)
                        self.contention.measured(time.monotonic() - rebasing)
                except DeadlineExceededError as exc:
                    raise self._timeout(version) from exc
                except CommitConflictError as conflict:
                    conflict.attempts = self.attempts  # a re-plan counts them on (table.operations.rewrite)
                    raise
                if verdict is not None:
                    return verdict
        finally:
            self._drop_kept()

    def _next_version(self) -> int:
        if self.unread or self.known:
            return max([*self.unread, *(v for v, _ in self.known)]) + 1
        return 0 if self.snapshot is None else self.snapshot.version + 1

    def _drop_kept(self) -> None:
        kept, self.kept = self.kept, None
        if kept is not None:
            kept.discard()

    def _settled_by_entry(self, lost: int) -> bool:
        """Whether the entry that took ``lost``, as our refused put returned it, settles Delta's conflict
        check without reading ``N.json`` (``table.log.summary``): we are a blind append whose body is the
        same at any version, and the winner only appended, under another application id. Then the kept
        temp file is tried at the next version as it is, and the snapshot stays where it was (the winner
        is read later, by ``CommitOutcome.catch_up``)."""
        kept = self.kept
        winners = list(getattr(kept, "winners", None) or [])
        if kept is None and self.group_winner is not None:
            winners = [self.group_winner]  # a group attempt whose temp file could not be kept
        self.group_winner = None
        if not winners or winners[0].version != lost or not self._judged(winners):
            self._drop_kept()
            return False
        log.debug("lost versions %d-%d of %s to blind appends (judged by their entries); trying %d with the same "
                  "body", lost, winners[-1].version, self.table, winners[-1].version + 1)
        return True

    def _judged(self, winners: list) -> bool:
        """Whether the entries ``winners`` (consecutive versions, from our next one) settle Delta's conflict
        check by their summaries alone: each only appended, under application ids other than ours. If so
        they count as read later (``self.unread``): the next attempt goes to the version after them."""
        if self.snapshot is None:
            return False
        judged = self._judge(winners)
        if judged is None:
            return False
        for app_id, app_version in judged.items():
            self.unread_txns[app_id] = max(app_version, self.unread_txns.get(app_id, app_version))
        self.unread.extend(w.version for w in winners)
        return True

    def _judge(self, winners: list) -> dict[str, int] | None:
        """The application versions the winners' entries name, when every one settles the conflict check by
        its entry (see :meth:`_settled_by_entry`); None when one does not."""
        return summary.settle((getattr(w, "summary", None) for w in winners), self.commit.app_id)

    def _take_turn(self) -> None:
        """Before a new commit's first attempt on a contended table, let every writer that lost a race go
        first: wait the longest a loser waits, plus a rebase (:class:`~table.log.contention.Contention`). With group commit there
        is no turn to take: a contended append leads a group of the appends that wait, or queues after its
        first lost race and is taken by the next group (waiting turns into joining)."""
        pause = self._turn_pause()
        if pause and not (self.groups and self._group_commit_on()):
            deadline.sleep(pause)

    def _joins(self) -> bool:
        """Whether this append, having lost a race, queues (or is queued) for group commit rather than
        backing off: it then goes on at once, and a pause would only leave the version to others."""
        return self.member is not None or (self.groups and self.reusable and self.snapshot is not None
                                           and self._group_commit_on())

    def _turn_pause(self) -> float:
        """A new commit's pause: none unless a writer waits for the table; then longer than the pause of any
        writer that lost a race, by a rebase or more. A log store that marks entries says who waits: the
        mark a writer puts on the entry that beat it (``waited_recently``: on this process's newest commit)
        when it reads the winners before its next attempt, or when it lost
        :data:`~logstore.writer.WAIT_MARK_LOSSES` versions with the same bytes; a writer that lost fewer
        retries at once and needs no turn. On a store without marks, any race this process lost lately."""
        waited = getattr(self.log_store, "waited_recently", None)
        if waited is not None:
            if not waited(timeout=max(0.0, min(deadline.remaining(), deadline.CLEANUP_SECONDS))):
                return 0.0
            self.contention.lost_at = time.monotonic()
        if not self.contention.contended():
            return 0.0
        rebase = self.contention.rebase_seconds or self.contention.commit_seconds
        if rebase <= 0:
            return 0.0
        return QUEUE_SPREAD * max(rebase, BACKOFF_BASE_SECONDS) + random.uniform(1.0, 1.5) * rebase

    def _after_failure(self, version: int, exc: StorageError) -> None:
        """An attempt failed before its commit point with a storage error (the log store raises no other
        kind after it: a commit past its commit point either stands or is CommitStateUnknownError). A
        transient one (no answer, a 5xx, throttling) is retried after a pause, within the deadline; any
        other, or one left when the deadline would pass, is raised."""
        if not exc.retryable:
            raise exc
        self.failures += 1
        if not FAILURE_BACKOFF.wait(self.failures):
            raise DeadlineExceededError(
                self.limit.operation, self.limit.seconds,
                f"could not commit to table {self.table} within its deadline of {self.limit.seconds:g} s: "
                f"{self.failures} attempt(s) failed before their commit point, the last (version {version}) "
                f"with: {exc}; nothing was committed. Retry later, or raise DYNACOMMIT_TIMEOUT_SECONDS") from exc
        log.info("commit to %s: attempt %d at version %d failed before its commit point (%s); trying again",
                 self.table, self.attempts, version, exc)

    def _rebase_retrying(self, lost: int) -> CommitOutcome | None:
        """:meth:`_rebase`, tried again after a transient storage error (it only reads)."""
        while True:
            try:
                return self._rebase(lost)
            except StorageError as exc:
                if not exc.retryable:
                    raise
                self.failures += 1
                if not FAILURE_BACKOFF.wait(self.failures):
                    raise
                log.info("commit to %s: reading the commits that won failed (%s); trying again", self.table, exc)

    def _attempt(self, version: int) -> list[Action] | _Claimed | None:
        """Step 2: one write; the actions written, or None when the version was taken. After a lost race
        settled by the winner's entry the same body goes to the next version, in the temp file already
        written (``self.kept``); otherwise the attempt builds its body. A queued append makes a group
        attempt instead (:meth:`_group_attempt`), and learns there when a group took it (``_Claimed``)."""
        failpoints.hit(BEFORE_WRITE)
        self.attempts += 1
        if self.member is not None:
            found = self._group_attempt(version)
            if found is not _ALONE:
                return found  # type: ignore[return-value]
            # our queued item was gone, and the log says no group took it: an attempt of its own
        kept, self.kept = self.kept, None
        if kept is not None and self.body is not None:
            actions = self.written
            body = self.body
        else:
            if kept is not None:
                kept.discard()
                kept = None
            txn_id = str(uuid.uuid4())
            self.tried.add(txn_id)
            base = self.commit.entry(read_version=None if self.snapshot is None else self.snapshot.version,
                                     txn_id=txn_id, attempt=self.attempts, isolation=self._isolation())
            actions = prepare_entry(base, state=None if self.snapshot is None else self.snapshot.state,
                                    version=version,
                                    previous_in_commit_timestamp=self._previous_in_commit_timestamp(base),
                                    now_ms=int(time.time() * 1000))
            body = serialize_commit(actions)
            # The same bytes are right at any version when the table's features add nothing that depends on
            # the version (in-commit timestamps, row ids), and we are a blind append of files only.
            self.reusable = (self.keeps_temp and self.snapshot is not None and actions == base
                             and self.commit.is_blind_append
                             and all(isinstance(a, AddFile) for a in self.commit.actions))
            self.written, self.body = actions, body
        if (self.groups and self.reusable and self.snapshot is not None and self.contention.contended()
                and self._group_commit_on()):
            # A contended table: lead a group when appends wait (else write alone, as below).
            self.kept = kept
            led = self._group_attempt(version)
            if led is not _ALONE:
                return led  # type: ignore[return-value]
            kept, self.kept = self.kept, None
        options = dict(self.write_options)
        if self.keeps_temp:
            options["summary"] = summary.summarize(actions)
            if self.reusable:
                options["keep_temp"] = True
            if kept is not None:
                options["temp"] = kept
        try:
            self.log_store.write(version, body, **options)
        except VersionExistsError as lost:
            log.debug("lost version %d of %s (attempt %d)", version, self.table, self.attempts)
            self.kept = lost.kept
            return None
        failpoints.hit(AFTER_WRITE)
        return actions

    def _previous_in_commit_timestamp(self, actions: list[Action]) -> int | None:
        """The ``inCommitTimestamp`` of the commit our attempt follows, when the table has in-commit
        timestamps: known from the snapshot when it replayed that commit, else read (once per version). When
        this commit turns them on, the modification time of the previous commit's file."""
        snapshot = self.snapshot
        if snapshot is None:
            return None
        if not in_commit_timestamps_enabled(snapshot.protocol, snapshot.configuration):
            if not enables_in_commit_timestamps(actions, snapshot.state):
                return None
            # The commit turning them on must be later than the previous commit's file (PROTOCOL.md).
            found = self.log_store.stat_file(f"{snapshot.version:020d}.json")
            return None if found is None else found.last_modified_ms
        if snapshot.in_commit_timestamp is not None:
            return snapshot.in_commit_timestamp
        if self._previous_ict[0] != snapshot.version:
            info = next((a for a in read_commit(self.log_store, snapshot.version) if isinstance(a, CommitInfo)), None)
            self._previous_ict = (snapshot.version, None if info is None else info.in_commit_timestamp)
        return self._previous_ict[1]

    def _committed(self, version: int, written: list[Action]) -> CommitOutcome:
        """After the commit point: nothing here may raise (see the module docstring). When winners were
        judged by their entries only, they are read later (``CommitOutcome.catch_up``); when this version is due
        for a checkpoint, which needs them read, that read and the checkpoint run after the commit returns
        (``table.log.outcome.checkpoint_later``), and the handle shares the read."""
        if self.unread or self.known:
            catch_up = CatchUp(self.log_store, self.snapshot, tuple(self.unread), version, written,
                               known=tuple(self.known), txns=self.unread_txns,
                               known_appends=min(self.known_appends, len(self.known)))
            if version > 0 and version % self.snapshot.state.checkpoint_interval == 0:  # type: ignore[union-attr]
                checkpoint_later(self.log_store, catch_up)
            return CommitOutcome(CommitStatus.COMMITTED, version, self.attempts, None, catch_up)
        try:
            after = advance(self.snapshot, [(version, written)], table_path=self.table)
        except Exception:  # noqa: BLE001 - the commit landed; the caller reloads the table instead
            log.exception("commit %d of %s landed, but applying it to the snapshot failed", version, self.table)
            return CommitOutcome(CommitStatus.COMMITTED, version, self.attempts, None)
        maybe_checkpoint(self.log_store, after)
        return CommitOutcome(CommitStatus.COMMITTED, version, self.attempts, after)

    def _yield_pause(self) -> float:
        """The pause of an append that lost a race settled by the winner's entry: none, unless that entry
        carries a waiting mark (a writer that lost more races than we did, or that reads the winners, is
        after the same version) and we lost fewer than :data:`~logstore.writer.WAIT_MARK_LOSSES` versions:
        then about one commit, to let it go first."""
        kept = self.kept
        if kept is None or getattr(kept, "losses", 0) >= WAIT_MARK_LOSSES:
            return 0.0
        if not any(getattr(w, "waiting_since", None) is not None for w in getattr(kept, "winners", ())):
            return 0.0
        one = self.contention.commit_seconds or self.contention.rebase_seconds
        return max(one, BACKOFF_BASE_SECONDS) * random.uniform(0.5, 1.0)

    def _backoff(self) -> float:
        """The pause after a lost race of an append that races (does not queue for group commit): the more
        races this commit lost, the shorter, none after :data:`QUEUE_LENGTH` of them (:class:`~table.log.contention.Contention`):
        among the writers ready for the next version, the one that waited longest sends its put first."""
        lost = self.attempts
        youth = max(0.0, 1.0 - lost / QUEUE_LENGTH)
        spread = QUEUE_SPREAD * max(self.contention.rebase_seconds, BACKOFF_BASE_SECONDS)
        return youth * spread * random.uniform(0.9, 1.0)

    def _rebase(self, lost: int) -> CommitOutcome | None:
        """Step 3: read the commits from ``lost`` to the newest, check each, advance the snapshot."""
        start = self.snapshot.version if self.snapshot is not None else 0
        # Below ``lost`` when the entry that took it is not readable yet (won but unfinished, or stuck and
        # waiting to be abandoned): then nothing is read and the same version is tried again.
        try:
            latest = self.log_store.latest_version(start=start)
        except TableNotFoundError:
            return None  # version 0 was won but cannot be read yet
        # A rebase tried again after a failure goes on from where the first one stopped; winners judged by
        # their entries only (``self.unread``) are read now with the others.
        first = lost if self.snapshot is None else max(lost, self.snapshot.version + 1)
        if (self.unread or self.known) and self.snapshot is not None:
            first = self.snapshot.version + 1
            self.unread = []
            self.known = []
            self.known_appends = 0
        # The winners are read all at once (one round trip, however many there are), judged in order.
        reading = [(version, pool.submit(read_commit, self.log_store, version)) for version in range(first, latest + 1)]
        for version, commit_read in reading:
            winner = Winner(version, commit_read.result())
            if (winner.txn_id is not None and winner.txn_id in self.tried) or (
                    self.tried & group.group_txn_ids(winner.info)):
                # An earlier attempt of ours won (its answer was lost): the log holds this commit once.
                if winner.txn_id in self.tried:
                    log.warning("commit to %s: attempt %d's answer was lost, but it landed at version %d",
                                self.table, self.attempts, version)
                return self._landed(winner)
            verdict = check(self.commit, winner, creating=self.creating, isolation=self._isolation(),
                            types=partition_types(self._metadata()), lookup=self._partition_values,
                            table=self.table,
                            base_metadata=None if self.snapshot is None else self.snapshot.state.metadata)
            self.snapshot = advance(self.snapshot, [(version, winner.actions)], table_path=self.table)
            if isinstance(verdict, AlreadyCommitted):
                return CommitOutcome(CommitStatus.ALREADY_COMMITTED, verdict.version, self.attempts, self.snapshot)
            if isinstance(verdict, Skip):
                return CommitOutcome(CommitStatus.SKIPPED, verdict.version, self.attempts, self.snapshot)
            assert isinstance(verdict, Rebase)
            self.commit = verdict.commit
            self.creating = False
        if self.commit.replan is not None and self.snapshot is not None and latest >= first:
            # Identity values handed out above the winners' high-water marks (table.data.identity).
            self.commit = self.commit.replan(self.snapshot, self.commit)
        return None

    def _landed(self, winner: Winner) -> CommitOutcome:
        try:
            self.snapshot = advance(self.snapshot, [(winner.version, winner.actions)], table_path=self.table)
        except Exception:  # noqa: BLE001 - the commit landed; the caller reloads the table instead
            log.exception("commit %d of %s landed, but applying it to the snapshot failed", winner.version, self.table)
            return CommitOutcome(CommitStatus.COMMITTED, winner.version, self.attempts, None)
        return CommitOutcome(CommitStatus.COMMITTED, winner.version, self.attempts, self.snapshot)

    def _metadata(self):
        if self.snapshot is not None and self.snapshot.state.metadata is not None:
            return self.snapshot.metadata
        return self.commit.metadata

    def _isolation(self) -> IsolationLevel:
        metadata = self._metadata()
        return IsolationLevel.of(metadata.configuration if metadata is not None else {})

    def _partition_values(self, path: str):
        if self.snapshot is None:
            return None
        found = self.snapshot.state.files.get(path)
        return None if found is None else found.partition_values

    def _timeout(self, version: int) -> CommitTimeoutError:
        return CommitTimeoutError(self.table, self.attempts, self.limit.seconds, version)


def _groups(log_store: LogStore) -> bool:
    """Whether the store can queue appends (logstore/group.py); whether it will is asked when one would."""
    return _keeps_temp(log_store) and callable(getattr(log_store, "group_commit_available", None))


def _keeps_temp(log_store: LogStore) -> bool:
    """Whether the store's ``write`` takes ``summary``, ``keep_temp`` and ``temp`` (``LogStore.keeps_temp``,
    and not overridden by a ``write`` written before they existed)."""
    if not getattr(log_store, "keeps_temp", False):
        return False
    return _write_takes_kept_temp(type(log_store))


@functools.lru_cache(maxsize=64)
def _write_takes_kept_temp(kind: type) -> bool:
    try:
        parameters = inspect.signature(kind.write).parameters
    except (TypeError, ValueError):
        return False
    return {"summary", "keep_temp", "temp"} <= set(parameters)
