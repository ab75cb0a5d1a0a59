"""Queued appends of group commit, as the log store offers them (the protocol is in ``logstore/group.py``).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable

from logstore import deadline, pool, retry
from logstore.errors import CommitStateUnknownError, ConditionFailed, DynacommitError, provably_refused
from logstore.group import QueuedAppend
from logstore.steps import PUBLISHED, RESOLVE_ATTEMPTS, operation

log = logging.getLogger(__name__)


class Queueing:
    """Queueing, reading and withdrawing appends that wait for a group (``table.log.group`` drives them)."""

    def group_commit_available(self) -> bool:
        """Whether appends to this table may queue and commit together: ``DYNACOMMIT_GROUP_COMMIT`` is on
        and the external store answers transactions."""
        return self.options.group_commit and self._transactions_supported()

    @operation("queue")
    def queue_append(self, item: QueuedAppend) -> None:
        """Queue an append (see logstore/group.py). Raises what ``_put_entry`` raises; an unclear answer is
        settled by reading the item back (absent: raised; present: queued). The caller must withdraw an
        item whose queueing raised: it may exist all the same."""
        try:
            self._queue_put(item)
        except ConditionFailed:
            return  # the id is new: what holds it is an earlier attempt of this very put (an SDK retry)
        except DynacommitError as exc:
            if provably_refused(exc):
                raise
            if self._queue_get(item.member_id) is None:
                raise

    @operation("queue")
    def queued(self) -> list[QueuedAppend]:
        """The table's queued appends, waiting and claimed, oldest first."""
        return self._queue_items()

    @operation("queue")
    def taken_from(self, version: int) -> list:
        """The entries of ``version`` and the versions after it, oldest first (one Query; a few at most): a
        group leader that waited judges the versions committed meanwhile by their entries before it tries
        one, instead of losing a race at each (``table.log.transaction``)."""
        return self._entries_from(version)

    @operation("queue")
    def queued_append(self, member_id: str) -> QueuedAppend | None:
        return self._queue_get(member_id)

    @operation("queue")
    def look(self, member_id: str) -> QueuedAppend | None:
        """A queued append's look at its own item, which deletes the item when a group claimed it: one
        conditional DeleteItem (``groupState = claimed``) that returns the item either way (``ReturnValues`` and
        ``ReturnValuesOnConditionCheckFailure`` ``ALL_OLD``), where a read and a later delete took two
        requests. The item as it was: claimed by a version (and deleted now), or waiting; None when there is
        none, which is also what a claimed item deleted by an earlier attempt of this very request looks like
        (an answer lost, sent again): the caller settles it from the log."""
        return self._queue_take_claimed(member_id)

    @operation("queue")
    def withdraw(self, member_id: str) -> QueuedAppend | None:
        """Withdraw a waiting append (conditional delete). None when it is withdrawn (or gone); otherwise the
        item as it is now: claimed by a version, so the append is committed there. An unclear answer is
        settled by reading the item."""
        for attempt in range(1, RESOLVE_ATTEMPTS + 1):
            try:
                if self._queue_delete(member_id, "waiting"):
                    return None
            except DynacommitError as exc:
                if provably_refused(exc):
                    raise
                log.info("withdrawing queued append %s of %s got no clear answer (%s)", member_id,
                         self.table_path, exc)
            found = self._queue_get(member_id)
            if found is None:
                return None
            if not found.waiting:
                return found
            if not retry.SETTLE.wait(attempt, to_deadline=True):
                break
        raise CommitStateUnknownError(
            self.table_path, None,
            f"could not withdraw queued append {member_id} of table {self.table_path}: it is still waiting after "
            f"{RESOLVE_ATTEMPTS} attempts; a group may still take it (until its claimUntil); read the table's "
            f"history to see whether it landed")

    def hand_over(self, version: int, *, after: float = 0.0) -> HandOver:
        """After a group won ``version``: mark the oldest append still waiting to lead the next group (a
        conditional UpdateItem ``SET leadAfter``, on ``groupState = waiting``), so that it leads at its next
        look instead of learning it is the oldest from a read of the queue. Best effort, on the pool: an
        unmarked queue is led by its oldest append all the same (``table.log.group_member``). With ``after``,
        the mark is sent that many seconds later, unless the returned :class:`HandOver` is cancelled first
        (the leader's process leads the next group itself)."""
        handing = HandOver()

        def mark() -> None:
            marked = False
            try:
                with deadline.cleanup(f"handing over the queue of {self.table_path}"):
                    now = time.time()
                    waiting = [i for i in self._queue_items() if i.waiting and i.claim_until > now + 1]
                    if waiting:
                        self._queue_mark(waiting[0].member_id, version)
                        marked = True
            except (DynacommitError, OSError) as exc:
                log.debug("could not hand over the queue of %s after version %d: %s", self.table_path, version, exc)
            finally:
                handing.ended(marked)

        handing.send = lambda: PUBLISHED.finishing(self.scope, [pool.submit(mark)])
        if after <= 0:
            handing.fire()
        else:
            # Sent by the timer, or sooner by whoever waits for this process's finishing steps (a process
            # about to end, a Spark job commit, the end of a test case); cancelled, by nobody.
            scope = self.scope
            handing.settled = lambda: PUBLISHED.undefer(scope, handing.fire)
            PUBLISHED.defer(scope, handing.fire)
            timer = threading.Timer(after, contextvars.copy_context().run, (handing.fire,))
            timer.daemon = True
            timer.start()
        return handing

    def forget_queued(self, member_id: str) -> None:
        """Delete a claimed item whose writer knows its outcome (best effort, on the pool: its TTL removes it
        otherwise)."""

        def forget() -> None:
            try:
                with deadline.cleanup(f"deleting queued append {member_id} of {self.table_path}"):
                    self._queue_delete(member_id, "claimed")
            except (DynacommitError, OSError) as exc:
                log.debug("could not delete claimed queued append %s: %s", member_id, exc)

        PUBLISHED.finishing(self.scope, [pool.submit(forget)])


class HandOver:
    """A hand-over of a table's queue (:meth:`Queueing.hand_over`): sent once (:meth:`fire`), or cancelled
    before it is."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "pending"  # then "cancelled", or "sending" and then "marked" / "unmarked"
        self.send: Callable[[], None] = lambda: None
        self.settled: Callable[[], None] = lambda: None  # called once it is no longer pending

    def cancel(self) -> bool:
        """Keep the mark from being sent: True when it is not sent, or was sent and marked nobody (nobody
        waited); False when it marked an append, or is being sent."""
        with self._lock:
            cancelled = self._state == "pending"
            if cancelled:
                self._state = "cancelled"
            kept = self._state in ("cancelled", "unmarked")
        if cancelled:
            self.settled()
        return kept

    def may_mark(self) -> bool:
        """Whether it marked an append, or is being sent (and may)."""
        with self._lock:
            return self._state in ("sending", "marked")

    def fire(self) -> None:
        """Send it now, unless it was cancelled or sent (the timer of a hand-over sent later calls this)."""
        with self._lock:
            if self._state != "pending":
                return
            self._state = "sending"
        self.settled()
        self.send()

    def ended(self, marked: bool) -> None:
        with self._lock:
            self._state = "marked" if marked else "unmarked"
