"""A Spark application that MERGEs into an existing table, for the test that kills its driver.

``python tests/spark/spark_dml_app.py MASTER URI MODE``; storage options come from the environment.
``MASTER`` is ``local[2]`` or a standalone cluster's ``spark://host:port``. The source holds ids 0..99
(``v`` = 1000 + id, ``p`` = id % 4) and the merge is an upsert (``whenMatchedUpdate(v)``,
``whenNotMatchedInsertAll``) on ``t.id = s.id``. ``MODE``:

- ``merge``: run it and print a JSON report (version, metrics, executors, master);
- ``kill-after-staging``: print a JSON line once every file is staged, then die by SIGKILL before anything
  is completed or committed (a driver crash mid-MERGE).
"""

from __future__ import annotations

import json
import os
import signal
import sys


def main(master: str, uri: str, mode: str) -> None:
    from spark_integration import DynacommitTable
    from spark_integration.session import local_session, standalone_session
    from tests.support.spark_hooks import spark_hooks

    if master.startswith("local"):
        spark = local_session(cores=2, app_name="dynacommit-dml-app")
    else:
        spark = standalone_session(master, app_name="dynacommit-dml-app")
    try:
        source = spark.range(0, 100, 1, numPartitions=2).selectExpr(
            "id", "cast(id % 4 as int) as p", "cast(1000 + id as double) as v").alias("s")
        builder = DynacommitTable.forPath(spark, uri).alias("t").merge(source, "t.id = s.id") \
            .whenMatchedUpdate(set={"v": "s.v"}).whenNotMatchedInsertAll()

        def die() -> None:
            print(json.dumps({"event": "staged"}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        with spark_hooks(staged=die if mode == "kill-after-staging" else None):
            result = builder.execute()
        executors = spark.sparkContext._jsc.sc().getExecutorIds().size()
        print(json.dumps({"version": result.version, "metrics": result.metrics, "executors": executors,
                          "master": spark.sparkContext.master}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
