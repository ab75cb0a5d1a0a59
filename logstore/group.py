"""Group commit: contended blind appends commit together, in one version won with one transaction.

An append that meets contention (it lost a race for a version) *queues*: it puts a small item holding its
actions, under a key Delta never looks at. From then on every attempt of that append, and of every other
queued append, is a *group attempt*: it reads the queue (one Query), writes one temp file holding its own
actions and those of the waiting appends it takes (``table.log.group`` builds the body), and wins version N
with one ``TransactWriteItems``:

* the PutItem of N's entry (``attribute_not_exists(fileName)``, exactly Delta's item), and
* for its own queued item and each waiting item it takes, a Put of its claimed form (``groupState =
  claimed, claimedBy = N``, the body and info emptied: they are in the temp file) on condition
  ``groupState = waiting`` (and, for the others, ``claimUntil > now``).

All of it happens or none of it does. So:

* an item claimed by N means its actions are in N's temp file, written before the transaction, and so in
  ``N.json`` once it is published (by the leader or by anyone's recovery of N, which is unchanged: the
  temp file holds the whole group);
* a queued append learns its outcome from its item: claimed by N (committed at N, acknowledged once
  ``N.json`` holds its ``txnId``), or still waiting (not taken: it tries again, as leader of the next
  group or as its member). Its look is one conditional DeleteItem (``groupState = claimed``) that returns
  the item either way and deletes it when it is claimed. An item gone before its writer learned its
  outcome (that delete's answer lost, the TTL, a hand) is settled from the log: nothing claims an item
  that is gone, so the version naming the append's ``txnId``, if any, holds it. An append that gives up
  withdraws with a conditional DeleteItem (``groupState = waiting``): withdrawn and claimed exclude each
  other, and a refused withdrawal is read back (claimed by N: committed after all; gone after a look that
  got no answer: settled from the log);
* an unclear answer to the transaction is settled as for the PutItem: by reading N's entry back (our
  ``tempPath`` there: won, with every claim).

Item layout (the DynamoDB table of the entries, so nothing else to deploy). The partition key is
``tablePath = "dynacommit-group:" + <table path>`` (:func:`queue_key`), never the table's own ``tablePath``:
Delta's ``S3DynamoDBLogStore``, delta-rs and our newest-version Query see only version entries there.
``fileName`` (S): the queued append's id (``q-<microseconds since the epoch, 16 digits>-<uuid>``: ids sort
by the time their appends queued; never ``%020d.json``); ``groupState`` (S)
``waiting`` / ``claimed``; ``claimedBy`` (N) the version that took it; ``groupBody`` (S) the append's
actions, newline-delimited JSON without ``commitInfo``; ``groupInfo`` (S) JSON of what the leader needs to
judge and record the append (``table.log.group``); ``claimUntil`` (N, epoch seconds) after which nobody
claims it (its writer's deadline); ``expireTime`` (N) the TTL, an hour after that, so that items nobody
claims or removes disappear; ``leadAfter`` (N) set by the leader of the group that won that version on the
oldest append it then saw waiting: that one leads the next group; ``claimedAt`` (N, epoch milliseconds) and
``appendsFrom`` (N), set with the claim (``GroupClaim``), which also empties ``groupBody`` and ``groupInfo``,
sets ``claimUntil`` to the claim's second and ``expireTime`` an hour later. A queued append's look deletes
its item once it is claimed; one claimed item seen otherwise is deleted once its writer knows its outcome.

Where the DynamoDB table does not answer ``TransactWriteItems`` (dynalite), or ``DYNACOMMIT_GROUP_COMMIT=off``,
nothing queues: appends race as before (said once per process).
"""

from __future__ import annotations

import dataclasses

from logstore import failpoints
from logstore.errors import GroupChanged  # re-exported: where the table layer and the stores import it

__all__ = [
    "GROUP_AFTER_TRANSACTION",
    "GROUP_BEFORE_PUBLISH",
    "GROUP_BEFORE_TRANSACTION",
    "MAX_BODY_BYTES",
    "MAX_MEMBERS",
    "QUEUE_PREFIX",
    "CLAIMED",
    "WAITING",
    "GroupChanged",
    "GroupClaim",
    "QueuedAppend",
    "queue_key",
]

QUEUE_PREFIX = "dynacommit-group:"
WAITING = "waiting"
CLAIMED = "claimed"
MAX_MEMBERS = 98
"""Queued appends one transaction takes besides the leader's own item (TransactWriteItems holds 100)."""
MAX_BODY_BYTES = 64 * 1024
"""The largest body an append queues (a DynamoDB item holds 400 KB); a larger one races as before."""
EXPIRE_AFTER_CLAIM_UNTIL = 3600
"""Seconds an item lives (TTL) after the last moment it may be claimed."""

GROUP_BEFORE_TRANSACTION = failpoints.declare(
    "logstore.group.before_transaction",
    "a group leader's temp file holds its actions and those of the queued appends it takes; the transaction "
    "(PutItem of N + the claims) is about to be sent: nothing is claimed, N is free or taken")
GROUP_AFTER_TRANSACTION = failpoints.declare(
    "logstore.group.after_transaction",
    "the group's transaction was applied: N's entry names the leader's temp file (the whole group) and every "
    "member's item is claimed by N; N.json is absent: anyone finding the entry publishes the group")
GROUP_BEFORE_PUBLISH = failpoints.declare(
    "logstore.group.before_publish",
    "a group leader won N with its claims and is about to write N.json (the whole group) from its bytes")


def queue_key(table_path: str) -> str:
    """The partition key of a table's queued appends (never the table's own ``tablePath``)."""
    return QUEUE_PREFIX + table_path


@dataclasses.dataclass(frozen=True)
class QueuedAppend:
    """One queued append: the item of :func:`queue_key` ``(table)`` named ``member_id``."""

    table_path: str
    member_id: str
    body: str
    info: str
    claim_until: int
    expire_time: int
    state: str = WAITING
    claimed_by: int | None = None
    lead_after: int | None = None
    """Set by the leader of the group that won this version, which saw this append still waiting and the oldest
    such: it leads the next group (:meth:`~logstore.queued.Queueing.hand_over`)."""
    claimed_at_ms: int | None = None
    """When the group that claimed it built the claim, before its temp file and transaction (the leader's clock,
    epoch milliseconds)."""
    appends_from: int | None = None
    """Set with the claim when the leader knew every version from this one to ``claimed_by - 1`` to be a blind
    append naming no application transaction (``GroupClaim.appends_from``)."""

    @property
    def waiting(self) -> bool:
        return self.state == WAITING


@dataclasses.dataclass(frozen=True)
class GroupClaim:
    """What a group attempt claims with the entry of its version: its own queued item (``own``, None for a
    leader that is not queued) and the waiting items of ``members``; ``now`` is the epoch second the
    members' ``claimUntil`` must be later than. ``appends_from``: the leader knows every version from this
    one to the version before its own to be a blind append naming no application transaction (its snapshot's
    version + 1, when the versions after its snapshot were judged so), None when it does not: recorded on each
    claimed item, so that a member whose snapshot is at least as new need not read those versions before its
    next blind append. ``at_ms``: the leader's clock when it builds the claim, before it writes the temp file and
    sends the transaction (epoch milliseconds), recorded on each claimed item: a member learns from it how long
    groups take to claim a queued append."""

    own: str | None
    members: tuple[str, ...]
    now: int
    appends_from: int | None = None
    at_ms: int | None = None
