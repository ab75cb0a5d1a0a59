"""Stage 2 of a Spark write's job commit on the executors: the staged uploads completed by a Spark job.

Completing an upload is one CompleteMultipartUpload request, and a job of many files makes one per file;
on the driver alone they share one process's CPU (the SDK's building and signing of each request costs
about as much as the request takes on a fast store, BENCHMARKS.md). :class:`ExecutorCompleter` hands them
to the executors instead, before the driver's single log commit:

1. The driver splits the job's files into groups of ``files_per_task``, one PendingSet each (the format
   the tasks reported them in), and runs one Spark job over them (``mapInArrow``: works with Spark
   Connect too); each task completes its group on a bounded pool of ``threads_per_task`` threads
   (:func:`~table.data.uploads.complete_files`) and reports how many it completed.
2. If every task succeeded, the driver builds the ``add`` actions and the job commit goes on as for any
   write (:mod:`table.data.jobcommit`): nothing is visible before its one log entry.
3. All or none: if the Spark job fails (a task failed past its retries, an executor was lost, the job was
   cancelled), the driver cannot know which uploads were completed, so it aborts every upload of the job
   (a completion still under way then fails) and deletes every file key of the job (a key never completed
   is simply absent), then raises :class:`~table.errors.SparkJobError`. Nothing of the job stays visible
   to a listing but a completion that raced the abort, which no log entry references (``dynacommit
   vacuum`` removes it). A retried task completes its group again: an upload found already completed
   with the staged size counts as done (:func:`~table.data.uploads.complete_files`).

Below ``min_files`` files, or for files held in memory, the driver's own bounded pool completes them
(:func:`~table.data.uploads.complete_pending`): starting a Spark job costs more than it saves. So does a
session with a ``local`` master, whose executors are threads of the driver's own machine: there the
executors' Python workers only add processes on the same cores (measured in BENCHMARKS.md: 10,000
uploads took three times as long on ``local[2]``'s executors as on the driver's pool), so
:func:`min_files` turns the executors off for it unless asked for explicitly.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession

from logstore import ObjectStore, StorageError, StorageOptions, TableUri, failpoints, open_object_store
from spark_integration.worker import freeze_imports
from table.data.pendingset import PendingSet
from table.data.uploads import abort_pending, complete_files, complete_pending, delete_completed, staged_add
from table.errors import SparkJobError
from table.log.actions import AddFile, Cdc

__all__ = ["ExecutorCompleter", "FILES_PER_TASK", "MIN_FILES", "min_files"]

log = logging.getLogger(__name__)

MIN_FILES = 1000
"""Below this many files the driver completes them itself (a Spark job costs about a second to start)."""
FILES_PER_TASK = 500
"""Files a completion task takes: at 16 threads and a few ms a request, a task of a few hundred ms."""
_RESULT = "task int, completed long"
_RESULT_ARROW = pa.schema([("task", pa.int32()), ("completed", pa.int64())])


def min_files(spark: SparkSession, given: int | None) -> int:
    """``given``, else :data:`MIN_FILES` on a cluster and "never" for a ``local`` master (module docstring)."""
    if given is not None:
        return given
    try:
        master = spark.sparkContext.master
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext; its server's master is unknown here
        master = ""
    return sys.maxsize if master.startswith("local") else MIN_FILES


class CompleteTask:
    """What each completion task runs: complete the PendingSets of its rows. Plain picklable data (the
    storage options travel inside, as the staging tasks' do); ``failpoints`` arms the project's failpoints
    in the task for its duration (tests)."""

    def __init__(self, *, table_path: str, options: StorageOptions, threads: int, failpoints: str | None = None):
        self.table_path = table_path
        self.options = options
        self.threads = threads
        self.failpoints = failpoints
        self.__name__ = "CompleteTask"

    def __repr__(self) -> str:
        return f"CompleteTask(table={self.table_path})"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        uri = TableUri.parse(self.table_path)
        objects = open_object_store(uri, storage_options=self.options)
        arming = failpoints.armed(self.failpoints) if self.failpoints else contextlib.nullcontext()
        tasks, counts = [], []
        with arming:
            for batch in batches:
                for task, text in zip(batch.column("task").to_pylist(), batch.column("pendingset").to_pylist(),
                                      strict=True):
                    files = PendingSet.load(text).files
                    complete_files(objects, files, max_workers=self.threads)
                    tasks.append(task)
                    counts.append(len(files))
        context = TaskContext.get()
        log.debug("completion task %s completed %d upload(s) of %s", context.partitionId() if context else "?",
                  sum(counts), self.table_path)
        yield pa.RecordBatch.from_pydict({"task": tasks, "completed": counts}, schema=_RESULT_ARROW)


class ExecutorCompleter:
    """A :class:`~table.data.jobcommit.Completer` that completes a Spark write's uploads on the executors
    (module docstring)."""

    def __init__(self, spark: SparkSession, *, table_path: str, options: StorageOptions, min_files: int = MIN_FILES,
                 files_per_task: int = FILES_PER_TASK, threads_per_task: int = 16, failpoints: str | None = None):
        self.spark = spark
        self.table_path = table_path
        self.options = options
        self.min_files = min_files
        self.files_per_task = max(1, files_per_task)
        self.threads_per_task = max(1, threads_per_task)
        self.failpoints = failpoints

    def __call__(self, objects: ObjectStore, pendingsets: Sequence[PendingSet], *, max_workers: int
                 ) -> list[AddFile | Cdc]:
        files = [staged for pending in pendingsets for staged in pending.files]
        if len(files) < self.min_files or any(staged.held is not None for staged in files):
            return complete_pending(objects, pendingsets, max_workers=max_workers)
        groups = _groups(pendingsets, self.files_per_task)
        rows = [(n, group.model_dump_json()) for n, group in enumerate(groups)]
        task = CompleteTask(table_path=self.table_path, options=self.options, threads=self.threads_per_task,
                            failpoints=self.failpoints)
        try:
            frame = self.spark.createDataFrame(rows, "task int, pendingset string").repartition(len(rows))
            results = frame.mapInArrow(task, _RESULT).collect()
            completed = sum(r.completed for r in results)
            if sorted(r.task for r in results) != list(range(len(rows))) or completed != len(files):
                raise SparkJobError(f"the completion job reported {completed} of {len(files)} uploads completed "
                                    f"(tasks {sorted(r.task for r in results)})")
        except BaseException as exc:
            _undo(objects, pendingsets, [staged.key for staged in files], max_workers)
            if isinstance(exc, SparkJobError) or not isinstance(exc, Exception):
                raise
            raise SparkJobError(f"completing the {len(files)} staged uploads of a job writing {self.table_path} "
                                f"on the executors failed: nothing was committed, its uploads were aborted and "
                                f"the files it completed deleted. Cause: {_cause(exc)}") from exc
        log.info("completed %d upload(s) of %s in %d Spark task(s)", len(files), self.table_path, len(rows))
        return [staged_add(staged) for staged in files]


def _groups(pendingsets: Sequence[PendingSet], size: int) -> list[PendingSet]:
    """The job's files in groups of at most ``size``, each a PendingSet of the task that staged them."""
    groups = []
    for pending in pendingsets:
        for start in range(0, len(pending.files), size):
            groups.append(pending.model_copy(update={"files": list(pending.files[start:start + size])}))
    return groups


def _undo(objects: ObjectStore, pendingsets: Sequence[PendingSet], keys: list[str], max_workers: int) -> None:
    """The completion job failed: abort every upload first (a completion still running then fails), then
    delete every key (those never completed are absent). Best effort: it runs while the error propagates."""
    aborted = abort_pending(objects, pendingsets, max_workers=max_workers)
    try:
        delete_completed(objects, keys)
    except (StorageError, OSError) as exc:
        log.warning("could not delete the %d files of a failed job commit (%s); `dynacommit vacuum` removes "
                    "them", len(keys), exc)
    log.warning("a job commit failed while completing uploads on the executors: %d upload(s) aborted, %d "
                "key(s) deleted", aborted, len(keys))


def _cause(exc: BaseException) -> str:
    from spark_integration.write import root_cause  # write imports this module

    return root_cause(exc)
