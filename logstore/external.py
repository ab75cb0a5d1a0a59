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
              logstore/published.py), or when our refused put for N-1 returned N-1's entry complete. After
              a lost race (the kept temp file of our put for N-1) there is no HEAD (the conditional PUT of
              ``N.json`` decides), and an N-1 that was incomplete is read after about one commit's
              finishing time (``Writer._check``, docs/protocol.md "A lost race").
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
              below) is abandoned after its grace period, and the put tried again (a write that keeps its
              temp file looks only at an entry already marked stuck: the next check judges the others).
3. PUBLISH    ``_copy_to_final``: PUT ``N.json`` with If-None-Match (412: someone recovered it already; its
              bytes are compared with ours).
4. FINISH     ``_drop_published_temp`` beside ``_mark_complete``, both on the pool: DELETE the temp file,
              and set ``complete="true"`` and ``expireTime`` if still incomplete. ``write`` returns once
              step 3 answered and waits for neither: finishing is what anyone who finds the entry incomplete
              does anyway (Delta, delta-rs and this module look for ``N.json`` first; this module deletes a
              temp file found beside an ``N.json`` holding the same bytes), and the pair of files beside an
              incomplete entry, which delta-rs 1.5.1-1.6.0 cannot finish (below), lasts until the first of
              the two answers, as long as when ``write`` waited for the DELETE. Both run with the cleanup
              deadline of their own; the process's next write waits for the UpdateItem (and finishes the
              entry itself if it failed), so do its readers that find the entry incomplete, an exiting
              process waits for both at most that long, and ``wait_finished`` waits for them. A process
              that ends without exit handlers leaves at most its newest entry incomplete (and its temp file,
              for the next reader or the sweep), which the next writer or reader finishes.

A lost race costs no extra read (with ``keep_temp``, a version found taken at step 0 costs one Query of
the entries from it on, so that the caller judges them the same way and tries after the newest); every
request count is independent of the table's history.

Acknowledgement (``DYNACOMMIT_COMMIT_ACK``, :attr:`StorageOptions.commit_ack`). With ``published`` (the
default) ``write`` returns after step 3, as above: ``N.json`` holds the commit, so every reader,
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

Where each part lives (one concern per module, the algorithm once; a backend fills in the hooks of
``logstore/entry_store.py``):

==========================  ==============================================================================
``logstore/external.py``    this protocol, and :class:`ExternalLogStore`, the store composed of the parts
``logstore/entry_store.py`` :class:`CommitEntry` and :class:`~logstore.entry_store.EntryStore`, the hooks a
                            backend implements (DynamoDB: ``logstore/dynamodb.py``)
``logstore/steps.py``       the failpoints of every step, attempt counts, the process's own commits
``logstore/writer.py``      steps 0-2 (CHECK, PREPARE, COMMIT), :class:`KeptTemp`
``logstore/publish.py``     steps 3-4 (PUBLISH, FINISH): the one publish path, for writer and recovery alike
``logstore/acknowledge.py`` when ``write`` returns, and what it reports when publishing fails
``logstore/recovery.py``    recovery of an entry its writer did not finish
``logstore/stuck.py``       stuck entries: mark, abandon
``logstore/reads.py``       ``read``, ``latest_version``, ``list_from``, the other files of ``_delta_log/``
``logstore/queued.py``      queued appends of group commit (``logstore/group.py``)
==========================  ==============================================================================
"""

from __future__ import annotations

import math

from logstore.acknowledge import Acknowledgement
from logstore.base import LogStore
from logstore.entry_store import (
    DEFAULT_EXPIRE_SECONDS,
    SUMMARY_MAX_BYTES,
    CommitEntry,
    EntryStore,
    file_name,
    parse_file_name,
)
from logstore.errors import ArgumentTypeError, ConfigurationError, CorruptLogError, InvalidArgumentError
from logstore.objects import ObjectStore
from logstore.options import DEFAULT_STUCK_ENTRY_GRACE_SECONDS, StorageOptions, TableUri
from logstore.publish import Publisher
from logstore.queued import Queueing
from logstore.reads import SIDECARS, Reads
from logstore.recovery import Recovery
from logstore.steps import (
    ABANDON_AFTER_MARK_STUCK,
    ABANDON_BEFORE_DELETE,
    PUBLISHED,
    RECOVER_AFTER_COPY,
    RECOVER_AFTER_MARK_COMPLETE,
    RECOVER_BEFORE_COPY,
    RECOVERY_ATTEMPTS,
    RESOLVE_ATTEMPTS,
    WRITE_AFTER_COPY_TO_FINAL,
    WRITE_AFTER_DISCARD_TEMP,
    WRITE_AFTER_KEEP_TEMP,
    WRITE_AFTER_MARK_COMPLETE,
    WRITE_AFTER_PUT_ENTRY,
    WRITE_AFTER_PUT_TEMP,
    WRITE_BEFORE_PUT_ENTRY,
    WRITE_BEFORE_PUT_TEMP,
    WRITE_BEFORE_READ_BACK,
    WRITE_BEFORE_REUSE_TEMP,
    operation,
)
from logstore.stuck import StuckEntries
from logstore.sweep import DEFAULT_SWEEP_AGE_SECONDS, TempSweepReport, sweep_temp_files
from logstore.writer import KeptTemp, Writer

__all__ = [
    "ABANDON_AFTER_MARK_STUCK",
    "ABANDON_BEFORE_DELETE",
    "DEFAULT_EXPIRE_SECONDS",
    "DEFAULT_STUCK_GRACE_SECONDS",
    "PUBLISHED",
    "RECOVERY_ATTEMPTS",
    "RECOVER_AFTER_COPY",
    "RECOVER_AFTER_MARK_COMPLETE",
    "RECOVER_BEFORE_COPY",
    "RESOLVE_ATTEMPTS",
    "SIDECARS",
    "SUMMARY_MAX_BYTES",
    "WRITE_AFTER_COPY_TO_FINAL",
    "WRITE_AFTER_DISCARD_TEMP",
    "WRITE_AFTER_KEEP_TEMP",
    "WRITE_AFTER_MARK_COMPLETE",
    "WRITE_AFTER_PUT_ENTRY",
    "WRITE_AFTER_PUT_TEMP",
    "WRITE_BEFORE_PUT_ENTRY",
    "WRITE_BEFORE_PUT_TEMP",
    "WRITE_BEFORE_READ_BACK",
    "WRITE_BEFORE_REUSE_TEMP",
    "CommitEntry",
    "EntryStore",
    "ExternalLogStore",
    "KeptTemp",
    "file_name",
    "parse_file_name",
]

#: Seconds an entry found stuck stays marked before it may be abandoned (see the module docstring).
DEFAULT_STUCK_GRACE_SECONDS = DEFAULT_STUCK_ENTRY_GRACE_SECONDS


def _duration(name: str, given: float | None, default: float, *, allow_zero: bool) -> float:
    if given is None:
        return default
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number of seconds, got {given!r}")
    if not math.isfinite(given) or given < 0 or (given == 0 and not allow_zero):
        raise InvalidArgumentError(f"{name} must be a finite number of seconds {'>= 0' if allow_zero else '> 0'}, "
                                   f"got {given!r}")
    return float(given)


class ExternalLogStore(Writer, Acknowledgement, Publisher, Recovery, StuckEntries, Reads, Queueing, EntryStore,
                       LogStore):
    """The algorithm over an :class:`ObjectStore` and the entry hooks of :class:`EntryStore`.

    Subclasses implement the entry hooks (``logstore/entry_store.py``); everything else, including every step
    name in the module docstring, lives once in the parts this class is composed of (the table above).
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


    @property
    def scope(self) -> tuple:
        """What tells this table apart from every other in the process (logstore/published.py): its path
        and where its log lives."""
        return self.options, self.table_path

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


    @operation("sweep_temp_files")
    def sweep_temp_files(self, *, older_than_seconds: float = DEFAULT_SWEEP_AGE_SECONDS,
                         dry_run: bool = False) -> TempSweepReport:
        """Delete the temp files that no unfinished commit needs: those older than ``older_than_seconds``
        (by LastModified; default one hour) that no incomplete entry names, in both layouts
        (``.tmp/N.json.<uuid>``, ``_commit_<uuid>.json.tmp``). ``dry_run`` only reports. Safe while writers
        run; the reasons, and those for the age, are in :mod:`logstore.sweep`. ``dynacommit recover`` runs
        it after recovering the newest entry."""
        self._check_flag(dry_run, "dry_run")
        return sweep_temp_files(self, older_than_seconds=older_than_seconds, dry_run=dry_run)


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

