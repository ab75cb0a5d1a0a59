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
    VersionNotFoundError,
)
from table.data.jobcommit import CommitResult, TableExistsError
from table.data.write import write_table
from table.errors import (
    AppendOnlyError,
    CommitConflictError,
    DataFileMissingError,
    SchemaMismatchError,
    UnsupportedFeatureError,
    UnsupportedTypeError,
)
from table.log.transaction import CommitRetriesExhaustedError, ReadOnlySnapshotError
from table.table import Table

__all__ = [
    "AppendOnlyError",
    "CommitConflictError",
    "CommitRetriesExhaustedError",
    "CommitResult",
    "CommitStateUnknownError",
    "ConfigurationError",
    "CorruptLogError",
    "DataFileMissingError",
    "DynacommitError",
    "ReadOnlySnapshotError",
    "SchemaMismatchError",
    "StorageError",
    "Table",
    "TableExistsError",
    "TableNotFoundError",
    "UnsupportedFeatureError",
    "UnsupportedTypeError",
    "VersionExistsError",
    "VersionNotFoundError",
    "write_table",
]
