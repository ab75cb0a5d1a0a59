"""replaceOn / replaceUsing: an overwrite of the table's rows that match a row of the data (Delta 4.3's
dynamic data overwrite, ``INSERT INTO t REPLACE ON (cond)`` / ``REPLACE USING (cols)``), as Delta's
WriteIntoDelta does it.

``replace_on``: a condition over a target row and a source (data) row; ``replace_using``: columns whose
values must be equal (SQL equality: a NULL matches nothing, as in ``JOIN USING``; ``<=>`` in a
``replace_on`` matches NULLs). One commit deletes every target row the condition matches against any row of
the data, and adds the data: the DELETE part is a MERGE with one unconditional ``WHEN MATCHED DELETE``
(:mod:`table.operations.merge`: the same pruning by the data's key values, copy-on-write or deletion vectors as
the table asks, ``delete`` change data), planned at the version the data was planned on. Empty data deletes
nothing. The operation is recorded as Delta records it: ``WRITE``, ``mode=Overwrite``, ``replaceOnCond`` or
``replaceUsingCols``, the replaceWhere metrics (``numDeletedRows``, ``numCopiedRows``, ...).

The data is read once (it may be a stream): each writer stages its rows and keeps the distinct values of the
data's columns the condition reads (:attr:`ReplaceOn.source_columns`); those are the MERGE's source. A
conflict at the commit is raised, not re-planned, and the staged files are deleted, as for replaceWhere.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

import pyarrow as pa

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.compression import Codec
from table.data.jobcommit import abort_job
from table.data.pendingset import PendingSet
from table.data.staging import StagingWriter
from table.data.writer_settings import WriterSettings
from table.data.writespec import CommitResult, WritePlan, WriteSpec
from table.engine import Engine, check_user_columns, facts_of, quote
from table.log import collations, properties
from table.operations import merge
from table.operations.replace_where import PendingSets, ReplaceWhere, at_version, stage_rows
from table.operations.rewrite import Staged, execute
from table.transaction import Opens, TableView, Transaction

__all__ = ["PYTHON", "SPARK", "ReplaceOn", "Spelling", "check_spec", "decode_keys", "encode_keys", "replace_on",
           "using_columns"]

_DEDUPLICATE_ROWS = 1 << 16
"""A writer's kept key rows are made distinct whenever this many more have come in."""


@dataclasses.dataclass(frozen=True)
class Spelling:
    """How an API spells what the errors name."""

    on: str
    using: str
    overwrite: str
    aliases: str
    others: str


PYTHON = Spelling("replace_on=", "replace_using=", "mode='overwrite'", "source_alias= / target_alias=",
                  "predicate=, partition_overwrite='dynamic' or schema_mode='overwrite'")
SPARK = Spelling("option replaceOn", "option replaceUsing", ".mode('overwrite')", "options sourceAlias / targetAlias",
                 "option replaceWhere, partitionOverwriteMode=dynamic or overwriteSchema")


def check_spec(table: TableView, spec: WriteSpec, *, on: object, using: object, spelling: Spelling = PYTHON,
               replace_where: object = None) -> None:
    """What a replaceOn / replaceUsing overwrite needs before anything is read (Delta's option rules)."""
    if on is not None and using is not None:
        raise InvalidArgumentError(f"{spelling.on} and {spelling.using} cannot be given together; give one")
    given = spelling.on if on is not None else spelling.using
    if spec.mode != "overwrite":
        raise InvalidArgumentError(f"{given} replaces the table's rows that match the data and needs "
                                   f"{spelling.overwrite}, got mode {spec.mode!r}")
    if replace_where is not None or spec.partition_overwrite == "dynamic" or spec.schema_mode == "overwrite":
        raise InvalidArgumentError(f"{given} cannot be combined with {spelling.others}: each decides differently "
                                   f"what the overwrite replaces (Delta refuses them together too)")
    if table.snapshot is None:
        raise InvalidArgumentError(f"{given} replaces rows of an existing table and there is no table at "
                                   f"{table.uri.table_path} yet; create it with a plain write first")


def using_columns(using: object, spelling: Spelling = PYTHON) -> tuple[str, ...]:
    """``replace_using`` as column names: a list of names, or Delta's comma-separated text."""
    if isinstance(using, str):
        names = [n.strip() for n in using.split(",")]
    elif isinstance(using, (list, tuple)) and all(isinstance(n, str) for n in using):
        names = [n.strip() for n in using]
    else:
        raise ArgumentTypeError(f"{spelling.using} takes column names (a list, or text such as \"id, day\"), "
                                f"got {using!r}")
    if not names or any(not n for n in names):
        raise InvalidArgumentError(f"{spelling.using} names an empty column in {using!r}; give column names "
                                   f"separated by commas, such as \"id, day\"")
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"{spelling.using} names a column twice: {using!r}")
    return tuple(names)


@dataclasses.dataclass(frozen=True)
class ReplaceOn:
    """A replaceOn / replaceUsing overwrite as planned before any data is read: plain, picklable data that every
    executor runs the same way (:func:`replace_on` in this process, Spark's tasks and driver). Each writer of
    the data calls :meth:`stage`; the commit (:meth:`commit`) adds the DELETE part, planned on ``version``."""

    condition: str                    # SQL over target_alias (the table) and source_alias (the data)
    source_alias: str
    target_alias: str
    source_columns: tuple[str, ...]   # the data's columns the condition reads (kept by each writer)
    key_schema: pa.Schema             # their types as the writers see them (the table's, for its columns)
    parameters: tuple[tuple[str, str], ...]  # replaceOnCond / replaceUsingCols, as Delta records them
    version: int
    change_data: bool

    @classmethod
    def plan(cls, table: TableView, spec: WriteSpec, data_schema: pa.Schema, *, on: str | None = None,
             using: str | Sequence[str] | None = None, source_alias: str | None = None,
             target_alias: str | None = None, spelling: Spelling = PYTHON,
             write_schema: pa.Schema | None = None) -> ReplaceOn:
        """Check ``spec`` and bind the condition to the table's and the data's columns (InvalidArgumentError
        naming the problem otherwise), before any data is read or staged. ``write_schema``: the schema the rows
        are staged in (the write plan's; default the table's), which gives the kept values their types."""
        check_spec(table, spec, on=on, using=using, spelling=spelling)
        snapshot = table.snapshot
        assert snapshot is not None
        collations.check_operation(snapshot.protocol, snapshot.metadata, "replaceOn / replaceUsing",
                                   table=snapshot.table_path)
        if using is not None and (source_alias is not None or target_alias is not None):
            raise InvalidArgumentError(f"{spelling.aliases} name the two sides of {spelling.on}; {spelling.using} "
                                       f"compares columns of the same name and takes no alias")
        source_alias = "source" if source_alias is None else source_alias
        target_alias = "target" if target_alias is None else target_alias
        for name, alias in (("source", source_alias), ("target", target_alias)):
            if not isinstance(alias, str) or not alias.strip():
                raise ArgumentTypeError(f"the {name} alias ({spelling.aliases}) must be a non-empty name, got {alias!r}")
        if source_alias == target_alias:
            raise InvalidArgumentError(f"the source and target aliases are both {source_alias!r}; give them "
                                       f"different names ({spelling.aliases})")
        check_user_columns(data_schema.names, "the data")
        if using is not None:
            columns = using_columns(using, spelling)
            for column in columns:
                for what, schema in (("table", snapshot.schema), ("data", data_schema)):
                    if column not in schema.names:
                        raise InvalidArgumentError(
                            f"{spelling.using} names column {column!r}, which the {what} does not have; the "
                            f"{what}'s columns are {sorted(schema.names)}")
            source_alias, target_alias = "source", "target"
            condition = " AND ".join(f"{quote(target_alias)}.{quote(c)} = {quote(source_alias)}.{quote(c)}"
                                     for c in columns)
            parameters = (("replaceUsingCols", f"({', '.join(columns)})"),)
        else:
            if not isinstance(on, str):
                raise ArgumentTypeError(f"{spelling.on} must be a SQL condition over the table's and the data's "
                                        f"columns, got {type(on).__name__} {on!r}")
            condition = on
            parameters = (("replaceOnCond", on),)
        engine = Engine()
        engine.register(merge.TARGET, snapshot.schema.empty_table())
        engine.register(merge.SOURCE, data_schema.empty_table())
        t, s = quote(target_alias), quote(source_alias)
        what = spelling.on if using is None else spelling.using
        checked = engine.check_expression(
            condition, f"SELECT * FROM {quote(merge.TARGET)} AS {t} CROSS JOIN {quote(merge.SOURCE)} AS {s}",
            what=f"the {what} condition")
        plan = engine.plan_of(f"SELECT 1 FROM {quote(merge.TARGET)} AS {t} JOIN {quote(merge.SOURCE)} AS {s} "
                              f"ON ({checked})", what=f"the {what} condition")
        read = facts_of(plan, merge.SOURCE).columns
        # A condition reading no column of the data matches every target row it holds for, once there is any
        # data: one column (its distinct values) says whether there is.
        source_columns = tuple(n for n in data_schema.names if n in read) or (data_schema.names[0],)
        staged_as = snapshot.schema if write_schema is None else write_schema
        key_schema = pa.schema([staged_as.field(c) if c in staged_as.names else data_schema.field(c)
                                for c in source_columns])
        return cls(condition=condition, source_alias=source_alias, target_alias=target_alias,
                   source_columns=source_columns, key_schema=key_schema, parameters=parameters, version=snapshot.version,
                   change_data=properties.change_data_feed(snapshot.configuration))

    # --- each writer ------------------------------------------------------------------------------------

    def stage(self, batches: Iterable[pa.RecordBatch], writer: Callable[[int, bool], StagingWriter], *,
              index: int = 0) -> tuple[list[PendingSet], int, pa.Table]:
        """Stage ``batches`` as the ``index``-th writer (``writer(task_id, change_data)`` opens a StagingWriter;
        the task numbers are :meth:`ReplaceWhere.data_task`'s). Returns the PendingSets (the data's; with the
        change data feed, then its ``insert`` change data's), the number of rows, and the distinct values of
        :attr:`source_columns`. On any failure, what it staged is aborted."""
        data = writer(ReplaceWhere.data_task(index), False)
        inserts = writer(ReplaceWhere.data_task(index) + 1, True) if self.change_data else None
        keys = _Keys(self.key_schema)
        staged, rows = stage_rows(batches, data, inserts, each=keys.add)
        return staged, rows, keys.table()

    # --- the commit ---------------------------------------------------------------------------------------

    def commit(self, table: Transaction | Opens, spec: WriteSpec, plan: WritePlan, staged: Sequence[PendingSet],
               keys: Sequence[pa.Table], *, job_id: str, rows: int | None = None, upload_seconds: float,
               stray_uploads_possible: bool = False) -> CommitResult:
        """One commit of the DELETE part (the table's rows matching a row of ``keys``, every writer's
        :meth:`stage` values) and the ``staged`` data, read at :attr:`version`; a conflict is raised, not
        re-planned, and the staged files are then deleted."""
        table = self.at_version(table)
        data = [p for p in staged if not ReplaceWhere.is_change_data(p)]
        staged_sets = PendingSets(data, [p for p in staged if ReplaceWhere.is_change_data(p)])
        if rows is None:
            rows = sum(f.num_records for p in data for f in p.files)
        try:
            source = _distinct(pa.concat_tables([k.cast(self.key_schema) for k in keys])) if keys else \
                self.key_schema.empty_table()
            deleting = merge.MergeBuilder(table, source, self.condition, source_alias=self.source_alias,
                                          target_alias=self.target_alias).when_matched_delete()
        except BaseException:
            abort_job(table.objects, table.uri, job_id, staged_sets.files, sweep=False)
            raise
        parameters = {"mode": "Overwrite", "partitionBy": json.dumps(list(plan.partition_by)), **dict(self.parameters)}
        data_files = sum(len(p.files) for p in data)
        data_bytes = sum(f.size for p in data for f in p.files)

        def stage(txn: Transaction, attempt_job: str) -> Staged:
            removing = deleting.stage(txn, attempt_job)
            with_changes = any(p.files and p.files[0].change_data for p in removing.pendingsets)
            if staged_sets.inserted and not with_changes:
                abort_job(table.objects, table.uri, job_id, staged_sets.inserted, sweep=False)
                staged_sets.inserted = []
            merged = removing.metrics
            metrics = {"numDeletedRows": merged["numTargetRowsDeleted"],
                       "numCopiedRows": merged["numTargetRowsCopied"],
                       "scanTimeMs": merged["scanTimeMs"], "rewriteTimeMs": merged["rewriteTimeMs"],
                       **{k: v for k, v in merged.items() if k.startswith("numTargetFilesBeforeSkipping")
                          or k.startswith("numTargetFilesAfterSkipping") or k.startswith("numTargetBytes")},
                       "numFiles": str(data_files), "numOutputRows": str(rows), "numOutputBytes": str(data_bytes),
                       "uploadTimeMs": str(int(upload_seconds * 1000))}
            return dataclasses.replace(removing, operation="WRITE", parameters=parameters, metrics=metrics,
                                       pendingsets=(*removing.pendingsets, *staged_sets.files),
                                       metadata=plan.metadata if plan.metadata is not None else removing.metadata,
                                       protocol=plan.protocol if plan.protocol is not None else removing.protocol,
                                       stray_uploads_possible=removing.stray_uploads_possible
                                       or stray_uploads_possible)

        return execute(table, "WRITE", stage, job_id=job_id, replan=False, discard=staged_sets)

    def at_version(self, table: Transaction | Opens) -> Transaction:
        """The transaction to commit in, reading :attr:`version` (:meth:`ReplaceWhere.at_version`)."""
        return at_version(table, self.version)



def replace_on(table: Transaction, batches: Iterable[pa.RecordBatch], spec: WriteSpec, plan: WritePlan, *,
               data_schema: pa.Schema, on: str | None, using: str | Sequence[str] | None, source_alias: str | None,
               target_alias: str | None, codec: str | Codec | None) -> CommitResult:
    """Write ``batches`` (conformed to ``plan``) replacing the table's rows that match them, in this process;
    see the module docstring."""
    planned = ReplaceOn.plan(table, spec, data_schema, on=on, using=using, source_alias=source_alias,
                             target_alias=target_alias, write_schema=plan.schema)
    job_id = str(uuid.uuid4())
    settings = WriterSettings.of(plan.configuration, compression=codec)
    writers: list[StagingWriter] = []

    def writer(task_id: int, change_data: bool) -> StagingWriter:
        writers.append(StagingWriter(table.objects, table.uri, schema=plan.schema, partition_by=plan.partition_by,
                                     layout=plan.layout, job_id=job_id, settings=settings, hold_small_files=True,
                                     task_id=task_id, change_data=change_data, rules=plan.rules))
        return writers[-1]

    started = time.monotonic()
    staged, rows, keys = planned.stage(batches, writer)
    return planned.commit(table, spec, plan, staged, [keys], job_id=job_id, rows=rows,
                          upload_seconds=time.monotonic() - started,
                          stray_uploads_possible=any(w.stray_uploads_possible for w in writers))


class _Keys:
    """The distinct values of some columns over the batches a writer stages."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.columns = schema.names
        self.parts: list[pa.Table] = []
        self.pending = 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        part = (batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])).select(self.columns)
        self.parts.append(part.cast(self.schema))
        self.pending += part.num_rows
        if self.pending >= _DEDUPLICATE_ROWS:
            self.parts = [self.table()]
            self.pending = 0

    def table(self) -> pa.Table:
        if not self.parts:
            return self.schema.empty_table()
        return _distinct(pa.concat_tables(self.parts))


def _distinct(table: pa.Table) -> pa.Table:
    """``table``'s distinct rows (as it is, where Arrow cannot group its column types: duplicates only cost
    time, a target row matched twice is deleted once)."""
    if table.num_rows < 2:
        return table
    try:
        return table.group_by(table.column_names, use_threads=False).aggregate([]).select(table.column_names)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return table


def encode_keys(keys: pa.Table) -> bytes:
    """A writer's key values as Arrow IPC bytes (what a Spark task sends its driver)."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, keys.schema) as stream:
        stream.write_table(keys)
    return sink.getvalue()


def decode_keys(data: bytes) -> pa.Table:
    """:func:`encode_keys`' table."""
    return pa.ipc.open_stream(io.BytesIO(data)).read_all()
