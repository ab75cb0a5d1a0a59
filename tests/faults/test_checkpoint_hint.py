"""``_last_checkpoint`` written by two writers at once never goes backwards, nor names a missing file
(issue 18, item 7).

Writer A checkpoints version 2; the fault proxy holds its PUT of ``_last_checkpoint`` while writer B
commits versions 3 and 4 and checkpoints version 4. When A's PUT is let through, the hint must still name
version 4 (an unconditional PUT would put it back to 2: readers then replay two more commits, and once log
cleanup removes checkpoint 2, the hint would name a file that is gone).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from logstore import open_log_store
from table import Table, write_table
from table.log.checkpoint import checkpoint_names, read_last_checkpoint
from tests.support.fault_harness import marker_rows
from tests.support.fault_proxy import FaultRule

pytestmark = pytest.mark.slow

HELD_SECONDS = 8.0


def test_a_late_hint_of_an_older_checkpoint_does_not_replace_a_newer_one(local_stack, storage_options,
                                                                          make_fault_proxy):
    uri = f"s3://{local_stack.bucket}/hint/{uuid.uuid4().hex[:12]}"
    write_table(uri, marker_rows("a", 0), storage_options=storage_options,
                configuration={"delta.checkpointInterval": "2"})
    write_table(uri, marker_rows("a", 1), storage_options=storage_options)
    proxy = make_fault_proxy(seed=18, slow_seconds=HELD_SECONDS)
    proxy.set_faults([FaultRule("slow", 1.0, service="s3", operation="PutObject", path_contains="_last_checkpoint",
                                limit=1)])
    slow_writer = Table(uri, storage_options=proxy.storage_options(storage_options))
    outcome: list = []

    def checkpointing_writer() -> None:
        try:
            outcome.append(write_table(slow_writer, marker_rows("a", 2)).version)  # version 2: a checkpoint
        except Exception as exc:  # noqa: BLE001 - judged below
            outcome.append(exc)

    thread = threading.Thread(target=checkpointing_writer)
    thread.start()
    deadline = time.monotonic() + 60
    while not proxy.stats().faults and time.monotonic() < deadline:
        time.sleep(0.02)  # until A's PUT of the hint is held by the proxy
    assert proxy.stats().faults == {"slow": 1}, "A's PUT of _last_checkpoint never reached the proxy"
    assert write_table(uri, marker_rows("b", 3), storage_options=storage_options).version == 3
    assert write_table(uri, marker_rows("b", 4), storage_options=storage_options).version == 4
    store = open_log_store(uri, storage_options=storage_options)
    # version 4 went past versions 2 and 3 unread (judged by their entries): its checkpoint is written after the
    # commit returned, a finishing step of this process's commits to the table
    assert store.wait_finished(30)
    assert read_last_checkpoint(store).version == 4
    thread.join(timeout=HELD_SECONDS + 60)
    assert outcome == [2]
    hint = read_last_checkpoint(store)
    assert hint.version == 4, f"_last_checkpoint went back to version {hint.version}"
    assert all(store.stat_file(name) is not None for name in checkpoint_names(hint.version, hint.parts))
