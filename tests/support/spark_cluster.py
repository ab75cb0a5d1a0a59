"""A Spark standalone cluster for the tests: a master and one worker (or ``workers``) started with
``spark-class`` from the pyspark package, each on free ports on 127.0.0.1, stopped by process id. It runs
tasks in executor JVMs apart from the driver, as a real cluster does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from infra.processes import LOCAL_IP, free_ports, stop_process
from spark_integration.session import QUICK_JVM_OPTIONS, spark_home

__all__ = ["StandaloneCluster"]


@dataclass
class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1, free
    ports, logs under ``work_dir``.

    ``start()`` returns once every worker has registered with the master; ``stop()`` terminates both by
    process id (each runs in its own session, so the worker's executors go with it). Use as a context
    manager.
    """

    cores: int = 2
    memory: str = "2g"
    work_dir: Path | None = None
    port: int = 0
    webui_port: int = 0
    worker_webui_port: int = 0
    workers: int = 1
    processes: list[subprocess.Popen] = field(default_factory=list, repr=False)

    @property
    def master_url(self) -> str:
        return f"spark://{LOCAL_IP}:{self.port}"

    def start(self, *, timeout: float = 90.0) -> StandaloneCluster:
        if self.processes:
            return self
        self.work_dir = Path(self.work_dir or tempfile.mkdtemp(prefix="dynacommit-spark-"))
        ports = free_ports(2 + self.workers)
        self.port = self.port or ports[0]
        self.webui_port = self.webui_port or ports[1]
        self.worker_webui_port = self.worker_webui_port or ports[2]
        try:
            self._launch("master", "org.apache.spark.deploy.master.Master",
                         "--host", LOCAL_IP, "--port", str(self.port), "--webui-port", str(self.webui_port))
            for n in range(self.workers):
                name = "worker" if n == 0 else f"worker-{n + 1}"
                self._launch(name, "org.apache.spark.deploy.worker.Worker", self.master_url,
                             "--host", LOCAL_IP, "--cores", str(self.cores), "--memory", self.memory,
                             "--webui-port", str(self.worker_webui_port if n == 0 else ports[2 + n]),
                             "--work-dir", str(self.work_dir / name))
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
                if state.get("aliveworkers", 0) >= self.workers:
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
            stop_process(proc, timeout=20, group=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
