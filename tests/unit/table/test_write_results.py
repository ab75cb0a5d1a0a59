"""What writes return in process: typed ``WriteMetrics`` (also for a streaming micro-batch, which commits
through the same job commit), counted against the Parquet files the commit added (read back with pyarrow
from the store's bytes), and the snapshot after the commit: computed on the commit path when it knows it,
read once and shared with the ``Table`` when the commit went on top of winners judged by their entries, and
loaded at the committed version when the commit path could not compute it.
"""

from __future__ import annotations

import dataclasses
import json
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore import TableUri
from table import CommitResult, Table, write_table
from table.data.jobcommit import commit_staged
from table.data.staging import StagingWriter
from table.data.writespec import StreamingUpdate, WriteSpec
from table.log.outcome import CommitOutcome, CommitStatus, SnapshotAfter
from table.log.snapshot import load_snapshot
from table.operations.metrics import WriteMetrics
from tests.support.memory import MemoryLogStore, memory_bucket


def added_files(uri: str, version: int) -> list[bytes]:
    """The bytes of the files commit ``version`` added, found by parsing its JSON log file with json alone."""
    parsed = TableUri.parse(uri)
    bucket = memory_bucket(parsed.bucket)
    lines = bucket.get(parsed.key(f"_delta_log/{version:020d}.json")).decode().splitlines()
    paths = [json.loads(line)["add"]["path"] for line in lines if '"add"' in line]
    return [bucket.get(parsed.key(path)) for path in paths]


def numbers(start: int, count: int) -> pa.Table:
    return pa.table({"x": pa.array(range(start, start + count), pa.int64())})


def test_write_metrics_count_the_files_the_commit_added(memory_uri):
    result = write_table(memory_uri, numbers(0, 1000))
    files = added_files(memory_uri, result.version)
    metrics = result.metrics
    assert type(metrics) is WriteMetrics
    assert metrics.num_files == len(files) == 1
    assert metrics.num_output_bytes == sum(len(b) for b in files)
    assert metrics.num_output_rows == sum(pq.read_table(pa.BufferReader(b)).num_rows for b in files) == 1000
    assert metrics.to_dict()["num_output_rows"] == 1000 and isinstance(metrics.to_dict()["commit_seconds"], float)
    assert repr(metrics).startswith("WriteMetrics(num_attempts=1, ")  # the fields recorded, not every None


def test_a_streaming_micro_batch_returns_write_metrics_through_the_same_job_commit(memory_uri):
    table = Table.for_write(memory_uri)
    spec = dataclasses.replace(WriteSpec.of(mode="append", app_id="query-1", app_version=0),
                               streaming=StreamingUpdate("query-1", 0, "Append"))
    plan = spec.plan(table, numbers(0, 1).schema)
    with StagingWriter(table.objects, table.uri, schema=plan.schema, partition_by=plan.partition_by,
                       job_id="stream-b0", task_id=0) as writer:
        writer.write(numbers(0, 7))
        pending = writer.finish()
    result = commit_staged(table, [pending], spec, plan, job_id="stream-b0", engine_info="test")
    files = added_files(memory_uri, result.version)
    assert Table(memory_uri).history(1)[0].operation == "STREAMING UPDATE"
    assert type(result.metrics) is WriteMetrics
    assert (result.metrics.num_files, result.metrics.num_output_rows) == (len(files), 7)
    assert table.snapshot is result.snapshot and result.snapshot.version == 0


def test_the_snapshot_of_a_commit_on_top_of_unread_winners_is_read_once_for_the_result_and_the_table(
        memory_uri, monkeypatch):
    # Without group commit a blind append that lost to another one goes on top of it unread (test_lost_race.py).
    monkeypatch.setattr(MemoryLogStore, "_transactions_supported", lambda self: False)
    write_table(memory_uri, numbers(0, 1))
    mine = Table(memory_uri)
    write_table(memory_uri, numbers(1, 1))  # mine is one version behind now
    result = write_table(mine, numbers(2, 1))
    assert result.version == 2 and result.metrics.num_attempts == 2
    assert result.after is not None and not result.after.computed  # not read on the commit path
    after = result.snapshot
    assert result.after.computed and result.snapshot is after
    assert mine.snapshot is after  # the Table's deferred catch-up is the same reading
    fresh = Table(memory_uri, version=2)
    assert after.version == 2 and {f.path for f in after.files} == {f.path for f in fresh.snapshot.files}
    assert len(after.files) == 3


def test_a_commit_whose_snapshot_the_commit_path_lost_loads_it_at_the_committed_version(memory_uri):
    write_table(memory_uri, numbers(0, 1))
    write_table(memory_uri, numbers(1, 1))
    write_table(memory_uri, numbers(2, 1))
    store = MemoryLogStore(TableUri.parse(memory_uri))
    after = SnapshotAfter.of(store, CommitOutcome(CommitStatus.COMMITTED, 1, 1, None))
    assert not after.computed
    snapshot = after()
    assert snapshot.version == 1 and not snapshot.time_travel
    assert {f.path for f in snapshot.files} == {f.path for f in load_snapshot(store, 1).files}
    assert after() is snapshot  # loaded once


def test_a_result_pickles_with_its_metrics_and_without_the_snapshot(memory_uri):
    result = write_table(memory_uri, numbers(0, 3))
    again = pickle.loads(pickle.dumps(result))
    assert type(again) is CommitResult and again == result and again.snapshot is None
    assert type(again.metrics) is WriteMetrics and again.metrics.to_dict() == result.metrics.to_dict()


def test_a_metric_of_the_wrong_type_is_refused_naming_it():
    with pytest.raises(ValueError, match="skipped"):
        WriteMetrics.of({"skipped": "maybe"})
    assert WriteMetrics.of({"skipped": "false"}).skipped is False


@pytest.fixture
def commit_reads(monkeypatch):
    """The versions whose ``N.json`` this process reads, in order (the real store's read, counted)."""
    read = MemoryLogStore.read
    versions: list[int] = []

    def counted(self, version):
        versions.append(version)
        return read(self, version)

    monkeypatch.setattr(MemoryLogStore, "read", counted)
    return versions


def test_a_long_lived_writer_appends_again_past_the_winners_it_left_unread(memory_uri, monkeypatch, commit_reads):
    """Issue 23, item 1: the catch-up is off the commit path. A Table whose last commit went on top of a winner
    judged by its entry appends again without reading it (nor its own commit's neighbours): the versions are
    read once, when something needs the table's files."""
    monkeypatch.setattr(MemoryLogStore, "_transactions_supported", lambda self: False)
    write_table(memory_uri, numbers(0, 1))                      # version 0
    mine = Table.for_write(memory_uri)
    write_table(memory_uri, numbers(1, 1))                      # version 1, another writer's
    commit_reads.clear()
    first = write_table(mine, numbers(2, 1))                    # loses 1, commits 2 with its kept temp file
    write_table(memory_uri, numbers(3, 1))                      # version 3, another writer's
    second = write_table(mine, numbers(4, 1))                   # loses 3 (judged by its entry), commits 4
    third = write_table(mine, numbers(5, 1))                    # nothing to lose: 5
    assert (first.version, second.version, third.version) == (2, 4, 5)
    assert (first.metrics.num_attempts, second.metrics.num_attempts, third.metrics.num_attempts) == (2, 2, 1)
    assert commit_reads == []                                   # no N.json read on the commit path
    assert mine.version == 5 and sorted(commit_reads) == [1, 3]  # read when the table is looked at, once
    # independent expectation: the rows, read with pyarrow from the files each commit's JSON names
    rows = sorted(x for v in range(6) for data in added_files(memory_uri, v)
                  for x in pq.read_table(pa.BufferReader(data)).column("x").to_pylist())
    assert rows == [0, 1, 2, 3, 4, 5]
    assert {f.path for f in mine.snapshot.files} == {f.path for f in Table(memory_uri).snapshot.files}
    assert third.snapshot is mine.snapshot


def test_an_operation_that_is_not_a_blind_append_reads_the_versions_its_table_left_unread(memory_uri, monkeypatch,
                                                                                          commit_reads):
    monkeypatch.setattr(MemoryLogStore, "_transactions_supported", lambda self: False)
    write_table(memory_uri, numbers(0, 1))
    mine = Table.for_write(memory_uri)
    write_table(memory_uri, numbers(1, 1))
    write_table(mine, numbers(2, 1))                            # version 2, on top of 1 unread
    commit_reads.clear()
    # An idempotent append (its application id must be checked against every version) reads them first ...
    done = write_table(mine, numbers(3, 1), app_id="job", app_version=1)
    assert done.version == 3 and commit_reads == [1]
    again = write_table(mine, numbers(3, 1), app_id="job", app_version=1)
    assert again.version == 3  # skipped: held at version 3 (the rows below hold 3 once)
    # ... and so does a delete, which must see every row, ours included
    write_table(memory_uri, numbers(4, 1))
    write_table(mine, numbers(5, 1))                            # on top of version 4, unread
    commit_reads.clear()
    mine.delete("x >= 4")
    assert 4 in commit_reads
    assert sorted(Table(memory_uri).to_pyarrow_table().column("x").to_pylist()) == [0, 1, 2, 3]
