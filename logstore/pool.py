"""The log store's requests that may run at once run on one small process-wide thread pool: a commit's
checks beside its temp-file PUT (and, for an in-process write, its data files' PUTs), and what a commit
leaves behind when it returns (the UpdateItem marking its entry complete, a lost race's temp-file DELETE;
logstore/published.py keeps track of those).

One pool, created on first use and bounded, rather than a thread per call: a process committing from many
threads (a Spark driver, a thread pool of writers) shares it. Nothing submitted waits on the pool itself,
so a saturated pool delays but cannot deadlock. The current deadline (logstore/deadline.py, a context
variable) follows each task into its worker thread. Work still queued when the interpreter exits is run
before it exits (concurrent.futures joins its workers). A forked child gets a fresh pool: the parent's
worker threads do not exist in it.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["MAX_WORKERS", "submit", "wait_quietly"]

T = TypeVar("T")

MAX_WORKERS = 16

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def submit(fn: Callable[..., T], /, *args: object, **kwargs: object) -> Future[T]:
    """Run ``fn(*args, **kwargs)`` on the pool, in a copy of the caller's context."""
    context = contextvars.copy_context()
    return _pool().submit(context.run, fn, *args, **kwargs)


def wait_quietly(future: Future) -> None:
    """Wait for ``future`` to end, ignoring its error (a best-effort step whose failure was already handled
    or does not matter); a ``BaseException`` (a simulated crash) still propagates."""
    try:
        future.result()
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def _pool() -> ThreadPoolExecutor:
    global _executor
    executor = _executor
    if executor is None:
        with _lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="dynacommit-io")
            executor = _executor
    return executor


def _forget_after_fork() -> None:
    global _executor, _lock
    _executor = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
