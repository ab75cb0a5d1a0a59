"""Reading a dynacommit table into Spark: read planning and the read task, shared by batch and streaming.

A read is planned on the driver: the snapshot's files (pruned by the pushed-down filter, for a batch
read; the files of new commits, for a stream) are packed into read tasks by size
(:func:`plan_read_tasks`), and each task is a :class:`ReadPartition` carrying its own files and
nothing else of the plan. In the executor, :func:`read_partition` reads those files with pyarrow
straight from S3 (the filesystem built from the storage options), restores the partition columns
from the ``add`` actions with the table's types, keeps the rows of the filter, and yields Arrow
batches of the requested columns in exactly the Arrow schema Spark expects. Only files the log
references are read: a table is its log, not a directory listing.

:func:`read_dataframe` plans the same read in the calling process and runs it with ``mapInArrow``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import StructField, StructType

from logstore import (
    DynacommitError,
    InvalidArgumentError,
    StorageError,
    StorageOptions,
    TableUri,
    open_object_store,
)
from spark_integration.compat import to_arrow_schema
from spark_integration.session import executor_python
from spark_integration.worker import freeze_imports
from table.data.files import filesystem_for
from table.data.read import fetched_windows, files_dataset, surviving_batches
from table.errors import DataFileMissingError
from table.log.actions import AddFile
from table.log.column_mapping import Layout
from table.log.schema_arrow import is_variant
from table.table import Table

__all__ = ["ReadPartition", "ReadTask", "check_columns", "plan_read_tasks", "read_dataframe", "read_partition",
           "spark_schema"]

TARGET_TASK_BYTES = 128 * 1024 * 1024
"""Files are packed into one task until it holds this many bytes (a larger file is a task of its own):
Spark's ``spark.sql.files.maxPartitionBytes``."""
OPEN_COST_BYTES = 4 * 1024 * 1024
"""What opening a file costs, counted as bytes when packing (Spark's ``spark.sql.files.openCostInBytes``):
many small files spread over more tasks."""
BATCH_ROWS = 64 * 1024


def read_dataframe(spark: SparkSession, uri: str, *, version: int | None = None,
                   storage_options: dict[str, str] | StorageOptions | None = None) -> DataFrame:
    """The rows of the table at ``uri`` (at ``version`` if given) as a DataFrame with the table's schema.

    The function form of ``spark.read.format("dynacommit")``, planned here, in the calling process: the
    storage options are resolved here (falling back to this process's environment) and reach the read
    tasks inside the pickled task only, never as Spark options (which Spark's py4j gateway logs in
    the clear at debug level). Filters applied to the result are not pushed down; use the format for
    that. Raises ``TableNotFoundError`` when there is no table (``VersionNotFoundError`` for a missing
    version).
    """
    executor_python(spark)
    options = StorageOptions.resolve(storage_options)
    table = Table(uri, version=version, storage_options=options)
    target = spark_schema(table.schema)
    tasks = plan_read_tasks(table.add_actions(), min_tasks=default_parallelism(spark) or 1, open_cost=OPEN_COST_BYTES)
    if not tasks:
        return spark.createDataFrame([], target)
    partitions = partitions_of(tasks, table_path=table.uri.table_path, version=table.version, table_schema=table.schema,
                               partition_columns=table.partition_columns, layout=table.snapshot.layout)
    reader = ReadTask(partitions=partitions, options=options, schema=target)
    return spark.range(0, len(tasks), 1, numPartitions=len(tasks)).mapInArrow(reader, target)


class ReadTask:
    """What each task of :func:`read_dataframe` runs (``spark.range(n).mapInArrow(task, schema)``): task
    ``i`` reads ``partitions[i]``. Picklable; its ``repr`` (what a plan shows) names the table and
    version, never the options."""

    def __init__(self, *, partitions: list[ReadPartition], options: StorageOptions, schema: StructType):
        self.partitions = partitions
        self.options = options
        self.schema = schema
        self.__name__ = "ReadTask"  # pyspark names the Python UDF of the plan after it

    def __repr__(self) -> str:
        first = self.partitions[0]
        return f"ReadTask(table={first.table_path}, version={first.version}, tasks={len(self.partitions)})"

    def __call__(self, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        for batch in ids:
            for index in batch.column(0).to_pylist():
                yield from read_partition(self.partitions[index], options=self.options, schema=self.schema)


def default_parallelism(spark: SparkSession) -> int | None:
    """The cores of a classic session's cluster; None for a Spark Connect session, which cannot tell."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    return spark.sparkContext.defaultParallelism


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a table's Arrow schema (nullability kept; Delta ``timestamp`` → TimestampType,
    ``timestamp_ntz`` → TimestampNTZType)."""
    return StructType([
        StructField(f.name, from_arrow_type(_open_variants(f.type), prefer_timestamp_ntz=True), nullable=f.nullable)
        for f in schema
    ])


def _open_variants(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with each variant's ``metadata`` and ``value`` nullable: under a null variant Arrow
    holds nulls there, which Spark's generated code must not take for present values."""
    if is_variant(arrow_type):
        return pa.struct([pa.field("metadata", pa.binary()), pa.field("value", pa.binary())])
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(_open_variants(f.type)) for f in arrow_type])
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_open_variants(arrow_type.value_type)))
    if pa.types.is_map(arrow_type):
        return pa.map_(arrow_type.key_field, arrow_type.item_field.with_type(_open_variants(arrow_type.item_type)))
    return arrow_type


def check_columns(schema: StructType, table_schema: pa.Schema, *, table: str) -> None:
    """The columns asked for (Spark's schema: the table's, or one given with ``.schema(...)``) must be
    columns of the table with the same types; raises InvalidArgumentError listing each difference."""
    have = {f.name: f.dataType for f in spark_schema(table_schema)}
    differences = []
    for field in schema:
        if field.name not in have:
            differences.append(f"column {field.name!r} is not in the table (columns: {', '.join(have)})")
        elif field.dataType != have[field.name]:
            differences.append(f"column {field.name!r} is {have[field.name].simpleString()} in the table, "
                               f"{field.dataType.simpleString()} in the schema given")
    if differences:
        listed = "; ".join(differences)
        raise InvalidArgumentError(f"the schema given to the read of table {table} does not fit it: {listed}. "
                                   f"Give .schema(...) a subset of the table's columns with their types, or "
                                   f"leave it out")


def plan_read_tasks(files: Sequence[AddFile], *, target_bytes: int = TARGET_TASK_BYTES, min_tasks: int = 1,
                    open_cost: int = 0) -> list[list[AddFile]]:
    """Pack files into tasks of about ``target_bytes`` each (a file weighing its size plus ``open_cost``),
    and into at least ``min_tasks`` tasks (the cluster's cores) when there are enough files: largest
    file first, each into the lightest task (a heap: O(n log n)), so that no task is much bigger than
    another. Every file belongs to exactly one task; the result is deterministic."""
    if not files:
        return []
    weight = {f.path: f.size + open_cost for f in files}
    total = sum(weight.values())
    count = max(1, min(len(files), max(min_tasks, -(-total // target_bytes))))
    tasks: list[list[AddFile]] = [[] for _ in range(count)]
    heap = [(0, i) for i in range(count)]
    for f in sorted(files, key=lambda f: (-f.size, f.path)):
        load, i = heapq.heappop(heap)
        tasks[i].append(f)
        heapq.heappush(heap, (load + weight[f.path], i))
    return [t for t in tasks if t]


@dataclass
class ReadPartition(InputPartition):
    """One read task: its own files of the table, and what reading them needs (the table's Arrow schema,
    partition columns and column mapping). Pickled to the executor that runs the task, alone."""

    index: int
    table_path: str
    version: int
    table_schema: pa.Schema
    partition_columns: tuple[str, ...]
    files: list[AddFile]
    layout: Layout | None = None  # the table's column mapping: files hold physical names

    def __post_init__(self) -> None:
        InputPartition.__init__(self, self.index)

    def __repr__(self) -> str:
        return f"ReadPartition({self.index}, {self.table_path}, {len(self.files)} files)"


def partitions_of(tasks: list[list[AddFile]], *, table_path: str, version: int, table_schema: pa.Schema,
                  partition_columns: Sequence[str], layout: Layout | None = None) -> list[ReadPartition]:
    """The read tasks of ``tasks`` (files of the table at ``version``, the newest they come from)."""
    mapped = layout if layout is not None and layout.mapped else None
    return [ReadPartition(index=i, table_path=table_path, version=version, table_schema=table_schema,
                          partition_columns=tuple(partition_columns), files=files, layout=mapped)
            for i, files in enumerate(tasks)]


def read_partition(partition: InputPartition, *, options: StorageOptions, schema: StructType,
                   filter: pc.Expression | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of one read task: the columns of ``schema`` (Spark's, in its order) of the rows of the
    partition's files that ``filter`` keeps, as batches of exactly the Arrow schema Spark expects."""
    if not isinstance(partition, ReadPartition):
        return  # Spark reads an empty table as one task with InputPartition(None)
    uri = TableUri.parse(partition.table_path)
    fs = filesystem_for(uri, options)
    # Files with deletion vectors stream through their vectors batch by batch (column mapping aside).
    streamed = [] if partition.layout is not None and partition.layout.mapped else \
        [f for f in partition.files if f.deletion_vector is not None]
    files = [f for f in partition.files if f.deletion_vector is None] if streamed else partition.files
    dataset = files_dataset(uri, partition.table_schema, partition.partition_columns, files, fs,
                            with_stats=filter is not None, layout=partition.layout)
    target = to_arrow_schema(schema)
    # Small files: one GET each through the log store's S3 client, a window ahead (table.data.read).
    objects = open_object_store(uri, storage_options=options) if uri.scheme in ("s3", "s3a") else None
    try:
        for part in fetched_windows(uri, dataset, files, objects, filter=filter):
            for batch in part.to_batches(columns=schema.fieldNames(), filter=filter, batch_size=BATCH_ROWS,
                                         use_threads=False):
                if batch.num_rows == 0:
                    continue
                yield batch if batch.schema.equals(target) else _conform(batch, target)
        for batch in surviving_batches(uri, partition.table_schema, partition.partition_columns, streamed, fs,
                                       columns=schema.fieldNames(), filter=filter, objects=objects):
            yield batch if batch.schema.equals(target) else _conform(batch, target)
    except OSError as exc:
        raise _read_error(partition, uri, options, exc) from exc


def _read_error(partition: ReadPartition, uri: TableUri, options: StorageOptions, exc: OSError) -> DynacommitError:
    """pyarrow reports a missing object as a plain OSError: on failure, the task's files are looked up
    (HEADs, on the error path only) to tell a vacuumed file from an outage."""
    objects = open_object_store(uri, storage_options=options)
    try:
        missing = next((f.path for f in partition.files if "://" not in f.path
                        and objects.head(uri.key(unquote(f.path))) is None), None)
    except (DynacommitError, OSError):
        missing = None
    if missing is not None:
        return DataFileMissingError(
            f"data file {missing} of table {uri.table_path} at version {partition.version} is gone: it was "
            f"vacuumed while this read still needed it, or deleted behind the log's back; read again (a newer "
            f"version), or keep vacuum's retention longer than your longest read or stream")
    return StorageError(f"reading the data of table {uri.table_path} at version {partition.version} failed: {exc}",
                        operation="s3:GetObject", retryable=True)


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` in Spark's Arrow schema: the types agree (checked when planning), nullability and field
    metadata may not (a NOT NULL column read through a user-given, nullable schema)."""
    return pa.Table.from_batches([batch]).cast(target).combine_chunks().to_batches()[0]
