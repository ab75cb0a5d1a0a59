"""The log store contract: numbered log entries of one table, written at most once each.

A :class:`LogStore` owns the bytes of log entry ``N`` (``_delta_log/{N:020d}.json``) of one table and
promises, to every process on every cluster that uses the same DynamoDB table and spells the table URI
the same way:

1. **Mutual exclusion.** For each version N, exactly one ``write(N, ...)`` succeeds; every other
   concurrent or later ``write(N, ...)`` raises :class:`~logstore.errors.VersionExistsError`.
2. **Durability at the commit point.** Once ``write`` returns, the entry is permanent and every later
   ``read(N)`` returns exactly its bytes, even if the writer dies right after returning.
   Whether ``N.json`` is written before ``write`` returns is the acknowledgement's choice
   (``DYNACOMMIT_COMMIT_ACK``): yes with ``published`` (the default), not necessarily with ``durable``,
   where readers that consult the external store finish the entry as in 3.
3. **Atomic visibility.** A reader sees a whole entry or none of it; a won entry that its writer did not
   finish is finished by whoever finds it (``read``, ``latest_version``, the next ``write``), so no
   entry stays half-done.
3a. **Never stuck.** A won entry whose content was lost outside the protocol (its temp file deleted before
   ``N.json`` was written) blocks nobody: readers stop before it, and the next writer of N or ``recover``
   abandons it after a grace period, without ever losing an acknowledged commit (the argument is in
   ``logstore/external.py``).
4. **Contiguity.** Version N is written only after N-1 exists and is complete; ``latest_version`` is
   the newest version in the log (never older than what the external store's newest entry says), and
   every version from the first to it can be read.
5. **Consistent listing.** ``list_from(v)`` lists every complete entry >= v, in order.

Besides the numbered entries, ``_delta_log/`` holds files the store does not coordinate: checkpoints and
the ``_last_checkpoint`` hint. :meth:`LogStore.read_file`, :meth:`LogStore.write_file` and
:meth:`LogStore.list_files` give the table layer those, so it never needs to know where or how the log is
stored.

An answer the store cannot interpret (a timeout at the commit point) is resolved by reading back;
when that also fails, ``write`` raises :class:`~logstore.errors.CommitStateUnknownError` and leaves
everything in place.

Every operation finishes within its deadline (``DYNACOMMIT_TIMEOUT_SECONDS``, default 120 s, or an
enclosing operation's if that ends sooner; see ``logstore/deadline.py``): past it, an operation raises
:class:`~logstore.errors.DeadlineExceededError` with nothing of it visible, or, for a commit whose put got
no clear answer, :class:`~logstore.errors.CommitStateUnknownError`; a commit past its commit point stands.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass


class RecoveryOutcome(enum.Enum):
    """What :meth:`LogStore.recover` found and did."""

    NOTHING_TO_RECOVER = "nothing_to_recover"      # no entry in the external store for this version/table
    ALREADY_COMPLETE = "already_complete"          # the entry was complete
    COMPLETED = "completed"                        # N.json existed; we only marked the entry complete
    COPIED_AND_COMPLETED = "copied_and_completed"  # we wrote N.json from the temp file, then marked it
    STUCK_MARKED = "stuck_marked"                  # its content is lost (temp file and N.json gone): marked
    #                                                stuck; it is abandoned after the grace period
    ABANDONED = "abandoned"                        # a stuck entry was deleted: the version is free again
    SUPERSEDED = "superseded"                      # N.json holds another writer's commit (one that bypassed
    #                                                DynamoDB): the entry's own commit is not in the log; its
    #                                                temp file is kept, the entry marked complete

    @property
    def description(self) -> str:
        """One line for people (``dynacommit recover`` prints it)."""
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    RecoveryOutcome.NOTHING_TO_RECOVER: "nothing to recover: the DynamoDB table holds no entry for it",
    RecoveryOutcome.ALREADY_COMPLETE: "the entry was already complete",
    RecoveryOutcome.COMPLETED: "the commit file existed; marked the entry complete",
    RecoveryOutcome.COPIED_AND_COMPLETED: "wrote the commit file from its temp file and marked the entry complete",
    RecoveryOutcome.SUPERSEDED: (
        "the commit file holds another writer's commit (one that bypassed DynamoDB), not the one the entry's "
        "temp file holds: that writer won the version, the entry's own commit is not in the log (a writer of "
        "ours then retries at the next version; see docs/operations.md for which other writers may share a "
        "table); the temp file is kept and the entry marked complete"),
    RecoveryOutcome.STUCK_MARKED: (
        "the entry was won but its content is lost (temp file and commit file both gone); it is marked stuck "
        "and will be abandoned once its grace period (DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS) is over: run "
        "`dynacommit recover URI --execute` again then, or let the next writer do it"),
    RecoveryOutcome.ABANDONED: (
        "the stuck entry (content lost) was deleted; the version is free and will be written by the next "
        "commit"),
}


@dataclass(frozen=True)
class LogFile:
    """A file of ``_delta_log/``: its name there (``00000000000000000010.checkpoint.parquet``), size in
    bytes and last modification time (epoch milliseconds)."""

    name: str
    size: int
    last_modified_ms: int


class LogStore(abc.ABC):
    """Read and write the numbered log entries of one table (see the module docstring for guarantees)."""

    #: The table URI this store serves, as given (scheme kept, no trailing slash).
    table_path: str

    @abc.abstractmethod
    def read(self, version: int) -> bytes:
        """The bytes of entry ``version``. Finishes the entry first if it was won but not written out.

        Raises VersionNotFoundError when no such entry exists.
        """

    keeps_temp: bool = False
    """Whether ``write`` takes ``summary``, ``keep_temp`` and ``temp`` (logstore/external.py): a lost race
    then says who won (``VersionExistsError.winner``) and hands back its temp file for the next attempt."""

    @abc.abstractmethod
    def write(self, version: int, body: bytes, *, overwrite: bool = False,
              before_commit: Callable[[], object] | None = None) -> None:
        """Write entry ``version`` if nobody has; raise VersionExistsError if somebody has.

        ``overwrite=True`` writes ``_delta_log/{version:020d}.json`` directly, without coordination (as
        Delta's log stores do for it); it exists for repair tools and is never used by commits.
        ``before_commit`` is called once the write's own checks and preparation are done, right before
        the commit point; what it raises fails the write with nothing committed (a job commit waits there
        for its data files, whose uploads run beside the preparation).
        """

    @abc.abstractmethod
    def list_from(self, version: int) -> Iterator[int]:
        """Versions of the entries >= ``version`` that exist, ascending."""

    @abc.abstractmethod
    def latest_version(self, *, start: int = 0) -> int:
        """The newest version, finishing that entry if needed: one external-store query for the newest
        entry (a lower bound) and one listing of the log after it, whatever the history's length.

        ``start`` is a version known to exist (a checkpoint's), from which the log is listed when the
        external store's entries are older (they expire a day after completion). Versions that exist but
        have no entry (a writer that bypasses the external store) are counted, and warned about.
        Raises TableNotFoundError when the table has no entries at all.
        """

    def wait_published(self, version: int, timeout: float | None = None) -> bool:
        """Whether ``{version:020d}.json``, a commit this process's ``write`` acknowledged, is in the log with
        its bytes (waiting at most ``timeout`` s). True here: ``write`` returns once it is. A store that may
        acknowledge at the commit point, before the file is written (``DYNACOMMIT_COMMIT_ACK=durable``),
        answers for its newest commit."""
        return True

    @abc.abstractmethod
    def recover(self, version: int | None = None) -> RecoveryOutcome:
        """Finish entry ``version`` (default: the newest) if it was won but not finished; mark a stuck one,
        or abandon it once marked longer than the grace period. Idempotent and safe to run in any number of
        processes at once."""

    @abc.abstractmethod
    def read_file(self, name: str) -> bytes | None:
        """The bytes of ``_delta_log/{name}`` (a checkpoint part, ``_last_checkpoint``, a V2 checkpoint's
        ``_sidecars/{file}``), or None if absent."""

    @abc.abstractmethod
    def read_file_tagged(self, name: str) -> tuple[bytes, str] | None:
        """The bytes of ``_delta_log/{name}`` and a tag naming this content (an ETag), or None if absent."""

    @abc.abstractmethod
    def write_file(self, name: str, body: bytes, *, if_absent: bool = False, if_match: str | None = None) -> bool:
        """Write ``_delta_log/{name}``, replacing it unless ``if_absent``; returns False when ``if_absent``
        and it existed, or when ``if_match`` (a tag from :meth:`read_file_tagged`) no longer names its
        content (changed or deleted meanwhile: nothing written). Not for commits: those go through
        :meth:`write`."""

    def write_file_tagged(self, name: str, body: bytes, *, if_absent: bool = False,
                          if_match: str | None = None) -> tuple[bool, str | None]:
        """:meth:`write_file`, and the tag of the bytes written (as :meth:`read_file_tagged` would name them,
        for a later ``if_match``), or None when nothing was written or the store names none. A writer that
        remembers the tag of what it wrote can replace it later without reading it first."""
        return self.write_file(name, body, if_absent=if_absent, if_match=if_match), None

    @abc.abstractmethod
    def delete_files(self, names: list[str]) -> None:
        """Delete ``_delta_log/{name}`` for each name (log cleanup of expired commits and checkpoints; the
        caller decides which are no longer needed). Missing files are fine."""

    @abc.abstractmethod
    def list_files(self, *, start_after: str = "") -> Iterator[LogFile]:
        """The files of ``_delta_log/`` whose names sort after ``start_after``, in name order (temp files
        of unfinished commits excluded)."""

    @abc.abstractmethod
    def stat_file(self, name: str) -> LogFile | None:
        """Size and modification time of ``_delta_log/{name}``, or None if absent."""

    @abc.abstractmethod
    def location(self, name: str = "") -> str:
        """The URI of ``_delta_log/{name}``, for messages."""
