"""pyarrow's reads of data files obey the read's deadline (``DYNACOMMIT_TIMEOUT_SECONDS``) like every request
of the project's own client: a data file whose answers stall past it fails the read with
DeadlineExceededError, instead of the read waiting for as long as pyarrow's S3 client does."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from logstore import deadline
from logstore.errors import DeadlineExceededError
from table import Table, write_table
from table.data import fetching
from table.table import forget_snapshots
from tests.support.fault_proxy import FaultRule


@pytest.fixture
def table_uri(local_stack, storage_options):
    uri = f"s3://{local_stack.bucket}/read-deadline/{uuid.uuid4().hex[:12]}"
    write_table(uri, pa.table({"id": list(range(100))}), storage_options=storage_options)
    return uri


def test_a_data_file_read_by_pyarrow_that_stalls_fails_the_read_at_its_deadline(table_uri, storage_options,
                                                                                make_fault_proxy, monkeypatch):
    monkeypatch.setattr(fetching, "WHOLE_FILE", 0)  # every file through pyarrow's S3 filesystem
    proxy = make_fault_proxy(seed=7, slow_seconds=10.0)
    options = proxy.storage_options(storage_options)
    forget_snapshots()
    table = Table(table_uri, storage_options=options)
    assert table.version == 0  # the log is read before the data stalls
    proxy.set_faults([FaultRule("slow", 1.0, "s3", path_contains=".parquet")])
    # an enclosing deadline shorter than the read's own (DYNACOMMIT_TIMEOUT_SECONDS) is the one obeyed
    with deadline.deadline(4, "read of the stalled table"), pytest.raises(
            DeadlineExceededError, match="read of the stalled table did not finish within its deadline of 4 s"):
        table.to_pyarrow_table()
    proxy.set_faults([])
    assert Table(table_uri, storage_options=options).to_pyarrow_table()["id"].to_pylist() == list(range(100))
