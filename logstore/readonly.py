"""Read-only blocks: inside ``with read_only("why"):`` no request that changes S3 or DynamoDB leaves the process.

A dry run (``dynacommit ... --dry-run``, and every changing command without ``--execute``) must change
nothing, yet opening a table is a read that repairs: a reader that passes a commit whose writer died
finishes it (writes ``N.json``, marks the item complete). Rather than trusting every path a dry run takes
to skip its writes, the guard sits where every request passes: :func:`logstore.aws.call_once` for S3 and
DynamoDB, and each mutating method of the in-memory stores. A request that would change something is
refused with :class:`~logstore.errors.AccessDeniedError`, as a missing IAM permission is, so the code above
takes the path it takes for a reader without write permissions: it reads what is published and leaves
the repair to a later run.

An operation reads when its AWS action starts with ``Get``, ``Head``, ``List`` or ``Describe``, or is
``Query`` or ``Scan``; every other action changes something and is refused. The block is a context
variable: it follows the work into the process's pools (``logstore.pool`` runs each task in a copy of the
caller's context), never into other processes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from logstore.errors import AccessDeniedError

__all__ = ["check", "is_read", "read_only", "reason"]

_REASON: contextvars.ContextVar[str | None] = contextvars.ContextVar("dynacommit_read_only", default=None)
_READS = ("Get", "Head", "List", "Describe")
_READ_ACTIONS = frozenset({"Query", "Scan"})


@contextlib.contextmanager
def read_only(why: str) -> Iterator[None]:
    """Refuse every changing request inside the block; ``why`` goes into the refusal's message."""
    token = _REASON.set(why)
    try:
        yield
    finally:
        _REASON.reset(token)


def reason() -> str | None:
    """Why changing requests are refused here, or None when they are not."""
    return _REASON.get()


def is_read(operation: str) -> bool:
    """Whether ``operation`` (``service:Action``, e.g. ``s3:GetObject``) only reads."""
    action = operation.rpartition(":")[2]
    return action.startswith(_READS) or action in _READ_ACTIONS


def check(operation: str, where: str = "") -> None:
    """Raise :class:`AccessDeniedError` when ``operation`` would change something inside a read-only block."""
    why = _REASON.get()
    if why is not None and not is_read(operation):
        place = f" on {where}" if where else ""
        raise AccessDeniedError(f"{operation}{place} was not sent: {why}, which changes nothing in S3 or DynamoDB")
