"""The demo (``make demo``): two Spark applications write one table at the same time, the way users write.

``python -m infra.demo`` runs, on this machine:

1. a local S3 + DynamoDB (the embedded moto stack, :mod:`infra.local_stack`) on a free port, unless
   ``DYNACOMMIT_DEMO_URI`` is set (see below);
2. version 0 of a fresh table (``writer int, seq int, i bigint, kind string, payload string``,
   partitioned by ``kind``), created with ``write_table``;
3. TWO Spark applications as two OS processes (:mod:`infra.demo_apps`, each with its own
   ``local[2]`` SparkSession), writing at the same time through the same DynamoDB table:
   writer 1, a batch job: ``--commits`` appends with ``df.write.format("dynacommit")`` (idempotent:
   ``txnAppId``/``txnVersion``), and half-way a draft of the partition ``kind=daily`` replaced with
   ``partitionOverwriteMode=dynamic``; writer 2, a Structured Streaming query from a landing directory
   of JSON files (``writeStream.format("dynacommit")``, one file per micro-batch, ``--commits`` of
   them), which "crashes" half-way after a batch reached the table but before Spark recorded it, and
   restarts from its checkpoint: Spark runs that batch again and the sink writes nothing;
4. a compaction (``Table.optimize()``);
5. the reads and the check: the table read with ``spark.read.format("dynacommit")`` and with pyarrow,
   a filtered read and the files it opens, the version before the overwrite (time travel), the
   history, the rows per writer, and a verdict: no row lost, none duplicated, no draft row left, the
   versions 0..N contiguous with one commit per job and per micro-batch. The exit code is 1 on a bad
   verdict.

A line is printed as each commit lands. It takes about a minute or two on a 2-core machine.

Real S3 and DynamoDB: set ``DYNACOMMIT_DEMO_URI=s3://bucket/prefix`` plus the standard settings
(``AWS_REGION``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` or a profile,
optionally ``DELTA_DYNAMO_TABLE_NAME``, default ``delta_log``, which must exist: ``dynacommit
create-ddb-table``). The demo writes a new table under ``<prefix>/demo-<id>`` and leaves it there.

Options: ``--commits N`` (jobs and micro-batches per writer, default 4), ``--rows N`` (rows per job or
batch, default 2000), ``--verbose`` (the writers log dynacommit at debug level), ``--log-dir DIR``
(where the Spark logs, the landing directory and the checkpoint go; default a new temporary directory).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from infra.demo_apps import DAILY_ROWS, PARTITION_BY
from spark_integration.streaming import micro_batch_of

__all__ = ["DAILY_ROWS", "child_env", "main"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BATCH_WRITER, STREAM_WRITER = 1, 2
COLUMNS = ("writer", "seq", "i", "kind", "payload")


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


def _stream(proc: subprocess.Popen, sink: list[str], started: float) -> None:
    """Relay a writer's lines, each stamped with the seconds since the demo started."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        sink.append(line)
        _say(f"[{time.monotonic() - started:6.1f}s] {line}")


def spawn(app: str, writer: int, uri: str, *, commits: int, rows: int, env: dict[str, str], log_dir: Path,
          master: str = "local[2]", verbose: bool = False) -> subprocess.Popen:
    """Start ``python -m infra.demo_apps APP`` (its stderr, Spark's log, goes to a file)."""
    cmd = [sys.executable, "-m", "infra.demo_apps", app, "--writer", str(writer), "--uri", uri,
           "--commits", str(commits), "--rows", str(rows), "--master", master, "--sync-dir", str(log_dir)]
    if app == "stream":
        cmd += ["--work-dir", str(log_dir / f"writer-{writer}")]
    if verbose:
        cmd.append("--verbose")
    stderr = open(log_dir / f"writer-{writer}.log", "wb")
    try:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=str(PROJECT_ROOT))
    finally:
        stderr.close()


def child_env(storage_options: dict[str, str] | None) -> dict[str, str]:
    """The environment of a writer process: storage settings travel as environment variables, never
    on the command line (where ``ps`` would show a secret) nor in Spark options (in the query plan)."""
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
    return write_table(uri, schema.empty_table(), mode="error", partition_by=[PARTITION_BY],
                       storage_options=storage_options).version


def compact(uri: str, storage_options: dict[str, str] | None) -> str:
    """Step 4, the compaction: ``Table.optimize()`` rewrites small files into bigger ones in one commit
    with ``dataChange=false``. Returns its operation name for the verdict."""
    from table.table import Table

    table = Table(uri, storage_options=storage_options)
    files_before, t0 = len(table.add_actions()), time.monotonic()
    result = table.optimize()
    entry = table.history(limit=1)[0]
    _say(f"[compaction] {files_before} files -> {len(table.add_actions())} at version {entry.version} "
         f"({entry.operation}, {time.monotonic() - t0:.1f}s): {result}")
    return entry.operation


def verdict(uri: str, storage_options: dict[str, str] | None, *, commits: int, rows: int, spark=None,
            compaction: str | None = None) -> list[str]:
    """Check the table; print what it holds and return the problems found (empty: all good)."""
    from table.table import Table

    problems: list[str] = []
    table = Table(uri, storage_options=storage_options)
    history = sorted(table.history(), key=lambda h: h.version)
    _say(f"\nhistory of {uri} ({len(history)} versions):")
    for h in history:
        m = h.operation_metrics or {}
        _say(f"  v{h.version:<3} {h.operation or '?':<16} {h.operation_parameters.get('mode') or h.operation_parameters.get('outputMode', ''):<10} "
             f"rows={m.get('numOutputRows', '-'):>5} files={m.get('numFiles', '-'):>2} "
             f"removed={m.get('numRemovedFiles', '-'):>2} attempts={m.get('numAttempts', '-'):>2} "
             f"job={str(m.get('jobId', '-'))[-12:]}")
    versions = [h.version for h in history]
    apps = ["stream" if h.operation == "STREAMING UPDATE" else "batch" for h in history[1:]
            if h.operation != compaction]
    switches = sum(a != b for a, b in zip(apps, apps[1:]))
    # A commit that lost a race landed after versions it did not read: its readVersion is below the version
    # before it (a blind append's retried body keeps the numAttempts of the attempt that built it, see the
    # protocol doc, so the recorded attempts alone can miss a race).
    lost = sum(max(int((h.operation_metrics or {}).get("numAttempts", 1)) - 1,
                   1 if h.read_version is not None and h.read_version < h.version - 1 else 0) for h in history)
    _say(f"\ninterleaving: {' '.join(apps)} (the applications took turns {switches} times); {lost} lost race(s) "
         f"retried at the next version")
    if switches < 2 or lost < 1:
        problems.append(f"the two applications did not race: {switches} turn(s), {lost} lost race(s)")
    if versions != list(range(len(versions))):
        problems.append(f"versions are not contiguous from 0: {versions}")
    expected_commits = 1 + commits + 2 + commits + (1 if compaction else 0)
    if len(versions) != expected_commits:
        problems.append(f"{len(versions)} commits, expected {expected_commits} (one per job and micro-batch)")
    jobs = Counter(str((h.operation_metrics or {}).get("jobId")) for h in history[1:] if h.operation != compaction)
    doubled = [j for j, n in jobs.items() if n > 1]
    if doubled:
        problems.append(f"jobs committed more than once: {doubled}")
    batches = Counter(b for b in map(micro_batch_of, jobs) if b is not None)
    if sorted(batches) != list(range(commits)) or any(n != 1 for n in batches.values()):
        problems.append(f"the stream's micro-batches are not committed once each: {dict(batches)}")

    data = table.to_pyarrow_table()
    keys = list(zip(*(data.column(c).to_pylist() for c in COLUMNS)))
    counts = Counter(keys)
    _say(f"\nrows read with pyarrow at version {table.version}: {data.num_rows}")
    for (w, k), n in sorted(Counter((w, k) for w, _, _, k, _ in keys).items()):
        _say(f"  writer {w} kind={k}: {n} rows")
    expected: Counter = Counter()
    for w in (BATCH_WRITER, STREAM_WRITER):
        for seq in range(commits):
            expected.update((w, seq, i, "append", f"row-{i}") for i in range(rows))
    expected.update((BATCH_WRITER, -1, i, "daily", f"final-{i}") for i in range(DAILY_ROWS))
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
        problems += spark_reads(spark, uri, storage_options, table, counts, history)
    return problems


def spark_reads(spark, uri: str, storage_options: dict[str, str] | None, table, counts: Counter,
                history: list) -> list[str]:
    """The reads a user would run: everything, a filter (and the files it opens), an older version."""
    import pyarrow.compute as pc

    from spark_integration import register
    from table.data.read import prune_files

    register(spark)
    read = spark.read.format("dynacommit").options(**(storage_options or {}))
    problems: list[str] = []
    spark_rows = Counter(tuple(r) for r in read.load(uri).select(*COLUMNS).collect())
    _say(f"rows read with spark.read.format('dynacommit'): {sum(spark_rows.values())}")
    if spark_rows != counts:
        problems.append("Spark and pyarrow read different rows")
    opened = prune_files(table.snapshot, pc.field("kind") == "daily")
    daily = read.load(uri).where("kind = 'daily'").count()
    _say(f"rows where kind = 'daily': {daily}, from {len(opened)} of the {len(table.add_actions())} files "
         f"(the others are never opened)")
    overwrite = next((h.version for h in history if h.operation_parameters.get("partitionOverwriteMode")), None)
    if overwrite is not None:
        before = read.option("versionAsOf", str(overwrite - 1)).load(uri).where("kind = 'daily'")
        drafts = before.where("payload like 'draft-%'").count()
        _say(f"time travel to version {overwrite - 1}, before the dynamic overwrite: {drafts} draft rows in "
             f"kind=daily (none left now)")
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
        _say(f"starting 2 Spark applications (separate processes, local[2] each): a batch job and a streaming "
             f"query; Spark logs in {log_dir}")
        lines: list[str] = []
        writers = [spawn(app, w, uri, commits=args.commits, rows=args.rows, env=env, log_dir=log_dir,
                         verbose=args.verbose) for app, w in (("batch", BATCH_WRITER), ("stream", STREAM_WRITER))]
        readers = [threading.Thread(target=_stream, args=(p, lines, started), daemon=True) for p in writers]
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
            for w, code in zip((BATCH_WRITER, STREAM_WRITER), codes):
                if code:
                    tail = (log_dir / f"writer-{w}.log").read_text(errors="replace").splitlines()[-30:]
                    _say(f"writer {w} exited with {code}; the end of its log:\n" + "\n".join(tail))
            _say("VERDICT: FAILED (a writer failed)")
            return 1
        _say(f"both applications finished after {time.monotonic() - started:.1f}s")
        compaction = compact(uri, storage_options)
        problems = verdict(uri, storage_options, commits=args.commits, rows=args.rows, spark=spark,
                           compaction=compaction)
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
    _say(f"\nVERDICT: OK after {elapsed:.1f}s: the two applications interleaved and a lost race was retried, every row "
         f"exactly once (the replayed micro-batch included), no draft left, versions contiguous, one commit per job "
         f"and per micro-batch")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=4, help="jobs and micro-batches per writer (default 4)")
    parser.add_argument("--rows", type=int, default=2000, help="rows per job or micro-batch (default 2000)")
    parser.add_argument("--verbose", action="store_true", help="debug log of dynacommit in the writers")
    parser.add_argument("--log-dir", help="where the Spark logs, landing files and checkpoint go (default: a new "
                                          "temporary directory)")
    args = parser.parse_args(argv)
    if args.commits < 2:
        parser.error("--commits must be at least 2 (the stream restarts half-way)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())
