"""A Spark standalone cluster for the tests: a master and one worker (or ``workers``) started with
``spark-class`` from the pyspark package on 127.0.0.1, each binding a port the system gives it, stopped by
process id. It runs tasks in executor JVMs apart from the driver, as a real cluster does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from infra.processes import LOCAL_IP, stop_process
from spark_integration.session import QUICK_JVM_OPTIONS, spark_home

__all__ = ["StandaloneCluster"]

_MASTER_STARTED = re.compile(r"Starting Spark master at spark://[^:\s]+:(\d+)")
_WORKER_REGISTERED = re.compile(r"Successfully registered with master")


class _StartFailed(Exception):
    """One attempt to start the cluster did not finish; the cluster is stopped and started again."""


@dataclass
class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1, logs
    under ``work_dir``; ``port`` is the master's, read from its log once it has started.

    ``start()`` returns once every worker has registered with the master; ``stop()`` terminates both by
    process id (each runs in its own session, so the worker's executors go with it). Use as a context
    manager.
    """

    cores: int = 2
    memory: str = "2g"
    work_dir: Path | None = None
    workers: int = 1
    port: int = field(default=0, init=False)
    processes: list[subprocess.Popen] = field(default_factory=list, repr=False)

    @property
    def master_url(self) -> str:
        return f"spark://{LOCAL_IP}:{self.port}"

    def start(self, *, timeout: float = 90.0, attempts: int = 2) -> StandaloneCluster:
        """Start the master, then the workers, and wait until every worker says it registered.

        Every process binds port 0 and the master's log says which port it got, so no port is chosen
        here and lost to another process before Spark binds it. A start that does not finish within
        ``timeout`` is stopped and tried again (``attempts`` in all); the last failure carries the
        tail of each process's log."""
        if self.processes:
            return self
        self.work_dir = Path(self.work_dir or tempfile.mkdtemp(prefix="dynacommit-spark-"))
        for attempt in range(1, attempts + 1):
            run_dir = self.work_dir if attempt == 1 else self.work_dir / f"attempt-{attempt}"
            run_dir.mkdir(parents=True, exist_ok=True)
            try:
                self._start_once(run_dir, timeout)
                return self
            except _StartFailed as failure:
                self.stop()
                if attempt == attempts:
                    raise RuntimeError(f"{failure}\n{self._log_tails(run_dir)}") from None
            except BaseException:
                self.stop()
                raise
        return self

    def _start_once(self, run_dir: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._launch(run_dir, "master", "org.apache.spark.deploy.master.Master",
                     "--host", LOCAL_IP, "--port", "0", "--webui-port", "0")
        found = self._wait_for_log(run_dir / "master.log", _MASTER_STARTED, deadline, "the master to start")
        self.port = int(found.group(1))
        names = ["worker" if n == 0 else f"worker-{n + 1}" for n in range(self.workers)]
        for name in names:
            self._launch(run_dir, name, "org.apache.spark.deploy.worker.Worker", self.master_url,
                         "--host", LOCAL_IP, "--cores", str(self.cores), "--memory", self.memory,
                         "--webui-port", "0", "--work-dir", str(run_dir / name))
        for name in names:
            self._wait_for_log(run_dir / f"{name}.log", _WORKER_REGISTERED, deadline,
                               f"{name} to register with {self.master_url}")

    def _launch(self, run_dir: Path, name: str, main_class: str, *args: str) -> None:
        env = dict(os.environ, SPARK_LOCAL_IP=LOCAL_IP, SPARK_HOME=str(spark_home()),
                   SPARK_WORKER_DIR=str(run_dir / "worker"), SPARK_DAEMON_MEMORY="512m",
                   SPARK_DAEMON_JAVA_OPTS=QUICK_JVM_OPTIONS,
                   PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable))
        log = open(run_dir / f"{name}.log", "wb")
        try:
            self.processes.append(subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main_class, *args],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            ))
        finally:
            log.close()

    def _wait_for_log(self, log: Path, pattern: re.Pattern, deadline: float, what: str) -> re.Match:
        while True:
            for proc in self.processes:
                if proc.poll() is not None:
                    raise _StartFailed(f"a Spark standalone process exited with code {proc.returncode} "
                                       f"while waiting for {what}")
            found = pattern.search(log.read_text(errors="replace")) if log.exists() else None
            if found:
                return found
            if time.monotonic() > deadline:
                raise _StartFailed(f"timed out waiting for {what}")
            time.sleep(0.25)

    @staticmethod
    def _log_tails(run_dir: Path, lines: int = 25) -> str:
        parts = []
        for log in sorted(run_dir.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- last {len(tail)} lines of {log} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        """Terminate the worker, then the master, by process id (their process groups)."""
        processes, self.processes = self.processes, []
        for proc in reversed(processes):
            stop_process(proc, timeout=20, group=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
