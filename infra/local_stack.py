"""The embedded local stack: a moto server (S3 + DynamoDB) on 127.0.0.1, on a free port.

Used by ``make demo`` and by the test fixtures. It starts the server as a child process, creates a
bucket and the commit table (through the same code as ``dynacommit create-ddb-table``), and stops the
server by its PID. Run ``python -m infra.local_stack`` to keep one up and print the settings to use.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from infra.processes import free_port, serve_until_signal, stop_process
from logstore.admin import create_ddb_table
from logstore.aws import call, s3_client
from logstore.options import StorageOptions

FAKE_KEY_ID = "testing"
FAKE_SECRET = "testing"


@dataclass
class LocalStack:
    """A moto server with one bucket and one commit table. Use as a context manager."""

    bucket: str = "dynacommit-local"
    ddb_table: str = "delta_log"
    port: int = 0
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self) -> dict[str, str]:
        """delta-rs style options pointing at this stack (fake credentials)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": FAKE_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
            "AWS_ALLOW_HTTP": "true",
            "DELTA_DYNAMO_TABLE_NAME": self.ddb_table,
        }

    def options(self) -> StorageOptions:
        return StorageOptions.resolve(self.storage_options())

    def start(self, *, timeout: float = 30.0) -> LocalStack:
        if self.process is not None:
            return self
        self.port = self.port or free_port()
        env = dict(os.environ, MOTO_ALLOW_NONEXISTENT_REGION="true")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "infra.moto_server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited with code {self.process.returncode} on port {self.port}; "
                                   f"is moto[server] installed? run `make venv`")
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                    break
            except (urllib.error.URLError, OSError) as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not answer on {self.endpoint} within {timeout:.0f}s") from exc
                time.sleep(0.1)
        self.create_bucket(self.bucket)
        create_ddb_table(self.options())
        return self

    def create_bucket(self, name: str) -> None:
        client = s3_client(self.options())
        call("s3:CreateBucket", client.create_bucket, where=name, Bucket=name)

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_process(process)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    serve_until_signal(
        lambda: LocalStack().start(),
        lambda stack: f"moto S3 + DynamoDB on {stack.endpoint} (pid {stack.process.pid}), bucket {stack.bucket}; "
                      f"export these and use s3://{stack.bucket}/<table>:",
    )


if __name__ == "__main__":
    main()
