"""Log store speed on the embedded moto stack: measured and printed, never asserted.

Run: make bench (or .venv/bin/python -m pytest -o addopts= tests/benchmarks/test_bench_logstore.py -s)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from logstore import open_log_store

WORKER = Path(__file__).resolve().parents[1] / "integration" / "logstore_worker.py"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_bench_sequential_commit_latency(s3_uri, storage_options):
    store = open_log_store(s3_uri, storage_options=storage_options)
    latencies, latest = [], []
    for v in range(300):
        started = time.perf_counter()
        store.write(v, b'{"commitInfo":{}}\n')
        latencies.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        store.latest_version()
        latest.append((time.perf_counter() - started) * 1000)
    early, late = latencies[:50], latencies[-50:]
    print(f"\nlogstore write on moto: p50 {statistics.median(latencies):.1f} ms, p95 {_pct(latencies, .95):.1f} ms; "
          f"versions 0-49 p50 {statistics.median(early):.1f} ms, 250-299 p50 {statistics.median(late):.1f} ms; "
          f"latest_version p50 {statistics.median(latest):.1f} ms")


def test_bench_four_process_contention(s3_uri, storage_options):
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, str(WORKER), s3_uri, json.dumps(storage_options), "50", f"p{n}"],
                              stdout=subprocess.PIPE, text=True) for n in range(4)]
    figures = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    wall = time.perf_counter() - started
    lost = sum(f["lost_races"] for f in figures)
    print(f"\n4 processes x 50 commits on moto: {200 / wall:.1f} commits/s over {wall:.1f} s wall, "
          f"{lost} lost races retried ({lost / 200:.2f} per commit)")
