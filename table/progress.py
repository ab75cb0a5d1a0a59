"""Progress of long operations: the library reports it, whoever runs the library shows it.

A long operation (vacuum deleting files, aborting uploads, a job commit completing many uploads,
compaction) wraps its work in a task and advances it as units of work finish::

    from table import progress

    with progress.task("deleting files", total=len(keys)) as task:
        for batch in batches:
            objects.delete(batch)
            task.advance(len(batch))

The contract:

1. ``task()`` is entered in the thread that runs the operation; ``advance(n)`` may then be called from
   any thread (a worker pool completing uploads). ``total`` is None when unknown.
2. Library code only reports: it never prints. The default reporter, :class:`LogReporter`, logs plain
   lines at INFO on the ``table.progress`` logger: one when the task starts, at most one every
   ``interval`` seconds while it runs (so a million ``advance`` calls cost a million additions and a
   handful of lines), and one when it ends, done or failed.
3. Whoever runs the operation chooses how it is shown for the current context with
   ``with progress.reporting(reporter): ...`` (a context variable: threads and asyncio tasks started
   elsewhere keep their own). The ``dynacommit`` command shows a progress bar this way when its stderr is
   a terminal. A reporter implements :meth:`Reporter.start`, returning a :class:`Task`.
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["LogReporter", "Reporter", "Task", "current_reporter", "reporting", "task"]

log = logging.getLogger(__name__)


class Task(abc.ABC):
    """One long operation under way, as a reporter follows it."""

    @abc.abstractmethod
    def advance(self, n: int = 1) -> None:
        """``n`` more units of work are done. Safe to call from any thread."""

    @abc.abstractmethod
    def close(self, *, failed: bool) -> None:
        """The operation ended (``failed``: by an exception). Called once, by :func:`task`."""


class Reporter(abc.ABC):
    """Shows tasks: a log, a progress bar."""

    @abc.abstractmethod
    def start(self, description: str, *, total: int | None) -> Task:
        """A task called ``description`` (``"deleting files"``) with ``total`` units of work starts."""


class LogReporter(Reporter):
    """Plain log lines at INFO on ``logger`` (default ``table.progress``), at most one per ``interval``
    seconds per task between its start and end lines. ``clock`` is a monotonic clock in seconds."""

    def __init__(self, *, logger: logging.Logger = log, interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.interval = interval
        self.clock = clock

    def start(self, description: str, *, total: int | None) -> Task:
        return _LogTask(self, description, total)


class _LogTask(Task):
    def __init__(self, reporter: LogReporter, description: str, total: int | None):
        self._reporter = reporter
        self._description = description
        self._total = total
        self._done = 0
        self._lock = threading.Lock()
        self._started = self._last_line = reporter.clock()
        reporter.logger.info("%s: started, %s", description, self._count())

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self._done += n
            now = self._reporter.clock()
            if now - self._last_line < self._reporter.interval:
                return
            self._last_line = now
            self._reporter.logger.info("%s: %s", self._description, self._count())

    def close(self, *, failed: bool) -> None:
        with self._lock:
            elapsed = self._reporter.clock() - self._started
            self._reporter.logger.info("%s: %s, %s in %.1f s", self._description, "failed" if failed else "done",
                                       self._count(), elapsed)

    def _count(self) -> str:
        if self._total is None:
            return f"{self._done} done"
        percent = f" ({100 * self._done // self._total}%)" if self._total else ""
        return f"{self._done}/{self._total}{percent}"


_DEFAULT = LogReporter()
_current: contextvars.ContextVar[Reporter] = contextvars.ContextVar("dynacommit_progress_reporter", default=_DEFAULT)


def current_reporter() -> Reporter:
    """The reporter tasks started in this context go to."""
    return _current.get()


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Send the tasks started inside the block (in this context) to ``reporter``."""
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)


@contextlib.contextmanager
def task(description: str, *, total: int | None = None) -> Iterator[Task]:
    """Report one long operation to the current reporter (see the module docstring)."""
    started = _current.get().start(description, total=total)
    try:
        yield started
    except BaseException:
        started.close(failed=True)
        raise
    started.close(failed=False)
