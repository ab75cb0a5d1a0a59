"""A user's script run with the virtualenv's python, outside ``make``: no PYSPARK_PYTHON, and a ``python3`` on
PATH that lacks dynacommit. It builds its own local SparkSession, as scripts do, writes and reads a table
through the format, then points the workers at an interpreter without dynacommit and registers again.

``python tests/spark/outside_make_app.py URI NO_DYNACOMMIT_PYTHON``; prints one JSON line: the rows read
back, and the error the last registration raised. Storage settings come from the environment.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from spark_integration import register


def main() -> None:
    uri, other_python = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    register(spark)
    spark.createDataFrame([(1,), (2,), (3,)], "x long").write.format("dynacommit").mode("append").save(uri)
    rows = sorted(r.x for r in spark.read.format("dynacommit").load(uri).collect())
    spark.sparkContext.pythonExec = other_python  # as if PYSPARK_PYTHON had named it
    try:
        register(spark)
        refused = None
    except Exception as exc:  # noqa: BLE001 - the parent judges it
        refused = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"rows": rows, "refused": refused}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
