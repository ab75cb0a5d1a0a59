"""After the commit point: when ``write`` returns (``DYNACOMMIT_COMMIT_ACK``), and what the writer reports when
publishing fails.

With ``published`` the writer runs steps 3 and 4 itself through the one publish path
(``logstore/publish.py``); with ``durable`` they are recovery (``logstore/recovery.py``) of the entry just
won, on the pool. Either way ``N.json`` is written by the same function.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, wait

from logstore import deadline, pool
from logstore.base import RecoveryOutcome
from logstore.entry_store import CommitEntry, file_name
from logstore.errors import CommitStateUnknownError, DynacommitError, VersionExistsError
from logstore.publish import WRITER, Placement, PutFailed
from logstore.steps import PUBLISHED, STUCK_OUTCOMES, resolve

log = logging.getLogger(__name__)


_LATER: set[Future] = set()  # the steps of ``finish_later`` still running


def _finish_later_at_exit() -> None:
    """At exit (before the other finishing steps get the cleanup deadline, ``logstore.steps``): wait for the
    steps of ``finish_later`` until they end. Each runs under the store's deadline, so this is bounded; a
    daemon thread left inside pyarrow while the interpreter finalizes could abort the process."""
    wait(_LATER.copy())


atexit.register(_finish_later_at_exit)


class Acknowledgement:
    """What ``write`` does after the commit point, and what it waits for."""

    def _publish(self, version: int, temp_path: str, body: bytes) -> None:
        """Steps 3 and 4 (with the temp file dropped in between). The commit is durable already: failures
        here never fail it, except that success is reported only when N.json holds our bytes or our temp
        file is still there (see the module docstring): N.json holding other bytes (a writer that bypassed
        the external store, or one whose stuck entry was abandoned and who published late) fails the write;
        a state we cannot see is CommitStateUnknownError."""
        # Whatever fails from here on (S3, expired credentials, a refused request) must not make the caller
        # believe the commit failed while it is durable, or a retry without an app id writes it twice.
        try:
            placement = self._publish_final(version, body, WRITER)
        except PutFailed as failed:
            with deadline.cleanup(f"checking commit {version} of {self.table_path}"):
                self._acknowledge_unpublished(version, temp_path, body, failed.cause)
            return
        if placement is Placement.OTHER:
            self._discard_temp(temp_path)
            self._mark_complete_quietly(version)
            raise self._not_ours(version)
        # N.json holds our bytes: every reader sees the commit. The temp file and the entry's "incomplete"
        # are done with: both go out at once on the pool, and the write returns (step 4).
        self._finish_beside(version, temp_path)

    def _publish_later(self, entry: CommitEntry, body: bytes) -> None:
        """The durable acknowledgement (see the module docstring): the entry just won is finished by recovery
        on the pool, and recorded as this process's newest commit, so that its next write waits for it."""
        completed: Future = Future()  # resolved once the entry is complete, before the temp file's DELETE
        publishing = pool.submit(self._finish_acknowledged, entry, body, completed)
        PUBLISHED.record(self.scope, entry.version, completed)
        PUBLISHED.finishing(self.scope, [publishing])

    def _finish_acknowledged(self, entry: CommitEntry, body: bytes, completed: Future) -> bool:
        """Recovery of an entry this process won and acknowledged, under a deadline of its own (the write's
        may be spent); whether ``N.json`` holds our bytes and the entry is complete now. ``completed`` gets
        that answer as soon as it is known: the process's next write waits for it, not for the DELETE of
        the temp file that follows. A failure only logs: the entry stays incomplete, and the next writer or
        reader (this process's next write first) finishes it."""
        try:
            done = self._publish_acknowledged(entry, body, lambda: resolve(completed, True))
        except BaseException:  # a simulated crash: the next write must not take the entry for done
            resolve(completed, False)
            raise
        resolve(completed, done)
        return done

    def _publish_acknowledged(self, entry: CommitEntry, body: bytes, marked: Callable[[], None]) -> bool:
        with deadline.cleanup(f"publishing commit {entry.version} of {self.table_path}", self.timeout_seconds):
            try:
                outcome = self._recover_entry(entry, abandon=False, body=body, marked=marked)
            except (DynacommitError, OSError) as exc:
                log.warning("commit %s v%d is durable (acknowledged), but writing %s failed (%s); the next writer "
                            "or reader finishes it", self.table_path, entry.version, entry.file_name, exc)
                return False
        if outcome is RecoveryOutcome.SUPERSEDED:
            log.error("table %s: commit %d was acknowledged at its DynamoDB entry (DYNACOMMIT_COMMIT_ACK=durable) "
                      "but a writer that bypasses DynamoDB wrote %s first: the acknowledged commit is not in the "
                      "log; its actions are kept in _delta_log/%s. Make every writer of this table use the "
                      "same DynamoDB table", self.table_path, entry.version, entry.file_name, entry.temp_path)
            return False
        if entry.version in self.waited_on:
            PUBLISHED.note_waited(self.scope, entry.version)
        return outcome not in STUCK_OUTCOMES

    def wait_published(self, version: int, timeout: float | None = None) -> bool:
        """Whether ``N.json`` of ``version``, a commit this process's ``write`` acknowledged, holds its bytes:
        at once with the ``published`` acknowledgement; with ``durable``, once the background publish of
        its newest commit ended (waiting at most ``timeout`` s). False when that failed, is still running,
        or ``version`` is no longer this process's newest commit to the table (the caller then does without:
        the table layer skips a checkpoint, which must never describe a version before ``N.json`` is known
        to hold it)."""
        if self.options.commit_ack != "durable":
            return True
        return PUBLISHED.completed(self.scope, version, timeout=timeout)

    def _note_waiting(self, owner: CommitEntry) -> None:
        """Mark the entry that won the version this writer lost: its writer learns, when it marks the entry
        complete, that other writers wait for the table (``waited_recently``), though it never lost a race
        itself. Best effort, with a cleanup deadline of its own."""
        try:
            with deadline.cleanup(f"marking version {owner.version} of {self.table_path} as waited for"):
                self._mark_waiting(owner, int(time.time()))
        except (DynacommitError, OSError) as exc:
            log.debug("could not mark version %d of %s as waited for: %s", owner.version, self.table_path, exc)

    def waited_recently(self, timeout: float) -> bool:
        """Whether a writer lost a race to this process's newest commit to the table (its entry was found
        marked when this process marked it complete), waiting up to ``timeout`` s for that UpdateItem."""
        version = PUBLISHED.newest(self.scope)
        if version is None or not PUBLISHED.completed(self.scope, version, timeout=timeout):
            return False
        return version in self.waited_on or PUBLISHED.waited(self.scope, version)

    def finish_later(self, step: Callable[[], object], what: str) -> None:
        """Run ``step`` on the pool after the commit returned, as a finishing step of this table's commits
        (``what`` names it): under a deadline of its own (the store's timeout), waited for by
        :meth:`wait_finished`, by a Spark job commit, between test cases, and at exit until it ends (a
        process must not finalize under it). For work the commit does not need to be durable or acknowledged,
        which may send requests of its own on the pool and wait for them: a checkpoint
        (``table.log.outcome.checkpoint_later``). It runs on the second pool (``pool.submit_later``)."""

        def run() -> None:
            with deadline.cleanup(what, self.timeout_seconds):
                step()

        future = pool.submit_later(run)
        _LATER.add(future)
        future.add_done_callback(_LATER.discard)
        PUBLISHED.finishing(self.scope, [future])

    def wait_finished(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) until the finishing steps (step 4) of this process's commits to
        this table have ended; whether they have. Never needed for correctness; for processes about to end
        without exit handlers (a Spark job commit), for tests that count requests, and for tools that want
        the entries marked complete before they look at the external store."""
        return PUBLISHED.wait(self.scope, timeout)

    def _acknowledge_unpublished(self, version: int, temp_path: str, body: bytes, cause: Exception) -> None:
        """Our PUT of N.json failed after the commit point. The commit stands if our temp file is still there
        (anyone finishes it from there) or N.json holds our bytes; otherwise its fate is unknown."""
        try:
            temp_there = self.objects.head(self.temp_key(temp_path)) is not None
            final_there = temp_there or self.objects.head(self.commit_key(version)) is not None
            same = final_there and not temp_there and self._final_is(version, body)
        except (DynacommitError, OSError) as exc:
            raise CommitStateUnknownError(
                self.table_path, version,
                f"version {version} of table {self.table_path} was won, but writing {file_name(version)} "
                f"failed ({cause}) and checking what is there failed too ({exc}): the commit is durable if its "
                f"temp file _delta_log/{temp_path} is still there; nothing was cleaned up; read the table's "
                f"history to see whether the commit landed",
            ) from cause
        if temp_there or same:
            log.warning("commit %s v%d is durable, but writing %s failed (%s); the next reader finishes it",
                        self.table_path, version, file_name(version), cause)
            return
        if final_there:
            self._mark_complete_quietly(version)
            raise self._not_ours(version)
        raise CommitStateUnknownError(
            self.table_path, version,
            f"version {version} of table {self.table_path} was won, but writing {file_name(version)} failed "
            f"({cause}) and its temp file _delta_log/{temp_path} is gone (deleted outside the protocol): if the "
            f"failed write landed after all the commit is there, otherwise the entry will be abandoned as "
            f"stuck; read the table's history to see whether the commit landed",
        )

    def _not_ours(self, version: int) -> VersionExistsError:
        return VersionExistsError(
            self.table_path, version,
            f"version {version} of table {self.table_path} was published with other bytes than ours, so our "
            f"commit is not in the log: written by a writer that bypassed the DynamoDB table (an S3-only or "
            f"misconfigured writer), or by the original writer of an entry abandoned as stuck. Make every "
            f"writer of this table use the same DynamoDB table and table URI spelling; read the table again "
            f"and retry at a newer version",
        )
