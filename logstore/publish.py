"""The one publish path: a won entry's bytes become ``N.json``, then the entry is finished (steps 3 PUBLISH
and 4 FINISH of ``logstore/external.py``), for the writer and for recovery alike.

``_publish_final`` is step 3 for everyone who publishes: the writer right after its commit point
(``logstore/acknowledge.py``), the durable acknowledgement's background publish and every recovery
(``logstore/recovery.py``). It PUTs ``N.json`` with If-None-Match and, when ``N.json`` was there already,
says whether it holds the same bytes (:class:`Placement`). Who calls it differs only in what a
:class:`Route` names: the failpoints around the PUT, and how a failure is taken (below).

Step 4 then finishes the entry (temp file gone, entry complete) in one of two orders, each for a reason:

* ``_finish_beside`` (the writer): the temp file's DELETE and the UpdateItem go out together on the pool,
  and ``write`` returns once ``N.json`` holds its bytes, waiting for neither: anyone who finds the entry
  incomplete finishes it after finding ``N.json`` (deleting a temp file that holds the same bytes, marking
  the entry), and this process's own readers and next write wait for the UpdateItem
  (``logstore/published.py``). The pair "``N.json`` and the temp file beside an incomplete entry", which
  delta-rs 1.5.1 - 1.6.0 cannot finish, lasts until the first of the two answers, as when ``write`` waited
  for the DELETE; only a process that dies in those milliseconds leaves it for the next reader.
* ``_finish_in_order`` (recovery): the UpdateItem first, then the DELETE, as Delta's recovery marks right
  after its copy: nobody finishes a complete entry again, so delta-rs <= 1.6.0 never meets the temp file
  beside ``N.json`` on an incomplete entry.
"""

from __future__ import annotations

import logging
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from logstore import deadline, failpoints, pool, retry
from logstore.entry_store import CommitEntry, file_name
from logstore.errors import CommitStateUnknownError, DeadlineExceededError, DynacommitError
from logstore.steps import (
    PUBLISHED,
    RECOVER_AFTER_COPY,
    RECOVER_AFTER_MARK_COMPLETE,
    RECOVER_BEFORE_COPY,
    WRITE_AFTER_COPY_TO_FINAL,
    WRITE_AFTER_DISCARD_TEMP,
    WRITE_AFTER_MARK_COMPLETE,
    WRITE_BEFORE_MARK_COMPLETE,
)

log = logging.getLogger(__name__)

#: Reading back the ``N.json`` a writer's PUT may have written: three tries, paced like settling.
FINAL_READ = replace(retry.SETTLE, attempts=3)


def _read_failure(exc: Exception) -> bool:
    """Whether a read of ``N.json`` is worth another try: the store failed, the deadline has not."""
    return isinstance(exc, (DynacommitError, OSError)) and not isinstance(exc, DeadlineExceededError)


class Placement(enum.Enum):
    """What step 3 found ``N.json`` to be."""

    WRITTEN = "written"  # our conditional PUT created it: it holds our bytes
    OURS = "ours"        # it was there already, holding our bytes (someone published our entry first)
    OTHER = "other"      # it holds another commit: a writer that bypassed DynamoDB, or the late writer of
    #                      an entry abandoned as stuck


@dataclass(frozen=True)
class Route:
    """Who runs the publish path, and the two things that differ between them.

    ``before_put`` / ``after_put``: the failpoints around the PUT (the crash matrix names them).
    ``settles``: the writer's way: a failed PUT is raised as :class:`PutFailed` for the caller to settle (its
    commit stands; ``logstore/acknowledge.py``), and ``N.json`` found there is read up to three times under a
    cleanup window of its own, CommitStateUnknownError when it cannot be (taking it for ours could acknowledge
    a commit that is not in the log). Otherwise recovery's way: every failure is raised as it is, and the
    whole recovery is tried again (``_recover_entry``).
    """

    name: str
    before_put: str | None
    after_put: str
    settles: bool


WRITER = Route("writer", None, WRITE_AFTER_COPY_TO_FINAL, settles=True)
RECOVERY = Route("recovery", RECOVER_BEFORE_COPY, RECOVER_AFTER_COPY, settles=False)


class PutFailed(Exception):
    """The writer's PUT of ``N.json`` failed (``cause``): whether it landed is for the writer to settle."""

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.cause = cause


class Publisher:
    """Steps 3 and 4, one side effect per method."""

    def _publish_final(self, version: int, body: bytes, route: Route, *, present: bool = False) -> Placement:
        """Step 3, PUBLISH: PUT ``N.json`` holding ``body`` if it is absent, and when it was there (412, or
        ``present``: the caller saw it, so no PUT is sent), whether it holds ``body``. See :class:`Route`
        for how failures come out."""
        if not present:
            if route.before_put is not None:
                failpoints.hit(route.before_put)
            try:
                written = self._copy_to_final(version, body)
                failpoints.hit(route.after_put)
            except Exception as exc:  # noqa: BLE001 - the writer settles any failure after its commit point
                if route.settles:
                    raise PutFailed(exc) from exc
                raise
            if written:
                return Placement.WRITTEN
        if route.settles:
            with deadline.cleanup(f"checking commit {version} of {self.table_path}"):
                ours = self._final_is(version, body)
        else:
            ours = self.objects.get(self.commit_key(version)) == body
        return Placement.OURS if ours else Placement.OTHER

    def _finish_beside(self, version: int, temp_path: str) -> None:
        """Step 4, FINISH, the writer's order: the UpdateItem marking the entry complete (recorded as this
        process's newest commit, which its next write waits for) and the temp file's DELETE go out together
        on the pool; neither is waited for."""
        completing = pool.submit(self._mark_complete_later, version)
        PUBLISHED.record(self.scope, version, completing)
        PUBLISHED.finishing(self.scope, [completing, pool.submit(self._drop_published_temp, temp_path)])

    def _finish_in_order(self, entry: CommitEntry, has_temp: bool, marked: Callable[[], None] | None) -> bool:
        """Step 4, FINISH, recovery's order: mark the entry complete, then (``has_temp``) delete its temp
        file. When marking fails (no ``dynamodb:UpdateItem``, throttling) the temp file is deleted before the
        error goes on, so that an incomplete entry is never left with both files. ``marked`` is called once
        the entry is complete, before the DELETE. Whether this call marked it (False: it was already)."""
        try:
            newly_marked = self._mark_complete(entry.version)
        except Exception:
            if has_temp:  # the entry stays incomplete: the temp file must not stay beside N.json
                self._discard_temp(entry.temp_path)
            raise
        if marked is not None:
            marked()
        if has_temp:
            self._discard_temp(entry.temp_path)
        failpoints.hit(RECOVER_AFTER_MARK_COMPLETE)
        return newly_marked

    def _put_temp(self, temp_path: str, body: bytes) -> None:
        self.objects.put(self.temp_key(temp_path), body)

    def _copy_to_final(self, version: int, body: bytes) -> bool:
        """PUT N.json if absent; False if it already existed."""
        return self.objects.put(self.commit_key(version), body, if_absent=True)

    def _mark_complete(self, version: int) -> bool:
        return self._complete_entry(version, int(time.time()) + self.expire_seconds)

    def _mark_complete_later(self, version: int) -> bool:
        """Step 4's UpdateItem, on the pool, not waited for by ``write``: a cleanup with the cleanup deadline
        of its own (the write's may be spent), which is also the longest an exiting process waits for it.
        Whether the entry is complete now; a failure only logs (the next write of this process, or the next
        writer or reader, finishes the entry)."""
        with deadline.cleanup(f"marking commit {version} of {self.table_path} complete"):
            failpoints.hit(WRITE_BEFORE_MARK_COMPLETE)
            done = self._mark_complete_quietly(version)
        if version in self.waited_on:
            PUBLISHED.note_waited(self.scope, version)
        return done

    def _drop_published_temp(self, temp_path: str) -> None:
        """Delete the temp file once N.json holds our bytes, on the pool beside the UpdateItem (see the module
        docstring on delta-rs). A cleanup like any other: with the cleanup deadline of its own, since the
        write's may be spent by now; failures only log (the sweep removes what is left)."""
        try:
            with deadline.cleanup(f"deleting temp file {temp_path} of {self.table_path}"):
                self.objects.delete([self.temp_key(temp_path)])
            failpoints.hit(WRITE_AFTER_DISCARD_TEMP)
        except (DynacommitError, OSError) as exc:
            log.info("could not delete temp file %s after publishing: %s", temp_path, exc)

    def _final_is(self, version: int, body: bytes) -> bool:
        """Whether N.json holds ``body``. Read up to three times (:data:`FINAL_READ`);
        CommitStateUnknownError if it cannot be read, or the deadline passes first (taking it for ours could
        acknowledge a commit that is not in the log)."""
        try:
            return retry.retry(lambda: self.objects.get(self.commit_key(version)) == body, policy=FINAL_READ,
                               retryable=_read_failure, to_deadline=True,
                               what=f"reading {file_name(version)} of {self.table_path} back")
        except (DynacommitError, OSError) as exc:  # the store's last failure, or the deadline
            last = exc
        raise CommitStateUnknownError(
            self.table_path, version,
            f"version {version} of table {self.table_path} was won and {file_name(version)} exists, but it "
            f"could not be read to check that it holds this commit ({last}); read the table's history to see "
            f"whether the commit landed",
        )

    def _mark_complete_quietly(self, version: int) -> bool:
        """Mark the entry complete; whether it is (now, or was already). Failures only log."""
        try:
            self._mark_complete(version)
            failpoints.hit(WRITE_AFTER_MARK_COMPLETE)
        except Exception as exc:  # noqa: BLE001 - after the commit point; see _publish
            log.warning("commit %s v%d is durable, but marking it complete failed (%s); the next reader "
                        "finishes it", self.table_path, version, exc)
            return False
        return True

    def _discard_temp(self, temp_path: str) -> None:
        """Delete a temp file nobody needs (a lost race's, or one whose N.json exists); failures only log
        (a reader without s3:DeleteObject must still be able to finish an entry). It has a few seconds of its
        own, so that an operation past its deadline still leaves no litter."""
        try:
            with deadline.cleanup(f"deleting temp file {temp_path} of {self.table_path}"):
                self.objects.delete([self.temp_key(temp_path)])
        except (DynacommitError, OSError) as exc:
            log.info("could not delete unused temp file %s: %s", temp_path, exc)
