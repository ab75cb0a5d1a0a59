"""The S3 and DynamoDB clients and the one place where botocore errors become the project's errors.

The clients are those of ``logstore/lean.py`` (the commit's and the reads' requests signed and sent
without botocore's per-request machinery, every other request through a boto3 client), or plain boto3
clients with ``DYNACOMMIT_AWS_CLIENT=botocore``. Both raise botocore's exceptions.

Every S3 and DynamoDB call of the project goes through :func:`call`, which maps
``ConditionalCheckFailedException``, ``PreconditionFailed``, ``NoSuchKey``, throttling, 5xx and connection
failures. Callers above ``logstore/`` never see ``botocore.exceptions.ClientError``.
"""

from __future__ import annotations

import binascii
import collections
import contextvars
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import boto3
import botocore.credentials
import botocore.exceptions
from botocore.config import Config

from logstore import deadline, lean, readonly, retry
from logstore.errors import (
    AccessDeniedError,
    AmbiguousError,
    ConditionFailed,
    ConfigurationError,
    DeadlineExceededError,
    ObjectNotFound,
    StorageError,
    ThrottledError,
    TransactionCanceled,
)
from logstore.options import StorageOptions

T = TypeVar("T")

log = logging.getLogger(__name__)

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})


# Clients are thread-safe and cost ~10-30 ms to build: one per service and connection settings per process
# (least recently used beyond _MAX_CLIENTS are dropped: settings with rotating session tokens pile up).
_MAX_CLIENTS = 32
_lock = threading.Lock()
_sessions: dict[tuple, boto3.session.Session] = {}
_clients: collections.OrderedDict[tuple, Any] = collections.OrderedDict()

# Requests sent within the current `call` (set per call; the before-send handler counts what it lets pass).
_sent: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("dynacommit_sent", default=None)


def _before_send(**_: object) -> None:
    """botocore ``before-send`` handler of every client: no request, first or retried, leaves after the
    current operation's deadline (logstore/deadline.py); those that do leave are counted."""
    deadline.check()
    sent = _sent.get()
    if sent is not None:
        sent[0] += 1


def s3_client(options: StorageOptions):
    """The process's S3 client for ``options``' connection settings; path-style addressing when a custom
    endpoint is set."""
    return _client("s3", options)


def dynamodb_client(options: StorageOptions):
    """The process's DynamoDB client for ``options``' connection settings."""
    return _client("dynamodb", options)


def _connection(options: StorageOptions) -> tuple:
    """What a client depends on (not the table name, the deadline or the grace period)."""
    return (options.region, options.endpoint_url, options.dynamodb_endpoint_url, options.access_key_id,
            options.secret_access_key, options.session_token)


def _client(service: str, options: StorageOptions):
    key = (service, *_connection(options))
    with _lock:
        client = _clients.get(key)
        if client is not None:
            _clients.move_to_end(key)
            return client
        client = _new_client_unlocked(service, options)
        _clients[key] = client
        while len(_clients) > _MAX_CLIENTS:
            _clients.popitem(last=False)
        return client


def _new_client_unlocked(service: str, options: StorageOptions):
    if service == "s3":
        config = Config(
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=32,
            s3={"addressing_style": "path"} if options.endpoint_url else None,
        )
        endpoint = options.endpoint_url
    else:
        # DynamoDB answers in milliseconds: a read timeout of 10 s bounds a request whose answer was lost,
        # so SDK retries and the deadline decide, not a socket waiting for a minute.
        config = Config(retries={"mode": "standard", "max_attempts": 6}, connect_timeout=10, read_timeout=10,
                        max_pool_connections=32)
        endpoint = options.dynamodb_endpoint_url
    attempts = config.retries["max_attempts"] + 1  # botocore's max_attempts counts the retries only
    session = _session_unlocked(options)
    client = session.client(service, endpoint_url=endpoint, config=config)
    client.meta.events.register("before-send", _before_send)
    if service == "dynamodb":
        client.meta.events.register("after-call.dynamodb", _check_crc32)
    if lean.choice() == "botocore" or lean.proxied(endpoint or f"https://{service}.{options.region}.amazonaws.com"):
        return client
    # The hot requests through the lean path (logstore/lean.py), the rest through botocore; same retries
    # (attempts = botocore's max_attempts + 1), same timeouts, same before-send hook.
    kind = lean.LeanS3Client if service == "s3" else lean.LeanDynamoDBClient
    return kind(endpoint=endpoint, region=options.region, credentials_source=_credentials_source(session, options),
                fallback=client, before=_before_send, total_attempts=attempts,
                read_timeout=config.read_timeout, max_connections=config.max_pool_connections)


def _credentials_source(session: boto3.session.Session, options: StorageOptions) -> Callable[[], Any]:
    """What the lean client signs with: the static keys of ``options``, else botocore's default chain,
    resolved at the first request (its errors are botocore's, raised before anything is sent) and read
    frozen at each one (botocore refreshes temporary credentials near their expiry)."""
    if options.access_key_id is not None and options.secret_access_key is not None:
        frozen = botocore.credentials.ReadOnlyCredentials(options.access_key_id, options.secret_access_key,
                                                          options.session_token)
        return lambda: frozen
    resolved: list = []

    def source():
        if not resolved:
            with _lock:
                if not resolved:
                    resolved.append(session.get_credentials())
        credentials = resolved[0]
        return None if credentials is None else credentials.get_frozen_credentials()

    return source


def _check_crc32(http_response, **_: object) -> None:
    """``after-call`` handler of the DynamoDB client: the CRC32 of the answer's body must be the one
    DynamoDB sent (``x-amz-crc32``). botocore's standard retry mode only retries on a mismatch, and when it
    retries no more (attempts or retry quota spent) it parses what came: JSON cut short parses as an empty
    answer, so a GetItem cut short would say "no such item" and a Query "no items". Raised here, the
    mismatch is a failed request like any other (AmbiguousError), tried again where that is safe."""
    expected = http_response.headers.get("x-amz-crc32")
    if expected is None:
        return  # servers that send none (dynalite)
    actual = binascii.crc32(http_response.content) & 0xFFFFFFFF
    if actual != int(expected):
        raise botocore.exceptions.ChecksumError(checksum_type="crc32", expected_checksum=expected,
                                                actual_checksum=actual)


def _forget_after_fork() -> None:
    """A forked child must not use the parent's connections (their sockets are shared with it)."""
    global _lock
    _lock = threading.Lock()
    _sessions.clear()
    _clients.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _session_unlocked(options: StorageOptions) -> boto3.session.Session:
    # Creating clients from one boto3 session is not thread-safe; callers hold _lock.
    key = _connection(options)
    session = _sessions.get(key)
    if session is None:
        session = boto3.session.Session(
            aws_access_key_id=options.access_key_id,
            aws_secret_access_key=options.secret_access_key,
            aws_session_token=options.session_token,
            region_name=options.region,
        )
        _sessions[key] = session
    return session


# Failures botocore raises before a request leaves the process (credentials, configuration, client-side
# validation): nothing reached the server, so they are never ambiguous.
_BEFORE_SEND = (
    botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError,
    botocore.exceptions.CredentialRetrievalError, botocore.exceptions.NoAuthTokenError,
    botocore.exceptions.TokenRetrievalError, botocore.exceptions.SSOError, botocore.exceptions.LoginError,
    botocore.exceptions.RefreshWithMFAUnsupportedError, botocore.exceptions.ProfileNotFound,
    botocore.exceptions.ConfigNotFound, botocore.exceptions.ConfigParseError,
    botocore.exceptions.InvalidConfigError, botocore.exceptions.UnknownCredentialError,
    botocore.exceptions.BaseEndpointResolverError, botocore.exceptions.EndpointProviderError,
    botocore.exceptions.UnknownRegionError, botocore.exceptions.ParamValidationError,
    botocore.exceptions.ValidationError, botocore.exceptions.InvalidDNSNameError,
    botocore.exceptions.InvalidHostLabelError,
)
_NO_CREDENTIALS = (
    botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError,
    botocore.exceptions.CredentialRetrievalError, botocore.exceptions.NoAuthTokenError,
    botocore.exceptions.TokenRetrievalError, botocore.exceptions.SSOError, botocore.exceptions.LoginError,
    botocore.exceptions.RefreshWithMFAUnsupportedError, botocore.exceptions.UnknownCredentialError,
)


#: Attempts of an idempotent request (reads, unconditional PUTs and DELETEs) on top of the SDK's own: the
#: SDK's retry quota (one per client, shared by the process's threads) runs dry when many requests fail
#: (each retry costs 5 tokens, each first-try success returns 1), and then it retries nothing.
IDEMPOTENT_ATTEMPTS = retry.IDEMPOTENT.attempts


def call(operation: str, fn: Callable[..., T], /, *, where: str = "", idempotent: bool = False, **kwargs: Any) -> T:
    """Run one boto call and translate its failure (see :func:`call_once`). ``idempotent``: a request that
    may be sent again whatever became of an earlier attempt (a read, an unconditional PUT or DELETE) is
    tried up to :data:`IDEMPOTENT_ATTEMPTS` times while it fails transiently (no answer, a 5xx, throttling),
    pausing as :data:`logstore.retry.IDEMPOTENT` says, never past the current deadline; the last error is
    raised."""
    if not idempotent:
        return call_once(operation, fn, where=where, **kwargs)
    return retry.retry(lambda: call_once(operation, fn, where=where, **kwargs), policy=retry.IDEMPOTENT,
                       retryable=_transient, what=f"{operation} on {where or '?'}")


def _transient(exc: Exception) -> bool:
    return isinstance(exc, (AmbiguousError, ThrottledError))


def call_once(operation: str, fn: Callable[..., T], /, *, where: str = "", **kwargs: Any) -> T:
    """Run one boto call (with the SDK's own retries) and translate its failure.

    ``operation`` is ``service:Action`` (``s3:PutObject``), ``where`` names the object (table, key) for
    messages. Raises :class:`ConditionFailed`, :class:`ObjectNotFound`, :class:`ThrottledError`,
    :class:`AmbiguousError` (outcome unknown), :class:`ConfigurationError` (missing bucket or table,
    access denied, no credentials) or :class:`StorageError`. Every error carries ``retried``.

    The rule for writes (see :func:`logstore.errors.provably_refused`): only an error answer to a request
    sent once, other than a 5xx or throttling, proves that the server did not apply it. So every failure
    after a request may have been sent is an :class:`AmbiguousError` (no answer, a broken or unreadable
    answer: any botocore error but those raised before sending) or carries ``retried=True`` (an answer
    that came after the SDK retried: an earlier attempt may have landed).
    """
    readonly.check(operation, where)  # a dry run sends no changing request (logstore/readonly.py)
    sent = [0]
    token = _sent.set(sent)
    try:
        return fn(**kwargs)
    except DeadlineExceededError as exc:
        # Raised by _before_send: before the first attempt nothing was sent; before a retry, an earlier
        # attempt was, and may have taken effect.
        exc.retried = sent[0] > 0
        raise
    except botocore.exceptions.ClientError as exc:
        raise translate(operation, exc, where) from exc
    except _NO_CREDENTIALS as exc:
        raise ConfigurationError(
            f"{operation} on {where or '?'}: no usable AWS credentials ({exc}); set AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY (storage options or environment) or configure an AWS profile/role; "
            f"nothing was sent"
        ) from exc
    except _BEFORE_SEND as exc:
        raise ConfigurationError(
            f"{operation} on {where or '?'} could not be sent: {exc}; check the table URI and the storage "
            f"options (AWS_REGION, AWS_ENDPOINT_URL)"
        ) from exc
    except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError,
            botocore.exceptions.SSLError, botocore.exceptions.ProxyConnectionError) as exc:
        # Raised after the SDK's own retries: an earlier attempt may have reached the server.
        raise AmbiguousError(
            f"{operation} on {where or '?'}: cannot connect ({exc}); it may or may not have taken effect; "
            f"check AWS_ENDPOINT_URL / AWS_REGION and the network",
            operation=operation,
        ) from exc
    except botocore.exceptions.BotoCoreError as exc:
        # HTTPClientError (after the SDK's retries), ReadTimeout, ConnectionClosed, a response that broke
        # or could not be parsed, a stream that could not be rewound for a retry, ...: all after sending.
        raise AmbiguousError(
            f"{operation} on {where or '?'} got no usable answer ({type(exc).__name__}: {exc}); it may or "
            f"may not have taken effect",
            operation=operation,
        ) from exc
    finally:
        _sent.reset(token)


def translate(operation: str, exc: botocore.exceptions.ClientError, where: str) -> Exception:
    """The project's error for a service's answer. ``retried`` is set on it (True when the SDK had retried
    the request: for a write, an earlier attempt may then have taken effect)."""
    error = _translate(operation, exc, where)
    meta = exc.response.get("ResponseMetadata", {})
    error.retried = int(meta.get("RetryAttempts") or 0) > 0  # type: ignore[attr-defined]
    return error


def _translate(operation: str, exc: botocore.exceptions.ClientError, where: str) -> Exception:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = error.get("Message", "")
    meta = exc.response.get("ResponseMetadata", {})
    status = int(meta.get("HTTPStatusCode") or 0)
    retried = int(meta.get("RetryAttempts") or 0) > 0
    target = where or "?"
    if code in ("ConditionalCheckFailedException", "PreconditionFailed") or status == 412:
        return ConditionFailed(operation, retried=retried, item=exc.response.get("Item"))
    if code == "TransactionCanceledException":
        reasons = exc.response.get("CancellationReasons")
        return TransactionCanceled(operation, retried=retried, reasons=reasons if isinstance(reasons, list) else None)
    if code in _NOT_FOUND_CODES:
        return ObjectNotFound(f"{operation}: {target} does not exist")
    if retry.is_throttle(code, status):
        return ThrottledError(f"{operation} on {target} was throttled ({code}) after retries; "
                              f"retry later or raise the capacity", operation=operation, code=code)
    if status == 403 and (not code or code.isdigit()):  # a HEAD's refusal has no body to name it
        code = "AccessDenied"
    elif not code or code.isdigit():
        # botocore names an error by its HTTP status when it cannot read the answer's body (one cut short):
        # what was refused, and why, is unknown.
        return AmbiguousError(f"{operation} on {target} got an error answer ({status}) that could not be read; "
                              f"it may or may not have taken effect", operation=operation, code=code)
    if code == "NoSuchBucket":
        return ConfigurationError(
            f"{operation}: bucket of {target} does not exist; create it or fix the table URI"
        )
    if code == "ResourceNotFoundException":
        return ConfigurationError(
            f"{operation}: DynamoDB table for {target} does not exist ({message}); create it with "
            f"`dynacommit create-ddb-table --execute` or set DELTA_DYNAMO_TABLE_NAME to the right table"
        )
    if code in ("AccessDenied", "AccessDeniedException"):
        return AccessDeniedError(
            f"{operation} on {target} was refused: {code}: {message}; the IAM policy of the credentials in use "
            f"does not allow {operation} (infra/iam-policy.json lists what dynacommit needs)"
        )
    if code in ("UnrecognizedClientException",
                "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException"):
        return ConfigurationError(
            f"{operation} on {target} was refused: {code}: {message}; check the credentials and the IAM "
            f"policy (infra/iam-policy.json lists what dynacommit needs)"
        )
    if status >= 500:
        return AmbiguousError(f"{operation} on {target} failed with {status} {code}: {message}; it may or "
                              f"may not have taken effect", operation=operation, code=code)
    return StorageError(f"{operation} on {target} failed: {code}: {message}", operation=operation, code=code)
