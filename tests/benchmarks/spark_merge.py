"""Spark MERGE on a standalone cluster: an upsert of ``--source`` rows into a ``--rows``-row partitioned table,
against Spark's own ``df.write.parquet`` of as many rows. Prints; never asserts.

    .venv/bin/python -m tests.benchmarks.spark_merge [--rows 10000000] [--source 1000000] [--servers servers]
        [--rounds 1] [--jvm-options OPTIONS] [--event-log DIR]

Set-up: SeaweedFS + dynalite (``--servers moto`` for moto) and a Spark standalone master with ``--workers``
workers (1 core each: this machine has 2), one executor on each; the driver is this process. The JVMs run
with their default compiler and collector (the tests' quick-start options are for short jobs), unless
``--jvm-options`` says otherwise.

The table: ``id`` (0..rows-1), ``day`` (the partition column: ``DAYS`` days of consecutive ids), ``x`` (a
double), ``s`` (16 hex digits), written by ``write_dataframe`` in ``TASKS`` tasks. The source, as a CDC batch
of the newest two days: 90% of its rows update ids of those days (every other id from the start of day 8),
10% insert new ids into a new day. Two MERGEs of it (``whenMatchedUpdate(x, s)``,
``whenNotMatchedInsertAll``):

- *plain*: ``t.id = s.id``: nothing prunes, every file is read and joined; only the files of days 8-9
  hold a changed row, and only they are rewritten;
- *pruned*: ``t.id = s.id AND t.day >= 8``, as the user guide advises: only days 8-9 (and day 10, from the
  first merge) are read.

Before anything is timed, a small table is written, merged into (the same MERGE, 10,000 source rows into
100,000) and written by ``df.write.parquet``, so that each timed path finds its code compiled and its workers
started (runs before 2026-11-28 07:00 did not warm up the MERGE, whose first timed run paid for that).

Also timed: the floor of any merge that reads the whole table, Spark reading its rows through the read
tasks every MERGE uses (each with its file and row number) and counting them.

Spark's own Parquet writer (to local disk: pyspark has no S3 connector, and the servers speak only to our
Python) writes, from ``spark.range``, as many rows of the same shape as (a) the rows the plain merge
writes (rewritten files and inserts), (b) the source, (c) the whole table after it: what an upsert costs
that rewrites the table. Like is compared with like: in each round the write (a), the one the plain MERGE
is measured against, is the round's first ``df.write.parquet``, as the plain MERGE is its round's first
MERGE; both run after the same warm-up (module docstring, below) and the round's target write. (Runs
before 2026-11-28 18:00 wrote (b) first, so (a) ran on writer code (b) had compiled at this size: in the
first round a cold MERGE was set against a warm write.) The number of rows (a) writes follows from the
data design (:func:`plain_merge_writes`: the rows of the files holding an id the source updates, and the
inserts), so it is known before the MERGE runs; the MERGE's ``numOutputRows`` is printed beside it
(``rows_written``, ``rows_written_expected``) and a difference is reported. Each round ends with a
``compare`` line: the plain MERGE's CPU and wall seconds over those of write (a).

Each figure comes with its CPU seconds: those of every process of the run (this driver and its JVM, the
cluster's master, workers, executors and their Python workers, the servers) summed from Linux ``/proc``,
ended children included, and each MERGE and write also by kind of process (``cpu_by_process``: this
driver, its JVM, the executors' JVMs, their Python workers, the cluster's daemons, the servers); on a
shared machine, CPU is steadier than wall time. The JVMs' CPU is split further by thread
(``cpu_by_process["jvm_threads"]``, live threads only: a task thread that ended is missing): the JIT
compilers (``C2 CompilerThre``, ``C1 CompilerThre``), the collector, the tasks (``Executor task i``), the
driver's py4j threads (``Thread``) that plan what Python asks for.

``--rounds N`` runs it all N times, each round on a fresh table: from the second round on, every path has
run at this size in the same JVMs, so the JIT compilation of what became hot is paid (mostly) already.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

DAYS = 10
TASKS = 40
_TICKS = os.sysconf("SC_CLK_TCK")


def _kind(pid: int, own: int) -> str:
    """Which part of the run a process is, by its command line."""
    if pid == own:
        return "driver_python"
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "CoarseGrainedExecutorBackend" in command:
        return "executor_jvm"
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        return "python_workers"
    if "deploy.master.Master" in command or "deploy.worker.Worker" in command:
        return "cluster_daemons"
    if "SparkSubmit" in command or "py4j" in command:
        return "driver_jvm"
    return "servers_other"


def _process_tree() -> tuple[dict[int, list[int]], dict[int, float]]:
    """From Linux ``/proc``: every process's children, and its CPU seconds so far with its reaped children's."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = sum(int(f) for f in fields[11:15]) / _TICKS
    return children, cpu


def tree_cpu() -> dict[str, float]:
    """CPU seconds so far of this process and all its descendants, with their reaped children, by kind of
    process (this driver, its JVM, the executors' JVMs, their Python workers, the cluster's daemons, the rest)."""
    children, cpu = _process_tree()
    own = os.getpid()
    totals: dict[str, float] = {}
    todo = [own]
    while todo:
        pid = todo.pop()
        kind = _kind(pid, own)
        totals[kind] = totals.get(kind, 0.0) + cpu.get(pid, 0.0)
        todo += children.get(pid, [])
    return totals


def _descendants() -> list[int]:
    """This process and its descendants, alive."""
    children, _ = _process_tree()
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def jvm_threads() -> dict[str, float]:
    """CPU seconds so far of the live threads of this run's JVMs (its driver's, the executors'), by kind of
    process and thread name without its number (``executor_jvm/GC Thread``, Linux keeps 15 characters of a
    name): what a JVM spends outside its tasks (the compiler, the collector, the shuffle's threads, those
    that feed the Python workers). Threads that ended are not counted."""
    own = os.getpid()
    totals: dict[str, float] = {}
    for pid in _descendants():
        kind = _kind(pid, own)
        if kind not in ("driver_jvm", "executor_jvm"):
            continue
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                stat = Path(f"/proc/{pid}/task/{thread}/stat").read_text()
            except OSError:
                continue
            name = re.sub(r"([-#_. ]*\d+)+$", "", stat[stat.index("(") + 1:stat.rindex(")")]) or "?"
            fields = stat[stat.rindex(")") + 2:].split()
            key = f"{kind}/{name}"
            totals[key] = totals.get(key, 0.0) + sum(int(f) for f in fields[11:13]) / _TICKS
    return totals


def tree_cpu_seconds() -> float:
    """CPU seconds so far of this process and all its descendants, with their reaped children."""
    return sum(tree_cpu().values())


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 1) for k in sorted({*before, *after})}


def _threads_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The JVM threads' CPU between two :func:`jvm_threads`, largest first, those of 0.1 s and more."""
    spent = {k: round(v - before.get(k, 0.0), 1) for k, v in after.items()}
    return dict(sorted(((k, v) for k, v in spent.items() if v >= 0.1), key=lambda kv: -kv[1]))


def target_frame(spark, rows: int, start: int = 0, partitions: int = TASKS):
    per_day = rows // DAYS
    return spark.range(start, start + rows, 1, numPartitions=partitions).selectExpr(
        "id", f"cast(id div {per_day} as int) as day", "rand(7) as x", "lpad(hex(id * 2654435761), 16, '0') as s")


def source_frame(spark, rows: int, source: int):
    per_day = rows // DAYS
    updates, inserts = source * 9 // 10, source - source * 9 // 10
    first = 8 * per_day
    changed = spark.range(0, updates, 1, numPartitions=8).selectExpr(
        f"{first} + 2 * id as id", f"cast(({first} + 2 * id) div {per_day} as int) as day", "rand(11) as x",
        "'updated' as s")
    added = spark.range(rows, rows + inserts, 1, numPartitions=2).selectExpr(
        "id", f"cast({DAYS} as int) as day", "rand(13) as x", "'inserted' as s")
    return changed.unionByName(added)


def plain_merge_writes(rows: int, source: int) -> int:
    """How many rows the plain MERGE of :func:`source_frame` into :func:`target_frame` writes: each target file
    (one per write task and day: task ``i`` holds ids ``[i * rows // TASKS, (i + 1) * rows // TASKS)``, as
    ``spark.range`` splits them) that holds an updated id is rewritten whole, and every source row matching
    no target row (the inserts, and updated ids past the table's last, if the source is that large) is new."""
    per_day = rows // DAYS
    updates = source * 9 // 10
    first, last = 8 * per_day, 8 * per_day + 2 * (updates - 1)
    matched = max(0, min(updates, -(-(rows - first) // 2)))
    written = source - matched
    for task in range(TASKS):
        low, high = task * rows // TASKS, (task + 1) * rows // TASKS
        for day in range(low // per_day, (high - 1) // per_day + 1) if high > low else ():
            start, end = max(low, day * per_day), min(high, (day + 1) * per_day)
            # the first updated id (first + 2k) at or after start, if any, before end and at most last
            hit = first if start <= first else first + -(-(start - first) // 2) * 2
            if updates and hit < end and hit <= last:
                written += end - start
    return written


def merge(spark, uri: str, options: dict[str, str], source, condition: str
          ) -> tuple[float, float, dict[str, str], dict[str, float]]:
    from spark_integration import DynacommitTable

    threads, cpu, started = jvm_threads(), tree_cpu(), time.perf_counter()
    result = DynacommitTable.forPath(spark, uri, options).alias("t").merge(source.alias("s"), condition) \
        .whenMatchedUpdate(set={"x": "s.x", "s": "s.s"}).whenNotMatchedInsertAll().execute()
    seconds, by_kind = time.perf_counter() - started, _cpu_delta(cpu, tree_cpu())
    by_kind_threads = {**by_kind, "jvm_threads": _threads_delta(threads, jvm_threads())}
    return seconds, sum(by_kind.values()), result.metrics, by_kind_threads


def parquet_seconds(spark, rows: int, out: Path) -> tuple[float, float, dict[str, float]]:
    threads, cpu, started = jvm_threads(), tree_cpu(), time.perf_counter()
    target_frame(spark, rows, partitions=TASKS).write.mode("overwrite").partitionBy("day").parquet(str(out))
    seconds, by_kind = time.perf_counter() - started, _cpu_delta(cpu, tree_cpu())
    return seconds, sum(by_kind.values()), {**by_kind, "jvm_threads": _threads_delta(threads, jvm_threads())}


def run_round(spark, args, uri: str, options: dict[str, str], created_options, work: Path, round_: int,
              say) -> None:
    """One round: the target written, read (the first round), merged into twice, and Spark's own writes.
    Later rounds (``--rounds``) run the same on a fresh table in JVMs that have already run every path at
    this size: their CPU leaves out most of the JIT compilation the first round pays."""
    from spark_integration import write_dataframe
    from spark_integration.dml import job
    from table import Table

    started = time.perf_counter()
    created = write_dataframe(target_frame(spark, args.rows), uri, partition_by=["day"], storage_options=options)
    files = len(Table(uri, storage_options=options).files())
    say(event="target", round=round_, seconds=round(time.perf_counter() - started, 1), files=files,
        bytes=int(created.metrics["numOutputBytes"]))

    if round_ == 1:
        table = Table(uri, storage_options=options).snapshot
        started = time.perf_counter()
        read = job.target_frame(spark, table, sorted(table.files, key=lambda f: f.path), created_options).count()
        say(event="read", rows=read, seconds=round(time.perf_counter() - started, 1))

    source = source_frame(spark, args.rows, args.source)
    expected = plain_merge_writes(args.rows, args.source)
    for name, condition in (("plain", "t.id = s.id"), ("pruned", "t.id = s.id AND t.day >= 8")):
        before = len(Table(uri, storage_options=options).files())
        seconds, cpu, m, by_kind = merge(spark, uri, options, source, condition)
        say(event="merge", round=round_, variant=name, condition=condition, seconds=round(seconds, 1),
            cpu_seconds=round(cpu, 1), cpu_by_process=by_kind, files_in_table=before,
            files_read=int(m["numFilesAfterSkipping"]), files_rewritten=int(m["numTargetFilesRemoved"]),
            files_added=int(m["numTargetFilesAdded"]), rows_updated=int(m["numTargetRowsUpdated"]),
            rows_inserted=int(m["numTargetRowsInserted"]), rows_copied=int(m["numTargetRowsCopied"]),
            spark_job_seconds=round(int(m["rewriteTimeMs"]) / 1000, 1),
            source_count_seconds=round(int(m["materializeSourceTimeMs"]) / 1000, 1),
            complete_seconds=float(m.get("completeSeconds", 0)), commit_seconds=float(m["commitSeconds"]),
            rows_written=int(m["numOutputRows"]),
            **({"rows_written_expected": expected} if name == "plain" else {}),
            **({"rows_written_differs": True} if name == "plain" and int(m["numOutputRows"]) != expected else {}))
        if name == "plain":
            plain = (seconds, cpu)

    after = Table(uri, storage_options=options).to_pyarrow_dataset().count_rows()
    # the write the plain MERGE is compared with first: no write at any size ran before it in the round
    for what, rows in (("rows the plain merge wrote", expected), ("source", args.source), ("whole table", after)):
        seconds, cpu, by_kind = parquet_seconds(spark, rows, work / f"parquet-{round_}")
        say(event="df.write.parquet", round=round_, of=what, rows=rows, seconds=round(seconds, 1),
            cpu_seconds=round(cpu, 1), cpu_by_process=by_kind, first_write_of_round=what == "rows the plain merge wrote")
        if what == "rows the plain merge wrote":
            say(event="compare", round=round_, merge="plain", write_rows=rows, cpu_ratio=round(plain[1] / cpu, 2),
                seconds_ratio=round(plain[0] / seconds, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--source", type=int, default=1_000_000)
    parser.add_argument("--servers", choices=("servers", "moto"), default="servers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executor-memory", default="3g")
    parser.add_argument("--jvm-options", default="",
                        help="the driver's and executors' JVM options (default: none, the JVM's own compiler and "
                             "collector); e.g. --jvm-options=-XX:TieredStopAtLevel=1 for the C1 compiler only")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run everything this many times, each on a fresh table: later rounds in warm JVMs")
    parser.add_argument("--event-log", type=Path, default=None,
                        help="a directory for Spark's event log (each stage's tasks and times), to profile a run")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from logstore import StorageOptions
    from spark_integration import write_dataframe
    from spark_integration.session import standalone_session
    from tests.benchmarks.harness.driver import start_stack
    from tests.support.spark_cluster import StandaloneCluster

    def say(**fields) -> None:
        print(json.dumps(fields), flush=True)

    with contextlib.ExitStack() as stop:  # whatever was started is stopped, also when a later step fails
        stack = start_stack(args.servers)
        stop.callback(stack.stop)
        options = {k: v for k, v in stack.options.items() if k != "AWS_S3_LOCKING_PROVIDER"}
        created_options = StorageOptions.resolve(options)
        work = Path(tempfile.mkdtemp(prefix="dynacommit-bench-merge-"))
        stop.callback(_remove_written, work)
        (work / "cluster").mkdir()
        cluster = StandaloneCluster(cores=1, memory="4g", workers=args.workers, work_dir=work / "cluster").start()
        stop.callback(cluster.stop)
        spark = standalone_session(cluster.master_url, app_name="dynacommit-bench-merge", executor_cores=1,
                                   executor_memory=args.executor_memory, driver_memory="2g",
                                   shuffle_partitions=TASKS,
                                   conf={"spark.cores.max": str(args.workers),
                                         "spark.driver.extraJavaOptions": args.jvm_options,
                                         "spark.executor.extraJavaOptions": args.jvm_options,
                                         **({"spark.eventLog.enabled": "true",
                                             "spark.eventLog.dir": str(args.event_log)} if args.event_log else {})})
        stop.callback(spark.stop)
        say(event="setup", rows=args.rows, source=args.source, servers=stack.label, workers=args.workers,
            rounds=args.rounds, jvm_options=args.jvm_options,
            executors=spark.sparkContext._jsc.sc().getExecutorIds().size(), master=cluster.master_url)
        uri = f"s3://{stack.bucket}/merge-bench"
        write_dataframe(target_frame(spark, 100_000, partitions=4), uri + "-warmup", partition_by=["day"],
                        storage_options=options)  # Python workers, JIT, connections
        parquet_seconds(spark, 100_000, work / "warmup")
        merge(spark, uri + "-warmup", options, source_frame(spark, 100_000, 10_000), "t.id = s.id")  # its jobs' code

        for round_ in range(1, args.rounds + 1):
            run_round(spark, args, f"{uri}-{round_}" if args.rounds > 1 else uri, options, created_options, work,
                      round_, say)


def _remove_written(work: Path) -> None:
    """Spark's Parquet files of the run; the cluster's logs stay."""
    for written in work.iterdir():
        if written.name != "cluster":
            shutil.rmtree(written, ignore_errors=True)

if __name__ == "__main__":
    main()
