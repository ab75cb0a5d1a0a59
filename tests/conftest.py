"""Fixtures shared by every suite: the embedded local stack (moto S3 + DynamoDB) and fresh table URIs."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

import tests.support.memory  # noqa: F401 - registers the memory:// scheme (the in-process stack) for every test

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Never let a test reach real AWS through ambient credentials.
for _key in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
             "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "DELTA_DYNAMO_TABLE_NAME"):
    os.environ.pop(_key, None)


@pytest.fixture(scope="session")
def local_stack():
    """One moto server (S3 + DynamoDB) for the session, on a free port, stopped by PID at the end."""
    from infra.local_stack import LocalStack

    stack = LocalStack(bucket="dynacommit-test").start()
    yield stack
    stack.stop()


@pytest.fixture
def storage_options(local_stack) -> dict[str, str]:
    return local_stack.storage_options()


@pytest.fixture
def s3_uri(local_stack) -> str:
    """A fresh table URI in the test bucket (tables never share a path between tests)."""
    return f"s3://{local_stack.bucket}/tables/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def memory_uri() -> str:
    """A fresh in-process table URI (real algorithm, dict-backed storage)."""
    return f"memory://mem-{uuid.uuid4().hex[:8]}/table"


@pytest.fixture(autouse=True)
def _fresh_process_view():
    """Each test sees tables as a new process would: no snapshot remembered from an earlier test, and no
    UpdateItem of an earlier test's commit (sent after its write returned) landing during this one."""
    from logstore.external import PUBLISHED
    from table.table import forget_snapshots

    PUBLISHED.wait_all()
    forget_snapshots()
    yield


def pytest_collection_modifyitems(config, items):
    """Under ``make test``'s two workers (pytest-xdist, ``--dist loadgroup``), the Spark tests that use the
    shared SparkSession (the ``spark`` fixture) run on one worker, so that one process holds it. The other
    Spark tests (applications run by ``spark-submit``, the standalone cluster, Spark Connect, the units
    that need no session) are a second group, which the other worker takes beside the rest of the suite:
    the suite waits on JVMs and servers more than it computes (about one core busy of two), and the one
    Spark group had grown longer than half the suite."""
    for item in items:
        if item.get_closest_marker("spark") is not None:
            group = "spark" if "spark" in item.fixturenames else "spark-apps"
            item.add_marker(pytest.mark.xdist_group(group))
