"""SparkSessions for dynacommit jobs: ``local[N]`` in one process, or a Spark standalone cluster.

pyspark ships no hadoop-aws, and dynacommit needs none: every S3 byte goes through boto3/pyarrow in the
Python workers. What a session needs is that executors start the same Python interpreter as the driver
(``spark.pyspark.python``, so ``spark_integration`` and ``table`` import there too), small memory, no UI
and a quiet log.
On a real cluster, pass its master URL to :func:`standalone_session`.

A session the user built (``SparkSession.builder...getOrCreate()`` in a script run with a virtualenv's
``python``) starts its Python workers with ``PYSPARK_PYTHON``, else ``python3`` from ``PATH``, which
usually lacks dynacommit: the tasks then fail with ``No module named 'spark_integration'``. Every entry
point calls :func:`executor_python` first: with a ``local`` master (workers on this machine), a session
whose user chose no interpreter gets this one; one whose chosen interpreter cannot import dynacommit is
refused with an error that says what to set. Executors of a cluster are out of reach: they need
dynacommit installed, and ``PYSPARK_PYTHON`` (or ``spark.pyspark.python``) naming that interpreter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from logstore.errors import ConfigurationError

__all__ = ["ARROW_BATCH_BYTES", "QUICK_JVM_OPTIONS", "arrow_batches_for_writing", "base_conf", "batch_rows",
           "cli_session", "executor_python", "local_session", "spark_home", "standalone_session"]

log = logging.getLogger(__name__)

LOCAL_IP = "127.0.0.1"


# Short jobs on small machines: the C1 compiler alone and the serial collector halve the JVM's start-up
# CPU; a throughput benchmark passes the JVM's defaults back through ``conf``.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def base_conf(*, app_name: str, driver_memory: str = "1g", shuffle_partitions: int = 2) -> dict[str, str]:
    """Settings every dynacommit session gets: small, quiet, no UI, executors on this interpreter."""
    return {
        "spark.driver.extraJavaOptions": QUICK_JVM_OPTIONS,
        "spark.executor.extraJavaOptions": QUICK_JVM_OPTIONS,
        "spark.app.name": app_name,
        "spark.driver.memory": driver_memory,
        "spark.driver.host": os.environ.get("SPARK_LOCAL_IP", LOCAL_IP),
        "spark.driver.bindAddress": os.environ.get("SPARK_LOCAL_IP", LOCAL_IP),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(shuffle_partitions),
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.pyspark.driver.python": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
        "spark.sql.session.timeZone": "UTC",
        "spark.executorEnv.SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", LOCAL_IP),
    }


def _build(master: str, conf: dict[str, str], log_level: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", LOCAL_IP)
    builder = SparkSession.builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def local_session(*, cores: int = 2, max_failures: int = 1, app_name: str = "dynacommit",
                  driver_memory: str = "1g", shuffle_partitions: int = 2, log_level: str = "WARN",
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A ``local[cores,max_failures]`` session (``max_failures`` > 1 lets a failed task be retried, as on a
    cluster; plain ``local[N]`` never retries)."""
    master = f"local[{cores},{max_failures}]" if max_failures > 1 else f"local[{cores}]"
    settings = base_conf(app_name=app_name, driver_memory=driver_memory, shuffle_partitions=shuffle_partitions)
    settings.update(conf or {})
    return _build(master, settings, log_level)


def standalone_session(master_url: str, *, app_name: str = "dynacommit", executor_memory: str = "1g",
                       executor_cores: int = 2, driver_memory: str = "1g", shuffle_partitions: int = 2,
                       log_level: str = "WARN", conf: dict[str, str] | None = None) -> SparkSession:
    """A session on a standalone cluster (``spark://host:port``); tasks run in the workers' executors."""
    settings = base_conf(app_name=app_name, driver_memory=driver_memory, shuffle_partitions=shuffle_partitions)
    settings.update({
        "spark.executor.memory": executor_memory,
        "spark.executor.cores": str(executor_cores),
        "spark.cores.max": str(executor_cores),
    })
    settings.update(conf or {})
    return _build(master_url, settings, log_level)


_PYSPARK_DEFAULT_PYTHON = "python3"
"""What pyspark's SparkContext runs its workers with when ``PYSPARK_PYTHON`` is not set."""
_CAN_IMPORT = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('spark_integration') else 3)"
_checked: dict[str, bool] = {}


def executor_python(spark) -> None:
    """Make sure the Python workers of ``spark`` can import dynacommit, where that can be known (see the module
    docstring): for a ``local`` master, the driver's interpreter when the user chose none, or an error naming
    ``PYSPARK_PYTHON`` when the one chosen cannot import it. Spark Connect sessions (workers on the server)
    and cluster masters are left as they are."""
    if getattr(spark, "_jsc", None) is None:  # Spark Connect: the server's workers, the server's business
        return
    context = spark.sparkContext
    if not context.master.startswith("local"):
        return
    chosen = context.pythonExec
    if chosen == sys.executable:
        return
    if chosen == _PYSPARK_DEFAULT_PYTHON and not os.environ.get("PYSPARK_PYTHON"):
        context.pythonExec = sys.executable
        log.info("Spark session %s (master %s): its Python workers run %s, this interpreter (PYSPARK_PYTHON was "
                 "not set)", context.applicationId, context.master, sys.executable)
        return
    if chosen not in _checked:
        try:
            _checked[chosen] = subprocess.run([chosen, "-c", _CAN_IMPORT], capture_output=True,
                                              timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            _checked[chosen] = False
    if not _checked[chosen]:
        raise ConfigurationError(
            f"the Python workers of this Spark session (master {context.master}) run {chosen!r} "
            f"(PYSPARK_PYTHON), which cannot import dynacommit: set PYSPARK_PYTHON to an interpreter that has it, "
            f"such as this one ({sys.executable}), before the session is created, or unset it (dynacommit then "
            f"runs the workers of a local session with this interpreter), or install dynacommit for {chosen}")


def spark_home() -> Path:
    """The pyspark package directory, which is a Spark distribution (``bin/spark-class``, ``jars/``)."""
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


@contextlib.contextmanager
def cli_session(master: str | None, *, app_name: str) -> Iterator[SparkSession]:
    """The session of a ``dynacommit ... --spark`` command: the process's active session if it has one (the
    command called from a Spark application: used and kept), else a ``local[*]`` session of this machine's
    cores or one on the cluster at ``master`` (``spark://host:port``), stopped afterwards."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    spark = (local_session(cores=os.cpu_count() or 2, max_failures=3, app_name=app_name)
             if master is None else standalone_session(master, app_name=app_name))
    try:
        yield spark
    finally:
        spark.stop()


ARROW_BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
_SPARK_DEFAULT_BATCH_ROWS = 10_000
ARROW_BATCH_BYTES = 4 * 1024 * 1024
"""The Arrow batches a writing job asks Spark for: about this many bytes each (Spark's default of 10,000
rows is sized for pandas UDFs; a writer that streams into Parquet spends less JVM and Python CPU per row
on bigger batches: BENCHMARKS.md, "Spark writes")."""
_MAX_BATCH_ROWS = 1_000_000


def batch_rows(schema) -> int:
    """Rows of an Arrow batch of about :data:`ARROW_BATCH_BYTES` for rows of ``schema`` (a pyarrow schema;
    strings and binaries counted as 32 bytes, nested values as 64), at least Spark's default."""
    import pyarrow as pa

    def width(t) -> int:
        if pa.types.is_struct(t):
            return sum(width(t.field(i).type) for i in range(t.num_fields)) or 1
        if pa.types.is_nested(t):
            return 64
        try:
            return max(1, t.bit_width // 8)
        except ValueError:  # variable width
            return 32

    row = sum(width(f.type) for f in schema) or 1
    return max(_SPARK_DEFAULT_BATCH_ROWS, min(_MAX_BATCH_ROWS, ARROW_BATCH_BYTES // row))


@contextlib.contextmanager
def arrow_batches_for_writing(spark, rows: int) -> Iterator[None]:
    """Within the block, the Arrow batches Spark hands Python workers hold ``rows`` rows, unless the session
    sets its own ``spark.sql.execution.arrow.maxRecordsPerBatch`` (anything but Spark's default is the
    user's choice and kept). The setting is the session's: a query another thread runs meanwhile gets the
    same batch size (only its batches' size changes)."""
    try:
        before = spark.conf.get(ARROW_BATCH_ROWS)
    except Exception:  # noqa: BLE001 - a session that cannot say keeps its own settings
        yield
        return
    if str(before).strip() != str(_SPARK_DEFAULT_BATCH_ROWS) or rows <= _SPARK_DEFAULT_BATCH_ROWS:
        yield
        return
    spark.conf.set(ARROW_BATCH_ROWS, str(rows))
    try:
        yield
    finally:
        spark.conf.set(ARROW_BATCH_ROWS, before)
