"""Group commit inside a transaction (``table.log.group``, ``logstore/group.py``): queueing a blind append that
lost a race, a group attempt that leads the queued appends it may take (the oldest queued leads; the others wait
looking at their own item), and a member's outcome (claimed by a version, or withdrawn). A mixin of
``table.log.transaction._Attempts``, whose state it shares; the protocol is in docs/protocol.md, "Group commit"."""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import threading
import time

from logstore import deadline, failpoints
from logstore.errors import (
    CommitStateUnknownError,
    CorruptLogError,
    DeadlineExceededError,
    StorageError,
    VersionExistsError,
    VersionNotFoundError,
)
from logstore.group import CLAIMED, GroupChanged, GroupClaim, QueuedAppend
from logstore.queued import HandOver
from table.log import group, summary
from table.log.actions import Action, CommitInfo, serialize_commit
from table.log.contention import BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS
from table.log.outcome import CatchUp, CommitOutcome, CommitStatus
from table.log.snapshot import read_commit

__all__ = ["AFTER_WRITE", "GROUP_REBUILDS", "GroupMember"]

log = logging.getLogger(__name__)

AFTER_WRITE = failpoints.declare(
    "table.commit.after_write", "the log store wrote the entry: the commit is durable; no checkpoint yet")

GROUP_REBUILDS = 5
"""Group attempts at one version rebuilt because the queue changed under them, before the version is left."""


WAITING_PAUSE_CAP_SECONDS = 0.5
"""The longest pause between two reads of the queue by a queued append that waits for an older one."""
WAITING_PAUSE_GROWTHS = 12
"""The pause of a waiting append grows by half at most this many times (up to WAITING_PAUSE_CAP_SECONDS). Capped
at two growths (about two commits, so that a marked append leads sooner), 32 x 10 on moto cost 4.5 GetItems
and 3.8 Queries per append and 150 ms of moto's CPU, against 4.4, 2.8 and 90 ms uncapped."""
QUEUE_READ_EVERY = 3
"""A queued append that waits for an older one reads its own item at each look, the whole queue every
this many looks (to learn whether it is the oldest now)."""
LEADER_PATIENCE_SECONDS = 1.0
"""At least this long a queued append waits for the same older one to lead before it leads itself."""
HAND_OVER_AFTER_SECONDS = 0.5
"""How long, at most, after winning a version with members a process waits to start the next group itself before
the queue is handed over to the oldest append still waiting (:meth:`_Cadence.take_lead`); also the wait before
the process has come back :data:`FIRST_LOOK_SAMPLES` times (:meth:`_Cadence.hand_over_after`)."""
HAND_OVER_LEAST_SECONDS = 0.1
HAND_OVER_RETURNS = 2.0
"""The hand-over waits this many times the longest of the process's recent returns from a win to its next lead,
at least HAND_OVER_LEAST_SECONDS: a process whose writer appends back to back comes back within a few tens of
ms, and when it does not (its writer is done), the appends left waiting lead a few hundred ms sooner than after
the fixed 0.5 s, which at 16 x 20 on moto left the queue without a leader at each writer that finished."""
JOIN_AT_ONCE_SECONDS = 2.0
JOIN_AT_ONCE_GROUP = 2
"""A writer whose last append a group of at least JOIN_AT_ONCE_GROUP appends took at most JOIN_AT_ONCE_SECONDS
ago queues its next one at once, without reading the queue first: many appends wait, and a group most likely
takes it before its first look. After smaller groups it reads the queue first, and writes alone when nobody
waits (a few writers: joining a queue of nobody would only wait)."""
FIRST_LOOK_SAMPLES = 8
"""The claims a writer remembers per table (:class:`_Cadence`): how long its recent queued appends waited for
a group."""
FIRST_LOOK_QUANTILE = 0.5
"""A queued append's first look at its own item comes when this share of the recent claims had come."""
FIRST_LOOK_CAP_SECONDS = 0.2
"""The latest first look: a later one would delay the append that the last leader marked to lead (it learns
so at a look), and every group after it. When groups come slowly (the last writers of a burst), the usual
wait grows, and with it the pause before the next look: a cap of 1 s let the last writers wait 250-300 ms
per look. At 16 x 20 on moto, 10 runs each alternating, 1 s gave 35.9-51.6 appends/s (mean 43.8), 0.2 s
40.5-54.9 (mean 48.3), with as many looks per queued append (BENCHMARKS.md)."""


class _Cadence:
    """How long the groups that took this process's recent appends to one table needed from queueing to claim
    (the leader's ``claimedAt`` less the time in the item's id; both are wall clocks, so a skew between hosts
    enters it, bounded by the caps of :meth:`GroupMember._first_look_pause`)."""

    def __init__(self) -> None:
        self._waits: collections.deque[float] = collections.deque(maxlen=FIRST_LOOK_SAMPLES)
        self._returns: collections.deque[float] = collections.deque(maxlen=FIRST_LOOK_SAMPLES)
        self._lock = threading.Lock()
        self.led_at = -float("inf")  # when a group attempt of this process last won a version with members
        self.handing_over: HandOver | None = None  # the hand-over of that version, sent later unless we lead
        # (table key, first, last): this process knows every version from first to last of the table with that
        # protocol and metadata (``table.log.group.table_key``) to be a blind append naming no application
        # transaction: its group commits, and the versions their leaders vouched for (``appendsFrom``).
        self._appends: tuple[str, int, int] | None = None

    def led(self, handing: HandOver) -> None:
        """A group attempt of this process won a version with members; ``handing`` hands the queue over later."""
        with self._lock:
            self.led_at = time.monotonic()
            self.handing_over = handing

    def may_lead_again(self) -> bool:
        """Whether this process led a group a moment ago (:data:`JOIN_AT_ONCE_SECONDS`) and has not handed that
        group's queue over yet: its next append may lead the next group at once (:meth:`take_lead`)."""
        with self._lock:
            return (time.monotonic() - self.led_at < JOIN_AT_ONCE_SECONDS
                    and (self.handing_over is None or not self.handing_over.may_mark()))

    def take_lead(self) -> bool:
        """Lead the next group at once, as :meth:`may_lead_again` allows: the hand-over of the last group is
        cancelled, so that the append it would mark does not lead too. False when it marked an append meanwhile
        (or is marking one): that append leads; we join it. Once per group led: another thread of this process
        joins the queue."""
        with self._lock:
            since = time.monotonic() - self.led_at
            if since >= JOIN_AT_ONCE_SECONDS:
                return False
            self._returns.append(since)
            handing, self.handing_over = self.handing_over, None
            self.led_at = -float("inf")
        return handing is None or handing.cancel()

    def hand_over_after(self) -> float:
        """How long after a win with members the hand-over waits for this process to lead the next group
        (:data:`HAND_OVER_RETURNS`); :data:`HAND_OVER_AFTER_SECONDS` before a few returns were seen."""
        with self._lock:
            returns = list(self._returns)
        if len(returns) < 3:
            return HAND_OVER_AFTER_SECONDS
        return min(HAND_OVER_AFTER_SECONDS, max(HAND_OVER_LEAST_SECONDS, HAND_OVER_RETURNS * max(returns)))

    def learned(self, key: str, first: int, last: int) -> None:
        """Versions ``first`` to ``last`` are blind appends naming no application transaction."""
        if first > last:
            return
        with self._lock:
            known = self._appends
            if known is not None and known[0] == key and first <= known[2] + 1 and last >= known[1] - 1:
                self._appends = (key, min(first, known[1]), max(last, known[2]))
            elif known is None or known[0] != key or last > known[2]:
                self._appends = (key, first, last)

    def appends_through(self, key: str, last: int) -> int | None:
        """The first version of the known run of blind appends (:meth:`learned`) that reaches ``last``; None
        when none does."""
        with self._lock:
            known = self._appends
        if known is None or known[0] != key or not known[1] <= last <= known[2]:
            return None
        return known[1]

    def claimed(self, item: QueuedAppend) -> None:
        queued = group.queued_at(item.member_id)
        if item.claimed_at_ms is None or queued is None:
            return
        wait = item.claimed_at_ms / 1000 - queued
        if 0 <= wait < 60:
            with self._lock:
                self._waits.append(wait)

    def usual(self) -> float | None:
        """The wait by which :data:`FIRST_LOOK_QUANTILE` of the recent claims had come; None before a few."""
        with self._lock:
            waits = sorted(self._waits)
        if len(waits) < 3:
            return None
        return waits[int(FIRST_LOOK_QUANTILE * (len(waits) - 1) + 0.5)]


_CADENCES: dict[str, _Cadence] = {}
_CADENCES_LOCK = threading.Lock()


def _cadence(table: str) -> _Cadence:
    with _CADENCES_LOCK:
        found = _CADENCES.get(table)
        if found is None:
            found = _CADENCES[table] = _Cadence()
        return found


_ALONE = object()
"""A writer that is not queued found no queued append to lead: it writes alone."""
_REBUILD = object()
"""A group attempt's transaction found the queue changed (``GroupChanged``): read it again."""


@dataclasses.dataclass(frozen=True)
class _Claimed:
    """A group attempt found our queued item claimed (``item.claimed_by`` is the version; ``actions``, the
    version's, when they were read already)."""

    item: QueuedAppend
    actions: list[Action] | None = None


class GroupMember:
    """The group-commit steps of ``_Attempts`` (see the module docstring)."""

    def _group_commit_on(self) -> bool:
        try:
            return bool(self.log_store.group_commit_available())  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - without knowing, appends race as before
            log.debug("group commit availability of %s unknown (%s)", self.table, exc)
            return False

    def _queue(self) -> None:
        """After a lost race judged by the winner's entry: queue this append (once), so that the next group
        takes it, and make every attempt from now on a group attempt."""
        if (self.member is not None or not self.groups or not self.reusable or self.snapshot is None
                or not self._group_commit_on()):
            return
        before = self.write_options.get("before_commit")
        if before is not None:
            before()  # a queued append's files must be whole before any group may take it
        key = group.table_key(self.snapshot.protocol, self.snapshot.metadata)
        claim_until = int(time.time() + deadline.remaining() - 1)
        item = group.new_item(self.table, self.written, key, app_id=self.commit.app_id,
                              app_version=self.commit.app_version, claim_until=claim_until)
        if item is None or claim_until <= time.time() + 1:
            return
        # Ours before it is sent: from then on every way out of the transaction withdraws it (``run``).
        self.member = item
        self.member_txn = getattr(next(a for a in self.written if isinstance(a, CommitInfo)), "txnId", None)
        try:
            self.log_store.queue_append(item)  # type: ignore[attr-defined]
        except StorageError as exc:
            # It may have landed all the same: withdrawn (or never there), this append races as before;
            # claimed meanwhile, the next attempt finds it so.
            if self._withdraw() is None:
                log.info("commit to %s: queueing for group commit failed (%s); racing alone", self.table, exc)
            return
        self.just_queued = True
        failpoints.hit(group.MEMBER_QUEUED)
        log.debug("queued append %s of %s for group commit", item.member_id, self.table)

    def _group_attempt(self, version: int) -> list[Action] | _Claimed | None:
        """One group attempt at ``version``: read the queue; when our item was claimed, say by which version;
        otherwise write our actions and those of the waiting appends we may take, winning the version and
        claiming them (and our own item) in one transaction. None when the version was taken.

        Nobody backs off here: a queued append waits only while another writer is committing it. Right
        after queueing it looks about one commit later (the writer that won the version it lost has most
        likely taken it meanwhile). Of the queued appends that can join one another, the OLDEST leads (ids
        sort by the time they queued): it takes every waiting append it may, oldest first, so nobody starves;
        having won, it hands the queue over to the oldest append still waiting (``lead_after``), which leads
        at its next look. The others send nothing meanwhile but one look at their own item per pause (a
        pause that grows while they wait, :meth:`_waiting_pause`), of the whole queue every
        :data:`QUEUE_READ_EVERY` looks, and lead themselves only when the same oldest append has not led for
        :meth:`_patience` (its writer died or stalls). A writer whose last append a group took a moment ago
        queues its next at once, and looks at its own item first, twice, about a commit apart, before it
        reads the queue (:data:`JOIN_AT_ONCE_SECONDS`); its first look comes as late as groups usually took
        to claim its recent appends (:meth:`_first_look_pause`). A process whose group attempt won a version
        with members a moment ago leads the next group itself, at once, without queueing, and cancels that
        group's hand-over, sent about twice its usual return after the win (:meth:`_Cadence.hand_over_after`,
        at most :data:`HAND_OVER_AFTER_SECONDS`) unless it is cancelled (in case the process appends no more);
        sent first, the marked append leads and the process joins the queue. A group attempt that lost its
        version tries the next one at once, with the same members and temp file (``self.regroup``)."""
        assert self.snapshot is not None
        rebuilds = 0
        retry, self.regroup = self.regroup, None
        if retry is not None and self.kept is not None:
            # Our last group attempt lost the version before this one to an entry that settled it (the commit
            # loop kept its temp file for this version): the same members, as far as they may still join, go
            # on at once, with no read of the queue and no PUT of the temp file. Claimed or withdrawn
            # meanwhile, the transaction says so (GroupChanged), and the queue is read again.
            own_id = None if self.member is None else self.member.member_id
            taken = self._takeable(retry, own_id)
            if taken:
                led = self._lead(version, retry, taken, own_id, judge_since=False)
                if led is not _REBUILD:
                    return led
                rebuilds += 1
        oldest_seen: tuple[str, float] | None = None  # the oldest append ahead of us, since when we see it
        checks = 0
        own_only = False  # the next look reads our own item alone (GetItem), not the whole queue
        first_look = False  # the next look is the first since we queued after a lost race
        second_look = False  # the next look is the second, and the last before we read the queue
        marked = False  # the last group's leader handed the queue over to us (``lead_after``)
        # This process led the last group a moment ago: it leads the next one, now (below), taking every
        # waiting append it may, oldest first; nobody has to learn from a look that it leads.
        leads = self.member is None and _cadence(self.table).may_lead_again()
        if (self.member is None and not leads and self.contention.taken_group >= JOIN_AT_ONCE_GROUP
                and time.monotonic() - self.contention.taken_at < JOIN_AT_ONCE_SECONDS):
            # A group took our last append a moment ago: queue this one at once; our first look reads our own
            # item, the queue only when nobody took us meanwhile (then we may be the oldest, and lead).
            self._queue()
            if self.member is None:
                return _ALONE
        if self.just_queued:
            # Just queued after losing a version: the writer that won it, or the oldest waiting append, most
            # likely takes us meanwhile; we read our own item about one commit later, and the queue (to lead
            # if still waiting, below) only when it is still waiting.
            self.just_queued = False
            deadline.sleep(self._first_look_pause())
            own_only = first_look = True
        while rebuilds < GROUP_REBUILDS:
            items: list = []
            looked = False  # our item read by a look, which deleted it if it was claimed
            if own_only and self.member is not None:
                own = self._look()
                looked = True
            elif self.member is None:
                items = self.log_store.queued()  # type: ignore[attr-defined]
                own = None
            else:
                items = self.log_store.queued()  # type: ignore[attr-defined]
                own = next((i for i in items if i.member_id == self.member.member_id), None)
                if own is None:
                    own = self._look()
                    looked = True
            if self.member is not None and own is None:
                # Not committed when the log does not name it, and nothing can claim it now: the append
                # goes on without its item, as one that never queued.
                return self._settle_gone() or _ALONE
            if own is not None and own.claimed_by is not None:
                if looked:
                    self.member = None  # deleted by the look: nothing is left to withdraw or delete
                return _Claimed(own)
            if own is not None and own.lead_after is not None and not marked:
                # The leader of the last group saw us the oldest still waiting: we lead the next one, now.
                marked = True
                if own_only:
                    own_only = first_look = second_look = False
                    continue
            if own_only and first_look:
                # Still waiting at our first look: the group in flight, or the one led by the append its leader
                # marks, most likely takes us within about one more commit. One more read of our own item after
                # a pause, and the queue (to lead if we are the oldest) only if we still wait then.
                first_look, second_look = False, True
                deadline.sleep(self._member_pause())
                continue
            if own_only and second_look:
                second_look = own_only = False
                continue
            if own_only:
                # Still waiting for the older append we saw to lead: read the queue itself every few looks
                # only (and once that one has not led for a while): it is the dearest read of all.
                checks += 1
                own_only = checks % QUEUE_READ_EVERY != 0 and (
                    oldest_seen is None or time.monotonic() - oldest_seen[1] < self._patience())
                deadline.sleep(self._waiting_pause(checks))
                continue
            own_id = None if self.member is None else self.member.member_id
            taken = self._takeable(items, own_id)
            if own_id is None and not taken:
                return _ALONE
            if own_id is None and not (leads and _cadence(self.table).take_lead()):
                # Appends wait and the oldest of them leads (or the one our last group's hand-over marked): join
                # them rather than race it for the version. We just saw the older ones: the next looks read our
                # own item, the queue every few (as below).
                self._queue()
                if self.member is None:
                    return _ALONE
                self.just_queued = False
                oldest_seen = (taken[0].item.member_id, time.monotonic())
                own_only = True
                deadline.sleep(self._member_pause())
                continue
            if own_id is not None and taken and own_id > taken[0].item.member_id and not marked:
                # Queued appends that can join one another: the oldest leads and takes us; we read the queue
                # again after a pause, unless that one has not led for too long (then we lead).
                oldest = taken[0].item.member_id
                now = time.monotonic()
                if oldest_seen is None or oldest_seen[0] != oldest:
                    oldest_seen = (oldest, now)
                if now - oldest_seen[1] < self._patience():
                    deadline.sleep(self._waiting_pause(checks))
                    checks += 1
                    own_only = True
                    continue
                log.debug("queued append %s of %s has not led for %.2f s: %s leads", oldest, self.table,
                          now - oldest_seen[1], own_id)
            # We lead. The versions committed while we waited are judged by their entries (one Query), not
            # by losing a race at each: the attempt goes to the version after them.
            led = self._lead(version, items, taken, own_id)
            if led is not _REBUILD:
                return led
            rebuilds += 1
        return None

    def _lead(self, version: int, items: list, taken: list, own_id: str | None, *,
              judge_since: bool = True) -> list[Action] | None | object:
        """Lead a group at ``version`` with the waiting appends ``taken`` (of the queue as read, ``items``): the
        actions written, None when the version was taken (the queue as read is kept for the next attempt,
        ``self.regroup``, and so is the temp file), or :data:`_REBUILD` when the queue changed under the
        transaction. ``judge_since``: the versions taken since our snapshot are judged by their entries first
        (one Query); a retry right after a lost version leaves that to the transaction, which fails on a
        taken version as any put does."""
        if judge_since:
            taken_since = [e for i, e in enumerate(self.log_store.taken_from(version))  # type: ignore[attr-defined]
                           if e.version == version + i]
            if taken_since:
                if not self._judged(taken_since):
                    self.group_winner = taken_since[0]  # judged again, and read, as a lost race
                    return None
                version = self._next_version()
                taken = self._takeable(items, own_id)
        merged = group.merge(self.written, taken)
        appends_from = self._appends_from()
        claim = GroupClaim(own_id, tuple(t.item.member_id for t in taken), int(time.time()),
                           appends_from=appends_from, at_ms=time.time_ns() // 1_000_000)
        # A lost version hands the temp file back (``keep_temp``): the next attempt of the same bytes (the same
        # members; alone, our own body) sends no PUT of it. Other bytes delete it (``KeptTemp.take``).
        options = {**self.write_options, "keep_temp": True}
        kept, self.kept = self.kept, None
        if kept is not None:
            options["temp"] = kept
        body = serialize_commit(merged) if taken else self.body
        try:
            self.log_store.write(version, body, summary=summary.summarize(merged), group=claim,
                                 **options)  # type: ignore[call-arg]
        except VersionExistsError as lost:
            log.debug("group attempt at version %d of %s lost (%d members)", version, self.table, len(taken))
            self.group_winner = lost.winner
            self.kept = lost.kept
            self.regroup = items if taken else None
            return None
        except GroupChanged as changed:
            log.debug("group attempt at version %d of %s: the queue changed (%s); reading it again", version,
                      self.table, changed)
            return _REBUILD
        failpoints.hit(AFTER_WRITE)
        self._learn_appends(appends_from, version, merged)
        if taken:
            # This process most likely leads the next group itself (above): the queue is handed over only if
            # it does not start to within about twice its usual return (_Cadence.hand_over_after).
            cadence = _cadence(self.table)
            cadence.led(self.log_store.hand_over(  # type: ignore[attr-defined]
                version, after=cadence.hand_over_after()))
            log.info("commit to %s: version %d holds %d appends (group commit)", self.table, version,
                     len(taken) + 1)
        elif own_id is not None:
            # Our queued append committed in a group of its own: nobody else waited. Our next append
            # writes alone, as appends do without contention, rather than queueing at once for a group
            # that nobody else joins (a writer left alone by the others would wait for itself at each).
            self.contention.taken_at, self.contention.taken_group = time.monotonic(), 1
            self.log_store.hand_over(version)  # type: ignore[attr-defined]
        return merged

    def _takeable(self, items: list, own_id: str | None) -> list:
        """The waiting appends of ``items`` this group attempt may take (``table.log.group.takeable``)."""
        assert self.snapshot is not None
        held = {app_id: txn.version for app_id, txn in self.snapshot.state.app_txns.items()}
        for app_id, app_version in self.unread_txns.items():
            held[app_id] = max(app_version, held.get(app_id, app_version))
        info = next(a for a in self.written if isinstance(a, CommitInfo))
        return group.takeable(items, own=own_id, operation=info.operation or "",
                              key=group.table_key(self.snapshot.protocol, self.snapshot.metadata),
                              app_ids={self.commit.app_id} - {None}, held=held)  # type: ignore[arg-type]

    def _appends_from(self) -> int | None:
        """What a group attempt records with its claims (``GroupClaim.appends_from``): the version after our
        snapshot when every version after it that we go on top of (judged by its entry, or our own commit gone
        past unread) is a blind append naming no application transaction, or earlier when this process knows
        the versions up to our snapshot to be such (:meth:`_Cadence.learned`); None when we do not know that."""
        base = self.snapshot
        if base is None or base.time_travel or self.unread_txns:
            return None
        # What this process knows of the versions up to our snapshot reaches further back.
        before = _cadence(self.table).appends_through(group.table_key(base.protocol, base.metadata), base.version)
        return base.version + 1 if before is None else min(before, base.version + 1)

    def _learn_appends(self, first: int | None, version: int, actions: list[Action]) -> None:
        """After ``version`` (``actions``) was committed with the claims of ``first``: what this process now
        knows to be blind appends naming no application transaction (:meth:`_Cadence.learned`)."""
        base = self.snapshot
        if base is None:
            return
        kinds = summary.parse(summary.summarize(actions))
        last = version if kinds is not None and kinds.appends_only and not kinds.txns else version - 1
        _cadence(self.table).learned(group.table_key(base.protocol, base.metadata),
                                     version if first is None else first, last)

    def _look(self) -> QueuedAppend | None:
        """Look at our item (``Queueing.look``: deleted when it is claimed). Until an answer comes, the item may be
        gone by our own hand: a withdrawal that finds it gone then settles it from the log (:meth:`_withdraw`)."""
        assert self.member is not None
        self.look_unanswered = True
        found = self.log_store.look(self.member.member_id)  # type: ignore[attr-defined]
        self.look_unanswered = False
        return found

    def _settle_gone(self) -> _Claimed | None:
        """Our queued item is gone before we learned its outcome: a look of ours deleted it claimed and its
        answer was lost (sent again, the look found nothing), or its TTL passed, or it was deleted by hand.
        Nothing claims an item that is gone, and a claim is in the entry of its version, won in the same
        transaction, so the log now holds the whole answer: the version after our snapshot whose commitInfo
        names our ``txnId`` (claimed there), or none up to the newest (not committed: the append goes on
        without its item). Read version by version, recovering any its writer left unfinished."""
        assert self.member is not None
        member_id, self.member = self.member.member_id, None  # nothing is left to withdraw or delete
        txn = self.member_txn
        version = 0 if self.snapshot is None else self.snapshot.version + 1
        log.info("table %s: queued append %s is gone before its outcome was learned; reading the log from version "
                 "%d for its transaction %s", self.table, member_id, version, txn)
        try:
            if txn is None:
                raise ValueError("the append names no txnId in its commitInfo")
            while True:
                try:
                    actions = read_commit(self.log_store, version)
                except VersionNotFoundError:
                    return None
                info = next((a for a in actions if isinstance(a, CommitInfo)), None)
                if txn in group.group_txn_ids(info) or getattr(info, "txnId", None) == txn:
                    claimed = QueuedAppend(self.table, member_id, "", "", 0, 0, state=CLAIMED, claimed_by=version)
                    return _Claimed(claimed, actions)
                version += 1
        except (CorruptLogError, StorageError, DeadlineExceededError, ValueError) as exc:
            raise CommitStateUnknownError(
                self.table, version,
                f"the queued append {member_id} of table {self.table} is gone from DynamoDB before its writer "
                f"learned its outcome, and reading the log for it failed at version {version} ({exc}); read the "
                f"table's history (commitInfo.groupCommit) to see whether it landed") from exc

    def _claimed(self, item: QueuedAppend, actions: list[Action] | None = None) -> CommitOutcome | None:
        """Our queued item was claimed by version N (``item.claimed_by``; ``actions``, N's, when they were read
        already): committed there once ``N.json`` names our ``txnId`` (it is published by its leader or, if that
        one died, by our read, which recovers it). None when it does not (a writer that bypasses DynamoDB wrote
        that version first): not committed; we go on. The versions between our snapshot and N are read later
        (``CommitOutcome.catch_up``); when the leader recorded that they are blind appends naming no application
        transaction (``appends_from``, from a snapshot no newer than ours), the catch-up counts them as judged,
        so that our next blind append may go past them unread (``table.log.outcome.may_go_past``)."""
        failpoints.hit(group.MEMBER_CLAIMED)
        assert item.claimed_by is not None
        version = item.claimed_by
        try:
            if actions is None:
                actions = read_commit(self.log_store, version)
        except (VersionNotFoundError, CorruptLogError, StorageError, DeadlineExceededError) as exc:
            raise CommitStateUnknownError(
                self.table, version,
                f"the queued append of table {self.table} was taken by the group commit of version {version}, but "
                f"reading that version failed ({exc}); read the table's history to see whether it landed") from exc
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        self._forget_member()
        leader = getattr(info, "txnId", None) if info is not None else None
        # Named as a member, or as the leader: our own transaction claimed our item (its answer was lost).
        if self.member_txn is None or (self.member_txn not in group.group_txn_ids(info)
                                       and self.member_txn != leader):
            log.warning("table %s: our queued append was claimed by version %d, but %020d.json does not hold it "
                        "(written by a writer that bypasses DynamoDB): it is not committed there; trying again",
                        self.table, version, version)
            return None
        self.contention.taken_at = time.monotonic()
        self.contention.taken_group = 1 + len(group.group_txn_ids(info))
        _cadence(self.table).claimed(item)
        base = self.snapshot
        vouched = item.appends_from
        if base is not None and vouched is not None and vouched > base.version + 1:
            # Our own knowledge may bridge the versions between our snapshot and those the leader vouched for.
            before = _cadence(self.table).appends_through(group.table_key(base.protocol, base.metadata), vouched - 1)
            vouched = vouched if before is None else min(before, vouched)
        if base is not None and not base.time_travel and vouched is not None and vouched <= base.version + 1:
            self._learn_appends(vouched, version, actions)
            known = tuple(k for k in self.known if k[0] < version)
            mine = {v for v, _ in known}
            unread = tuple(v for v in range(base.version + 1, version) if v not in mine)
            catch_up = CatchUp(self.log_store, base, unread, version, actions, known=known, txns=self.unread_txns)
        else:
            if item.appends_from is not None:
                self._learn_appends(item.appends_from, version, actions)
            catch_up = CatchUp(self.log_store, base, tuple(range(base.version + 1, version)) if base else (),
                               version, actions, judged=False)
        return CommitOutcome(CommitStatus.COMMITTED, version, self.attempts, None, catch_up)

    def _withdraw(self) -> QueuedAppend | None:
        """Withdraw our waiting item; the item, claimed, when a group took it first (None: withdrawn, not
        committed). Runs with a cleanup deadline of its own (ours may be spent). An item found gone after a look
        of ours got no answer may have been deleted by that look, claimed: the log settles it
        (:meth:`_settle_gone`)."""
        assert self.member is not None
        failpoints.hit(group.MEMBER_WITHDRAWING)
        try:
            with deadline.cleanup(f"withdrawing a queued append of {self.table}"):
                found = self.log_store.withdraw(self.member.member_id)  # type: ignore[attr-defined]
        except CommitStateUnknownError:
            raise
        except Exception as exc:  # noqa: BLE001 - a group may still take it: not a definite failure
            raise CommitStateUnknownError(
                self.table, None,
                f"the append to table {self.table} was queued for group commit and withdrawing it failed ({exc}): "
                f"a group may still take it until its deadline; nothing was cleaned up; read the table's history "
                f"(commitInfo.groupCommit) to see whether it landed") from exc
        if found is None and self.look_unanswered:
            # Gone, and a look of ours that got no answer may have deleted it claimed: the log says.
            with deadline.cleanup(f"reading the log of {self.table} for a queued append gone"):
                settled = self._settle_gone()
            return None if settled is None else settled.item
        if found is None:
            self.member = None
            return None
        return found

    def _forget_member(self) -> None:
        if self.member is not None:
            self.log_store.forget_queued(self.member.member_id)  # type: ignore[attr-defined]
            self.member = None

    def _waiting_pause(self, checks: int) -> float:
        """The pause of a queued append that waits for an older one to lead, after ``checks`` reads of the
        queue that found it still waiting: about one commit, growing by half each time up to
        :data:`WAITING_PAUSE_CAP_SECONDS` (each read is a request the store serves for every writer)."""
        return min(WAITING_PAUSE_CAP_SECONDS, self._member_pause() * 1.5 ** min(checks, WAITING_PAUSE_GROWTHS))

    def _patience(self) -> float:
        """How long a queued append waits for the same older one to lead before it leads itself: several
        commits, at least :data:`LEADER_PATIENCE_SECONDS`."""
        commit = self.contention.commit_seconds or BACKOFF_BASE_SECONDS
        return max(LEADER_PATIENCE_SECONDS, 8 * commit)

    def _first_look_pause(self) -> float:
        """How long a just-queued append waits before it first reads its own item: about as long as groups
        took to claim this process's recent appends (:class:`_Cadence`), so that it is most often claimed by
        then and that one read is all it sends; at least one commit (:meth:`_member_pause`), at most
        :data:`FIRST_LOOK_CAP_SECONDS`."""
        pause = self._member_pause()
        usual = _cadence(self.table).usual()
        if usual is None:
            return pause
        return min(FIRST_LOOK_CAP_SECONDS, max(pause, usual * random.uniform(0.9, 1.1)))

    def _member_pause(self) -> float:
        """How long a queued append that does not lead waits before it reads the queue again: about one
        commit (the leader's transaction and the temp file before it): as measured by a first attempt of this
        process that won alone, or, when none did (a writer whose appends groups take), half the usual wait
        of its queued appends for their group (:class:`_Cadence`: the groups come about twice as often)."""
        commit = self.contention.commit_seconds
        if not commit:
            usual = _cadence(self.table).usual()
            commit = BACKOFF_BASE_SECONDS if usual is None else usual / 2
        return min(BACKOFF_CAP_SECONDS, max(BACKOFF_BASE_SECONDS, commit)) * random.uniform(0.8, 1.2)
