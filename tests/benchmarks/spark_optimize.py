"""OPTIMIZE of a table of many small files: as a Spark job on a standalone cluster, in one process, and
against Spark's own ``df.repartition(n).write.parquet`` of the same rows. Prints; never asserts.

    .venv/bin/python -m tests.benchmarks.spark_optimize [--files 100000] [--days 20] [--servers servers]

Set-up: SeaweedFS + dynalite (``--servers moto`` for moto) and a Spark standalone master with ``--workers``
workers (1 core each: this machine has 2), one executor on each; the driver is this process.

The tables, built fast: ``--files`` tiny Parquet files (``--rows-per-file`` rows each: ``id``, ``x`` a
double, ``s`` 16 hex digits; partitioned by ``day``, ``--days`` partitions, the files spread evenly) PUT
side by side, then ONE commit of all their ``add`` actions (after a ``write_table`` that creates the
table; file ``i`` repeats the rows of file ``i % 1000``, which keeps the build cheap). Two such tables hold the same rows: one compacted by ``DynacommitTable.optimize().executeCompaction()``
on the cluster, one by ``Table.optimize()`` in this process (the bins are the same: one per day).
``--zorder`` also Z-orders both by ``x`` afterwards. Spark's Parquet writer then writes, from
``spark.range``, as many rows of the same shape, ``repartition(days)``, to local disk (pyspark has no S3
connector; the servers speak only to our Python).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

def row_shape(days: int) -> list[str]:
    return ["id", f"cast(id % {days} as int) as day", "rand(7) as x", "lpad(hex(id * 2654435761), 16, '0') as s"]


DISTINCT_FILES = 1000
"""File ``i`` holds the rows of file ``i % DISTINCT_FILES``: encoding every tiny file anew would make building
the table cost more CPU than the PUTs; OPTIMIZE reads and writes the same bytes either way."""


def file_rows(index: int, rows: int) -> pa.Table:
    ids = list(range(index * rows, (index + 1) * rows))
    return pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array([(i * 7919 % 1000) / 1000 for i in ids]),
                     "s": pa.array([format(i * 2654435761 & 0xFFFFFFFFFFFFFFFF, "016x") for i in ids])})


def build(uri: str, options: dict[str, str], *, files: int, days: int, rows: int, threads: int = 32) -> float:
    """The table of the module docstring at ``uri``; its seconds."""
    from logstore import TableUri, open_log_store, open_object_store
    from table import Table, write_table
    from tests.benchmarks.harness import deltalog

    started = time.perf_counter()
    first = file_rows(files, 1).append_column("day", pa.array([0], pa.int32()))
    write_table(uri, first, partition_by=["day"], storage_options=options)
    parsed = TableUri.parse(uri)
    objects = open_object_store(parsed, storage_options=options)

    distinct = [file_rows(i, rows) for i in range(min(files, DISTINCT_FILES))]
    bodies = [(deltalog.parquet_bytes(t), deltalog.file_stats(t)) for t in distinct]

    def one(index: int) -> dict:
        day = index % days
        body, stats = bodies[index % len(bodies)]
        path = f"day={day}/part-{index:08d}-bench.snappy.parquet"
        objects.put(parsed.key(path), body)
        add = deltalog.add_action(path, size=len(body), stats=stats)
        add["add"]["partitionValues"] = {"day": str(day)}
        return add

    with ThreadPoolExecutor(threads) as pool:
        adds = list(pool.map(one, range(files), chunksize=64))
    store = open_log_store(uri, storage_options=options)
    store.write(1, deltalog.body(deltalog.append_actions(adds)))
    assert len(Table(uri, storage_options=options).files()) == files + 1
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=20)
    parser.add_argument("--rows-per-file", type=int, default=10)
    parser.add_argument("--servers", choices=("servers", "moto"), default="servers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executor-memory", default="2g")
    parser.add_argument("--zorder", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the cluster and servers stop too
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from spark_integration import DynacommitTable
    from spark_integration.session import standalone_session
    from table import Table
    from tests.benchmarks.harness.driver import start_stack
    from tests.support.spark_cluster import StandaloneCluster

    def say(**fields) -> None:
        print(json.dumps(fields), flush=True)

    stack = start_stack(args.servers)
    options = {k: v for k, v in stack.options.items() if k != "AWS_S3_LOCKING_PROVIDER"}
    work = Path(tempfile.mkdtemp(prefix="dynacommit-bench-optimize-"))
    (work / "cluster").mkdir()
    cluster = StandaloneCluster(cores=1, memory="3g", workers=args.workers, work_dir=work / "cluster").start()
    spark = standalone_session(cluster.master_url, app_name="dynacommit-bench-optimize", executor_cores=1,
                               executor_memory=args.executor_memory, driver_memory="2g", shuffle_partitions=args.days,
                               conf={"spark.cores.max": str(args.workers), "spark.driver.extraJavaOptions": "",
                                     "spark.executor.extraJavaOptions": ""})
    try:
        say(event="setup", files=args.files, days=args.days, rows_per_file=args.rows_per_file, servers=stack.label,
            workers=args.workers, executors=spark.sparkContext._jsc.sc().getExecutorIds().size())
        warm = f"s3://{stack.bucket}/optimize-warmup"
        build(warm, options, files=200, days=4, rows=args.rows_per_file)
        DynacommitTable.forPath(spark, warm, options).optimize().executeCompaction()  # Python workers, imports
        rows = args.files * args.rows_per_file
        shape = row_shape(args.days)
        spark.range(0, 10_000, 1, numPartitions=4).selectExpr(*shape).repartition(4) \
            .write.mode("overwrite").parquet(str(work / "warmup"))

        uris = {"spark": f"s3://{stack.bucket}/optimize-spark", "in-process": f"s3://{stack.bucket}/optimize-here"}
        for name, uri in uris.items():
            say(event="build", table=name, seconds=round(build(uri, options, files=args.files, days=args.days,
                                                               rows=args.rows_per_file), 1))
        for name, uri in uris.items():
            started, cpu = time.perf_counter(), time.process_time()
            if name == "spark":
                result = DynacommitTable.forPath(spark, uri, options).optimize().executeCompaction()
                metrics = result.metrics
            else:
                metrics = Table(uri, storage_options=options).optimize().result.metrics
            say(event="optimize", how=name, seconds=round(time.perf_counter() - started, 1),
                driver_cpu_seconds=round(time.process_time() - cpu, 1), files_removed=int(metrics["numRemovedFiles"]),
                files_added=int(metrics["numAddedFiles"]), bytes_added=int(metrics["numAddedBytes"]),
                commit_seconds=float(metrics["commitSeconds"]))
        if args.zorder:
            for name, uri in uris.items():
                started = time.perf_counter()
                if name == "spark":
                    DynacommitTable.forPath(spark, uri, options).optimize().executeZOrderBy("x")
                else:
                    Table(uri, storage_options=options).optimize(z_order=["x"])
                say(event="zorder", how=name, seconds=round(time.perf_counter() - started, 1))
        started = time.perf_counter()
        spark.range(0, rows, 1, numPartitions=args.days * 4).selectExpr(*shape) \
            .repartition(args.days).write.mode("overwrite").parquet(str(work / "parquet"))
        say(event="df.repartition.write.parquet", rows=rows, partitions=args.days,
            seconds=round(time.perf_counter() - started, 1))
    finally:
        spark.stop()
        cluster.stop()
        stack.stop()


if __name__ == "__main__":
    main()
