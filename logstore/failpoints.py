"""Failpoints: named places in the commit, recovery, checkpoint and job-commit protocols where a test can
make the process fail, pause or die, to prove that whatever happens there loses and doubles nothing.

Every failpoint is declared once, at import, by the module whose step it marks::

    BEFORE_PUT_ENTRY = failpoints.declare("logstore.write.before_put_entry", "the temp file is written; ...")
    ...
    failpoints.hit(BEFORE_PUT_ENTRY)

and armed from the environment of a (child) process, so a test can cut a real writer anywhere::

    DYNACOMMIT_FAILPOINTS="logstore.write.after_put_entry=kill"
    DYNACOMMIT_FAILPOINTS="table.checkpoint.before_hint=raise;logstore.recover.before_copy=sleep:200"

Actions: ``kill`` (SIGKILL of this process: nothing after the point runs, no ``finally``), ``raise``
(:class:`FailpointError`, an :class:`~logstore.errors.AmbiguousError`: the step may or may not have
happened, which is what a lost answer looks like), ``sleep:MS``, and, in-process only, ``crash``
(:class:`FailpointCrash`, a ``BaseException`` the algorithm does not catch: the process "dies" but the
test goes on). An action may carry a hit count: ``kill@3`` acts on the third hit, the earlier ones pass.

Unarmed, :func:`hit` is one truth test of an empty dict. Tests may also install a hook (:func:`set_hook`)
called with the name at every hit; the model-based test uses it to interleave several writers step by
step.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from logstore.errors import AmbiguousError, InvalidArgumentError

__all__ = [
    "ENV",
    "FailpointCrash",
    "FailpointError",
    "armed",
    "declare",
    "declared",
    "hit",
    "set_hook",
]

ENV = "DYNACOMMIT_FAILPOINTS"


class FailpointError(AmbiguousError):
    """Raised by an armed ``raise`` failpoint: stands for a step whose answer was lost."""

    def __init__(self, name: str):
        super().__init__(f"failpoint {name} fired (injected failure)", operation=f"failpoint:{name}")
        self.name = name

    def __reduce__(self):
        return type(self), (self.name,)


class FailpointCrash(BaseException):
    """Raised by an armed ``crash`` failpoint: the process dies here as far as the algorithm can tell."""


@dataclass(frozen=True)
class _Action:
    kind: str           # kill | raise | crash | sleep
    sleep_ms: int = 0
    on_hit: int = 1     # act on this hit (1-based); earlier hits pass


_declared: dict[str, str] = {}
_armed: dict[str, _Action] = {}
_hits: dict[str, int] = {}
_hook: Callable[[str], None] | None = None
_lock = threading.Lock()


def declare(name: str, doc: str) -> str:
    """Register a failpoint (``layer.operation.when``) and return its name."""
    if name in _declared and _declared[name] != doc:
        raise RuntimeError(f"failpoint {name} declared twice")
    _declared[name] = doc
    return name


def declared() -> dict[str, str]:
    """Every failpoint declared so far (import the modules first), with what it marks."""
    return dict(_declared)


def hit(name: str) -> None:
    """The process reached failpoint ``name``: act if it is armed."""
    if _hook is not None:
        _hook(name)
    if not _armed:
        return
    action = _armed.get(name)
    if action is None:
        return
    with _lock:
        _hits[name] = count = _hits.get(name, 0) + 1
    if count != action.on_hit:
        return
    if action.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # SIGKILL is asynchronous on some systems; never run past the point
    elif action.kind == "raise":
        raise FailpointError(name)
    elif action.kind == "crash":
        raise FailpointCrash(name)
    elif action.kind == "sleep":
        time.sleep(action.sleep_ms / 1000)


def parse(spec: str) -> dict[str, _Action]:
    """``name=action[@n];...`` (``,`` also separates) into armed actions; InvalidArgumentError naming the
    bad part otherwise."""
    armed: dict[str, _Action] = {}
    for part in spec.replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        name, sep, action = part.partition("=")
        if not sep or not name.strip():
            raise InvalidArgumentError(f"{ENV}: {part!r} is not name=action (actions: kill, raise, crash, sleep:MS)")
        action, _, count = action.strip().partition("@")
        on_hit = 1
        if count:
            if not count.isdigit() or int(count) < 1:
                raise InvalidArgumentError(f"{ENV}: hit count {count!r} of {name} must be a positive integer")
            on_hit = int(count)
        if action in ("kill", "raise", "crash"):
            armed[name.strip()] = _Action(action, on_hit=on_hit)
        elif action.startswith("sleep:") and action[6:].isdigit():
            armed[name.strip()] = _Action("sleep", sleep_ms=int(action[6:]), on_hit=on_hit)
        else:
            raise InvalidArgumentError(f"{ENV}: unknown action {action!r} for {name}; use kill, raise, crash or sleep:MS")
    return armed


@contextmanager
def armed(spec: str | dict[str, str]) -> Iterator[None]:
    """Arm failpoints in this process for the block (tests); ``spec`` as in the environment variable, or a
    ``{name: action}`` dict. Hit counts restart."""
    text = spec if isinstance(spec, str) else ";".join(f"{k}={v}" for k, v in spec.items())
    parsed = parse(text)
    with _lock:
        saved, saved_hits = dict(_armed), dict(_hits)
        _armed.clear()
        _armed.update(parsed)
        _hits.clear()
    try:
        yield
    finally:
        with _lock:
            _armed.clear()
            _armed.update(saved)
            _hits.clear()
            _hits.update(saved_hits)


def set_hook(hook: Callable[[str], None] | None) -> None:
    """Call ``hook(name)`` at every failpoint hit in this process (None removes it)."""
    global _hook
    _hook = hook


_armed.update(parse(os.environ.get(ENV, "")))
