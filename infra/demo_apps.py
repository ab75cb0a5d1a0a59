"""The two Spark applications of the demo (:mod:`infra.demo`), each its own process.

``python -m infra.demo_apps batch --uri URI ...``: a batch job appending with
``df.write.format("dynacommit")`` ``--commits`` times, and half-way a draft of the partition
``kind=daily`` replaced with ``partitionOverwriteMode=dynamic``. Its first append is made with
``write_dataframe``, whose commit starts from the version the job was planned on (Delta's read version),
and its tasks hold on until the other application has committed (``--sync-dir``): the two really race,
and the output shows the batch job losing that version and being retried at the next.

``python -m infra.demo_apps stream --uri URI --work-dir DIR ...``: a Structured Streaming
query from a landing directory of JSON files into the table (``writeStream.format("dynacommit")``),
one file per micro-batch. Half-way the driver "crashes" after a batch reached the table but before
Spark recorded it (its ``commits/N`` file is removed, which is what a crash there leaves behind), and
the query restarts from its checkpoint: Spark runs batch N again, the sink finds the batch's ``txn``
in the table and writes nothing, and the query goes on. It starts once the batch application's first job
is staging (``--sync-dir``).

Storage settings come from the environment. Every row is tagged with its application (``writer``), its
job or batch (``seq``) and its number (``i``), so the demo's verdict can count each row.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

__all__ = ["main"]

PARTITION_BY = "kind"
DAILY_ROWS = 500


def say(line: str) -> None:
    print(line, flush=True)


def writer_frame(spark, *, writer: int, seq: int, rows: int, kind: str = "append", tag: str = "row"):
    """The rows of job ``seq`` of ``writer``: ``i`` = 0..rows-1, over two Spark partitions."""
    return spark.range(0, rows, 1, numPartitions=2).selectExpr(
        f"cast({writer} as int) as writer", f"cast({seq} as int) as seq", "id as i", f"'{kind}' as kind",
        f"concat('{tag}-', cast(id as string)) as payload",
    )


STAGING = "writer-1-staging"
"""The file the batch application's first job creates in ``--sync-dir`` once its tasks run."""
SYNC_SECONDS = 180.0


class HoldUntilOtherCommits:
    """A ``mapInArrow`` step that passes its rows on once the table has a version newer than when the
    task started, i.e. once the other application committed while this job was running (or after
    ``SYNC_SECONDS``). It first marks the job as staging in ``sync_dir``."""

    def __init__(self, uri: str, sync_dir: str):
        self.uri, self.sync_dir = uri, sync_dir

    def __call__(self, batches):
        from table.table import Table

        Path(self.sync_dir, STAGING).touch()
        started = Table(self.uri).version
        deadline = time.monotonic() + SYNC_SECONDS
        while Table(self.uri).version <= started and time.monotonic() < deadline:
            time.sleep(0.2)
        yield from batches


def wait_for(path: Path, seconds: float = SYNC_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return path.exists()


def txn_commit(uri: str, app_id: str, app_version: int) -> tuple[int, dict[str, str]]:
    """``(version, metrics)`` of the commit that carries txn ``app_version`` of application ``app_id``.

    Looked up by the txn itself, not as the application's newest: a streaming listener runs behind the
    query, which may have committed later batches by then."""
    from table.table import Table

    for entry in Table(uri).history():
        if entry.app_txns.get(app_id) == app_version:
            return entry.version, {k: str(v) for k, v in (entry.operation_metrics or {}).items()}
    raise LookupError(f"no commit of {uri} carries txn {app_version} of {app_id}")


def session(args: argparse.Namespace, name: str):
    from spark_integration import register
    from spark_integration.session import local_session, standalone_session

    if args.verbose:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        for logger in ("spark_integration", "table"):
            logging.getLogger(logger).setLevel(logging.DEBUG)
    started = time.monotonic()
    if args.master.startswith("spark://"):
        spark = standalone_session(args.master, app_name=f"dynacommit-demo-{name}")
    else:
        spark = local_session(app_name=f"dynacommit-demo-{name}")
    register(spark)
    say(f"[{name}] Spark application {spark.sparkContext.applicationId} up in {time.monotonic() - started:.1f}s")
    return spark


# --- the batch application ------------------------------------------------------------------------


def run_batch(args: argparse.Namespace) -> int:
    name = f"writer {args.writer} (batch)"
    spark = session(args, name)

    app_id = f"dynacommit-demo-writer-{args.writer}"
    jobs = iter(range(1, 10**6))

    def job(label: str, df, **options: str) -> None:
        """One idempotent job (txnAppId + txnVersion: run again, it would write nothing)."""
        t0 = time.monotonic()
        txn = next(jobs)
        df.write.format("dynacommit").mode(options.pop("mode", "append")).options(**options) \
            .option("txnAppId", app_id).option("txnVersion", str(txn)).save(args.uri)
        version, m = txn_commit(args.uri, app_id, txn)
        say(f"[{name}] {label}: landed at version {version} ({m.get('numOutputRows')} rows, {m.get('numFiles')} "
            f"files, {m.get('numRemovedFiles')} removed, attempts {m.get('numAttempts')}, {time.monotonic() - t0:.1f}s)")

    def racing_job(label: str, df) -> None:
        """The first append: ``write_dataframe`` plans on the table as it is, the tasks hold on until the
        other application commits, then the commit finds its version taken, reads the winner and takes
        the next one."""
        from spark_integration import write_dataframe
        from table.table import Table

        t0 = time.monotonic()
        txn = next(jobs)
        before = Table(args.uri).version
        held = df.mapInArrow(HoldUntilOtherCommits(args.uri, args.sync_dir), df.schema)
        result = write_dataframe(held, args.uri, app_id=app_id, app_version=txn)
        m = result.metrics
        others = sorted(h.version for h in Table(args.uri).history()
                        if before < h.version < result.version and h.operation == "STREAMING UPDATE")
        say(f"[{name}] {label}: landed at version {result.version} ({m.get('numOutputRows')} rows, "
            f"{m.get('numFiles')} files, attempts {m.get('numAttempts')}, {time.monotonic() - t0:.1f}s)")
        lost = int(m.get("numAttempts", "1")) - 1
        if lost:
            say(f"[{name}] {label}: planned on version {before}; writer 2 (stream) committed version(s) "
                f"{', '.join(map(str, others)) or '?'} while it ran, so its commit lost {lost} race(s), read the "
                f"winner(s) (no conflict: both append) and was retried at version {result.version}")

    try:
        for seq in range(args.commits):
            frame = writer_frame(spark, writer=args.writer, seq=seq, rows=args.rows)
            if seq == 0 and args.sync_dir:
                racing_job(f"append {seq + 1}/{args.commits}", frame)
            else:
                job(f"append {seq + 1}/{args.commits}", frame)
            if seq == max(0, args.commits // 2 - 1):
                job("draft of kind=daily", writer_frame(spark, writer=args.writer, seq=-1, rows=DAILY_ROWS,
                                                        kind="daily", tag="draft"))
                job("overwrite of kind=daily (dynamic)",
                    writer_frame(spark, writer=args.writer, seq=-1, rows=DAILY_ROWS, kind="daily", tag="final"),
                    mode="overwrite", partitionOverwriteMode="dynamic")
    finally:
        spark.stop()
    return 0


# --- the streaming application --------------------------------------------------------------------


def land_file(landing: Path, *, writer: int, seq: int, rows: int) -> None:
    """One JSON file of the landing zone: the rows of micro-batch ``seq`` (written whole, then renamed in)."""
    lines = "".join(json.dumps({"writer": writer, "seq": seq, "i": i, "kind": "append", "payload": f"row-{i}"}) + "\n"
                    for i in range(rows))
    part = landing / f".part-{seq:05d}.json.tmp"
    part.write_text(lines)
    part.rename(landing / f"part-{seq:05d}.json")


def run_stream(args: argparse.Namespace) -> int:
    from pyspark.sql.streaming import StreamingQueryListener

    name = f"writer {args.writer} (stream)"
    spark = session(args, name)
    work = Path(args.work_dir)
    landing, checkpoint = work / "landing", work / "checkpoint"
    landing.mkdir(parents=True, exist_ok=True)
    first_half = max(1, args.commits // 2)
    for seq in range(first_half):
        land_file(landing, writer=args.writer, seq=seq, rows=args.rows)

    committed: set[int] = set()
    reported: list[int] = []

    class Report(StreamingQueryListener):
        """A line per micro-batch: the version it landed at, or that the table had it already."""

        def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's name
            pass

        def onQueryProgress(self, event) -> None:  # noqa: N802 - Spark's name
            progress = event.progress
            try:
                if progress.numInputRows > 0:
                    self.report(progress)
            finally:
                reported.append(progress.batchId)

        def report(self, progress) -> None:
            held = progress.batchId
            version, m = txn_commit(args.uri, str(progress.id), held)
            if version in committed:
                say(f"[{name}] batch {progress.batchId}: {progress.numInputRows} rows read again, but version "
                    f"{version} holds this query's txn {held} already: nothing written")
            else:
                committed.add(version)
                say(f"[{name}] batch {progress.batchId}: landed at version {version} ({m.get('numOutputRows')} rows, "
                    f"txn {held}, attempts {m.get('numAttempts')})")

        def onQueryIdle(self, event) -> None:  # noqa: N802 - Spark's name
            pass

        def onQueryTerminated(self, event) -> None:  # noqa: N802 - Spark's name
            pass

    def run() -> object:
        spark.streams.addListener(listener := Report())
        query = (spark.readStream.schema("writer int, seq int, i bigint, kind string, payload string")
                 .option("maxFilesPerTrigger", 1).json(str(landing))
                 .writeStream.format("dynacommit").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start(args.uri))
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()
        # Spark delivers progress events to listeners asynchronously: wait for the last batch's line.
        last, deadline = (query.lastProgress or {}).get("batchId"), time.monotonic() + 30
        while last is not None and last not in reported and time.monotonic() < deadline:
            time.sleep(0.1)
        spark.streams.removeListener(listener)
        return query

    try:
        if args.sync_dir:
            ready = wait_for(Path(args.sync_dir, STAGING))
            say(f"[{name}] " + ("writer 1's first job is staging: starting the query" if ready else
                                "writer 1 never started staging; starting the query anyway"))
        query = run()
        last = first_half - 1
        (checkpoint / "commits" / str(last)).unlink()
        (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
        say(f"[{name}] simulated crash: batch {last} is in the table but Spark never recorded it (commits/{last} "
            f"removed); restarting the query {query.id} from its checkpoint")
        for seq in range(first_half, args.commits):
            land_file(landing, writer=args.writer, seq=seq, rows=args.rows)
        run()
    finally:
        spark.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.demo_apps", description=__doc__.split("\n\n")[0])
    parser.add_argument("app", choices=["batch", "stream"])
    parser.add_argument("--uri", required=True, help="table URI")
    parser.add_argument("--writer", type=int, required=True, help="the application's number, in every row")
    parser.add_argument("--commits", type=int, default=4, help="jobs (batch) or micro-batches (stream)")
    parser.add_argument("--rows", type=int, default=2000, help="rows per job or micro-batch")
    parser.add_argument("--work-dir", help="stream: the landing directory and the checkpoint go here")
    parser.add_argument("--master", default="local[2]", help="local[2] (default) or spark://host:port")
    parser.add_argument("--verbose", action="store_true", help="debug log of dynacommit in this driver")
    parser.add_argument("--sync-dir", help="where the two applications meet, so that they really race")
    args = parser.parse_args(argv)
    if args.app == "stream" and not args.work_dir:
        parser.error("stream needs --work-dir")
    return run_batch(args) if args.app == "batch" else run_stream(args)


if __name__ == "__main__":
    sys.exit(main())
