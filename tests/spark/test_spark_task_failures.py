"""Task retries, speculative duplicates and failed jobs: the staging committer's failure cases on Spark.

The hooks run inside the executors' Python workers (``_write_dataframe(task_hook=...)``, a test seam
of the task right after ``StagingWriter.finish()``); this module is pickled by value so the workers,
which cannot import test modules, receive them.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import cloudpickle

from logstore import TableUri, open_object_store
from spark_integration import read_dataframe, write_dataframe
from spark_integration.write import SparkJobError, _write_dataframe
from table.data.pendingset import PendingSet
from table.data.staging import StagingWriter
from table.table import Table

pytestmark = [pytest.mark.spark, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROWS = 100  # over 2 Spark partitions: task 0 holds ids 0..49, task 1 holds 50..99


def frame(spark, tag: str = "original"):
    return spark.range(0, ROWS, 1, numPartitions=2).selectExpr("id", f"'{tag}' as tag", "cast(id % 2 as int) as p")


def pending_uploads(uri: str, options: dict[str, str]) -> list:
    return open_object_store(uri, storage_options=options).list_uploads(TableUri.parse(uri).key(""))


def data_keys(uri: str, options: dict[str, str]) -> list[str]:
    parsed = TableUri.parse(uri)
    objects = open_object_store(uri, storage_options=options)
    return [o.key for o in objects.list(parsed.key("")) if "/_delta_log/" not in "/" + parsed.relative(o.key)]


def task_rows(task_id: int, tag: str) -> pa.Table:
    ids = list(range(task_id * ROWS // 2, (task_id + 1) * ROWS // 2))
    return pa.table({"id": pa.array(ids, pa.int64()), "tag": [tag] * len(ids),
                     "p": pa.array([i % 2 for i in ids], pa.int32())})


class FailFirstAttempt:
    """Attempt 0 of task 0 records its PendingSet, then fails after staging."""

    def __init__(self, marker_dir: Path):
        self.marker_dir = str(marker_dir)

    def __call__(self, task, pending):
        if pending.task_id == 0 and pending.attempt_id == 0:
            Path(self.marker_dir, "failed-attempt.json").write_text(pending.model_dump_json())
            raise RuntimeError("injected failure after staging")
        return None


class Speculate:
    """Task 0 reports a second, speculative attempt (different rows, so a wrong pick shows); task 1 has a
    speculative attempt that staged its uploads but whose result never reached the driver."""

    def __call__(self, task, pending):
        if pending.attempt_id != 0:
            return None
        if pending.task_id == 0:
            return task.run(task_rows(0, "speculative").to_batches(), task_id=0, attempt_id=1)
        writer = task.writer(task_id=pending.task_id, attempt_id=1)
        writer.write(task_rows(pending.task_id, "lost-speculative"))
        writer.finish()
        return None


class FailTaskOne:
    """Task 1 fails on every attempt (after staging); every attempt records its PendingSet first."""

    def __init__(self, marker_dir: Path):
        self.marker_dir = str(marker_dir)

    def __call__(self, task, pending):
        Path(self.marker_dir, f"task-{pending.task_id}-{pending.attempt_id}.json").write_text(pending.model_dump_json())
        if pending.task_id == 1:
            raise RuntimeError("injected failure of task 1")
        return None


def test_task_failing_after_staging_is_retried_and_the_rows_land_once(spark, s3_uri, storage_options, tmp_path):
    result = _write_dataframe(frame(spark), s3_uri, partition_by=["p"], storage_options=storage_options,
                              task_hook=FailFirstAttempt(tmp_path))

    failed = PendingSet.load((tmp_path / "failed-attempt.json").read_text())
    assert failed.files, "the failed attempt had staged uploads"
    assert result.metrics["numTasks"] == "2"
    ids = sorted(r.id for r in read_dataframe(spark, s3_uri, storage_options=storage_options).collect())
    assert ids == list(range(ROWS))
    assert pending_uploads(s3_uri, storage_options) == []


def test_speculative_duplicate_attempts_are_discarded(spark, s3_uri, storage_options, caplog):
    with caplog.at_level(logging.INFO, logger="spark_integration"):
        result = _write_dataframe(frame(spark), s3_uri, partition_by=["p"], storage_options=storage_options,
                                  task_hook=Speculate())

    assert "1 duplicate task attempt(s) discarded (tasks [0])" in caplog.text
    assert result.metrics["numTasks"] == "2"
    rows = [(r.id, r.tag) for r in read_dataframe(spark, s3_uri, storage_options=storage_options).collect()]
    assert sorted(rows) == [(i, "original") for i in range(ROWS)]
    assert pending_uploads(s3_uri, storage_options) == []
    # only the kept attempts' files exist: nothing of the speculative attempts was completed
    assert len(data_keys(s3_uri, storage_options)) == len(Table(s3_uri, storage_options=storage_options).files())


def test_job_failing_before_commit_leaves_nothing_visible_or_pending(spark, s3_uri, storage_options, tmp_path):
    write_dataframe(frame(spark, "before"), s3_uri, partition_by=["p"], storage_options=storage_options)
    keys_before = data_keys(s3_uri, storage_options)

    with pytest.raises(SparkJobError, match="injected failure of task 1") as failed:
        _write_dataframe(frame(spark), s3_uri, partition_by=["p"], storage_options=storage_options,
                         task_hook=FailTaskOne(tmp_path))

    assert "nothing was committed" in str(failed.value) and "aborted" in str(failed.value)
    staged_by_task_0 = PendingSet.load((tmp_path / "task-0-0.json").read_text())
    assert staged_by_task_0.files, "task 0 succeeded and staged uploads before the job failed"
    assert len(list(tmp_path.glob("task-1-*.json"))) == 3, "task 1 was tried spark.task.maxFailures times"
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 0
    assert data_keys(s3_uri, storage_options) == keys_before
    assert pending_uploads(s3_uri, storage_options) == []
    assert {r.tag for r in read_dataframe(spark, s3_uri, storage_options=storage_options).collect()} == {"before"}


def test_uploads_staged_outside_the_kept_attempts_are_aborted_at_job_commit(spark, s3_uri, storage_options):
    """An attempt whose PendingSet never reached the driver (a lost speculative task), staged directly
    with StagingWriter under the job's id before the job commits, is swept by the job id in its keys."""
    job_id = "job-with-a-lost-attempt"
    options = storage_options
    uri = TableUri.parse(s3_uri)
    schema = pa.schema([("id", pa.int64()), ("tag", pa.string()), ("p", pa.int32())])
    with StagingWriter(open_object_store(uri, storage_options=options), uri, schema=schema, partition_by=["p"],
                       job_id=job_id, task_id=7, attempt_id=3) as lost:
        lost.write(task_rows(1, "lost"))
        lost.finish()
    assert len(pending_uploads(s3_uri, options)) == 2

    _write_dataframe(frame(spark), s3_uri, partition_by=["p"], storage_options=options, job_id=job_id)

    assert pending_uploads(s3_uri, options) == []
    tags = {r.tag for r in read_dataframe(spark, s3_uri, storage_options=options).collect()}
    assert tags == {"original"}


def test_a_job_commit_completes_its_uploads_on_the_executors(spark, s3_uri, storage_options):
    """Four files (two Spark partitions, two partition values each) completed by a Spark job of two tasks
    of two files each: one commit, every row there as deltalake reads it, no upload left."""
    import deltalake

    from tests.support.fault_harness import deltalake_options

    result = _write_dataframe(frame(spark), s3_uri, partition_by=["p"], storage_options=storage_options,
                              complete_min_files=1, complete_files_per_task=2)
    assert result.version == 0 and result.metrics["numFiles"] == "4"
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options)).to_pyarrow_table()
    assert sorted(theirs.column("id").to_pylist()) == list(range(ROWS))
    assert len(data_keys(s3_uri, storage_options)) == 4 and pending_uploads(s3_uri, storage_options) == []


def test_a_completion_task_failing_past_its_retries_leaves_nothing_of_the_job(spark, s3_uri, storage_options):
    """The failpoint after each completion, armed in the completion tasks only, fails each task's second
    completion, in every attempt: the first one of each task has completed an object. The job commit
    must fail, delete those objects, abort the rest, and commit nothing."""
    from table import write_table

    write_table(s3_uri, task_rows(0, "before"), partition_by=["p"], storage_options=storage_options)
    before = sorted(data_keys(s3_uri, storage_options))
    df = frame(spark)  # two tasks of two files each (p=0, p=1): two completion tasks of two files
    with pytest.raises(SparkJobError, match="on the executors failed: nothing was committed.*failpoint "
                                            "table.jobcommit.after_complete_one fired"):
        _write_dataframe(df, s3_uri, partition_by=["p"], storage_options=storage_options, complete_min_files=1,
                         complete_files_per_task=2, complete_failpoints="table.jobcommit.after_complete_one=raise@2")
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 0 and table.to_pyarrow_table().num_rows == ROWS // 2
    assert sorted(data_keys(s3_uri, storage_options)) == before
    assert pending_uploads(s3_uri, storage_options) == []
