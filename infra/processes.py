"""What every server and cluster the project starts has in common: free ports on 127.0.0.1, a child
process in a session of its own, stopped by its PID, and a ``main`` that keeps a stack up until a signal."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
from collections.abc import Callable
from contextlib import ExitStack
from typing import Protocol

LOCAL_IP = "127.0.0.1"


_SERVER_PORTS = (20000, 32000)
"""Where server ports are chosen: below the kernel's ephemeral range (Linux's default 32768-60999), from which
every outgoing connection of a busy test run takes its local port. A port taken from that range (``bind`` to
port 0) may be given to a client's connection between the moment it is released here and the moment the
server binds it; a port below it is given only to a server that asks for it by number."""
_RANDOM = random.SystemRandom()  # never the seeded global generator: two test processes must not choose alike


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 for servers: chosen at random below the ephemeral
    range and checked by binding them all at once (so they differ and are free now); ports from the
    ephemeral range if that range is unusable here."""
    low, high = _SERVER_PORTS
    chosen: list[int] = []
    with ExitStack() as stack:
        for port in _RANDOM.sample(range(low, high), min(high - low, 64 * count)):
            probe = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                probe.bind((LOCAL_IP, port))
            except OSError:
                continue
            chosen.append(port)
            if len(chosen) == count:
                return chosen
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for s in sockets:
            s.bind((LOCAL_IP, 0))
        return [s.getsockname()[1] for s in sockets]


def free_port() -> int:
    return free_ports(1)[0]


def stop_process(process: subprocess.Popen | None, *, timeout: float = 10.0, group: bool = False) -> None:
    """Stop ``process`` by its PID: SIGTERM, then SIGKILL after ``timeout`` seconds. ``group`` signals its
    whole process group (a process started with ``start_new_session=True`` leads one), so children it
    started (a Spark worker's executors) go with it."""
    if process is None or process.poll() is not None:
        return

    def send(sig: int) -> None:
        try:
            if group:
                os.killpg(process.pid, sig)
            else:
                process.send_signal(sig)
        except ProcessLookupError:
            pass

    send(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait(timeout=10)


class _Stack(Protocol):
    def storage_options(self) -> dict[str, str]: ...

    def stop(self) -> None: ...


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)


def serve_until_signal(start: Callable[[], _Stack], describe: Callable[[_Stack], str]) -> None:
    """``python -m infra.<stack>``: start a stack, print how to use it, keep it up until Ctrl-C or a kill by
    PID, then stop it."""
    # SIGINT may arrive ignored from a background shell; SIGTERM must stop the servers too.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    stack = start()
    try:
        print(describe(stack))
        for key, value in stack.storage_options().items():
            print(f"export {key}={value}")
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()
