"""Where a test may cut a Spark operation (DELETE, UPDATE, MERGE, OPTIMIZE): ``task`` runs in each
rewrite task right after it staged, before it reports (raising fails the attempt); ``staged`` runs on the
driver once every file is staged, before any upload is completed or anything committed.

Private: the product never installs a hook and no public signature takes one. Tests install them for the
operations a block runs (``tests/support/spark_hooks.py``). A ``task`` hook is read when the operation
plans its job and travels pickled inside the task, so it must be picklable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["Hooks", "install", "installed", "staged"]


@dataclasses.dataclass(frozen=True)
class Hooks:
    """``task(task, pendingsets)`` in each rewrite task (a PendingSet list for DML, one PendingSet for an
    OPTIMIZE bin); ``staged()`` on the driver between staging and the commit."""

    task: Callable[[Any, Any], None] | None = None
    staged: Callable[[], None] | None = None


_installed = Hooks()


def installed() -> Hooks:
    """The hooks operations run now (none unless a test installed some)."""
    return _installed


def install(hooks: Hooks) -> Hooks:
    """Make ``hooks`` the ones operations run from now on; returns those it replaces."""
    global _installed
    previous, _installed = _installed, hooks
    return previous


def staged() -> None:
    """The driver's point between staging and the commit."""
    hook = _installed.staged
    if hook is not None:
        hook()
