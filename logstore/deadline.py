"""Deadlines: every public operation finishes, one way or another, within a bounded time.

SDK retries, the commit's put-and-read-back loop, recovery attempts and a transaction's lost-race
retries multiply; in a network partition they could hold one commit for tens of minutes. So each
public operation runs under a :class:`Deadline` (``with deadline(seconds, "commit of s3://b/t")``),
kept in a context variable: nested operations share the earliest one, loops ask :func:`remaining`
before sleeping, and every S3/DynamoDB request checks it before it is sent, retries included
(``logstore.aws`` runs :func:`check` before each attempt: the lean client's hook, botocore's
``before-send`` event). Past the deadline
the operation raises :class:`~logstore.errors.DeadlineExceededError` where nothing of it is visible,
and :class:`~logstore.errors.CommitStateUnknownError` where a commit may have landed.

The default is ``DYNACOMMIT_TIMEOUT_SECONDS`` (storage option or environment), 120 s.

Context variables do not follow work into a thread pool by themselves: code that hands work under a
deadline to threads submits ``contextvars.copy_context().run``.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from logstore.errors import DeadlineExceededError

__all__ = ["CLEANUP_SECONDS", "DEFAULT_TIMEOUT_SECONDS", "Deadline", "check", "cleanup", "current", "deadline",
           "remaining", "sleep"]

DEFAULT_TIMEOUT_SECONDS = 120.0
CLEANUP_SECONDS = 5.0


@dataclass(frozen=True)
class Deadline:
    """``operation`` must be over by ``at`` (``time.monotonic()``); it was given ``seconds``."""

    at: float
    seconds: float
    operation: str

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def error(self, message: str | None = None) -> DeadlineExceededError:
        return DeadlineExceededError(self.operation, self.seconds, message)


_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("dynacommit_deadline", default=None)


def current() -> Deadline | None:
    """The deadline of the operation running in this context, if any."""
    return _current.get()


@contextmanager
def deadline(seconds: float | None, operation: str) -> Iterator[Deadline]:
    """Run the block under a deadline of ``seconds`` (None: the default), or the enclosing operation's if
    that one ends sooner."""
    seconds = DEFAULT_TIMEOUT_SECONDS if seconds is None else float(seconds)
    mine = Deadline(time.monotonic() + seconds, seconds, operation)
    outer = _current.get()
    chosen = outer if outer is not None and outer.at <= mine.at else mine
    token = _current.set(chosen)
    try:
        yield chosen
    finally:
        _current.reset(token)


def remaining(default: float = float("inf")) -> float:
    """Seconds left to the current deadline (``default`` when there is none); may be negative."""
    found = _current.get()
    return default if found is None else found.remaining()


def check(**_: object) -> None:
    """Raise DeadlineExceededError if the current deadline has passed. Accepts and ignores keyword
    arguments, so it can be registered as a botocore event handler."""
    found = _current.get()
    if found is not None and found.expired():
        raise found.error()


def sleep(seconds: float) -> None:
    """Sleep ``seconds``, but never past the current deadline; raises DeadlineExceededError when the
    deadline has passed (before or after the sleep)."""
    check()
    time.sleep(max(0.0, min(seconds, remaining())))
    check()


@contextmanager
def cleanup(operation: str, seconds: float = CLEANUP_SECONDS) -> Iterator[Deadline]:
    """Run a short best-effort step under a fresh deadline of its own, even when the operation's deadline
    has passed: deleting the temp file of a commit that ran out of time, or checking, after the commit
    point, whether what was won is durable. Without it those steps could not send a request at all, and
    the operation would leave litter or report an unknown state it could have known."""
    mine = Deadline(time.monotonic() + seconds, seconds, operation)
    token = _current.set(mine)
    try:
        yield mine
    finally:
        _current.reset(token)
