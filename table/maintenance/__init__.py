"""Maintenance of tables: removing what failed or superseded writes leave behind.

- :mod:`table.maintenance.vacuum`: data files no version within the retention needs;
- :mod:`table.maintenance.uploads`: incomplete multipart uploads of writers that never committed;
- :mod:`table.maintenance.optimize`: small files compacted into bigger ones, without changing data.
"""

from table.maintenance.common import MAX_HOURS
from table.maintenance.optimize import (
    DEFAULT_TARGET_SIZE,
    OptimizeReport,
    optimize,
    plan_compaction,
)
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

__all__ = ["DEFAULT_TARGET_SIZE", "MAX_HOURS", "MIN_RETENTION_HOURS", "AbortReport", "OptimizeReport", "VacuumFile",
           "VacuumReport", "abort_pending_uploads", "list_pending_uploads", "optimize", "plan_compaction",
           "upload_to_dict", "vacuum"]
