"""Progress bars on a terminal: the :class:`~table.progress.Reporter` the command uses when stderr is one.

Each task of :mod:`table.progress` becomes a rich bar (description, bar, done/total, elapsed time) that
stays on screen when it ends, marked ``failed`` if it did not finish. The bars are live only while a task
runs, so the command's normal output never mixes with them.
"""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from table.progress import Reporter, Task

__all__ = ["ProgressBars"]


class ProgressBars(Reporter):
    """Rich progress bars on ``console``."""

    def __init__(self, console: Console):
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=console)
        self._lock = threading.Lock()
        self._running = 0

    def start(self, description: str, *, total: int | None) -> Task:
        with self._lock:
            if self._running == 0:
                self._progress.start()
            self._running += 1
        return _Bar(self, self._progress.add_task(description, total=total), description)

    def _close(self, task_id: TaskID, description: str, *, failed: bool) -> None:
        if failed:
            self._progress.update(task_id, description=f"{description} (failed)")
        self._progress.stop_task(task_id)
        with self._lock:
            self._running -= 1
            if self._running == 0:
                self._progress.stop()


class _Bar(Task):
    def __init__(self, bars: ProgressBars, task_id: TaskID, description: str):
        self._bars = bars
        self._id = task_id
        self._description = description

    def advance(self, n: int = 1) -> None:
        self._bars._progress.advance(self._id, n)

    def close(self, *, failed: bool) -> None:
        self._bars._close(self._id, self._description, failed=failed)
