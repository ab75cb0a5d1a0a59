"""What this process knows of its own commits, per table: the newest version it published (its ``N.json``
written with its bytes) with the UpdateItem marking that entry complete, and the requests its commits
left running on the pool when ``write`` returned: those UpdateItems (step 4 of :mod:`logstore.external`)
and the DELETE of a temp file whose race was lost.

Both let a writer skip work that only guards against other writers:

* A writer that published N-1 itself needs no read of N-1's entry before writing N: ``N-1.json`` exists,
  so there is nothing to recover (the HEAD of ``N.json`` still goes out). Its own UpdateItem of N-1 must
  have succeeded, though: the writer waits for it (it is usually over long before), and when it failed
  reads the entry and finishes it like anyone else's. So a process leaves at most the entry of its
  newest commit incomplete, whatever ends it, and whoever writes the next version finishes that one.
* A writer returns once ``N.json`` holds its bytes, without waiting for the UpdateItem that marks the entry
  complete nor for the DELETE of its temp file: anyone who finds the entry incomplete does both, and every
  reader looks for ``N.json`` first. A reader of this process that finds its newest entry incomplete
  waits for that UpdateItem instead (``Recovery._finish_as_reader``).

Tables are told apart by their store's scope (:meth:`logstore.external.ExternalLogStore.scope`), so two
stacks serving the same path in one process (tests) never share a record. A forked child starts empty:
the parent's pool threads do not run in it.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, wait

__all__ = ["Published"]

_CAPACITY = 4096  # tables remembered per process; the oldest are forgotten (a forgotten one is only read)


class Published:
    """The process-wide record; one instance, ``logstore.external.PUBLISHED``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._newest: collections.OrderedDict[Hashable, tuple[int, Future | None]] = collections.OrderedDict()
        self._running: dict[Hashable, set[Future]] = {}
        self._crashed: dict[Hashable, BaseException] = {}  # simulated crashes, kept until waited for
        self._waited: dict[Hashable, int] = {}  # the newest version of ours another writer lost, per table
        self._finishing_seconds: dict[Hashable, float] = {}  # how long our commits take to finish, per table
        self._deferred: dict[Hashable, list[Callable[[], None]]] = {}  # steps sent later (:meth:`defer`)
        os.register_at_fork(after_in_child=self._forget)

    def record(self, scope: Hashable, version: int, completing: Future | None = None) -> None:
        """This process published ``version`` of the table (its ``N.json`` holds our bytes); ``completing``
        is the UpdateItem marking its entry complete (its result: whether that is done)."""
        with self._lock:
            if version > self._newest.get(scope, (-1, None))[0]:
                self._newest[scope] = (version, completing)
            self._newest.move_to_end(scope)
            while len(self._newest) > _CAPACITY:
                self._newest.popitem(last=False)

    def published(self, scope: Hashable, version: int) -> bool:
        """Whether ``version`` is the newest version of the table this process published."""
        with self._lock:
            return self._newest.get(scope, (None, None))[0] == version

    def newest(self, scope: Hashable) -> int | None:
        """The newest version of the table this process published, if any."""
        with self._lock:
            return self._newest.get(scope, (None, None))[0]

    def completing(self, scope: Hashable, version: int) -> Future | None:
        """The UpdateItem marking ``version``'s entry complete, when it is the newest this process recorded."""
        with self._lock:
            newest, completing = self._newest.get(scope, (None, None))
        return completing if newest == version else None

    def note_finishing(self, scope: Hashable, seconds: float) -> None:
        """One of our commits to the table took ``seconds`` from its won PutItem to the UpdateItem marking
        it complete (a moving average of the last few is kept)."""
        with self._lock:
            before = self._finishing_seconds.get(scope)
            self._finishing_seconds[scope] = seconds if before is None else 0.75 * before + 0.25 * seconds

    def finishing_seconds(self, scope: Hashable) -> float | None:
        """How long this process's commits to the table take to finish after their commit point (the
        average of :meth:`note_finishing`), or None before the first."""
        with self._lock:
            return self._finishing_seconds.get(scope)

    def note_waited(self, scope: Hashable, version: int) -> None:
        """Another writer lost ``version`` of the table to this process (it marked the entry)."""
        with self._lock:
            self._waited[scope] = version

    def waited(self, scope: Hashable, version: int) -> bool:
        with self._lock:
            return self._waited.get(scope) == version

    def completed(self, scope: Hashable, version: int, *, timeout: float | None) -> bool:
        """Whether this process published ``version`` as its newest and marked its entry complete: waits up
        to ``timeout`` seconds for that UpdateItem. False when it failed, is still running or was never
        sent (then the caller reads the entry, as for another writer's)."""
        with self._lock:
            newest, completing = self._newest.get(scope, (None, None))
        if newest != version or completing is None:
            return False
        done, _ = wait([completing], timeout=None if timeout is None else max(0.0, timeout))
        if not done or completing.cancelled() or completing.exception() is not None:
            return False
        return bool(completing.result())

    def finishing(self, scope: Hashable, futures: Iterable[Future]) -> None:
        """Remember the finishing steps of a commit until they end."""
        for future in futures:
            with self._lock:
                self._running.setdefault(scope, set()).add(future)
            future.add_done_callback(lambda done, scope=scope: self._ended(scope, done))

    def defer(self, scope: Hashable, fire: Callable[[], None]) -> None:
        """A finishing step of the table that is sent later (a timer calls ``fire``, which must send it at most
        once and then register it with :meth:`finishing`): :meth:`wait` and :meth:`wait_all` call ``fire``
        first, so that a process about to end, or a test case that ends, sends it now."""
        with self._lock:
            self._deferred.setdefault(scope, []).append(fire)

    def undefer(self, scope: Hashable, fire: Callable[[], None]) -> None:
        """``fire`` was sent, or cancelled: nobody need call it any more."""
        with self._lock:
            pending = self._deferred.get(scope)
            if pending is not None and fire in pending:
                pending.remove(fire)
                if not pending:
                    del self._deferred[scope]

    def _fire_deferred(self, scope: Hashable | None) -> None:
        with self._lock:
            if scope is None:
                fires = [f for pending in self._deferred.values() for f in pending]
                self._deferred.clear()
            else:
                fires = self._deferred.pop(scope, [])
        for fire in fires:
            fire()

    def wait(self, scope: Hashable, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) for every finishing step of the table's commits that is still
        running (deferred ones are sent first); whether they all ended. Their errors were handled where they
        happened; a ``BaseException`` (a simulated crash) is raised again here."""
        self._fire_deferred(scope)
        with self._lock:
            running = list(self._running.get(scope, ()))
        _, not_done = wait(running, timeout=timeout)
        with self._lock:
            crashed = self._crashed.pop(scope, None)
        if crashed is not None:
            raise crashed
        return not not_done

    def wait_all(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) for every table's running steps and forget their simulated
        crashes (between test cases, so that nothing of one lands in the next; and at exit); whether they
        all ended. Deferred steps are sent first."""
        self._fire_deferred(None)
        with self._lock:
            running = [future for futures in self._running.values() for future in futures]
        _, not_done = wait(running, timeout=timeout)
        with self._lock:
            self._crashed.clear()
        return not not_done

    def _ended(self, scope: Hashable, future: Future) -> None:
        error = None if future.cancelled() else future.exception()
        with self._lock:
            if error is not None and not isinstance(error, Exception):
                self._crashed.setdefault(scope, error)
            running = self._running.get(scope)
            if running is not None:
                running.discard(future)
                if not running:
                    del self._running[scope]

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._newest.clear()
        self._running.clear()
        self._crashed.clear()
        self._finishing_seconds.clear()
        self._waited.clear()
        self._deferred.clear()
