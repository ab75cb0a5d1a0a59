"""The named steps of the commit path, shared by its modules: failpoints, attempt counts, the process's record
of its own commits, and the deadline every public operation runs under.

The protocol these steps belong to is written once, in the docstring of ``logstore/external.py``.
"""

from __future__ import annotations

import atexit
import functools
from concurrent.futures import Future

from logstore import deadline, failpoints, retry
from logstore.base import RecoveryOutcome
from logstore.published import Published

# Failpoints (logstore/failpoints.py): each marks one step of the protocol and says what the log holds when a
# process stops there. The crash matrix kills a writer at each of them and checks that nothing is lost.
WRITE_BEFORE_PUT_TEMP = failpoints.declare(
    "logstore.write.before_put_temp",
    "step 0 passed (N.json absent, N-1 complete); nothing of this commit exists yet")
WRITE_AFTER_PUT_TEMP = failpoints.declare(
    "logstore.write.after_put_temp",
    "the temp file holds the commit, no entry claims N: the version is still free; dying here leaves an "
    "orphan temp file (removed by the temp sweep)")
WRITE_BEFORE_PUT_ENTRY = failpoints.declare(
    "logstore.write.before_put_entry",
    "the temp file is written, the conditional put of the entry for N is about to be sent: N is free or "
    "taken by another writer")
WRITE_BEFORE_READ_BACK = failpoints.declare(
    "logstore.write.before_read_back",
    "the conditional put of the entry for N got no clear answer: the entry may or may not be ours; our "
    "temp file is there; the entry is about to be read back")
WRITE_AFTER_KEEP_TEMP = failpoints.declare(
    "logstore.write.after_keep_temp",
    "the conditional put of the entry for N was refused (another writer holds N); our temp file is kept for "
    "the next attempt at N+1 and no entry names it: dying here leaves an orphan temp file (removed by the "
    "temp sweep)")
WRITE_BEFORE_REUSE_TEMP = failpoints.declare(
    "logstore.write.before_reuse_temp",
    "a write of N+1 takes the temp file a lost attempt at N kept (no second PUT); no entry names it yet: "
    "dying here leaves an orphan temp file (removed by the temp sweep)")
WRITE_AFTER_PUT_ENTRY = failpoints.declare(
    "logstore.write.after_put_entry",
    "the commit point has passed: the incomplete entry for N names our temp file, N.json is absent; "
    "anyone finding the entry copies the temp file to N.json")
WRITE_AFTER_COPY_TO_FINAL = failpoints.declare(
    "logstore.write.after_copy_to_final",
    "N.json holds our bytes; the temp file is still there and the entry is incomplete; recovery deletes "
    "the temp file and marks the entry complete")
WRITE_AFTER_DISCARD_TEMP = failpoints.declare(
    "logstore.write.after_discard_temp",
    "N.json holds our bytes and the temp file is deleted; the entry is still incomplete: recovery only "
    "marks it complete")
WRITE_BEFORE_MARK_COMPLETE = failpoints.declare(
    "logstore.write.before_mark_complete",
    "N.json holds our bytes; the UpdateItem marking the entry complete is about to be sent from the pool "
    "(write may have returned already); the temp file may still be there: recovery deletes it and marks "
    "the entry complete")
WRITE_AFTER_MARK_COMPLETE = failpoints.declare(
    "logstore.write.after_mark_complete",
    "the commit is finished: N.json, a complete entry with expireTime, no temp file")
RECOVER_BEFORE_COPY = failpoints.declare(
    "logstore.recover.before_copy",
    "recovery found an incomplete entry, N.json absent, and read the entry's temp file; nothing changed yet")
RECOVER_AFTER_COPY = failpoints.declare(
    "logstore.recover.after_copy",
    "recovery wrote N.json from the temp file; the temp file is still there, the entry is incomplete")
RECOVER_AFTER_MARK_COMPLETE = failpoints.declare(
    "logstore.recover.after_mark_complete",
    "recovery finished the entry: N.json, temp file deleted, entry complete")
ABANDON_AFTER_MARK_STUCK = failpoints.declare(
    "logstore.abandon.after_mark_stuck",
    "an incomplete entry whose temp file and N.json are both gone now carries stuckSince; it still holds N "
    "(readers stop at N-1) until it is abandoned after the grace period")
ABANDON_BEFORE_DELETE = failpoints.declare(
    "logstore.abandon.before_delete",
    "a stuck entry past its grace period was checked again (temp file and N.json still absent); the "
    "conditional delete that frees N is about to be sent")

#: Attempts at finishing an incomplete entry, and at settling an unclear commit step: the policies' own
#: (logstore/retry.py), named here for the messages that report them.
RECOVERY_ATTEMPTS = retry.RECOVER.attempts
RESOLVE_ATTEMPTS = retry.SETTLE.attempts
#: This process's own commits (logstore/published.py): what it published, what it is still finishing.
PUBLISHED = Published()


def _finish_at_exit() -> None:
    """At interpreter exit, after every non-daemon thread ended: let the finishing steps of this process's
    commits (UpdateItems, temp-file DELETEs, on the pool's daemon threads) end, for at most the cleanup
    deadline. What is still running then is left to the next writer or reader."""
    PUBLISHED.wait_all(timeout=deadline.CLEANUP_SECONDS)


atexit.register(_finish_at_exit)


def resolve(future: Future, value: bool) -> None:
    """Set ``future``'s result unless it has one."""
    if not future.done():
        future.set_result(value)


def operation(name: str):
    """Run the decorated public operation under the store's deadline, named ``<name> of <table>``."""

    def wrap(method):
        @functools.wraps(method)
        def bounded(self, *args, **kwargs):
            with deadline.deadline(self.timeout_seconds, f"{name} of {self.table_path}"):
                return method(self, *args, **kwargs)
        return bounded

    return wrap


#: What recovery answers for an entry whose content is lost (stuck entries, logstore/stuck.py).
STUCK_OUTCOMES = frozenset({RecoveryOutcome.STUCK_MARKED, RecoveryOutcome.ABANDONED})
