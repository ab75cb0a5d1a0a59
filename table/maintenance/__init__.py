"""Maintenance of tables: removing what failed or superseded writes leave behind.

- :mod:`table.maintenance.vacuum`: data files no version within the retention needs;
- :mod:`table.maintenance.uploads`: incomplete multipart uploads of writers that never committed.
"""

from table.maintenance.uploads import (
           AbortReport,
           abort_pending_uploads,
           list_pending_uploads,
)
from table.maintenance.vacuum import MIN_RETENTION_HOURS, VacuumReport, vacuum

__all__ = ["MIN_RETENTION_HOURS", "AbortReport", "VacuumReport", "abort_pending_uploads", "list_pending_uploads",
           "vacuum"]
