"""The executor side of DELETE, UPDATE and MERGE on Spark: reading target rows, and rewriting files.

Two functions run in Spark tasks, both plain picklable data (no client, no Table), each opening its own
object store from the storage options it carries:

- :class:`TargetReadTask` (``spark.range(n).mapInArrow``): task ``i`` reads its share of the candidate
  files, each file whole and in order, and gives every row two columns of ours: :data:`FILE` (the
  file's index among the candidates) and :data:`ROW` (the row's position in its file), as the Python
  operations number them (:mod:`table.operations.scan`).
- :class:`RewriteTask` (``mapInArrow`` over the rows the operation computed in Spark): it receives the
  rows of each file it owns together (consecutive, in row order) and, for each file holding a changed
  row, writes the file again (its unchanged rows copied, deleted rows left out, updated rows with their
  new values) through a :class:`~table.data.staging.StagingWriter`, exactly as writes stage: incomplete
  multipart uploads, reported as PendingSets. Files without a changed row are not written. Rows without
  a file (a MERGE's inserts) are written as they come. A MERGE sends only the rows its clauses change
  (and the matched ones): the task reads the rest of a file it rewrites from the file itself. With
  ``deletion_vectors`` (merge-on-read) a touched file is not written again: only its updated rows are
  written, and the task reports the
  numbers of the rows the file loses, which the driver marks deleted in the file's vector. With the
  change data feed, a second writer (``change_data=True``) stages the ``update_preimage`` /
  ``update_postimage`` / ``delete`` / ``insert`` rows. The task's result is one row: its PendingSets and a report (files rewritten, rows per clause,
  rows copied, target rows matched more than once).

The rows a RewriteTask receives carry :data:`ACTION`, the index of the clause that applies to the row
(``-1``: none; the row is copied if its file is rewritten), and the table's columns after the clause as
``out<i>`` (and before it, ``pre<i>``, when the change data needs the preimage of updated rows).

A RewriteTask checks what it relies on: each file's rows arrive together, and all of them (row numbers
``0..n-1``, ``n`` the file's ``numRecords``); otherwise it fails rather than write part of a file. On
any failure it aborts its own uploads before re-raising, as :class:`~spark_integration.write.StageTask`
does, so a retried task leaves nothing of the failed attempt.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from logstore import StorageOptions, TableUri, open_object_store
from spark_integration import _hooks
from spark_integration.compat import to_arrow_schema
from spark_integration.read import ReadPartition, read_partition
from spark_integration.worker import freeze_imports
from table.data.pendingset import PendingSet
from table.data.staging import CHANGE_TYPE, StagingWriter
from table.data.writer_settings import WriterSettings
from table.data.uploads import abort_pending
from table.log.actions import AddFile
from table.log.column_mapping import Layout
from table.log.constraints import TableRules
from table.engine import INTERNAL_PREFIX
from table.operations.merge import count_actions
from table.operations.rewrite import ClauseKind
from table.operations.scan import FILE, ROW
from spark_integration.write import IDENTITY_SLOTS

__all__ = ["ACTION", "FILE", "RESULT_SCHEMA", "ROW", "Report", "RewriteTask", "TargetReadTask",
           "out_column", "pre_column", "with_row_ids"]

log = logging.getLogger(__name__)

ACTION = INTERNAL_PREFIX + "action"
"""The clause that applies to a row (its index in the operation's clauses), -1 for none."""

RESULT_SCHEMA = "partition int, attempt int, data string, changes string, report string"
_RESULT_ARROW = pa.schema([("partition", pa.int32()), ("attempt", pa.int32()), ("data", pa.string()),
                           ("changes", pa.string()), ("report", pa.string())])

def out_column(index: int) -> str:
    """The column of the table's ``index``-th column after the row's clause."""
    return f"{INTERNAL_PREFIX}out{index}"


def pre_column(index: int) -> str:
    """The column of the table's ``index``-th column before the row's clause (for change data)."""
    return f"{INTERNAL_PREFIX}pre{index}"


# --- reading the target ------------------------------------------------------------------------------


def with_row_ids(schema: StructType) -> StructType:
    """``schema`` (the table's, in Spark) plus :data:`FILE` and :data:`ROW`."""
    return StructType([*schema.fields, StructField(FILE, IntegerType(), False), StructField(ROW, LongType(), False)])


class TargetReadTask:
    """Task ``i`` of ``spark.range(n).mapInArrow(task, with_row_ids(schema))`` reads ``tasks[i]``: pairs of
    (candidate index, file), each file whole and in row order. Its ``repr`` names the table only."""

    def __init__(self, *, table_path: str, version: int, table_schema: pa.Schema, partition_columns: Sequence[str],
                 tasks: list[list[tuple[int, AddFile]]], options: StorageOptions, schema: StructType,
                 layout: Layout | None = None):
        self.table_path = table_path
        self.layout = layout if layout is not None and layout.mapped else None
        self.version = version
        self.table_schema = table_schema
        self.partition_columns = tuple(partition_columns)
        self.tasks = tasks
        self.options = options
        self.schema = schema  # the table's columns in Spark, without FILE and ROW
        self.__name__ = "TargetReadTask"  # pyspark names the Python UDF of the plan after it

    def __repr__(self) -> str:
        return f"TargetReadTask(table={self.table_path}, version={self.version}, tasks={len(self.tasks)})"

    def __call__(self, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        target = to_arrow_schema(with_row_ids(self.schema))
        for batch in ids:
            for task in batch.column(0).to_pylist():
                for index, add in self.tasks[task]:
                    yield from self._file(index, add, target)

    def read_file(self, add: AddFile) -> pa.Table:
        """Every row of ``add`` as this task reads it (numbered 0..n-1 by position), the table's columns."""
        schema = to_arrow_schema(self.schema)
        return pa.Table.from_batches([pa.RecordBatch.from_arrays(b.columns, schema=schema) for b in self._batches(add)],
                                     schema=schema)

    def _batches(self, add: AddFile) -> Iterator[pa.RecordBatch]:
        one = ReadPartition(index=0, table_path=self.table_path, version=self.version, table_schema=self.table_schema,
                            partition_columns=self.partition_columns, files=[add], layout=self.layout)
        yield from read_partition(one, options=self.options, schema=self.schema)

    def _file(self, index: int, add: AddFile, target: pa.Schema) -> Iterator[pa.RecordBatch]:
        one = ReadPartition(index=0, table_path=self.table_path, version=self.version, table_schema=self.table_schema,
                            partition_columns=self.partition_columns, files=[add], layout=self.layout)
        first = 0
        for batch in read_partition(one, options=self.options, schema=self.schema):
            count = batch.num_rows
            columns = [*batch.columns, pa.array(np.full(count, index, dtype=np.int32)),
                       pa.array(np.arange(first, first + count, dtype=np.int64))]
            first += count
            yield pa.RecordBatch.from_arrays(columns, schema=target)


# --- rewriting files ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    """What one task did (JSON in its result): candidate indices of the files it rewrote, rows per
    clause, rows copied into rewritten files, and target rows matched by more than one source row."""

    touched: list[int] = dataclasses.field(default_factory=list)
    clause_rows: list[int] = dataclasses.field(default_factory=list)
    copied: int = 0
    repeated: int = 0
    gone: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    """With deletion vectors: per touched file (its candidate index, as text), the row numbers it loses."""

    def dump(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def load(cls, text: str) -> Report:
        return cls(**json.loads(text))


class RewriteTask:
    """The function each rewrite task runs (``frame.mapInArrow(task, RESULT_SCHEMA)``); see the module
    docstring. ``schema`` is the table's Arrow schema the files are written with (evolved, for a MERGE
    with schema evolution); ``expected_rows[i]`` the ``numRecords`` of candidate ``i`` (None: unknown).
    ``repeats_allowed``: a target row matched more than once is deleted once instead of being reported
    (Delta's exception for a MERGE whose only matched clause is an unconditional delete).

    ``copies``: the rows of a file arrive *sparse*: only those a clause applies to (and matched ones, for
    the cardinality rule), the task reading the file's other rows itself through ``copies`` (a reader of
    the candidates, ``files[i]`` candidate ``i``) when it rewrites the file. Unchanged rows then never
    cross from Python to the JVM and back. Without it every row of a file arrives.

    ``from_file`` (with ``copies``): the table's columns the operation did not read into Spark, as
    ``{position: the clauses that assign it}``: a received row takes the file's value of such a column
    unless its clause assigns it, and its preimage (change data) the file's values."""

    def __init__(self, *, table_path: str, options: StorageOptions, schema: pa.Schema, partition_by: Sequence[str],
                 job_id: str, clauses: Sequence[ClauseKind], expected_rows: Sequence[int | None],
                 change_data: bool, has_preimage: bool, repeats_allowed: bool,
                 settings: WriterSettings | None = None, layout: Layout | None = None,
                 deletion_vectors: bool = False, rules: TableRules | None = None,
                 copies: TargetReadTask | None = None, files: Sequence[AddFile] = (),
                 from_file: Mapping[int, Sequence[int]] | None = None):
        self.table_path = table_path
        self.options = options
        self.schema = schema
        self.partition_by = tuple(partition_by)
        self.job_id = job_id
        self.clauses = tuple(clauses)
        self.expected_rows = list(expected_rows)
        self.change_data = change_data
        self.has_preimage = has_preimage
        self.repeats_allowed = repeats_allowed
        self.settings = settings if settings is not None else WriterSettings.of()
        self.hook = _hooks.installed().task  # None but in tests (spark_integration._hooks)
        self.layout = layout if layout is not None and layout.mapped else None  # files hold physical names
        self.deletion_vectors = deletion_vectors  # merge-on-read: a touched file keeps its other rows
        self.rules = rules  # the table's rules on rows, enforced on the rows written (table.data.rules)
        self.copies = copies
        self.files = tuple(files) if copies is not None else ()
        self.from_file = {int(k): tuple(v) for k, v in (from_file or {}).items()} if copies is not None else {}
        self.__name__ = "RewriteTask"  # pyspark names the Python UDF of the plan after it

    def __repr__(self) -> str:
        return f"RewriteTask(job={self.job_id}, table={self.table_path})"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        context = TaskContext.get()
        partition, attempt = context.partitionId(), context.attemptNumber()
        data, changes, report = self.run(batches, partition=partition, attempt=attempt)
        yield pa.RecordBatch.from_pydict(
            {"partition": [partition], "attempt": [attempt], "data": [data.model_dump_json()],
             "changes": [None if changes is None else changes.model_dump_json()], "report": [report.dump()]},
            schema=_RESULT_ARROW)

    def run(self, batches: Iterable[pa.RecordBatch | pa.Table], *, partition: int, attempt: int
            ) -> tuple[PendingSet, PendingSet | None, Report]:
        """Rewrite what ``batches`` hold as task ``partition``, attempt ``attempt``. On any failure this
        attempt's uploads are aborted and the error re-raised. A task that finds repeated target rows
        stages nothing (its uploads aborted) and reports them."""
        uri = TableUri.parse(self.table_path)
        objects = open_object_store(uri, storage_options=self.options)
        common = dict(schema=self.schema, partition_by=list(self.partition_by), job_id=self.job_id,
                      attempt_id=attempt, settings=self.settings, layout=self.layout)
        data = StagingWriter(objects, uri, task_id=2 * partition, rules=self.rules, copies_rows=True, slot=partition,
                             slots=IDENTITY_SLOTS, **common)
        changes = StagingWriter(objects, uri, task_id=2 * partition + 1, change_data=True, **common) \
            if self.change_data else None
        writers = [w for w in (data, changes) if w is not None]
        finished: list[PendingSet] = []
        try:
            report = _Rewrite(self, data, changes).run(batches)
            finished = [w.finish() for w in writers]
            if report.repeated:
                abort_pending(objects, finished)
                finished = [PendingSet(table_path=p.table_path, job_id=p.job_id, task_id=p.task_id,
                                       attempt_id=p.attempt_id, files=[]) for p in finished]
            if self.hook is not None:
                self.hook(self, finished)
        except BaseException:
            if finished:
                abort_pending(objects, finished)
            else:
                for writer in writers:
                    writer.abort()
            raise
        log.debug("rewrite task %d attempt %d of job %s: %d file(s) rewritten", partition, attempt, self.job_id,
                  len(report.touched))
        return finished[0], (finished[1] if changes is not None else None), report


class _Rewrite:
    """One attempt's pass over its rows (see :class:`RewriteTask`)."""

    def __init__(self, task: RewriteTask, data: StagingWriter, changes: StagingWriter | None):
        self.task = task
        self.data = data
        self.changes = changes
        self.names = task.schema.names
        self.report = Report(clause_rows=[0] * len(task.clauses))
        self.deleting = pa.array([i for i, c in enumerate(task.clauses) if c.action == "delete"], pa.int32())
        self.done: set[int] = set()

    def run(self, batches: Iterable[pa.RecordBatch | pa.Table]) -> Report:
        current: int | None = None
        pending: list[pa.Table] = []
        for batch in batches:
            rows = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
            for file, part in _runs(rows):
                if file is None:
                    self._insert(part)
                    continue
                if file != current:
                    if current is not None:
                        self._file(current, pa.concat_tables(pending))
                    if file in self.done:
                        raise RuntimeError(f"the rows of file {file} of the candidates reached rewrite task "
                                           f"{self.task.job_id} apart; refusing to write part of a file")
                    current, pending = file, []
                pending.append(part)
        if current is not None:
            self._file(current, pa.concat_tables(pending))
        return self.report

    def _file(self, file: int, rows: pa.Table) -> None:
        self.done.add(file)
        numbers = rows.column(ROW).combine_chunks()
        if len(numbers) > 1 and not pc.all(pc.greater_equal(numbers[1:], numbers[:-1])).as_py():
            rows = rows.take(pc.sort_indices(rows, sort_keys=[(ROW, "ascending")]))
            numbers = rows.column(ROW).combine_chunks()
        if len(numbers) > 1:
            repeated = pc.equal(numbers[1:], numbers[:-1])
            count = pc.sum(repeated).as_py() or 0
            if count:
                if not self.task.repeats_allowed:
                    twice = numbers.filter(pa.concat_arrays([repeated, pa.array([False])]))
                    self.report.repeated += len(pc.unique(twice))
                    return
                rows = rows.filter(pc.invert(pa.concat_arrays([pa.array([False]), repeated])))
                numbers = rows.column(ROW).combine_chunks()
        if self.task.copies is None:
            self._check_whole(file, numbers)
        if self.report.repeated:
            return  # nothing is written once the merge is known to fail
        actions = pc.fill_null(rows.column(ACTION), -1).combine_chunks()
        changed = pc.greater_equal(actions, 0)
        if not pc.any(changed).as_py():
            return
        self.report.touched.append(file)
        deleted = pc.is_in(actions, value_set=self.deleting)
        updated = pc.and_(changed, pc.invert(deleted))
        after = self._columns(rows, out_column)
        before = self._columns(rows, pre_column) if self.task.has_preimage else after
        read = None
        if self.task.from_file:  # the columns Spark did not carry: the file's values
            read = self._read(file, after.schema, numbers)
            # a copy-on-write rewrite without change data writes a column no clause assigns straight from
            # the file (_whole_file): the received rows need the file's values of the assigned ones only
            every = self.task.deletion_vectors or self.changes is not None
            own = {p: read.column(p).take(numbers) for p, assigning in self.task.from_file.items()
                   if every or assigning}
            after = self._filled(after, own, actions)
            before = self._filled(before, own, None) if self.task.has_preimage else after
        # the postimage is the updated rows as written (generated columns computed again)
        if self.task.deletion_vectors:  # the file stays; the driver marks the changed rows deleted in it
            self.report.gone[str(file)] = numbers.filter(changed).to_pylist()
            postimage = self.data.write(after.filter(updated))
        elif self.task.copies is not None:  # sparse rows: the file's other rows read from the file
            whole, received = self._whole_file(file, after, numbers, read)
            gone = np.zeros(whole.num_rows, dtype=bool)
            gone[received] = deleted.to_numpy(zero_copy_only=False)
            fresh = np.zeros(whole.num_rows, dtype=bool)
            fresh[received] = updated.to_numpy(zero_copy_only=False)
            kept = ~gone
            written = self.data.write(whole.filter(pa.array(kept)) if gone.any() else whole)
            postimage = written.filter(pa.array(fresh[kept])) if self.changes is not None else written
            self.report.copied += whole.num_rows - (pc.sum(changed).as_py() or 0)
        else:
            kept = pc.invert(deleted)
            postimage = self.data.write(after.filter(kept)).filter(updated.filter(kept))
            self.report.copied += len(actions) - (pc.sum(changed).as_py() or 0)
        self._change(before.filter(updated), "update_preimage")
        self._change(postimage, "update_postimage")
        self._change(before.filter(deleted), "delete")
        self._count(actions)

    def _read(self, file: int, schema: pa.Schema, numbers: pa.Array) -> pa.Table:
        """Every row of candidate ``file`` in the written ``schema``, read as the target was (its deletion
        vector applied), conformed as the operation conformed the target (columns schema evolution added
        as nulls, widened ones cast); checked against its row count and the row numbers received."""
        rows = self.task.copies.read_file(self.task.files[file])
        count = rows.num_rows
        expected = self.task.expected_rows[file]
        outside = len(numbers) > 0 and (numbers[0].as_py() < 0 or numbers[len(numbers) - 1].as_py() >= count)
        if (expected is not None and count != expected) or outside:
            raise RuntimeError(f"rewrite task of job {self.task.job_id} read {count} row(s) of candidate file {file} "
                               f"(expected {expected if expected is not None else 'its rows'}), but received rows "
                               f"numbered up to {numbers[len(numbers) - 1].as_py() if len(numbers) else None}; "
                               f"refusing to write it")
        columns = []
        for field in schema:
            if field.name in rows.column_names:
                column = rows.column(field.name)
                columns.append(column if column.type == field.type else column.cast(field.type))
            else:
                columns.append(pa.nulls(count, field.type))
        return pa.Table.from_arrays(columns, schema=schema)

    def _filled(self, rows: pa.Table, own: Mapping[int, pa.Array], actions: pa.Array | None) -> pa.Table:
        """``rows`` with the columns of ``from_file`` in ``own`` (``{position: the same rows' values as the file
        holds them}``) taken from there: all of them (``actions`` None), else where the row's clause does not
        assign the column. Columns not in ``own`` stay as they are."""
        columns = list(rows.columns)
        for position, assigning in self.task.from_file.items():
            if position not in own:
                continue
            value = own[position]
            if actions is not None and assigning:
                keep = pc.is_in(actions, value_set=pa.array(assigning, actions.type))
                value = pc.if_else(keep, rows.column(position), value)
            columns[position] = value
        return pa.Table.from_arrays(columns, schema=rows.schema)

    def _whole_file(self, file: int, after: pa.Table, numbers: pa.Array, read: pa.Table | None = None
                    ) -> tuple[pa.Table, np.ndarray]:
        """Every row of candidate ``file`` in the written schema (``read``, if the task read it already),
        those received replaced by ``after`` (their values after their clause); and the received rows'
        positions. A column of ``from_file`` that no clause assigns is the file's as it is (every row keeps
        its value), without a copy."""
        if read is None:
            read = self._read(file, after.schema, numbers)
        count = read.num_rows
        received = numbers.to_numpy(zero_copy_only=False).astype(np.int64)
        order = np.arange(count, dtype=np.int64)
        order[received] = count + np.arange(len(received), dtype=np.int64)
        indices = pa.array(order)
        unassigned = {p for p, assigning in self.task.from_file.items() if not assigning}
        columns = [read.column(i) if i in unassigned
                   else pa.chunked_array([*read.column(i).chunks, *after.column(i).chunks], field.type).take(indices)
                   for i, field in enumerate(read.schema)]
        return pa.Table.from_arrays(columns, schema=read.schema), received

    def _check_whole(self, file: int, numbers: pa.Array) -> None:
        expected = self.task.expected_rows[file]
        count = len(numbers)
        whole = (expected is None or count == expected) and (
            count == 0 or (numbers[0].as_py() == 0 and numbers[count - 1].as_py() == count - 1))
        if not whole:
            raise RuntimeError(f"rewrite task of job {self.task.job_id} received {count} row(s) of candidate file "
                               f"{file} (numbered {numbers[0].as_py() if count else None}..), not all of its "
                               f"{expected if expected is not None else 'rows'}; refusing to write part of a file")

    def _insert(self, rows: pa.Table) -> None:
        if self.report.repeated:
            return
        actions = pc.fill_null(rows.column(ACTION), -1).combine_chunks()
        rows = rows.filter(pc.greater_equal(actions, 0))
        if rows.num_rows == 0:
            return
        after = self.data.write(self._columns(rows, out_column))  # as written: identity values handed out
        self._change(after, "insert")
        self._count(rows.column(ACTION).combine_chunks())

    def _columns(self, rows: pa.Table, column: Callable[[int], str]) -> pa.Table:
        return pa.Table.from_arrays([rows.column(column(i)) for i in range(len(self.names))], names=self.names)

    def _change(self, rows: pa.Table, change_type: str) -> None:
        if self.changes is not None and rows.num_rows:
            self.changes.write(rows.append_column(CHANGE_TYPE, pa.array([change_type] * rows.num_rows, pa.string())))

    def _count(self, actions: pa.Array) -> None:
        count_actions(actions, self.report.clause_rows)


def _runs(rows: pa.Table) -> Iterator[tuple[int | None, pa.Table]]:
    """``(file, rows)`` for each run of consecutive rows with the same :data:`FILE` (None: no file)."""
    if rows.num_rows == 0:
        return
    files = pc.fill_null(rows.column(FILE), -1).combine_chunks()
    bounds = pc.indices_nonzero(pc.not_equal(files[1:], files[:-1])).to_pylist() if len(files) > 1 else []
    start = 0
    for end in [b + 1 for b in bounds] + [rows.num_rows]:
        value = files[start].as_py()
        yield (None if value < 0 else value), rows.slice(start, end - start)
        start = end


def result_row_values(row: Any) -> tuple[int, int, str, str | None, str]:
    """A collected result row as ``(partition, attempt, data, changes, report)``."""
    return row["partition"], row["attempt"], row["data"], row["changes"], row["report"]
