"""``write_table``: pyarrow data written to a table as one commit.

It is a one-task job of the staging committer: the rows stream into incomplete multipart uploads
(:mod:`table.data.staging`), then :func:`table.data.jobcommit.commit_staged`, the job commit that
Spark's driver runs too, makes them visible with one log entry.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa

from logstore import StorageOptions
from table.data.jobcommit import (
    CommitResult,
    Mode,
    PartitionOverwrite,
    TableExistsError,
    _check_existing,
    _check_mode,
    _check_not_pinned,
    already_applied,
    commit_staged,
    engine_info,
)
from table.data.staging import StagingWriter
from table.errors import SchemaMismatchError
from table.log.schema import arrow_to_delta, delta_to_arrow
from table.table import Table

__all__ = ["write_table"]

_BATCH_ROWS = 1 << 17  # rows handed to the writer at a time when the data is an in-memory table


def write_table(table_or_uri: Table | str, data: pa.Table | pa.RecordBatch | pa.RecordBatchReader, *,
                mode: Mode = "append", partition_by: Sequence[str] | None = None,
                storage_options: dict[str, str] | StorageOptions | None = None, app_id: str | None = None,
                app_version: int | None = None, configuration: Mapping[str, str] | None = None,
                partition_overwrite: PartitionOverwrite = "static") -> CommitResult:
    """Write ``data`` to the table as one commit and return its version and metrics.

    ``mode``: ``append``; ``overwrite`` (the commit removes every current file, or with
    ``partition_overwrite="dynamic"`` only the files of the partitions present in ``data``); ``error``
    (raise TableExistsError if the table exists); ``ignore`` (do nothing if it exists). A
    RecordBatchReader is streamed, never held in memory whole. Given a :class:`Table`, its snapshot is
    reused and left at the new version; given a URI, the table is opened (or created). ``partition_by``
    and ``configuration`` apply when creating; on an existing table ``partition_by`` must equal its
    partition columns. ``app_id``/``app_version`` make the write idempotent.
    """
    _check_mode(mode, partition_overwrite)
    if isinstance(table_or_uri, Table):
        if storage_options is not None:
            raise ValueError("storage_options applies to a URI; the Table already has its own")
        table = table_or_uri
    else:
        table = Table.for_write(table_or_uri, storage_options=storage_options)
    _check_not_pinned(table)
    if table.exists and mode == "error":
        raise TableExistsError(f"a table already exists at {table.uri.table_path} (version {table.version}); "
                               f"nothing was written. Use mode='append' or 'overwrite'")
    if table.exists and mode == "ignore":
        return CommitResult(version=table.version, metrics={"skipped": "true"})
    done = already_applied(table, app_id, app_version)
    if done is not None:
        return done
    schema, partitions = _target(table, _schema_of(data), partition_by)
    if table.exists:
        _check_existing(table, mode, schema, partitions, configuration)  # before uploading anything
    snapshot = table.snapshot
    config = snapshot.configuration if snapshot is not None else dict(configuration or {})
    job_id = str(uuid.uuid4())
    started = time.monotonic()
    with StagingWriter(table.objects, table.uri, schema=schema, partition_by=partitions, job_id=job_id, task_id=0,
                       num_indexed_cols=_num_indexed_cols(config)) as writer:
        for batch in _batches(data):
            writer.write(batch)
        pending = writer.finish()
    return commit_staged(table, [pending], mode=mode, partition_overwrite=partition_overwrite, app_id=app_id,
                         app_version=app_version, schema=schema, partition_by=partitions,
                         configuration=configuration, engine_info=engine_info(), job_id=job_id,
                         upload_seconds=time.monotonic() - started, sweep_strays=False)


def _schema_of(data: pa.Table | pa.RecordBatch | pa.RecordBatchReader) -> pa.Schema:
    if isinstance(data, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return data.schema
    raise TypeError(f"data must be a pyarrow Table, RecordBatch or RecordBatchReader, got {type(data).__name__}")


def _batches(data: pa.Table | pa.RecordBatch | pa.RecordBatchReader) -> Iterable[pa.RecordBatch]:
    if isinstance(data, pa.Table):
        return data.to_batches(max_chunksize=_BATCH_ROWS)
    if isinstance(data, pa.RecordBatch):
        return [data]
    return data


def _target(table: Table, data_schema: pa.Schema, partition_by: Sequence[str] | None) -> tuple[pa.Schema, list[str]]:
    """The schema and partition columns to write with: the table's, or for a new table the data's."""
    if table.snapshot is not None:
        existing = table.snapshot.partition_columns
        if partition_by is not None and list(partition_by) != existing:
            raise ValueError(f"table {table.uri.table_path} is partitioned by {existing}, not {list(partition_by)}; "
                             f"pass partition_by={existing!r} or leave it out")
        return table.snapshot.schema, existing
    partitions = list(partition_by or [])
    missing = [c for c in partitions if c not in data_schema.names]
    if missing:
        raise SchemaMismatchError([f"partition column {c!r} is missing from the data" for c in missing],
                                  table=table.uri.table_path)
    if len(set(partitions)) != len(partitions):
        raise ValueError(f"partition_by {partitions} names a column twice")
    return delta_to_arrow(arrow_to_delta(data_schema)), partitions


def _num_indexed_cols(configuration: Mapping[str, str | None]) -> int:
    raw = configuration.get("delta.dataSkippingNumIndexedCols")
    try:
        return int(raw) if raw is not None else 32
    except ValueError:
        return 32
