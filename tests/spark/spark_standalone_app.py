"""A Spark application for the standalone-cluster test: the batch and streaming paths, then a JSON report.

``python tests/spark/spark_standalone_app.py spark://host:port s3://bucket/table WORK_DIR``; storage
options come from the environment. Its tasks run in the cluster's executor JVMs, apart from this driver:
``write_dataframe``/``read_dataframe``, ``format("dynacommit")`` writes and a filtered read, a streaming
query from JSON files in ``WORK_DIR`` into ``<table>-stream``, a streaming copy of that table read
as a stream into ``<table>-copy``, and a MERGE into ``<table>-merge`` (``DynacommitTable``: its join and
rewrites in the executors): ids 0..198 step 3 (``p`` = id % 4, ``v`` = id), upserted with ids 0..99
(``v`` = 1000 + id).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(master: str, uri: str, work_dir: str) -> None:
    from spark_integration import DynacommitTable, read_dataframe, register, write_dataframe
    from spark_integration.session import standalone_session

    spark = standalone_session(master, app_name="dynacommit-standalone-test")
    try:
        register(spark)
        df = spark.range(0, 2000, 1, numPartitions=4).selectExpr(
            "id", "cast(id % 4 as int) as p", "concat('row-', cast(id as string)) as s")
        result = write_dataframe(df, uri, partition_by=["p"])
        df.where("id < 100").write.format("dynacommit").mode("append").save(uri)
        back = read_dataframe(spark, uri)
        rows = sorted((r.id, r.p, r.s) for r in back.collect())
        filtered = sorted(r.id for r in spark.read.format("dynacommit").load(uri).where("p = 3 and id < 20").collect())

        source = Path(work_dir, "in")
        source.mkdir(parents=True)
        for f in range(2):
            (source / f"part-{f}.json").write_text("".join(json.dumps({"id": f * 50 + i}) + "\n" for i in range(50)))
        sink = (spark.readStream.schema("id bigint").option("maxFilesPerTrigger", 1).json(str(source))
                .writeStream.format("dynacommit").option("checkpointLocation", str(Path(work_dir, "cp")))
                .trigger(availableNow=True).start(uri + "-stream"))
        sink.awaitTermination()
        copy = (spark.readStream.format("dynacommit").load(uri + "-stream")
                .writeStream.format("dynacommit").option("checkpointLocation", str(Path(work_dir, "cp-copy")))
                .trigger(availableNow=True).start(uri + "-copy"))
        copy.awaitTermination()
        copied = sorted(r.id for r in spark.read.format("dynacommit").load(uri + "-copy").collect())

        target = spark.range(0, 200, 3, numPartitions=2).selectExpr("id", "cast(id % 4 as int) as p",
                                                                    "cast(id as double) as v")
        write_dataframe(target, uri + "-merge", partition_by=["p"])
        source = spark.range(0, 100, 1, numPartitions=2).selectExpr(
            "id", "cast(id % 4 as int) as p", "cast(1000 + id as double) as v").alias("s")
        merged = DynacommitTable.forPath(spark, uri + "-merge").alias("t").merge(source, "t.id = s.id") \
            .whenMatchedUpdate(set={"v": "s.v"}).whenNotMatchedInsertAll().execute()

        executors = spark.sparkContext._jsc.sc().getExecutorIds().size()
        expected = sorted([(i, i % 4, f"row-{i}") for i in range(2000)] + [(i, i % 4, f"row-{i}") for i in range(100)])
        print(json.dumps({
            "version": result.version, "tasks": int(result.metrics["numTasks"]), "rows": len(rows),
            "rows_match": rows == expected, "filtered": filtered, "stream_query": str(sink.id),
            "stream_errors": [str(q.exception()) for q in (sink, copy) if q.exception() is not None],
            "copied": copied == list(range(100)), "executors": executors, "master": spark.sparkContext.master,
            "merge": {"version": merged.version, "metrics": merged.metrics},
        }), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
