"""The entry store: the external store's items (DynamoDB's), one per won version, as the log store uses them.

An *entry* (:class:`CommitEntry`) is the claim on version N of one table: ``tablePath``, ``fileName``
(``{N:020d}.json``), ``tempPath`` (relative to ``_delta_log/``), ``complete`` and ``expireTime``, the
item layout of Delta's ``S3DynamoDBLogStore`` (reference protocol §2), plus attributes of ours that other
tools ignore (``stuckSince``, ``waitingSince``, ``commitSummary``).

:class:`EntryStore` is the interface a backend implements: the conditional writes and strongly consistent
reads the commit algorithm needs, nothing of the algorithm itself. As in Delta, where
``S3DynamoDBLogStore`` fills in ``putExternalEntry`` / ``getExternalEntry`` / ``getLatestExternalEntry``
of ``BaseExternalLogStore``, the hooks are the protected methods of a log store: the algorithm
(:class:`logstore.external.ExternalLogStore`, the modules beside it) calls them on ``self``, so a test can
cut or count any one of them. Implemented by :class:`logstore.dynamodb.DynamoDBLogStore` (items of a
DynamoDB table) and by the in-memory twin of the tests (``tests/support/memory.py``). Every hook is
scoped to the store's table (``self.table_path``); a refused condition is :class:`~logstore.errors.
ConditionFailed` (``owner``: the entry holding the version, when known), an unclear answer
:class:`~logstore.errors.AmbiguousError`. This module imports only the standard library and the
project's errors: a backend without boto3 loads it.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore.errors import CorruptLogError

if TYPE_CHECKING:
    from logstore.group import GroupClaim, QueuedAppend

#: Seconds an entry lives after it is marked complete (DynamoDB TTL on ``expireTime``).
#: Why a day and not seconds: writer B checks that N.json is absent (step 0), then puts the entry for N
#: (step 2). If A's complete entry for N expired in between, B's conditional put succeeds although A
#: already owns N, and B's commit is silently shadowed by A's N.json. The gap between B's steps 0 and 2
#: is milliseconds; a day of TTL makes that interleaving impossible in practice (delta-io/delta#1410).
#: We also check for it (see ``logstore/acknowledge.py``), but the delay is the first line of defence.
DEFAULT_EXPIRE_SECONDS = 86_400

_FILE_NAME = re.compile(r"^(\d{20})\.json$")


def file_name(version: int) -> str:
    return f"{version:020d}.json"


def parse_file_name(name: str, *, table: str) -> int:
    """Version of an entry's ``fileName``; CorruptLogError for anything but 20 digits + ``.json``."""
    match = _FILE_NAME.match(name)
    if match is None:
        raise CorruptLogError(
            f"table {table}: the external store holds an entry with fileName {name!r}, which is not a "
            f"20-digit version followed by '.json'; it was not written by Delta or dynacommit; delete that "
            f"item from the DynamoDB table"
        )
    return int(match.group(1))


@dataclass(frozen=True)
class CommitEntry:
    """One item of the external store: the claim on version ``version`` of ``table_path``."""

    table_path: str
    version: int
    temp_path: str          # relative to ``_delta_log/``
    complete: bool
    expire_time: int | None = None
    stuck_since: int | None = None  # epoch seconds; set when its content was found lost (see above)
    waiting_since: int | None = None  # epoch seconds; set by a writer that lost this version (see _note_waiting)
    summary: str | None = None  # ours: what the commit is, in short, for a writer that lost the version (below)

    @property
    def file_name(self) -> str:
        return file_name(self.version)


SUMMARY_MAX_BYTES = 1024
"""The longest ``summary`` an entry carries; a longer one is left out (the loser then reads ``N.json``)."""


class EntryStore(abc.ABC):
    """The external store of one table's entries: what a backend implements (see the module docstring).

    Required: the ten entry hooks. Optional: ``_entries_from`` (a default reads one entry) and the group
    commit hooks (a store whose ``_transactions_supported`` stays False never gets the others called).
    """

    table_path: str
    #: Versions whose entry this store marked complete and found marked by a writer that lost them.
    waited_on: set[int]

    @abc.abstractmethod
    def _put_entry(self, entry: CommitEntry) -> None:
        """Create ``entry`` if no entry for its version exists. Raise ConditionFailed if one does,
        AmbiguousError if the outcome is unknown."""

    @abc.abstractmethod
    def _get_entry(self, version: int) -> CommitEntry | None:
        """The entry for ``version`` (strongly consistent read), or None."""

    def _entries_from(self, version: int) -> list[CommitEntry]:
        """The entries of ``version`` and after it, oldest first (a few: a lost writer's view of who won
        since it looked; one Query). The default reads ``version``'s alone."""
        entry = self._get_entry(version)
        return [] if entry is None else [entry]

    @abc.abstractmethod
    def _latest_entry(self) -> CommitEntry | None:
        """The entry with the highest version for this table (strongly consistent), or None."""

    @abc.abstractmethod
    def _incomplete_entries(self) -> Iterator[CommitEntry]:
        """Every incomplete entry of this table, oldest first (a full read of the table's entries: for
        ``recover_all``, never for a commit or a read)."""

    @abc.abstractmethod
    def _all_entries(self) -> Iterator[CommitEntry]:
        """Every entry of this table, oldest first (a full read of the table's entries: for the table's
        administration, logstore/entries.py, never for a commit or a read)."""

    @abc.abstractmethod
    def _drop_entry(self, entry: CommitEntry) -> bool:
        """Delete the entry if it is still as read (same ``tempPath`` and ``complete``); False (nothing
        changed) otherwise. Only for a table whose log is gone (``dynacommit drop-table``)."""

    @abc.abstractmethod
    def _complete_entry(self, version: int, expire_time: int) -> bool:
        """Set complete and ``expire_time`` (and drop ``stuck_since`` and ``waiting_since``) if the entry is
        still incomplete; False if it was complete or is gone. Never creates an entry. An entry that had
        ``waiting_since`` adds its version to ``self.waited_on``."""

    @abc.abstractmethod
    def _mark_waiting(self, entry: CommitEntry, since: int) -> bool:
        """Set ``waiting_since=since`` on the entry if it is still incomplete and has none; False otherwise.
        ``_complete_entry`` removes it, and reports it in ``self.waited_on``."""

    @abc.abstractmethod
    def _mark_stuck(self, entry: CommitEntry, since: int) -> bool:
        """Set ``stuck_since=since`` on the entry if it is still incomplete, still names ``entry.temp_path``
        and has no ``stuck_since``; False (nothing changed) otherwise."""

    @abc.abstractmethod
    def _abandon_entry(self, entry: CommitEntry) -> bool:
        """Delete the entry if it is still incomplete, still names ``entry.temp_path`` and still has
        ``stuck_since == entry.stuck_since``; False (nothing changed) otherwise."""

    # ----------------------------------------------------------------- group commit (logstore/group.py)
    def _transactions_supported(self) -> bool:
        """Whether the external store answers transactions (a store without them keeps this default)."""
        return False

    def _queue_put(self, item: QueuedAppend) -> None:
        """Create the queued item (its id is new). Raise like ``_put_entry`` does."""
        raise NotImplementedError

    def _queue_items(self) -> list[QueuedAppend]:
        """The table's queued items (waiting and claimed), oldest first (one strongly consistent Query)."""
        raise NotImplementedError

    def _queue_get(self, member_id: str) -> QueuedAppend | None:
        raise NotImplementedError

    def _queue_mark(self, member_id: str, version: int) -> bool:
        """Set ``lead_after=version`` on the item if it is waiting; False (nothing changed) otherwise."""
        raise NotImplementedError

    def _queue_delete(self, member_id: str, state: str) -> bool:
        """Delete the item if it is in ``state``; False (nothing changed) otherwise."""
        raise NotImplementedError

    def _queue_take_claimed(self, member_id: str) -> QueuedAppend | None:
        """The item as it is, deleted when it is claimed (one conditional delete that returns the item either
        way); None when there is none."""
        raise NotImplementedError

    def _put_entry_group(self, entry: CommitEntry, claim: GroupClaim) -> None:
        """``_put_entry`` and the claims of ``claim``, in one transaction. Raise ConditionFailed (with the
        owner) when N is taken, GroupChanged when only items could not be claimed, AmbiguousError when the
        outcome is unknown."""
        raise NotImplementedError
