"""A process that read or wrote successfully exits with status 0, also after repairing a commit whose writer
died, on both stacks (issue 27, item 1).

Such a reader used to print the right rows and then die at interpreter exit with SIGABRT ("terminate
called without an active exception", status -6) in about one run in ten: one of Arrow's threads released a
buffer over a Python bytes object after the read returned, and could not take the GIL from a finalizing
interpreter (the cause is pinned by ``tests/integration/test_read_small_files.py``, deterministically).
Here every run is a fresh process, as a job runner starts it: a writer dies after its PutItem (simulated in
this process: the commit is left won but unfinished), then a fresh reader repairs and reads, then a fresh
writer appends.

``make test`` runs ``DYNACOMMIT_EXIT_RUNS`` (default 5) rounds per stack, ten processes each: a fresh
process costs seconds of imports on a loaded machine, and the suite has a time budget. RELIABILITY.md
records the run with 100 rounds (200 processes per stack) and its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from logstore import failpoints, open_log_store
from table import Table, write_table
from table.table import forget_snapshots
from tests.support.fault_harness import ROOT, ROWS_PER_COMMIT, child_env, marker_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKER = os.path.join(ROOT, "tests", "support", "exit_worker.py")
RUNS = int(os.environ.get("DYNACOMMIT_EXIT_RUNS", "5"))


@pytest.fixture(params=["moto", "seaweedfs+dynalite"])
def stack(request) -> tuple[str, dict[str, str]]:
    """A fresh table URI and its storage options on the moto stack, then on SeaweedFS + dynalite."""
    if request.param == "moto":
        local = request.getfixturevalue("local_stack")
        return f"s3://{local.bucket}/exit/{uuid.uuid4().hex[:12]}", local.storage_options()
    servers = request.getfixturevalue("servers")
    return f"s3://{servers.bucket}/exit/{uuid.uuid4().hex[:12]}", servers.storage_options()


def fresh_process(scenario: str, settings: dict) -> tuple[int, list[dict], str]:
    done = subprocess.run([sys.executable, WORKER, scenario, json.dumps(settings)], env=child_env(),
                          capture_output=True, text=True, timeout=300, start_new_session=True)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr[-3000:]


def test_readers_that_repair_and_writers_exit_0_in_fresh_processes(stack):
    uri, options = stack
    for seq in range(3):  # a few data files, so the reader's scan has fragments to release
        write_table(uri, marker_rows("setup", seq), storage_options=options)
    rows = 3 * ROWS_PER_COMMIT
    failures = []
    for run in range(RUNS):
        with failpoints.armed({"logstore.write.after_put_entry": "crash"}), pytest.raises(failpoints.FailpointCrash):
            write_table(uri, marker_rows("died", run), storage_options=options)
        unfinished = open_log_store(uri, storage_options=options)._latest_entry()
        assert not unfinished.complete
        rows += ROWS_PER_COMMIT
        status, lines, err = fresh_process("read", {"uri": uri, "options": options})
        if status != 0 or lines != [{"outcome": "ok", "version": unfinished.version, "rows": rows}]:
            failures.append(f"round {run}: the reader exited {status}, printed {lines}: {err}")
        repaired = open_log_store(uri, storage_options=options)._get_entry(unfinished.version)
        assert repaired.complete, f"round {run}: the reader did not finish version {unfinished.version}"
        status, lines, err = fresh_process("append", {"uri": uri, "options": options, "seq": run})
        if status != 0 or lines != [{"outcome": "ok", "version": unfinished.version + 1}]:
            failures.append(f"round {run}: the writer exited {status}, printed {lines}: {err}")
        rows += ROWS_PER_COMMIT
    assert failures == [], f"{len(failures)} of {2 * RUNS} fresh processes failed"
    forget_snapshots()
    assert Table(uri, storage_options=options).to_pyarrow_table().num_rows == rows
