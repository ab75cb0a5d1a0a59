"""Log store fixtures: every contract test runs against the in-memory store and the DynamoDB store on moto."""

from __future__ import annotations

import uuid

import pytest

from logstore import open_log_store


@pytest.fixture(params=["memory", "dynamodb"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def table_uri(backend, request) -> str:
    if backend == "memory":
        return f"memory://mem-{uuid.uuid4().hex[:8]}/t"
    stack = request.getfixturevalue("local_stack")
    return f"s3://{stack.bucket}/logstore/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def options(backend, request) -> dict[str, str] | None:
    if backend == "memory":
        return None
    return request.getfixturevalue("storage_options")


@pytest.fixture
def store(table_uri, options):
    return open_log_store(table_uri, storage_options=options)


@pytest.fixture
def open_store(table_uri, options):
    """Open another store on the same table (what a second process would do)."""
    return lambda cls=None: open_log_store(table_uri, storage_options=options) if cls is None else cls(table_uri, options)
