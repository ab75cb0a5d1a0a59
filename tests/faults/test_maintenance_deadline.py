"""Maintenance that outlives the operation deadline: OPTIMIZE's rewrite is bounded by the data, not by the
commit's deadline, and what a failed job staged is aborted even after the deadline has passed.

The slow reads come from the fault proxy (every GetObject of a data file answered after longer than the
whole deadline), so the rewrite outlasts the deadline whatever the reads' parallelism."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from logstore import TableUri, deadline, open_object_store
from logstore.errors import DeadlineExceededError
from table import Table, write_table
from table.data.pendingset import PendingSet, StagedFile, StagedPart
from table.data.uploads import abort_pending
from tests.support.fault_proxy import FaultProxy, FaultRule

pytestmark = pytest.mark.slow


def test_aborts_of_a_failed_job_run_even_after_its_deadline_passed(s3_uri, storage_options):
    objects = open_object_store(s3_uri, storage_options=storage_options)
    uri = TableUri.parse(s3_uri)
    key = uri.key("part-00000-job-c000.snappy.parquet")
    upload = objects.create_upload(key)
    etag = objects.upload_part(key, upload.upload_id, 1, b"x" * 1024)
    staged = StagedFile(path="part-00000-job-c000.snappy.parquet", key=key, upload_id=upload.upload_id,
                        parts=[StagedPart(number=1, etag=etag)], size=1024, num_records=1,
                        stats='{"numRecords":1}', partition_values={})
    pending = PendingSet(table_path=uri.table_path, job_id="job", task_id=0, attempt_id=0, files=[staged])
    with deadline.deadline(0.05, "an operation that ran out of time"):
        time.sleep(0.1)
        with pytest.raises(DeadlineExceededError):
            deadline.check()
        assert abort_pending(objects, [pending]) == 1
    assert objects.list_uploads(uri.key("")) == []


def test_an_in_process_optimize_is_not_cut_short_by_the_commit_deadline(local_stack, s3_uri, storage_options):
    """Every read of a data file takes 5 s, longer than the 4 s deadline; the deadline stays long enough for
    loading the snapshot and committing on a loaded machine (a 1 s one once expired while loading)."""
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    for i in range(4):
        write_table(s3_uri, pa.table({"id": [i * 10 + j for j in range(10)], "s": [f"r{i}"] * 10}, schema=schema),
                    storage_options=storage_options)
    expected = Table(s3_uri, storage_options=storage_options).to_pyarrow_table().sort_by("id")
    with FaultProxy(local_stack.endpoint, seed=1, slow_seconds=5.0) as proxy:
        proxy.set_faults([FaultRule("slow", 1.0, service="s3", operation="GetObject", path_contains="/part-")])
        options = {**proxy.storage_options(storage_options), "DYNACOMMIT_TIMEOUT_SECONDS": "4"}
        report = Table(s3_uri, storage_options=options).optimize()
        assert proxy.stats().faults.get("slow", 0) >= 1, "the data files were read slowly"
    assert (report.files_removed, report.files_added) == (4, 1)
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 4 and table.to_pyarrow_table().sort_by("id").equals(expected)
    assert open_object_store(s3_uri, storage_options=storage_options).list_uploads(TableUri.parse(s3_uri).key("")) == []
