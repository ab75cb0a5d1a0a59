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
from collections.abc import Callable, Iterable, Sequence

import pyarrow as pa

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.compression import Codec
from table.data.jobcommit import abort_job
from table.data.pendingset import PendingSet
from table.data.staging import CHANGE_TYPE, StagingWriter
from table.data.writer_settings import WriterSettings
from table.data.writespec import CommitResult, WritePlan, WriteSpec
from table.log import collations, properties
from table.log.snapshot import Snapshot, load_snapshot
from table.operations import delete as delete_op
from table.engine import Engine, quote
from table.operations.predicate import Predicate, bind_predicate, bind_schema
from table.operations.rewrite import Staged, execute
from table.transaction import Opens, TableView, Transaction, transaction_of


__all__ = ["PYTHON", "SPARK", "PendingSets", "ReplaceWhere", "Spelling", "at_version", "check_rows", "check_spec",
           "replace_where", "stage_rows"]

_DATA = "__dynacommit_replace_where_data"
_FIRST_TASK = 2
"""The data's task numbers start here (the DELETE part's rewriter writes tasks 0 and 1): task ``2 + 2k`` holds
the data of the ``k``-th writer (the one process of ``write_table``, a Spark task), ``3 + 2k`` its ``insert``
change data."""


@dataclasses.dataclass(frozen=True)
class Spelling:
    """How an API spells what a replaceWhere's errors name (the predicate, the overwrite mode, the dynamic
    partition overwrite and replacing the schema), so each error speaks the caller's API."""

    predicate: str
    overwrite: str
    dynamic: str
    schema: str


PYTHON = Spelling("predicate=", "mode='overwrite'", "partition_overwrite='dynamic'", "schema_mode='overwrite'")
SPARK = Spelling("option replaceWhere", ".mode('overwrite')", "option partitionOverwriteMode=dynamic",
                 "option overwriteSchema")


def check_spec(table: TableView, spec: WriteSpec, spelling: Spelling = PYTHON) -> None:
    """What a replaceWhere overwrite needs before anything is read: an overwrite of an existing table."""
    if spec.mode != "overwrite":
        raise InvalidArgumentError(f"{spelling.predicate} replaces the rows it selects and needs "
                                   f"{spelling.overwrite}, got mode {spec.mode!r}; to delete rows use a DELETE")
    if spec.partition_overwrite == "dynamic" or spec.schema_mode == "overwrite":
        raise InvalidArgumentError(f"{spelling.predicate} cannot be combined with {spelling.dynamic} or "
                                   f"{spelling.schema}: each decides differently what the overwrite replaces")
    if table.snapshot is None:
        raise InvalidArgumentError(f"{spelling.predicate} replaces rows of an existing table and there is no table "
                                   f"at {table.uri.table_path} yet; create it with a plain write first")


def stage_rows(batches: Iterable[pa.RecordBatch], data: StagingWriter, inserts: StagingWriter | None, *,
               each: Callable[[pa.RecordBatch], object] | None = None) -> tuple[list[PendingSet], int]:
    """Write ``batches`` to ``data`` (and, with the change data feed, to ``inserts`` as ``insert`` change data),
    calling ``each`` on every batch first (a check that raises, or a collector). Returns the PendingSets (the
    data's, then the change data's) and the number of rows; on any failure both writers are aborted."""
    rows = 0
    try:
        for batch in batches:
            if each is not None:
                each(batch)
            data.write(batch)
            if inserts is not None and batch.num_rows:
                inserts.write(pa.Table.from_batches([batch]).append_column(
                    CHANGE_TYPE, pa.array(["insert"] * batch.num_rows, pa.string())))
            rows += batch.num_rows
        staged = [data.finish()]
        if inserts is not None:
            staged.append(inserts.finish())
    except BaseException:
        data.abort()
        if inserts is not None:
            inserts.abort()
        raise
    return staged, rows


@dataclasses.dataclass(frozen=True)
class ReplaceWhere:
    """A replaceWhere overwrite as planned before any data is read: plain, picklable data that every
    executor runs the same way (:func:`replace_where` in this process, Spark's tasks and driver).

    Each writer of the data calls :meth:`stage` (its rows checked against the predicate, staged, and with
    the change data feed also staged as ``insert`` change data); the commit (:meth:`commit`) adds the
    DELETE part, planned on ``version``, the version the data was planned on."""

    predicate: str
    version: int
    schema: pa.Schema                 # the table's columns, which the predicate references
    partition_columns: tuple[str, ...]
    change_data: bool                 # the table has the change data feed on

    @classmethod
    def plan(cls, table: TableView, spec: WriteSpec, predicate: object, spelling: Spelling = PYTHON) -> ReplaceWhere:
        """Check ``spec`` and bind ``predicate`` to the table's columns (InvalidArgumentError naming the
        problem otherwise), before any data is read or staged."""
        check_spec(table, spec, spelling)
        snapshot = table.snapshot
        assert snapshot is not None
        collations.check_operation(snapshot.protocol, snapshot.metadata, "replaceWhere", table=snapshot.table_path)
        bind(Engine(), snapshot, predicate)
        assert isinstance(predicate, str)
        return cls(predicate=predicate, version=snapshot.version, schema=snapshot.schema,
                   partition_columns=tuple(snapshot.partition_columns),
                   change_data=properties.change_data_feed(snapshot.configuration))

    @staticmethod
    def data_task(index: int) -> int:
        """The task number of the ``index``-th writer's data (``index + 1`` is that of its change data)."""
        return _FIRST_TASK + 2 * index

    @staticmethod
    def is_change_data(pending: PendingSet) -> bool:
        """Whether ``pending`` (a writer's, see :meth:`data_task`) holds ``insert`` change data."""
        return pending.task_id >= _FIRST_TASK and (pending.task_id - _FIRST_TASK) % 2 == 1

    def stage(self, batches: Iterable[pa.RecordBatch], writer: Callable[[int, bool], StagingWriter], *,
              index: int = 0) -> tuple[list[PendingSet], int]:
        """Check and stage ``batches`` as the ``index``-th writer: ``writer(task_id, change_data)`` opens a
        StagingWriter. Returns the PendingSets (the data's; with the change data feed, then the ``insert``
        change data's) and the number of rows. On any failure, what it staged is aborted."""
        engine = Engine()
        bound = bind_columns(engine, self.schema, self.partition_columns, self.predicate)
        data = writer(self.data_task(index), False)
        # With the change data feed, the data is also written as ``insert`` change data, used when the DELETE
        # part writes change data (a commit with change data files must say every change in them).
        inserts = writer(self.data_task(index) + 1, True) if self.change_data else None
        return stage_rows(batches, data, inserts,
                          each=lambda batch: check_rows(engine, bound, batch, table=data.uri.table_path))

    def commit(self, table: Transaction | Opens, spec: WriteSpec, plan: WritePlan, staged: Sequence[PendingSet], *, job_id: str,
               rows: int | None = None, upload_seconds: float, stray_uploads_possible: bool = False) -> CommitResult:
        """One commit of the DELETE part and the ``staged`` data (every writer's :meth:`stage`), read at
        :attr:`version` (in a transaction at that version, whichever ``table`` holds): commits since are judged by
        Delta's rules, a conflict is raised, not re-planned (the data may have been a stream), and the staged
        files are then deleted. ``rows``: how many rows were staged (counted from ``staged`` if not given)."""
        table = self.at_version(table)
        data = [p for p in staged if not self.is_change_data(p)]
        staged_sets = PendingSets(data, [p for p in staged if self.is_change_data(p)])
        if rows is None:
            rows = sum(f.num_records for p in data for f in p.files)
        parameters = {"mode": "Overwrite", "partitionBy": json.dumps(list(plan.partition_by)),
                      "predicate": json.dumps([self.predicate])}
        data_files = sum(len(p.files) for p in data)
        data_bytes = sum(f.size for p in data for f in p.files)

        def stage(txn: Transaction, attempt_job: str) -> Staged:
            deleting = delete_op.stage(txn, self.predicate, attempt_job)
            with_changes = any(p.files and p.files[0].change_data for p in deleting.pendingsets)
            if staged_sets.inserted and not with_changes:
                abort_job(table.objects, table.uri, job_id, staged_sets.inserted, sweep=False)
                staged_sets.inserted = []
            metrics = {**deleting.metrics, "numFiles": str(data_files), "numOutputRows": str(rows),
                       "numOutputBytes": str(data_bytes), "uploadTimeMs": str(int(upload_seconds * 1000))}
            return dataclasses.replace(deleting, operation="WRITE", parameters=parameters, metrics=metrics,
                                       pendingsets=(*deleting.pendingsets, *staged_sets.files),
                                       metadata=plan.metadata if plan.metadata is not None else deleting.metadata,
                                       protocol=plan.protocol if plan.protocol is not None else deleting.protocol,
                                       stray_uploads_possible=deleting.stray_uploads_possible
                                       or stray_uploads_possible)

        return execute(table, "WRITE", stage, job_id=job_id, replan=False, discard=staged_sets)

    def at_version(self, table: Transaction | Opens) -> Transaction:
        """The transaction to commit in: ``table``'s (or the one it opens) if it reads :attr:`version`, else one
        reading that version, followed as ``table``'s would be (the commit of a job whose driver loaded the
        table again after planning it)."""
        return at_version(table, self.version)


def at_version(table: Transaction | Opens, version: int) -> Transaction:
    """:meth:`ReplaceWhere.at_version` of any overwrite planned on ``version`` (a replaceOn's too)."""
    txn = transaction_of(table)
    snapshot = txn.snapshot
    if snapshot is not None and snapshot.version == version and not snapshot.time_travel:
        return txn
    planned = dataclasses.replace(load_snapshot(txn.log_store, version), time_travel=False)
    return txn.at(planned)


def replace_where(table: Transaction, batches: Iterable[pa.RecordBatch], spec: WriteSpec, plan: WritePlan, *,
                  predicate: str, codec: str | Codec | None) -> CommitResult:
    """Write ``batches`` (conformed to ``plan``) replacing the rows ``predicate`` selects, in this process;
    see the module docstring. ``table`` exists and ``plan`` is an overwrite's plan of it (with
    ``schema_mode="merge"``, its new metadata and protocol are committed with the data)."""
    planned = ReplaceWhere.plan(table, spec, predicate)
    job_id = str(uuid.uuid4())
    settings = WriterSettings.of(plan.configuration, compression=codec)
    writers: list[StagingWriter] = []

    def writer(task_id: int, change_data: bool) -> StagingWriter:
        writers.append(StagingWriter(table.objects, table.uri, schema=plan.schema, partition_by=plan.partition_by,
                                     layout=plan.layout, job_id=job_id, settings=settings, hold_small_files=True,
                                     task_id=task_id, change_data=change_data, rules=plan.rules))
        return writers[-1]

    started = time.monotonic()
    staged, rows = planned.stage(batches, writer)
    return planned.commit(table, spec, plan, staged, job_id=job_id, rows=rows,
                          upload_seconds=time.monotonic() - started,
                          stray_uploads_possible=any(w.stray_uploads_possible for w in writers))


@dataclasses.dataclass
class PendingSets:
    """What a replaceWhere staged before its commit: the data, and its ``insert`` change data (emptied once
    it is known to be unneeded and its uploads are aborted)."""

    data: list[PendingSet]
    inserted: list[PendingSet]

    @property
    def files(self) -> list[PendingSet]:
        return [*self.data, *self.inserted]


def bind(engine: Engine, snapshot: Snapshot, predicate: object) -> Predicate:
    """The replaceWhere ``predicate`` bound to the table's columns (InvalidArgumentError naming it otherwise)."""
    if not isinstance(predicate, str) or not predicate.strip():
        raise ArgumentTypeError(f"predicate must be a SQL expression over the table's columns, got {predicate!r}")
    return bind_predicate(engine, snapshot, predicate, what="the replaceWhere predicate")


def bind_columns(engine: Engine, schema: pa.Schema, partition_columns: Sequence[str], predicate: str) -> Predicate:
    """:func:`bind` from the table's columns alone (where a task checks its rows, without the snapshot)."""
    return bind_schema(engine, schema, partition_columns, predicate, what="the replaceWhere predicate")


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
