"""Time travel by timestamp agrees with deltalake's ``load_as_version(datetime)`` on the same S3 table."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa
import pytest

from table import Table, write_table

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.interop


def _next_second(past: float) -> None:
    """Sleep until ``past`` seconds after the next whole second."""
    now = time.time()
    time.sleep(int(now) + 1 + past - now)


def test_the_version_at_each_moment_is_the_one_deltalake_loads(s3_uri, storage_options):
    moments = []
    for i in range(3):
        write_table(s3_uri, pa.table({"id": [i]}), storage_options=storage_options)
        # S3's file times are whole seconds (cut down): the moment is taken in a later second than the
        # commit, and the next commit goes into a later second again.
        _next_second(0.3)
        moments.append(dt.datetime.now(dt.timezone.utc))
        _next_second(0.1)
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    for moment in moments:
        theirs = deltalake.DeltaTable(s3_uri, storage_options=options)
        theirs.load_as_version(moment)
        ours = Table(s3_uri, timestamp=moment, storage_options=storage_options)
        assert ours.version == theirs.version()
        assert sorted(ours.to_pyarrow_table()["id"].to_pylist()) == list(range(ours.version + 1))
    assert [Table(s3_uri, timestamp=m, storage_options=storage_options).version for m in moments] == [0, 1, 2]
