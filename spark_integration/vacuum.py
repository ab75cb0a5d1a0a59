"""VACUUM as a Spark job: the table's keys listed and the unreferenced files deleted by the executors.

The decision is the in-process vacuum's (:class:`~table.maintenance.vacuum.VacuumRules`: same checks, same
retention, same hidden paths, deletion vector files of live files kept, nested tables left alone); only who
lists and who deletes changes:

1. **Plan** (driver): :func:`~table.maintenance.vacuum.plan_vacuum` for the newest version, then one
   listing of the table root's top level (S3's delimiter listing, through pyarrow): its directories
   (partition directories, ``_change_data/``; hidden ones such as ``_delta_log/`` are never listed) and
   the names of the files at the top level. Tasks: groups of directories, each listed whole by its task
   (a nested table inside one is recognised there), and ranges of top-level names, each listed from just
   before its first name up to its last (keys inside directories met on the way are skipped: their
   directory's task has them).
2. **List, judge, delete** (executors, :class:`VacuumTask`): each task lists its part, judges it with the
   rules, and (unless a dry run) deletes what goes in DeleteObjects requests of up to 1,000 keys, paced by a
   token bucket of its own (below).
3. **Report** (driver): the tasks' files merged in key order into the in-process vacuum's
   :class:`~table.maintenance.vacuum.VacuumReport`.

Pacing. S3 serves at least 3,500 PUT/COPY/POST/DELETE requests a second per partitioned prefix and
answers 503 Slow Down above what it has scaled to; a DeleteObjects request counts each of its keys. The
job as a whole aims at ``deletes_per_second`` (default 3,500: one prefix's rate, as an unpartitioned
table's files all share one), split evenly over the tasks that run at once: each task's token bucket
refills at ``deletes_per_second / concurrent tasks`` keys a second and holds one batch (1,000 keys), so a
task sends a batch only once it has earned it. A bucket per task needs no coordination between executors,
and the sum of the buckets never exceeds the job's rate. ``deletes_per_second=None`` turns pacing off
(local servers, or a table whose partitions S3 has already spread over many prefixes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession

from logstore import ObjectStore, StorageOptions, TableUri, open_object_store
from spark_integration.session import cli_session, executor_python
from spark_integration.worker import freeze_imports
from table.data.files import data_path, filesystem_for
from table.maintenance.vacuum import DELETE_BATCH, Judged, VacuumFile, VacuumReport, VacuumRules, plan_vacuum
from table.table import Table

__all__ = ["S3_WRITES_PER_PREFIX", "TokenBucket", "VacuumTask", "report_frame", "vacuum_on_spark"]

S3_WRITES_PER_PREFIX = 3500
"""S3's documented floor of PUT/COPY/POST/DELETE requests a second per partitioned prefix."""
RANGE_FILES = 10_000
"""Top-level files per range task (ten LIST pages)."""
DIRECTORIES_PER_TASK = 16
"""Partition directories a task lists, at most."""
_RESULT = "path string, size long, modified long, kept long, nested string"
_RESULT_ARROW = pa.schema([("path", pa.string()), ("size", pa.int64()), ("modified", pa.int64()),
                           ("kept", pa.int64()), ("nested", pa.string())])


class TokenBucket:
    """``rate`` tokens a second, at most ``capacity`` saved up; :meth:`take` waits until it has ``n``."""

    def __init__(self, rate: float, capacity: float, *, clock=time.monotonic, sleep=time.sleep):
        if rate <= 0 or capacity <= 0:
            raise ValueError("a token bucket needs a positive rate and capacity")
        self.rate = rate
        self.capacity = capacity
        self._clock, self._sleep = clock, sleep
        self._tokens = capacity
        self._last = clock()
        self._lock = threading.Lock()

    def take(self, n: float) -> float:
        """Wait until ``n`` tokens (at most ``capacity``) are there and take them; returns the seconds waited."""
        n = min(n, self.capacity)
        waited = 0.0
        with self._lock:
            while True:
                now = self._clock()
                self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= n:
                    self._tokens -= n
                    return waited
                pause = (n - self._tokens) / self.rate
                self._sleep(pause)
                waited += pause


@dataclass(frozen=True)
class _Part:
    """One task's share of the table: whole directories, or a range of top-level file names."""

    directories: tuple[str, ...] = ()
    after: str | None = None  # the range starts after this top-level name (None: at the start)
    last: str | None = None  # ... and ends with this one


class VacuumTask:
    """What each vacuum task runs (``mapInArrow``): list its part, judge it, delete. Plain picklable data."""

    def __init__(self, *, table_path: str, options: StorageOptions, rules: VacuumRules, dry_run: bool,
                 deletes_per_second: float | None):
        self.table_path = table_path
        self.options = options
        self.rules = rules
        self.dry_run = dry_run
        self.deletes_per_second = deletes_per_second
        self.__name__ = "VacuumTask"

    def __repr__(self) -> str:
        return f"VacuumTask(table={self.table_path}, version={self.rules.version})"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        uri = TableUri.parse(self.table_path)
        objects = open_object_store(uri, storage_options=self.options)
        bucket = (TokenBucket(self.deletes_per_second, DELETE_BATCH) if self.deletes_per_second else None)
        for batch in batches:
            for row in batch.to_pylist():
                part = _Part(tuple(row["directories"] or ()), row["after"], row["last"])
                judged = self.rules.judge(_listing(objects, uri, part))
                if not self.dry_run:
                    _delete(objects, uri, judged.deleted, bucket)
                yield _result(judged)


def vacuum_on_spark(spark: SparkSession, table: Table, *, retention_hours: float | None = None, dry_run: bool = True,
                    force: bool = False, deletes_per_second: float | None = S3_WRITES_PER_PREFIX,
                    range_files: int = RANGE_FILES) -> VacuumReport:
    """:func:`~table.maintenance.vacuum.vacuum` of ``table`` as a Spark job (module docstring): the same
    arguments, checks, errors and report, and the same files deleted."""
    executor_python(spark)
    rules = plan_vacuum(table, retention_hours=retention_hours, force=force)
    uri = table.uri
    directories, names = _top_level(table)
    directories = [d for d in directories if not rules.skipped_directory(d)]
    parts = [_Part(directories=tuple(directories[i:i + DIRECTORIES_PER_TASK]))
             for i in range(0, len(directories), DIRECTORIES_PER_TASK)]
    for start in range(0, len(names), max(1, range_files)):
        chunk = names[start:start + range_files]
        parts.append(_Part(after=names[start - 1] if start else None, last=chunk[-1]))
    if not parts:
        return rules.report(Judged((), 0, ()), dry_run=dry_run)
    concurrent = min(len(parts), _parallelism(spark))
    per_task = deletes_per_second / concurrent if deletes_per_second else None
    task = VacuumTask(table_path=uri.table_path, options=table.storage_options, rules=rules, dry_run=dry_run,
                      deletes_per_second=per_task)
    rows = [(list(p.directories), p.after, p.last) for p in parts]
    frame = spark.createDataFrame(rows, "directories array<string>, after string, last string").repartition(len(rows))
    results = frame.mapInArrow(task, _RESULT).collect()
    deleted = sorted((VacuumFile(r.path, r.size, r.modified) for r in results if r.path is not None),
                     key=lambda f: f.path)
    nested = sorted({n for r in results if r.nested for n in r.nested.split("\n")})
    kept = sum(r.kept for r in results if r.path is None)
    return rules.report(Judged(tuple(deleted), kept, tuple(nested)), dry_run=dry_run)


def vacuum_from_cli(table: Table, *, master: str | None, retention_hours: float | None, dry_run: bool,
                    force: bool) -> VacuumReport:
    """``dynacommit vacuum --spark``: :func:`vacuum_on_spark` in the session of
    :func:`~spark_integration.session.cli_session`."""
    with cli_session(master, app_name="dynacommit-vacuum") as spark:
        return vacuum_on_spark(spark, table, retention_hours=retention_hours, dry_run=dry_run, force=force)


def report_frame(spark: SparkSession, report: VacuumReport) -> DataFrame:
    """A vacuum report as a DataFrame of the deleted (dry run: to be deleted) files: ``path`` (relative to
    the table root), ``size``, ``modificationTime`` (epoch ms)."""
    rows = [(f.path, f.size, f.last_modified_ms) for f in report.deleted]
    return spark.createDataFrame(rows, "path string, size long, modificationTime long")


def _top_level(table: Table) -> tuple[list[str], list[str]]:
    """The table root's directories (``p=1/``) and top-level file names, each sorted."""
    uri = table.uri
    filesystem = filesystem_for(uri, table.storage_options)
    root = data_path(uri, uri.key("")).rstrip("/")
    infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=False, allow_not_found=True))
    directories = sorted(i.path[len(root) + 1:] + "/" for i in infos if i.type == pafs.FileType.Directory)
    names = sorted(i.path[len(root) + 1:] for i in infos if i.type == pafs.FileType.File)
    return directories, names


def _listing(objects: ObjectStore, uri: TableUri, part: _Part) -> list:
    listed = []
    for directory in part.directories:
        listed += [(uri.relative(o.key), o) for o in objects.list(uri.key(directory))]
    if part.last is not None:
        start_after = uri.key(part.after) if part.after is not None else None
        for obj in objects.list(uri.key(""), start_after=start_after):
            relative = uri.relative(obj.key)
            if relative > part.last:
                break
            if "/" not in relative:  # a directory's keys belong to its directory's task
                listed.append((relative, obj))
    return listed


def _delete(objects: ObjectStore, uri: TableUri, files: Sequence[VacuumFile], bucket: TokenBucket | None) -> None:
    keys = [uri.key(f.path) for f in files]
    for start in range(0, len(keys), DELETE_BATCH):
        batch = keys[start:start + DELETE_BATCH]
        if bucket is not None:
            bucket.take(len(batch))
        objects.delete(batch)


def _result(judged: Judged) -> pa.RecordBatch:
    """The task's files, then one row without a path carrying its count of kept files and its nested tables."""
    files = judged.deleted
    return pa.RecordBatch.from_pydict({
        "path": [f.path for f in files] + [None], "size": [f.size for f in files] + [None],
        "modified": [f.last_modified_ms for f in files] + [None],
        "kept": [None] * len(files) + [judged.kept_unreferenced],
        "nested": [None] * len(files) + ["\n".join(judged.nested_tables)]}, schema=_RESULT_ARROW)


def _parallelism(spark: SparkSession) -> int:
    """How many tasks run at once: the default parallelism (a classic session), else the executors' cores
    as Spark Connect reports them through the session's settings, else 2."""
    try:
        return max(1, spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        value = spark.conf.get("spark.default.parallelism", None)
        return max(1, int(value)) if value and value.isdigit() else 2

