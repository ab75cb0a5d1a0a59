"""Every error of the ``table`` and ``spark_integration`` layers; with ``logstore.errors``, the project's one tree.

    DynacommitError (logstore.errors)
    ├── InvalidArgumentError (ValueError), ArgumentTypeError (TypeError)  bad arguments
    │   ├── PendingSetError (InvalidArgumentError)  a PendingSet is malformed or not this job's
    │   ├── MergeCardinalityError (InvalidArgumentError)  a MERGE matched a target row with several source rows
    │   └── ReadOnlySnapshotError (InvalidArgumentError)  a commit on a time-travelled snapshot
    ├── ConfigurationError, StorageError, ThrottledError, AmbiguousError, VersionExistsError,
    │   CommitStateUnknownError, TableNotFoundError, VersionNotFoundError, CorruptLogError (logstore.errors)
    ├── DeadlineExceededError (TimeoutError) (logstore.errors)
    │   └── CommitTimeoutError              every attempt lost the race until the deadline; nothing committed
    ├── CommitConflictError                 a concurrent commit makes ours invalid; ``kind`` says which rule
    ├── TableExistsError (FileExistsError)  mode="error" and a table exists (or was created concurrently)
    ├── AppendOnlyError                     the table is append-only and the operation would remove data
    ├── SchemaMismatchError                 the data does not fit the table's schema; ``differences`` lists why
    ├── ConstraintViolationError            a row breaks a CHECK constraint, an invariant or a generation expression
    ├── UnsupportedFeatureError             the table needs a protocol feature we do not implement
    ├── UnsupportedTypeError (TypeError)    a pyarrow type with no Delta equivalent
    ├── DataFileMissingError (FileNotFoundError)  a data file the snapshot needs is gone (vacuumed)
    ├── CorruptDataError                    a data file the snapshot needs is not readable Parquet
    ├── ChangeCommitError                   a streaming read reached a commit that removes data
    └── SparkJobError                       the Spark job staging a write failed; its uploads were aborted

Every message says what happened and ends with what the user can do about it. Every class survives
pickling (Spark ships exceptions raised on executors back to the driver): those with keyword
arguments define ``__reduce__``. All of them are importable from ``table``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from logstore.errors import (
    ArgumentTypeError,
    DeadlineExceededError,
    DynacommitError,
    InvalidArgumentError,
)

__all__ = [
    "AppendOnlyError",
    "ChangeCommitError",
    "CommitConflictError",
    "CommitTimeoutError",
    "ConstraintViolationError",
    "ConflictKind",
    "CorruptDataError",
    "DataFileMissingError",
    "MergeCardinalityError",
    "PendingSetError",
    "ReadOnlySnapshotError",
    "SchemaMismatchError",
    "SparkJobError",
    "TableExistsError",
    "UnsupportedFeatureError",
    "UnsupportedTypeError",
]


class ConflictKind(enum.Enum):
    """Which of Delta's conflict rules a concurrent commit broke (the names of delta-spark's exceptions)."""

    PROTOCOL_CHANGED = "ProtocolChanged"              # it changed the protocol our commit was built on
    METADATA_CHANGED = "MetadataChanged"              # it changed schema, partitioning or properties
    CONCURRENT_APPEND = "ConcurrentAppend"            # it added data our commit should have read
    CONCURRENT_DELETE_READ = "ConcurrentDeleteRead"   # it removed a file our commit read
    CONCURRENT_DELETE_DELETE = "ConcurrentDeleteDelete"  # it removed a file our commit removes too
    CONCURRENT_CREATE = "ConcurrentCreate"            # it created the table we were creating, differently
    CONCURRENT_TRANSACTION = "ConcurrentTransaction"  # it changed a metadata domain our commit changes too

    @property
    def delta_exception(self) -> str:
        """The class delta-spark raises for this rule (``ConcurrentAppendException`` ...)."""
        return f"{self.value}Exception"


class CommitConflictError(DynacommitError):
    """A commit that won version ``version`` conflicts with what our transaction read or wrote.

    ``kind`` is the rule (:class:`ConflictKind`), ``operation`` the winning commit's operation (``WRITE``,
    ``DELETE`` ...), ``reason`` says what collided. Nothing of our transaction was committed. Retrying
    blindly would be wrong: the job must look at the table again. ``attempts``: the commit attempts the
    transaction made before the conflict ended it (0 when not known).
    """

    def __init__(self, *, version: int, operation: str, reason: str, kind: ConflictKind, attempts: int = 0):
        super().__init__(
            f"{kind.value}: conflict with the concurrent commit at version {version} (operation "
            f"{operation or 'unknown'}): {reason}. Nothing of this transaction was committed; re-read the table "
            f"and retry, or re-run the job"
        )
        self.version = version
        self.operation = operation
        self.reason = reason
        self.kind = kind
        self.attempts = attempts

    def __reduce__(self):
        kwargs = {"version": self.version, "operation": self.operation, "reason": self.reason, "kind": self.kind,
                  "attempts": self.attempts}
        return _construct, (type(self), (), kwargs)


class CommitTimeoutError(DeadlineExceededError):
    """Every attempt lost the race for the next version to commits that did not conflict, until the
    deadline (``DYNACOMMIT_TIMEOUT_SECONDS``). Nothing of this transaction was committed."""

    def __init__(self, table: str, attempts: int, seconds: float, last_version: int):
        super().__init__(
            f"commit to {table}", seconds,
            f"could not commit to table {table}: {attempts} attempt(s) in {seconds:.1f}s all lost the race for "
            f"the next version (last tried {last_version}) to other writers; nothing was committed. The table "
            f"is very busy: retry, batch more data per commit, or raise DYNACOMMIT_TIMEOUT_SECONDS",
        )
        self.table = table
        self.attempts = attempts
        self.last_version = last_version

    def __reduce__(self):
        return type(self), (self.table, self.attempts, self.seconds, self.last_version)


class ReadOnlySnapshotError(InvalidArgumentError):
    """A commit was attempted on a snapshot loaded at an explicit version (time travel)."""


class TableExistsError(DynacommitError, FileExistsError):
    """``mode="error"`` and a table already exists at the URI (perhaps created while we wrote); nothing
    was written."""


class AppendOnlyError(DynacommitError):
    """The table has ``delta.appendOnly=true`` and the operation would remove or change data.

    Kept apart from :class:`CommitConflictError`: no concurrent writer is involved and retrying cannot
    help; only changing the table property (or the operation) can.
    """


class DataFileMissingError(DynacommitError, FileNotFoundError):
    """A data file the snapshot references is gone from S3: removed by ``vacuum`` with a retention shorter
    than the reader's snapshot age, or deleted behind the log's back."""


class CorruptDataError(DynacommitError):
    """A data file the snapshot references is not readable Parquet (truncated, overwritten behind the log's
    back); the message names the file and the version."""


class SchemaMismatchError(DynacommitError):
    """The data's schema does not match the table's; ``differences`` lists each difference in words."""

    def __init__(self, differences: Sequence[str], *, table: str | None = None):
        self.differences = tuple(differences)
        self.table = table
        where = f" of table {table}" if table else ""
        listed = "\n".join(f"  - {d}" for d in self.differences)
        super().__init__(
            f"the data does not match the schema{where}:\n{listed}\n"
            "Cast the data to the table's schema (pyarrow: data.cast(target_schema)) and write again; to add the "
            "data's new columns pass schema_mode='merge' (Spark: option mergeSchema=true), to replace the schema "
            "schema_mode='overwrite' with mode='overwrite' (Spark: overwriteSchema=true)"
        )

    def __reduce__(self):
        return _construct, (type(self), (self.differences,), {"table": self.table})


class ConstraintViolationError(DynacommitError):
    """A row written breaks one of the table's rules: a CHECK constraint, a column invariant or a generated
    column's expression (``name``, ``expression``); the message shows the first such row. Nothing was
    committed."""

    def __init__(self, message: str, *, name: str, expression: str):
        super().__init__(message)
        self.name = name
        self.expression = expression

    def __reduce__(self):
        return (_constraint_violation, (str(self), self.name, self.expression))


def _constraint_violation(message: str, name: str, expression: str) -> ConstraintViolationError:
    return ConstraintViolationError(message, name=name, expression=expression)


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


class UnsupportedTypeError(ArgumentTypeError):
    """A column's pyarrow type has no Delta equivalent; the message names the column and what to cast to."""

    def __init__(self, column: str, arrow_type: object, *, cast_to: str | None = None):
        self.column = column
        self.arrow_type = str(arrow_type)
        self.cast_to = cast_to
        advice = f"cast it to {cast_to} before writing" if cast_to else "cast it to a supported type before writing"
        super().__init__(f"column {column!r} has type {self.arrow_type}, which Delta Lake cannot store; {advice}")

    def __reduce__(self):
        return _construct, (type(self), (self.column, self.arrow_type), {"cast_to": self.cast_to})


class PendingSetError(InvalidArgumentError):
    """A PendingSet is malformed or does not belong to this job and table; ``field`` names what is wrong.

    Raised before anything is completed, so nothing of the job became visible. A PendingSet can only be
    this wrong through a bug or tampering (seeds/s3a-committers-architecture, "Security").
    """

    def __init__(self, message: str, *, field: str):
        super().__init__(f"invalid PendingSet: {field}: {message}")
        self.field = field
        self.detail = message

    def __reduce__(self):
        return _construct, (type(self), (self.detail,), {"field": self.field})


class MergeCardinalityError(InvalidArgumentError):
    """A MERGE found target rows matched by more than one source row, so which one should update or delete
    them is ambiguous (Delta's ``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE``); nothing was
    committed."""

    def __init__(self, rows: int, table: str):
        super().__init__(
            f"MERGE into {table}: {rows} target row(s) matched more than one source row, so it is ambiguous which "
            f"source row should update or delete them; nothing was committed. Make the source hold at most one row "
            f"per merge key (e.g. keep the newest row of each key), or tighten the merge condition")
        self.rows = rows
        self.table = table

    def __reduce__(self):
        return type(self), (self.rows, self.table)


class SparkJobError(DynacommitError):
    """The Spark job that stages a write failed (a task failed past its retries, the job was cancelled);
    nothing was committed and the job's staged uploads were aborted."""


class ChangeCommitError(DynacommitError):
    """A streaming read reached a commit that removes data (a delete, an overwrite, an update): a stream
    of appends cannot express it."""


def _construct(cls: type, args: tuple, kwargs: dict) -> BaseException:
    """Unpickle an error whose ``__init__`` takes keyword arguments (see the ``__reduce__`` methods)."""
    return cls(*args, **kwargs)
