"""Maintenance on in-process tables: argument checks, the progress it reports, the data it returns."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError
from table import Table, progress, write_table
from table.maintenance import abort_pending_uploads, list_pending_uploads, vacuum


class Recording(progress.Reporter):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def start(self, description: str, *, total: int | None) -> progress.Task:
        self.events.append(("start", description, total))
        events = self.events

        class Step(progress.Task):
            def advance(self, n: int = 1) -> None:
                events.append(("advance", n))

            def close(self, *, failed: bool) -> None:
                events.append(("close", failed))
        return Step()


@pytest.fixture
def table() -> Table:
    uri = f"memory://maint-{uuid.uuid4().hex[:8]}/t"
    write_table(uri, pa.table({"x": [1, 2]}))
    return Table(uri)


@pytest.mark.parametrize("hours", [float("inf"), float("nan"), -1.0, 1e7, "24", True])
def test_ages_must_be_finite_hours_up_to_a_century(table, hours):
    with pytest.raises(InvalidArgumentError, match="retention_hours must be a number of hours"):
        vacuum(table, retention_hours=hours, force=True)
    with pytest.raises(InvalidArgumentError, match="older_than_hours must be a number of hours"):
        abort_pending_uploads(table, older_than_hours=hours)
    with pytest.raises(InvalidArgumentError, match="older_than_hours must be a number of hours"):
        list_pending_uploads(table, older_than_hours=hours)


def test_vacuum_reports_deletion_progress_in_batches_and_returns_each_file(table):
    for i in range(2500):
        table.objects.put(table.uri.key(f"part-orphan-{i:04d}.parquet"), b"x" * (i % 7))
    recording = Recording()
    with progress.reporting(recording):
        dry = vacuum(table, retention_hours=0, force=True)
        assert recording.events == []  # a dry run deletes nothing, so reports nothing
        done = vacuum(table, retention_hours=0, force=True, dry_run=False)
    assert recording.events == [("start", "deleting files", 2500), ("advance", 1000), ("advance", 1000),
                                ("advance", 500), ("close", False)]
    assert done.deleted == dry.deleted and done.count == 2500 and done.bytes == sum(i % 7 for i in range(2500))
    assert done.files[0] == "part-orphan-0000.parquet" and done.deleted[6].size == 6
    assert done.to_dict()["files"][6] == {"path": "part-orphan-0006.parquet", "size": 6,
                                          "lastModified": done.deleted[6].last_modified_ms}
    assert list(table.objects.list(table.uri.key("part-orphan"))) == []


def test_aborting_uploads_reports_each_one(table):
    for i in range(3):
        table.objects.create_upload(table.uri.key(f"part-{i}.parquet"))
    recording = Recording()
    with progress.reporting(recording):
        report = abort_pending_uploads(table, older_than_hours=0, dry_run=False)
    assert recording.events == [("start", "aborting uploads", 3), *[("advance", 1)] * 3, ("close", False)]
    assert report.to_dict()["count"] == 3 and list_pending_uploads(table) == []
