"""The driver's handles on what it runs: the server stacks, the counting proxy and the workers.

Every child process is started here, in a session of its own, and stopped by its PID
(:func:`infra.processes.stop_process`).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from infra.processes import stop_process

REPO_ROOT = Path(__file__).resolve().parents[3]
PEER_DELTALAKE_VERSION = "1.6.0"


class BenchError(RuntimeError):
    """A worker, server or set-up step failed; the message says which and shows its log."""


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every child: the repository importable, no ambient AWS settings (only the
    options each request carries may point anywhere), native libraries quiet."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DELTA_DYNAMO_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env.setdefault("RUST_LOG", "error")
    env.update(extra or {})
    return env


def peer_python() -> str:
    path = os.environ.get("DYNACOMMIT_PEER_PYTHON") or str(REPO_ROOT / ".venv-peer" / "bin" / "python")
    if not os.access(path, os.X_OK):
        raise BenchError(f"no peer interpreter at {path}: run `make peer` (it builds .venv-peer with "
                         f"deltalake=={PEER_DELTALAKE_VERSION}) or set DYNACOMMIT_PEER_PYTHON")
    return path


class Worker:
    """One worker process (``ours`` or ``theirs``) answering JSON-lines requests."""

    MODULES: ClassVar[dict[str, str]] = {"ours": "tests.benchmarks.harness.ours_worker", "theirs": "tests.benchmarks.harness.peer_worker"}

    def __init__(self, side: str, name: str, log_dir: Path):
        self.side = side
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        python = sys.executable if side == "ours" else peer_python()
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen([python, "-m", self.MODULES[side]], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._log, env=child_env(),
                                        cwd=REPO_ROOT, text=True, bufsize=1, start_new_session=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        #: (command, peak resident MB of the worker during it) of every answered request (jsonlines.serve).
        self.peaks_mb: list[tuple[str, float]] = []
        #: (command, CPU seconds of the worker process during it) of every answered request.
        self.cpu_s: list[tuple[str, float]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        ready = self._next(120, "start")
        if not ready.get("ready"):
            raise BenchError(f"worker {name} did not start: {ready}")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _tail(self) -> str:
        self._log.flush()
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return ""

    def _next(self, timeout: float, what: str) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise BenchError(f"worker {self.name}: no answer to {what} within {timeout:.0f}s; log "
                             f"{self.log_path}:\n{self._tail()}") from None
        if line is None:
            raise BenchError(f"worker {self.name} exited (code {self.process.poll()}) during {what}; log "
                             f"{self.log_path}:\n{self._tail()}")
        return json.loads(line)

    def send(self, cmd: str, **kwargs) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"cmd": cmd, **kwargs}) + "\n")
        self.process.stdin.flush()

    def receive(self, cmd: str, *, timeout: float = 900) -> dict:
        reply = self._next(timeout, cmd)
        if reply.get("peak_rss_mb") is not None:
            self.peaks_mb.append((cmd, reply["peak_rss_mb"]))
        if reply.get("cpu_s") is not None:
            self.cpu_s.append((cmd, reply["cpu_s"]))
        if not reply["ok"]:
            raise BenchError(f"worker {self.name}: {cmd} failed: {reply['error']}\n{reply['traceback']}")
        return reply["result"]

    def call(self, cmd: str, *, timeout: float = 900, **kwargs) -> dict:
        self.send(cmd, **kwargs)
        return self.receive(cmd, timeout=timeout)

    def stop(self) -> None:
        """Close its stdin (the worker exits when its requests end), then stop it by PID if it lingers."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        stop_process(self.process)
        self._reader.join(timeout=10)  # it sees end-of-file once the process is gone
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


class Proxy:
    """The counting proxy (:mod:`.proxy`) in front of one or more endpoints."""

    def __init__(self, upstreams: list[str], log_dir: Path):
        self._log = open(log_dir / "proxy.log", "ab")
        self.process = subprocess.Popen([sys.executable, "-m", "tests.benchmarks.harness.proxy", *upstreams],
                                        stdout=subprocess.PIPE, stderr=self._log, env=child_env(), cwd=REPO_ROOT,
                                        text=True, start_new_session=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise BenchError(f"the counting proxy did not start; see {log_dir / 'proxy.log'}")
        self.endpoints: list[str] = json.loads(line)["endpoints"]

    def records(self, *, reset: bool = True) -> list[list]:
        url = self.endpoints[0] + "/__bench__/records" + ("?reset=1" if reset else "")
        with urllib.request.urlopen(url, timeout=30) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        stop_process(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


@dataclass
class Stack:
    """A running server stack: its name, options for both implementations, and how to stop it."""

    name: str
    label: str
    options: dict[str, str]
    bucket: str
    versions: dict[str, str]
    _handle: object = field(repr=False, default=None)

    @property
    def upstreams(self) -> list[str]:
        """The distinct endpoints (moto serves S3 and DynamoDB on one)."""
        s3, ddb = self.options["AWS_ENDPOINT_URL"], self.options["AWS_ENDPOINT_URL_DYNAMODB"]
        return [s3] if s3 == ddb else [s3, ddb]

    def proxied(self, proxy: Proxy) -> dict[str, str]:
        """The options with every endpoint replaced by its proxy listener."""
        route = dict(zip(self.upstreams, proxy.endpoints))
        return {**self.options, "AWS_ENDPOINT_URL": route[self.options["AWS_ENDPOINT_URL"]],
                "AWS_ENDPOINT_URL_DYNAMODB": route[self.options["AWS_ENDPOINT_URL_DYNAMODB"]]}

    def stop(self) -> None:
        self._handle.stop()  # type: ignore[attr-defined]


SERVERS = {"servers": "SeaweedFS + dynalite", "moto": "moto"}


def start_stack(name: str) -> Stack:
    """``moto`` (the embedded moto server) or ``servers`` (SeaweedFS + dynalite), with one bucket and the
    commit table, and options that both implementations accept."""
    bucket = "dynacommit-bench"
    if name == "moto":
        import moto

        from infra.local_stack import LocalStack

        handle = LocalStack(bucket=bucket).start()
        versions = {"moto": moto.__version__}
    elif name == "servers":
        from infra.servers import ServerStack

        handle = ServerStack(bucket=bucket).start()  # data in a temp dir of its own, removed by stop()
        versions = {"seaweedfs": handle.s3.version(), "dynalite": handle.dynamodb.version()}
    else:
        raise BenchError(f"unknown server {name!r}; choose from {', '.join(SERVERS)}")
    options = dict(handle.storage_options())
    options.setdefault("AWS_ENDPOINT_URL_DYNAMODB", options["AWS_ENDPOINT_URL"])
    options["AWS_S3_LOCKING_PROVIDER"] = "dynamodb"
    return Stack(name, SERVERS[name], options, bucket, versions, handle)


def wait_all(workers: list[Worker], cmd: str, *, timeout: float = 900) -> list[dict]:
    """The answers of workers that were each sent ``cmd``, in order."""
    deadline = time.monotonic() + timeout
    return [w.receive(cmd, timeout=max(1.0, deadline - time.monotonic())) for w in workers]
