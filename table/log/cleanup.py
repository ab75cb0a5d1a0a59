"""Log cleanup: the commits and checkpoints that ``delta.logRetentionDuration`` lets go, deleted after a
checkpoint when ``delta.enableExpiredLogCleanup`` is on (the default), as Delta does (its
``MetadataCleanup.cleanUpExpiredLogs`` and ``BufferingLogDeletionIterator``).

A file of ``_delta_log/`` (a commit ``N.json``, a checkpoint part, a ``N.crc``) is deleted when all of this
holds:

1. ``_last_checkpoint`` names a checkpoint, of version C; the file's version is below C (the files of the
   newest checkpoint's version and after it are never touched);
2. a complete checkpoint follows the file in the log, at or below C: the file is needed by no version
   that can still be read (every version from that checkpoint on is read from it and the commits after
   it). Files are taken in the log's order and let go a checkpoint at a time;
3. the file is older than the cutoff, ``now - delta.logRetentionDuration`` truncated to the start of its
   day (UTC), judged by modification times made increasing with the version (a file no newer than the
   one before it counts as one millisecond newer than that one, so that time travel by timestamp keeps
   resolving to the same version). Of the files let go by one checkpoint, all go or none: none when the
   last of them is younger than the cutoff.

Time travel to a version whose files are gone raises VersionNotFoundError naming the oldest readable
version. The DynamoDB entries of deleted commits are left to their TTL (a day).

A log store remembers, in this process, the time of the oldest commit its last cleanup found (when that
cleanup stopped at it, deleting nothing): until the cutoff reaches that time no file can have expired (the
log only grows at its end, with newer files), so the next checkpoints send no LIST. A checkpoint every ten
commits of a long-lived writer would otherwise list the first page of the log (up to 1,000 names) each time.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from logstore.base import LogStore
from table.log.properties import expired_log_cleanup, log_retention_ms

__all__ = ["cleanup_expired_logs", "cutoff_ms", "earliest_readable_version"]

log = logging.getLogger(__name__)

_LOG_FILE = re.compile(r"^(\d{20})\.(json|crc|checkpoint\.parquet|checkpoint\.(\d{10})\.(\d{10})\.parquet"
                       r"|checkpoint\.[0-9a-fA-F]{8}-[0-9a-fA-F-]{27}\.(?:json|parquet))$")
"""Commits, ``.crc`` files and checkpoints: classic, multi-part, and UUID-named (V2; a V2 checkpoint counts
as one part, its sidecars in ``_sidecars/`` are left)."""


@dataclass(frozen=True)
class _File:
    name: str
    version: int
    modified_ms: int
    checkpoint_parts: int | None  # 1 for a classic checkpoint, n for a part of n; None for a commit or .crc
    part: int = 0


def cutoff_ms(configuration, now_ms: int) -> int:
    """``now - delta.logRetentionDuration``, truncated to the start of its day (UTC), as Delta does."""
    moment = dt.datetime.fromtimestamp((now_ms - log_retention_ms(configuration)) / 1000, tz=dt.timezone.utc)
    return int(moment.replace(hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


_OLDEST_COMMIT_MS: weakref.WeakKeyDictionary[LogStore, int] = weakref.WeakKeyDictionary()
"""Per log store: the modification time of the first file of its log, a commit, as the last cleanup that
deleted nothing found it (module docstring)."""


def cleanup_expired_logs(log_store: LogStore, configuration, *, checkpoint_version: int, now_ms: int) -> list[str]:
    """Delete the expired log files of the table (see the module docstring) whose ``_last_checkpoint`` names
    the checkpoint of ``checkpoint_version``; their names. Nothing when the table turned cleanup off, or
    when the oldest commit this log store saw is younger than the cutoff (no LIST then)."""
    if not expired_log_cleanup(configuration):
        return []
    cutoff = cutoff_ms(configuration, now_ms)
    oldest = _OLDEST_COMMIT_MS.get(log_store)
    if oldest is not None and oldest > cutoff:
        return []
    seen: list[_File] = []

    def first_seen(files: Iterator[_File]) -> Iterator[_File]:
        for file in files:
            if not seen:
                seen.append(file)
            yield file

    doomed = _expired(first_seen(_log_files(log_store, stop_after=checkpoint_version)), cutoff,
                      max_version=checkpoint_version - 1)
    if not doomed and seen and seen[0].checkpoint_parts is None and seen[0].modified_ms > cutoff:
        _OLDEST_COMMIT_MS[log_store] = seen[0].modified_ms
    else:
        _OLDEST_COMMIT_MS.pop(log_store, None)
    if doomed:
        log_store.delete_files(doomed)
        log.info("log cleanup of %s: deleted %d commit and checkpoint files below version %d older than the "
                 "retention", log_store.table_path, len(doomed), checkpoint_version)
    return doomed


def _log_files(log_store: LogStore, *, stop_after: int) -> Iterator[_File]:
    """The commits, checkpoint parts and ``.crc`` files up to version ``stop_after``, in the log's order
    (listed page by page, as far as the caller reads)."""
    for info in log_store.list_files():
        match = _LOG_FILE.match(info.name)
        if match is None:
            continue
        version = int(match.group(1))
        if version > stop_after:
            break
        kind = match.group(2)
        if kind.startswith("checkpoint"):
            parts = int(match.group(4)) if match.group(4) else 1
            part = int(match.group(3)) if match.group(3) else 1
            yield _File(info.name, version, info.last_modified_ms, parts, part)
        else:
            yield _File(info.name, version, info.last_modified_ms, None)


def _expired(files: Iterable[_File], cutoff: int, *, max_version: int) -> list[str]:
    """Delta's checkpoint-gated deletion over ``files`` in log order (module docstring, rules 2 and 3).

    Stops at the first commit newer than the cutoff: times only grow along the log (as adjusted), so every
    later run of files ends past the cutoff and stays. The listing, and so the cost, ends with the expired
    files: one page when none has expired."""
    doomed: list[str] = []
    buffer: list[_File] = []
    parts: dict[tuple[int, int], list[_File]] = {}
    last_version, last_time = -1, None

    def flush() -> None:
        if buffer and buffer[-1].modified_ms <= cutoff and buffer[-1].version <= max_version:
            doomed.extend(f.name for f in buffer)
        buffer.clear()

    for file in files:
        adjusted = last_time + 1 if (last_time is not None and file.version > last_version
                                     and file.modified_ms <= last_time) else file.modified_ms
        if file.checkpoint_parts is None and adjusted > cutoff:
            break  # it would end every later run of files, and it and all after it are past the cutoff
        if last_time is not None and file.version > last_version and file.modified_ms <= last_time:
            file = _File(file.name, file.version, last_time + 1, file.checkpoint_parts, file.part)
            buffer.append(file)
        elif file.checkpoint_parts is not None:
            seen = parts.setdefault((file.version, file.checkpoint_parts), [])
            seen.append(file)
            if len(seen) == file.checkpoint_parts:  # a complete checkpoint: what came before it may go
                flush()
                buffer.extend(seen)
                del parts[(file.version, file.checkpoint_parts)]
        else:
            buffer.append(file)
        last_version, last_time = file.version, file.modified_ms
    return doomed


def earliest_readable_version(log_store: LogStore) -> int | None:
    """The oldest version that can still be read: 0 while commit 0 exists, otherwise the oldest complete
    checkpoint's version (what log cleanup left); None when the log holds neither."""
    checkpoints: dict[tuple[int, int], set[int]] = {}
    for info in log_store.list_files():
        match = _LOG_FILE.match(info.name)
        if match is None:
            continue
        version, kind = int(match.group(1)), match.group(2)
        if kind == "json" and version == 0:
            return 0
        if kind.startswith("checkpoint"):
            parts = int(match.group(4)) if match.group(4) else 1
            seen = checkpoints.setdefault((version, parts), set())
            seen.add(int(match.group(3)) if match.group(3) else 1)
            if len(seen) == parts:
                return version
    return None
