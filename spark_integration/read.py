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
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import StructField, StructType

from logstore import StorageOptions, TableUri
from table.fs import data_path, filesystem_for
from table.schema import arrow_type_to_delta, parse_partition_value
from table.table import Table

__all__ = ["FileToRead", "ReadTask", "plan_read_tasks", "read_dataframe", "spark_schema"]

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
    files = [FileToRead(add.path, dict(add.partition_values), add.size) for add in table.add_actions()]
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


@dataclass(frozen=True)
class FileToRead:
    path: str  # the add action's path: relative to the table root, URI-encoded
    partition_values: dict[str, str | None]
    size: int


def plan_read_tasks(files: Sequence[FileToRead], *, target_bytes: int = TARGET_TASK_BYTES,
                    min_tasks: int = 1) -> list[list[FileToRead]]:
    """Pack files into tasks of about ``target_bytes`` each, and into at least ``min_tasks`` tasks (the
    cluster's cores) when there are enough files: largest file first, each into the emptiest task, so
    that no task is much bigger than another. Every file belongs to exactly one task."""
    total = sum(f.size for f in files)
    count = max(1, min(len(files), max(min_tasks, -(-total // target_bytes))))
    tasks: list[list[FileToRead]] = [[] for _ in range(count)]
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
                 partition_columns: tuple[str, ...], tasks: list[list[FileToRead]], version: int):
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
                for file in self.tasks[task_index]:
                    yield from self.read_file(uri, fs, file)

    def read_file(self, uri: TableUri, fs, file: FileToRead) -> Iterator[pa.RecordBatch]:
        """The file's rows in the table schema: partition columns from its ``add``, missing columns null."""
        partition = {c: self._partition_scalar(c, file.partition_values.get(c)) for c in self.partition_columns}
        with fs.open_input_file(_object_path(uri, file.path)) as handle:
            parquet = pq.ParquetFile(handle)
            file_names = set(parquet.schema_arrow.names)
            columns = [f.name for f in self.schema if f.name in file_names and f.name not in partition]
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns, use_threads=False):
                yield self._conform(batch, partition)

    def _conform(self, batch: pa.RecordBatch, partition: dict[str, pa.Scalar]) -> pa.RecordBatch:
        arrays = []
        for field in self.schema:
            if field.name in partition:
                arrays.append(pa.repeat(partition[field.name], batch.num_rows))
            elif field.name in batch.schema.names:
                arrays.append(batch.column(field.name).cast(field.type))
            else:
                arrays.append(pa.nulls(batch.num_rows, type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _partition_scalar(self, column: str, value: str | None) -> pa.Scalar:
        field = self.schema.field(column)
        parsed = parse_partition_value(value, arrow_type_to_delta(field.type, column=column))
        return pa.scalar(parsed, type=field.type)


def _object_path(uri: TableUri, path: str) -> str:
    """The filesystem path (``bucket/key``) of an ``add.path``: relative to the table root and URI-encoded,
    or (some writers, shallow clones) an absolute URI in the same store."""
    if "://" in path:
        scheme, _, rest = path.partition("://")
        if scheme not in ("s3", "s3a", "s3n", uri.scheme):
            raise FileNotFoundError(f"data file {path!r} of table {uri.table_path} is not in S3; it cannot be read")
        return unquote(rest)
    return data_path(uri, uri.key(unquote(path)))
