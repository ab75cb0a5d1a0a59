"""Interleaving helpers: hold chosen threads at chosen failpoints, run writers in threads."""

from __future__ import annotations

import threading
from collections.abc import Callable

from logstore import failpoints

WAIT_SECONDS = 60


class Pauser:
    """Holds the thread named ``thread`` when it reaches failpoint ``name`` until released.

    Installed as the failpoint hook (``with Pauser() as pauser``); other threads and other failpoints pass.
    """

    def __init__(self):
        self._points: dict[tuple[str, str], tuple[threading.Event, threading.Event]] = {}

    def __enter__(self) -> Pauser:
        failpoints.set_hook(self)
        return self

    def __exit__(self, *exc) -> None:
        failpoints.set_hook(None)
        for _, release in self._points.values():
            release.set()

    def hold(self, thread: str, name: str) -> None:
        self._points[(thread, name)] = (threading.Event(), threading.Event())

    def wait_reached(self, thread: str, name: str) -> None:
        reached, _ = self._points[(thread, name)]
        assert reached.wait(WAIT_SECONDS), f"{thread} never reached {name}"

    def release(self, thread: str, name: str) -> None:
        self._points[(thread, name)][1].set()

    def __call__(self, name: str) -> None:
        found = self._points.get((threading.current_thread().name, name))
        if found is not None:
            reached, release = found
            reached.set()
            assert release.wait(WAIT_SECONDS), f"{name} was never released"


class Run:
    """``fn()`` in a thread named ``name``; ``result()`` joins and returns its value or raises its error."""

    def __init__(self, name: str, fn: Callable[[], object]):
        self.value: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # handed to the test by result()
            self.error = exc

    def outcome(self) -> object:
        """The value, or the exception instance, once the thread is done."""
        self.thread.join(WAIT_SECONDS)
        assert not self.thread.is_alive(), f"{self.thread.name} did not finish"
        return self.error if self.error is not None else self.value

    def result(self) -> object:
        found = self.outcome()
        if isinstance(found, BaseException):
            raise found
        return found
