"""The project's error tree. Every error a user can see from dynacommit is one of these.

    DynacommitError
    ├── InvalidArgumentError (ValueError)   an argument has a wrong value (a negative version, an unknown mode)
    ├── ArgumentTypeError (TypeError)       an argument has a wrong type (a str where bytes are needed)
    ├── ConfigurationError (ValueError)     bad URI, unknown storage option, wrong DynamoDB table setup
    │   └── AccessDeniedError               the credentials' IAM policy does not allow the request
    ├── StorageError                        S3 or DynamoDB failed; ``retryable`` says whether trying again may help
    │   ├── ThrottledError                  the service is throttling us
    │   └── AmbiguousError                  a request may or may not have taken effect (timeout, 5xx, lost answer)
    ├── DeadlineExceededError (TimeoutError)  the operation ran out of time; nothing half-done is left visible
    ├── VersionExistsError (FileExistsError)   the log version was already won by another writer
    ├── CommitStateUnknownError             we cannot tell whether our commit happened; nothing was cleaned up
    ├── TableNotFoundError (FileNotFoundError) no table at the URI
    ├── VersionNotFoundError (FileNotFoundError) the table exists, the version does not (not yet, or cleaned up)
    ├── CorruptLogError                     the log holds something that is not a valid entry
    └── (table/errors.py adds CommitConflictError, SchemaMismatchError, UnsupportedFeatureError, ...)

Messages name the table, the version and what the user can do. Nothing above ``logstore/`` ever sees a
botocore exception: they are translated in ``logstore/aws.py``.

Below the tree, four outcomes a store's requests report to the commit algorithm, which settles them itself
(no user sees them): ``ConditionFailed`` (a conditional write's condition did not hold),
``TransactionCanceled``, ``GroupChanged`` (a group commit's transaction refused for a queued append, not
for the version) and ``ObjectNotFound``. Every backend raises these same classes, so they live here,
importable without boto3 (the in-memory store of the tests raises them too).
"""

from __future__ import annotations


class DynacommitError(Exception):
    """Root of every error raised by dynacommit.

    ``retried`` is True on an error from S3 or DynamoDB that came after the SDK retried the request.
    """

    retried: bool = False


class InvalidArgumentError(DynacommitError, ValueError):
    """An argument's value is wrong; the message names the argument, what was given and what is allowed."""


class ArgumentTypeError(DynacommitError, TypeError):
    """An argument's type is wrong; the message names the argument and the type expected."""


class ConfigurationError(DynacommitError, ValueError):
    """The caller's configuration is wrong: a malformed URI, an unknown storage option, a DynamoDB table
    with the wrong key schema, a missing bucket."""


class AccessDeniedError(ConfigurationError):
    """S3 or DynamoDB refused a request because the credentials' IAM policy does not allow it
    (``AccessDenied``, ``AccessDeniedException``); the message names the action."""


class StorageError(DynacommitError):
    """A call to S3 or DynamoDB failed.

    ``operation`` names the call (``s3:PutObject``), ``retryable`` is True when the failure is transient
    (throttling, 5xx, connection) so trying the whole operation again may succeed.
    """

    def __init__(self, message: str, *, operation: str = "", retryable: bool = False, code: str = ""):
        super().__init__(message)
        self.operation = operation
        self.retryable = retryable
        self.code = code

    def __reduce__(self):
        return _rebuild_storage_error, (type(self), str(self), self.operation, self.retryable, self.code,
                                        self.retried)


class ThrottledError(StorageError):
    """S3 or DynamoDB throttled us beyond the client's own retries."""

    def __init__(self, message: str, *, operation: str = "", code: str = ""):
        super().__init__(message, operation=operation, retryable=True, code=code)


class AmbiguousError(StorageError):
    """The request may or may not have taken effect (timeout, connection reset, 5xx after retries, an
    answer lost on the way back): a write must be checked by reading before anything is concluded."""

    def __init__(self, message: str, *, operation: str, code: str = ""):
        super().__init__(message, operation=operation, retryable=True, code=code)

    def __reduce__(self):
        return _rebuild_storage_error, (type(self), str(self), self.operation, self.retryable, self.code,
                                        self.retried)


class DeadlineExceededError(DynacommitError, TimeoutError):
    """``operation`` did not finish within its deadline (``DYNACOMMIT_TIMEOUT_SECONDS``, default 120 s).

    Raised only where the state is clean (nothing of the operation became visible) or, for a commit whose
    outcome cannot be known, as :class:`CommitStateUnknownError` instead.
    """

    def __init__(self, operation: str, seconds: float, message: str | None = None):
        super().__init__(message or f"{operation} did not finish within its deadline of {seconds:g} s; nothing of "
                                    f"it is visible. Retry later, or raise DYNACOMMIT_TIMEOUT_SECONDS")
        self.operation = operation
        self.seconds = seconds

    def __reduce__(self):
        return type(self), (self.operation, self.seconds, str(self))


class VersionExistsError(DynacommitError, FileExistsError):
    """Log version ``version`` of ``table`` is already taken: another writer won it.

    Raised by a log store's ``write`` for a lost race, it may say more: ``winner``, the entry that holds the
    version (its ``summary`` included) when the refusal or a read of it said, and ``kept``, the write's temp
    file kept for the next attempt when the write was asked to keep it (``keep_temp``). Both None otherwise.
    """

    winner: object = None
    kept: object = None

    def __init__(self, table: str, version: int, message: str | None = None):
        super().__init__(
            message
            or f"version {version} of table {table} already exists: another writer committed it first; "
            f"read the table again and retry at a newer version"
        )
        self.table = table
        self.version = version

    def __reduce__(self):
        return type(self), (self.table, self.version, str(self))


class CommitStateUnknownError(DynacommitError):
    """We could not learn whether our commit of ``version`` happened.

    Nothing was cleaned up: the data files and uploads this commit refers to are left in place, because
    the commit may be visible. Read the table's history to see whether it landed.
    """

    def __init__(self, table: str, version: int | None, message: str):
        super().__init__(message)
        self.table = table
        self.version = version

    def __reduce__(self):
        return type(self), (self.table, self.version, str(self))


class TableNotFoundError(DynacommitError, FileNotFoundError):
    """There is no table at the URI (no ``_delta_log/`` entries)."""


class VersionNotFoundError(DynacommitError, FileNotFoundError):
    """The table exists but the requested version does not (not yet written, or removed by cleanup).

    Not a :class:`TableNotFoundError`: code that creates a table when none exists must never take a
    missing version of an existing table for a missing table."""


class CorruptLogError(DynacommitError):
    """The log holds something that is not a valid entry: an unparsable commit, a DynamoDB item with a
    malformed ``fileName`` or ``tempPath``. (An entry whose temp file and commit file are both gone is not
    corrupt but stuck: it is abandoned, see ``logstore/external.py``.)"""


# --- What a store's request layer raises to the algorithm above it (logstore/aws.py, the in-memory stores of
# the tests): outcomes the algorithm settles itself, never seen by a user. They live here, beside the errors,
# so that a store without boto3 raises the same ones.

class ConditionFailed(Exception):
    """A conditional write's condition did not hold (DynamoDB ConditionalCheckFailed, S3 412).

    ``retried`` is True when the SDK had retried the request: the condition may then have failed on
    our own earlier, successful attempt, so the outcome is ambiguous and must be checked by reading.
    ``item`` holds the existing DynamoDB item when the service returned it
    (``ReturnValuesOnConditionCheckFailure=ALL_OLD``); a log store sets ``owner`` to the entry it parsed
    from it.
    """

    def __init__(self, operation: str, *, retried: bool, item: dict | None = None, owner: object = None):
        super().__init__(f"{operation}: condition failed")
        self.operation = operation
        self.retried = retried
        self.item = item
        self.owner = owner


class TransactionCanceled(Exception):
    """A DynamoDB ``TransactWriteItems`` was refused as a whole (nothing of it applied): ``reasons`` holds one
    ``{"Code": ..., "Item": ...}`` per item of the request, in order (``Code`` ``None`` for the items that
    were fine, ``ConditionalCheckFailed``, ``TransactionConflict``, ...). ``retried`` as on
    :class:`ConditionFailed`: after an SDK retry the refusal may be of our own earlier, applied attempt."""

    def __init__(self, operation: str, *, retried: bool, reasons: list | None = None):
        super().__init__(f"{operation}: transaction canceled ({[r.get('Code') for r in reasons or []]})")
        self.operation = operation
        self.retried = retried
        self.reasons = list(reasons or [])


class GroupChanged(Exception):
    """A group attempt's transaction was refused for one of its items, not for the version: nothing of it
    was applied. ``own``: our own item is no longer waiting (claimed by another group, or gone: read it);
    ``members``: the members' ids that could not be claimed (taken by another group, withdrawn, past their
    ``claimUntil``). The caller builds its next attempt from the queue as it is now. A signal between the
    log store and the table layer (like :class:`ConditionFailed`), never raised to users."""

    def __init__(self, message: str, *, own: bool, members: tuple[str, ...] = (), retried: bool = False):
        super().__init__(message)
        self.own = own
        self.members = members
        self.retried = retried


class ObjectNotFound(FileNotFoundError):
    """S3 key (or multipart upload) does not exist. ``retried`` as on :class:`ConditionFailed`."""

    retried: bool = False


def provably_refused(error: BaseException) -> bool:
    """Whether a failed write certainly did not take effect.

    Only an error answer to a request sent once (no SDK retry), other than a 5xx or throttling, proves
    that the server did not apply it (a 4xx: validation, access, missing table), and so do failures
    raised before anything was sent (no credentials, a deadline already past). Everything else may have
    been applied: no answer (timeout, connection reset, a lost response), a 5xx, throttling, any answer
    after the SDK retried (an earlier attempt may have landed), an unexpected exception.
    """
    return (isinstance(error, DynacommitError) and not isinstance(error, (AmbiguousError, ThrottledError))
            and not error.retried)


def _rebuild_storage_error(cls, message: str, operation: str, retryable: bool, code: str,
                           retried: bool = False) -> StorageError:
    error = StorageError.__new__(cls)
    StorageError.__init__(error, message, operation=operation, retryable=retryable, code=code)
    if retried:
        error.retried = True
    return error
