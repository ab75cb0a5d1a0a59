"""A reader in the process that just wrote: ``write`` returns before the UpdateItem that marks its entry
complete has answered (step 4 runs on the pool), so a reader right after it may find the entry incomplete.
It is this process's own commit, finished a moment later: the reader waits for that (bounded by its
deadline) rather than finishing the entry again, and a read-only reader (a dry run) does not warn that it
may not finish it.

Real in-memory stores; the UpdateItem is held at its failpoint until the reader has found the entry
incomplete.
"""

from __future__ import annotations

import logging
import threading

from logstore import failpoints, open_log_store
from logstore.readonly import read_only
from logstore.steps import WRITE_BEFORE_MARK_COMPLETE
from tests.support.memory import MemoryLogStore
from tests.unit.logstore.pausing import WAIT_SECONDS, Run

BODY = b'{"commitInfo":{"n":0}}\n'


class Held:
    """Failpoint hook holding whichever thread reaches ``name`` until ``release`` is set."""

    def __init__(self, name: str):
        self.name = name
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, name: str) -> None:
        if name == self.name:
            self.reached.set()
            assert self.release.wait(WAIT_SECONDS), f"{name} was never released"


class NoticingReader(MemoryLogStore):
    """The real store, telling the test when its Query found the newest entry incomplete."""

    found_incomplete = threading.Event()

    def _latest_entry(self):
        entry = super()._latest_entry()
        if entry is not None and not entry.complete:
            self.found_incomplete.set()
        return entry


def test_a_dry_run_right_after_its_own_write_waits_for_the_entry_and_warns_of_nothing(memory_uri, caplog):
    writer = open_log_store(memory_uri)
    held = Held(WRITE_BEFORE_MARK_COMPLETE)
    NoticingReader.found_incomplete.clear()
    reader = NoticingReader(writer.uri)  # another store on the same table in this process (a CLI dry run)
    assert reader.scope == writer.scope
    failpoints.set_hook(held)
    try:
        writer.write(0, BODY)
        assert held.reached.wait(WAIT_SECONDS)  # the UpdateItem is held: the entry is incomplete

        def dry_run() -> int:
            with read_only("a dry run"):
                return reader.latest_version()

        with caplog.at_level(logging.WARNING, logger="logstore"):
            run = Run("dry-run", dry_run)
            assert NoticingReader.found_incomplete.wait(WAIT_SECONDS)
            held.release.set()  # the reader has seen the entry incomplete; the write's UpdateItem goes on
            assert run.result() == 0
    finally:
        held.release.set()
        failpoints.set_hook(None)
    assert writer.wait_finished(WAIT_SECONDS)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert writer._get_entry(0).complete
    assert reader.read(0) == BODY


def test_a_reader_right_after_its_own_write_sends_no_second_update_item(memory_uri):
    """Not read-only: the reader would have marked the entry itself (a second UpdateItem, refused by its
    condition); it waits for the write's instead."""
    writer = open_log_store(memory_uri)
    held = Held(WRITE_BEFORE_MARK_COMPLETE)
    NoticingReader.found_incomplete.clear()
    marks: list[int] = []

    class CountingReader(NoticingReader):
        def _complete_entry(self, version, expire_time):
            marks.append(version)
            return super()._complete_entry(version, expire_time)

    reader = CountingReader(writer.uri)
    failpoints.set_hook(held)
    try:
        writer.write(0, BODY)
        assert held.reached.wait(WAIT_SECONDS)
        run = Run("reader", reader.latest_version)
        assert NoticingReader.found_incomplete.wait(WAIT_SECONDS)
        held.release.set()
        assert run.result() == 0
    finally:
        held.release.set()
        failpoints.set_hook(None)
    assert writer.wait_finished(WAIT_SECONDS)
    assert marks == []
    assert writer._get_entry(0).complete
