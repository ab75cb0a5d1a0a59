"""dynacommit's log store: numbered log entries of a table on S3, coordinated through DynamoDB.

``open_log_store(uri)`` returns the :class:`LogStore` for one table. This package imports only boto3
and the standard library (no pyarrow, no pyspark), so any process can commit; boto3 only once an S3 table
is opened, so the interfaces (``logstore/base.py``, ``logstore/entry_store.py``), the errors and a store of
another scheme (:func:`register_scheme`) load without it.
"""

from __future__ import annotations

from logstore.base import LogStore, RecoveryOutcome
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
from logstore.external import DEFAULT_EXPIRE_SECONDS, CommitEntry, ExternalLogStore
from logstore.objects import NewUpload, ObjectInfo, ObjectStore, Part, UploadInfo
from logstore.options import StorageOptions, TableUri
from logstore.schemes import register_scheme, registered
from logstore.sweep import TempSweepReport

__all__ = [
    "DEFAULT_EXPIRE_SECONDS",
    "AccessDeniedError",
    "AmbiguousError",
    "ArgumentTypeError",
    "CommitEntry",
    "CommitStateUnknownError",
    "ConfigurationError",
    "CorruptLogError",
    "DeadlineExceededError",
    "DynacommitError",
    "ExternalLogStore",
    "InvalidArgumentError",
    "LogStore",
    "NewUpload",
    "ObjectInfo",
    "ObjectStore",
    "Part",
    "RecoveryOutcome",
    "StorageError",
    "StorageOptions",
    "TableNotFoundError",
    "TableUri",
    "TempSweepReport",
    "ThrottledError",
    "UploadInfo",
    "VersionExistsError",
    "VersionNotFoundError",
    "open_log_store",
    "open_object_store",
    "register_scheme",
]


def open_object_store(uri: str | TableUri, *, storage_options: dict[str, str] | StorageOptions | None = None
                      ) -> ObjectStore:
    """The object store holding the table at ``uri`` (S3, or what a registered scheme gives: logstore/schemes.py)."""
    parsed = uri if isinstance(uri, TableUri) else TableUri.parse(uri)
    options = StorageOptions.resolve(storage_options)
    scheme = registered(parsed.scheme)
    if scheme is not None:
        return scheme.object_store(parsed, options)
    from logstore.s3 import S3ObjectStore

    return S3ObjectStore(parsed.bucket, options)


def open_log_store(uri: str | TableUri, *, storage_options: dict[str, str] | StorageOptions | None = None
                   ) -> ExternalLogStore:
    """The log store of the table at ``uri`` (``s3://bucket/path`` or ``s3a://...``).

    Entries are coordinated through the DynamoDB table ``DELTA_DYNAMO_TABLE_NAME`` (default ``delta_log``).
    A scheme registered with :func:`register_scheme` gets the log store its factory builds.
    Raises ConfigurationError for a malformed URI or an unknown storage option.
    """
    parsed = uri if isinstance(uri, TableUri) else TableUri.parse(uri)
    options = StorageOptions.resolve(storage_options)
    scheme = registered(parsed.scheme)
    if scheme is not None:
        return scheme.log_store(parsed, options)
    from logstore.dynamodb import DynamoDBLogStore

    return DynamoDBLogStore(parsed, open_object_store(parsed, storage_options=options), options)
