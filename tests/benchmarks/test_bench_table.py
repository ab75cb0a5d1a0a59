"""Table commit latency as history grows, and loading a long history: measured and printed, never asserted.

Run: make bench (or .venv/bin/python -m pytest -o addopts= tests/benchmarks/test_bench_table.py -s)
"""

from __future__ import annotations

import statistics
import time

import pyarrow as pa

from table import Table, write_table
from table.log.actions import AddFile
from table.log.transaction import ReadScope, commit


def _small_add(i: int) -> AddFile:
    return AddFile(path=f"part-{i:05d}.parquet", partition_values={}, size=100, modification_time=0,
                   data_change=True, stats='{"numRecords":1}')


def test_bench_commit_latency_at_version_50_and_1000(s3_uri, storage_options):
    data = pa.table({"n": pa.array([1, 2, 3], pa.int64())})
    table = Table.for_write(s3_uri, storage_options=storage_options)
    write_table(table, data)
    # Grow the history cheaply with log-only commits, then time real write_table appends at each depth.
    snapshot = table.snapshot
    timings: dict[int, list[float]] = {}
    for target in (50, 1000):
        while snapshot.version < target - 1:
            snapshot = commit(table.log_store, snapshot, [_small_add(snapshot.version + 1)], operation="WRITE",
                              operation_parameters={"mode": "Append"}, read_scope=ReadScope.blind_append()).snapshot
        table = Table(s3_uri, storage_options=storage_options)
        samples = []
        for _ in range(10):
            started = time.perf_counter()
            write_table(table, data)
            samples.append((time.perf_counter() - started) * 1000)
        snapshot = table.snapshot
        timings[target] = samples
    started = time.perf_counter()
    loaded = Table(s3_uri, storage_options=storage_options)
    load_ms = (time.perf_counter() - started) * 1000
    print(f"\nwrite_table append (3 rows, moto) at version ~50: p50 {statistics.median(timings[50]):.0f} ms; "
          f"at version ~1000: p50 {statistics.median(timings[1000]):.0f} ms")
    print(f"loading the {loaded.version + 1}-commit table (checkpoint {loaded.snapshot.checkpoint_version}): "
          f"{load_ms:.0f} ms, {len(loaded.files())} files")
