"""Aborting incomplete multipart uploads that writers left behind (``dynacommit uploads list|abort``).

Tasks that never reported and jobs that never committed leave incomplete uploads under the table: never
visible, but billed. :func:`abort_pending_uploads` aborts those initiated more than ``older_than_hours``
ago (default 24: running jobs keep theirs for hours at most); a dry run unless told otherwise. Aborting
reports its progress to :mod:`table.progress`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from logstore import UploadInfo
from table import progress
from table.maintenance.common import HOUR_MS, Maintained, check_hours

__all__ = ["AbortReport", "abort_pending_uploads", "list_pending_uploads", "upload_to_dict"]


def upload_to_dict(upload: UploadInfo) -> dict[str, Any]:
    """An upload's JSON form (``dynacommit uploads ... --json``): ``initiated`` in milliseconds since the epoch."""
    return {"key": upload.key, "uploadId": upload.upload_id, "initiated": upload.initiated_ms}


@dataclasses.dataclass(frozen=True)
class AbortReport:
    """What :func:`abort_pending_uploads` aborted (or, in a dry run, would abort)."""

    table: str
    dry_run: bool
    older_than_hours: float
    uploads: tuple[UploadInfo, ...]
    remaining: int
    """Pending uploads under the table left alone because they are younger than ``older_than_hours``."""

    @property
    def count(self) -> int:
        return len(self.uploads)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``dynacommit uploads abort --json``)."""
        return {"table": self.table, "dryRun": self.dry_run, "olderThanHours": self.older_than_hours,
                "count": self.count, "remaining": self.remaining,
                "uploads": [upload_to_dict(u) for u in self.uploads]}

    def __str__(self) -> str:
        verb = "would abort" if self.dry_run else "aborted"
        lines = [f"uploads under {self.table}: {verb} {self.count} pending upload(s) older than "
                 f"{self.older_than_hours:g} h; {self.remaining} younger one(s) left alone"]
        lines += [f"  {u.key}  {u.upload_id}" for u in self.uploads]
        if self.dry_run and self.uploads:
            lines.append("dry run: nothing was aborted; pass dry_run=False (CLI: --execute) to abort")
        return "\n".join(lines)


def list_pending_uploads(table: Maintained, *, older_than_hours: float = 0) -> list[UploadInfo]:
    """Incomplete multipart uploads under the table, initiated at least ``older_than_hours`` ago.

    Raises InvalidArgumentError unless ``older_than_hours`` is a number of hours from 0 to 100 years."""
    older_than_hours = check_hours("older_than_hours", older_than_hours)
    cutoff = int(time.time() * 1000 - older_than_hours * HOUR_MS)
    return [u for u in table.objects.list_uploads(table.uri.key("")) if u.initiated_ms <= cutoff]


def abort_pending_uploads(table: Maintained, *, older_than_hours: float = 24, dry_run: bool = True) -> AbortReport:
    """Abort incomplete multipart uploads under the table older than ``older_than_hours``.

    Raises InvalidArgumentError unless ``older_than_hours`` is a number of hours from 0 to 100 years."""
    older_than_hours = check_hours("older_than_hours", older_than_hours)
    cutoff = int(time.time() * 1000 - older_than_hours * HOUR_MS)
    every = table.objects.list_uploads(table.uri.key(""))
    old = [u for u in every if u.initiated_ms <= cutoff]
    if not dry_run and old:
        with progress.task("aborting uploads", total=len(old)) as task:
            for upload in old:
                table.objects.abort_upload(upload.key, upload.upload_id)
                task.advance()
    return AbortReport(table=table.uri.table_path, dry_run=dry_run, older_than_hours=older_than_hours,
                       uploads=tuple(old), remaining=len(every) - len(old))
