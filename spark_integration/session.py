"""SparkSessions for dynacommit jobs: ``local[N]`` in one process, or a Spark standalone cluster.

pyspark ships no hadoop-aws, and dynacommit needs none: every S3 byte goes through boto3/pyarrow in the
Python workers. What a session needs is that executors start the same Python interpreter as the driver
(``spark.pyspark.python``, so ``spark_integration`` and ``table`` import there too), small memory, no UI
and a quiet log.

:class:`StandaloneCluster` starts a master and one worker with ``spark-class`` from the pyspark package,
each on free ports on 127.0.0.1, and stops them by process id. It is what the tests use to run tasks in
executor JVMs apart from the driver; on a real cluster, pass its master URL to :func:`standalone_session`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

__all__ = ["StandaloneCluster", "base_conf", "local_session", "spark_home", "standalone_session"]

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


def spark_home() -> Path:
    """The pyspark package directory, which is a Spark distribution (``bin/spark-class``, ``jars/``)."""
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCAL_IP, 0))
        return s.getsockname()[1]


@dataclass
class StandaloneCluster:
    """A Spark standalone master and one worker on 127.0.0.1, free ports, logs under ``work_dir``.

    ``start()`` returns once the worker has registered with the master; ``stop()`` terminates both by
    process id (each runs in its own session, so the worker's executors go with it). Use as a context
    manager.
    """

    cores: int = 2
    memory: str = "2g"
    work_dir: Path | None = None
    port: int = 0
    webui_port: int = 0
    worker_webui_port: int = 0
    processes: list[subprocess.Popen] = field(default_factory=list, repr=False)

    @property
    def master_url(self) -> str:
        return f"spark://{LOCAL_IP}:{self.port}"

    def start(self, *, timeout: float = 90.0) -> StandaloneCluster:
        if self.processes:
            return self
        self.work_dir = Path(self.work_dir or tempfile.mkdtemp(prefix="dynacommit-spark-"))
        self.port = self.port or _free_port()
        self.webui_port = self.webui_port or _free_port()
        self.worker_webui_port = self.worker_webui_port or _free_port()
        try:
            self._launch("master", "org.apache.spark.deploy.master.Master",
                         "--host", LOCAL_IP, "--port", str(self.port), "--webui-port", str(self.webui_port))
            self._launch("worker", "org.apache.spark.deploy.worker.Worker", self.master_url,
                         "--host", LOCAL_IP, "--cores", str(self.cores), "--memory", self.memory,
                         "--webui-port", str(self.worker_webui_port),
                         "--work-dir", str(self.work_dir / "worker"))
            self._wait_for_worker(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, name: str, main_class: str, *args: str) -> None:
        env = dict(os.environ, SPARK_LOCAL_IP=LOCAL_IP, SPARK_HOME=str(spark_home()),
                   SPARK_WORKER_DIR=str(self.work_dir / "worker"), SPARK_DAEMON_MEMORY="512m",
                   SPARK_DAEMON_JAVA_OPTS=QUICK_JVM_OPTIONS,
                   PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable))
        log = open(self.work_dir / f"{name}.log", "wb")
        try:
            self.processes.append(subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main_class, *args],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            ))
        finally:
            log.close()

    def _wait_for_worker(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://{LOCAL_IP}:{self.webui_port}/json/"
        while True:
            for proc in self.processes:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark standalone process exited with code {proc.returncode}; "
                                       f"see the logs in {self.work_dir}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    state = json.load(response)
                if state.get("aliveworkers", 0) >= 1:
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark standalone worker did not register with {self.master_url} within "
                                   f"{timeout:.0f}s; see the logs in {self.work_dir}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Terminate the worker, then the master, by process id (their process groups)."""
        processes, self.processes = self.processes, []
        for proc in reversed(processes):
            if proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
