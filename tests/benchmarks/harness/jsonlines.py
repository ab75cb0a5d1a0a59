"""The worker side of the JSON-lines protocol between the bench driver and its workers.

A worker reads one JSON request per line on stdin (``{"cmd": NAME, ...}``) and answers each with one
line: ``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": "...", "traceback": "..."}``. The
first line it writes is ``{"ready": true, "pid": N}``. Standard library only (the peer imports it).
"""

from __future__ import annotations

import json
import os
import sys
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
        try:
            if name not in commands:
                raise KeyError(f"unknown command {name!r}; known: {', '.join(sorted(commands))}")
            reply = {"ok": True, "result": commands[name](request)}
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which stops the run with it
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        protocol.write(json.dumps(reply) + "\n")
