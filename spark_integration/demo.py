"""The demo (``make demo``): two Spark applications append to one table at the same time, safely.

``python -m spark_integration.demo`` runs, on this machine:

1. a local S3 + DynamoDB (the embedded moto stack, :mod:`infra.local_stack`) on a free port, unless
   ``DYNACOMMIT_DEMO_URI`` is set (see below);
2. version 0 of a fresh table (``writer int, seq int, i bigint, kind string, payload string``,
   partitioned by ``kind``), created with ``write_table``;
3. TWO Spark applications as two OS processes ("two clusters": each ``python -m spark_integration.demo
   --writer N`` with its own ``local[2]`` SparkSession) appending to the table at the same time through
   the same DynamoDB table, ``--commits`` jobs each, every row tagged with its writer, job sequence
   number and row number. Writer 1 also writes a draft of the partition ``kind=daily`` and then replaces
   it with ``partition_overwrite="dynamic"``, while writer 2 keeps appending;
4. the check: the table read with :func:`~spark_integration.read_dataframe` and with pyarrow
   (``Table(...).to_pyarrow_table()``), the history, the rows per writer, and a verdict: no row lost,
   none duplicated, no draft row left, the versions 0..N contiguous with one commit per job. The exit
   code is 1 on a bad verdict.

A line is printed as each commit lands. It takes about a minute or two on a 2-core machine.

Real S3 and DynamoDB: set ``DYNACOMMIT_DEMO_URI=s3://bucket/prefix`` plus the standard settings
(``AWS_REGION``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` or a profile,
optionally ``DELTA_DYNAMO_TABLE_NAME``, default ``delta_log``, which must exist: ``dynacommit
create-ddb-table``). The demo writes a new table under ``<prefix>/demo-<id>`` and leaves it there.

Options: ``--commits N`` (jobs per writer, default 4), ``--rows N`` (rows per job, default 2000),
``--verbose`` (the writers log their jobs at debug level, staging plans included), ``--log-dir DIR``
(where the Spark logs go; default a new temporary directory).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

__all__ = ["main"]

PARTITION_BY = ["kind"]
DAILY_ROWS = 500
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _say(line: str) -> None:
    print(line, flush=True)


@contextlib.contextmanager
def jvm_stderr_to(path: Path):
    """Send the standard error of processes started inside the block (the Spark JVM: its banner and
    log) to ``path``; this process's own stderr is restored on exit."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


# --- one writer: a Spark application -----------------------------------------------------------------


def writer_frame(spark, *, writer: int, seq: int, rows: int, kind: str = "append", tag: str = "row"):
    """The rows of job ``seq`` of ``writer``: ``i`` = 0..rows-1, over two Spark partitions."""
    return spark.range(0, rows, 1, numPartitions=2).selectExpr(
        f"cast({writer} as int) as writer", f"cast({seq} as int) as seq", "id as i", f"'{kind}' as kind",
        f"concat('{tag}-', cast(id as string)) as payload",
    )


def run_writer(args: argparse.Namespace) -> int:
    """One Spark application: ``--commits`` appends, and with ``--overwrite`` the draft + dynamic
    overwrite of ``kind=daily`` half-way through. Storage settings come from the environment."""
    from spark_integration.session import local_session, standalone_session
    from spark_integration.write import write_dataframe

    if args.verbose:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        for name in ("spark_integration", "table"):
            logging.getLogger(name).setLevel(logging.DEBUG)
    name = f"writer {args.writer}"
    started = time.monotonic()
    if args.master.startswith("spark://"):
        spark = standalone_session(args.master, app_name=f"dynacommit-demo-{args.writer}")
    else:
        spark = local_session(app_name=f"dynacommit-demo-{args.writer}")
    _say(f"[{name}] Spark application {spark.sparkContext.applicationId} up in {time.monotonic() - started:.1f}s")

    def job(label: str, df, **kwargs) -> None:
        t0 = time.monotonic()
        result = write_dataframe(df, args.uri, partition_by=PARTITION_BY, **kwargs)
        m = result.metrics
        _say(f"[{name}] {label}: landed at version {result.version} ({m.get('numOutputRows')} rows, "
             f"{m.get('numFiles')} files, {m.get('numRemovedFiles')} removed, retries {m.get('numRetries')}, "
             f"{time.monotonic() - t0:.1f}s)")

    try:
        for seq in range(args.commits):
            job(f"append {seq + 1}/{args.commits}", writer_frame(spark, writer=args.writer, seq=seq, rows=args.rows))
            if args.overwrite and seq == max(0, args.commits // 2 - 1):
                job("draft of kind=daily", writer_frame(spark, writer=args.writer, seq=-1, rows=DAILY_ROWS,
                                                        kind="daily", tag="draft"))
                job("overwrite of kind=daily (dynamic)",
                    writer_frame(spark, writer=args.writer, seq=-1, rows=DAILY_ROWS, kind="daily", tag="final"),
                    mode="overwrite", partition_overwrite="dynamic")
    finally:
        spark.stop()
    _say(f"[{name}] done in {time.monotonic() - started:.1f}s")
    return 0


# --- the orchestrator ---------------------------------------------------------------------------------


def _stream(proc: subprocess.Popen, sink: list[str]) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        sink.append(line)
        _say(line)


def spawn_writer(writer: int, uri: str, *, commits: int, rows: int, env: dict[str, str], log_dir: Path,
                 overwrite: bool = False, master: str = "local[2]", verbose: bool = False) -> subprocess.Popen:
    """Start ``python -m spark_integration.demo --writer N`` (its stderr, Spark's log, goes to a file)."""
    cmd = [sys.executable, "-m", "spark_integration.demo", "--writer", str(writer), "--uri", uri,
           "--commits", str(commits), "--rows", str(rows), "--master", master]
    if overwrite:
        cmd.append("--overwrite")
    if verbose:
        cmd.append("--verbose")
    stderr = open(log_dir / f"writer-{writer}.log", "wb")
    try:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
                                cwd=str(PROJECT_ROOT))
    finally:
        stderr.close()


def child_env(storage_options: dict[str, str] | None) -> dict[str, str]:
    """The environment of a writer process: storage settings travel as environment variables, never
    on the command line (where ``ps`` would show a secret)."""
    env = dict(os.environ)
    env.update(storage_options or {})
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def create_table(uri: str, storage_options: dict[str, str] | None) -> int:
    """Version 0: the empty table with the demo's schema (what a data team would create up front)."""
    import pyarrow as pa

    from table.data.write import write_table

    schema = pa.schema([("writer", pa.int32()), ("seq", pa.int32()), ("i", pa.int64()), ("kind", pa.string()),
                        ("payload", pa.string())])
    return write_table(uri, schema.empty_table(), mode="error", partition_by=PARTITION_BY,
                       storage_options=storage_options).version


def verdict(uri: str, storage_options: dict[str, str] | None, *, writers: int, commits: int, rows: int,
            overwrite_by: int | None, spark=None) -> list[str]:
    """Check the table; print what it holds and return the problems found (empty: all good)."""
    from table.table import Table

    problems: list[str] = []
    table = Table(uri, storage_options=storage_options)
    history = sorted(table.history(), key=lambda h: h.version)
    _say(f"\nhistory of {uri} ({len(history)} versions):")
    for h in history:
        m = h.operation_metrics or {}
        _say(f"  v{h.version:<3} {h.operation or '?':<6} {h.operation_parameters.get('mode', ''):<13} "
             f"rows={m.get('numOutputRows', '-'):>5} files={m.get('numFiles', '-'):>2} "
             f"removed={m.get('numRemovedFiles', '-'):>2} attempts={m.get('numAttempts', '-'):>2} "
             f"job={str(m.get('jobId', '-'))[:8]}")
    versions = [h.version for h in history]
    if versions != list(range(len(versions))):
        problems.append(f"versions are not contiguous from 0: {versions}")
    expected_commits = 1 + writers * commits + (2 if overwrite_by is not None else 0)
    if len(versions) != expected_commits:
        problems.append(f"{len(versions)} commits, expected {expected_commits} (one per job)")
    jobs = Counter(str((h.operation_metrics or {}).get("jobId")) for h in history[1:])
    doubled = [j for j, n in jobs.items() if n > 1]
    if doubled:
        problems.append(f"jobs committed more than once: {doubled}")

    data = table.to_pyarrow_table()
    keys = list(zip(*(data.column(c).to_pylist() for c in ("writer", "seq", "i", "kind", "payload"))))
    counts = Counter(keys)
    per_writer = Counter((w, k) for w, _, _, k, _ in keys)
    _say(f"\nrows read with pyarrow: {data.num_rows}")
    for (w, k), n in sorted(per_writer.items()):
        _say(f"  writer {w} kind={k}: {n} rows")
    expected: Counter = Counter()
    for w in range(1, writers + 1):
        for seq in range(commits):
            expected.update((w, seq, i, "append", f"row-{i}") for i in range(rows))
    if overwrite_by is not None:
        expected.update((overwrite_by, -1, i, "daily", f"final-{i}") for i in range(DAILY_ROWS))
    lost = expected - counts
    duplicated = sum(n - expected[k] for k, n in counts.items() if k in expected and n > expected[k])
    unexpected = [k for k in counts if k not in expected]
    if lost:
        problems.append(f"{sum(lost.values())} rows lost, e.g. {next(iter(lost))}")
    if duplicated:
        problems.append(f"{duplicated} duplicated rows")
    if unexpected:
        drafts = sum(1 for k in unexpected if k[4].startswith("draft"))
        problems.append(f"{len(unexpected)} unexpected rows ({drafts} of them drafts of the overwritten partition)")

    if spark is not None:
        from spark_integration.read import read_dataframe

        df = read_dataframe(spark, uri, storage_options=storage_options)
        spark_rows = Counter(tuple(r) for r in df.select("writer", "seq", "i", "kind", "payload").collect())
        _say(f"rows read with read_dataframe (Spark): {sum(spark_rows.values())}")
        if spark_rows != counts:
            problems.append("read_dataframe and pyarrow read different rows")
    return problems


def run_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    stack = None
    base = os.environ.get("DYNACOMMIT_DEMO_URI")
    if base:
        storage_options: dict[str, str] | None = None
        uri = f"{base.rstrip('/')}/demo-{uuid.uuid4().hex[:8]}"
        endpoint = os.environ.get("AWS_ENDPOINT_URL", "AWS")
        _say(f"S3 + DynamoDB from the environment ({endpoint}); table {uri}")
    else:
        from infra.local_stack import LocalStack

        stack = LocalStack(bucket="dynacommit-demo").start()
        storage_options = stack.storage_options()
        uri = f"s3://{stack.bucket}/demo/events"
        _say(f"local S3 + DynamoDB (moto) on {stack.endpoint}; table {uri}")
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="dynacommit-demo-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    writers: list[subprocess.Popen] = []
    spark = None
    try:
        version = create_table(uri, storage_options)
        _say(f"[setup] table created at version {version}")
        env = child_env(storage_options)
        _say(f"starting 2 Spark applications (separate processes, local[2] each); Spark logs in {log_dir}")
        lines: list[str] = []
        writers = [spawn_writer(w, uri, commits=args.commits, rows=args.rows, env=env, log_dir=log_dir,
                                overwrite=(w == 1), verbose=args.verbose) for w in (1, 2)]
        readers = [threading.Thread(target=_stream, args=(p, lines), daemon=True) for p in writers]
        for t in readers:
            t.start()
        # The checking session starts once both writers are up, so its JVM start overlaps their jobs.
        while sum("Spark application" in line for line in list(lines)) < 2 and all(p.poll() is None for p in writers):
            time.sleep(0.2)
        from spark_integration.session import local_session

        with jvm_stderr_to(log_dir / "check.log"):
            spark = local_session(app_name="dynacommit-demo-check")
        codes = [p.wait() for p in writers]
        for t in readers:
            t.join(timeout=5)
        if any(codes):
            for w, code in zip((1, 2), codes):
                if code:
                    tail = (log_dir / f"writer-{w}.log").read_text(errors="replace").splitlines()[-30:]
                    _say(f"writer {w} exited with {code}; the end of its log:\n" + "\n".join(tail))
            _say("VERDICT: FAILED (a writer failed)")
            return 1
        _say(f"both applications finished after {time.monotonic() - started:.1f}s; checking the table")
        problems = verdict(uri, storage_options, writers=2, commits=args.commits, rows=args.rows,
                           overwrite_by=1, spark=spark)
    finally:
        if spark is not None:
            spark.stop()
        for p in writers:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
        if stack is not None:
            stack.stop()
    elapsed = time.monotonic() - started
    if problems:
        _say(f"\nVERDICT: FAILED after {elapsed:.1f}s")
        for p in problems:
            _say(f"  - {p}")
        return 1
    _say(f"\nVERDICT: OK after {elapsed:.1f}s: every row exactly once, no draft left, versions contiguous, "
         f"one commit per job")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_integration.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--writer", type=int, help="run as writer N (one Spark application); used by the demo itself")
    parser.add_argument("--uri", help="table URI (writer mode)")
    parser.add_argument("--commits", type=int, default=4, help="append jobs per writer (default 4)")
    parser.add_argument("--rows", type=int, default=2000, help="rows per job (default 2000)")
    parser.add_argument("--overwrite", action="store_true", help="writer mode: also overwrite kind=daily")
    parser.add_argument("--master", default="local[2]",
                        help="writer mode: local[2] (default) or a standalone master spark://host:port")
    parser.add_argument("--verbose", action="store_true", help="debug log of the writers' jobs (plans included)")
    parser.add_argument("--log-dir", help="where the writers' Spark logs go (default: a new temporary directory)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.writer is not None:
        if not args.uri:
            parser.error("--writer needs --uri")
        return run_writer(args)
    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())
