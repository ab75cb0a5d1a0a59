"""Group commit, the table's side: what a queued append says about itself, which queued appends a group
attempt may take, and the one commit that holds them all (the log store's side is ``logstore/group.py``).

An append queues only when it is a blind append of files whose bytes are the same at any version (the
temp file of a lost race is reused as it is: ``table.log.transaction``); its item holds its actions
without ``commitInfo`` and :class:`MemberInfo`. A group attempt takes a waiting append only when Delta's
conflict rules let it join the winner and every other member:

* both are blind appends, of the same operation (``WRITE``, ``STREAMING UPDATE``): blind appends never
  conflict with each other, at either isolation level;
* the member was built on the table's current protocol and metadata (:func:`table_key` equal): a concurrent
  protocol or metadata change conflicts with every commit, and a file written under another schema must
  not join this one;
* its application id (``txn``) is neither the leader's nor another member's, and the table (with the
  versions the leader judged by their entries) does not hold it at its version or newer: an idempotent
  write lands at most once.

The body (:func:`merge`): one ``commitInfo`` (the leader's, with integer ``operationMetrics`` summed over
the group and ``groupCommit``: the members' ``txnId``), the leader's ``txn`` and then each member's, the
leader's files and then each member's: every ``add`` once. Delta readers see an ordinary version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence

from logstore import failpoints
from logstore.group import EXPIRE_AFTER_CLAIM_UNTIL, MAX_BODY_BYTES, MAX_MEMBERS, QueuedAppend
from table.log.actions import Action, AddFile, CommitInfo, Metadata, Protocol, Txn, parse_commit, serialize_commit

__all__ = ["GROUP_KEY", "MemberInfo", "group_txn_ids", "member_id", "merge", "new_item", "queued_at", "table_key", "takeable"]

GROUP_KEY = "groupCommit"
"""The ``commitInfo`` field naming a group's members (their ``txnId``)."""

MEMBER_QUEUED = failpoints.declare(
    "table.group.after_queued",
    "a contended blind append queued its item (waiting): a group may take it from now on; its writer has "
    "not learned an outcome")
MEMBER_CLAIMED = failpoints.declare(
    "table.group.after_claimed",
    "a queued append found its item claimed by version N (its actions are in N's temp file or N.json); it is "
    "not acknowledged yet")
MEMBER_WITHDRAWING = failpoints.declare(
    "table.group.before_withdraw",
    "a queued append gives up (deadline, conflict, already committed): its conditional delete of the waiting "
    "item is about to be sent; a group may take it first")


@dataclasses.dataclass(frozen=True)
class MemberInfo:
    """What a leader needs to judge and record a queued append (the item's ``groupInfo``)."""

    txn_id: str
    operation: str
    metrics: Mapping[str, str]
    table_key: str
    app_id: str | None = None
    app_version: int | None = None

    def to_json(self) -> str:
        return json.dumps({"txnId": self.txn_id, "operation": self.operation, "metrics": dict(self.metrics),
                           "tableKey": self.table_key, "appId": self.app_id, "appVersion": self.app_version},
                          separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> MemberInfo | None:
        """None for what this version does not understand (the item is then left to others)."""
        try:
            found = json.loads(text)
            info = cls(str(found["txnId"]), str(found["operation"]),
                       {str(k): str(v) for k, v in dict(found["metrics"]).items()}, str(found["tableKey"]),
                       found.get("appId"), found.get("appVersion"))
        except (ValueError, KeyError, TypeError):
            return None
        if (info.app_id is None) != (info.app_version is None):
            return None
        return info


def table_key(protocol: Protocol | None, metadata: Metadata | None) -> str:
    """A digest of the table's protocol and metadata: a member joins only a leader whose table has the same."""
    parts = serialize_commit([a for a in (protocol, metadata) if a is not None])
    return hashlib.sha256(parts).hexdigest()[:32]


def new_item(table_path: str, actions: Sequence[Action], key: str, *, app_id: str | None,
             app_version: int | None, claim_until: int) -> QueuedAppend | None:
    """The queued item of an append whose entry is ``actions`` (``commitInfo`` first); None when its body is
    too large to queue."""
    info = next(a for a in actions if isinstance(a, CommitInfo))
    body = serialize_commit([a for a in actions if not isinstance(a, CommitInfo)])
    if len(body) > MAX_BODY_BYTES:
        return None
    member = MemberInfo(str(getattr(info, "txnId")), info.operation or "",
                        {k: str(v) for k, v in (info.operation_metrics or {}).items()}, key, app_id, app_version)
    return QueuedAppend(table_path, member_id(), body.decode("utf-8"), member.to_json(), claim_until,
                        claim_until + EXPIRE_AFTER_CLAIM_UNTIL)


def member_id(now_ns: int | None = None) -> str:
    """A new queued append's id: ``q-``, the microseconds since the epoch (16 digits) and a uuid, so that ids
    sort by the time their appends queued (the queue's Query returns them oldest first)."""
    micros = (time.time_ns() if now_ns is None else now_ns) // 1000
    return f"q-{micros:016d}-{uuid.uuid4()}"


def queued_at(member: str) -> float | None:
    """When the append of the id ``member`` queued (epoch seconds, from :func:`member_id`); None for another id."""
    parts = member.split("-", 2)
    if len(parts) < 3 or parts[0] != "q" or not parts[1].isdigit():
        return None
    return int(parts[1]) / 1_000_000


@dataclasses.dataclass(frozen=True)
class Taken:
    """A queued append a group attempt takes: its item, what it says, its actions."""

    item: QueuedAppend
    info: MemberInfo
    actions: tuple[Action, ...]


def takeable(items: Sequence[QueuedAppend], *, own: str | None, operation: str, key: str,
             app_ids: set[str], held: Mapping[str, int]) -> list[Taken]:
    """The waiting appends of ``items`` a group attempt may take (see the module docstring), at most
    :data:`~logstore.group.MAX_MEMBERS`, oldest first. ``app_ids``: application ids already in the group
    (the leader's); ``held``: the newest version of each application id the table holds, as the leader
    knows it (its snapshot and the versions it judged by their entries)."""
    now = int(time.time())
    taken: list[Taken] = []
    seen = set(app_ids)
    for item in items:
        if len(taken) >= MAX_MEMBERS:
            break
        if item.member_id == own or not item.waiting or item.claim_until <= now + 1:
            continue
        info = MemberInfo.parse(item.info)
        if info is None or info.operation != operation or info.table_key != key:
            continue
        if info.app_id is not None:
            if info.app_id in seen or held.get(info.app_id, -1) >= (info.app_version or 0):
                continue
            seen.add(info.app_id)
        try:
            actions = tuple(parse_commit(item.body.encode("utf-8")))
        except Exception:  # noqa: BLE001 - an item this version cannot read is left to others
            continue
        if not all(isinstance(a, (AddFile, Txn)) for a in actions):
            continue
        taken.append(Taken(item, info, actions))
    return taken


def merge(own: Sequence[Action], taken: Sequence[Taken]) -> list[Action]:
    """The group's entry: see the module docstring. ``own`` is the leader's entry (``commitInfo`` first)."""
    if not taken:
        return list(own)
    info = next(a for a in own if isinstance(a, CommitInfo))
    metrics = dict(info.operation_metrics or {})
    for member in taken:
        for name, value in member.info.metrics.items():
            if name == "numAttempts" or name not in metrics:
                continue
            try:
                metrics[name] = str(int(metrics[name]) + int(value))
            except ValueError:
                continue  # seconds, ids, hosts: the leader's
    fields = info.model_dump()
    fields["operation_metrics"] = metrics
    fields[GROUP_KEY] = {"members": [m.info.txn_id for m in taken]}
    merged_info = CommitInfo(**fields)
    rest = [a for a in own if not isinstance(a, CommitInfo)]
    txns = [a for a in rest if isinstance(a, Txn)] + [a for m in taken for a in m.actions if isinstance(a, Txn)]
    files = [a for a in rest if not isinstance(a, Txn)] + [a for m in taken for a in m.actions
                                                          if not isinstance(a, Txn)]
    return [merged_info, *txns, *files]


def group_txn_ids(info: CommitInfo | None) -> frozenset[str]:
    """The ``txnId`` of the members of a group commit (empty for any other commit)."""
    found = getattr(info, GROUP_KEY, None) if info is not None else None
    if isinstance(found, dict) and isinstance(found.get("members"), list):
        return frozenset(str(m) for m in found["members"])
    return frozenset()
