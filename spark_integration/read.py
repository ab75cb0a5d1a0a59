"""Reading a dynacommit table into a Spark DataFrame.

The driver loads the snapshot (one DynamoDB query, the newest checkpoint and the commits after it) and
splits its files into read tasks by size (:func:`plan_read_tasks`); each Spark task reads its files with
pyarrow in the executor, straight from S3 (pyarrow's S3 filesystem built from the storage options),
restores the partition columns from the ``add`` actions with the table's types, and yields Arrow batches
in the table's schema. Only the files the snapshot references are read: a table is its log, not a
directory listing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import StructField, StructType

from logstore import StorageOptions, TableUri
from table.data.files import filesystem_for
from table.data.read import files_dataset
from table.log.actions import AddFile
from table.table import Table

__all__ = ["ReadTask", "plan_read_tasks", "read_dataframe", "spark_schema"]

TARGET_TASK_BYTES = 128 * 1024 * 1024
"""Files are packed into one task until it holds this many bytes (a larger file is a task of its own)."""
BATCH_ROWS = 64 * 1024


def read_dataframe(spark: SparkSession, uri: str, *, version: int | None = None,
                   storage_options: dict[str, str] | StorageOptions | None = None) -> DataFrame:
    """The rows of the table at ``uri`` (at ``version`` if given) as a DataFrame with the table's schema.

    Raises ``TableNotFoundError`` when there is no table (``VersionNotFoundError`` for a missing version).
    """
    options = StorageOptions.resolve(storage_options)
    table = Table(uri, version=version, storage_options=options)
    schema = table.schema
    target = spark_schema(schema)
    files = table.add_actions()
    if not files:
        return spark.createDataFrame([], target)
    tasks = plan_read_tasks(files, min_tasks=spark.sparkContext.defaultParallelism)
    reader = ReadTask(table_path=table.uri.table_path, options=options, schema=schema,
                      partition_columns=tuple(table.partition_columns), tasks=tasks, version=table.version)
    return spark.range(0, len(tasks), 1, numPartitions=len(tasks)).mapInArrow(reader, target)


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a table's Arrow schema (nullability kept; Delta ``timestamp`` → TimestampType,
    ``timestamp_ntz`` → TimestampNTZType)."""
    return StructType([
        StructField(f.name, from_arrow_type(f.type, prefer_timestamp_ntz=True), nullable=f.nullable) for f in schema
    ])


def plan_read_tasks(files: Sequence[AddFile], *, target_bytes: int = TARGET_TASK_BYTES,
                    min_tasks: int = 1) -> list[list[AddFile]]:
    """Pack files into tasks of about ``target_bytes`` each, and into at least ``min_tasks`` tasks (the
    cluster's cores) when there are enough files: largest file first, each into the emptiest task, so
    that no task is much bigger than another. Every file belongs to exactly one task."""
    total = sum(f.size for f in files)
    count = max(1, min(len(files), max(min_tasks, -(-total // target_bytes))))
    tasks: list[list[AddFile]] = [[] for _ in range(count)]
    loads = [0] * count
    for f in sorted(files, key=lambda f: (-f.size, f.path)):
        i = loads.index(min(loads))
        tasks[i].append(f)
        loads[i] += f.size
    return [t for t in tasks if t]


class ReadTask:
    """What each read task runs (``spark.range(n).mapInArrow(task, schema)``): task ``i`` reads
    ``tasks[i]``. Picklable; builds its filesystem from ``options`` in the executor; its ``repr`` names
    the table and version, never the options."""

    def __init__(self, *, table_path: str, options: StorageOptions, schema: pa.Schema,
                 partition_columns: tuple[str, ...], tasks: list[list[AddFile]], version: int):
        self.table_path = table_path
        self.options = options
        self.schema = schema
        self.partition_columns = partition_columns
        self.tasks = tasks
        self.version = version
        self.__name__ = "ReadTask"

    def __repr__(self) -> str:
        return f"ReadTask(table={self.table_path}, version={self.version}, tasks={len(self.tasks)})"

    def __call__(self, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        uri = TableUri.parse(self.table_path)
        fs = filesystem_for(uri, self.options)
        for batch in ids:
            for task_index in batch.column(0).to_pylist():
                dataset = files_dataset(uri, self.schema, self.partition_columns, self.tasks[task_index], fs)
                yield from dataset.to_batches(batch_size=BATCH_ROWS, use_threads=False)
