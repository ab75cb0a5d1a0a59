"""A writer or reader process for the fault suites (fault suite, crash matrix, soak).

Run as a script: ``python tests/support/fault_worker.py ROLE JSON``, where JSON holds ``uri``, ``options``
(storage options) and the role's settings. It prints one JSON object per line on stdout, flushed at once,
so a parent that kills it knows exactly what it had begun and what it had been told:

- ``writer``: appends ``commits`` commits (or until ``until`` on ``time.monotonic()``), sequence numbers
  from ``first_seq``, each ``write_table`` carrying the marker rows of :func:`fault_harness.marker_rows`.
  Lines: ``{"event": "begin", "seq", "marker", "at"}`` before each commit, then ``{"event": "end", "seq",
  "marker", "at", "ok": true, "version"}`` or ``{"event": "end", ..., "ok": false, "error": {...}}``.
  ``"rival_first": true`` (with ``reuse_table``): the writer opens the table, then a rival commit lands
  before its first append, which therefore loses its version (reported as an ``end`` line of its own).
  ``"rival_at_put": true``: a rival blind append lands between the first append's check and its conditional
  put (from a failpoint hook), so that append loses at the put itself and goes on with its kept temp file.
- ``reader``: loads the table and reads its marker column in a loop until ``until`` (or ``once``); each read prints
  ``{"event": "read", "version", "rows", "duplicated", "partial"}`` or an error.

``"harness_seams": true`` adds the harness's own failpoints (:data:`fault_harness.HARNESS_SEAMS`).
Errors are described by :func:`fault_harness.describe_error` (class, module, whether it is a
``DynacommitError``, message), never re-raised: the parent judges them.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.fault_harness import (  # noqa: E402
    ROWS_PER_COMMIT,
    describe_error,
    marker,
    marker_counts,
    marker_rows,
)


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def run_writer(settings: dict) -> None:
    """``reuse_table``: keep one ``Table`` across commits, as a long-lived writer does (opened again after
    an error); otherwise every commit opens the table by URI, as a script does."""
    from table import Table, write_table

    uri, options, writer = settings["uri"], settings["options"], settings["writer"]
    seq = int(settings.get("first_seq", 0))
    count = settings.get("commits")
    until = settings.get("until")
    reuse = bool(settings.get("reuse_table"))
    table = None
    done = 0
    if settings.get("rival_first"):  # open the table, then let a rival commit land first: the next append loses
        table = Table(uri, storage_options=options)
        rival = marker(f"{writer}-rival", 0)
        result = write_table(Table(uri, storage_options=options), marker_rows(f"{writer}-rival", 0))
        emit(event="end", writer=writer, seq=-1, marker=rival, at=time.monotonic(), ok=True, version=result.version)
    if settings.get("rival_at_put"):
        _rival_at_put(uri, options, writer, settings.get("rival_at_group"))
    while (count is None or done < count) and (until is None or time.monotonic() < until):
        name = marker(writer, seq)
        emit(event="begin", writer=writer, seq=seq, marker=name, at=time.monotonic())
        try:
            if reuse and table is None:
                table = Table(uri, storage_options=options)
            target = table if reuse else uri
            result = write_table(target, marker_rows(writer, seq), mode="append",
                                 storage_options=None if reuse else options)
        except Exception as exc:  # noqa: BLE001 - the parent judges every error
            table = None
            emit(event="end", writer=writer, seq=seq, marker=name, at=time.monotonic(), ok=False,
                 error=describe_error(exc))
        else:
            emit(event="end", writer=writer, seq=seq, marker=name, at=time.monotonic(), ok=True,
                 version=result.version)
        seq += 1
        done += 1
    emit(event="done", writer=writer)


def _rival_at_put(uri: str, options: dict, writer: str, at_group: str | None = None) -> None:
    """At the first conditional put this process sends, let a rival append of its own win that version (the
    append then queues for group commit). ``at_group``: at the first group transaction of the queued append,
    a second rival wins that version first: ``append`` leads a group that takes the queued append (which
    then finds itself claimed), ``alter`` changes the table's properties (the queued append then conflicts
    and withdraws)."""
    from logstore import failpoints
    from table import Table, write_table

    state = {"done": False, "group": at_group is None}

    def hook(name: str) -> None:
        if name == "logstore.write.before_put_entry" and not state["done"]:
            state["done"] = True
            rival = marker(f"{writer}-rival", 0)
            result = write_table(Table(uri, storage_options=options), marker_rows(f"{writer}-rival", 0))
            emit(event="end", writer=writer, seq=-1, marker=rival, at=time.monotonic(), ok=True,
                 version=result.version)
        elif name == "logstore.group.before_transaction" and state["done"] and not state["group"]:
            state["group"] = True
            table = Table(uri, storage_options=options)
            if at_group == "alter":
                table.alter.set_table_properties({"delta.logRetentionDuration": "interval 31 days"})
                return
            rival = marker(f"{writer}-rival", 1)
            result = write_table(table, marker_rows(f"{writer}-rival", 1))
            emit(event="end", writer=writer, seq=-1, marker=rival, at=time.monotonic(), ok=True,
                 version=result.version)

    failpoints.set_hook(hook)


def run_reader(settings: dict) -> None:
    from table import Table

    until = settings["until"]
    once = bool(settings.get("once"))
    while once or time.monotonic() < until:
        started = time.monotonic()
        try:
            table = Table(settings["uri"], storage_options=settings["options"])
            rows = table.to_pyarrow_table(columns=["marker"])
        except Exception as exc:  # noqa: BLE001 - the parent judges every error
            emit(event="read", ok=False, at=started, error=describe_error(exc))
        else:
            counts = marker_counts(rows)
            emit(event="read", ok=True, at=started, seconds=time.monotonic() - started, version=table.version,
                 rows=rows.num_rows, duplicated=sorted(m for m, n in counts.items() if n > ROWS_PER_COMMIT),
                 partial=sorted(m for m, n in counts.items() if n % ROWS_PER_COMMIT))
        if once:
            break
        time.sleep(float(settings.get("pause", 0.5)))
    emit(event="done")


def main() -> None:
    role, settings = sys.argv[1], json.loads(sys.argv[2])
    if settings.get("harness_seams"):
        from tests.support.fault_harness import install_harness_seams

        install_harness_seams()
    {"writer": run_writer, "reader": run_reader}[role](settings)


if __name__ == "__main__":
    main()
