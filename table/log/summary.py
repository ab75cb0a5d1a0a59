"""What a commit is, in a few bytes: the summary our DynamoDB entries carry (``commitSummary``), so that a
writer that loses the version judges the winner from the item its refused PutItem returns, without reading
``N.json`` (docs/protocol.md, "A lost race").

A summary is compact JSON: ``{"k": KINDS}`` plus ``"t": {appId: version}`` when the commit holds ``txn``
actions. ``KINDS`` has one letter per kind of action the commit holds besides ``commitInfo`` and ``txn``:

| letter | the commit holds |
|---|---|
| ``a`` | ``add`` (only with ``dataChange=true``; a compaction's adds are ``r`` too, they come with removes) |
| ``r`` | ``remove``, or an ``add`` with ``dataChange=false`` |
| ``m`` | ``metaData`` |
| ``p`` | ``protocol`` |
| ``d`` | ``domainMetadata`` |
| ``c`` | ``cdc`` |
| ``o`` | anything else |

Only a winner whose kinds are at most ``a`` settles a lost race from its summary, and only for a loser
that is a blind append whose application id the winner's ``txn`` does not name: Delta's conflict rules
(``table.log.conflicts``) then never see a conflict, whatever the isolation level (a blind append reads
nothing; the winner changes neither protocol, metadata, domains nor removes anything). Every other case,
and an entry with no summary (written by Delta or delta-rs, or rewritten by Delta's recovery), reads
``N.json`` as before. A summary longer than ``logstore.external.SUMMARY_MAX_BYTES`` is not written.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence

from logstore.external import SUMMARY_MAX_BYTES
from table.log.actions import Action, AddFile, Cdc, CommitInfo, DomainMetadata, Metadata, Protocol, RemoveFile, Txn

__all__ = ["Summary", "parse", "settle", "summarize"]


@dataclasses.dataclass(frozen=True)
class Summary:
    kinds: str
    txns: Mapping[str, int]

    @property
    def appends_only(self) -> bool:
        """Adds data and nothing else (or nothing at all): a blind append never conflicts with it."""
        return set(self.kinds) <= {"a"}


def summarize(actions: Sequence[Action]) -> str | None:
    """The summary of a commit's actions; None when it would be longer than an entry may carry."""
    kinds: set[str] = set()
    txns: dict[str, int] = {}
    for action in actions:
        if isinstance(action, CommitInfo):
            continue
        if isinstance(action, Txn):
            txns[action.app_id] = max(action.version, txns.get(action.app_id, action.version))
        elif isinstance(action, AddFile):
            kinds.add("a" if action.data_change else "r")
        elif isinstance(action, RemoveFile):
            kinds.add("r")
        elif isinstance(action, Metadata):
            kinds.add("m")
        elif isinstance(action, Protocol):
            kinds.add("p")
        elif isinstance(action, DomainMetadata):
            kinds.add("d")
        elif isinstance(action, Cdc):
            kinds.add("c")
        else:
            kinds.add("o")
    found: dict[str, object] = {"k": "".join(sorted(kinds))}
    if txns:
        found["t"] = txns
    text = json.dumps(found, separators=(",", ":"), ensure_ascii=False)
    return text if len(text.encode()) <= SUMMARY_MAX_BYTES else None


def parse(text: str | None) -> Summary | None:
    """The summary an entry carries; None for none, or one this version does not understand (the loser
    then reads ``N.json``)."""
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if not isinstance(found, dict) or not isinstance(found.get("k"), str):
        return None
    txns = found.get("t", {})
    if not isinstance(txns, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                             for k, v in txns.items()):
        return None
    if set(found) - {"k", "t"}:
        return None  # written by a newer version that says more than this one understands
    return Summary(found["k"], dict(txns))


def settle(summaries: Iterable[str | None], app_id: str | None) -> dict[str, int] | None:
    """Whether commits whose entries carry ``summaries`` settle Delta's conflict check for a blind append under
    ``app_id`` without being read: each only appended, and none names ``app_id`` in a ``txn``. The application
    versions they name (the highest per id) when they do; None when one does not (or carries no summary)."""
    named: dict[str, int] = {}
    for text in summaries:
        found = parse(text)
        if found is None or not found.appends_only or (app_id is not None and app_id in found.txns):
            return None
        for other, version in found.txns.items():
            named[other] = max(version, named.get(other, version))
    return named
