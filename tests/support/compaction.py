"""A compaction-like commit for tests of stream readers: the table's files rewritten into new ones, the
same rows, every action ``dataChange=false``. Built from the real pieces (the staging writer, the job's
upload completion, :func:`table.log.transaction.commit`) as a compaction would commit it."""

from __future__ import annotations

import time
import uuid

from table.data.staging import StagingWriter
from table.data.uploads import complete_pending
from table.log.transaction import ReadScope, commit
from table.table import Table

__all__ = ["rewrite_all_files"]


def rewrite_all_files(uri: str, storage_options: dict[str, str] | None = None) -> int:
    """Rewrite every live file of the table at ``uri`` into one file per partition, in one commit of
    ``remove`` + ``add`` actions with ``dataChange=false``; returns the commit's version."""
    table = Table(uri, storage_options=storage_options)
    snapshot = table.snapshot
    assert snapshot is not None
    rows = table.to_pyarrow_table()
    writer = StagingWriter(table.objects, table.uri, schema=snapshot.schema, partition_by=snapshot.partition_columns,
                           job_id=f"compact-{uuid.uuid4().hex[:12]}", task_id=0)
    with writer:
        writer.write(rows)
        pending = writer.finish()
    adds = [a.model_copy(update={"data_change": False}) for a in complete_pending(table.objects, [pending])]
    now = int(time.time() * 1000)
    removes = [f.remove(deletion_timestamp=now, data_change=False) for f in snapshot.files]
    outcome = commit(table.log_store, snapshot, [*removes, *adds], operation="OPTIMIZE",
                     operation_parameters={"predicate": "[]"}, read_scope=ReadScope.whole_table())
    return outcome.version
