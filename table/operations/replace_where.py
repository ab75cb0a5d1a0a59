"""replaceWhere: an overwrite of only the rows a predicate selects (deltalake's ``write_deltalake(...,
mode="overwrite", predicate=...)``, Spark's ``replaceWhere`` option), as Delta's WriteIntoDelta does it.

One commit holds what a DELETE of the predicate and an append of the data would hold together: the files
whose rows the predicate may select are removed whole (a predicate over partition columns only), or
written again without the selected rows (any other predicate; with ``delta.enableDeletionVectors``, given a
deletion vector instead), exactly as :mod:`table.operations.delete` decides; the data's files are added. The
operation is recorded as ``WRITE`` with ``mode=Overwrite`` and the ``predicate``.

Every row of the data must satisfy the predicate (Delta's replaceWhere constraint check): a row it does not
select would land outside the rows being replaced, so the write is refused naming the first such row and
nothing is committed. The predicate is checked against the table's columns before any data is read, and
every batch of data is checked before it is uploaded.

The commit reads what the DELETE part reads (the files the predicate may select): a concurrent change to
those rows conflicts by Delta's rules. The data may be a stream that cannot be read twice, so a conflict is
not re-planned: it is raised (``CommitConflictError``) and the staged files are deleted, as Delta does.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.data.compression import Codec
from table.data.jobcommit import abort_job
from table.data.pendingset import PendingSet
from table.data.staging import CHANGE_TYPE, StagingWriter
from table.data.writer_settings import WriterSettings
from table.data.writespec import CommitResult, WritePlan, WriteSpec
from table.log import properties
from table.log.snapshot import Snapshot
from table.operations import delete as delete_op
from table.operations.engine import Engine, quote
from table.operations.predicate import Predicate, bind_predicate
from table.operations.rewrite import Staged, execute

if TYPE_CHECKING:  # the Table class uses these modules; they only take its instances
    from table.table import Table

__all__ = ["check_rows", "replace_where"]

_DATA = "__dynacommit_replace_where_data"
_DATA_TASK = 2
"""The data's task number in the job (the DELETE part's rewriter writes tasks 0 and 1)."""
_INSERTS_TASK = 3
"""The task number of the data's ``insert`` change data."""


def replace_where(table: Table, batches: Iterable[pa.RecordBatch], spec: WriteSpec, plan: WritePlan, *,
                  predicate: str, codec: str | Codec | None) -> CommitResult:
    """Write ``batches`` (conformed to ``plan``) replacing the rows ``predicate`` selects; see the module
    docstring. ``table`` exists and ``plan`` is an overwrite's plan of it (with ``schema_mode="merge"``, its
    new metadata and protocol are committed with the data)."""
    snapshot = table.snapshot
    assert snapshot is not None
    engine = Engine()
    bound = bind(engine, snapshot, predicate)
    job_id = str(uuid.uuid4())
    started = time.monotonic()
    rows = 0
    common = dict(schema=plan.schema, partition_by=plan.partition_by, layout=plan.layout, job_id=job_id,
                  settings=WriterSettings.of(plan.configuration, compression=codec), hold_small_files=True)
    rules = dict(rules=plan.rules)
    feed = properties.change_data_feed(snapshot.configuration)
    writer = StagingWriter(table.objects, table.uri, task_id=_DATA_TASK, **common, **rules)
    # With the change data feed, the data is also written as ``insert`` change data, used when the DELETE
    # part writes change data (a commit with change data files must say every change in them).
    inserts = StagingWriter(table.objects, table.uri, task_id=_INSERTS_TASK, change_data=True, **common) \
        if feed else None
    try:
        for batch in batches:
            check_rows(engine, bound, batch, table=table.uri.table_path)
            writer.write(batch)
            if inserts is not None and batch.num_rows:
                inserts.write(pa.Table.from_batches([batch]).append_column(
                    CHANGE_TYPE, pa.array(["insert"] * batch.num_rows, pa.string())))
            rows += batch.num_rows
        pending = writer.finish()
        inserted = inserts.finish() if inserts is not None else None
    except BaseException:
        writer.abort()
        if inserts is not None:
            inserts.abort()
        raise
    uploaded = time.monotonic() - started
    parameters = {"mode": "Overwrite", "partitionBy": json.dumps(list(plan.partition_by)),
                  "predicate": json.dumps([predicate])}
    data_files = len(pending.files)
    data_bytes = sum(f.size for f in pending.files)
    staged_sets = PendingSets(pending, inserted)

    def stage(current: Snapshot, attempt_job: str) -> Staged:
        deleting = delete_op.stage(table, current, predicate, attempt_job)
        with_changes = any(p.files and p.files[0].change_data for p in deleting.pendingsets)
        extra = (pending,) + ((inserted,) if with_changes and inserted is not None else ())
        if inserted is not None and not with_changes:
            abort_job(table.objects, table.uri, job_id, [inserted], sweep=False)
            staged_sets.inserted = None
        metrics = {**deleting.metrics, "numFiles": str(data_files), "numOutputRows": str(rows),
                   "numOutputBytes": str(data_bytes), "uploadTimeMs": str(int(uploaded * 1000))}
        return dataclasses.replace(deleting, operation="WRITE", parameters=parameters, metrics=metrics,
                                   pendingsets=(*deleting.pendingsets, *extra),
                                   metadata=plan.metadata if plan.metadata is not None else deleting.metadata,
                                   protocol=plan.protocol if plan.protocol is not None else deleting.protocol,
                                   stray_uploads_possible=deleting.stray_uploads_possible
                                   or writer.stray_uploads_possible)

    return execute(table, "WRITE", stage, job_id=job_id, replan=False, discard=staged_sets)


@dataclasses.dataclass
class PendingSets:
    """What a replaceWhere staged before its commit: the data, and its ``insert`` change data (None once it
    is known to be unneeded and its uploads are aborted)."""

    data: PendingSet
    inserted: PendingSet | None

    @property
    def files(self) -> list[PendingSet]:
        return [self.data, *([self.inserted] if self.inserted is not None else [])]


def bind(engine: Engine, snapshot: Snapshot, predicate: object) -> Predicate:
    """The replaceWhere ``predicate`` bound to the table's columns (InvalidArgumentError naming it otherwise)."""
    if not isinstance(predicate, str) or not predicate.strip():
        raise ArgumentTypeError(f"predicate must be a SQL expression over the table's columns, got {predicate!r}")
    return bind_predicate(engine, snapshot, predicate, what="the replaceWhere predicate")


def check_rows(engine: Engine, bound: Predicate, batch: pa.RecordBatch | pa.Table, *, table: str) -> None:
    """Refuse ``batch`` if a row of it is not selected by ``bound`` (where it is false or NULL)."""
    if batch.num_rows == 0:
        return
    data = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    engine.register(_DATA, data)
    sql = bound.where().replace(quote(bound.table_name), quote(_DATA))
    outside = engine.query(f"SELECT * FROM {quote(_DATA)} WHERE NOT ({sql}) LIMIT 1", what="the replaceWhere predicate")
    if outside.num_rows:
        row = {k: v[0] for k, v in outside.to_pydict().items()}
        raise InvalidArgumentError(
            f"the data written to {table} holds a row the replaceWhere predicate {bound.sql.strip()!r} does not select: "
            f"{row}. A replaceWhere overwrite replaces only the rows the predicate selects, so every row written "
            f"must satisfy it; filter the data first, or widen the predicate. Nothing was written")
