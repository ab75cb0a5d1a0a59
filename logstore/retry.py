"""Which failures are tried again, how often, and how long to pause in between: the one retry policy of
the project's S3 and DynamoDB requests and of the loops above them.

Two levels retry, each with a :class:`Backoff`:

- the request (``logstore/lean.py``, like botocore's standard mode): an answer with a throttling code
  (:data:`THROTTLE_CODES`, or HTTP 429), a transient one (:data:`TRANSIENT_CODES`, 500/502/503/504), no
  answer at all, or a broken one is sent again;
- the operation (``logstore.aws.call`` for idempotent requests, reloading a snapshot, reading data files,
  settling an unclear commit): a whole step is run again after a transient failure the request level
  gave up on.

Pauses are full-jitter exponential: before attempt ``n + 1`` a uniformly random pause in
``[0, min(cap, base * 2 ** (n - 1))]``. No pause runs past the current deadline (``logstore/deadline.py``):
:meth:`Backoff.wait` gives up (returns False) when the deadline is nearer than the pause, so the caller
raises the failure it has rather than sleep into a :class:`~logstore.errors.DeadlineExceededError`; with
``to_deadline=True`` it sleeps up to the deadline instead and the next attempt's deadline check raises.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from logstore import deadline

__all__ = [
    "CONFLICT", "IDEMPOTENT", "RECOVER", "RELOAD", "REQUEST_S3", "REQUEST_DYNAMODB", "REQUEST_THROTTLED",
    "SETTLE", "THROTTLE_CODES", "THROTTLE_STATUS", "TRANSIENT_CODES", "TRANSIENT_STATUS", "Backoff",
    "is_throttle", "is_transient", "retry",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Error codes that mean "too many requests, slow down": the union of what AWS documents as throttling
#: for S3 and DynamoDB and botocore's standard retry mode (its list of throttling codes, and its legacy
#: retry configuration's). A throttled request was not applied, but it is retried, so its outcome
#: after the last retry is still unknown to a writer.
THROTTLE_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException", "TransactionInProgressException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException", "RequestThrottled",
    "SlowDown", "PriorRequestNotComplete", "EC2ThrottledException",
})
#: HTTP statuses that mean throttling whatever the code (an empty 429 included).
THROTTLE_STATUS = frozenset({429})
#: Error codes of a request that timed out on the server's side: worth sending again.
TRANSIENT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete"})
#: HTTP statuses of a server that failed or is unavailable for now.
TRANSIENT_STATUS = frozenset({500, 502, 503, 504})


def is_throttle(code: str, status: int = 0) -> bool:
    """Whether an error answer (its code, its HTTP status) says the request was throttled."""
    return code in THROTTLE_CODES or status in THROTTLE_STATUS


def is_transient(code: str, status: int = 0) -> bool:
    """Whether an error answer is worth sending again: throttled, timed out, or a 5xx the server may not
    answer next time."""
    return is_throttle(code, status) or code in TRANSIENT_CODES or status in TRANSIENT_STATUS


@dataclass(frozen=True)
class Backoff:
    """``attempts`` tries at most (None: until the deadline), with full-jitter exponential pauses of
    ``base`` seconds doubled per attempt, at most ``cap``."""

    base: float
    cap: float
    attempts: int | None = None

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError(f"a backoff needs 0 < base <= cap, got base={self.base}, cap={self.cap}")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"a backoff needs attempts >= 1 (or None), got {self.attempts}")

    def ceiling(self, attempt: int) -> float:
        """The longest pause after ``attempt`` (1 for the first) failed attempts."""
        return min(self.cap, self.base * 2 ** min(attempt - 1, 62))

    def pause(self, attempt: int) -> float:
        """A pause before the attempt after ``attempt``: uniform in ``[0, ceiling(attempt)]``."""
        return random.random() * self.ceiling(attempt)

    def more(self, attempt: int) -> bool:
        """Whether another attempt is allowed after ``attempt`` attempts."""
        return self.attempts is None or attempt < self.attempts

    def wait(self, attempt: int, *, to_deadline: bool = False) -> bool:
        """Pause before the attempt after ``attempt``. False, at once, when there is to be none: the
        attempts are spent, or the current deadline is nearer than the pause (with ``to_deadline``: the
        pause is cut at the deadline instead, and the next attempt's deadline check raises)."""
        if not self.more(attempt):
            return False
        seconds = self.pause(attempt)
        left = deadline.remaining()
        if left <= seconds and not to_deadline:
            return False
        deadline.sleep(min(seconds, max(0.0, left)))
        return True


# The request level (logstore/lean.py), botocore's standard mode: throttling pauses start at 1 s, other
# failures at 50 ms (S3) or 25 ms (DynamoDB, which answers in milliseconds); at most 20 s. The attempts
# are each client's (logstore/aws.py).
REQUEST_THROTTLED = Backoff(base=1.0, cap=20.0)
REQUEST_S3 = Backoff(base=0.05, cap=20.0)
REQUEST_DYNAMODB = Backoff(base=0.025, cap=20.0)

#: An idempotent request (a read, an unconditional PUT or DELETE) run again by ``logstore.aws.call`` on
#: top of the request level's retries, which share a per-client quota that runs dry under many failures.
IDEMPOTENT = Backoff(base=0.05, cap=1.0, attempts=6)
#: A conditional PUT that S3 answered 409 ConditionalRequestConflict (another conditional write of the
#: key is in flight and decides it): asked again.
CONFLICT = Backoff(base=0.05, cap=1.6, attempts=6)
#: A read that can start over (loading a snapshot, reading data files): until the deadline.
RELOAD = Backoff(base=0.1, cap=2.0)
#: Settling a commit whose answer was unclear (putting or reading back its entry, withdrawing a queued
#: append, reading back ``N.json``).
SETTLE = Backoff(base=0.05, cap=1.0, attempts=5)
#: Finishing an incomplete entry (recovery).
RECOVER = Backoff(base=0.05, cap=1.0, attempts=4)


def retry(fn: Callable[[], T], *, policy: Backoff, retryable: Callable[[Exception], bool], what: str = "",
          to_deadline: bool = False, level: int = logging.DEBUG) -> T:
    """``fn()``, run again while it raises an exception ``retryable`` accepts, pausing as ``policy`` says
    (:meth:`Backoff.wait`); the last exception is raised when no attempt is left or the deadline comes
    first. ``what`` names the step in the log (at ``level``)."""
    attempt = 1
    while True:
        try:
            return fn()
        except Exception as exc:
            if not retryable(exc):
                raise
            if log.isEnabledFor(level):
                log.log(level, "%s failed at attempt %d%s (%s: %s)", what or getattr(fn, "__name__", "?"),
                        attempt, "" if policy.attempts is None else f" of {policy.attempts}", type(exc).__name__,
                        exc)
            if not policy.wait(attempt, to_deadline=to_deadline):
                raise
            attempt += 1
