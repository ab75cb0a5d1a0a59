"""The commit and recovery algorithm, written once; an external store of commit entries fills in hooks.

This is the protocol of Delta's ``S3DynamoDBLogStore`` (reference/delta-dynamodb-protocol.md §2, §3, §6).
Each version N has at most one *entry* in the external store (DynamoDB), keyed by the table path and
``{N:020d}.json``, holding ``tempPath`` (relative to ``_delta_log/``) and ``complete``.

Write N (``write``), in four round trips one after another (requests on one line go out together, on the
small pool of ``logstore/pool.py``):

0. CHECK      ``_check``: HEAD ``N.json`` (it must not exist) and GetItem(N-1) (N-1 must be complete:
              recovered if its entry is not; a stuck N-1 is marked or abandoned and the write fails so the
              caller re-reads). The GetItem is left out when this process published N-1 itself and its
              UpdateItem marked N-1 complete (``N-1.json`` exists: nothing is left to recover;
              logstore/published.py).
1. PREPARE    ``_put_temp``, beside step 0: PUT the body to ``_delta_log/.tmp/{N:020d}.json.{uuid}``. If
              step 0 fails, the temp file is deleted: no entry names it.
2. COMMIT     ``_put_entry``: conditional put of ``complete="false"`` if no entry for N exists. This is the
              commit point: success means N is ours forever; a failed condition means N is taken, and
              returns who holds it (``ALL_OLD``; read back with GetItem when a server does not), with its
              ``summary`` for the caller to judge (``VersionExistsError.winner``); our temp file is then
              kept for the caller's next attempt when it asked (``keep_temp``: ``KeptTemp``, passed back as
              ``temp`` to the write of the next version, which names it in its entry and PUTs no second
              temp file), else deleted without waiting for the answer. An
              ambiguous answer (no answer, 5xx, throttling, an SDK retry) is settled by reading the entry
              back: our ``tempPath`` there means we won. An entry holding N whose content is lost (stuck,
              below) is abandoned after its grace period, and the put tried again.
3. PUBLISH    ``_copy_to_final``: PUT ``N.json`` with If-None-Match (412: someone recovered it already; its
              bytes are compared with ours).
4. FINISH     ``_drop_published_temp`` beside ``_mark_complete``: DELETE the temp file, and set
              ``complete="true"`` and ``expireTime`` if still incomplete. ``write`` returns once the
              DELETE answered; the UpdateItem is not waited for: marking complete is what anyone who finds
              the entry incomplete does anyway (Delta, delta-rs and this module look for ``N.json`` first),
              and the temp file is already gone, which delta-rs 1.5.1-1.6.0 needs (below). It runs with
              the cleanup deadline of its own; the process's next write waits for it (and finishes the entry
              itself if it failed), an exiting process waits for it at most that long, and
              ``wait_finished`` waits for it. A process that ends without exit handlers leaves at most its
              newest entry incomplete, which the next writer or reader finishes.

A lost race costs no extra read (with ``keep_temp``, a version found taken at step 0 costs one Query of
the entries from it on, so that the caller judges them the same way and tries after the newest); every
request count is independent of the table's history.

Acknowledgement (``DYNACOMMIT_COMMIT_ACK``, :attr:`StorageOptions.commit_ack`). With ``published`` (the
default) ``write`` returns after step 4's DELETE, as above: ``N.json`` holds the commit, so every reader,
with or without DynamoDB, sees it. With ``durable`` it returns right after step 2, two round trips in
all (steps 0-1 together, then the PutItem): the commit point has passed and the temp file holds the
commit, so the commit is as durable as Delta's ``S3DynamoDBLogStore`` makes it. Steps 3-4 are then not the
writer's own: they are recovery (``_recover_entry``) of the entry just won, run on the pool with the body
the writer holds (so the temp file is not read back), with its order and failpoints: PUT ``N.json`` if
absent, mark complete, DELETE the temp file. Until the entry is complete it is an incomplete one like any
other: a reader or writer that passes it (``latest_version``, ``read``, the check of step 0) finishes it
itself, and this process's next write to the table waits for it (``PUBLISHED``; not for the DELETE) before
its step 2, so that no entry but the newest is left incomplete; readers that list ``_delta_log/`` without
DynamoDB (delta-rs without a locking provider, Spark's plain reader) see the commit only once ``N.json`` is
written. What ``published`` adds besides is the check that ``N.json`` holds our bytes: a writer that
bypasses DynamoDB and writes ``N.json`` between our step 2 and the background copy makes a ``durable``
commit lost after it was acknowledged (recovery reports it SUPERSEDED and logs an error), as with Delta's
own store; ``published`` fails such a write instead.

Failures in steps 3-4 never fail the commit: anyone who finds the incomplete entry finishes it (but see
"Why abandoning cannot lose an acknowledged commit" below for when the writer may report success).

Deadlines: each public operation runs under ``deadline.deadline(timeout_seconds, "<op> of <table>")``; no
request is sent after it (botocore's ``before-send`` hook, and the memory backend's own check), and every
loop here sleeps through ``deadline.sleep``. Past it before step 2: DeadlineExceededError, the temp file
deleted (best effort, in a short cleanup window of its own); after an unclear step 2 that could not be read
back: CommitStateUnknownError; after step 2: the commit stands and ``write`` returns.

Recover entry E of version N (``recover``): if ``N.json`` is missing, copy E's temp file there
(conditional PUT), then mark E complete. Both temp layouts resolve: Delta's ``.tmp/N.json.<uuid>`` and
delta-rs's ``_commit_<uuid>.json.tmp``.

Stuck entries (``_settle_stuck``). An incomplete entry whose temp file is gone while ``N.json`` is absent
holds a version whose content no longer exists in storage (a temp file deleted by hand or by a lifecycle
rule, a writer of another tool that deleted it, an old bug). It must not block the table forever, so it is
*abandoned*, in two steps persisted in the external store, so that no observer has to wait:

a. MARK      The first process that finds it stuck sets ``stuckSince = now`` on it, on condition that it
             is still the same incomplete entry (``complete = "false" AND tempPath = :tp AND
             attribute_not_exists(stuckSince)``). Readers only mark: ``latest_version`` answers N-1 (and
             warns once), ``read(N)`` raises VersionNotFoundError saying why.
b. ABANDON   A writer that needs N or ``recover()`` finding it stuck with ``stuckSince`` older than the
             grace period (``DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS``, default 60 s) checks again that
             neither file exists and deletes the entry on condition that it is still the entry it marked
             (``complete = "false" AND tempPath = :tp AND stuckSince = :seen``). Version N is free again.

"Stuck" is always observed as: temp file absent, *then* ``N.json`` absent. Every writer and recoverer creates
``N.json`` before it deletes a temp file (our writers, Delta's, delta-rs's move), so a temp file found absent
with ``N.json`` absent afterwards was removed outside the protocol, and its content exists nowhere in storage.

Why abandoning cannot lose an acknowledged commit:

* The content of a stuck commit exists only in the memory of its original writer, if that one still runs.
  Our writer acknowledges a commit only when ``N.json`` holds its bytes (its conditional PUT succeeded, or
  answered 412 and ``N.json`` reads back as its bytes), or when its temp file is still there after the commit
  point (then the entry is not stuck and anyone finishes it: the temp file is the commit's durable copy, as in
  Delta's protocol). Otherwise it raises VersionExistsError or CommitStateUnknownError, never success.
* Every ``N.json`` is written with ``If-None-Match: *`` (the writer's own copy and every recovery), so after
  an abandonment exactly one ``N.json`` wins, whoever writes it, and it is never replaced.
* If the original writer, still alive, lands its ``N.json`` after the abandonment, that commit is
  acknowledged and stays: a new claimant of N finds ``N.json`` at its step 0 (VersionExistsError), or has
  already put its own entry and gets 412 with other bytes at step 3, so it reports failure
  (VersionExistsError), never success. Readers see N through the listing after the newest entry (below).
* If a new claimant's ``N.json`` lands first, the original writer gets 412 with other bytes and reports
  failure, never success.
* The conditions of both steps name the entry's ``tempPath`` (and the second its ``stuckSince``): no other
  entry for N (a new claim after an abandonment, an entry completed meanwhile) is ever marked or deleted.

The grace period is not what makes this safe (the argument holds for any grace); it gives a slow original
writer time to publish (so its commit is not failed needlessly) and lets the second step be taken by
another process than the first. ``stuckSince`` is compared with each process's clock: skew between hosts
shortens or lengthens the grace by the skew, nothing more.

Temp files are deleted as soon as ``N.json`` exists, by the writer (beside the UpdateItem that marks the
entry complete, right after its PUT of ``N.json``) and by recovery (right after it marks the entry
complete, which no one finishes again), in both layouts. delta-rs 1.5.1-1.6.0 finishes an incomplete
entry with a copy-if-absent of its temp file; finding the temp file *and* ``N.json`` makes that copy
fail with "already exists", which delta-rs takes for a lost race: it then fails its own load or append
(when the entry was ours) or commits the same transaction again at N+1 (when it was its own). Nobody needs
a temp file once ``N.json`` exists: Delta, delta-rs and this module all look for ``N.json`` first.
"""

from __future__ import annotations

import abc
import atexit
import dataclasses
import functools
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

from logstore import deadline, failpoints, pool
from logstore.aws import ConditionFailed, ObjectNotFound, TransactionCanceled
from logstore.base import LogFile, LogStore, RecoveryOutcome
from logstore.errors import (
    AccessDeniedError,
    ArgumentTypeError,
    CommitStateUnknownError,
    ConfigurationError,
    CorruptLogError,
    DeadlineExceededError,
    DynacommitError,
    InvalidArgumentError,
    StorageError,
    TableNotFoundError,
    VersionExistsError,
    VersionNotFoundError,
    provably_refused,
)
from logstore.group import (
    GROUP_AFTER_TRANSACTION,
    GROUP_BEFORE_PUBLISH,
    GROUP_BEFORE_TRANSACTION,
    GroupChanged,
    GroupClaim,
    QueuedAppend,
)
from logstore.objects import ObjectStore
from logstore.options import DEFAULT_STUCK_ENTRY_GRACE_SECONDS, StorageOptions, TableUri
from logstore.published import Published
from logstore.sweep import DEFAULT_SWEEP_AGE_SECONDS, TempSweepReport, sweep_temp_files

log = logging.getLogger(__name__)

#: Seconds an entry lives after it is marked complete (DynamoDB TTL on ``expireTime``).
#: Why a day and not seconds: writer B checks that N.json is absent (step 0), then puts the entry for N
#: (step 2). If A's complete entry for N expired in between, B's conditional put succeeds although A
#: already owns N, and B's commit is silently shadowed by A's N.json. The gap between B's steps 0 and 2
#: is milliseconds; a day of TTL makes that interleaving impossible in practice (delta-io/delta#1410).
#: We also check for it (see ``_publish``), but the delay is the first line of defence.
SIDECARS = "_sidecars"
"""The one directory of ``_delta_log/`` whose files ``read_file``/``write_file`` reach: V2 checkpoints keep
their file actions there (PROTOCOL.md, "Sidecar Files")."""

DEFAULT_EXPIRE_SECONDS = 86_400

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

_FILE_NAME = re.compile(r"^(\d{20})\.json$")
RECOVERY_ATTEMPTS = 4
RESOLVE_ATTEMPTS = 5
#: Seconds an entry found stuck stays marked before it may be abandoned (see the module docstring).
DEFAULT_STUCK_GRACE_SECONDS = DEFAULT_STUCK_ENTRY_GRACE_SECONDS
#: This process's own commits (logstore/published.py): what it published, what it is still finishing.
PUBLISHED = Published()


def _finish_at_exit() -> None:
    """At interpreter exit, after every non-daemon thread ended: let the finishing steps of this process's
    commits (UpdateItems, temp-file DELETEs, on the pool's daemon threads) end, for at most the cleanup
    deadline. What is still running then is left to the next writer or reader."""
    PUBLISHED.wait_all(timeout=deadline.CLEANUP_SECONDS)


atexit.register(_finish_at_exit)


def _resolve(future: Future, value: bool) -> None:
    """Set ``future``'s result unless it has one."""
    if not future.done():
        future.set_result(value)


#: (scope, version) of the entries this process was refused to finish, each warned about once.
_DENIED_WARNED: set[tuple] = set()
_DENIED_LOCK = threading.Lock()


def _operation(name: str):
    """Run the decorated public operation under the store's deadline, named ``<name> of <table>``."""

    def wrap(method):
        @functools.wraps(method)
        def bounded(self, *args, **kwargs):
            with deadline.deadline(self.timeout_seconds, f"{name} of {self.table_path}"):
                return method(self, *args, **kwargs)
        return bounded

    return wrap


def _duration(name: str, given: float | None, default: float, *, allow_zero: bool) -> float:
    if given is None:
        return default
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number of seconds, got {given!r}")
    if not math.isfinite(given) or given < 0 or (given == 0 and not allow_zero):
        raise InvalidArgumentError(f"{name} must be a finite number of seconds {'>= 0' if allow_zero else '> 0'}, "
                                   f"got {given!r}")
    return float(given)


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


class KeptTemp:
    """The temp file of a write that lost its version, kept for the writer's next attempt (``write``'s
    ``keep_temp``): no entry names it, and it holds ``body``. Hand it to the next ``write`` of the same bytes
    (``temp=``), which names it in its entry instead of PUTting a second temp file, or ``discard`` it. Spent
    once used or discarded; a process that dies holding one leaves an orphan temp file for the sweep."""

    def __init__(self, store: ExternalLogStore, temp_path: str, body: bytes, lost: CommitEntry | None,
                 winners: list[CommitEntry] | None = None):
        self.store = store
        self.temp_path = temp_path
        self.body = body
        #: The newest entry known to hold a version this write wanted: the next attempt goes after it.
        self.lost_to = lost
        #: Every entry known to hold a version from the one this write tried on, oldest first, contiguous.
        self.winners = winners if winners is not None else ([] if lost is None else [lost])
        self.spent = False

    def take(self, store: ExternalLogStore, body: bytes) -> str | None:
        """The temp path, if this temp file can carry ``body`` to ``store``'s table; spends it either way
        (when it cannot, it is deleted)."""
        if self.spent:
            return None
        self.spent = True
        if store.scope == self.store.scope and (body is self.body or body == self.body):
            return self.temp_path
        self.store._discard_temp(self.temp_path)
        return None

    def discard(self) -> None:
        """Delete the temp file (best effort); nothing else needs it."""
        if not self.spent:
            self.spent = True
            self.store._discard_temp(self.temp_path)


class ExternalLogStore(LogStore):
    """The algorithm over an :class:`ObjectStore` and abstract entry hooks.

    Subclasses implement the six entry hooks (``_put_entry``, ``_get_entry``, ``_latest_entry``,
    ``_complete_entry``, ``_mark_stuck``, ``_abandon_entry``); everything else, including every step name in
    the module docstring, lives here once.
    """

    keeps_temp = True

    def __init__(self, uri: TableUri, objects: ObjectStore, *, options: StorageOptions | None = None,
                 expire_seconds: int = DEFAULT_EXPIRE_SECONDS, stuck_grace_seconds: float | None = None,
                 timeout_seconds: float | None = None):
        """``options`` give the deadline of each operation (``DYNACOMMIT_TIMEOUT_SECONDS``) and the grace
        period of stuck entries (``DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS``); ``timeout_seconds`` and
        ``stuck_grace_seconds`` override them (tests)."""
        if isinstance(expire_seconds, bool) or not isinstance(expire_seconds, int):
            raise ArgumentTypeError(f"expire_seconds must be an int number of seconds, got {expire_seconds!r}")
        if expire_seconds < 3600:
            raise ConfigurationError(
                f"expire_seconds={expire_seconds} is too low: entries must outlive any writer's check-to-"
                f"commit window; keep the default of {DEFAULT_EXPIRE_SECONDS} (one day)"
            )
        self.options = options if options is not None else StorageOptions()
        self.uri = uri
        self.table_path = uri.table_path
        self.objects = objects
        self.expire_seconds = expire_seconds
        self.stuck_grace_seconds = _duration("stuck_grace_seconds", stuck_grace_seconds,
                                             self.options.stuck_entry_grace_seconds, allow_zero=True)
        self.timeout_seconds = _duration("timeout_seconds", timeout_seconds, self.options.timeout_seconds,
                                         allow_zero=False)
        self.log_prefix = uri.key("_delta_log/")
        self._warned: set[str] = set()
        #: Versions whose entry this store marked complete and found marked by a writer that lost them.
        self.waited_on: set[int] = set()

    # ----------------------------------------------------------------- hooks for the external store
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

    def group_commit_available(self) -> bool:
        """Whether appends to this table may queue and commit together: ``DYNACOMMIT_GROUP_COMMIT`` is on
        and the external store answers transactions."""
        return self.options.group_commit and self._transactions_supported()

    def _queue_put(self, item: QueuedAppend) -> None:
        """Create the queued item (its id is new). Raise like ``_put_entry`` does."""
        raise NotImplementedError

    def _queue_items(self) -> list[QueuedAppend]:
        """The table's queued items (waiting and claimed), oldest first (one strongly consistent Query)."""
        raise NotImplementedError

    def _queue_get(self, member_id: str) -> QueuedAppend | None:
        raise NotImplementedError

    def _queue_delete(self, member_id: str, state: str) -> bool:
        """Delete the item if it is in ``state``; False (nothing changed) otherwise."""
        raise NotImplementedError

    def _put_entry_group(self, entry: CommitEntry, claim: GroupClaim) -> None:
        """``_put_entry`` and the claims of ``claim``, in one transaction. Raise ConditionFailed (with the
        owner) when N is taken, GroupChanged when only items could not be claimed, AmbiguousError when the
        outcome is unknown."""
        raise NotImplementedError

    @_operation("queue")
    def queue_append(self, item: QueuedAppend) -> None:
        """Queue an append (see logstore/group.py). Raises what ``_put_entry`` raises; an unclear answer is
        settled by reading the item back (absent: raised; present: queued). The caller must withdraw an
        item whose queueing raised: it may exist all the same."""
        try:
            self._queue_put(item)
        except ConditionFailed:
            return  # the id is new: what holds it is an earlier attempt of this very put (an SDK retry)
        except DynacommitError as exc:
            if provably_refused(exc):
                raise
            if self._queue_get(item.member_id) is None:
                raise

    @_operation("queue")
    def queued(self) -> list[QueuedAppend]:
        """The table's queued appends, waiting and claimed."""
        return self._queue_items()

    @_operation("queue")
    def queued_append(self, member_id: str) -> QueuedAppend | None:
        return self._queue_get(member_id)

    @_operation("queue")
    def withdraw(self, member_id: str) -> QueuedAppend | None:
        """Withdraw a waiting append (conditional delete). None when it is withdrawn (or gone); otherwise the
        item as it is now: claimed by a version, so the append is committed there. An unclear answer is
        settled by reading the item."""
        for attempt in range(RESOLVE_ATTEMPTS):
            try:
                if self._queue_delete(member_id, "waiting"):
                    return None
            except DynacommitError as exc:
                if provably_refused(exc):
                    raise
                log.info("withdrawing queued append %s of %s got no clear answer (%s)", member_id,
                         self.table_path, exc)
            found = self._queue_get(member_id)
            if found is None:
                return None
            if not found.waiting:
                return found
            deadline.sleep(0.05 * 2**attempt)
        raise CommitStateUnknownError(
            self.table_path, None,
            f"could not withdraw queued append {member_id} of table {self.table_path}: it is still waiting after "
            f"{RESOLVE_ATTEMPTS} attempts; a group may still take it (until its claimUntil); read the table's "
            f"history to see whether it landed")

    def forget_queued(self, member_id: str) -> None:
        """Delete a claimed item whose writer knows its outcome (best effort, on the pool: its TTL removes it
        otherwise)."""

        def forget() -> None:
            try:
                with deadline.cleanup(f"deleting queued append {member_id} of {self.table_path}"):
                    self._queue_delete(member_id, "claimed")
            except (DynacommitError, OSError) as exc:
                log.debug("could not delete claimed queued append %s: %s", member_id, exc)

        PUBLISHED.finishing(self.scope, [pool.submit(forget)])

    # ----------------------------------------------------------------- paths
    def commit_key(self, version: int) -> str:
        return self.log_prefix + file_name(version)

    def temp_key(self, temp_path: str) -> str:
        if temp_path.startswith("/") or ".." in temp_path.split("/") or not temp_path:
            raise CorruptLogError(
                f"table {self.table_path}: an entry's tempPath {temp_path!r} is not a path relative to "
                f"_delta_log/; the item was not written by Delta or dynacommit"
            )
        return self.log_prefix + temp_path

    # ----------------------------------------------------------------- one side effect each
    def _put_temp(self, temp_path: str, body: bytes) -> None:
        self.objects.put(self.temp_key(temp_path), body)

    def _copy_to_final(self, version: int, body: bytes) -> bool:
        """PUT N.json if absent; False if it already existed."""
        return self.objects.put(self.commit_key(version), body, if_absent=True)

    def _mark_complete(self, version: int) -> bool:
        return self._complete_entry(version, int(time.time()) + self.expire_seconds)

    # ----------------------------------------------------------------- files of _delta_log/
    @_operation("read_file")
    def read_file(self, name: str) -> bytes | None:
        """The bytes of ``_delta_log/{name}``, or None. InvalidArgumentError for a name with a slash."""
        try:
            return self.objects.get(self._file_key(name))
        except ObjectNotFound:
            return None

    @_operation("read_file")
    def read_file_tagged(self, name: str) -> tuple[bytes, str] | None:
        """The bytes of ``_delta_log/{name}`` and their ETag, or None."""
        try:
            return self.objects.get_tagged(self._file_key(name))
        except ObjectNotFound:
            return None

    @_operation("write_file")
    def write_file(self, name: str, body: bytes, *, if_absent: bool = False, if_match: str | None = None) -> bool:
        key = self._file_key(name)
        self._check_flag(if_absent, "if_absent")
        if if_match is not None and not isinstance(if_match, str):
            raise ArgumentTypeError(f"if_match must be a tag (str) from read_file_tagged, got {if_match!r}")
        if if_match is not None and (not if_match or if_absent):
            raise InvalidArgumentError(f"if_match must be a non-empty tag from read_file_tagged and cannot go "
                                       f"with if_absent; got if_match={if_match!r}, if_absent={if_absent}")
        return self.objects.put(key, self._check_body(body, commit=False), if_absent=if_absent, if_match=if_match)

    @_operation("delete_files")
    def delete_files(self, names: list[str]) -> None:
        self.objects.delete([self._file_key(name) for name in names])

    def list_files(self, *, start_after: str = "") -> Iterator[LogFile]:
        # Temp files live under `.tmp/` ("/" sorts just before "0", so ".tmp0" is past all of them and before
        # every version) or are named `_commit_<uuid>.json.tmp` (delta-rs).
        after = self.log_prefix + max(start_after, ".tmp0")
        for info in self.objects.list(self.log_prefix, start_after=after):
            name = info.key[len(self.log_prefix):]
            if "/" in name or name.endswith(".json.tmp"):
                continue
            yield LogFile(name, info.size, info.last_modified_ms)

    @_operation("stat_file")
    def stat_file(self, name: str) -> LogFile | None:
        info = self.objects.head(self._file_key(name))
        return None if info is None else LogFile(name, info.size, info.last_modified_ms)

    def location(self, name: str = "") -> str:
        return f"{self.uri.scheme}://{self.uri.bucket}/{self.log_prefix}{name}"

    def _file_key(self, name: str) -> str:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"a file name in _delta_log/ must be a string, got {type(name).__name__}")
        directory, _, base = name.rpartition("/")
        if not base or base in (".", "..") or directory not in ("", SIDECARS):
            raise InvalidArgumentError(f"{name!r} is not the name of a file directly in _delta_log/ or in "
                                       f"_delta_log/{SIDECARS}/")
        return self.log_prefix + name

    # ----------------------------------------------------------------- contract
    # Each public operation runs under its own deadline (``timeout_seconds``), or an enclosing one if that
    # ends sooner: requests are not sent after it, loops stop at it (logstore/deadline.py).
    @_operation("read")
    def read(self, version: int) -> bytes:
        self._check_version(version)
        try:
            return self.objects.get(self.commit_key(version))
        except ObjectNotFound:
            pass
        entry = self._get_entry(version)
        if entry is None:
            raise VersionNotFoundError(
                f"version {version} of table {self.table_path} does not exist"
            )
        outcome = self._finish_as_reader(entry)
        if outcome in _STUCK_OUTCOMES:
            raise VersionNotFoundError(self._stuck_message(entry, outcome))
        try:
            return self.objects.get(self.commit_key(version))
        except ObjectNotFound:
            if outcome is None:
                raise VersionNotFoundError(
                    f"version {version} of table {self.table_path} is committed but not published yet (its "
                    f"writer died before writing {file_name(version)}), and this process may not publish it; a "
                    f"writer or `dynacommit recover {self.table_path} --execute` with write permissions does") from None
            # Log cleanup after a checkpoint deletes old commit files legitimately; whether the version is
            # still needed is the reader's call, so this is "not found", with the cause spelled out.
            raise VersionNotFoundError(
                f"version {version} of table {self.table_path} is marked complete in the external store but "
                f"_delta_log/{file_name(version)} is gone: it was deleted after the commit (log cleanup, or "
                f"behind the log's back)"
            ) from None

    @_operation("list_from")
    def list_from(self, version: int) -> Iterator[int]:
        self._check_version(version)
        # Starting after the bare digits skips `.tmp/` (it sorts before them) and older versions. The
        # listing is read whole, within the operation's deadline.
        return iter(self._versions_after(self.log_prefix + f"{version:020d}"))

    @_operation("latest_version")
    def latest_version(self, *, start: int = 0) -> int:
        """The newest version: one Query for the newest entry, then one LIST of ``_delta_log/`` after it.

        The external store's newest entry is a lower bound, not the answer: TTL deletes items in no set
        order, a person may delete one, and a writer that bypasses the external store (delta-rs >= 1.6.1,
        any plain conditional PUT of N.json) writes no entry at all. So the files after the newest entry's
        N.json are always listed (StartAfter skips ``.tmp/`` and everything older), and the highest version
        wins. Versions found above a live newest entry have no entry: that is warned about once per store,
        naming them. ``start`` is a version the caller knows exists (a checkpoint's): when the entries are
        all older than it (expired), the listing starts there. A newest entry that is stuck (see the module
        docstring) is marked, and counts as the version before it.
        """
        self._check_version(start, "start")
        entry = self._latest_entry()
        floor = -1  # the highest version known to exist
        if entry is not None:
            floor = entry.version
            if not entry.complete:
                outcome = self._finish_as_reader(entry)
                if outcome in _STUCK_OUTCOMES:
                    self._warn_stuck(entry, outcome)
                    floor = entry.version - 1
                elif outcome is None and self.objects.head(self.commit_key(entry.version)) is None:
                    floor = entry.version - 1  # not published, and this process may not publish it
        if floor >= start:
            listed = self._versions_after(self.log_prefix + file_name(floor))
        else:
            listed = self._versions_after(self.log_prefix + f"{start:020d}")  # from start itself
            floor = max(floor, start if start > 0 else -1)
        if entry is not None:
            self._warn_unannounced(entry, [v for v in listed if v > entry.version])
        latest = max([floor, *listed])
        if latest < 0:
            raise TableNotFoundError(
                f"no table at {self.table_path}: no log entries under {self.log_prefix} and none in the "
                f"external store"
            )
        return latest

    def _versions_after(self, start_after: str) -> list[int]:
        """Versions of the commit files whose keys sort after ``start_after`` (one LIST, paged)."""
        found = []
        for info in self.objects.list(self.log_prefix, start_after=start_after):
            match = _FILE_NAME.match(info.key[len(self.log_prefix):])
            if match is not None:
                found.append(int(match.group(1)))
        return found

    def _warn_unannounced(self, newest: CommitEntry, versions: list[int]) -> None:
        """Warn (once per store) about commit files above the newest entry that have no entry. Not when the
        newest entry has expired: TTL then removes the newer ones too, in no set order."""
        expired = newest.complete and newest.expire_time is not None and newest.expire_time <= time.time()
        if not versions or expired or "unannounced" in self._warned:
            return
        # A commit that landed between the Query and the LIST has its entry: only versions still without
        # one are another writer's (a GetItem each, on this rare path only, for at most 20 of them).
        try:
            versions = [v for v in versions[:20] if self._get_entry(v) is None] + versions[20:]
        except DynacommitError:
            return  # not known: say nothing rather than something wrong
        if not versions:
            return
        self._warned.add("unannounced")
        shown = ", ".join(map(str, versions[:20])) + (", ..." if len(versions) > 20 else "")
        log.warning(
            "table %s: versions %s exist in %s but have no entry in the external store (its newest entry is "
            "version %d): written by a writer that bypasses DynamoDB (delta-rs >= 1.6.1, a plain conditional "
            "PUT of N.json), or whose entry was deleted. Writers that do not share the DynamoDB table are not "
            "coordinated with this one: make every writer of this table use the same DynamoDB table",
            self.table_path, shown, self.location(), newest.version)

    @_operation("recover")
    def recover(self, version: int | None = None) -> RecoveryOutcome:
        """Finish the entry (default: the newest); a stuck one is marked, or abandoned once marked longer
        than the grace period (see the module docstring)."""
        if version is not None:
            self._check_version(version)
        entry = self._latest_entry() if version is None else self._get_entry(version)
        if entry is None:
            return RecoveryOutcome.NOTHING_TO_RECOVER
        return self._recover_entry(entry, abandon=True)

    @_operation("recover")
    def recover_all(self) -> list[tuple[int, RecoveryOutcome]]:
        """Finish every incomplete entry of the table, oldest first (``recover`` on each: a stuck one is
        marked, or abandoned once marked longer than the grace period); what was done to each, by version.
        Writers and readers finish the entries they pass (the newest, and N-1 before writing N), so only
        an entry whose writer died and that nobody passed since (its table idle, or an UpdateItem lost in a
        process that then ended) is found here; ``dynacommit recover`` runs it."""
        return [(entry.version, self._recover_entry(entry, abandon=True)) for entry in list(self._incomplete_entries())]

    @_operation("sweep_temp_files")
    def sweep_temp_files(self, *, older_than_seconds: float = DEFAULT_SWEEP_AGE_SECONDS,
                         dry_run: bool = False) -> TempSweepReport:
        """Delete the temp files that no unfinished commit needs: those older than ``older_than_seconds``
        (by LastModified; default one hour) that no incomplete entry names, in both layouts
        (``.tmp/N.json.<uuid>``, ``_commit_<uuid>.json.tmp``). ``dry_run`` only reports. Safe while writers
        run; the reasons, and those for the age, are in :mod:`logstore.sweep`. ``dynacommit recover`` runs
        it after recovering the newest entry."""
        self._check_flag(dry_run, "dry_run")
        return sweep_temp_files(self, older_than_seconds=older_than_seconds, dry_run=dry_run)

    @_operation("write")
    def write(self, version: int, body: bytes, *, overwrite: bool = False,
              before_commit: Callable[[], object] | None = None, summary: str | None = None,
              keep_temp: bool = False, temp: KeptTemp | None = None, group: GroupClaim | None = None) -> None:
        """Steps 0-4 of the module docstring. Past the deadline before the commit point: DeadlineExceededError,
        with the temp file deleted (best effort); past it after an unclear put that could not be settled:
        CommitStateUnknownError; past it after the commit point: success (the commit is durable; whoever
        comes next finishes it). ArgumentTypeError for a body that is not bytes, InvalidArgumentError for an
        empty one or a negative version.

        A lost race (VersionExistsError) carries ``winner``, the entry that took the version when the
        refusal or a read of it said (None otherwise), and ``kept``. ``summary``: a short text stored on
        our entry (``commitSummary``) for writers that lose to us. ``keep_temp``: on a lost race the temp
        file is not deleted but handed back as ``VersionExistsError.kept`` (:class:`KeptTemp`), for the next
        attempt of the same bytes to pass as ``temp``: step 1 is then left out. ``group``: step 2 is the
        transaction of a group attempt (logstore/group.py), claiming these queued appends with the version;
        GroupChanged when only they could not be claimed (nothing applied, the temp file deleted)."""
        self._check_version(version)
        body = self._check_body(body, commit=True)
        self._check_flag(overwrite, "overwrite")
        self._check_flag(keep_temp, "keep_temp")
        if before_commit is not None and not callable(before_commit):
            raise ArgumentTypeError(f"before_commit must be a function of no arguments, got {before_commit!r}")
        if summary is not None and (not isinstance(summary, str) or len(summary.encode()) > SUMMARY_MAX_BYTES):
            length = len(summary.encode()) if isinstance(summary, str) else "?"
            raise InvalidArgumentError(f"summary must be a str of at most {SUMMARY_MAX_BYTES} bytes (UTF-8), got "
                                       f"{type(summary).__name__} of {length} bytes; leave it out (None)")
        if group is not None and (not isinstance(group, GroupClaim) or not self.group_commit_available()):
            raise InvalidArgumentError(f"group must be a GroupClaim, on a store with group commit available; got "
                                       f"{group!r}")
        if temp is not None and not isinstance(temp, KeptTemp):
            raise ArgumentTypeError(f"temp must be the KeptTemp of a lost write (VersionExistsError.kept), "
                                    f"got {temp!r}")
        if overwrite:
            if temp is not None:
                temp.discard()
            log.warning("writing %s of %s without coordination (overwrite=True)", file_name(version),
                        self.table_path)
            self.objects.put(self.commit_key(version), body)
            return
        reused = temp.take(self, body) if temp is not None else None
        temp_path = reused or f".tmp/{file_name(version)}.{uuid.uuid4()}"
        previous = temp.lost_to if reused is not None and temp is not None else None
        self._prepare(version, temp_path, body, written=reused is not None,
                      previous_complete=previous is not None and previous.complete and previous.version == version - 1,
                      keep=body if keep_temp else None)
        if before_commit is not None:
            self._before_commit(before_commit, temp_path)
        self._commit(version, temp_path, summary=summary, keep=body if keep_temp else None, group=group)
        if group is not None:
            failpoints.hit(GROUP_BEFORE_PUBLISH)
        if self.options.commit_ack == "durable":
            self._publish_later(CommitEntry(self.table_path, version, temp_path, complete=False), body)
        else:
            self._publish(version, temp_path, body)

    # ----------------------------------------------------------------- write steps
    def _prepare(self, version: int, temp_path: str, body: bytes, *, written: bool = False,
                 previous_complete: bool = False, keep: bytes | None = None) -> None:
        """Steps 0 and 1 at once: the PUT of the temp file goes out beside the checks. If a check fails, the
        temp file is deleted: no entry names it yet, so nobody needs it. ``written``: the temp file is the
        one a lost attempt of these bytes kept (step 1 is left out, failpoint ``before_reuse_temp``);
        ``previous_complete``: N-1's entry, as the refusal of that attempt returned it, was complete.
        ``keep``: when N.json exists already (the version was taken before our check), the temp file is
        kept for the next attempt, with the entries of N and after it read (one Query) for the caller to
        judge."""
        if written:
            putting = None
            failpoints.hit(WRITE_BEFORE_REUSE_TEMP)
        else:
            putting = pool.submit(self._put_temp_step, temp_path, body)
        try:
            if previous_complete:
                self._check(version, previous_complete=True)
            else:
                self._check(version)
            if putting is not None:
                putting.result()
        except VersionExistsError as taken:
            if putting is not None:
                pool.wait_quietly(putting)
            kept = self._keep_after_check(version, temp_path, putting, keep) if keep is not None else None
            if kept is None:
                self._discard_temp(temp_path)
                raise
            self._raise_taken(version, kept.lost_to, kept)
        except Exception:
            if putting is not None:
                pool.wait_quietly(putting)  # the PUT must be over before its file is deleted
            self._discard_temp(temp_path)  # an unclear PUT may have landed
            raise

    def _keep_after_check(self, version: int, temp_path: str, putting: Future | None, body: bytes) -> KeptTemp | None:
        """N.json exists: keep our temp file (if its PUT succeeded) for the next version, with N's entry, so
        that the caller judges N as if our put had been refused; None (the temp file goes) when N's entry
        cannot be read or there is none (a writer that bypassed DynamoDB wrote N.json: read it)."""
        if putting is not None and (putting.exception() is not None):
            return None
        try:
            found = self._entries_from(version)
        except (DynacommitError, OSError) as exc:
            log.debug("version %d of %s is taken; reading its entry failed (%s)", version, self.table_path, exc)
            return None
        # the entries from N on, as long as they follow one another (a gap: someone bypassed DynamoDB)
        winners: list[CommitEntry] = []
        for entry in found:
            if entry.version != version + len(winners):
                break
            winners.append(entry)
        if not winners:
            return None
        kept = KeptTemp(self, temp_path, body, winners[-1], winners)
        failpoints.hit(WRITE_AFTER_KEEP_TEMP)
        return kept

    def _before_commit(self, before_commit: Callable[[], object], temp_path: str) -> None:
        """The caller's last word before step 2; if it fails, the temp file goes as after a failed check."""
        try:
            before_commit()
        except Exception:
            self._discard_temp(temp_path)
            raise

    def _put_temp_step(self, temp_path: str, body: bytes) -> None:
        failpoints.hit(WRITE_BEFORE_PUT_TEMP)
        self._put_temp(temp_path, body)
        failpoints.hit(WRITE_AFTER_PUT_TEMP)

    def _check(self, version: int, *, previous_complete: bool = False) -> None:
        """Step 0: N.json must not exist; N-1 must be complete (recovered if needed). The HEAD and the read
        of N-1's entry go out together. A stuck N-1 is marked or abandoned, and the write fails with
        VersionNotFoundError: the caller must re-read (N-1 is free, or will be after the grace period)."""
        final = pool.submit(self.objects.head, self.commit_key(version))
        # N-1.json exists and holds our bytes, and our UpdateItem marked its entry complete: nothing to read.
        # That UpdateItem is waited for (it is usually over); if it failed, N-1's entry is read and finished
        # as anyone's would be, so that no entry but the newest is ever left without expireTime.
        # So does an N-1 whose entry was complete when our put for N-1 was refused with it: complete means
        # N-1.json exists (every writer marks an entry complete only after N-1.json exists).
        ours = version > 0 and (previous_complete or
                                PUBLISHED.completed(self.scope, version - 1, timeout=deadline.remaining(None)))
        previous = self._get_entry(version - 1) if version > 0 and not ours else None
        if final.result() is not None:
            raise VersionExistsError(self.table_path, version)
        if version == 0 or ours:
            return
        if previous is not None:
            if not previous.complete:
                outcome = self._recover_entry(previous, abandon=True)
                if outcome in _STUCK_OUTCOMES:
                    raise VersionNotFoundError(
                        f"cannot write version {version} of table {self.table_path}: "
                        f"{self._stuck_message(previous, outcome)}; read the table's latest version again"
                    )
            return
        if self.objects.head(self.commit_key(version - 1)) is None:
            raise VersionNotFoundError(
                f"cannot write version {version} of table {self.table_path}: version {version - 1} does not "
                f"exist; versions are written in order; read the table's latest version and write the next"
            )

    def _commit(self, version: int, temp_path: str, *, summary: str | None = None, keep: bytes | None = None,
                group: GroupClaim | None = None) -> None:
        """Step 2: the conditional put. Returns when N is ours; raises VersionExistsError when it is not.

        Only a refusal the server provably did not apply (:func:`provably_refused`) is definite. A failed
        condition or any other failure is settled by reading the entry back: an earlier attempt of ours,
        retried by the SDK or by this loop, may be what holds the version. When the entry holding N is
        stuck (its content lost), it is marked, abandoned once its grace period is over (this writer waits
        for that), and the put is tried again. When nothing can be settled the commit's state is unknown and
        nothing is cleaned up.
        """
        entry = CommitEntry(self.table_path, version, temp_path, complete=False, summary=summary)
        uncertain = False  # an earlier attempt may have landed
        for attempt in range(RESOLVE_ATTEMPTS):
            try:
                failpoints.hit(WRITE_BEFORE_PUT_ENTRY)
                if group is None:
                    self._put_entry(entry)
                else:
                    failpoints.hit(GROUP_BEFORE_TRANSACTION)
                    self._put_entry_group(entry, group)
                    failpoints.hit(GROUP_AFTER_TRANSACTION)  # inside: a "raise" here is a lost answer
                failpoints.hit(WRITE_AFTER_PUT_ENTRY)  # inside: a "raise" here is a lost answer
                return
            except GroupChanged as changed:
                # Refused for an item, not for N: nothing applied, unless an earlier attempt of ours was.
                if uncertain or changed.retried:
                    owner = self._resolve_owner(version, changed)
                    if owner is not None and owner.temp_path == temp_path:
                        return
                self._discard_temp(temp_path)
                raise
            except ConditionFailed as failed:
                # The owner usually comes with the refusal (ALL_OLD); read it only when it did not.
                owner = failed.owner if isinstance(failed.owner, CommitEntry) else None
                cause: Exception = failed
                if owner is None:
                    owner = self._resolve_owner(version, cause)
            except DynacommitError as exc:
                if not uncertain and provably_refused(exc):
                    self._discard_temp(temp_path)  # refused outright (validation, access): nothing was written
                    raise
                cause = exc  # no answer, a 5xx, throttling, an answer after retries: it may have landed
                owner = self._resolve_owner(version, cause)
            if owner is not None and owner.temp_path == temp_path:
                return
            if owner is None:
                uncertain = True
                log.info("commit put of %s v%d did not land (%s); trying again", self.table_path, version, cause)
                self._pause_uncertain(version, 0.05 * 2**attempt, cause)
                continue
            if not owner.complete and self._content_lost(owner):
                try:
                    outcome = self._settle_stuck(owner, abandon=True, wait=True)
                except DeadlineExceededError:
                    self._discard_temp(temp_path)
                    raise
                if outcome is RecoveryOutcome.ABANDONED:
                    continue  # N is free again: put ours
            # Lost: no entry names our temp file. It is kept for the caller's next attempt when asked
            # (``keep``), else its DELETE is not waited for, so that the caller reads the winners and
            # tries the next version a round trip sooner; nor is the mark telling the winner that a writer
            # waits for the table.
            finishing = []
            kept = None
            if keep is not None:
                kept = KeptTemp(self, temp_path, keep, owner)
                failpoints.hit(WRITE_AFTER_KEEP_TEMP)
            else:
                finishing.append(pool.submit(self._discard_temp, temp_path))
            if not owner.complete and owner.waiting_since is None:
                finishing.append(pool.submit(self._note_waiting, owner))
            PUBLISHED.finishing(self.scope, finishing)
            self._raise_taken(version, owner, kept)
        raise CommitStateUnknownError(
            self.table_path, version,
            f"could not commit version {version} of table {self.table_path}: the external store did not "
            f"answer clearly after {RESOLVE_ATTEMPTS} attempts, and the entry was not there when read back; "
            f"an earlier attempt may still land: nothing was cleaned up; check `dynacommit history`",
        )

    def _pause_uncertain(self, version: int, seconds: float, cause: Exception) -> None:
        """Back off before trying the put again, when an earlier attempt may have landed: running out of
        time here leaves the commit's state unknown."""
        try:
            deadline.sleep(seconds)
        except DeadlineExceededError as exc:
            raise CommitStateUnknownError(
                self.table_path, version,
                f"the commit of version {version} of table {self.table_path} may or may not have happened: "
                f"the conditional put got no clear answer ({cause}) and the operation ran out of time "
                f"({exc}); nothing was cleaned up; read the table's history to see whether the commit landed",
            ) from exc

    def _resolve_owner(self, version: int, cause: Exception) -> CommitEntry | None:
        """Read the entry of ``version`` back after a put that failed or got no clear answer."""
        failpoints.hit(WRITE_BEFORE_READ_BACK)
        last: Exception = cause
        for attempt in range(RESOLVE_ATTEMPTS):
            try:
                return self._get_entry(version)
            except DeadlineExceededError as exc:
                last = exc
                break
            except DynacommitError as exc:
                last = exc
            try:
                deadline.sleep(0.05 * 2**attempt)
            except DeadlineExceededError as exc:
                last = exc
                break
        raise CommitStateUnknownError(
            self.table_path, version,
            f"the commit of version {version} of table {self.table_path} may or may not have happened: "
            f"the conditional put got no clear answer ({cause}) and reading the entry back failed ({last}); "
            f"nothing was cleaned up; read the table's history to see whether the commit landed",
        )

    def _raise_taken(self, version: int, owner: CommitEntry | None = None, kept: KeptTemp | None = None) -> None:
        if version == 0:
            try:
                self._check_stale_entries()
            except Exception:
                if kept is not None:
                    kept.discard()
                raise
        taken = VersionExistsError(self.table_path, version)
        taken.winner = owner
        taken.kept = kept
        raise taken

    def _check_stale_entries(self) -> None:
        """Version 0 was taken but 0.json is absent and its entry complete: a table deleted and recreated
        at the same path while its old entries are still in the external store."""
        entry = self._get_entry(0)
        if entry is not None and entry.complete and self.objects.head(self.commit_key(0)) is None:
            raise ConfigurationError(
                f"table {self.table_path} has no 00000000000000000000.json but the external store still holds "
                f"complete entries for it: the table was deleted and recreated at the same path within the "
                f"entries' time to live; delete them with `dynacommit drop-table {self.table_path} --execute` "
                f"(`dynacommit drop-table {self.table_path}` lists them first), or write the new table at "
                f"another path"
            )

    def _publish(self, version: int, temp_path: str, body: bytes) -> None:
        """Steps 3 and 4 (with the temp file dropped in between). The commit is durable already: failures
        here never fail it, except that success is reported only when N.json holds our bytes or our temp
        file is still there (see the module docstring): N.json holding other bytes (a writer that bypassed
        the external store, or one whose stuck entry was abandoned and who published late) fails the write;
        a state we cannot see is CommitStateUnknownError."""
        # Whatever fails from here on (S3, expired credentials, a refused request) must not make the caller
        # believe the commit failed while it is durable, or a retry without an app id writes it twice.
        try:
            copied = self._copy_to_final(version, body)
            failpoints.hit(WRITE_AFTER_COPY_TO_FINAL)
        except Exception as exc:  # noqa: BLE001 - see above
            with deadline.cleanup(f"checking commit {version} of {self.table_path}"):
                self._acknowledge_unpublished(version, temp_path, body, exc)
            return
        if not copied:
            with deadline.cleanup(f"checking commit {version} of {self.table_path}"):
                ours = self._final_is(version, body)
            if not ours:
                self._discard_temp(temp_path)
                self._mark_complete_quietly(version)
                raise self._not_ours(version)
        # N.json holds our bytes: every reader sees the commit. The temp file and the entry's "incomplete"
        # are done with: both go out at once, and the write returns once the temp file is gone (step 4).
        completing = pool.submit(self._mark_complete_later, version)
        PUBLISHED.record(self.scope, version, completing)
        PUBLISHED.finishing(self.scope, [completing])
        self._drop_published_temp(temp_path)

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
            done = self._publish_acknowledged(entry, body, lambda: _resolve(completed, True))
        except BaseException:  # a simulated crash: the next write must not take the entry for done
            _resolve(completed, False)
            raise
        _resolve(completed, done)
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
        return outcome not in _STUCK_OUTCOMES

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

    def _mark_complete_later(self, version: int) -> bool:
        """Step 4's UpdateItem, on the pool, not waited for by ``write``: a cleanup with the cleanup deadline
        of its own (the write's may be spent), which is also the longest an exiting process waits for it.
        Whether the entry is complete now; a failure only logs (the next write of this process, or the next
        writer or reader, finishes the entry)."""
        with deadline.cleanup(f"marking commit {version} of {self.table_path} complete"):
            done = self._mark_complete_quietly(version)
        if version in self.waited_on:
            PUBLISHED.note_waited(self.scope, version)
        return done

    @property
    def scope(self) -> tuple:
        """What tells this table apart from every other in the process (logstore/published.py): its path
        and where its log lives."""
        return self.options, self.table_path

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

    def _drop_published_temp(self, temp_path: str) -> None:
        """Delete the temp file once N.json holds our bytes (before marking complete: see the module
        docstring on delta-rs). A cleanup like any other: with the cleanup deadline of its own, since the
        write's may be spent by now; failures only log."""
        try:
            with deadline.cleanup(f"deleting temp file {temp_path} of {self.table_path}"):
                self.objects.delete([self.temp_key(temp_path)])
            failpoints.hit(WRITE_AFTER_DISCARD_TEMP)
        except (DynacommitError, OSError) as exc:
            log.info("could not delete temp file %s after publishing: %s", temp_path, exc)

    def _final_is(self, version: int, body: bytes) -> bool:
        """Whether N.json holds ``body``. Read up to three times; CommitStateUnknownError if it cannot be read
        (taking it for ours could acknowledge a commit that is not in the log)."""
        last: Exception | None = None
        for attempt in range(3):
            try:
                return self.objects.get(self.commit_key(version)) == body
            except DeadlineExceededError as exc:
                last = exc
                break
            except (DynacommitError, OSError) as exc:
                last = exc
                deadline.sleep(0.05 * 2**attempt)
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

    # ----------------------------------------------------------------- recovery
    def _finish_as_reader(self, entry: CommitEntry) -> RecoveryOutcome | None:
        """Finish an incomplete entry a reader passes, as anyone does; None when this process may not (its
        IAM policy lacks ``s3:PutObject`` to write ``N.json``, or ``dynamodb:UpdateItem`` to mark the entry
        complete): a reader then reads what is published, says so once per process and version, and leaves
        the entry to a writer or ``dynacommit recover``."""
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
        last: Exception | None = None
        for attempt in range(RECOVERY_ATTEMPTS):
            try:
                return self._recover_once(entry, body, marked)
            except _ContentLost:
                return self._settle_stuck(entry, abandon=abandon)
            except (StorageError, OSError) as exc:
                if isinstance(exc, CorruptLogError):
                    raise
                last = exc
                deadline.sleep(0.05 * 2**attempt)
        assert last is not None
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
        temp_key = self.temp_key(entry.temp_path)
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
        elif not published:
            failpoints.hit(RECOVER_BEFORE_COPY)
            published = not self._copy_to_final(entry.version, body)  # 412: written meanwhile
            if not published:
                outcome = RecoveryOutcome.COPIED_AND_COMPLETED
            failpoints.hit(RECOVER_AFTER_COPY)
        if body is not None and published and self.objects.get(final_key) != body:
            self._mark_complete(entry.version)
            self._warn_superseded(entry)
            return RecoveryOutcome.SUPERSEDED
        try:
            newly_marked = self._mark_complete(entry.version)
        except Exception:
            if body is not None:  # the entry stays incomplete: the temp file must not stay beside N.json
                self._discard_temp(entry.temp_path)
            raise
        if not newly_marked and outcome is RecoveryOutcome.COMPLETED:
            outcome = RecoveryOutcome.ALREADY_COMPLETE
        if marked is not None:
            marked()
        if body is not None:
            self._discard_temp(entry.temp_path)
        failpoints.hit(RECOVER_AFTER_MARK_COMPLETE)
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

    # ----------------------------------------------------------------- stuck entries
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

    @staticmethod
    def _check_version(version: int, name: str = "version") -> None:
        if not isinstance(version, int) or isinstance(version, bool):
            raise ArgumentTypeError(f"{name} must be a non-negative int, got {type(version).__name__} {version!r}")
        if version < 0:
            raise InvalidArgumentError(f"{name} must be a non-negative int, got {version!r}")

    @staticmethod
    def _check_body(body: bytes, *, commit: bool) -> bytes:
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(
                f"the body must be bytes (the UTF-8 encoded file), got {type(body).__name__}; encode text with "
                f".encode('utf-8')")
        data = bytes(body)
        if commit and not data:
            raise InvalidArgumentError(
                "the body of a commit must not be empty: a Delta commit holds at least one action (one JSON "
                "object per line)")
        return data

    @staticmethod
    def _check_flag(value: bool, name: str) -> None:
        if not isinstance(value, bool):
            raise ArgumentTypeError(f"{name} must be True or False, got {value!r}")


class _ContentLost(Exception):
    """Raised by ``_recover_once`` for an entry whose temp file and N.json are both gone (stuck)."""

    def __init__(self, entry: CommitEntry):
        super().__init__(f"content of {entry.file_name} lost")
        self.entry = entry


_STUCK_OUTCOMES = frozenset({RecoveryOutcome.STUCK_MARKED, RecoveryOutcome.ABANDONED})
