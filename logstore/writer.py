"""Writing version N, steps 0-2 of ``logstore/external.py`` (CHECK, PREPARE, COMMIT): the commit point.

What follows the commit point (PUBLISH, FINISH, and when ``write`` returns) is ``logstore/acknowledge.py``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from logstore import deadline, failpoints, pool, retry
from logstore.base import RecoveryOutcome
from logstore.entry_store import SUMMARY_MAX_BYTES, CommitEntry, file_name
from logstore.errors import (
    ArgumentTypeError,
    CommitStateUnknownError,
    ConditionFailed,
    ConfigurationError,
    DeadlineExceededError,
    DynacommitError,
    InvalidArgumentError,
    VersionExistsError,
    VersionNotFoundError,
    provably_refused,
)
from logstore.group import (
    GROUP_AFTER_TRANSACTION,
    GROUP_BEFORE_PUBLISH,
    GROUP_BEFORE_TRANSACTION,
    GroupChanged,
    GroupClaim,
)
from logstore.steps import (
    PUBLISHED,
    RESOLVE_ATTEMPTS,
    STUCK_OUTCOMES,
    WRITE_AFTER_KEEP_TEMP,
    WRITE_AFTER_PUT_ENTRY,
    WRITE_AFTER_PUT_TEMP,
    WRITE_BEFORE_PUT_ENTRY,
    WRITE_BEFORE_PUT_TEMP,
    WRITE_BEFORE_READ_BACK,
    WRITE_BEFORE_REUSE_TEMP,
    operation,
)

if TYPE_CHECKING:
    from logstore.external import ExternalLogStore

log = logging.getLogger(__name__)


WAIT_MARK_LOSSES = 3
"""Versions a write of the same bytes lost one after another before it marks the winner's entry
(``waitingSince``): a writer that lost fewer retries at once and waits for nobody; one that lost this many
asks the winner, through the mark, to take a turn (``table.log.contention``). A write whose temp file is not
kept (a commit that reads the winners before its next attempt) marks at its first loss."""


FINISHING_WAIT_MAX = 0.5
"""Seconds, at most, a writer that lost N-1 to an entry still incomplete waits for its writer to finish it
before reading it again (``Writer._check``); after that it finishes the entry itself, as before."""


def _store_failure(exc: Exception) -> bool:
    """Whether reading an entry back is worth another try: the store failed, the deadline has not."""
    return isinstance(exc, DynacommitError) and not isinstance(exc, DeadlineExceededError)


class KeptTemp:
    """The temp file of a write that lost its version, kept for the writer's next attempt (``write``'s
    ``keep_temp``): no entry names it, and it holds ``body``. Hand it to the next ``write`` of the same bytes
    (``temp=``), which names it in its entry instead of PUTting a second temp file, or ``discard`` it. Spent
    once used or discarded; a process that dies holding one leaves an orphan temp file for the sweep."""

    def __init__(self, store: ExternalLogStore, temp_path: str, body: bytes, lost: CommitEntry | None,
                 winners: list[CommitEntry] | None = None, losses: int = 1, lost_at: float | None = None):
        self.store = store
        self.temp_path = temp_path
        self.body = body
        #: The newest entry known to hold a version this write wanted: the next attempt goes after it.
        self.lost_to = lost
        #: Every entry known to hold a version from the one this write tried on, oldest first, contiguous.
        self.winners = winners if winners is not None else ([] if lost is None else [lost])
        #: Versions these bytes lost one after another (this loss and those of the kept temp files it was
        #: handed on from): a writer that lost :data:`WAIT_MARK_LOSSES` of them marks the winner's entry.
        self.losses = losses
        #: When the loss was learnt (``time.monotonic()``): the winner's finishing steps run from about then.
        self.lost_at = time.monotonic() if lost_at is None else lost_at
        self.spent = False

    def take(self, store: ExternalLogStore, body: bytes) -> str | None:
        """The temp path, if this temp file can carry ``body`` to ``store``'s table; spends it either way
        (when it cannot, it is deleted)."""
        if self.spent:
            return None
        self.spent = True
        if store.scope == self.store.scope and (body is self.body or body == self.body):
            return self.temp_path
        self.store._discard_temp(self.temp_path)
        return None

    def discard(self) -> None:
        """Delete the temp file (best effort); nothing else needs it."""
        if not self.spent:
            self.spent = True
            self.store._discard_temp(self.temp_path)


class Writer:
    """Steps 0-2 of a write (``write`` and what it runs before the commit point)."""

    @operation("write")
    def write(self, version: int, body: bytes, *, overwrite: bool = False,
              before_commit: Callable[[], object] | None = None, summary: str | None = None,
              keep_temp: bool = False, temp: KeptTemp | None = None, group: GroupClaim | None = None) -> None:
        """Steps 0-4 of the module docstring. Past the deadline before the commit point: DeadlineExceededError,
        with the temp file deleted (best effort); past it after an unclear put that could not be settled:
        CommitStateUnknownError; past it after the commit point: success (the commit is durable; whoever
        comes next finishes it). ArgumentTypeError for a body that is not bytes, InvalidArgumentError for an
        empty one or a negative version.

        A lost race (VersionExistsError) carries ``winner``, the entry that took the version when the
        refusal or a read of it said (None otherwise), and ``kept``. ``summary``: a short text stored on
        our entry (``commitSummary``) for writers that lose to us. ``keep_temp``: on a lost race the temp
        file is not deleted but handed back as ``VersionExistsError.kept`` (:class:`KeptTemp`), for the next
        attempt of the same bytes to pass as ``temp``: step 1 is then left out. ``group``: step 2 is the
        transaction of a group attempt (logstore/group.py), claiming these queued appends with the version;
        GroupChanged when only they could not be claimed (nothing applied, the temp file deleted)."""
        self._check_version(version)
        body = self._check_body(body, commit=True)
        self._check_flag(overwrite, "overwrite")
        self._check_flag(keep_temp, "keep_temp")
        if before_commit is not None and not callable(before_commit):
            raise ArgumentTypeError(f"before_commit must be a function of no arguments, got {before_commit!r}")
        if summary is not None and (not isinstance(summary, str) or len(summary.encode()) > SUMMARY_MAX_BYTES):
            length = len(summary.encode()) if isinstance(summary, str) else "?"
            raise InvalidArgumentError(f"summary must be a str of at most {SUMMARY_MAX_BYTES} bytes (UTF-8), got "
                                       f"{type(summary).__name__} of {length} bytes; leave it out (None)")
        if group is not None and (not isinstance(group, GroupClaim) or not self.group_commit_available()):
            raise InvalidArgumentError(f"group must be a GroupClaim, on a store with group commit available; got "
                                       f"{group!r}")
        if temp is not None and not isinstance(temp, KeptTemp):
            raise ArgumentTypeError(f"temp must be the KeptTemp of a lost write (VersionExistsError.kept), "
                                    f"got {temp!r}")
        if overwrite:
            if temp is not None:
                temp.discard()
            log.warning("writing %s of %s without coordination (overwrite=True)", file_name(version),
                        self.table_path)
            self.objects.put(self.commit_key(version), body)
            return
        reused = temp.take(self, body) if temp is not None else None
        temp_path = reused or f".tmp/{file_name(version)}.{uuid.uuid4()}"
        after_loss = temp if reused is not None and temp is not None and temp.lost_to is not None \
            and temp.lost_to.version == version - 1 else None
        lost = temp.losses if reused is not None and temp is not None else 0  # versions these bytes lost so far
        self._prepare(version, temp_path, body, written=reused is not None, after_loss=after_loss,
                      keep=body if keep_temp else None, lost=lost)
        if before_commit is not None:
            self._before_commit(before_commit, temp_path)
        self._commit(version, temp_path, summary=summary, keep=body if keep_temp else None, group=group, lost=lost)
        won = time.monotonic()
        if group is not None:
            failpoints.hit(GROUP_BEFORE_PUBLISH)
        if self.options.commit_ack == "durable":
            self._publish_later(CommitEntry(self.table_path, version, temp_path, complete=False), body)
        else:
            self._publish(version, temp_path, body)
        self._time_finishing(version, won)

    def _time_finishing(self, version: int, won: float) -> None:
        """Measure how long this commit takes from its commit point to the UpdateItem marking it complete
        (``PUBLISHED.finishing_seconds``): about how long a writer that lost a version to another writer of
        the same kind waits before it reads the winner's entry again (:meth:`_check`)."""
        completing = PUBLISHED.completing(self.scope, version)
        if completing is None:
            return
        scope = self.scope

        def done(future: Future) -> None:
            if not future.cancelled() and future.exception() is None and future.result():
                PUBLISHED.note_finishing(scope, time.monotonic() - won)

        completing.add_done_callback(done)

    # ----------------------------------------------------------------- write steps
    def _prepare(self, version: int, temp_path: str, body: bytes, *, written: bool = False,
                 after_loss: KeptTemp | None = None, keep: bytes | None = None, lost: int = 0) -> None:
        """Steps 0 and 1 at once: the PUT of the temp file goes out beside the checks. If a check fails, the
        temp file is deleted: no entry names it yet, so nobody needs it. ``written``: the temp file is the
        one a lost attempt of these bytes kept (step 1 is left out, failpoint ``before_reuse_temp``);
        ``after_loss``: that kept temp file, when the version it lost was N-1 (see :meth:`_check`).
        ``keep``: when N.json exists already (the version was taken before our check), the temp file is
        kept for the next attempt, with the entries of N and after it read (one Query) for the caller to
        judge. ``lost``: versions these bytes lost before (``KeptTemp.losses``)."""
        if written:
            putting = None
            failpoints.hit(WRITE_BEFORE_REUSE_TEMP)
        else:
            putting = pool.submit(self._put_temp_step, temp_path, body)
        try:
            self._check(version, after_loss=after_loss)
            if putting is not None:
                putting.result()
        except VersionExistsError as taken:
            if putting is not None:
                pool.wait_quietly(putting)
            kept = self._keep_after_check(version, temp_path, putting, keep, lost) if keep is not None else None
            if kept is None:
                self._discard_temp(temp_path)
                raise
            self._raise_taken(version, kept.lost_to, kept)
        except Exception:
            if putting is not None:
                pool.wait_quietly(putting)  # the PUT must be over before its file is deleted
            self._discard_temp(temp_path)  # an unclear PUT may have landed
            raise

    def _keep_after_check(self, version: int, temp_path: str, putting: Future | None, body: bytes,
                          lost: int = 0) -> KeptTemp | None:
        """N.json exists: keep our temp file (if its PUT succeeded) for the next version, with N's entry, so
        that the caller judges N as if our put had been refused; None (the temp file goes) when N's entry
        cannot be read or there is none (a writer that bypassed DynamoDB wrote N.json: read it)."""
        if putting is not None and (putting.exception() is not None):
            return None
        try:
            found = self._entries_from(version)
        except (DynacommitError, OSError) as exc:
            log.debug("version %d of %s is taken; reading its entry failed (%s)", version, self.table_path, exc)
            return None
        # the entries from N on, as long as they follow one another (a gap: someone bypassed DynamoDB)
        winners: list[CommitEntry] = []
        for entry in found:
            if entry.version != version + len(winners):
                break
            winners.append(entry)
        if not winners:
            return None
        kept = KeptTemp(self, temp_path, body, winners[-1], winners, losses=lost + 1)
        failpoints.hit(WRITE_AFTER_KEEP_TEMP)
        return kept

    def _before_commit(self, before_commit: Callable[[], object], temp_path: str) -> None:
        """The caller's last word before step 2; if it fails, the temp file goes as after a failed check."""
        try:
            before_commit()
        except Exception:
            self._discard_temp(temp_path)
            raise

    def _put_temp_step(self, temp_path: str, body: bytes) -> None:
        failpoints.hit(WRITE_BEFORE_PUT_TEMP)
        self._put_temp(temp_path, body)
        failpoints.hit(WRITE_AFTER_PUT_TEMP)

    def _check(self, version: int, *, after_loss: KeptTemp | None = None) -> None:
        """Step 0: N.json must not exist; N-1 must be complete (recovered if needed). The HEAD and the read
        of N-1's entry go out together. A stuck N-1 is marked or abandoned, and the write fails with
        VersionNotFoundError: the caller must re-read (N-1 is free, or will be after the grace period).

        ``after_loss``: the temp file our put for N-1 kept when that put was refused, with N-1's entry as the
        refusal returned it. Then no HEAD of N.json: N-1's entry was won a moment ago, so a writer that uses
        the entry table and took N holds N's entry, which refuses our put; a writer that skips it and wrote
        N.json is caught by the conditional PUT of N.json (``_publish``: other bytes, VersionExistsError,
        nothing acknowledged), as it is for a writer that puts N.json between any check and its publish.
        And when N-1's entry was incomplete (its writer still publishing), it is read once after about as
        long as this process's own commits take to finish (:data:`FINISHING_WAIT_MAX` at most): by then it
        is usually complete, and finishing it for its writer (a HEAD, a GET of its temp file, the PUT of
        N-1.json and an UpdateItem, all racing the writer's own) is left to when it is not."""
        lost_to = after_loss.lost_to if after_loss is not None else None
        final = None if lost_to is not None else pool.submit(self.objects.head, self.commit_key(version))
        # N-1.json exists and holds our bytes, and our UpdateItem marked its entry complete: nothing to read.
        # That UpdateItem is waited for (it is usually over); if it failed, N-1's entry is read and finished
        # as anyone's would be, so that no entry but the newest is ever left without expireTime.
        # So does an N-1 whose entry was complete when our put for N-1 was refused with it: complete means
        # N-1.json exists (every writer marks an entry complete only after N-1.json exists).
        ours = version > 0 and ((lost_to is not None and lost_to.complete) or
                                PUBLISHED.completed(self.scope, version - 1, timeout=deadline.remaining(None)))
        if after_loss is not None and not ours:
            self._await_finishing(after_loss.lost_at)
        previous = self._get_entry(version - 1) if version > 0 and not ours else None
        if final is not None and final.result() is not None:
            raise VersionExistsError(self.table_path, version)
        if version == 0 or ours:
            return
        if previous is not None:
            if not previous.complete:
                outcome = self._recover_entry(previous, abandon=True)
                if outcome in STUCK_OUTCOMES:
                    raise VersionNotFoundError(
                        f"cannot write version {version} of table {self.table_path}: "
                        f"{self._stuck_message(previous, outcome)}; read the table's latest version again"
                    )
            return
        if self.objects.head(self.commit_key(version - 1)) is None:
            raise VersionNotFoundError(
                f"cannot write version {version} of table {self.table_path}: version {version - 1} does not "
                f"exist; versions are written in order; read the table's latest version and write the next"
            )

    def _await_finishing(self, lost_at: float) -> None:
        """Before reading the entry that beat our put (refused at ``lost_at``, ``time.monotonic()``), when
        it may still be incomplete: wait out about the time this process's own commits take from their commit
        point to the UpdateItem marking them complete (``PUBLISHED.finishing_seconds``, measured; nothing
        before this process's first commit), less the time since the refusal. It replaces finishing the
        entry for its writer, not a pause of its own.

        Two reads wait so: ``_check``'s of N-1 after our put for N-1 was refused with the entry still
        incomplete; and, on a store that returns no item with a refusal (dynalite), the read-back of the
        winner itself (``_commit``) when our temp file is kept and this loss sends no mark (a mark must
        reach an incomplete entry). Read after the wait, the winner is usually complete, and ``_check``
        then reads nothing: one GetItem per lost race instead of two."""
        finishing = PUBLISHED.finishing_seconds(self.scope)
        if finishing is None:
            return
        pause = min(finishing, FINISHING_WAIT_MAX) - (time.monotonic() - lost_at)
        if pause > 0:
            deadline.sleep(pause)

    def _commit(self, version: int, temp_path: str, *, summary: str | None = None, keep: bytes | None = None,
                group: GroupClaim | None = None, lost: int = 0) -> None:
        """Step 2: the conditional put. Returns when N is ours; raises VersionExistsError when it is not.

        Only a refusal the server provably did not apply (:func:`provably_refused`) is definite. A failed
        condition or any other failure is settled by reading the entry back: an earlier attempt of ours,
        retried by the SDK or by this loop, may be what holds the version. When the entry holding N is
        stuck (its content lost), it is marked, abandoned once its grace period is over (this writer waits
        for that), and the put is tried again. When nothing can be settled the commit's state is unknown and
        nothing is cleaned up.
        """
        entry = CommitEntry(self.table_path, version, temp_path, complete=False, summary=summary)
        uncertain = False  # an earlier attempt may have landed
        for attempt in range(1, RESOLVE_ATTEMPTS + 1):
            try:
                failpoints.hit(WRITE_BEFORE_PUT_ENTRY)
                if group is None:
                    self._put_entry(entry)
                else:
                    failpoints.hit(GROUP_BEFORE_TRANSACTION)
                    self._put_entry_group(entry, group)
                    failpoints.hit(GROUP_AFTER_TRANSACTION)  # inside: a "raise" here is a lost answer
                failpoints.hit(WRITE_AFTER_PUT_ENTRY)  # inside: a "raise" here is a lost answer
                return
            except GroupChanged as changed:
                # Refused for an item, not for N: nothing applied, unless an earlier attempt of ours was.
                if uncertain or changed.retried:
                    owner = self._resolve_owner(version, changed)
                    if owner is not None and owner.temp_path == temp_path:
                        return
                self._discard_temp(temp_path)
                raise
            except ConditionFailed as failed:
                # The owner usually comes with the refusal (ALL_OLD); read it only when it did not.
                owner = failed.owner if isinstance(failed.owner, CommitEntry) else None
                cause: Exception = failed
                refused_at = time.monotonic()
                if owner is None:
                    if keep is not None and not uncertain and not failed.retried and lost + 1 < WAIT_MARK_LOSSES:
                        try:
                            self._await_finishing(refused_at)
                        except DeadlineExceededError:
                            self._discard_temp(temp_path)  # refused outright: nothing names it
                            raise
                    owner = self._resolve_owner(version, cause)
            except DynacommitError as exc:
                if not uncertain and provably_refused(exc):
                    self._discard_temp(temp_path)  # refused outright (validation, access): nothing was written
                    raise
                cause = exc  # no answer, a 5xx, throttling, an answer after retries: it may have landed
                owner = self._resolve_owner(version, cause)
            if owner is not None and owner.temp_path == temp_path:
                return
            if owner is None:
                uncertain = True
                log.info("commit put of %s v%d did not land (%s); trying again", self.table_path, version, cause)
                self._pause_uncertain(version, attempt, cause)
                continue
            # Is the winner stuck (its content lost)? Not asked of an entry first seen now by a write that keeps
            # its temp file for the next version: that write's next check reads this entry again (after the
            # winner's finishing time) and judges it then, and when it is stuck the transaction comes back
            # to this version (table.log.transaction) and finds it marked: then it is looked at here.
            if not owner.complete and (keep is None or owner.stuck_since is not None) and self._content_lost(owner):
                try:
                    outcome = self._settle_stuck(owner, abandon=True, wait=True)
                except DeadlineExceededError:
                    self._discard_temp(temp_path)
                    raise
                if outcome is RecoveryOutcome.ABANDONED:
                    continue  # N is free again: put ours
            # Lost: no entry names our temp file. It is kept for the caller's next attempt when asked
            # (``keep``), else its DELETE is not waited for, so that the caller reads the winners and
            # tries the next version a round trip sooner; nor is the mark telling the winner that a writer
            # waits for the table.
            # The mark (``waitingSince``) asks the winner to take a turn: sent by a write that reads the
            # winners before its next attempt (no kept temp file), or that lost WAIT_MARK_LOSSES versions.
            finishing = []
            kept = None
            if keep is not None:
                kept = KeptTemp(self, temp_path, keep, owner, losses=lost + 1, lost_at=refused_at)
                failpoints.hit(WRITE_AFTER_KEEP_TEMP)
            else:
                finishing.append(pool.submit(self._discard_temp, temp_path))
            if not owner.complete and owner.waiting_since is None and (kept is None or kept.losses >= WAIT_MARK_LOSSES):
                finishing.append(pool.submit(self._note_waiting, owner))
            PUBLISHED.finishing(self.scope, finishing)
            self._raise_taken(version, owner, kept)
        raise CommitStateUnknownError(
            self.table_path, version,
            f"could not commit version {version} of table {self.table_path}: the external store did not "
            f"answer clearly after {RESOLVE_ATTEMPTS} attempts, and the entry was not there when read back; "
            f"an earlier attempt may still land: nothing was cleaned up; check `dynacommit history`",
        )

    def _pause_uncertain(self, version: int, attempt: int, cause: Exception) -> None:
        """Back off (:data:`~logstore.retry.SETTLE`) before trying the put again after ``attempt`` attempts,
        when an earlier attempt may have landed: running out of time here leaves the commit's state
        unknown. No pause after the last attempt."""
        try:
            retry.SETTLE.wait(attempt, to_deadline=True)
        except DeadlineExceededError as exc:
            raise CommitStateUnknownError(
                self.table_path, version,
                f"the commit of version {version} of table {self.table_path} may or may not have happened: "
                f"the conditional put got no clear answer ({cause}) and the operation ran out of time "
                f"({exc}); nothing was cleaned up; read the table's history to see whether the commit landed",
            ) from exc

    def _resolve_owner(self, version: int, cause: Exception) -> CommitEntry | None:
        """Read the entry of ``version`` back after a put that failed or got no clear answer."""
        failpoints.hit(WRITE_BEFORE_READ_BACK)
        try:
            return retry.retry(lambda: self._get_entry(version), policy=retry.SETTLE, to_deadline=True,
                               retryable=_store_failure, what=f"reading back the entry of {self.table_path} v{version}")
        except DynacommitError as exc:  # the store's last failure, or the deadline
            last = exc
        raise CommitStateUnknownError(
            self.table_path, version,
            f"the commit of version {version} of table {self.table_path} may or may not have happened: "
            f"the conditional put got no clear answer ({cause}) and reading the entry back failed ({last}); "
            f"nothing was cleaned up; read the table's history to see whether the commit landed",
        )

    def _raise_taken(self, version: int, owner: CommitEntry | None = None, kept: KeptTemp | None = None) -> None:
        if version == 0:
            try:
                self._check_stale_entries()
            except Exception:
                if kept is not None:
                    kept.discard()
                raise
        taken = VersionExistsError(self.table_path, version)
        taken.winner = owner
        taken.kept = kept
        raise taken

    def _check_stale_entries(self) -> None:
        """Version 0 was taken but 0.json is absent and its entry complete: a table deleted and recreated
        at the same path while its old entries are still in the external store."""
        entry = self._get_entry(0)
        if entry is not None and entry.complete and self.objects.head(self.commit_key(0)) is None:
            raise ConfigurationError(
                f"table {self.table_path} has no 00000000000000000000.json but the external store still holds "
                f"complete entries for it: the table was deleted and recreated at the same path within the "
                f"entries' time to live; delete them with `dynacommit drop-table {self.table_path} --execute` "
                f"(`dynacommit drop-table {self.table_path}` lists them first), or write the new table at "
                f"another path"
            )

