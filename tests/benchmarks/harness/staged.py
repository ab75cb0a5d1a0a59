"""A job commit of many tiny staged uploads: the PendingSets a Spark job's tasks would hand the driver,
made directly (one small Parquet body per upload), then :func:`table.data.jobcommit.commit_staged`
timed. Works on any object store: the in-memory one (``memory://``) and S3."""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from logstore import TableUri, open_object_store
from table import Table, write_table
from table.data.jobcommit import commit_staged
from table.data.pendingset import (
    PendingSet,
    StagedFile,
    StagedPart,
    data_file_name,
    encode_path,
)
from table.data.writespec import WriteSpec
from tests.benchmarks.harness.deltalog import file_stats, parquet_bytes
from tests.benchmarks.harness.workload import small_file
import tests.support.memory  # noqa: E402,F401 - registers the in-process memory:// scheme


def job_commit(uri: str, *, files: int, tasks: int, options: dict[str, str] | None = None,
               threads: int = 32) -> dict:
    """Create the table, stage ``files`` uploads from ``tasks`` tasks (untimed), then time the job commit."""
    data = small_file(0, rows=10)
    write_table(uri, data, storage_options=options)
    parsed = TableUri.parse(uri)
    objects = open_object_store(parsed, storage_options=options)
    payload = parquet_bytes(data)
    stats = json.dumps(file_stats(data), separators=(",", ":"))
    job_id = str(uuid.uuid4())
    names = [(task, n) for task in range(tasks) for n in range(files // tasks + (task < files % tasks))]

    def stage(name: tuple[int, int]) -> tuple[int, StagedFile]:
        task, n = name
        relative = data_file_name(task, job_id, n)
        key = parsed.key(relative)
        upload_id = objects.create_upload(key).upload_id
        etag = objects.upload_part(key, upload_id, 1, payload)
        return task, StagedFile(path=encode_path(relative), key=key, upload_id=upload_id,
                                parts=[StagedPart(number=1, etag=etag)], size=len(payload),
                                num_records=data.num_rows, stats=stats, partition_values={})

    started = time.perf_counter()
    if parsed.scheme == "memory":
        staged = [stage(name) for name in names]
    else:
        with ThreadPoolExecutor(threads) as pool:
            staged = list(pool.map(stage, names))
    stage_seconds = time.perf_counter() - started
    by_task: dict[int, list[StagedFile]] = {}
    for task, f in staged:
        by_task.setdefault(task, []).append(f)
    pendingsets = [PendingSet(table_path=parsed.table_path, job_id=job_id, task_id=task, attempt_id=0, files=fs)
                   for task, fs in sorted(by_task.items())]
    table = Table(uri, storage_options=options)
    cpu0, t0 = time.process_time(), time.perf_counter()
    spec = WriteSpec.of()
    result = commit_staged(table, pendingsets, spec, spec.plan(table, table.schema), engine_info="dynacommit-bench",
                           job_id=job_id)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"files": files, "tasks": tasks, "stage_seconds": stage_seconds, "seconds": seconds, "cpu_seconds": cpu,
            "complete_seconds": float(result.metrics.get("completeSeconds", "nan")),
            "commit_seconds": float(result.metrics.get("commitSeconds", "nan")), "version": result.version,
            "live_files": len(Table(uri, storage_options=options).add_actions())}
