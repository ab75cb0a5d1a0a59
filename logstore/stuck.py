"""Stuck entries: an incomplete entry whose content is lost is marked, then abandoned after its grace period.

The two steps (MARK, ABANDON) and why abandoning cannot lose an acknowledged commit are written in the
docstring of ``logstore/external.py``.
"""

from __future__ import annotations

import logging
import dataclasses
import time

from logstore import deadline, failpoints
from logstore.base import RecoveryOutcome
from logstore.entry_store import CommitEntry
from logstore.steps import ABANDON_AFTER_MARK_STUCK, ABANDON_BEFORE_DELETE, RESOLVE_ATTEMPTS

log = logging.getLogger(__name__)


class StuckEntries:
    """Marking and abandoning stuck entries (steps a and b of the module docstring of ``logstore/external.py``)."""

    def _content_lost(self, entry: CommitEntry) -> bool:
        """Whether neither the entry's temp file nor N.json exists, looked at in that order (see the module
        docstring: a protocol participant creates N.json before it deletes a temp file)."""
        if self.objects.head(self.temp_key(entry.temp_path)) is not None:
            return False
        return self.objects.head(self.commit_key(entry.version)) is None

    def _settle_stuck(self, entry: CommitEntry, *, abandon: bool, wait: bool = False) -> RecoveryOutcome:
        """Step (a) and, with ``abandon``, step (b) of the module docstring for an entry found stuck.

        Returns STUCK_MARKED (marked now or before, still within its grace period or not ours to abandon),
        ABANDONED (deleted, by us or by a concurrent process: N is free), or what recovery did when the
        entry turned out not to be stuck any more (its original writer published meanwhile). With ``wait``
        (a writer that needs N) the rest of the grace period is slept through first.
        """
        for _ in range(RESOLVE_ATTEMPTS):
            if entry.stuck_since is None:
                since = int(time.time())
                if not self._mark_stuck(entry, since):
                    current = self._get_entry(entry.version)
                    if current is None:
                        return RecoveryOutcome.ABANDONED
                    if current.complete or current.temp_path != entry.temp_path:
                        return RecoveryOutcome.ALREADY_COMPLETE if current.complete else \
                            self._recover_entry(current, abandon=abandon)
                    entry = current  # marked by somebody else meanwhile
                    continue
                entry = dataclasses.replace(entry, stuck_since=since)
                failpoints.hit(ABANDON_AFTER_MARK_STUCK)
                self._warn_stuck(entry, RecoveryOutcome.STUCK_MARKED)
            if not abandon:
                return RecoveryOutcome.STUCK_MARKED
            remaining = entry.stuck_since + self.stuck_grace_seconds - time.time()
            if remaining > 0:
                if not wait:
                    return RecoveryOutcome.STUCK_MARKED
                if remaining >= deadline.remaining():
                    found = deadline.current()
                    assert found is not None  # every public operation runs under one
                    raise found.error(
                        f"{found.operation}: version {entry.version} is held by an entry whose content is lost "
                        f"(stuck); it may be abandoned in {remaining:.0f} s, after this operation's deadline "
                        f"of {found.seconds:g} s: nothing was written; retry after that, or run "
                        f"`dynacommit recover {self.table_path} --execute` then")
                deadline.sleep(remaining)
            if not self._content_lost(entry):
                return self._recover_entry(entry, abandon=False)  # its writer published after all
            failpoints.hit(ABANDON_BEFORE_DELETE)
            if self._abandon_entry(entry):
                log.warning("table %s: abandoned the stuck entry for version %d (tempPath %r, stuck since %d); "
                            "version %d can be written again", self.table_path, entry.version, entry.temp_path,
                            entry.stuck_since, entry.version)
                return RecoveryOutcome.ABANDONED
            current = self._get_entry(entry.version)
            if current is None:
                return RecoveryOutcome.ABANDONED
            if current.complete or current.temp_path != entry.temp_path or current.stuck_since is None:
                return self._recover_entry(current, abandon=False)
            entry = current
        return RecoveryOutcome.STUCK_MARKED

    def _stuck_message(self, entry: CommitEntry, outcome: RecoveryOutcome) -> str:
        if outcome is RecoveryOutcome.ABANDONED:
            return (f"version {entry.version} was won but its content was lost (temp file and "
                    f"{entry.file_name} both gone); its entry has been abandoned, so version {entry.version} "
                    f"does not exist and can be written again")
        return (f"version {entry.version} of table {self.table_path} was won (entry {entry.file_name}, tempPath "
                f"{entry.temp_path!r}) but never written out, and its temp file is gone: its content is lost. "
                f"The entry is marked stuck and will be abandoned {self.stuck_grace_seconds:g} s after it was "
                f"first found (by the next writer of version {entry.version} or `dynacommit recover`); "
                f"version {entry.version} can then be written again")

    def _warn_stuck(self, entry: CommitEntry, outcome: RecoveryOutcome) -> None:
        key = f"stuck:{entry.version}:{entry.temp_path}"
        if key not in self._warned:
            self._warned.add(key)
            log.warning("table %s: %s; readers see version %d as the latest until then", self.table_path,
                        self._stuck_message(entry, outcome), entry.version - 1)
