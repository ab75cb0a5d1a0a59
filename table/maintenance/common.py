"""What every maintenance operation needs: the table it works on, checked ages, the newest snapshot."""

from __future__ import annotations

import math
from typing import Protocol as TypingProtocol

from logstore import ObjectStore, TableUri
from logstore.errors import InvalidArgumentError, TableNotFoundError
from table.errors import ReadOnlySnapshotError
from table.log.snapshot import Snapshot

__all__ = ["HOUR_MS", "MAX_HOURS", "Maintained", "check_hours", "newest_snapshot"]

MAX_HOURS = 876_000.0
"""100 years: the largest age maintenance accepts (larger ones are typing mistakes, and ``inf`` has no cutoff)."""
HOUR_MS = 3_600_000


class Maintained(TypingProtocol):
    """What maintenance needs of a :class:`table.table.Table`."""

    @property
    def uri(self) -> TableUri: ...

    @property
    def objects(self) -> ObjectStore: ...

    @property
    def snapshot(self) -> Snapshot | None: ...


def check_hours(name: str, hours: float) -> float:
    """``hours`` if it is a finite number of hours from 0 to :data:`MAX_HOURS`; else InvalidArgumentError
    naming ``name``."""
    if isinstance(hours, bool) or not isinstance(hours, (int, float)):
        raise InvalidArgumentError(f"{name} must be a number of hours, got {hours!r}")
    if not math.isfinite(hours) or not 0 <= hours <= MAX_HOURS:
        raise InvalidArgumentError(
            f"{name} must be a number of hours from 0 to {MAX_HOURS:g} (100 years), got {hours}")
    return float(hours)


def newest_snapshot(table: Maintained, operation: str) -> Snapshot:
    """The snapshot ``operation`` works on: the table must exist and not be pinned to an older version."""
    snapshot = table.snapshot
    if snapshot is None:
        raise TableNotFoundError(f"no table at {table.uri.table_path}: nothing to {operation}")
    if snapshot.time_travel:
        raise ReadOnlySnapshotError(f"this Table is pinned to version {snapshot.version}; {operation} runs on the "
                                    f"newest version: open the table without a version")
    return snapshot
