"""Errors raised by the ``table`` layer; they extend the tree rooted in ``logstore/errors.py``.

    DynacommitError (logstore.errors)
    ├── ... the log store's errors (StorageError, VersionExistsError, CorruptLogError, ...)
    ├── CommitConflictError                 a concurrent commit makes ours invalid; nothing of ours is visible
    ├── AppendOnlyError                     the table is append-only and the operation would change data
    ├── SchemaMismatchError                 the data does not fit the table's schema
    ├── UnsupportedFeatureError             the table uses a protocol version or feature we do not implement
    └── UnsupportedTypeError (TypeError)    a pyarrow type with no Delta equivalent

Every message says what happened and ends with what the user can do about it. The classes with
keyword arguments define ``__reduce__`` so they survive pickling: Spark ships exceptions raised on
executors back to the driver.
"""

from __future__ import annotations

from collections.abc import Sequence

from logstore.errors import DynacommitError

__all__ = [
    "AppendOnlyError",
    "CommitConflictError",
    "SchemaMismatchError",
    "UnsupportedFeatureError",
    "UnsupportedTypeError",
]


class CommitConflictError(DynacommitError):
    """A commit that won version ``version`` conflicts with what our transaction read or wrote.

    ``operation`` is the winning commit's operation (``WRITE``, ``DELETE`` ...) and ``reason`` says
    which rule failed ("it removed a file we also remove"). Retrying blindly would be wrong: the job
    must look at the table again.
    """

    def __init__(self, *, version: int, operation: str, reason: str):
        super().__init__(
            f"conflict with the concurrent commit at version {version} (operation {operation or 'unknown'}): "
            f"{reason}. Nothing of this transaction was committed; re-read the table and retry, "
            f"or re-run the job"
        )
        self.version = version
        self.operation = operation
        self.reason = reason

    def __reduce__(self):
        kwargs = {"version": self.version, "operation": self.operation, "reason": self.reason}
        return _construct, (type(self), (), kwargs)


class AppendOnlyError(DynacommitError):
    """The table has ``delta.appendOnly=true`` and the operation would remove or change data.

    Kept apart from :class:`CommitConflictError`: no concurrent writer is involved and retrying cannot
    help; only changing the table property (or the operation) can.
    """


class DataFileMissingError(DynacommitError, FileNotFoundError):
    """A data file the snapshot references is gone from S3: removed by ``vacuum`` with a retention shorter
    than the reader's snapshot age, or deleted behind the log's back."""


class SchemaMismatchError(DynacommitError):
    """The data's schema does not match the table's; ``differences`` lists each difference in words."""

    def __init__(self, differences: Sequence[str], *, table: str | None = None):
        self.differences = tuple(differences)
        self.table = table
        where = f" of table {table}" if table else ""
        listed = "\n".join(f"  - {d}" for d in self.differences)
        super().__init__(
            f"the data does not match the schema{where}:\n{listed}\n"
            "Cast the data to the table's schema (pyarrow: data.cast(target_schema)) and write again; "
            "changing a table's schema on write (mode='overwrite' with a new schema) is not supported yet"
        )

    def __reduce__(self):
        return _construct, (type(self), (self.differences,), {"table": self.table})


class UnsupportedFeatureError(DynacommitError):
    """The table needs a protocol version or table feature that dynacommit does not implement.

    ``feature`` names it (``deletionVectors``, ``reader version 2``). Reading or writing anyway could
    return wrong rows or corrupt the table, so we refuse.
    """

    def __init__(self, message: str, *, feature: str | None = None):
        super().__init__(message)
        self.feature = feature

    def __reduce__(self):
        return _construct, (type(self), (str(self),), {"feature": self.feature})


class UnsupportedTypeError(DynacommitError, TypeError):
    """A column's pyarrow type has no Delta equivalent; the message names the column and what to cast to."""

    def __init__(self, column: str, arrow_type: object, *, cast_to: str | None = None):
        self.column = column
        self.arrow_type = str(arrow_type)
        self.cast_to = cast_to
        advice = f"cast it to {cast_to} before writing" if cast_to else "cast it to a supported type before writing"
        super().__init__(f"column {column!r} has type {self.arrow_type}, which Delta Lake cannot store; {advice}")

    def __reduce__(self):
        return _construct, (type(self), (self.column, self.arrow_type), {"cast_to": self.cast_to})


def _construct(cls: type, args: tuple, kwargs: dict) -> BaseException:
    """Unpickle an error whose ``__init__`` takes keyword arguments (see the ``__reduce__`` methods)."""
    return cls(*args, **kwargs)
