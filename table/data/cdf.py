"""Reading the change data feed: every row a range of versions inserted, deleted or updated (deltalake's
``load_cdf``, Spark's ``readChangeFeed``), as PROTOCOL.md's "Reader Requirements for AddCDCFile" say:

1. a version holding ``cdc`` actions is read from those change data files alone (their rows carry
   ``_change_type``: ``insert``, ``delete``, ``update_preimage``, ``update_postimage``);
2. any other version is read from its ``add`` and ``remove`` actions that change data: the rows of an
   added file are ``insert``, those of a removed file ``delete`` (a compaction's ``dataChange=false``
   files are no change), and a file kept with another deletion vector (its ``remove`` and ``add`` in one
   commit) changes by the rows whose deletion changed;
3. every row gets ``_commit_version`` and ``_commit_timestamp`` (the version's commit timestamp, as time
   travel by timestamp defines it, ``table.log.timestamps``).

Every version of the range must have the feed enabled (``delta.enableChangeDataFeed`` in the metadata in
force at that version), else the changes of the versions without it were not recorded and the read is
refused, naming the first such version (Delta's rule). Rows come version by version, in version order,
as a ``pyarrow.RecordBatchReader`` with the schema of the table at the end of the range (columns added
later are null in earlier changes). Removed files are read too: a range older than vacuum's retention
fails with ``DataFileMissingError``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from logstore.errors import ArgumentTypeError, InvalidArgumentError, VersionNotFoundError
from table.data.files import filesystem_for
from table.data.read import deleted_rows_of, files_dataset
from table.data.staging import CHANGE_TYPE
from table.errors import DataFileMissingError
from table.log import properties
from table.log.actions import Action, AddFile, Cdc, Metadata, RemoveFile
from table.log.column_mapping import Layout
from table.log.snapshot import Snapshot, advance, load_snapshot, read_commit
from table.log.timestamps import as_epoch_ms, commit_timestamps, version_at

if TYPE_CHECKING:  # the Table class uses these modules; they only take its instances
    from table.table import Table

__all__ = ["COMMIT_TIMESTAMP", "COMMIT_VERSION", "load_cdf"]

COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"


def load_cdf(table: Table, starting_version: int | None = None, ending_version: int | None = None, *,
             starting_timestamp: object = None, ending_timestamp: object = None,
             columns: Sequence[str] | None = None, allow_out_of_range: bool = False) -> pa.RecordBatchReader:
    """The changes of versions ``starting_version`` .. ``ending_version`` (default: the newest), or of the
    versions committed between the two timestamps; see the module docstring. ``columns`` picks the table's
    columns (the three change columns always come). A start past the newest version is an error, or an
    empty result with ``allow_out_of_range``."""
    newest = table.snapshot
    if newest is None:
        raise VersionNotFoundError(f"no table at {table.uri.table_path}: it has no change data")
    if newest.time_travel:
        newest = load_snapshot(table.log_store)
    log = table.log_store
    start = _version_argument("starting_version", starting_version)
    end = _version_argument("ending_version", ending_version)
    if starting_timestamp is not None:
        if start is not None:
            raise InvalidArgumentError("give starting_version or starting_timestamp, not both")
        start = _first_at_or_after(table, newest, starting_timestamp)
    if ending_timestamp is not None:
        if end is not None:
            raise InvalidArgumentError("give ending_version or ending_timestamp, not both")
        end = version_at(log, newest, ending_timestamp)
    start = 0 if start is None else start
    end = newest.version if end is None else end
    if start > newest.version or start > end:
        if allow_out_of_range and start > newest.version:
            return pa.RecordBatchReader.from_batches(_schema(newest, columns), [])
        raise VersionNotFoundError(
            f"the change data of table {table.uri.table_path} from version {start} to {end} cannot be read: "
            f"its versions go up to {newest.version}" + ("" if start <= end else "; the start is after the end"))
    if end > newest.version:
        if not allow_out_of_range:
            raise VersionNotFoundError(f"ending_version {end} of table {table.uri.table_path} does not exist; its "
                                       f"versions go up to {newest.version}")
        end = newest.version
    final = load_snapshot(log, end) if end != newest.version else newest
    schema = _schema(final, columns)
    return pa.RecordBatchReader.from_batches(schema, _changes(table, newest, start, end, schema, columns,
                                                              final.layout))


def _version_argument(name: str, value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ArgumentTypeError(f"{name} must be a version (an int >= 0), got {value!r}")
    return value


def _first_at_or_after(table: Table, newest: Snapshot, moment: object) -> int:
    """The first version committed at or after ``moment`` (Delta's start of a timestamp range)."""
    target = as_epoch_ms(moment)
    try:
        before = version_at(table.log_store, newest, dt.datetime.fromtimestamp((target - 1) / 1000,
                                                                                 tz=dt.timezone.utc))
    except VersionNotFoundError:
        return 0
    return before + 1


def _schema(snapshot: Snapshot, columns: Sequence[str] | None) -> pa.Schema:
    fields = list(snapshot.schema) if columns is None else [snapshot.schema.field(c) for c in columns]
    return pa.schema([*fields, pa.field(CHANGE_TYPE, pa.string()), pa.field(COMMIT_VERSION, pa.int64()),
                      pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"))])


def _changes(table: Table, newest: Snapshot, start: int, end: int, schema: pa.Schema,
             columns: Sequence[str] | None, layout: Layout) -> Iterator[pa.RecordBatch]:
    """``layout``: the column mapping of the last version read. With column mapping, files of every version
    are read through it: physical names never change, so a column renamed since comes under its new name."""
    log = table.log_store
    state = load_snapshot(log, start - 1) if start > 0 else None
    enabled = state is not None and properties.change_data_feed(state.configuration)
    stamp_of = commit_timestamps(log, newest)
    for version in range(start, end + 1):
        actions = read_commit(log, version)
        metadata = next((a for a in actions if isinstance(a, Metadata)), None)
        if metadata is not None:
            enabled = properties.change_data_feed(metadata.configuration)
        if not enabled:
            raise InvalidArgumentError(
                f"table {table.uri.table_path} did not record change data at version {version} "
                f"(delta.enableChangeDataFeed is not true there); read changes from a later version")
        before = state
        state = advance(state, [(version, actions)], table_path=log.table_path)
        stamp = pa.scalar(stamp_of(version, actions) * 1000, pa.timestamp("us", tz="UTC"))
        for rows in _version_rows(table, before, state, actions, columns, layout):
            if rows.num_rows:
                yield from _stamped(rows, version, stamp, schema).to_batches()


def _version_rows(table: Table, before: Snapshot | None, after: Snapshot, actions: Sequence[Action],
                  columns: Sequence[str] | None, layout: Layout) -> Iterator[pa.Table]:
    changes = [a for a in actions if isinstance(a, Cdc)]
    if changes:
        files = [AddFile(path=c.path, partition_values=c.partition_values, size=c.size, modification_time=0,
                         data_change=False) for c in changes]
        schema = after.schema.append(pa.field(CHANGE_TYPE, pa.string()))
        yield _read(table, after, files, schema, columns, layout, change_type=None)
        return
    added = [a for a in actions if isinstance(a, AddFile) and a.data_change]
    removed = [a for a in actions if isinstance(a, RemoveFile) and a.data_change]
    revectored = {a.path for a in added} & {r.path for r in removed}
    if revectored and before is not None:
        # A file kept with another deletion vector: its changes are the rows whose deletion changed.
        yield from _vector_changes(table, before, after, [a for a in added if a.path in revectored], columns,
                                   layout)
        added = [a for a in added if a.path not in revectored]
        removed = [r for r in removed if r.path not in revectored]
    if added:
        yield _read(table, after, added, after.schema, columns, layout, change_type="insert")
    if removed:
        live = {} if before is None else before.state.files
        files = []
        for remove in removed:
            found = live.get(remove.path) if live else None
            if found is None and remove.partition_values is None:
                continue  # a file the table did not hold: nothing of it was deleted
            files.append(found if found is not None else AddFile(
                path=remove.path, partition_values=remove.partition_values or {}, size=remove.size or 0,
                modification_time=0, data_change=True))
        if files:
            yield _read(table, before or after, files, (before or after).schema, columns, layout,
                        change_type="delete")


def _vector_changes(table: Table, before: Snapshot, after: Snapshot, kept: list[AddFile],
                    columns: Sequence[str] | None, layout: Layout) -> Iterator[pa.Table]:
    """The rows of files kept with a new deletion vector: ``delete`` for those the new vector deletes and
    the old one did not, ``insert`` for the reverse."""
    fs = filesystem_for(table.uri, table.storage_options)
    for new in kept:
        old = before.state.files.get(new.path)
        old_rows = deleted_rows_of(table.uri, fs, old) if old is not None and old.deletion_vector else BitMap64()
        new_rows = deleted_rows_of(table.uri, fs, new) if new.deletion_vector is not None else BitMap64()
        whole = _read(table, after, [new.model_copy(update={"deletion_vector": None})], after.schema, columns,
                      layout, change_type=None, plain=True)
        for rows, kind in ((new_rows - old_rows, "delete"), (old_rows - new_rows, "insert")):
            if rows:
                positions = pa.array(np.fromiter(rows, dtype=np.int64, count=len(rows)))
                chosen = whole.take(positions)
                yield chosen.append_column(CHANGE_TYPE, pa.array([kind] * chosen.num_rows, pa.string()))


def _read(table: Table, snapshot: Snapshot, files: list[AddFile], schema: pa.Schema, columns: Sequence[str] | None,
          layout: Layout, change_type: str | None, plain: bool = False) -> pa.Table:
    fs = filesystem_for(table.uri, table.storage_options)
    layout = layout if layout.mapped else snapshot.layout
    if layout.mapped:  # files hold physical names; change data files add _change_type, which is not mapped
        if CHANGE_TYPE in schema.names and CHANGE_TYPE not in layout.logical.names:
            layout = layout.with_unmapped(schema.field(CHANGE_TYPE))
        named = {physical: logical for logical, physical in layout.names.items()}
        partitions = [named[p] for p in snapshot.layout.physical_columns(snapshot.partition_columns) if p in named]
        dataset = files_dataset(table.uri, layout.logical, partitions, files, fs, layout=layout)
    else:
        dataset = files_dataset(table.uri, schema, snapshot.partition_columns, files, fs)
    wanted = None if columns is None else [*columns, *([CHANGE_TYPE] if change_type is None and not plain else [])]
    try:
        rows = dataset.to_table(columns=wanted)
    except FileNotFoundError as exc:
        raise DataFileMissingError(
            f"a file of table {table.uri.table_path} that the change data of version {snapshot.version} needs is "
            f"gone ({exc}): it was vacuumed; read changes of versions within vacuum's retention") from exc
    if change_type is not None:
        rows = rows.append_column(CHANGE_TYPE, pa.array([change_type] * rows.num_rows, pa.string()))
    return rows


def _stamped(rows: pa.Table, version: int, stamp: pa.Scalar, schema: pa.Schema) -> pa.Table:
    rows = rows.append_column(COMMIT_VERSION, pa.array([version] * rows.num_rows, pa.int64()))
    rows = rows.append_column(COMMIT_TIMESTAMP, pc.cast(pa.array([stamp.value] * rows.num_rows, pa.int64()),
                                                        pa.timestamp("us", tz="UTC")))
    out = []
    for field in schema:
        if field.name in rows.column_names:
            column = rows.column(field.name)
            out.append(column if column.type == field.type else column.cast(field.type))
        else:
            out.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(out, schema=schema)
