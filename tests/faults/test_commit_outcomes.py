"""A commit's outcome is true at every exit, and no DynamoDB item is left without ``expireTime`` (issue 18,
items 1 and 3).

Each test runs a real process (``tests/support/exit_worker.py``) against the moto stack, through the fault
proxy where a request must be slow or fail, and judges what it was told against what the table and the
DynamoDB items hold, read straight from the stack (a reader would finish what it finds).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from logstore import open_log_store
from logstore.deadline import CLEANUP_SECONDS
from table import Table, write_table
from tests.support.fault_harness import (
    ROOT,
    audit,
    child_env,
    item_problems,
    marker,
    marker_rows,
    table_items,
)
from tests.support.fault_proxy import FaultRule

pytestmark = pytest.mark.slow

WORKER = os.path.join(ROOT, "tests", "support", "exit_worker.py")


def run_worker(scenario: str, settings: dict, *, timeout: float = 120) -> tuple[subprocess.CompletedProcess, list]:
    done = subprocess.run([sys.executable, WORKER, scenario, json.dumps(settings)], env=child_env(),
                          capture_output=True, text=True, timeout=timeout, start_new_session=True)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, lines


def versions(items: list[dict]) -> dict[int, dict]:
    return {int(item["fileName"]["S"][:20]): item for item in items}


# --- item 1: once N.json holds our bytes, the writer is told so, whatever the pool's state --------


@pytest.mark.parametrize("ack", ["published", "durable"])
def test_a_commit_made_while_the_interpreter_shuts_down_is_acknowledged_once_and_finished(
        ack, s3_uri, storage_options):
    """A non-daemon thread commits after ``main`` returned, when ``concurrent.futures`` refuses new work:
    the commit is acknowledged (not an error: a blind retry would write it twice), it is in the table once,
    and its ``N.json`` is written and its entry complete with ``expireTime`` by the time the process has
    ended (with ``durable``, the whole publish runs after the acknowledgement)."""
    write_table(s3_uri, marker_rows("init", 0), storage_options=storage_options)
    done, lines = run_worker("late-append", {"uri": s3_uri,
                                             "options": dict(storage_options, DYNACOMMIT_COMMIT_ACK=ack)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines == [{"outcome": "ok", "version": 1}], done.stderr[-3000:]
    store = open_log_store(s3_uri, storage_options=storage_options)
    assert item_problems(table_items(store)) == []  # read before any reader could finish it
    found = audit(s3_uri, storage_options, with_deltalake=False)
    assert found.marker_versions()[marker("late", 0)] == [1]
    assert not found.problems()


def test_a_race_lost_while_the_interpreter_shuts_down_is_version_exists(s3_uri, storage_options):
    store = open_log_store(s3_uri, storage_options=storage_options)
    store.write(0, b'{"commitInfo":{"by":"setup"}}\n')
    done, lines = run_worker("late-lost-race", {"uri": s3_uri, "options": storage_options, "version": 1})
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0]["outcome"] == "error", lines
    assert lines[0]["error"]["type"] == "VersionExistsError" and lines[0]["error"]["dynacommit"], lines
    assert store.read(1) == b'{"commitInfo":{"by":"rival"}}\n'
    assert [o.key for o in store.objects.list(store.log_prefix + ".tmp/")] == []


@pytest.mark.parametrize("how,ack", [
    ("return", "published"), ("os._exit", "published"), ("sigterm", "published"), ("sigkill", "published"),
    # Acknowledged at the DynamoDB entry: all of N.json's publishing is in the background, left to the
    # next reader by a killed process (a normal exit waits for it: the late-append test above).
    ("sigkill", "durable"),
])
def test_a_process_ending_right_after_its_commits_leaves_at_most_the_newest_entry_to_finish(
        how, ack, s3_uri, storage_options, make_fault_proxy):
    """Two commits back to back, each UpdateItem held 2 s by the proxy, then the process ends at once. At
    most the newest entry is left incomplete (with ``durable``, maybe without its ``N.json``), and the next
    reader finishes it. A normal exit waits for the UpdateItems (they end within the cleanup deadline)."""
    write_table(s3_uri, marker_rows("init", 0), storage_options=storage_options)
    proxy = make_fault_proxy(seed=18, slow_seconds=2.0)
    proxy.set_faults([FaultRule("slow", 1.0, service="dynamodb", operation="UpdateItem")])
    options = dict(proxy.storage_options(storage_options), DYNACOMMIT_COMMIT_ACK=ack)
    done, lines = run_worker("commits-then-exit", {"uri": s3_uri, "options": options, "commits": 2, "how": how})
    expected_code = {"return": 0, "os._exit": 0, "sigterm": -signal.SIGTERM, "sigkill": -signal.SIGKILL}[how]
    assert done.returncode == expected_code, done.stderr[-3000:]
    assert lines == [{"outcome": "ok", "version": 1}, {"outcome": "ok", "version": 2}], done.stderr[-3000:]
    store = open_log_store(s3_uri, storage_options=storage_options)
    items = table_items(store)
    assert sorted(versions(items)) == [0, 1, 2]
    assert item_problems(items, except_newest=how != "return") == []
    Table(s3_uri, storage_options=storage_options)  # the next reader
    assert item_problems(table_items(store)) == []
    found = audit(s3_uri, storage_options, with_deltalake=False)
    assert not found.problems()
    assert [found.marker_versions()[marker("exiting", n)] for n in range(2)] == [[1], [2]]


def test_exit_waits_for_an_unanswered_update_item_no_longer_than_the_cleanup_deadline(
        s3_uri, storage_options, make_fault_proxy):
    """The UpdateItem of the last commit gets no answer for 300 s: the process still ends soon after
    ``main`` returns, leaving that one entry incomplete for the next reader. (A bound on when the process
    ends, far above the cleanup deadline; not a measure of speed.)"""
    write_table(s3_uri, marker_rows("init", 0), storage_options=storage_options)
    proxy = make_fault_proxy(seed=18, slow_seconds=300.0)
    proxy.set_faults([FaultRule("slow", 1.0, service="dynamodb", operation="UpdateItem")])
    bound = 8 * CLEANUP_SECONDS
    try:
        done, lines = run_worker("commits-then-exit", {"uri": s3_uri, "options": proxy.storage_options(storage_options),
                                                       "commits": 1, "how": "return"}, timeout=bound)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the process was still exiting {bound:g} s after its commit returned: exit waited for the "
                    f"unanswered UpdateItem")
    assert done.returncode == 0 and lines == [{"outcome": "ok", "version": 1}], done.stderr[-3000:]
    store = open_log_store(s3_uri, storage_options=storage_options)
    assert item_problems(table_items(store), except_newest=True) == []
    Table(s3_uri, storage_options=storage_options)
    assert item_problems(table_items(store)) == []


# --- item 3: no item is left without expireTime ---------------------------------------------------


def test_an_update_item_that_failed_in_the_background_is_finished_by_the_same_process_next_commit(
        s3_uri, storage_options, make_fault_proxy):
    """The UpdateItem marking version 1 complete fails (every attempt answered 500); the same process's
    next commit, which skips the read of version 1's entry because it wrote version 1 itself, must still
    finish it: otherwise the item never gets ``expireTime`` and no TTL ever removes it."""
    write_table(s3_uri, marker_rows("init", 0), storage_options=storage_options)
    proxy = make_fault_proxy(seed=18)
    options = proxy.storage_options(storage_options)
    table = Table(s3_uri, storage_options=options)
    proxy.set_faults([FaultRule("500", 1.0, service="dynamodb", operation="UpdateItem", limit=7)])
    assert write_table(table, marker_rows("bg", 0)).version == 1
    table.log_store.wait_finished()
    store = open_log_store(s3_uri, storage_options=storage_options)
    assert not versions(table_items(store))[1]["complete"]["S"] == "true", "the proxy did not fail the UpdateItem"
    proxy.clear_faults()
    assert write_table(table, marker_rows("bg", 1)).version == 2
    table.log_store.wait_finished()
    assert item_problems(table_items(store)) == []
