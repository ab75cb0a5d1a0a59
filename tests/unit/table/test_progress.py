"""table.progress: the default reporter's log lines (bounded in number, never printed), reporters chosen per
context, and tasks advanced from many threads."""

from __future__ import annotations

import logging
import threading

import pytest

from table import progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.INFO, logger="table.progress")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "table.progress"]


def test_many_steps_log_a_line_per_interval_and_print_nothing(lines, capsys):
    clock = Clock()
    with progress.reporting(progress.LogReporter(interval=5.0, clock=clock)):
        with progress.task("deleting files", total=200_000) as task:
            for _ in range(200_000):
                clock.now += 0.0005  # 100 s in all
                task.advance()
    logged = lines()
    assert logged[0] == "deleting files: started, 0/200000 (0%)"
    assert logged[-1] == "deleting files: done, 200000/200000 (100%) in 100.0 s"
    assert 2 + 19 <= len(logged) <= 2 + 20  # one every 5 s of the 100
    assert capsys.readouterr() == ("", "")


def test_a_failed_task_says_so_and_the_error_goes_on(lines):
    clock = Clock()
    with pytest.raises(OSError, match="gone"):
        with progress.reporting(progress.LogReporter(clock=clock)):
            with progress.task("aborting uploads", total=3) as task:
                task.advance()
                raise OSError("gone")
    assert lines() == ["aborting uploads: started, 0/3 (0%)", "aborting uploads: failed, 1/3 (33%) in 0.0 s"]


def test_an_unknown_total_counts_what_is_done(lines):
    with progress.reporting(progress.LogReporter(interval=0.0)):
        with progress.task("listing") as task:
            task.advance(7)
    assert lines() == ["listing: started, 0 done", "listing: 7 done", "listing: done, 7 done in 0.0 s"]


def test_advance_from_many_threads_counts_every_step(lines):
    with progress.task("completing uploads", total=8000) as task:
        workers = [threading.Thread(target=lambda: [task.advance() for _ in range(1000)]) for _ in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert lines()[-1].startswith("completing uploads: done, 8000/8000 (100%)")


class Recording(progress.Reporter):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def start(self, description: str, *, total: int | None) -> progress.Task:
        self.events.append(("start", description, total))
        reporter = self

        class Step(progress.Task):
            def advance(self, n: int = 1) -> None:
                reporter.events.append(("advance", n))

            def close(self, *, failed: bool) -> None:
                reporter.events.append(("close", failed))
        return Step()


def test_the_reporter_is_chosen_per_context_and_restored(lines):
    recording = Recording()
    with progress.reporting(recording):
        assert progress.current_reporter() is recording
        with progress.task("compacting", total=2) as task:
            task.advance(2)
    assert recording.events == [("start", "compacting", 2), ("advance", 2), ("close", False)]
    assert isinstance(progress.current_reporter(), progress.LogReporter) and lines() == []
