"""Recovery: finishing an entry whose writer did not (steps 3 and 4 of ``logstore/external.py`` run by anyone).

Recovery publishes through the one publish path (``logstore/publish.py``) that the writer uses; an entry
whose content is lost is handed to ``logstore/stuck.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from logstore import deadline, retry
from logstore.base import RecoveryOutcome
from logstore.entry_store import CommitEntry
from logstore.errors import AccessDeniedError, CorruptLogError, DeadlineExceededError, ObjectNotFound, StorageError
from logstore.publish import RECOVERY, Placement
from logstore.steps import PUBLISHED, RECOVERY_ATTEMPTS, operation

log = logging.getLogger(__name__)

#: (scope, version) of the entries this process was refused to finish, each warned about once.
_DENIED_WARNED: set[tuple] = set()
_DENIED_LOCK = threading.Lock()


class Recovery:
    """Finishing incomplete entries: ``recover``, ``recover_all`` and what readers and writers run on the entries they pass."""

    @operation("recover")
    def recover(self, version: int | None = None) -> RecoveryOutcome:
        """Finish the entry (default: the newest); a stuck one is marked, or abandoned once marked longer
        than the grace period (see the module docstring)."""
        if version is not None:
            self._check_version(version)
        entry = self._latest_entry() if version is None else self._get_entry(version)
        if entry is None:
            return RecoveryOutcome.NOTHING_TO_RECOVER
        return self._recover_entry(entry, abandon=True)

    @operation("recover")
    def recover_all(self) -> list[tuple[int, RecoveryOutcome]]:
        """Finish every incomplete entry of the table, oldest first (``recover`` on each: a stuck one is
        marked, or abandoned once marked longer than the grace period); what was done to each, by version.
        Writers and readers finish the entries they pass (the newest, and N-1 before writing N), so only
        an entry whose writer died and that nobody passed since (its table idle, or an UpdateItem lost in a
        process that then ended) is found here; ``dynacommit recover`` runs it."""
        return [(entry.version, self._recover_entry(entry, abandon=True)) for entry in list(self._incomplete_entries())]

    def _finish_as_reader(self, entry: CommitEntry) -> RecoveryOutcome | None:
        """Finish an incomplete entry a reader passes, as anyone does; None when this process may not (its
        IAM policy lacks ``s3:PutObject`` to write ``N.json``, or ``dynamodb:UpdateItem`` to mark the entry
        complete): a reader then reads what is published, says so once per process and version, and leaves
        the entry to a writer or ``dynacommit recover``.

        An entry this process won itself, whose finishing steps are still on the pool (``write`` returned
        before its UpdateItem answered, or a durable acknowledgement still publishing), is waited for first,
        within the operation's deadline: it is complete a moment later, and finishing it again would only
        repeat those requests (or, in a dry run, warn of a commit nobody left unfinished). When that failed
        or does not end in time, the entry is finished as anyone's."""
        if PUBLISHED.completed(self.scope, entry.version, timeout=deadline.remaining(deadline.CLEANUP_SECONDS)):
            return RecoveryOutcome.ALREADY_COMPLETE
        try:
            return self._recover_entry(entry, abandon=False)
        except AccessDeniedError as exc:
            key = (self.scope, entry.version)
            with _DENIED_LOCK:
                first = key not in _DENIED_WARNED
                _DENIED_WARNED.add(key)
            if first:
                log.warning(
                    "table %s: version %d was won by a writer that did not finish it, and this process may not "
                    "finish it (%s). Finishing a commit writes _delta_log/%s (s3:PutObject) and marks its "
                    "DynamoDB entry complete (dynamodb:UpdateItem): this reader reads what is published and "
                    "leaves it to a writer or `dynacommit recover`", self.table_path, entry.version, exc,
                    entry.file_name)
            return None

    def _recover_entry(self, entry: CommitEntry, *, abandon: bool, body: bytes | None = None,
                       marked: Callable[[], None] | None = None) -> RecoveryOutcome:
        """Finish ``entry``; a stuck one is marked, and with ``abandon`` (writers, ``recover``) abandoned
        once its grace period is over. ``body``: the temp file's bytes, when the caller wrote it (a durable
        acknowledgement); ``marked``: see ``_recover_once``."""
        if entry.complete:
            return RecoveryOutcome.ALREADY_COMPLETE
        try:
            return retry.retry(lambda: self._recover_once(entry, body, marked), policy=retry.RECOVER,
                               retryable=_worth_retrying, to_deadline=True,
                               what=f"finishing the entry for version {entry.version} of {self.table_path}")
        except _ContentLost:
            return self._settle_stuck(entry, abandon=abandon)
        except (StorageError, OSError) as exc:
            if not _worth_retrying(exc):
                raise  # corrupt, or out of time
            last = exc
        raise StorageError(
            f"could not finish the incomplete entry for version {entry.version} of table {self.table_path} "
            f"after {RECOVERY_ATTEMPTS} attempts: {last}; retry later or run `dynacommit recover {self.table_path} "
            f"--execute`",
            operation="recover", retryable=True,
        ) from last

    def _recover_once(self, entry: CommitEntry, written: bytes | None = None,
                      marked: Callable[[], None] | None = None) -> RecoveryOutcome:
        """Copy the temp file to N.json if N.json is missing, mark complete, drop the temp file. Raises
        _ContentLost when both files are gone. ``written``: the temp file's bytes, known to the writer that
        won the entry and put them there (a durable acknowledgement): neither file is looked at first, the
        conditional PUT of N.json says whether it exists. ``marked`` is called once the entry is complete
        with N.json holding the temp file's bytes, before the temp file's DELETE.

        The entry is marked before the temp file goes, as Delta's recovery marks it right after the copy:
        the DELETE then only tidies (nobody needs a temp file once N.json exists, and nobody finishes a
        complete entry, so delta-rs <= 1.6.0 never meets the pair); when marking fails (no
        ``dynamodb:UpdateItem``, throttling) the temp file is deleted before the error goes on, so an
        incomplete entry is never left with both files. A process that dies between the two leaves an
        orphan temp file for the sweep.

        When N.json exists and the temp file too, they must hold the same bytes for the temp file to be
        dropped: other bytes mean a writer that bypassed DynamoDB (deltalake >= 1.6.1, any conditional PUT of
        N.json) took the version before the entry's writer published. The temp file is then kept: it is how
        that writer, if it still runs, learns that it lost (delta-rs <= 1.6.0 takes a temp file gone for its
        commit moved into place and reports success; with the file there its copy fails and it commits at the
        next version), and it is all that is left of that commit (SUPERSEDED, warned about)."""
        final_key = self.commit_key(entry.version)
        temp_key = self.temp_key(entry.temp_path)  # a malformed tempPath is CorruptLogError before any request
        outcome = RecoveryOutcome.COMPLETED
        if written is not None:
            published, body = False, written
        else:
            published = self.objects.head(final_key) is not None
            try:
                body = self.objects.get(temp_key)
            except ObjectNotFound:
                body = None
        if body is None:
            # delta-rs moves its temp file (copy, then delete): it may have been moved into place meanwhile.
            if not published and self.objects.head(final_key) is None:
                raise _ContentLost(entry)
        else:
            placement = self._publish_final(entry.version, body, RECOVERY, present=published)
            if placement is Placement.WRITTEN:
                outcome = RecoveryOutcome.COPIED_AND_COMPLETED
            elif placement is Placement.OTHER:
                self._mark_complete(entry.version)
                self._warn_superseded(entry)
                return RecoveryOutcome.SUPERSEDED
        newly_marked = self._finish_in_order(entry, body is not None, marked)
        if not newly_marked and outcome is RecoveryOutcome.COMPLETED:
            outcome = RecoveryOutcome.ALREADY_COMPLETE
        return outcome

    def _warn_superseded(self, entry: CommitEntry) -> None:
        key = f"superseded:{entry.version}:{entry.temp_path}"
        if key in self._warned:
            return
        self._warned.add(key)
        log.warning(
            "table %s: version %d was won in DynamoDB (entry %s, temp file _delta_log/%s) but %s holds another "
            "writer's commit, written without DynamoDB (deltalake >= 1.6.1 or another conditional-PUT writer): "
            "the entry's commit is not in the log. A dynacommit or deltalake <= 1.6.0 writer that is still running "
            "retries it at the next version; a writer that already reported success (Delta's S3DynamoDBLogStore "
            "does at its DynamoDB put) has lost it: its actions are in the kept temp file. Writers that bypass "
            "DynamoDB must not share a table with delta-spark's S3DynamoDBLogStore (docs/operations.md)",
            self.table_path, entry.version, entry.file_name, entry.temp_path, entry.file_name)


def _worth_retrying(exc: Exception) -> bool:
    """Whether finishing an entry is worth another try after ``exc``: a storage failure, neither a corrupt
    log nor the deadline."""
    return (isinstance(exc, (StorageError, OSError))
            and not isinstance(exc, (CorruptLogError, DeadlineExceededError)))


class _ContentLost(Exception):
    """Raised by ``_recover_once`` for an entry whose temp file and N.json are both gone (stuck)."""

    def __init__(self, entry: CommitEntry):
        super().__init__(f"content of {entry.file_name} lost")
        self.entry = entry

