"""A Spark Connect server for the tests: pip's pyspark ships it (``sbin/start-connect-server.sh``,
``jars/spark-connect_*.jar``). Started in the foreground (``--wait``) on a free port on 127.0.0.1, in a
session of its own, stopped by process id; its Python workers run this interpreter, so they import
dynacommit as the client does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from infra.processes import LOCAL_IP, free_port, stop_process
from spark_integration.session import QUICK_JVM_OPTIONS, spark_home

__all__ = ["ConnectServer"]


@dataclass
class ConnectServer:
    """``start()`` returns once the gRPC port accepts connections; ``url`` is what
    ``SparkSession.builder.remote(...)`` takes. ``env`` is added to the server's environment (its
    driver and Python workers: storage settings, like a real server's instance role)."""

    master: str = "local[2]"
    work_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"sc://{LOCAL_IP}:{self.port}"

    def start(self, *, timeout: float = 180.0) -> ConnectServer:
        if self.process is not None:
            return self
        self.work_dir = Path(self.work_dir or tempfile.mkdtemp(prefix="dynacommit-connect-"))
        self.port = self.port or free_port()
        python = os.environ.get("PYSPARK_PYTHON", sys.executable)
        env = dict(os.environ, **self.env)
        env.update(SPARK_HOME=str(spark_home()), SPARK_NO_DAEMONIZE="1", SPARK_LOCAL_IP=LOCAL_IP,
                   SPARK_LOG_DIR=str(self.work_dir / "logs"), SPARK_PID_DIR=str(self.work_dir / "pids"),
                   PYSPARK_PYTHON=python)
        settings = {
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.grpc.binding.address": LOCAL_IP,
            "spark.driver.host": LOCAL_IP, "spark.driver.bindAddress": LOCAL_IP,
            "spark.ui.enabled": "false", "spark.pyspark.python": python, "spark.pyspark.driver.python": python,
            "spark.driver.extraJavaOptions": QUICK_JVM_OPTIONS, "spark.driver.memory": "1g",
            "spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC",
        }
        command = [str(spark_home() / "sbin" / "start-connect-server.sh"), "--wait", "--master", self.master]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        log = open(self.work_dir / "server.log", "wb")
        try:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        finally:
            log.close()
        try:
            self._wait(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with code {self.process.returncode}; see "
                                   f"{self.work_dir / 'server.log'}")
            try:
                socket.create_connection((LOCAL_IP, self.port), timeout=1).close()
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark Connect server did not listen on {self.url} within {timeout:.0f}s; see "
                                   f"{self.work_dir / 'server.log'}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Terminate the server (its process group: the JVM and its Python workers) by process id."""
        process, self.process = self.process, None
        stop_process(process, timeout=30, group=True)

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
