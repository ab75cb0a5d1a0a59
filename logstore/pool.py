"""The log store's requests that may run at once run on one small process-wide thread pool: a commit's
checks beside its temp-file PUT (and, for an in-process write, its data files' PUTs), and what a commit
leaves behind when it returns (the UpdateItem marking its entry complete, a lost race's temp-file DELETE;
logstore/published.py keeps track of those).

One pool, created on first use and bounded, rather than a thread per call: a process committing from many
threads (a Spark driver, a thread pool of writers) shares it. Nothing submitted waits on the pool itself,
so a saturated pool delays but cannot deadlock. Work that does send requests on it and waits for them (a
checkpoint written after its commit returned) runs on a second pool of its own (:func:`submit_later`). The
current deadline (logstore/deadline.py, a context
variable) follows each task into its worker thread.

A :class:`Pool` never refuses work. ``concurrent.futures.ThreadPoolExecutor`` does once the interpreter
starts to shut down (``submit`` raises ``RuntimeError``): a thread still committing after ``main``
returned would then be told its commit failed although ``N.json`` held its bytes. Our pools' workers are
daemon threads that take work until the process ends, and when no worker can run it (the interpreter
finalizing, no thread can be started) the caller runs the work itself. What the commits of this process
left running is waited for at exit for at most the cleanup deadline (``logstore.published``); a process
that ends without running exit handlers (``os._exit``, SIGKILL, SIGTERM's default) leaves at most the
entry of its newest commit incomplete, which the next writer or reader finishes.

A forked child gets fresh pools: the parent's worker threads do not exist in it.
"""

from __future__ import annotations

import contextvars
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import TypeVar

__all__ = ["LATER_WORKERS", "MAX_WORKERS", "Pool", "submit", "submit_later", "wait_quietly"]

T = TypeVar("T")

MAX_WORKERS = 16

_STOP = object()


class Pool:
    """A bounded pool of daemon worker threads, started on demand, that runs every function it is given
    (see the module docstring). ``with Pool(...) as p:`` waits for what was submitted, then lets the
    workers go: for work of one call (completing a job's uploads) that must not share the process-wide
    pool with the call that waits for it."""

    def __init__(self, max_workers: int, name: str):
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self.name = name
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._submitted: list[Future] = []
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` in a copy of the caller's context; never raises for the pool's sake."""
        future: Future[T] = Future()
        item = (future, contextvars.copy_context(), fn, args, kwargs)
        if not self._hand_over(item):
            _run(item)  # nobody else can run it: the caller does, now
        return future

    def _hand_over(self, item: tuple) -> bool:
        if sys.is_finalizing():
            return False
        with self._lock:
            if self._closed:
                return False
            if self._local:
                self._submitted.append(item[0])
            self._queue.put(item)
            if self._idle.acquire(blocking=False):
                return True
            if len(self._threads) < self.max_workers:
                thread = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # no new thread at interpreter shutdown
                    if not self._threads:
                        self._take_back(item)
                        return False
                else:
                    self._threads.append(thread)
            return True

    def _take_back(self, item: tuple) -> None:
        """Remove ``item`` from the queue again (called with the lock held, no worker running)."""
        kept = []
        while True:
            try:
                queued = self._queue.get_nowait()
            except queue.Empty:
                break
            if queued is not item:
                kept.append(queued)
        for queued in kept:
            self._queue.put(queued)
        if self._local and self._submitted and self._submitted[-1] is item[0]:
            self._submitted.pop()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            _run(item)
            del item
            self._idle.release()

    # --- per-call use --------------------------------------------------------------------------------
    _local = False

    def __enter__(self) -> Pool:
        self._local = True
        return self

    def __exit__(self, *exc: object) -> None:
        wait(list(self._submitted))  # their errors are for whoever holds the futures
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(_STOP)


def _run(item: tuple) -> None:
    future, context, fn, args, kwargs = item
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = context.run(fn, *args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the future
        future.set_exception(exc)
    else:
        future.set_result(result)


_POOLS: weakref.WeakSet[Pool] = weakref.WeakSet()
_DEFAULT = Pool(MAX_WORKERS, "dynacommit-io")
LATER_WORKERS = 2
_LATER = Pool(LATER_WORKERS, "dynacommit-later")


def submit(fn: Callable[..., T], /, *args: object, **kwargs: object) -> Future[T]:
    """Run ``fn(*args, **kwargs)`` on the process's pool, in a copy of the caller's context."""
    return _DEFAULT.submit(fn, *args, **kwargs)


def submit_later(fn: Callable[..., T], /, *args: object, **kwargs: object) -> Future[T]:
    """Run ``fn`` on the process's second pool, for work that itself sends requests on the first one and waits
    for them (a checkpoint after its commit returned: ``logstore.acknowledge.Acknowledgement.finish_later``).
    On the first pool such tasks could take every worker and wait for requests no worker is left to send."""
    return _LATER.submit(fn, *args, **kwargs)


def wait_quietly(future: Future) -> None:
    """Wait for ``future`` to end, ignoring its error (a best-effort step whose failure was already handled
    or does not matter); a ``BaseException`` (a simulated crash) still propagates."""
    try:
        future.result()
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def _forget_after_fork() -> None:
    for pool in list(_POOLS):
        pool._reset()


os.register_at_fork(after_in_child=_forget_after_fork)
