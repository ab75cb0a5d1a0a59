"""The worker side of the JSON-lines protocol between the bench driver and its workers.

A worker reads one JSON request per line on stdin (``{"cmd": NAME, ...}``) and answers each with one
line: ``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": "...", "traceback": "..."}``, each with
``peak_rss_mb``: the process's peak resident memory during that request (Linux: the high-water mark is
reset before it and read after it), and ``cpu_s``: the CPU seconds of the whole process (every thread,
native ones included) during it, which a loaded machine moves far less than wall time. The first line it writes is ``{"ready": true, "pid": N}``. Standard
library only (the peer imports it).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable

Command = Callable[[dict], dict]


def serve(commands: dict[str, Command]) -> None:
    """Answer requests until stdin closes. Anything printed by the worker's libraries (Python or native
    code writing to fd 1) goes to stderr, so it can never corrupt the protocol."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    protocol.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        name = request.get("cmd")
        _reset_peak()
        cpu = time.process_time()
        try:
            if name not in commands:
                raise KeyError(f"unknown command {name!r}; known: {', '.join(sorted(commands))}")
            reply = {"ok": True, "result": commands[name](request)}
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which stops the run with it
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        reply["peak_rss_mb"] = _peak_mb()
        reply["cpu_s"] = time.process_time() - cpu
        protocol.write(json.dumps(reply) + "\n")


def _reset_peak() -> None:
    """Start a new high-water mark of resident memory (writing 5 to clear_refs, Linux 4.0+)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_mb() -> float | None:
    """Peak resident memory since the last reset (``VmHWM``), in MB; None where /proc has no such line."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return None
