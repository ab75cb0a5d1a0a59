"""botocore failures become the project's errors in one place (logstore/aws.py), and only an error answer the
server provably did not apply counts as a refusal at the commit point (issue 7, item 1)."""

from __future__ import annotations

import inspect
import string

import botocore.exceptions
import pytest

from logstore import StorageOptions, open_log_store
from logstore.aws import ConditionFailed, ObjectNotFound, call, translate
from logstore.errors import (
    AmbiguousError,
    ConfigurationError,
    StorageError,
    ThrottledError,
    provably_refused,
)
from tests.support.memory import MemoryLogStore
from logstore.options import TableUri

# Raised by botocore before a request leaves the process: never ambiguous.
BEFORE_SEND = {
    "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "NoAuthTokenError",
    "TokenRetrievalError", "SSOError", "SSOTokenLoadError", "UnauthorizedSSOTokenError", "LoginError",
    "LoginAuthorizationCodeError", "LoginInsufficientPermissions", "LoginRefreshRequired", "LoginTokenLoadError",
    "RefreshWithMFAUnsupportedError", "ProfileNotFound", "ConfigNotFound", "ConfigParseError",
    "InvalidConfigError", "InfiniteLoopConfigError", "UnknownCredentialError", "BaseEndpointResolverError",
    "NoRegionError", "UnknownEndpointError", "UnknownFIPSEndpointError", "EndpointVariantError",
    "EndpointProviderError", "EndpointResolutionError", "UnknownEndpointResolutionBuiltInName",
    "UnknownRegionError", "ParamValidationError", "ValidationError", "AliasConflictParameterError",
    "InvalidRegionError", "RangeError", "UnknownKeyError", "UnknownParameterError", "InvalidDNSNameError",
    "InvalidHostLabelError",
}


def botocore_error_classes() -> list[type]:
    return sorted((c for c in vars(botocore.exceptions).values()
                   if inspect.isclass(c) and issubclass(c, botocore.exceptions.BotoCoreError)),
                  key=lambda c: c.__name__)


def construct(cls: type) -> BaseException:
    """An instance built the way botocore builds it: keyword arguments filling the message template."""
    fields = {name for _, name, _, _ in string.Formatter().parse(cls.fmt) if name}
    fields |= {p.name for p in inspect.signature(cls.__init__).parameters.values()
               if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty}
    return cls(**{name: f"<{name}>" for name in fields})


def raising(exc: BaseException):
    def fn(**_):
        raise exc
    return fn


def client_error(code: str, status: int, *, retries: int = 0, item: dict | None = None) -> botocore.exceptions.ClientError:
    response = {"Error": {"Code": code, "Message": f"{code} message"},
                "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": retries}}
    if item is not None:
        response["Item"] = item
    return botocore.exceptions.ClientError(response, "PutItem")


@pytest.mark.parametrize("cls", botocore_error_classes(), ids=lambda c: c.__name__)
def test_every_botocore_error_is_translated_and_only_pre_send_ones_are_definite(cls):
    with pytest.raises(StorageError if cls.__name__ not in BEFORE_SEND else ConfigurationError) as info:
        call("dynamodb:PutItem", raising(construct(cls)), where="table t")
    error = info.value
    assert "dynamodb:PutItem" in str(error) and "table t" in str(error)
    if cls.__name__ in BEFORE_SEND:
        assert provably_refused(error)
    else:
        assert isinstance(error, AmbiguousError), f"{cls.__name__} after sending must be ambiguous"
        assert not provably_refused(error)


def test_the_list_of_pre_send_errors_names_real_classes():
    names = {c.__name__ for c in botocore_error_classes()}
    assert BEFORE_SEND <= names  # a botocore upgrade renaming a class must show up here


@pytest.mark.parametrize("code,status,retries,expected,refused", [
    ("ValidationException", 400, 0, StorageError, True),
    ("ValidationException", 400, 2, StorageError, False),        # an earlier attempt may have landed
    ("AccessDeniedException", 400, 0, ConfigurationError, True),
    ("AccessDeniedException", 400, 1, ConfigurationError, False),
    ("ResourceNotFoundException", 400, 0, ConfigurationError, True),
    ("InternalServerError", 500, 0, AmbiguousError, False),
    ("ServiceUnavailable", 503, 4, AmbiguousError, False),
    ("ProvisionedThroughputExceededException", 400, 0, ThrottledError, False),
    ("ThrottlingException", 400, 5, ThrottledError, False),
    ("SlowDown", 503, 4, ThrottledError, False),
    # throttling by botocore's standard retry mode but not by the project's former list: these were taken
    # for refusals, though a transaction "still in progress" may yet apply
    ("TransactionInProgressException", 400, 0, ThrottledError, False),
    ("LimitExceededException", 400, 0, ThrottledError, False),
    ("ThrottledException", 400, 0, ThrottledError, False),
    ("429", 429, 0, ThrottledError, False),   # throttled, with no body to name it
    ("400", 400, 0, AmbiguousError, False),   # an error answer cut short: botocore names it by its status
    ("403", 403, 0, ConfigurationError, True),  # a refused HEAD: no body, only the status
])
def test_client_errors_are_refusals_only_when_sent_once_and_not_5xx_or_throttling(code, status, retries, expected,
                                                                               refused):
    with pytest.raises(expected) as info:
        call("dynamodb:PutItem", raising(client_error(code, status, retries=retries)), where="t")
    assert info.value.retried is (retries > 0)
    assert provably_refused(info.value) is refused


@pytest.mark.parametrize("retries", [0, 3])
def test_condition_failures_carry_whether_the_sdk_retried_and_the_existing_item(retries):
    item = {"tempPath": {"S": ".tmp/x"}}
    error = translate("dynamodb:PutItem", client_error("ConditionalCheckFailedException", 400, retries=retries,
                                                       item=item), "t")
    assert isinstance(error, ConditionFailed)
    assert error.retried is (retries > 0)
    assert error.item == item
    precondition = translate("s3:PutObject", client_error("PreconditionFailed", 412, retries=retries), "k")
    assert isinstance(precondition, ConditionFailed) and precondition.retried is (retries > 0)


@pytest.mark.parametrize("retries", [0, 2])
def test_missing_keys_are_object_not_found_with_the_retry_flag(retries):
    error = translate("s3:GetObject", client_error("NoSuchKey", 404, retries=retries), "k")
    assert isinstance(error, ObjectNotFound) and error.retried is (retries > 0)


def test_session_token_without_a_key_is_a_configuration_error_before_anything_is_sent():
    with pytest.raises(ConfigurationError, match="AWS_SESSION_TOKEN"):
        StorageOptions.resolve({"AWS_SESSION_TOKEN": "token-only"})
    with pytest.raises(ConfigurationError, match="AWS_SECRET_ACCESS_KEY"):
        StorageOptions.resolve({"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE"})
    with pytest.raises(ConfigurationError, match="AWS_ACCESS_KEY_ID"):
        StorageOptions.resolve({"AWS_SECRET_ACCESS_KEY": "secret"})


def test_no_credentials_is_a_configuration_error_and_a_refusal():
    with pytest.raises(ConfigurationError, match="no usable AWS credentials") as info:
        call("s3:PutObject", raising(botocore.exceptions.NoCredentialsError()), where="s3://b/k")
    assert provably_refused(info.value)


# ------------------------------------------------------------------------------------- at the commit point
def body(n: int) -> bytes:
    return f'{{"commitInfo":{{"n":{n}}}}}\n'.encode()


LOST_ANSWERS = [
    botocore.exceptions.HTTPClientError(error="connection reset by peer"),
    botocore.exceptions.ReadTimeoutError(endpoint_url="http://ddb"),
    botocore.exceptions.ConnectionClosedError(endpoint_url="http://ddb"),
    botocore.exceptions.EndpointConnectionError(endpoint_url="http://ddb"),
    botocore.exceptions.ResponseStreamingError(error="stream broken"),
    client_error("InternalServerError", 500),
    client_error("ProvisionedThroughputExceededException", 400),
    client_error("ProvisionedThroughputExceededException", 400, retries=5),
    client_error("ValidationException", 400, retries=1),
]


def _failure_id(error: BaseException) -> str:
    if isinstance(error, botocore.exceptions.ClientError):
        meta = error.response["ResponseMetadata"]
        return f"{error.response['Error']['Code']}-retries{meta['RetryAttempts']}"
    return type(error).__name__


@pytest.mark.parametrize("failure", LOST_ANSWERS, ids=[_failure_id(e) for e in LOST_ANSWERS])
def test_a_put_that_landed_but_whose_answer_was_lost_is_our_commit(memory_uri, failure):
    """The PutItem lands, its answer is lost: the write must find its own entry and finish it, never take
    the failure for a refusal (which deleted the temp file and left the table bricked)."""

    class LostAnswer(MemoryLogStore):
        def _put_entry(self, entry):
            super()._put_entry(entry)
            call("dynamodb:PutItem", raising(failure), where=self.table_path)

    store = LostAnswer(TableUri.parse(memory_uri))
    store.write(0, body(0))
    reader = open_log_store(memory_uri)
    assert reader.latest_version() == 0
    assert reader.read(0) == body(0)
    assert reader._get_entry(0).complete
    reader.write(1, body(1))
    assert reader.latest_version() == 1


@pytest.mark.parametrize("failure", [client_error("ValidationException", 400),
                                     client_error("AccessDeniedException", 400),
                                     botocore.exceptions.NoCredentialsError()],
                         ids=["validation", "access-denied", "no-credentials"])
def test_a_refusal_of_the_first_attempt_fails_the_write_and_cleans_up(memory_uri, failure):
    class Refused(MemoryLogStore):
        def _put_entry(self, entry):
            call("dynamodb:PutItem", raising(failure), where=self.table_path)

    store = Refused(TableUri.parse(memory_uri))
    with pytest.raises((StorageError, ConfigurationError)):
        store.write(0, body(0))
    assert store._get_entry(0) is None
    assert list(store.objects.list(store.log_prefix)) == []
