"""Spark write throughput: ``write_dataframe`` into the moto stack vs Spark's own ``df.write.parquet`` to
local disk, the same DataFrame in the same Spark application. Measured and printed, never asserted.

Run: make bench (or .venv/bin/python -m pytest -o addopts= tests/benchmarks/test_bench_spark_write.py -s).
``DYNACOMMIT_BENCH_ROWS`` sets the size (default 24 million rows, about 1 GiB as Arrow data). The Spark
application runs as a child process (``python tests/benchmarks/test_bench_spark_write.py ...``) with the
JVM's default compilers, so its settings do not depend on any other test's SparkSession; it gets its own
moto server, which keeps every object in memory and is stopped afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]

DEFAULT_ROWS = 24_000_000
PARTITIONS = 8


def frame(spark, rows: int, partitions: int):
    """id, a 1000-value key, two random doubles and a 16-hex-digit string: ~44 bytes a row as Arrow."""
    return spark.range(0, rows, 1, numPartitions=partitions).selectExpr(
        "id", "cast(id % 1000 as int) as k", "rand(7) as x", "randn(11) as y",
        "lpad(hex(id * 2654435761), 16, '0') as s",
    )


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet"))


def run(rows: int, uri: str, out_dir: Path) -> dict:
    """The measurement itself (in the child process): warm up, then time both writers."""
    from spark_integration import write_dataframe
    from spark_integration.session import local_session

    spark = local_session(app_name="dynacommit-bench", driver_memory="2g", conf={
        "spark.driver.extraJavaOptions": "", "spark.executor.extraJavaOptions": "",
    })
    try:
        df = frame(spark, rows, PARTITIONS)
        sample = df.limit(100_000).toArrow()
        arrow_bytes = sample.nbytes / sample.num_rows * rows
        # warm-up: JIT, Python workers, S3 connections
        write_dataframe(frame(spark, 200_000, 2), uri + "-warmup")
        frame(spark, 200_000, 2).write.mode("overwrite").parquet(str(out_dir / "warmup"))

        # two rounds in alternating order, so neither writer always runs on a warmer JVM
        ours, theirs = [], []
        for round_ in range(2):
            for writer in (("ours", "spark") if round_ == 0 else ("spark", "ours")):
                started = time.perf_counter()
                if writer == "ours":
                    result = write_dataframe(df, f"{uri}-{round_}")
                    ours.append(time.perf_counter() - started)
                else:
                    df.write.mode("overwrite").parquet(str(out_dir / "spark"))
                    theirs.append(time.perf_counter() - started)
        return {
            "rows": rows, "arrow_bytes": arrow_bytes,
            "ours_seconds": ours, "ours_parquet_bytes": int(result.metrics["numOutputBytes"]),
            "ours_files": int(result.metrics["numFiles"]), "ours_parts": int(result.metrics["numParts"]),
            "ours_complete_seconds": float(result.metrics["completeSeconds"]),
            "ours_commit_seconds": float(result.metrics["commitSeconds"]),
            "spark_seconds": theirs, "spark_parquet_bytes": _dir_bytes(out_dir / "spark"),
        }
    finally:
        spark.stop()


def test_bench_spark_write_throughput(tmp_path):
    from infra.local_stack import LocalStack

    rows = int(os.environ.get("DYNACOMMIT_BENCH_ROWS", DEFAULT_ROWS))
    with LocalStack(bucket="dynacommit-bench") as stack:
        env = dict(os.environ, **stack.storage_options())
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        proc = subprocess.run(
            [sys.executable, __file__, str(rows), f"s3://{stack.bucket}/bench/events", str(tmp_path)],
            env=env, cwd=root, capture_output=True, text=True, timeout=1800,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    f = json.loads(proc.stdout.strip().splitlines()[-1])
    mib = 1024 * 1024
    data = f["arrow_bytes"] / mib
    ours, theirs = min(f["ours_seconds"]), min(f["spark_seconds"])
    print(f"\nSpark write of {f['rows']:,} rows ({data:,.0f} MiB as Arrow), local[2], best of 2 rounds:\n"
          f"  write_dataframe -> moto S3: {ours:.1f} s ({', '.join(f'{t:.1f}' for t in f['ours_seconds'])}), "
          f"{data / ours:.1f} MiB/s of data, {f['ours_parquet_bytes'] / mib:,.0f} MiB Parquet in "
          f"{f['ours_files']} files / {f['ours_parts']} parts (job commit: complete "
          f"{f['ours_complete_seconds']:.1f} s, log entry {f['ours_commit_seconds']:.2f} s)\n"
          f"  df.write.parquet -> local disk: {theirs:.1f} s ({', '.join(f'{t:.1f}' for t in f['spark_seconds'])}), "
          f"{data / theirs:.1f} MiB/s of data, {f['spark_parquet_bytes'] / mib:,.0f} MiB Parquet\n"
          f"  ratio: write_dataframe takes {ours / theirs:.2f}x the time of Spark's own writer")

if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(json.dumps(run(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))), flush=True)
