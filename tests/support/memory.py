"""In-memory log store: the real algorithm of :mod:`logstore.external` over a dict of entries (test machinery).

Used by unit tests (including failpoint tests that cut the algorithm between steps) and, once this module is
imported, by ``memory://bucket/path`` URIs within one process: importing it registers the ``memory`` scheme
(``logstore.register_scheme``; the tests' conftest imports it). Entries and objects live in a process-wide
registry keyed by bucket, so two stores opened on the same URI see each other, as two processes would
through DynamoDB and S3. Imports nothing but ``logstore`` and the standard library (no boto3).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

from logstore import deadline, readonly, register_scheme
from logstore.errors import ConditionFailed
from logstore.entry_store import DEFAULT_EXPIRE_SECONDS, CommitEntry
from logstore.external import ExternalLogStore
from logstore.group import (CLAIMED, EXPIRE_AFTER_CLAIM_UNTIL, WAITING, GroupChanged, GroupClaim, QueuedAppend,
                            queue_key)
from logstore.objects import MemoryObjectStore
from logstore.options import StorageOptions, TableUri


class MemoryEntryTable:
    """The external store's items, ``(table_path, version) -> CommitEntry``, with conditional writes."""

    def __init__(self):
        self._entries: dict[tuple[str, int], CommitEntry] = {}
        self._queue: dict[tuple[str, str], QueuedAppend] = {}  # (queue key, member id) -> item
        self._lock = threading.Lock()

    # --- queued appends (logstore/group.py), with DynamoDB's TransactWriteItems semantics -------------
    def queue_put(self, item: QueuedAppend) -> bool:
        """Create the item if absent (conditional PutItem); whether it was created."""
        with self._lock:
            key = (queue_key(item.table_path), item.member_id)
            if key in self._queue:
                return False
            self._queue[key] = item
            return True

    def queue_items(self, table_path: str) -> list[QueuedAppend]:
        with self._lock:
            found = [q for (k, _), q in self._queue.items() if k == queue_key(table_path)]
        return sorted(found, key=lambda q: q.member_id)

    def queue_get(self, table_path: str, member_id: str) -> QueuedAppend | None:
        with self._lock:
            return self._queue.get((queue_key(table_path), member_id))

    def queue_mark(self, table_path: str, member_id: str, version: int) -> bool:
        with self._lock:
            key = (queue_key(table_path), member_id)
            found = self._queue.get(key)
            if found is None or found.state != WAITING:
                return False
            self._queue[key] = dataclasses.replace(found, lead_after=version)
            return True

    def queue_delete(self, table_path: str, member_id: str, state: str) -> bool:
        with self._lock:
            key = (queue_key(table_path), member_id)
            found = self._queue.get(key)
            if found is None or found.state != state:
                return False
            del self._queue[key]
            return True

    def queue_take_claimed(self, table_path: str, member_id: str) -> QueuedAppend | None:
        with self._lock:
            key = (queue_key(table_path), member_id)
            found = self._queue.get(key)
            if found is not None and found.state == CLAIMED:
                del self._queue[key]
            return found

    def transact(self, entry: CommitEntry, claim: GroupClaim) -> None:
        """The entry's conditional put and every claim, all or nothing, as TransactWriteItems: raises
        ConditionFailed (with the entry there) when the version is taken, GroupChanged when an item is not
        claimable; changes nothing then."""
        with self._lock:
            existing = self._entries.get((entry.table_path, entry.version))
            queue = queue_key(entry.table_path)
            own = self._queue.get((queue, claim.own)) if claim.own is not None else None
            own_bad = claim.own is not None and (own is None or own.state != WAITING)
            bad = tuple(m for m in claim.members
                        if (found := self._queue.get((queue, m))) is None or found.state != WAITING
                        or found.claim_until <= claim.now)
            if own_bad or (bad and existing is None):
                raise GroupChanged(f"memory:TransactWriteItems: queued appends changed (own: {own_bad}, "
                                   f"members: {list(bad)})", own=own_bad, members=bad)
            if existing is not None:
                raise ConditionFailed("memory:TransactWriteItems", retried=False, owner=existing)
            self._entries[(entry.table_path, entry.version)] = entry
            for member in ((claim.own,) if claim.own is not None else ()) + claim.members:
                key = (queue, member)
                # the claimed item replaces the waiting one, as the DynamoDB store's conditional Put does
                self._queue[key] = QueuedAppend(entry.table_path, member, "", "", claim.now,
                                                int(time.time()) + EXPIRE_AFTER_CLAIM_UNTIL, CLAIMED, entry.version,
                                                None, claim.at_ms, claim.appends_from)

    def claim(self, entry: CommitEntry) -> CommitEntry | None:
        """Store ``entry`` if its version has none (DynamoDB's conditional PutItem); otherwise store nothing
        and return the entry there (what ``ReturnValuesOnConditionCheckFailure=ALL_OLD`` returns)."""
        with self._lock:
            key = (entry.table_path, entry.version)
            existing = self._entries.get(key)
            if existing is None:
                self._entries[key] = entry
            return existing

    def get(self, table_path: str, version: int) -> CommitEntry | None:
        with self._lock:
            return self._entries.get((table_path, version))

    def latest(self, table_path: str) -> CommitEntry | None:
        with self._lock:
            versions = [v for (t, v) in self._entries if t == table_path]
            return self._entries[(table_path, max(versions))] if versions else None

    def complete(self, table_path: str, version: int, expire_time: int) -> CommitEntry | None:
        """Mark the entry complete if it is not; the entry as it was before (None: nothing changed)."""
        with self._lock:
            entry = self._entries.get((table_path, version))
            if entry is None or entry.complete:
                return None
            self._entries[(table_path, version)] = CommitEntry(
                table_path, version, entry.temp_path, complete=True, expire_time=expire_time, summary=entry.summary
            )
            return entry

    def mark_waiting(self, table_path: str, version: int, since: int) -> bool:
        """DynamoDB's ``SET waitingSince`` with its condition (see ``ExternalLogStore._mark_waiting``)."""
        with self._lock:
            entry = self._entries.get((table_path, version))
            if entry is None or entry.complete or entry.waiting_since is not None:
                return False
            self._entries[(table_path, version)] = dataclasses.replace(entry, waiting_since=since)
            return True

    def mark_stuck(self, table_path: str, version: int, temp_path: str, since: int) -> bool:
        """DynamoDB's ``SET stuckSince`` with its condition (see ``ExternalLogStore._mark_stuck``)."""
        with self._lock:
            entry = self._entries.get((table_path, version))
            if entry is None or entry.complete or entry.temp_path != temp_path or entry.stuck_since is not None:
                return False
            self._entries[(table_path, version)] = dataclasses.replace(entry, stuck_since=since)
            return True

    def abandon(self, table_path: str, version: int, temp_path: str, stuck_since: int | None) -> bool:
        """DynamoDB's conditional DeleteItem (see ``ExternalLogStore._abandon_entry``)."""
        with self._lock:
            entry = self._entries.get((table_path, version))
            if (entry is None or entry.complete or entry.temp_path != temp_path or entry.stuck_since is None
                    or entry.stuck_since != stuck_since):
                return False
            del self._entries[(table_path, version)]
            return True

    def drop(self, entry: CommitEntry) -> bool:
        """DynamoDB's conditional DeleteItem of an entry still as read (see ``ExternalLogStore._drop_entry``)."""
        with self._lock:
            found = self._entries.get((entry.table_path, entry.version))
            if found is None or found.temp_path != entry.temp_path or found.complete != entry.complete:
                return False
            del self._entries[(entry.table_path, entry.version)]
            return True

    def replace(self, entry: CommitEntry) -> None:
        """Overwrite an entry unconditionally (what TTL or an operator does behind the protocol's back)."""
        with self._lock:
            self._entries[(entry.table_path, entry.version)] = entry

    def delete(self, table_path: str, version: int) -> None:
        with self._lock:
            self._entries.pop((table_path, version), None)

    def entries(self, table_path: str) -> list[CommitEntry]:
        with self._lock:
            return sorted((e for (t, _), e in self._entries.items() if t == table_path), key=lambda e: e.version)


_registry_lock = threading.Lock()
_buckets: dict[str, MemoryObjectStore] = {}
_entry_table = MemoryEntryTable()


def memory_bucket(bucket: str) -> MemoryObjectStore:
    """The process-wide in-memory bucket ``bucket``."""
    with _registry_lock:
        store = _buckets.get(bucket)
        if store is None:
            store = _buckets[bucket] = MemoryObjectStore(bucket)
        return store


def reset_memory() -> None:
    """Forget every in-memory bucket and entry (test isolation)."""
    global _entry_table
    with _registry_lock:
        _buckets.clear()
        _entry_table = MemoryEntryTable()


class MemoryLogStore(ExternalLogStore):
    """:class:`ExternalLogStore` whose entries live in a :class:`MemoryEntryTable`."""

    def __init__(self, uri: TableUri, objects: MemoryObjectStore | None = None,
                 entries: MemoryEntryTable | None = None, *, options: StorageOptions | None = None,
                 expire_seconds: int = DEFAULT_EXPIRE_SECONDS, stuck_grace_seconds: float | None = None,
                 timeout_seconds: float | None = None):
        super().__init__(uri, objects or memory_bucket(uri.bucket), options=options, expire_seconds=expire_seconds,
                         stuck_grace_seconds=stuck_grace_seconds, timeout_seconds=timeout_seconds)
        self.entries = entries or _entry_table

    @property
    def scope(self) -> tuple:
        # The entry table and bucket are objects of this process: tests build fresh ones for the same path.
        return id(self.entries), id(self.objects), self.table_path

    # Each hook checks the deadline first, as every DynamoDB request does (logstore/aws.py).
    def _put_entry(self, entry: CommitEntry) -> None:
        deadline.check()
        readonly.check("memory:PutItem")
        existing = self.entries.claim(entry)
        if existing is not None:
            raise ConditionFailed("memory:PutItem", retried=False, owner=existing)

    def _get_entry(self, version: int) -> CommitEntry | None:
        deadline.check()
        return self.entries.get(self.table_path, version)

    def _entries_from(self, version: int) -> list[CommitEntry]:
        deadline.check()
        return [e for e in self.entries.entries(self.table_path) if e.version >= version][:32]

    def _latest_entry(self) -> CommitEntry | None:
        deadline.check()
        return self.entries.latest(self.table_path)

    def _incomplete_entries(self) -> Iterator[CommitEntry]:
        deadline.check()
        return iter([e for e in self.entries.entries(self.table_path) if not e.complete])

    def _all_entries(self) -> Iterator[CommitEntry]:
        deadline.check()
        return iter(self.entries.entries(self.table_path))

    def _drop_entry(self, entry: CommitEntry) -> bool:
        deadline.check()
        readonly.check("memory:DeleteItem")
        return self.entries.drop(entry)

    def _complete_entry(self, version: int, expire_time: int) -> bool:
        deadline.check()
        readonly.check("memory:UpdateItem")
        before = self.entries.complete(self.table_path, version, expire_time)
        if before is not None and before.waiting_since is not None:
            self.waited_on.add(version)
        return before is not None

    def _mark_waiting(self, entry: CommitEntry, since: int) -> bool:
        deadline.check()
        readonly.check("memory:UpdateItem")
        return self.entries.mark_waiting(self.table_path, entry.version, since)

    def _mark_stuck(self, entry: CommitEntry, since: int) -> bool:
        deadline.check()
        readonly.check("memory:UpdateItem")
        return self.entries.mark_stuck(self.table_path, entry.version, entry.temp_path, since)

    def _abandon_entry(self, entry: CommitEntry) -> bool:
        deadline.check()
        readonly.check("memory:DeleteItem")
        return self.entries.abandon(self.table_path, entry.version, entry.temp_path, entry.stuck_since)

    # group commit: the in-memory table answers transactions (logstore/group.py)
    def _transactions_supported(self) -> bool:
        return True

    def _queue_put(self, item: QueuedAppend) -> None:
        deadline.check()
        readonly.check("memory:PutItem")
        if not self.entries.queue_put(item):
            raise ConditionFailed("memory:PutItem", retried=False)

    def _queue_items(self) -> list[QueuedAppend]:
        deadline.check()
        return self.entries.queue_items(self.table_path)

    def _queue_get(self, member_id: str) -> QueuedAppend | None:
        deadline.check()
        return self.entries.queue_get(self.table_path, member_id)

    def _queue_mark(self, member_id: str, version: int) -> bool:
        deadline.check()
        readonly.check("memory:UpdateItem")
        return self.entries.queue_mark(self.table_path, member_id, version)

    def _queue_delete(self, member_id: str, state: str) -> bool:
        deadline.check()
        readonly.check("memory:DeleteItem")
        return self.entries.queue_delete(self.table_path, member_id, state)

    def _queue_take_claimed(self, member_id: str) -> QueuedAppend | None:
        deadline.check()
        readonly.check("memory:DeleteItem")
        return self.entries.queue_take_claimed(self.table_path, member_id)

    def _put_entry_group(self, entry: CommitEntry, claim: GroupClaim) -> None:
        deadline.check()
        readonly.check("memory:TransactWriteItems")
        self.entries.transact(entry, claim)


register_scheme("memory", log_store=lambda uri, options: MemoryLogStore(uri, options=options),
                object_store=lambda uri, options: memory_bucket(uri.bucket))
