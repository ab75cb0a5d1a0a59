"""The one retry policy (logstore/retry.py): which answers are throttling, checked against botocore's own
retry configuration, and the backoff's bounds and deadline."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import botocore
import botocore.retries.standard
import pytest

from logstore import deadline, retry
from logstore.errors import DeadlineExceededError, StorageError

# The two lists the project kept before there was one: the lean client's (botocore's standard mode) and
# the error translation's. They disagreed; every code either treated as throttling still is.
FORMER_LEAN_CODES = {
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException", "TransactionInProgressException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException", "RequestThrottled",
    "SlowDown", "PriorRequestNotComplete", "EC2ThrottledException",
}
FORMER_TRANSLATION_CODES = {
    "ThrottlingException", "Throttling", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
    "SlowDown", "TooManyRequestsException", "RequestThrottled", "RequestThrottledException",
}


def _retry_json() -> dict:
    return json.loads((Path(botocore.__file__).parent / "data" / "_retry.json").read_text())


def _documented_throttling() -> tuple[set[str], set[int]]:
    """The codes and statuses botocore's legacy retry configuration names as throttling: its general
    definitions whose names say so, and DynamoDB's "still processing" transaction."""
    data = _retry_json()
    codes: set[str] = set()
    statuses: set[int] = set()
    for name, definition in data["definitions"].items():
        if not any(word in name for word in ("throttl", "too_many", "throughput")):
            continue
        response = definition["applies_when"]["response"]
        if "service_error_code" in response:
            codes.add(response["service_error_code"])
        else:
            statuses.add(response["http_status_code"])
    still = data["retry"]["dynamodb"]["__default__"]["policies"]["still_processing"]
    codes.add(still["applies_when"]["response"]["service_error_code"])
    return codes, statuses


def test_every_code_either_former_list_called_throttling_still_is():
    assert FORMER_LEAN_CODES | FORMER_TRANSLATION_CODES <= retry.THROTTLE_CODES
    for code in FORMER_LEAN_CODES | FORMER_TRANSLATION_CODES:
        assert retry.is_throttle(code, 400) and retry.is_transient(code, 400)


def test_throttling_codes_cover_what_botocore_documents():
    codes, statuses = _documented_throttling()
    assert codes >= {"Throttling", "ThrottlingException", "ProvisionedThroughputExceededException"}
    assert statuses == {429}
    assert codes <= retry.THROTTLE_CODES
    assert all(retry.is_throttle("", status) for status in statuses)
    # and botocore's standard retry mode, the one the clients are configured with
    standard = set(botocore.retries.standard.ThrottledRetryableChecker._THROTTLED_ERROR_CODES)
    assert standard == retry.THROTTLE_CODES


def test_transient_answers_are_botocores_standard_ones():
    checker = botocore.retries.standard.TransientRetryableChecker
    assert set(checker._TRANSIENT_ERROR_CODES) == retry.TRANSIENT_CODES
    assert set(checker._TRANSIENT_STATUS_CODES) == retry.TRANSIENT_STATUS
    _, statuses = _documented_throttling()
    documented_5xx = {d["applies_when"]["response"]["http_status_code"]
                      for name, d in _retry_json()["definitions"].items()
                      if name in ("general_server_error", "bad_gateway", "service_unavailable", "gateway_timeout")}
    assert documented_5xx == retry.TRANSIENT_STATUS


@pytest.mark.parametrize("code,status", [
    ("ConditionalCheckFailedException", 400), ("PreconditionFailed", 412), ("NoSuchKey", 404),
    ("AccessDenied", 403), ("ValidationException", 400), ("TransactionCanceledException", 400),
])
def test_refusals_are_neither_throttling_nor_transient(code, status):
    assert not retry.is_throttle(code, status)
    assert not retry.is_transient(code, status)


def test_pauses_are_full_jitter_under_a_doubling_cap():
    policy = retry.Backoff(base=0.1, cap=2.0, attempts=8)
    assert [policy.ceiling(n) for n in range(1, 8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert policy.ceiling(10_000) == 2.0
    pauses = [policy.pause(3) for _ in range(2000)]
    assert all(0.0 <= p <= 0.4 for p in pauses)
    assert min(pauses) < 0.1 and max(pauses) > 0.3  # spread over the whole range, not a fixed fraction of it


@pytest.mark.parametrize("kwargs", [{"base": 0, "cap": 1}, {"base": 2, "cap": 1}, {"base": 1, "cap": 2, "attempts": 0}])
def test_a_backoff_with_impossible_settings_is_refused(kwargs):
    with pytest.raises(ValueError, match="backoff needs"):
        retry.Backoff(**kwargs)


def _failing(times: int, error: Exception):
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= times:
            raise error
        return len(calls)

    return fn, calls


def test_retry_runs_again_until_it_succeeds():
    fn, calls = _failing(3, StorageError("flaky", retryable=True))
    quick = retry.Backoff(base=0.001, cap=0.002, attempts=5)
    assert retry.retry(fn, policy=quick, retryable=lambda e: e.retryable) == 4
    assert len(calls) == 4


def test_retry_raises_the_last_error_when_the_attempts_are_spent():
    fn, calls = _failing(10, StorageError("still down", retryable=True))
    quick = retry.Backoff(base=0.001, cap=0.002, attempts=3)
    with pytest.raises(StorageError, match="still down"):
        retry.retry(fn, policy=quick, retryable=lambda e: e.retryable)
    assert len(calls) == 3


def test_retry_does_not_repeat_what_is_not_retryable():
    fn, calls = _failing(10, StorageError("refused", retryable=False))
    with pytest.raises(StorageError, match="refused"):
        retry.retry(fn, policy=retry.RELOAD, retryable=lambda e: e.retryable)
    assert len(calls) == 1


def test_no_pause_runs_past_the_deadline():
    fn, calls = _failing(10, StorageError("down", retryable=True))
    with deadline.deadline(0.0, "a test operation"):
        # the deadline is nearer than any pause: the failure is raised as it is, without sleeping
        with pytest.raises(StorageError, match="down"):
            retry.retry(fn, policy=retry.RELOAD, retryable=lambda e: e.retryable)
        assert len(calls) == 1
        assert retry.RELOAD.wait(1) is False
        # cut at the deadline instead: the deadline's own error
        with pytest.raises(DeadlineExceededError):
            retry.RELOAD.wait(1, to_deadline=True)


PRODUCT_PACKAGES = ("logstore", "table", "spark_integration")


def _doublings(source: str) -> list[tuple[int, str]]:
    """The ``2 ** n`` (and ``pow(2, n)``) of a module's code whose exponent is not a constant: the
    arithmetic of a backoff written by hand. Strings and comments are not code, so a docstring that
    writes ``2**b`` does not count."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            base, exponent = node.left, node.right
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "pow"
              and len(node.args) >= 2):
            base, exponent = node.args[0], node.args[1]
        else:
            continue
        if isinstance(base, ast.Constant) and base.value == 2 and not isinstance(exponent, ast.Constant):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_scan_finds_a_hand_written_backoff():
    hand_loop = "for attempt in range(5):\n    deadline.sleep(0.05 * 2**attempt)\n    x = pow(2, attempt)\n"
    assert sorted(code for _, code in _doublings(hand_loop)) == ["2 ** attempt", "pow(2, attempt)"]
    assert _doublings('"""ranks span floor(r * 2**b / d)"""\nSIZE = 2 ** 20  # 2**n\n') == []


def test_no_backoff_is_written_by_hand_outside_the_retry_module():
    """Every pause that doubles goes through logstore/retry.py (Backoff, retry()); a loop that computes
    its own ``base * 2 ** attempt`` is a second retry policy."""
    root = Path(__file__).resolve().parents[3]
    policy = root / "logstore" / "retry.py"
    found = [f"{path.relative_to(root)}:{line}: {code}"
             for package in PRODUCT_PACKAGES for path in sorted((root / package).rglob("*.py")) if path != policy
             for line, code in _doublings(path.read_text())]
    assert found == [], ("exponential backoff written by hand; pause with a logstore.retry.Backoff (or "
                         "retry.retry) instead:\n" + "\n".join(found))
