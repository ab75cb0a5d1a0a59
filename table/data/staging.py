"""The staging committer's task side: Parquet streamed into multipart uploads that are never completed.

This is the data path of docs/protocol.md ("The staging committer"), after Hadoop's S3A staging
committer:

1. **Stage.** A task's :class:`StagingWriter` splits its rows by partition, streams each Parquet file
   into an S3 multipart upload of the file's final key, uploads a part each time ``part_size`` bytes are
   buffered, and never completes the upload: no reader can see a byte of it.
2. **Task commit.** :meth:`StagingWriter.finish` returns a :class:`~table.data.pendingset.PendingSet` (keys,
   upload ids, ordered part ETags, sizes, row counts, stats, partition values). It is Spark's task result
   (or, for ``write_table``, a local value): plain, frozen, picklable data, not a listing of S3.
3. **Job commit** (:mod:`table.data.write`): the driver validates every PendingSet (:meth:`PendingSet.validate_for`,
   as the S3A design's security section asks: a tampered file must not commit parts out of order or
   write outside the table), completes all uploads in parallel (:func:`complete_pending`) and commits one
   log entry with their ``add`` actions: the single moment of visibility.
4. **Cleanup.** On a definite failure the job deletes what it completed (:func:`delete_completed`) and
   aborts the rest (:func:`abort_pending`); uploads of attempts whose PendingSet never reached the driver
   are found by the job id in their key (:func:`abort_stray_uploads`).

The PendingSet, its validation and the key layout (``[partition dirs/]part-{task:05d}-{job_id}-
c{n:03d}.snappy.parquet``) live in :mod:`table.data.pendingset`, and are re-exported here. Nothing here
imports pyspark.
"""

from __future__ import annotations

import enum
import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstore import ObjectStore, TableUri
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from logstore.objects import MemoryObjectStore
from table.data.writer_settings import WriterSettings
from table.data.files import MultipartSink
from table.data.pendingset import (
    CHANGE_DATA_DIR,
    PendingSet,
    StagedFile,
    StagedPart,
    check_job_id,
    data_file_name,
    encode_path,
    partition_dir,
)
from table.data import variant
from table.data.rules import RowRules
from table.data.stats import StatsCollector, resolve_stats_columns
from table.data.uploads import abort_pending
from table.errors import SchemaMismatchError, UnsupportedTypeError
from table.log.schema_arrow import cast_settled
from table.log.column_mapping import Layout
from table.log.constraints import TableRules
from table.log.schema import (
    arrow_to_delta,
    delta_to_arrow,
    partition_value_to_string,
    schema_diff,
)

__all__ = ["CHANGE_TYPE", "MIN_PART_SIZE", "StagingWriter", "WriterState"]

log = logging.getLogger(__name__)

CHANGE_TYPE = "_change_type"
"""The column of a change data file saying what happened to each row: ``insert``, ``delete``,
``update_preimage`` or ``update_postimage`` (PROTOCOL.md, "Change Data Files")."""

MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB
"""S3's minimum size of every part of a multipart upload but the last."""


# --- task side: the writer --------------------------------------------------------------------------


class WriterState(enum.Enum):
    OPEN = "open"
    FINISHED = "finished"
    ABORTED = "aborted"


class StagingWriter:
    """Stage rows of one task as Parquet files in incomplete multipart uploads (see the module docstring).

    ``schema`` is the table schema including partition columns; files hold the other columns only, as
    Delta and Spark write them. ``settings`` (:mod:`table.data.writer_settings`) decide the codec, the
    target file size, the row group size, the encodings and which columns get statistics. Memory is
    bounded per open file (one file per partition seen, at most ``max_open_files``, the least recently
    written closed first) by one row group (``settings.row_group_bytes`` of Arrow data) plus the parts
    under way (see :class:`~table.data.files.MultipartSink`). Rows are encoded when a row group fills: a
    smaller row group starts encoding and uploading earlier but costs CPU.
    ``hold_small_files`` (for a job whose commit runs in this process, as ``write_table``'s): a file smaller
    than one part is held in memory and PUT whole at job commit instead of going through a multipart
    upload (one request at commit instead of three while staging; it is just as invisible until then).
    Use as a context manager, or call :meth:`abort` on failure: uploads left behind cost money.
    """

    def __init__(self, objects: ObjectStore, uri: TableUri, *, schema: pa.Schema, partition_by: Sequence[str],
                 job_id: str, task_id: int, attempt_id: int = 0, settings: WriterSettings | None = None,
                 part_size: int = 8 * MiB, max_open_files: int = 64, hold_small_files: bool = False,
                 change_data: bool = False, layout: Layout | None = None, rules: TableRules | None = None,
                 copies_rows: bool = False, slot: int = 0, slots: int = 1, _allow_small_parts: bool = False):
        small_ok = _allow_small_parts and isinstance(objects, MemoryObjectStore)
        if part_size < MIN_PART_SIZE and not small_ok:
            raise InvalidArgumentError(f"part_size {part_size} is below S3's minimum part size of {MIN_PART_SIZE} bytes")
        if part_size <= 0 or max_open_files <= 0:
            raise InvalidArgumentError("part_size and max_open_files must be positive")
        if settings is not None and not isinstance(settings, WriterSettings):
            raise ArgumentTypeError(f"settings must be WriterSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else WriterSettings.of()
        if task_id < 0 or attempt_id < 0:
            raise InvalidArgumentError(f"task id {task_id} and attempt id {attempt_id} must be >= 0")
        missing = [c for c in partition_by if c not in schema.names]
        if missing:
            raise InvalidArgumentError(f"partition columns {missing} are not in the table schema {schema.names}")
        self.objects = objects
        self.uri = uri
        # The schema files are written with: Delta's Arrow types (microsecond timestamps, plain strings).
        self.schema = _delta_types(schema)
        self.partition_by = list(partition_by)
        #: The table's column mapping: rows come under logical names and are written under physical ones (with
        #: their field ids), partition values and statistics keyed by physical names.
        self.layout = layout if layout is not None and layout.mapped else None
        self._physical_partitions = (self.partition_by if self.layout is None
                                     else self.layout.physical_columns(self.partition_by))
        for column in self.partition_by:
            field = self.schema.field(column)
            if pa.types.is_nested(field.type):
                raise UnsupportedTypeError(column, field.type, cast_to="a primitive type (partition columns cannot be nested)")
        #: Change data files (``change_data``) hold the rows a row-level operation changed, each with its
        #: ``_change_type``, under ``_change_data/``; they become ``cdc`` actions, not ``add`` actions.
        self.change_data = change_data
        if change_data:
            if CHANGE_TYPE in self.schema.names:
                raise InvalidArgumentError(f"the table has a column named {CHANGE_TYPE!r}, which the change data "
                                           f"feed reserves; rename it")
            self.schema = self.schema.append(pa.field(CHANGE_TYPE, pa.string(), nullable=False))
        physical = self.schema if self.layout is None else _physical_schema(self.schema, self.layout)
        #: The data columns, which statistics cover; files hold them first, then (when the table asks for it:
        #: ``settings.materialize_partitions``) the partition columns.
        self.stats_schema = pa.schema([f for f in physical if f.name not in self._physical_partitions])
        self.materialize_partitions = self.settings.materialize_partitions and not change_data
        self.file_schema = self.stats_schema if not self.materialize_partitions else pa.schema(
            [*self.stats_schema, *(physical.field(p) for p in self._physical_partitions)])
        #: The file columns ``delta.dataSkippingStatsColumns`` names, by physical path (None: not set).
        self._stats_columns = None if self.settings.stats_columns is None else tuple(
            path for _, path, _ in resolve_stats_columns(self.settings.stats_columns, self.schema, physical)
            if path[0] not in self._physical_partitions)
        self.job_id = check_job_id(job_id)
        self.task_id = task_id
        self.attempt_id = attempt_id
        self.target_file_size = self.settings.target_file_size
        self.part_size = part_size
        self.max_open_files = max_open_files
        #: The Parquet codec of the files, also named in their file names (:mod:`table.compression`).
        self.codec = self.settings.codec
        self.hold_small_files = hold_small_files
        self.state = WriterState.OPEN
        self._open: OrderedDict[str, _OpenFile] = OrderedDict()
        self._counters: dict[str, int] = {}
        self._staged: list[StagedFile] = []
        self._checked_schema: pa.Schema | None = None
        self._row_group_bytes = min(self.settings.target_file_size, self.settings.row_group_bytes)
        self._create_retried = False
        #: The table's CHECK constraints, invariants, generated and identity columns (:mod:`table.data.rules`),
        #: applied to every row of a data file (change data files hold rows already checked). ``copies_rows``:
        #: the rows may be copies of the table's (a row-level operation's rewrite); ``slot`` of ``slots``: this
        #: task's share of the identity values.
        self.rules = RowRules(rules, self.schema, table=uri.table_path, copies_rows=copies_rows, slot=slot,
                              slots=slots) if rules and not change_data else None
        #: Variant values given to the writer are checked against the binary encoding; rows a row-level
        #: operation copies from the table's files are not (:mod:`table.data.variant`).
        self._check_variants = not copies_rows and not change_data and variant.has_variants(self.schema)

    @property
    def stray_uploads_possible(self) -> bool:
        """Whether starting one of this writer's uploads was retried by the SDK: an earlier attempt may have
        started an upload nobody knows the id of, which only a sweep of the job's uploads finds."""
        return self._create_retried

    def __enter__(self) -> StagingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.state is WriterState.OPEN:
            self.abort()

    def write(self, data: pa.RecordBatch | pa.Table) -> pa.Table:
        """Add rows; returns them as written (the table's columns and types, generated and identity columns
        filled in: what a change data file must say of them). Raises SchemaMismatchError (naming each
        difference, or a missing partition column), UnsupportedTypeError or ConstraintViolationError before
        anything of ``data`` is staged."""
        if self.state is not WriterState.OPEN:
            raise InvalidArgumentError(f"this writer is {self.state.value}; create a new one")
        if self.rules is not None:
            data = self.rules.complete(pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data)
        table = self._conform(data)
        if table.num_rows == 0:
            return table
        if self.rules is not None:
            self.rules.check(table)
        if self._check_variants:
            variant.check_rows(table, table=self.uri.table_path)
        written = table
        if self.layout is not None:
            table = self.layout.physical_table(table) if CHANGE_TYPE not in table.column_names else \
                self.layout.physical_table(table.drop_columns([CHANGE_TYPE])).append_column(
                    self.schema.field(CHANGE_TYPE), table.column(CHANGE_TYPE))
        for directory, values, rows in self._split(table):
            self._append(directory, values, rows)
        return written

    def roll(self) -> None:
        """Close every open file: rows written next start new files (a caller that cuts its rows into files
        itself, as Z-order clustering does)."""
        if self.state is not WriterState.OPEN:
            raise InvalidArgumentError(f"this writer is {self.state.value}; create a new one")
        while self._open:
            self._close_file(next(iter(self._open)))

    def finish(self) -> PendingSet:
        """Close every file and upload its last part; the uploads stay incomplete. Returns the task's
        PendingSet (task commit). On failure call :meth:`abort`."""
        if self.state is not WriterState.OPEN:
            raise InvalidArgumentError(f"this writer is {self.state.value}; create a new one")
        while self._open:
            self._close_file(next(iter(self._open)))
        self.state = WriterState.FINISHED
        return PendingSet(table_path=self.uri.table_path, job_id=self.job_id, task_id=self.task_id,
                          attempt_id=self.attempt_id, files=list(self._staged),
                          identity={} if self.rules is None else dict(self.rules.handed_out))

    def abort(self) -> None:
        """Abort every upload this writer started, finished files included. Best effort: a failing abort
        is logged, not raised, so it can neither hide the error that led here nor stop the other aborts."""
        self.state = WriterState.ABORTED
        open_files, self._open = list(self._open.values()), OrderedDict()
        for handle in open_files:
            handle.discard()
        abort_pending(self.objects, [PendingSet(table_path=self.uri.table_path, job_id=self.job_id,
                                                task_id=self.task_id, attempt_id=self.attempt_id,
                                                files=self._staged)])

    # -- steps ---------------------------------------------------------------------------------------

    def _conform(self, data: pa.RecordBatch | pa.Table) -> pa.Table:
        """``data`` checked against the table schema, columns in table order, cast to Delta's types."""
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        elif not isinstance(data, pa.Table):
            raise ArgumentTypeError(f"expected a pyarrow Table or RecordBatch, got {type(data).__name__}")
        if data.schema != self._checked_schema:
            self._check_schema(data.schema)
            self._checked_schema = data.schema
        nulls = [f"column {f.name!r} is NOT NULL in the table, but the data holds {data.column(f.name).null_count} "
                 f"null(s) in it" for f in self.schema if not f.nullable and data.column(f.name).null_count]
        if nulls:
            raise SchemaMismatchError(nulls, table=self.uri.table_path)
        selected = data.select(self.schema.names)
        try:
            return selected.cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            try:  # nulls under null structs (Spark writes them so) are no values of a NOT NULL field
                return pa.Table.from_arrays([cast_settled(c, f.type) for c, f in zip(selected.columns, self.schema)],
                                            schema=self.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                raise SchemaMismatchError([f"the values do not fit the table's types: {exc}"],
                                          table=self.uri.table_path) from None

    def _check_schema(self, data_schema: pa.Schema) -> None:
        """Names and types must match the table's. A nullable data column may go into a NOT NULL one:
        Arrow data from most sources is nullable by type, so its values are checked instead, batch by
        batch, as Delta writers enforce NOT NULL."""
        missing = [c for c in self.partition_by if c not in data_schema.names]
        if missing:
            raise SchemaMismatchError(
                [f"partition column {c!r} is missing from the data (the table is partitioned by "
                 f"{self.partition_by})" for c in missing], table=self.uri.table_path)
        relaxed = pa.schema([f.with_nullable(True) for f in self.schema])
        differences = schema_diff(relaxed, data_schema)
        if differences:
            raise SchemaMismatchError(differences, table=self.uri.table_path)

    def _split(self, table: pa.Table) -> Iterable[tuple[str, dict[str, str | None], pa.Table]]:
        """``(directory, serialized partition values, rows without partition columns)`` per partition."""
        partitions = self._physical_partitions
        if not partitions:
            yield "", {}, table
            return
        data = table.select(self.file_schema.names) if self.materialize_partitions else table.drop_columns(partitions)
        if table.num_rows and all(pc.count_distinct(table.column(c), mode="all").as_py() == 1 for c in partitions):
            # one partition (a row-level operation's rewrite of one file, most appends): no grouping
            values = {c: partition_value_to_string(table.column(c)[0], table.schema.field(c).type) for c in partitions}
            yield partition_dir(partitions, values), values, data
            return
        keys = table.select(partitions)
        row_ids = pc.indices_nonzero(pc.is_null(pa.nulls(table.num_rows, pa.int8())))
        groups = keys.append_column("__row", row_ids).group_by(partitions, use_threads=False).aggregate(
            [("__row", "list")])
        for i in range(groups.num_rows):
            values = {c: partition_value_to_string(groups.column(c)[i], table.schema.field(c).type)
                      for c in partitions}
            rows = data.take(groups.column("__row_list")[i].values)
            yield partition_dir(partitions, values), values, rows

    def _append(self, directory: str, values: dict[str, str | None], rows: pa.Table) -> None:
        handle = self._open.get(directory)
        if handle is None:
            if len(self._open) >= self.max_open_files:
                self._close_file(next(iter(self._open)))
            handle = self._open_file(directory, values)
        self._open.move_to_end(directory)
        handle.append(rows, self._row_group_bytes)
        if handle.sink.tell() >= self.target_file_size:
            self._close_file(directory)

    def _open_file(self, directory: str, values: dict[str, str | None]) -> _OpenFile:
        counter = self._counters.get(directory, 0)
        self._counters[directory] = counter + 1
        relative = directory + data_file_name(self.task_id, self.job_id, counter, change_data=self.change_data,
                                               codec=self.codec)
        if self.change_data:
            relative = f"{CHANGE_DATA_DIR}/{relative}"
        handle = _OpenFile(self.objects, self.uri.key(relative), encode_path(relative), values,
                           self.file_schema, part_size=self.part_size, settings=self.settings,
                           hold_small=self.hold_small_files, change_data=self.change_data,
                           stats_columns=self._stats_columns, stats_schema=self.stats_schema)
        self._open[directory] = handle
        self._create_retried = self._create_retried or handle.sink.create_retried
        return handle

    def _close_file(self, directory: str) -> None:
        handle = self._open.pop(directory)
        self._staged.append(handle.finish())


_DELTA_TYPES: dict[bytes, pa.Schema] = {}
"""``delta_to_arrow(arrow_to_delta(schema))`` by the serialized ``schema`` (names, types, nullability, field
metadata: everything the conversion reads): a writer appending to one table converts the same schema at
every write."""


def _delta_types(schema: pa.Schema) -> pa.Schema:
    try:
        key = schema.serialize().to_pybytes()
    except (pa.ArrowException, ValueError, TypeError):  # a type IPC cannot carry: converted every time
        return delta_to_arrow(arrow_to_delta(schema))
    found = _DELTA_TYPES.get(key)
    if found is None:
        found = delta_to_arrow(arrow_to_delta(schema))
        if len(_DELTA_TYPES) >= 64:
            _DELTA_TYPES.clear()
        _DELTA_TYPES[key] = found
    return found


def _physical_schema(schema: pa.Schema, layout: Layout) -> pa.Schema:
    """``schema`` (logical, maybe with ``_change_type`` last) under the layout's physical names and field ids."""
    fields = [layout.physical.field(layout.physical_name(f.name)) if f.name != CHANGE_TYPE else f for f in schema]
    return pa.schema(fields)


class _OpenFile:
    """One Parquet file being staged: its writer, its multipart sink, rows waiting for a row group. The
    Parquet writer is made when the first row group is written, so that its encodings are chosen from a
    whole row group of rows (:meth:`WriterSettings.parquet_options`), not from a first small batch."""

    def __init__(self, objects: ObjectStore, key: str, path: str, values: dict[str, str | None],
                 file_schema: pa.Schema, *, part_size: int, settings: WriterSettings, hold_small: bool,
                 change_data: bool = False, stats_columns: Sequence[tuple[str, ...]] | None = None,
                 stats_schema: pa.Schema | None = None):
        self.key = key
        self.change_data = change_data
        self.path = path
        self.values = values
        self.file_schema = file_schema
        self.settings = settings
        self.stats = StatsCollector(file_schema if stats_schema is None else stats_schema,
                                    num_indexed_cols=settings.num_indexed_cols, columns=stats_columns)
        self.sink = MultipartSink(objects, key, part_size=part_size, hold_small=hold_small)
        self.writer: pq.ParquetWriter | None = None
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.rows = 0

    def append(self, rows: pa.Table, row_group_bytes: int) -> None:
        self.pending.append(rows)
        self.pending_bytes += rows.nbytes
        self.rows += rows.num_rows
        if self.pending_bytes >= row_group_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        group = pa.concat_tables(self.pending)
        self.pending, self.pending_bytes = [], 0
        self.stats.add(group)
        self._writer(group).write_table(group)

    def _writer(self, sample: pa.Table) -> pq.ParquetWriter:
        if self.writer is None:
            options = self.settings.parquet_options(self.file_schema, sample, self.stats.bounded_columns())
            self.writer = pq.ParquetWriter(self.sink, self.file_schema, **options)
        return self.writer

    def finish(self) -> StagedFile:
        self.flush()
        writer = self._writer(self.file_schema.empty_table())
        writer.close()
        parts = self.sink.finish()
        return StagedFile(path=self.path, key=self.key, upload_id=self.sink.upload_id,
                          parts=[StagedPart(number=p.number, etag=p.etag) for p in parts],
                          size=self.sink.tell(), num_records=self.rows,
                          stats=self.stats.stats(writer.writer.metadata), partition_values=self.values,
                          change_data=self.change_data, held=self.sink.held)

    def discard(self) -> None:
        """Abort the upload; the Parquet writer's last bytes go nowhere. Never raises (see
        :meth:`StagingWriter.abort`)."""
        self.pending = []
        try:
            self.sink.abort()
        except Exception as exc:  # noqa: BLE001 - best effort, logged; the lifecycle rule is the backstop
            log.warning("could not abort upload %s of %s: %s; `dynacommit uploads abort` or the bucket's "
                        "lifecycle rule removes it", self.sink.upload_id, self.key, exc)
        try:
            if self.writer is not None:
                self.writer.close()
        except (pa.ArrowException, OSError, ValueError) as exc:
            log.debug("closing the discarded writer of %s: %s", self.key, exc)

