"""A job that fails leaves nothing behind: no completed object of the job, no pending upload.

Except when the outcome is unknown: then everything stays, because the log entry may reference it.
Each test provokes a real failure (a conflicting concurrent overwrite, a tampered PendingSet, an
exception from the store or from the data) on the in-memory store and on moto.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pytest

from logstore import CommitStateUnknownError, DeadlineExceededError, StorageError, failpoints
from logstore.failpoints import FailpointCrash
from table.data.jobcommit import commit_staged, engine_info
from table.data.pendingset import PendingSetError
from table.data.staging import MIN_PART_SIZE, StagingWriter
from table.data.write import write_table
from table.data.writespec import WriteSpec
from table.errors import CommitConflictError, SchemaMismatchError
from table.table import Table
from tests.support.tables import assert_untouched, data_keys, rows, uploads


def test_overwrite_that_conflicts_with_a_concurrent_overwrite_leaves_nothing(target):
    uri, options = target
    write_table(uri, pa.concat_tables([rows(0, 5, "a"), rows(5, 5, "b")]), partition_by=["part"],
                storage_options=options)
    ours = Table(uri, storage_options=options)
    write_table(uri, rows(100, 3, "a"), mode="overwrite", storage_options=options)  # a concurrent writer
    before = data_keys(ours)
    with pytest.raises(CommitConflictError):
        write_table(ours, pa.concat_tables([rows(200, 5, "a"), rows(205, 5, "c")]), mode="overwrite")
    assert_untouched(ours, before)
    assert ours.version == 0  # a failed write does not move the Table
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table()["id"].to_pylist()) == [100, 101, 102]


def test_overwrite_creating_a_table_someone_else_created_with_data_leaves_nothing(target):
    uri, options = target
    ours = Table.for_write(uri, storage_options=options)
    write_table(uri, rows(0, 3), storage_options=options)
    before = data_keys(ours)
    with pytest.raises(CommitConflictError):
        write_table(ours, rows(10, 3), mode="overwrite")
    assert_untouched(ours, before)


def test_dynamic_overwrite_conflicting_with_an_append_to_its_partition_leaves_nothing(target):
    """At isolation level Serializable a blind append into the partition an overwrite replaces conflicts."""
    uri, options = target
    write_table(uri, rows(0, 2, "a"), partition_by=["part"], storage_options=options,
                configuration={"delta.isolationLevel": "Serializable"})
    ours = Table(uri, storage_options=options)
    write_table(uri, rows(10, 2, "a"), storage_options=options)
    before = data_keys(ours)
    with pytest.raises(CommitConflictError, match="ConcurrentAppend"):
        write_table(ours, rows(20, 2, "a"), mode="overwrite", partition_overwrite="dynamic")
    assert_untouched(ours, before)


def test_dynamic_overwrite_and_a_concurrent_append_to_its_partition_both_land_by_default(target):
    """WriteSerializable (the default) orders the blind append after the overwrite: its rows survive."""
    uri, options = target
    write_table(uri, rows(0, 2, "a"), partition_by=["part"], storage_options=options)
    ours = Table(uri, storage_options=options)
    write_table(uri, rows(10, 2, "a"), storage_options=options)
    result = write_table(ours, rows(20, 2, "a"), mode="overwrite", partition_overwrite="dynamic")
    assert (result.version, result.metrics["numRemovedFiles"], result.metrics["numAttempts"]) == (2, "1", "2")
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table()["id"].to_pylist()) == [10, 11, 20, 21]


@pytest.mark.parametrize("retryable", [False, True], ids=["refused", "transient-until-the-deadline"])
def test_store_failure_before_the_commit_point_deletes_the_completed_files(target, monkeypatch, retryable):
    """A failure that cannot be retried is raised at once; a transient one is retried until the deadline
    (here 2 s), then raised as DeadlineExceededError: either way nothing is committed and nothing left."""
    uri, options = target
    write_table(uri, rows(0, 3), partition_by=["part"], storage_options=options)
    table = Table(uri, storage_options={**(options or {}), "DYNACOMMIT_TIMEOUT_SECONDS": "2"})
    before = data_keys(table)

    def fail(version, body, **options):
        raise StorageError("injected: DynamoDB is unreachable", operation="dynamodb:PutItem", retryable=retryable)

    monkeypatch.setattr(table.log_store, "write", fail)
    expected = DeadlineExceededError if retryable else StorageError
    with pytest.raises(expected, match="injected"):
        write_table(table, pa.concat_tables([rows(10, 3, "a"), rows(13, 3, "b"), rows(16, 3, "c")]))
    assert_untouched(table, before)


@pytest.mark.parametrize("action", ["raise", "crash"])
def test_a_data_file_failing_beside_the_log_stores_preparation_commits_nothing_and_leaves_nothing(target, action):
    """An in-process write PUTs its data file while the log store checks the version and writes its temp
    file; the commit point waits for that PUT. When completing it fails, nothing is committed and neither
    the data file nor the temp file is left."""
    uri, options = target
    write_table(uri, rows(0, 3), storage_options=options)
    table = Table(uri, storage_options=options)
    before = data_keys(table)
    if action == "raise":  # a transient failure: the write is tried again and lands once, leaving nothing else
        with failpoints.armed({"table.jobcommit.after_complete": action}):
            result = write_table(table, rows(3, 3))
        assert result.version == 1 and result.metrics["numAttempts"] == "2"
        assert len(data_keys(table) - before) == 1 and uploads(table) == []
        assert table.log_store.wait_finished(30)  # the temp file's DELETE goes out after the write returned
        assert list(table.objects.list(table.uri.key("_delta_log/.tmp/"))) == []
        expected = [0, 1, 2, 3, 4, 5, 6, 7, 8]
    else:  # a simulated crash leaves what a dead process leaves (the temp sweep's job)
        with pytest.raises(FailpointCrash), failpoints.armed({"table.jobcommit.after_complete": action}):
            write_table(table, rows(3, 3))
        assert Table(uri, storage_options=options).version == 0
        expected = [0, 1, 2, 6, 7, 8]
    write_table(table, rows(6, 3))
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table()["id"].to_pylist()) == expected


def test_unknown_commit_outcome_leaves_every_file_in_place(target, monkeypatch):
    uri, options = target
    write_table(uri, rows(0, 3), storage_options=options)
    table = Table(uri, storage_options=options)
    before = data_keys(table)
    real_write = table.log_store.write

    def lands_but_answer_is_lost(version, body, **options):
        real_write(version, body, **options)
        raise CommitStateUnknownError(table.uri.table_path, version, "injected: the answer was lost")

    monkeypatch.setattr(table.log_store, "write", lands_but_answer_is_lost)
    with pytest.raises(CommitStateUnknownError):
        write_table(table, rows(3, 3))
    after = data_keys(table)
    assert len(after - before) == 1
    assert uploads(table) == []
    # The commit did land: deleting its file would have broken the table.
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table()["id"].to_pylist()) == list(range(6))


def test_a_commit_whose_outcome_is_unknown_never_deletes_its_files(target, monkeypatch):
    """The log store cannot tell whether the entry landed (it did): the job must leave every file, since
    the log may reference them."""
    uri, options = target
    write_table(uri, rows(0, 3), storage_options=options)
    table = Table(uri, storage_options=options)
    real_write = table.log_store.write

    def lands_then_cannot_tell(version, body, **options):
        real_write(version, body, **options)
        raise CommitStateUnknownError(table.uri.table_path, version, "injected: the answer was lost")

    monkeypatch.setattr(table.log_store, "write", lands_then_cannot_tell)
    with pytest.raises(CommitStateUnknownError, match="injected"):
        write_table(table, rows(3, 3))
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table()["id"].to_pylist()) == list(range(6))


@pytest.mark.parametrize("small", [True, False], ids=["files-held-and-put", "multipart-uploads"])
def test_failure_completing_one_file_leaves_no_completed_object(target, monkeypatch, small):
    """Small files of an in-process job are PUT at job commit, bigger ones complete their upload: a failure
    of either for one file leaves none of the job's files behind."""
    uri, options = target
    write_table(uri, rows(0, 1), partition_by=["part"], storage_options=options)
    table = Table(uri, storage_options=options)
    before = data_keys(table)
    real_complete, real_put = table.objects.complete_upload, table.objects.put

    def complete(key, upload_id, parts):
        if "part=c/" in key:
            raise StorageError(f"injected failure completing {key}", operation="s3:CompleteMultipartUpload")
        real_complete(key, upload_id, parts)

    def put(key, body, *, if_absent=False):
        if "part=c/" in key:
            raise StorageError(f"injected failure writing {key}", operation="s3:PutObject")
        return real_put(key, body, if_absent=if_absent)

    monkeypatch.setattr(table.objects, "complete_upload", complete)
    monkeypatch.setattr(table.objects, "put", put)
    data = pa.concat_tables([rows(10 * i, 10, p) for i, p in enumerate("abcdef")])
    if small:
        with pytest.raises(StorageError, match="injected"):
            write_table(table, data)
    else:
        with pytest.raises(StorageError, match="injected"), StagingWriter(
                table.objects, table.uri, schema=table.schema, partition_by=["part"], job_id="job-big",
                task_id=0, part_size=MIN_PART_SIZE, _allow_small_parts=True) as writer:
            writer.write(data)
            pending = writer.finish()
            spec = WriteSpec.of()
            commit_staged(table, [pending], spec, spec.plan(table, table.schema), engine_info=engine_info(),
                          job_id="job-big")
    assert_untouched(table, before)
    assert table.refresh().version == 0


def test_data_source_failing_mid_stream_aborts_every_upload(target):
    uri, options = target
    write_table(uri, rows(0, 1), partition_by=["part"], storage_options=options)
    table = Table(uri, storage_options=options)
    before = data_keys(table)

    def batches():
        for i, part in enumerate("abc"):
            yield rows(i * 10, 10, part).to_batches()[0]
        raise ConnectionError("injected: the source went away")

    with pytest.raises(ConnectionError, match="injected"):
        write_table(table, pa.RecordBatchReader.from_batches(rows(0, 1).schema, batches()))
    assert_untouched(table, before)


def test_values_that_do_not_fit_the_table_mid_stream_abort_every_upload(target):
    uri, options = target
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("ns", tz="UTC"))])
    first = pa.table({"id": [1], "at": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("ns", tz="UTC"))})
    write_table(uri, first, storage_options=options)
    table = Table(uri, storage_options=options)
    before = data_keys(table)
    fine = pa.record_batch({"id": [2], "at": pa.array([1_700_000_000_000_000_000], pa.timestamp("ns", tz="UTC"))})
    lossy = pa.record_batch({"id": [3], "at": pa.array([1_700_000_000_000_000_001], pa.timestamp("ns", tz="UTC"))})
    with pytest.raises(SchemaMismatchError, match="do not fit"):
        write_table(table, pa.RecordBatchReader.from_batches(schema, [fine, lossy]))
    assert_untouched(table, before)


def test_concurrent_commit_of_the_same_application_version_deletes_our_files(target):
    uri, options = target
    write_table(uri, rows(0, 1), storage_options=options)
    ours = Table(uri, storage_options=options)
    theirs = write_table(uri, rows(1, 1), app_id="nightly", app_version=7, storage_options=options)
    before = data_keys(ours)
    result = write_table(ours, rows(1, 1), app_id="nightly", app_version=7)
    assert result.version == theirs.version and result.metrics["skipped"] == "true"
    assert_untouched(ours, before)
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table()["id"].to_pylist()) == [0, 1]


def _stage(table: Table, job_id: str, task_id: int, data: pa.Table, attempt_id: int = 0):
    writer = StagingWriter(table.objects, table.uri, schema=table.schema, partition_by=table.partition_columns,
                           job_id=job_id, task_id=task_id, attempt_id=attempt_id)
    writer.write(data)
    return writer.finish()


def _commit(table: Table, pendingsets, job_id: str):
    spec = WriteSpec.of(mode="append")
    return commit_staged(table, pendingsets, spec, spec.plan(table, table.schema), engine_info=engine_info(),
                         job_id=job_id)


def test_job_commit_aborts_uploads_of_attempts_that_never_reported(target):
    uri, options = target
    write_table(uri, rows(0, 1), partition_by=["part"], storage_options=options)
    table = Table(uri, storage_options=options)
    job_id = str(uuid.uuid4())
    reported = [_stage(table, job_id, task, rows(task * 10, 10, "ab"[task])) for task in range(2)]
    _stage(table, job_id, 0, rows(0, 10, "a"), attempt_id=1)  # a speculative attempt that lost
    _stage(table, job_id, 2, rows(20, 10, "c"))  # a task whose result never reached the driver
    _stage(table, "another-running-job", 0, rows(0, 1, "a"))
    result = _commit(table, reported, job_id)
    assert result.metrics["numFiles"] == "2"
    assert [u.key for u in uploads(table)] == [table.uri.key("part=a/part-00000-another-running-job-c000.snappy.parquet")]
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [0, *range(0, 20)]


def test_tampered_pendingset_fails_the_job_and_aborts_its_uploads(target):
    uri, options = target
    write_table(uri, rows(0, 1), storage_options=options)
    table = Table(uri, storage_options=options)
    before = data_keys(table)
    job_id = str(uuid.uuid4())
    pending = _stage(table, job_id, 0, rows(1, 5))
    staged = pending.files[0]
    reordered = staged.model_copy(update={"parts": [staged.parts[0].model_copy(update={"number": 2})]})
    with pytest.raises(PendingSetError, match="parts"):
        _commit(table, [pending.model_copy(update={"files": [reordered]})], job_id)
    assert_untouched(table, before)
    assert table.refresh().version == 0
