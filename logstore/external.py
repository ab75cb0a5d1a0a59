"""The commit and recovery algorithm, written once; an external store of commit entries fills in hooks.

This is the protocol of Delta's ``S3DynamoDBLogStore`` (reference/delta-dynamodb-protocol.md §2, §3, §6).
Each version N has at most one *entry* in the external store (DynamoDB), keyed by the table path and
``{N:020d}.json``, holding ``tempPath`` (relative to ``_delta_log/``) and ``complete``.

Write N (``write``):

0. CHECK      ``N.json`` must not exist (HEAD). N-1 must be complete: recover it if its entry is not.
1. PREPARE    ``_put_temp``: PUT the body to ``_delta_log/.tmp/{N:020d}.json.{uuid}``.
2. COMMIT     ``_put_entry``: conditional put of ``complete="false"`` if no entry for N exists. This is the
              commit point: success means N is ours forever; a failed condition means N is taken.
              An ambiguous answer (timeout, 5xx, an SDK retry that then failed the condition) is settled
              by reading the entry back: our ``tempPath`` there means we won.
3. PUBLISH    ``_copy_to_final``: PUT ``N.json`` with If-None-Match (412: someone recovered it already).
4. ACKNOWLEDGE ``_mark_complete``: set ``complete="true"`` and ``expireTime`` if still incomplete.

Failures in steps 3-4 never fail the commit: anyone who finds the incomplete entry finishes it.

Recover entry E of version N (``recover``): if ``N.json`` is missing, copy E's temp file there
(conditional PUT), then mark E complete. Both temp layouts resolve: Delta's ``.tmp/N.json.<uuid>`` and
delta-rs's ``_commit_<uuid>.json.tmp``.

Temp files are deleted as soon as ``N.json`` exists, before the entry is marked complete, in both
layouts (``_drop_temp``), by the writer and by recovery. delta-rs 1.5.1-1.6.0 finishes an incomplete
entry with a copy-if-absent of its temp file; finding the temp file *and* ``N.json`` makes that copy
fail with "already exists", which delta-rs takes for a lost race: it then fails its own load or append
(when the entry was ours) or commits the same transaction again at N+1 (when it was its own). Nobody needs
a temp file once ``N.json`` exists: Delta, delta-rs and this module all look for ``N.json`` first.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from logstore import failpoints
from logstore.aws import ConditionFailed, ObjectNotFound
from logstore.base import LogFile, LogStore, RecoveryOutcome
from logstore.errors import (
    CommitStateUnknownError,
    ConfigurationError,
    CorruptLogError,
    DynacommitError,
    InvalidArgumentError,
    StorageError,
    TableNotFoundError,
    VersionExistsError,
    VersionNotFoundError,
    provably_refused,
)
from logstore.objects import ObjectStore
from logstore.options import TableUri

log = logging.getLogger(__name__)

#: Seconds an entry lives after it is marked complete (DynamoDB TTL on ``expireTime``).
#: Why a day and not seconds: writer B checks that N.json is absent (step 0), then puts the entry for N
#: (step 2). If A's complete entry for N expired in between, B's conditional put succeeds although A
#: already owns N, and B's commit is silently shadowed by A's N.json. The gap between B's steps 0 and 2
#: is milliseconds; a day of TTL makes that interleaving impossible in practice (delta-io/delta#1410).
#: We also check for it (see ``_publish``), but the delay is the first line of defence.
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

_FILE_NAME = re.compile(r"^(\d{20})\.json$")
RECOVERY_ATTEMPTS = 4
STALE_MARGIN_SECONDS = 3600
RESOLVE_ATTEMPTS = 5


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

    @property
    def file_name(self) -> str:
        return file_name(self.version)


class ExternalLogStore(LogStore):
    """The algorithm over an :class:`ObjectStore` and abstract entry hooks.

    Subclasses implement ``_put_entry``, ``_get_entry``, ``_latest_entry`` and ``_complete_entry``;
    everything else, including every step name in the module docstring, lives here once.
    """

    def __init__(self, uri: TableUri, objects: ObjectStore, *, expire_seconds: int = DEFAULT_EXPIRE_SECONDS):
        if expire_seconds < 3600:
            raise ConfigurationError(
                f"expire_seconds={expire_seconds} is too low: entries must outlive any writer's check-to-"
                f"commit window; keep the default of {DEFAULT_EXPIRE_SECONDS} (one day)"
            )
        self.uri = uri
        self.table_path = uri.table_path
        self.objects = objects
        self.expire_seconds = expire_seconds
        self.log_prefix = uri.key("_delta_log/")

    # ----------------------------------------------------------------- hooks for the external store
    def _put_entry(self, entry: CommitEntry) -> None:
        """Create ``entry`` if no entry for its version exists. Raise ConditionFailed if one does,
        AmbiguousError if the outcome is unknown."""
        raise NotImplementedError

    def _get_entry(self, version: int) -> CommitEntry | None:
        """The entry for ``version`` (strongly consistent read), or None."""
        raise NotImplementedError

    def _latest_entry(self) -> CommitEntry | None:
        """The entry with the highest version for this table (strongly consistent), or None."""
        raise NotImplementedError

    def _complete_entry(self, version: int, expire_time: int) -> bool:
        """Set complete and ``expire_time`` if the entry is still incomplete; False if it was already."""
        raise NotImplementedError

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
    def read_file(self, name: str) -> bytes | None:
        try:
            return self.objects.get(self._file_key(name))
        except ObjectNotFound:
            return None

    def write_file(self, name: str, body: bytes, *, if_absent: bool = False) -> bool:
        return self.objects.put(self._file_key(name), body, if_absent=if_absent)

    def list_files(self, *, start_after: str = "") -> Iterator[LogFile]:
        # Temp files live under `.tmp/` ("/" sorts just before "0", so ".tmp0" is past all of them and before
        # every version) or are named `_commit_<uuid>.json.tmp` (delta-rs).
        after = self.log_prefix + max(start_after, ".tmp0")
        for info in self.objects.list(self.log_prefix, start_after=after):
            name = info.key[len(self.log_prefix):]
            if "/" in name or name.endswith(".json.tmp"):
                continue
            yield LogFile(name, info.size, info.last_modified_ms)

    def stat_file(self, name: str) -> LogFile | None:
        info = self.objects.head(self._file_key(name))
        return None if info is None else LogFile(name, info.size, info.last_modified_ms)

    def location(self, name: str = "") -> str:
        return f"{self.uri.scheme}://{self.uri.bucket}/{self.log_prefix}{name}"

    def _file_key(self, name: str) -> str:
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise InvalidArgumentError(f"{name!r} is not the name of a file directly in _delta_log/")
        return self.log_prefix + name

    # ----------------------------------------------------------------- contract
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
        self._recover_entry(entry)
        try:
            return self.objects.get(self.commit_key(version))
        except ObjectNotFound:
            # Log cleanup after a checkpoint deletes old commit files legitimately; whether the version is
            # still needed is the reader's call, so this is "not found", with the cause spelled out.
            raise VersionNotFoundError(
                f"version {version} of table {self.table_path} is marked complete in the external store but "
                f"_delta_log/{file_name(version)} is gone: it was deleted after the commit (log cleanup, or "
                f"behind the log's back)"
            ) from None

    def list_from(self, version: int) -> Iterator[int]:
        self._check_version(version)
        # Starting after the bare digits skips `.tmp/` (it sorts before them) and older versions.
        start_after = self.log_prefix + f"{version:020d}"
        for info in self.objects.list(self.log_prefix, start_after=start_after):
            match = _FILE_NAME.match(info.key[len(self.log_prefix):])
            if match is not None and int(match.group(1)) >= version:
                yield int(match.group(1))

    def latest_version(self, *, start: int = 0) -> int:
        """The newest entry's version, from one Query; S3 is listed only when that answer may be stale.

        The external store's newest entry is a lower bound, not the truth: TTL deletes items in no set
        order, so a table idle for a day may be caught with only older items left. Its answer is taken
        as is when it is at least ``start`` (a version the caller knows exists) and far from expiry;
        otherwise ``_delta_log/`` is listed from the highest known version (one LIST with StartAfter).
        """
        entry = self._latest_entry()
        known = -1
        if entry is not None:
            if not entry.complete:
                self._recover_entry(entry)
            if entry.version >= start and not self._near_expiry(entry):
                return entry.version
            known = entry.version
        latest = max(known, max(self.list_from(max(start, known, 0)), default=-1))
        if latest < 0:
            raise TableNotFoundError(
                f"no table at {self.table_path}: no log entries under {self.log_prefix} and none in the "
                f"external store"
            )
        return latest

    @staticmethod
    def _near_expiry(entry: CommitEntry) -> bool:
        """Whether newer entries than this one may already have expired (completed entries expire in
        version order, a day after completion; an hour of margin covers clock skew and TTL settings)."""
        return entry.expire_time is not None and entry.expire_time < time.time() + STALE_MARGIN_SECONDS

    def recover(self, version: int | None = None) -> RecoveryOutcome:
        entry = self._latest_entry() if version is None else self._get_entry(version)
        if entry is None:
            return RecoveryOutcome.NOTHING_TO_RECOVER
        return self._recover_entry(entry)

    def write(self, version: int, body: bytes, *, overwrite: bool = False) -> None:
        self._check_version(version)
        if overwrite:
            log.warning("writing %s of %s without coordination (overwrite=True)", file_name(version),
                        self.table_path)
            self.objects.put(self.commit_key(version), body)
            return
        self._check(version)
        temp_path = f".tmp/{file_name(version)}.{uuid.uuid4()}"
        failpoints.hit(WRITE_BEFORE_PUT_TEMP)
        self._put_temp(temp_path, body)
        failpoints.hit(WRITE_AFTER_PUT_TEMP)
        self._commit(version, temp_path)
        self._publish(version, temp_path, body)

    # ----------------------------------------------------------------- write steps
    def _check(self, version: int) -> None:
        """Step 0: N.json must not exist; N-1 must be complete (recovered if needed)."""
        if self.objects.head(self.commit_key(version)) is not None:
            raise VersionExistsError(self.table_path, version)
        if version == 0:
            return
        previous = self._get_entry(version - 1)
        if previous is not None:
            if not previous.complete:
                self._recover_entry(previous)
            return
        if self.objects.head(self.commit_key(version - 1)) is None:
            raise VersionNotFoundError(
                f"cannot write version {version} of table {self.table_path}: version {version - 1} does not "
                f"exist; versions are written in order; read the table's latest version and write the next"
            )

    def _commit(self, version: int, temp_path: str) -> None:
        """Step 2: the conditional put. Returns when N is ours; raises VersionExistsError when it is not.

        Only a refusal of the very first request is taken as definite. A failed condition is always
        checked by reading the entry back (one GetItem, only when the race was lost at this step): an
        earlier attempt of ours, retried by the SDK or by this loop, may be what holds the version. After
        any ambiguous answer, every later failure is settled the same way; when it cannot be settled the
        commit's state is unknown and nothing is cleaned up.
        """
        entry = CommitEntry(self.table_path, version, temp_path, complete=False)
        uncertain = False  # an earlier attempt may have landed
        for attempt in range(RESOLVE_ATTEMPTS):
            try:
                failpoints.hit(WRITE_BEFORE_PUT_ENTRY)
                self._put_entry(entry)
                failpoints.hit(WRITE_AFTER_PUT_ENTRY)  # inside: a "raise" here is a lost answer
                return
            except ConditionFailed as failed:
                cause: Exception = failed
            except DynacommitError as exc:
                if not uncertain and provably_refused(exc):
                    self._discard_temp(temp_path)  # refused outright (validation, access): nothing was written
                    raise
                cause = exc  # no answer, a 5xx, throttling, an answer after retries: it may have landed
            owner = self._resolve_owner(version, temp_path, cause)
            if owner == "ours":
                return
            if owner == "theirs":
                self._discard_temp(temp_path)
                self._raise_taken(version)
            uncertain = True
            log.info("commit put of %s v%d did not land (%s); trying again", self.table_path, version, cause)
            time.sleep(0.05 * 2**attempt)
        raise CommitStateUnknownError(
            self.table_path, version,
            f"could not commit version {version} of table {self.table_path}: the external store did not "
            f"answer clearly after {RESOLVE_ATTEMPTS} attempts, and the entry was not there when read back; "
            f"an earlier attempt may still land: nothing was cleaned up; check `dynacommit history`",
        )

    def _resolve_owner(self, version: int, temp_path: str, cause: Exception) -> str:
        """Read the entry back after an unclear put: 'ours', 'theirs' or 'absent'."""
        last: Exception = cause
        for attempt in range(RESOLVE_ATTEMPTS):
            try:
                entry = self._get_entry(version)
            except DynacommitError as exc:
                last = exc
                time.sleep(0.05 * 2**attempt)
                continue
            if entry is None:
                return "absent"
            return "ours" if entry.temp_path == temp_path else "theirs"
        raise CommitStateUnknownError(
            self.table_path, version,
            f"the commit of version {version} of table {self.table_path} may or may not have happened: "
            f"the conditional put got no clear answer ({cause}) and reading the entry back failed ({last}); "
            f"nothing was cleaned up; read the table's history to see whether the commit landed",
        )

    def _raise_taken(self, version: int) -> None:
        if version == 0:
            self._check_stale_entries()
        raise VersionExistsError(self.table_path, version)

    def _check_stale_entries(self) -> None:
        """Version 0 was taken but 0.json is absent and its entry complete: a table deleted and recreated
        at the same path while its old entries are still in the external store."""
        entry = self._get_entry(0)
        if entry is not None and entry.complete and self.objects.head(self.commit_key(0)) is None:
            raise ConfigurationError(
                f"table {self.table_path} has no 00000000000000000000.json but the external store still holds "
                f"complete entries for it: the table was deleted and recreated at the same path within the "
                f"entries' time to live; delete the DynamoDB items with tablePath={self.table_path!r}, or "
                f"write the new table at another path"
            )

    def _publish(self, version: int, temp_path: str, body: bytes) -> None:
        """Steps 3 and 4 (with the temp file dropped in between). The commit is durable already: failures
        here are logged, never raised, except when N.json turns out to hold somebody else's bytes (an
        uncoordinated writer)."""
        # The commit is durable: whatever fails from here on (S3, expired credentials, a refused request)
        # must not make the caller believe it failed, or a retry without an app id writes it twice.
        try:
            copied = self._copy_to_final(version, body)
            failpoints.hit(WRITE_AFTER_COPY_TO_FINAL)
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("commit %s v%d is durable, but writing %s failed (%s); the next reader finishes it",
                        self.table_path, version, file_name(version), exc)
            return
        if not copied and self._final_differs(version, body):
            self._mark_complete_quietly(version)
            raise VersionExistsError(
                self.table_path, version,
                f"version {version} of table {self.table_path} was written by a writer that bypassed the "
                f"DynamoDB table (an S3-only or misconfigured writer): our commit is not in the log. Make "
                f"every writer of this table use the same DynamoDB table and the same table URI spelling",
            )
        self._drop_published_temp(temp_path)
        self._mark_complete_quietly(version)

    def _drop_published_temp(self, temp_path: str) -> None:
        """Delete the temp file once N.json holds our bytes (before marking complete: see the module
        docstring on delta-rs); failures only log."""
        try:
            self.objects.delete([self.temp_key(temp_path)])
            failpoints.hit(WRITE_AFTER_DISCARD_TEMP)
        except (DynacommitError, OSError) as exc:
            log.info("could not delete temp file %s after publishing: %s", temp_path, exc)

    def _final_differs(self, version: int, body: bytes) -> bool:
        try:
            return self.objects.get(self.commit_key(version)) != body
        except Exception as exc:  # noqa: BLE001 - after the commit point; see _publish
            # Nearly always a reader that finished our entry first; only an uncoordinated writer differs.
            log.warning("commit %s v%d: %s already existed and could not be read back to compare (%s); "
                        "taking it to be ours", self.table_path, version, file_name(version), exc)
            return False

    def _mark_complete_quietly(self, version: int) -> None:
        try:
            self._mark_complete(version)
            failpoints.hit(WRITE_AFTER_MARK_COMPLETE)
        except Exception as exc:  # noqa: BLE001 - after the commit point; see _publish
            log.warning("commit %s v%d is durable, but marking it complete failed (%s); the next reader "
                        "finishes it", self.table_path, version, exc)

    def _discard_temp(self, temp_path: str) -> None:
        """Delete a temp file nobody needs (a lost race's, or one whose N.json exists); failures only log
        (a reader without s3:DeleteObject must still be able to finish an entry)."""
        try:
            self.objects.delete([self.temp_key(temp_path)])
        except (DynacommitError, OSError) as exc:
            log.info("could not delete unused temp file %s: %s", temp_path, exc)

    # ----------------------------------------------------------------- recovery
    def _recover_entry(self, entry: CommitEntry) -> RecoveryOutcome:
        if entry.complete:
            return RecoveryOutcome.ALREADY_COMPLETE
        last: Exception | None = None
        for attempt in range(RECOVERY_ATTEMPTS):
            try:
                return self._recover_once(entry)
            except (StorageError, OSError) as exc:
                if isinstance(exc, CorruptLogError):
                    raise
                last = exc
                time.sleep(0.05 * 2**attempt)
        assert last is not None
        raise StorageError(
            f"could not finish the incomplete entry for version {entry.version} of table {self.table_path} "
            f"after {RECOVERY_ATTEMPTS} attempts: {last}; retry later or run `dynacommit recover`",
            operation="recover", retryable=True,
        ) from last

    def _recover_once(self, entry: CommitEntry) -> RecoveryOutcome:
        final_key = self.commit_key(entry.version)
        temp_key = self.temp_key(entry.temp_path)
        outcome = RecoveryOutcome.COMPLETED
        if self.objects.head(final_key) is None:
            try:
                body = self.objects.get(temp_key)
            except ObjectNotFound:
                body = None
            if body is None:
                # delta-rs moves its temp file: it may have been renamed into place meanwhile.
                if self.objects.head(final_key) is None:
                    raise CorruptLogError(
                        f"version {entry.version} of table {self.table_path} was won (DynamoDB entry "
                        f"{entry.file_name}, tempPath {entry.temp_path!r}) but never written out, and its temp "
                        f"file _delta_log/{entry.temp_path} is gone (an S3 lifecycle rule or an aborted "
                        f"writer removed it): the commit's content is lost. Readers stop at version "
                        f"{entry.version - 1}. If no writer is still running that commit, delete the item "
                        f"(tablePath={self.table_path!r}, fileName={entry.file_name!r}) from the DynamoDB "
                        f"table so version {entry.version} can be written again"
                    )
            else:
                failpoints.hit(RECOVER_BEFORE_COPY)
                if self._copy_to_final(entry.version, body):
                    outcome = RecoveryOutcome.COPIED_AND_COMPLETED
                failpoints.hit(RECOVER_AFTER_COPY)
        self._discard_temp(entry.temp_path)
        if not self._mark_complete(entry.version) and outcome is RecoveryOutcome.COMPLETED:
            outcome = RecoveryOutcome.ALREADY_COMPLETE
        failpoints.hit(RECOVER_AFTER_MARK_COMPLETE)
        return outcome

    def _check_version(self, version: int) -> None:
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValueError(f"version must be a non-negative int, got {version!r}")
