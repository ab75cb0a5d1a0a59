"""A process that commits around its own end, for the tests of a commit's outcome at exit.

``python tests/support/exit_worker.py SCENARIO JSON`` (JSON: ``uri``, ``options``, scenario settings); it
prints one JSON line per outcome, flushed at once:

- ``late-append``: ``main`` returns at once; a non-daemon thread waits until the interpreter has begun to
  shut down (``concurrent.futures`` refuses new work from then on), then appends one marker commit with
  ``write_table``. Prints ``{"outcome": "ok", "version": N}`` or ``{"outcome": "error", ...}``.
- ``late-lost-race``: the same thread writes version ``version`` through the log store while a rival,
  cut in at ``logstore.write.before_put_entry``, wins that version first. Prints the outcome.
- ``commits-then-exit``: ``commits`` appends through one kept ``Table``, each acknowledged line printed,
  then the process ends the way ``how`` says: ``return`` (interpreter exit), ``os._exit``, ``sigterm``
  or ``sigkill``, right after the last write returned.
- ``read``: opens the table and reads it whole, as a script does (repairing an unfinished newest commit on
  the way); prints ``{"outcome": "ok", "version": N, "rows": R}``, then returns: the parent judges the exit
  status.
- ``append``: one ``write_table`` of a marker commit (``seq``), then returns; prints the version.
"""

from __future__ import annotations

import concurrent.futures.thread
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.fault_harness import describe_error, marker_rows  # noqa: E402


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def after_shutdown_began(work) -> threading.Thread:
    """A non-daemon thread running ``work`` once the interpreter is shutting down (main has returned and
    ``concurrent.futures`` has stopped taking work)."""

    def run() -> None:
        threading.main_thread().join()
        while not concurrent.futures.thread._shutdown:
            time.sleep(0.005)
        try:
            emit(outcome="ok", **(work() or {}))
        except Exception as exc:  # noqa: BLE001 - the parent judges every error
            emit(outcome="error", error=describe_error(exc))

    thread = threading.Thread(target=run, name="late-committer")
    thread.start()
    return thread


def late_append(settings: dict) -> None:
    from table import write_table

    def work() -> dict:
        result = write_table(settings["uri"], marker_rows("late", 0), storage_options=settings["options"])
        return {"version": result.version}

    after_shutdown_began(work)


def late_lost_race(settings: dict) -> None:
    from logstore import failpoints, open_log_store

    version = settings["version"]
    ours = open_log_store(settings["uri"], storage_options=settings["options"])
    rival = open_log_store(settings["uri"], storage_options=settings["options"])

    def cut_in(name: str) -> None:
        if name == "logstore.write.before_put_entry" and threading.current_thread().name == "late-committer":
            failpoints.set_hook(None)
            rival.write(version, b'{"commitInfo":{"by":"rival"}}\n')

    def work() -> dict:
        failpoints.set_hook(cut_in)
        ours.write(version, b'{"commitInfo":{"by":"late"}}\n')
        return {"version": version}

    after_shutdown_began(work)


def commits_then_exit(settings: dict) -> None:
    from table import Table, write_table

    table = Table(settings["uri"], storage_options=settings["options"])
    for seq in range(settings["commits"]):
        result = write_table(table, marker_rows("exiting", seq))
        emit(outcome="ok", version=result.version)
    how = settings["how"]
    if how == "os._exit":
        os._exit(0)
    if how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how != "return":
        time.sleep(60)  # the signal is on its way; never run past it


def read(settings: dict) -> None:
    from table import Table

    table = Table(settings["uri"], storage_options=settings["options"])
    emit(outcome="ok", version=table.version, rows=table.to_pyarrow_table().num_rows)


def append(settings: dict) -> None:
    from table import write_table

    result = write_table(settings["uri"], marker_rows("exit", settings["seq"]), storage_options=settings["options"])
    emit(outcome="ok", version=result.version)


def main() -> None:
    scenario, settings = sys.argv[1], json.loads(sys.argv[2])
    {"late-append": late_append, "late-lost-race": late_lost_race,
     "commits-then-exit": commits_then_exit, "read": read, "append": append}[scenario](settings)


if __name__ == "__main__":
    main()
