"""The log store's interface, its errors and the in-memory store load in a process without boto3/botocore:
the entry store is an interface of the standard library and the project's errors (logstore/entry_store.py,
logstore/errors.py), and only the AWS backend needs the SDK."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

BLOCKED = textwrap.dedent("""
    import importlib.abc
    import sys

    class Blocked(importlib.abc.MetaPathFinder):
        # any import of the AWS SDK fails, as in an environment where it is not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("boto3", "botocore", "s3transfer"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, Blocked())
    for name in list(sys.modules):
        if name.split(".")[0] in ("boto3", "botocore", "s3transfer"):
            del sys.modules[name]
""")


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKED + textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_the_blocking_finder_blocks_the_sdk():
    done = run("""
        try:
            import botocore.exceptions
        except ModuleNotFoundError as exc:
            print("blocked", exc.name)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "blocked botocore"


def test_the_entry_store_interface_errors_and_memory_store_load_and_commit_without_boto3():
    done = run("""
        import sys
        import logstore
        from logstore.entry_store import CommitEntry, EntryStore
        from logstore.errors import ConditionFailed, ObjectNotFound, TransactionCanceled, VersionExistsError
        from logstore.external import ExternalLogStore
        from tests.support.memory import MemoryLogStore

        assert issubclass(MemoryLogStore, EntryStore) and issubclass(MemoryLogStore, ExternalLogStore)
        store = logstore.open_log_store("memory://no-sdk/t")
        store.write(0, b'{"commitInfo":{}}\\n')
        try:
            store.write(0, b'{"commitInfo":{"other":1}}\\n')
        except VersionExistsError:
            pass
        else:
            raise AssertionError("a second write of version 0 succeeded")
        assert store.read(0) == b'{"commitInfo":{}}\\n' and store.latest_version() == 0
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("boto3", "botocore"))
        print("loaded:", loaded)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded: []"


def test_the_dynamodb_store_implements_the_entry_store_interface():
    from logstore.dynamodb import DynamoDBLogStore
    from logstore.entry_store import EntryStore

    assert issubclass(DynamoDBLogStore, EntryStore)
    assert not DynamoDBLogStore.__abstractmethods__
