"""``format("dynacommit")``, ``write_dataframe``, ``read_dataframe`` and ``DynacommitTable`` from a Spark
Connect client.

The server is pip's pyspark's own (``sbin/start-connect-server.sh``), on a free port; its environment
has no storage settings, so everything reaches it as options, as from a client on another machine.
The client session comes from ``pyspark.sql.connect.session.SparkSession.builder.remote(url)``:
``pyspark.sql.SparkSession.builder.remote(url)`` refuses to start a remote session in a process that
already runs a classic one (``SESSION_ALREADY_EXIST``), and this process runs the suite's shared one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest

from logstore import TableUri, open_object_store
from spark_integration import DynacommitTable, read_dataframe, register, write_dataframe
from table import write_table
from table.table import Table
from tests.support.dml_reference import ClauseSpec, MergeSpec, duckdb_merge, rows_of

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    from tests.support.connect_server import ConnectServer

    pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark[connect]")
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    with ConnectServer(work_dir=tmp_path_factory.mktemp("connect")) as server:
        session = RemoteSparkSession.builder.remote(server.url).getOrCreate()
        try:
            register(session)
            yield session
        finally:
            session.stop()


def test_the_client_session_is_a_spark_connect_one(connect):
    assert type(connect).__module__ == "pyspark.sql.connect.session"
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|not supported|JVM"):
        connect.sparkContext  # noqa: B018 - no JVM on a Connect client


def test_batch_writes_and_reads_through_spark_connect(connect, s3_uri, storage_options, caplog):
    df = connect.range(0, 60, 1, numPartitions=2).selectExpr("id", "cast(id % 3 as int) as p")
    df.write.format("dynacommit").mode("append").options(**storage_options).option("partitionBy", "p").save(s3_uri)
    with caplog.at_level(logging.DEBUG, logger="spark_integration"):
        result = write_dataframe(df.where("id < 10"), s3_uri, storage_options=storage_options)  # debug: the plan
    assert result.version == 1 and result.metrics["numOutputRows"] == "10"
    assert "StageTask" in caplog.text

    read = connect.read.format("dynacommit").options(**storage_options)
    assert sorted(r.id for r in read.load(s3_uri).where("p = 1 and id > 50").collect()) == [52, 55, 58]
    assert read.option("versionAsOf", "0").load(s3_uri).count() == 60
    assert read_dataframe(connect, s3_uri, storage_options=storage_options).count() == 70
    assert Table(s3_uri, storage_options=storage_options).partition_columns == ["p"]


def test_streaming_sink_and_source_through_spark_connect(connect, s3_uri, storage_options, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for f in range(2):
        (source / f"part-{f}.json").write_text("".join(json.dumps({"id": f * 10 + i}) + "\n" for i in range(10)))
    query = (connect.readStream.schema("id bigint").option("maxFilesPerTrigger", 1).json(str(source))
             .writeStream.format("dynacommit").options(**storage_options)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start(s3_uri))
    query.awaitTermination()
    assert query.exception() is None
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 1 and table.snapshot.state.app_version(query.id) == 1

    copy = s3_uri + "-copy"
    follow = (connect.readStream.format("dynacommit").options(**storage_options).load(s3_uri)
              .writeStream.format("dynacommit").options(**storage_options)
              .option("checkpointLocation", str(Path(tmp_path, "cp-copy"))).trigger(availableNow=True).start(copy))
    follow.awaitTermination()
    assert follow.exception() is None
    assert sorted(Table(copy, storage_options=storage_options).to_pyarrow_table().column("id").to_pylist()) == \
        list(range(20))
    for uri in (s3_uri, copy):
        assert open_object_store(uri, storage_options=storage_options).list_uploads(TableUri.parse(uri).key("")) == []


def test_row_level_changes_from_a_spark_connect_client(connect, s3_uri, storage_options):
    """DynacommitTable on a Connect session: the merge's target-only conjunct prunes by the source alias
    the client's plan holds (below a filter of the aliased source), and the result is DuckDB's MERGE INTO."""
    ids = list(range(40))
    rows = pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([i % 4 for i in ids], pa.int32()),
                     "v": pa.array([float(i) for i in ids])})
    write_table(s3_uri, rows, partition_by=["p"], storage_options=storage_options)
    source = pa.table({"id": pa.array([1, 5, 100, 101], pa.int64()), "p": pa.array([1, 1, 1, 2], pa.int32()),
                       "v": pa.array([-1.0, -5.0, -100.0, -101.0])})
    table = DynacommitTable.forPath(connect, s3_uri, storage_options).alias("t")
    result = table.merge(connect.createDataFrame(source).alias("s").where("s.v < 0"), "t.id = s.id AND t.p = 1") \
        .whenMatchedUpdate(set={"v": "s.v"}).whenNotMatchedInsertAll().execute()
    assert result.metrics["numFilesBeforeSkipping"] == "4" and result.metrics["numFilesAfterSkipping"] == "1"
    spec = MergeSpec("target.id = source.id AND target.p = 1", (
        ClauseSpec("matched", "update", None, (("v", "source.v"),)), ClauseSpec("not_matched", "insert")))
    expected = duckdb_merge(rows, source, spec)
    assert rows_of(Table(s3_uri, storage_options=storage_options).to_pyarrow_table().select(["id", "p", "v"])) == \
        rows_of(expected)

    table.delete("t.p = 2 AND t.v < 0")
    assert table.history(1).first().operation == "DELETE"
    assert sorted(r.id for r in table.toDF().where("t.v < 0").collect()) == [1, 5, 100]
    assert open_object_store(s3_uri, storage_options=storage_options).list_uploads(TableUri.parse(s3_uri).key("")) == []
