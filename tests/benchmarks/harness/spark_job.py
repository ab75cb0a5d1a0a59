"""Spark: ``write_dataframe`` to the server vs Spark's own ``df.write.parquet`` to local disk, the same
DataFrame in the same ``local[2]`` application, A B A B after a warm-up. Each round also times the floor of
any ``mapInArrow`` writer (the rows to Arrow and across to Python, nothing written) and records the CPU
seconds of the JVM, the Python workers and the servers for all three (Linux ``/proc``).

Run by the driver as a child process of our interpreter (``python -m tests.benchmarks.harness.spark_job
ROWS URI OUT_DIR OPTIONS_JSON``), so its JVM settings depend on no other SparkSession; prints one JSON
line of figures.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

PARTITIONS = 4
_TICKS = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far) of every process we can read."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            found[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS)
    return found


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of the JVM (our child), the Python workers (the JVM's descendants) and the
    servers (the harness's other children): the machine is shared, so where CPU goes is steadier than
    wall time."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)

    def tree(root: int) -> float:
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            total += procs[pid][1] if pid in procs else 0.0
            todo += children.get(pid, [])
        return total

    jvms = children.get(os.getpid(), [])
    servers = [p for p in children.get(os.getppid(), []) if p != os.getpid()]
    return {"jvm": sum(procs[p][1] for p in jvms), "python_workers": sum(tree(p) - procs[p][1] for p in jvms),
            "servers": sum(tree(p) for p in servers)}


def _cpu_since(before: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before[k], 3) for k, v in cpu_seconds().items()}


def _count_rows(batches):
    """The floor of any ``mapInArrow`` writer: Spark's rows to Arrow, across to Python, nothing written."""
    import pyarrow as pa

    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


def frame(spark, rows: int, partitions: int):
    """id, a 1000-value key, two random doubles and a 16-hex-digit string: ~44 bytes a row as Arrow."""
    return spark.range(0, rows, 1, numPartitions=partitions).selectExpr(
        "id", "cast(id % 1000 as int) as k", "rand(7) as x", "randn(11) as y",
        "lpad(hex(id * 2654435761), 16, '0') as s",
    )


def _parquet_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet"))


def run(rows: int, uri: str, out_dir: Path, options: dict[str, str], rounds: int = 2) -> dict:
    from spark_integration import write_dataframe
    from spark_integration.session import local_session

    spark = local_session(app_name="dynacommit-bench", driver_memory="2g", conf={
        "spark.driver.extraJavaOptions": "", "spark.executor.extraJavaOptions": "",
    })
    try:
        df = frame(spark, rows, PARTITIONS)
        sample = df.limit(100_000).toArrow()
        arrow_bytes = sample.nbytes / sample.num_rows * rows
        # warm-up: JIT, Python workers, connections
        write_dataframe(frame(spark, 200_000, 2), uri + "-warmup", storage_options=options)
        frame(spark, 200_000, 2).write.mode("overwrite").parquet(str(out_dir / "warmup"))
        ours, theirs, arrow_only, metrics = [], [], [], []
        cpu: dict[str, list[dict[str, float]]] = {"ours": [], "spark": [], "arrow_only": []}
        for round_ in range(rounds):
            before, started = cpu_seconds(), time.perf_counter()
            result = write_dataframe(df, f"{uri}-{round_}", storage_options=options)
            ours.append(time.perf_counter() - started)
            cpu["ours"].append(_cpu_since(before))
            metrics.append(result.metrics)
            before, started = cpu_seconds(), time.perf_counter()
            df.write.mode("overwrite").parquet(str(out_dir / "spark"))
            theirs.append(time.perf_counter() - started)
            cpu["spark"].append(_cpu_since(before))
            before, started = cpu_seconds(), time.perf_counter()
            df.mapInArrow(_count_rows, "rows long").collect()
            arrow_only.append(time.perf_counter() - started)
            cpu["arrow_only"].append(_cpu_since(before))
        return {
            "rows": rows, "partitions": PARTITIONS, "arrow_bytes": arrow_bytes,
            "ours_seconds": ours, "spark_seconds": theirs, "arrow_only_seconds": arrow_only, "cpu_seconds": cpu,
            "ours_parquet_bytes": int(metrics[-1]["numOutputBytes"]), "ours_files": int(metrics[-1]["numFiles"]),
            "ours_parts": int(metrics[-1]["numParts"]),
            "ours_complete_seconds": [float(m["completeSeconds"]) for m in metrics],
            "ours_commit_seconds": [float(m["commitSeconds"]) for m in metrics],
            "spark_parquet_bytes": _parquet_bytes(out_dir / "spark"),
        }
    finally:
        spark.stop()


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    figures = run(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), json.loads(sys.argv[4]))
    print(json.dumps(figures), flush=True)
