"""Delta tables on S3 written by many processes at once, coordinated through DynamoDB.

    from table import Table, write_table
    write_table("s3://bucket/events", data, mode="append")
    Table("s3://bucket/events").to_pyarrow_table()
    Table.create("s3://bucket/empty", schema, partition_by=["day"])  # version 0, no data

Every error is a :class:`DynacommitError`; every public one is exported here (the tree is drawn in
``table/errors.py`` and ``logstore/errors.py``).
"""

from __future__ import annotations

from logstore.errors import (
    AccessDeniedError,
    AmbiguousError,
    ArgumentTypeError,
    CommitStateUnknownError,
    ConfigurationError,
    CorruptLogError,
    DeadlineExceededError,
    DynacommitError,
    InvalidArgumentError,
    StorageError,
    TableNotFoundError,
    ThrottledError,
    VersionExistsError,
    VersionNotFoundError,
)
from table.data.write import write_table
from table.data.writespec import CommitResult
from table.errors import (
    AppendOnlyError,
    ChangeCommitError,
    CommitConflictError,
    CommitTimeoutError,
    ConflictKind,
    ConstraintViolationError,
    CorruptDataError,
    DataFileMissingError,
    MergeCardinalityError,
    PendingSetError,
    ReadOnlySnapshotError,
    SchemaMismatchError,
    SparkJobError,
    TableExistsError,
    UnsupportedFeatureError,
    UnsupportedTypeError,
)
from table.operations.create import create_table
from table.table import Table

__all__ = [
    "AccessDeniedError",
    "AmbiguousError",
    "AppendOnlyError",
    "ArgumentTypeError",
    "ChangeCommitError",
    "CommitConflictError",
    "CommitResult",
    "CommitStateUnknownError",
    "CommitTimeoutError",
    "ConfigurationError",
    "ConflictKind",
    "ConstraintViolationError",
    "CorruptDataError",
    "CorruptLogError",
    "DataFileMissingError",
    "DeadlineExceededError",
    "DynacommitError",
    "InvalidArgumentError",
    "MergeCardinalityError",
    "PendingSetError",
    "ReadOnlySnapshotError",
    "SchemaMismatchError",
    "SparkJobError",
    "StorageError",
    "Table",
    "TableExistsError",
    "TableNotFoundError",
    "ThrottledError",
    "UnsupportedFeatureError",
    "UnsupportedTypeError",
    "VersionExistsError",
    "VersionNotFoundError",
    "create_table",
    "write_table",
]
