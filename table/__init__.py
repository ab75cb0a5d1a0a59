"""Delta tables on S3 written by many processes at once, coordinated through DynamoDB.

    from table import Table, write_table
    write_table("s3://bucket/events", data, mode="append")
    Table("s3://bucket/events").to_pyarrow_table()

Every error is a :class:`DynacommitError`; the ones a user meets are exported here.
"""

from __future__ import annotations

from logstore.errors import (
    CommitStateUnknownError,
    ConfigurationError,
    CorruptLogError,
    DynacommitError,
    StorageError,
    TableNotFoundError,
    VersionExistsError,
)
from table.errors import CommitConflictError, SchemaMismatchError, UnsupportedFeatureError
from table.table import Table
from table.write import CommitResult, write_table

__all__ = [
    "CommitConflictError",
    "CommitResult",
    "CommitStateUnknownError",
    "ConfigurationError",
    "CorruptLogError",
    "DynacommitError",
    "SchemaMismatchError",
    "StorageError",
    "Table",
    "TableNotFoundError",
    "UnsupportedFeatureError",
    "VersionExistsError",
    "write_table",
]
