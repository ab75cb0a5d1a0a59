"""Time travel by timestamp: the version a table was at a given moment, by Delta's rules.

A version's *commit timestamp* is, as delta-spark's ``DeltaHistoryManager`` defines it:

- the ``inCommitTimestamp`` of its ``commitInfo`` when the table has in-commit timestamps
  (``delta.enableInCommitTimestamps``) and the version is at or after their enablement
  (``delta.inCommitTimestampEnablementVersion``, version 0 when enabled at creation);
- otherwise the modification time of its ``N.json``, made strictly increasing: a version whose file
  time is not after its predecessor's counts as one millisecond after it (clocks of different writers,
  and S3's one-second granularity elsewhere, would otherwise make the order of versions and times
  disagree).

The table "as of" a moment T is the newest version whose commit timestamp is at or before T; a moment
after the newest commit gives the newest version, as deltalake does; a moment before the earliest
version still in the log is an error naming both (Delta's). A range that *starts* at T (the change data
feed's ``starting_timestamp``, a stream's ``startingTimestamp``) starts at the first version committed at
or after T instead: :func:`first_at_or_after`. Costs one listing of ``_delta_log/`` and, with in-commit
timestamps, a binary search reading O(log n) commits.
"""

from __future__ import annotations

import bisect
import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence

from logstore.base import LogStore
from logstore.errors import ArgumentTypeError, InvalidArgumentError, TableNotFoundError, VersionNotFoundError
from table.log.actions import Action, CommitInfo
from table.log.snapshot import Snapshot, read_commit

__all__ = ["as_epoch_ms", "commit_timestamps", "first_at_or_after", "version_at"]

_COMMIT = re.compile(r"^(\d{20})\.json$")
ICT_ENABLED = "delta.enableInCommitTimestamps"
ICT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"


def as_epoch_ms(moment: object) -> int:
    """Milliseconds since the epoch of a ``datetime`` (a naive one is UTC), a ``date`` (its midnight UTC) or
    an ISO-8601 string (``2026-11-25``, ``2026-11-25T10:00:00Z``, ``2026-11-25 10:00:00+01:00``)."""
    if isinstance(moment, str):
        text = moment.strip()
        try:
            moment = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            raise InvalidArgumentError(f"timestamp {text!r} is not ISO-8601; write it like 2026-11-25T10:00:00Z") \
                from None
    if isinstance(moment, dt.datetime):
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)
        return int(aware.timestamp() * 1000)
    if isinstance(moment, dt.date):
        return int(dt.datetime(moment.year, moment.month, moment.day, tzinfo=dt.timezone.utc).timestamp() * 1000)
    raise ArgumentTypeError(f"timestamp must be a datetime, a date or an ISO-8601 string, got "
                            f"{type(moment).__name__} {moment!r}")


def _show(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")


def _file_times(log_store: LogStore) -> tuple[list[int], list[int]]:
    """Versions in the log and their file modification times, made strictly increasing."""
    versions, times = [], []
    for info in log_store.list_files():
        found = _COMMIT.match(info.name)
        if found is None:
            continue
        versions.append(int(found.group(1)))
        stamp = info.last_modified_ms
        if times and stamp <= times[-1]:
            stamp = times[-1] + 1
        times.append(stamp)
    return versions, times


def _ict_start(configuration: Mapping[str, str | None]) -> int | None:
    """The first version with in-commit timestamps, or None when the table has none (``configuration``: the
    newest version's)."""
    if (configuration.get(ICT_ENABLED) or "").lower() != "true":
        return None
    raw = configuration.get(ICT_VERSION)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def _in_commit_timestamp(log_store: LogStore, version: int, actions: Sequence[Action] | None = None) -> int:
    actions = read_commit(log_store, version) if actions is None else actions
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    stamp = None if info is None else info.in_commit_timestamp
    if not isinstance(stamp, int):
        raise VersionNotFoundError(f"version {version} of table {log_store.table_path} has no inCommitTimestamp, "
                                   f"though the table enables in-commit timestamps from an earlier version")
    return stamp


def commit_timestamps(log_store: LogStore, configuration: Mapping[str, str | None]
                      ) -> Callable[[int, Sequence[Action] | None], int]:
    """``stamp(version, actions=None)``: the commit timestamp of a version (module docstring), in epoch
    milliseconds, from one listing of the log made now; ``configuration`` is the newest snapshot's (it says
    whether and from when the table has in-commit timestamps); ``actions`` (the version's, already read)
    spare reading it again for its in-commit timestamp."""
    versions, times = _file_times(log_store)
    by_version = dict(zip(versions, times))
    start = _ict_start(configuration)

    def stamp(version: int, actions: Sequence[Action] | None = None) -> int:
        if start is not None and version >= start:
            return _in_commit_timestamp(log_store, version, actions)
        if version not in by_version:
            raise VersionNotFoundError(f"version {version} of table {log_store.table_path} is not in its log")
        return by_version[version]

    return stamp


def version_at(log_store: LogStore, newest: Snapshot, moment: object) -> int:
    """The version the table was at ``moment`` (see the module docstring). ``newest`` is the table's newest
    snapshot (it says whether and from when the table has in-commit timestamps)."""
    target = as_epoch_ms(moment)
    found, earliest = _at_or_before(log_store, newest, target)
    if found is None:
        raise _before_first(log_store, target, *earliest)
    return found


def first_at_or_after(log_store: LogStore, newest: Snapshot, moment: object) -> int:
    """The first version committed at or after ``moment``: where a range given by its starting timestamp
    starts (Delta's ``DeltaSource`` for ``startingTimestamp``, the change data feed's ``starting_timestamp``).
    A moment before every commit gives the earliest version in the log; one after every commit gives the
    newest version + 1, which callers refuse or read as nothing, each by its own rule."""
    found, earliest = _at_or_before(log_store, newest, as_epoch_ms(moment) - 1)
    return earliest[0] if found is None else found + 1


def _at_or_before(log_store: LogStore, newest: Snapshot, target: int) -> tuple[int | None, tuple[int, int]]:
    """The newest version committed at or before ``target`` (epoch ms), None when every version is after
    it; and the earliest version in the log with its commit timestamp (for the error or the start)."""
    versions, times = _file_times(log_store)
    if not versions:
        raise TableNotFoundError(f"no table at {log_store.table_path}: its log holds no commit")
    start = _ict_start(newest.configuration)
    if start is not None:
        ict_versions = [v for v in versions if v >= start]
        if ict_versions:
            first = _in_commit_timestamp(log_store, ict_versions[0])
            earliest = (versions[0], times[0]) if versions[0] < start else (ict_versions[0], first)
            if target >= first:
                return _search(ict_versions, target, lambda v: _in_commit_timestamp(log_store, v)), earliest
            cut = bisect.bisect_left(versions, start)
            versions, times = versions[:cut], times[:cut]
            if not versions:
                return None, earliest
    index = bisect.bisect_right(times, target) - 1
    return (None if index < 0 else versions[index]), (versions[0], times[0])


def _search(versions: list[int], target: int, stamp: Callable[[int], int]) -> int:
    """The newest of ``versions`` whose stamp is at or before ``target`` (stamps increase with versions;
    the first one is known to be at or before ``target``)."""
    low, high = 0, len(versions) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if stamp(versions[middle]) <= target:
            low = middle
        else:
            high = middle - 1
    return versions[low]


def _before_first(log_store: LogStore, target: int, version: int, stamp: int) -> VersionNotFoundError:
    return VersionNotFoundError(
        f"the timestamp {_show(target)} is before the earliest version available of table {log_store.table_path} "
        f"(version {version}, committed at {_show(stamp)}); use a timestamp at or after {_show(stamp)}")
