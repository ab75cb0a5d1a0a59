"""``write_table``: pyarrow data written to a table as one commit.

It is a one-task job of the staging committer: every argument is checked and the table consulted
(:class:`~table.data.writespec.WriteSpec`) before a byte is uploaded; then the rows stream into
incomplete multipart uploads (:mod:`table.data.staging`), and :func:`table.data.jobcommit.commit_staged`,
the job commit that Spark's driver runs too, makes them visible with one log entry.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa

from logstore import StorageOptions
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.compression import codec as compression_codec
from table.data.jobcommit import commit_staged, engine_info
from table.data.staging import StagingWriter
from table.data.writer_settings import WriterSettings
from table.data.writespec import CommitResult, WriteSpec
from table.location import TableLocation
from table.log import properties
from table.transaction import Opens, Transaction, snapshot_for_write

__all__ = ["write_table"]

_BATCH_ROWS = 1 << 17  # rows handed to the writer at a time when the data is an in-memory table


def write_table(table_or_uri: Opens | str, data: pa.Table | pa.RecordBatch | pa.RecordBatchReader, *,
                mode: str = "append", partition_by: Sequence[str] | None = None,
                storage_options: dict[str, str] | StorageOptions | None = None, app_id: str | None = None,
                app_version: int | None = None, configuration: Mapping[str, str] | None = None,
                partition_overwrite: str = "static", user_metadata: str | None = None,
                schema_mode: str | None = None, compression: str | None = None,
                predicate: str | None = None, cluster_by: Sequence[str] | None = None,
                replace_on: str | None = None, replace_using: str | Sequence[str] | None = None,
                source_alias: str | None = None, target_alias: str | None = None) -> CommitResult:
    """Write ``data`` to the table as one commit and return its :class:`~table.data.writespec.CommitResult`:
    the version, typed :class:`~table.log.metrics.WriteMetrics` and the table's snapshot at that version.

    ``mode``: ``append``; ``overwrite`` (the commit removes every current file, or with
    ``partition_overwrite="dynamic"`` only the files of the partitions present in ``data``); ``error``
    (raise TableExistsError if the table exists); ``ignore`` (do nothing if it exists). A
    RecordBatchReader is streamed, never held in memory whole. Given a :class:`Table`, its snapshot is
    reused and left at the new version; given a URI, the table is opened (or created). ``partition_by``
    and ``configuration`` apply when creating; on an existing table ``partition_by`` must equal its
    partition columns. ``app_id``/``app_version`` make the write idempotent. ``user_metadata`` goes into
    the commit's ``commitInfo.userMetadata``.

    ``schema_mode="merge"`` evolves the table's schema to hold the data (Delta's ``mergeSchema``): the data's
    new columns are added, nullable, at the end; ``byte``/``short``/``integer`` columns widen; the table's
    columns the data lacks are written as nulls. ``schema_mode="overwrite"`` (with ``mode="overwrite"``)
    replaces the schema, and with ``partition_by`` the partitioning (Delta's ``overwriteSchema``).

    ``predicate`` (with ``mode="overwrite"``): replace only the rows this SQL predicate selects (deltalake's
    ``predicate``, Spark's ``replaceWhere``); every row of ``data`` must satisfy it
    (:mod:`table.operations.replace_where`).

    ``replace_on`` / ``replace_using`` (with ``mode="overwrite"``; Delta's ``replaceOn`` / ``replaceUsing``):
    replace the table's rows that match a row of ``data`` (``replace_on``: a SQL condition over the table's row,
    qualified by ``target_alias``, default ``target``, and the data's, by ``source_alias``, default ``source``;
    ``replace_using``: columns compared with ``=``) and add ``data``, in one commit
    (:mod:`table.operations.replace_on`).

    ``cluster_by`` (when creating): the table's liquid clustering columns (delta-spark's ``clusterBy``): the
    table gets the ``clustering`` feature and its ``delta.clustering`` domain, and ``Table.optimize()``
    clusters its files by them (:mod:`table.log.clustering`). Not with ``partition_by``.

    ``compression``: the data files' Parquet codec, as Spark's Parquet option names it (``snappy``, the
    default; ``zstd``, ``gzip``, ``lz4``, ``lz4_raw``, ``brotli``, ``none``; :mod:`table.compression`).
    """
    codec = compression_codec(compression) if compression is not None else None  # a bad name fails here
    spec = WriteSpec.of(mode=mode, partition_by=partition_by, partition_overwrite=partition_overwrite, app_id=app_id,
                        app_version=app_version, configuration=configuration, user_metadata=user_metadata,
                        schema_mode=schema_mode, cluster_by=cluster_by)
    schema = _schema_of(data)
    if isinstance(table_or_uri, str):
        # A blind append by URI may start from this process's last snapshot: its commit checks the version.
        location = TableLocation.open(table_or_uri, storage_options)
        table = Transaction(location, snapshot_for_write(location, reuse=spec.mode == "append"))
    elif callable(getattr(table_or_uri, "transaction", None)):  # a Table: the write runs in a transaction it opens
        if storage_options is not None:
            raise InvalidArgumentError("storage_options applies to a URI; the Table already has its own")
        # An append that reads nothing may go past versions the Table's last commit left unread (Table.transaction).
        appending = (spec.mode == "append" and spec.app_id is None and spec.schema_mode is None and predicate is None
                     and replace_on is None and replace_using is None)
        table = table_or_uri.transaction(appending=True) if appending else table_or_uri.transaction()
    else:
        raise ArgumentTypeError(f"write_table needs a table URI (str) or a Table, got {type(table_or_uri).__name__}")
    replacing = replace_on is not None or replace_using is not None
    if replacing:
        from table.operations import replace_on as replace_on_op

        replace_on_op.check_spec(table, spec, on=replace_on, using=replace_using, replace_where=predicate)
    elif source_alias is not None or target_alias is not None:
        raise InvalidArgumentError("source_alias and target_alias name the two sides of replace_on; give "
                                   "replace_on too, or leave them out")
    if predicate is not None and not replacing:
        from table.operations.replace_where import check_spec

        check_spec(table, spec)
    plan = spec.plan(table, schema)
    if plan.done is not None:
        return plan.done
    if replacing:
        return replace_on_op.replace_on(table, (plan.conform(batch) for batch in _batches(data)), spec, plan,
                                        data_schema=schema, on=replace_on, using=replace_using,
                                        source_alias=source_alias, target_alias=target_alias, codec=codec)
    if predicate is not None:
        from table.operations.replace_where import replace_where

        return replace_where(table, (plan.conform(batch) for batch in _batches(data)), spec, plan,
                             predicate=predicate, codec=codec)
    settings = WriterSettings.of(plan.configuration, compression=codec)
    job_id = str(uuid.uuid4())
    started = time.monotonic()
    with StagingWriter(table.objects, table.uri, schema=plan.schema, partition_by=plan.partition_by, layout=plan.layout,
                       job_id=job_id,
                       task_id=0, settings=settings, hold_small_files=not plan.rules.identity,
                       rules=plan.rules) as writer:
        for batch in _batches(data):
            writer.write(plan.conform(batch))
        pending = writer.finish()
    return commit_staged(table, [pending], spec, plan, job_id=job_id, engine_info=engine_info(),
                         upload_seconds=time.monotonic() - started, sweep_strays=writer.stray_uploads_possible)


def _schema_of(data: pa.Table | pa.RecordBatch | pa.RecordBatchReader) -> pa.Schema:
    if isinstance(data, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return data.schema
    raise ArgumentTypeError(f"data must be a pyarrow Table, RecordBatch or RecordBatchReader, got "
                            f"{type(data).__name__}; convert it first (e.g. pa.Table.from_pandas(df))")


def _batches(data: pa.Table | pa.RecordBatch | pa.RecordBatchReader) -> Iterable[pa.RecordBatch]:
    if isinstance(data, pa.Table):
        return data.to_batches(max_chunksize=_BATCH_ROWS)
    if isinstance(data, pa.RecordBatch):
        return [data]
    return data
