"""Fixtures of the integration tier: the log store on SeaweedFS (S3) + dynalite (DynamoDB).

The fixture names are those of tests/unit/logstore/conftest.py (``backend``, ``table_uri``, ``options``,
``store``, ``open_store``), so the unit suites' test functions run here unchanged. One pair of servers
serves the session; every test gets a fresh table path in its bucket.
"""

from __future__ import annotations

import uuid

import pytest

from logstore import open_log_store


@pytest.fixture(scope="session")
def servers():
    """SeaweedFS + dynalite on free ports, data in a temp dir, stopped by PID at the end.

    A missing executable fails here with the make target that installs it (``make servers``).
    """
    from infra.servers import ServerStack

    stack = ServerStack(bucket="dynacommit-it").start()
    yield stack
    stack.stop()


@pytest.fixture(params=["seaweedfs+dynalite"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def options(servers) -> dict[str, str]:
    return servers.storage_options()


@pytest.fixture
def table_uri(servers) -> str:
    return f"s3://{servers.bucket}/logstore/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(backend, table_uri, options):
    return open_log_store(table_uri, storage_options=options)


@pytest.fixture
def open_store(table_uri, options):
    """Open another store on the same table (what a second process would do)."""
    return lambda cls=None: open_log_store(table_uri, storage_options=options) if cls is None else cls(table_uri, options)
