"""A Spark application for the standalone-cluster test: write a DataFrame, read it back, print JSON.

``python tests/spark/spark_standalone_app.py spark://host:port s3://bucket/table``; storage options come from
the environment. Its tasks run in the cluster's executor JVMs, apart from this driver.
"""

from __future__ import annotations

import json
import sys


def main(master: str, uri: str) -> None:
    from spark_integration import read_dataframe, write_dataframe
    from spark_integration.session import standalone_session

    spark = standalone_session(master, app_name="dynacommit-standalone-test")
    try:
        df = spark.range(0, 2000, 1, numPartitions=4).selectExpr(
            "id", "cast(id % 4 as int) as p", "concat('row-', cast(id as string)) as s")
        result = write_dataframe(df, uri, partition_by=["p"])
        back = read_dataframe(spark, uri)
        rows = sorted((r.id, r.p, r.s) for r in back.collect())
        executors = spark.sparkContext._jsc.sc().getExecutorIds().size()
        print(json.dumps({
            "version": result.version, "tasks": int(result.metrics["numTasks"]), "rows": len(rows),
            "distinct": len(set(rows)), "id_sum": sum(r[0] for r in rows),
            "rows_match": rows == sorted((i, i % 4, f"row-{i}") for i in range(2000)),
            "executors": executors, "master": spark.sparkContext.master,
        }), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
