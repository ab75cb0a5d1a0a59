"""VACUUM and the job commit, in-process against on Spark (``local[2]``), on the local servers. Prints one JSON
line per run; never asserts.

    .venv/bin/python -m tests.benchmarks.scaleout vacuum --files 100000 [--servers servers|moto] [--sides spark]
    .venv/bin/python -m tests.benchmarks.scaleout jobcommit --files 10000 [--servers servers|moto]

``vacuum``: a one-file table, then ``--files`` unreferenced tiny objects PUT beside it (untimed, 64 at a
time), then a vacuum with retention 0 (``force``) timed; the objects are PUT afresh for each side
(``--sides``: in-process :func:`table.maintenance.vacuum.vacuum`, :func:`spark_integration.vacuum.vacuum_on_spark`
without pacing, and ``spark-paced``: with the default 3,500 deletes a second).

``jobcommit``: the harness's job commit of ``--files`` staged uploads (``tests.benchmarks.harness.staged``),
completed by the driver's pool of 16 threads, then by the executors
(:class:`spark_integration.completion.ExecutorCompleter`), each on its own table.

The load average before and after each run is printed with it: on a machine shared with other work the
figures move with it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from logstore import StorageOptions, TableUri, open_object_store


def load() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stack(servers: str):
    if servers == "moto":
        from infra.local_stack import LocalStack

        started = LocalStack().start()
        return started, started.process.pid
    from infra.servers import ServerStack

    started = ServerStack().start()
    return started, started.s3.process.pid


def orphans(uri: str, options: dict[str, str], files: int) -> float:
    parsed = TableUri.parse(uri)
    objects = open_object_store(parsed, storage_options=options)
    started = time.perf_counter()
    with ThreadPoolExecutor(64) as pool:
        list(pool.map(lambda n: objects.put(parsed.key(f"orphan-{n:07d}.parquet"), b"x"), range(files)))
    return time.perf_counter() - started


def run_vacuum(spark, st, server_pid: int, files: int, sides: list[str]) -> None:
    import pyarrow as pa

    from spark_integration.vacuum import S3_WRITES_PER_PREFIX, vacuum_on_spark
    from table import Table, write_table
    from table.maintenance.vacuum import vacuum

    options = st.storage_options()
    for side in sides:
        uri = f"s3://{st.bucket}/vacuum-{side}-{files}"
        write_table(uri, pa.table({"id": [1]}), storage_options=options)
        put_seconds = orphans(uri, options, files)
        time.sleep(1.1)  # the objects' modification times (whole seconds) fall before the cutoff
        table = Table(uri, storage_options=options)
        before, server0, cpu0, t0 = load(), cpu(server_pid), time.process_time(), time.perf_counter()
        if side == "in-process":
            report = vacuum(table, retention_hours=0, force=True, dry_run=False)
        else:
            rate = S3_WRITES_PER_PREFIX if side == "spark-paced" else None
            report = vacuum_on_spark(spark, table, retention_hours=0, force=True, dry_run=False,
                                     deletes_per_second=rate)
        seconds = time.perf_counter() - t0
        print(json.dumps({"measure": "vacuum", "side": side, "files": files, "deleted": report.count,
                          "seconds": round(seconds, 2), "driver_cpu_seconds": round(time.process_time() - cpu0, 2),
                          "server_cpu_seconds": round(cpu(server_pid) - server0, 2), "put_seconds": round(put_seconds, 1),
                          "load_before": before, "load_after": load()}), flush=True)


def run_jobcommit(spark, st, files: int) -> None:
    import tests.benchmarks.harness.staged as staged
    from spark_integration.completion import ExecutorCompleter

    options = st.storage_options()
    original = staged.commit_staged
    try:
        for side in ("driver", "executors"):
            uri = f"s3://{st.bucket}/jobcommit-{side}-{files}"
            if side == "executors":
                completer = ExecutorCompleter(spark, table_path=TableUri.parse(uri).table_path,
                                              options=StorageOptions.resolve(options))
                staged.commit_staged = functools.partial(original, completer=completer)
            else:
                staged.commit_staged = original
            before = load()
            result = staged.job_commit(uri, files=files, tasks=max(1, files // 100), options=options)
            print(json.dumps({"measure": "jobcommit", "side": side, **{k: (round(v, 2) if isinstance(v, float) else v)
                                                                        for k, v in result.items()},
                              "load_before": before, "load_after": load()}), flush=True)
    finally:
        staged.commit_staged = original


def warm_up(batches):
    """A Python task importing what the measured tasks use (the first Python task of a session starts its
    workers: tens of seconds on a loaded machine)."""
    import spark_integration.completion  # noqa: F401
    import spark_integration.vacuum  # noqa: F401

    yield from batches


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.scaleout")
    parser.add_argument("measure", choices=["vacuum", "jobcommit"])
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--servers", choices=["servers", "moto"], default="servers")
    parser.add_argument("--sides", default="in-process,spark",
                        help="vacuum: in-process, spark (no pacing), spark-paced (3,500 deletes/s), comma-separated")
    args = parser.parse_args(argv)
    from spark_integration.session import local_session

    st, server_pid = stack(args.servers)
    spark = local_session(cores=2, max_failures=1, app_name="dynacommit-scaleout-bench", driver_memory="1g")
    try:
        # the session and its Python workers up, with our modules imported, before anything is timed
        spark.range(8, numPartitions=2).mapInArrow(warm_up, "id long").collect()
        if args.measure == "vacuum":
            run_vacuum(spark, st, server_pid, args.files, args.sides.split(","))
        else:
            run_jobcommit(spark, st, args.files)
    finally:
        spark.stop()
        st.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
