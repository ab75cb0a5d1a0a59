"""Many writers appending to one table at once: nobody starves, nothing is lost or doubled.

``WRITERS`` processes (default 16) each append ``COMMITS`` times (default 30) to one table with
``write_table`` (a staged upload, its completion and a commit each), as fast as they can. Each commit
carries a marker row (writer, sequence). Printed: commits/s, failures by error class, attempts per commit,
the slowest commit; checked (these are correctness, not timing): every acknowledged commit is in the table
exactly once and versions are contiguous.

    DYNACOMMIT_BENCH_WRITERS=16 DYNACOMMIT_BENCH_COMMITS=30 make bench BENCH=contention
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import time
import uuid

import pyarrow as pa

from table import DynacommitError, Table, write_table

WRITERS = int(os.environ.get("DYNACOMMIT_BENCH_WRITERS", "16"))
COMMITS = int(os.environ.get("DYNACOMMIT_BENCH_COMMITS", "30"))


def _writer(uri: str, options: dict[str, str], writer: int, commits: int, start_at: float) -> list[dict]:
    """Runs in a spawned process: ``commits`` appends, one marker row each; returns one record per commit."""
    while time.time() < start_at:  # every process starts appending at the same moment
        time.sleep(0.001)
    table = Table(uri, storage_options=options)
    records = []
    for seq in range(commits):
        data = pa.table({"writer": pa.array([writer], pa.int32()), "seq": pa.array([seq], pa.int32())})
        started = time.monotonic()
        try:
            result = write_table(table, data)
        except DynacommitError as exc:
            records.append({"writer": writer, "seq": seq, "error": type(exc).__name__, "message": str(exc)[:300],
                            "seconds": time.monotonic() - started})
            continue
        records.append({"writer": writer, "seq": seq, "version": result.version,
                        "attempts": int(result.metrics["numAttempts"]), "seconds": time.monotonic() - started})
    return records


def test_sixteen_writers_appending_to_one_table(local_stack):
    options = local_stack.storage_options()
    uri = f"s3://{local_stack.bucket}/bench/contention-{uuid.uuid4().hex[:8]}"
    write_table(uri, pa.table({"writer": pa.array([-1], pa.int32()), "seq": pa.array([-1], pa.int32())}),
                storage_options=options)
    start_at = time.time() + 15  # time for every process to import and open the table
    context = multiprocessing.get_context("spawn")
    with context.Pool(WRITERS) as pool:
        runs = [pool.apply_async(_writer, (uri, options, w, COMMITS, start_at)) for w in range(WRITERS)]
        records = [r for run in runs for r in run.get(timeout=3600)]
    wall = max(time.time() - start_at, 1e-9)
    landed = [r for r in records if "version" in r]
    failed = [r for r in records if "error" in r]
    rows = Table(uri, storage_options=options).to_pyarrow_table()
    markers = list(zip(rows["writer"].to_pylist(), rows["seq"].to_pylist()))
    seconds = sorted(r["seconds"] for r in landed)
    slowest = max(landed, key=lambda r: r["seconds"]) if landed else None
    summary = {
        "writers": WRITERS, "commits_each": COMMITS, "landed": len(landed), "failed": len(failed),
        "failures_by_error": {e: sum(1 for r in failed if r["error"] == e) for e in {r["error"] for r in failed}},
        "commits_per_second": round(len(landed) / wall, 2), "wall_seconds": round(wall, 1),
        "p50_seconds": round(statistics.median(seconds), 3) if seconds else None,
        "p95_seconds": round(seconds[int(0.95 * (len(seconds) - 1))], 3) if seconds else None,
        "slowest_commit": slowest and {k: round(v, 3) if isinstance(v, float) else v for k, v in slowest.items()},
        "max_attempts": max((r["attempts"] for r in landed), default=0),
        "mean_attempts": round(statistics.mean(r["attempts"] for r in landed), 2) if landed else None,
    }
    print("\ncontention:", json.dumps(summary))
    if failed:
        print("first failure:", failed[0]["message"])
    # Correctness, not timing: every acknowledged commit is there exactly once, nothing else is.
    assert sorted(markers) == sorted([(-1, -1)] + [(r["writer"], r["seq"]) for r in landed])
    versions = sorted(r["version"] for r in landed)
    assert versions == list(range(1, len(landed) + 1))
