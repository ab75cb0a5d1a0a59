"""CPU of ``write_dataframe`` with Spark's Arrow batches (10,000 rows) against the batches the job asks for
(about 4 MiB, ``spark_integration.session.batch_rows``), interleaved A B A B in one ``local[2]`` application
writing to moto. Prints, per round, the wall seconds and the CPU seconds of the JVM and of the Python
workers (the moto server's are left out: they do not depend on the batches).

    PYTHONPATH=. .venv/bin/python -m tests.benchmarks.spark_batches [--rows 2000000] [--rounds 3]

The rows are the harness's ``spark`` measure's (``tests.benchmarks.harness.spark_job.frame``). Spark's own
batch size is had by setting ``spark.sql.execution.arrow.maxRecordsPerBatch`` to 10,001: any value other
than Spark's default is the user's choice, which the job keeps.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from infra.local_stack import LocalStack
from spark_integration import write_dataframe
from spark_integration.session import ARROW_BATCH_ROWS, local_session
from tests.benchmarks.harness.spark_job import _cpu_since, cpu_seconds, frame


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.spark_batches")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ.setdefault(name, sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with LocalStack(bucket="spark-batches").start() as stack:
        options = stack.storage_options()
        spark = local_session(app_name="spark-batches", driver_memory="2g",
                              conf={"spark.driver.extraJavaOptions": "", "spark.executor.extraJavaOptions": ""})
        try:
            df = frame(spark, args.rows, 4)
            write_dataframe(frame(spark, 200_000, 2), f"s3://{stack.bucket}/warm-up", storage_options=options)
            for r in range(args.rounds):
                for label, setting in (("Spark's 10,000 rows", "10001"), ("the job's ~4 MiB", "10000")):
                    spark.conf.set(ARROW_BATCH_ROWS, setting)
                    before, started = cpu_seconds(), time.perf_counter()
                    write_dataframe(df, f"s3://{stack.bucket}/t-{r}-{setting}", storage_options=options)
                    cpu = _cpu_since(before)
                    print(f"round {r + 1}, {label}: wall {time.perf_counter() - started:.2f} s, CPU JVM "
                          f"{cpu['jvm']:.2f} s, Python workers {cpu['python_workers']:.2f} s", flush=True)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
