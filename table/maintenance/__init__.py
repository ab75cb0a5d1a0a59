"""Maintenance of tables: removing what failed or superseded writes leave behind.

- :mod:`table.maintenance.vacuum`: data files no version within the retention needs;
- :mod:`table.maintenance.uploads`: incomplete multipart uploads of writers that never committed.

Compaction (``OPTIMIZE``) is an operation that commits like the others: :mod:`table.operations.optimize`.
"""

from table.maintenance.common import MAX_HOURS
from table.maintenance.uploads import (
    AbortReport,
    abort_pending_uploads,
    list_pending_uploads,
    upload_to_dict,
)
from table.maintenance.vacuum import (
    MIN_RETENTION_HOURS,
    VacuumFile,
    VacuumReport,
    vacuum,
)

__all__ = ["MAX_HOURS", "MIN_RETENTION_HOURS", "AbortReport", "VacuumFile", "VacuumReport", "abort_pending_uploads",
           "list_pending_uploads", "upload_to_dict", "vacuum"]
