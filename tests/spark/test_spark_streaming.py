"""Structured Streaming with ``format("dynacommit")`` on the shared local[2,3] session: the sink's
exactly-once across a restart, complete mode, two applications streaming into one table, and the
source following new commits, passing over compaction and stopping at deletes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from logstore import TableUri, open_object_store
from spark_integration import register
from spark_integration.compat import FEATURES
from table.data.write import write_table
from table.table import Table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    register(spark)


def json_files(directory: Path, files: int, rows: int, *, first: int = 0) -> Path:
    """``files`` JSON files of ``rows`` rows each, ids consecutive from ``first``: a deterministic source."""
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        ids = range(first + f * rows, first + (f + 1) * rows)
        (directory / f"part-{first + f:05d}.json").write_text("".join(json.dumps({"id": i, "k": i % 2}) + "\n" for i in ids))
    return directory


def uploads(uri: str, options: dict[str, str]) -> list:
    return open_object_store(uri, storage_options=options).list_uploads(TableUri.parse(uri).key(""))


def run_to_end(query) -> None:
    """Wait for a ``trigger(availableNow=True)`` query; fail with its error if it has one."""
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()


def stream_into(spark, source: Path, uri: str, checkpoint: Path, options: dict[str, str], *, mode: str = "append",
                transform=None):
    df = spark.readStream.schema("id bigint, k int").option("maxFilesPerTrigger", 1).json(str(source))
    if transform is not None:
        df = transform(df)
    return (df.writeStream.format("dynacommit").options(**options).option("checkpointLocation", str(checkpoint))
            .outputMode(mode).trigger(availableNow=True).start(uri))


@pytest.mark.spark_smoke
def test_a_batch_replayed_after_a_restart_writes_nothing(spark, s3_uri, storage_options, tmp_path):
    """Deleting the newest ``commits/N`` of the checkpoint is a crash after our commit and before Spark's:
    the restarted query runs batch N again, and the sink finds its txn in the table."""
    source, checkpoint = json_files(tmp_path / "in", files=3, rows=10), tmp_path / "cp"
    query = stream_into(spark, source, s3_uri, checkpoint, {**storage_options, "partitionBy": "k"})
    run_to_end(query)
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 2 and table.partition_columns == ["k"]
    assert table.snapshot.state.app_version(str(query.id)) == 2

    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink()
    replay = stream_into(spark, source, s3_uri, checkpoint, storage_options)
    run_to_end(replay)

    assert replay.id == query.id and replay.runId != query.runId
    assert (checkpoint / "commits" / "2").exists(), "the restarted query ran batch 2 again"
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 2, "no second commit of batch 2"
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(30))
    assert uploads(s3_uri, storage_options) == []


def test_complete_mode_replaces_the_rows_with_each_batch(spark, s3_uri, storage_options, tmp_path):
    source = json_files(tmp_path / "in", files=2, rows=10)
    query = stream_into(spark, source, s3_uri, tmp_path / "cp", storage_options, mode="complete",
                        transform=lambda df: df.groupBy("k").count())
    run_to_end(query)
    table = Table(s3_uri, storage_options=storage_options)
    history = sorted(table.history(), key=lambda h: h.version)
    assert [(h.operation, h.operation_parameters) for h in history] == [
        ("STREAMING UPDATE", {"outputMode": "Complete", "queryId": str(query.id), "epochId": str(epoch)})
        for epoch in (0, 1)]
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["k"]) == [{"k": 0, "count": 10},
                                                                                   {"k": 1, "count": 10}]


def test_two_applications_stream_into_one_table(spark, s3_uri, storage_options, tmp_path):
    """Another Spark application (a separate process) streams into the table while this one does."""
    ours = json_files(tmp_path / "ours", files=3, rows=10)
    theirs = json_files(tmp_path / "theirs", files=3, rows=10, first=1000)
    other = subprocess.Popen([sys.executable, str(HERE / "spark_stream_app.py"), str(theirs), s3_uri,
                              str(tmp_path / "their-cp")], env=_app_env(storage_options), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        query = stream_into(spark, ours, s3_uri, tmp_path / "our-cp", storage_options)
        run_to_end(query)
        out, err = other.communicate(timeout=400)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert other.returncode == 0, f"{out}\n{err[-4000:]}"
    their_query = json.loads(out.strip().splitlines()[-1])["query_id"]

    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 5
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [*range(30), *range(1000, 1030)]
    assert table.snapshot.state.app_version(str(query.id)) == 2
    assert table.snapshot.state.app_version(their_query) == 2


def _app_env(storage_options: dict[str, str]) -> dict[str, str]:
    """The other application's environment: the storage options (never argv), this project importable."""
    env = dict(os.environ, **storage_options)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parents[1]), env.get("PYTHONPATH")) if p)
    return env


# --- the source ---------------------------------------------------------------------------------------


def rows(uri: str, n: int, *, first: int, options: dict[str, str], mode: str = "append") -> int:
    data = pa.table({"id": pa.array(range(first, first + n), pa.int64()), "k": pa.array([i % 2 for i in range(n)], pa.int32())})
    return write_table(uri, data, mode=mode, partition_by=["k"], storage_options=options).version


@pytest.mark.spark_smoke
def test_the_source_delivers_each_commit_once_passes_over_compaction_and_stops_at_a_delete(spark, s3_uri,
                                                                                           storage_options, tmp_path):
    batches: list[list[int]] = []

    def collect(df, batch_id):
        batches.append(sorted(r.id for r in df.collect()))

    def follow(**options: str) -> None:
        query = (spark.readStream.format("dynacommit").options(**storage_options, **options).load(s3_uri)
                 .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        run_to_end(query)

    rows(s3_uri, 10, first=0, options=storage_options)
    rows(s3_uri, 10, first=10, options=storage_options)
    follow(maxFilesPerTrigger="2")
    # a pyspark without admission control for Python sources cannot bound a batch: one batch of both commits
    assert sorted(i for b in batches for i in b) == list(range(20))
    assert len(batches) == (2 if FEATURES.stream_admission_control else 1)

    rows(s3_uri, 5, first=100, options=storage_options)          # version 2: new rows
    compacted = Table(s3_uri, storage_options=storage_options).optimize()  # version 3: dataChange=false
    assert compacted.result is not None and compacted.result.version == 3
    batches.clear()
    follow()
    assert batches == [list(range(100, 105))]

    rows(s3_uri, 3, first=200, options=storage_options, mode="overwrite")  # version 4 removes data
    rows(s3_uri, 2, first=300, options=storage_options)                     # version 5
    batches.clear()
    with pytest.raises(PySparkException, match=f"version 4 of {s3_uri} removes"):
        follow()
    assert batches == []
    follow(skipChangeCommits="true")
    assert batches == [[300, 301]]
