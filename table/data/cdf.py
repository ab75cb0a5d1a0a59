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

:func:`load_cdf` is :func:`plan_cdf` (the range resolved to versions, nothing read) then :func:`read_changes`
over the whole range; a distributed read (Spark's ``readChangeFeed``) plans once and has each task read
some of the versions, getting the same rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyroaring import BitMap64

from logstore import LogStore, StorageOptions, TableUri, open_log_store
from logstore.errors import ArgumentTypeError, DynacommitError, InvalidArgumentError, VersionNotFoundError
from table.data.files import filesystem_for
from table.data.read import deleted_rows_of, files_dataset
from table.data.staging import CHANGE_TYPE
from table.errors import DataFileMissingError
from table.log import properties
from table.log.actions import Action, AddFile, Cdc, Metadata, RemoveFile
from table.log.column_mapping import Layout
from table.log.schema import arrow_type_to_delta, widening_allowed
from table.log.schema_arrow import null_array
from table.log.snapshot import Snapshot, advance, load_snapshot, read_commit
from table.log.timestamps import commit_timestamps, first_at_or_after, version_at
from table.transaction import TableView

__all__ = ["COMMIT_TIMESTAMP", "COMMIT_VERSION", "ChangeFeed", "change_schema", "load_cdf", "plan_cdf",
           "read_changes"]

COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"


@dataclass(frozen=True)
class ChangeFeed:
    """A range of the change data feed, resolved: its versions, the schema and column mapping they are read
    under (the last version's), and what reading them needs. Plain picklable data: Spark's read tasks each
    read some of its versions (:func:`read_changes`) and get the rows :func:`load_cdf` gives for them."""

    table_path: str
    storage_options: StorageOptions
    start: int
    end: int  # below start: nothing to read (a start past the newest version, with allow_out_of_range)
    schema: pa.Schema  # the columns read, then _change_type, _commit_version, _commit_timestamp
    columns: tuple[str, ...] | None
    layout: Layout
    configuration: Mapping[str, str | None]  # the newest version's: says which commit timestamps are in-commit

    @property
    def versions(self) -> range:
        return range(self.start, self.end + 1)

    def with_columns(self, columns: Sequence[str]) -> ChangeFeed:
        """The same range, reading only ``columns`` of the table's (the three change columns always come)."""
        table_columns = pa.schema(list(self.schema)[:-3])
        unknown = [c for c in columns if c not in table_columns.names]
        if unknown:
            raise InvalidArgumentError(f"columns {unknown} are not columns of the change data feed read of table "
                                       f"{self.table_path}: its columns are {table_columns.names}")
        return dataclasses.replace(self, columns=tuple(columns),
                                   schema=change_schema(pa.schema([table_columns.field(c) for c in columns])))


def load_cdf(table: TableView, starting_version: int | None = None, ending_version: int | None = None, *,
             starting_timestamp: object = None, ending_timestamp: object = None,
             columns: Sequence[str] | None = None, allow_out_of_range: bool = False) -> pa.RecordBatchReader:
    """The changes of versions ``starting_version`` .. ``ending_version`` (default: the newest), or of the
    versions committed between the two timestamps; see the module docstring. ``columns`` picks the table's
    columns (the three change columns always come). A start past the newest version is an error, or an
    empty result with ``allow_out_of_range``."""
    feed = plan_cdf(table, starting_version, ending_version, starting_timestamp=starting_timestamp,
                    ending_timestamp=ending_timestamp, columns=columns, allow_out_of_range=allow_out_of_range)
    fs = filesystem_for(table.uri, table.storage_options)
    return pa.RecordBatchReader.from_batches(feed.schema, _changes(feed, table.uri, table.log_store, fs,
                                                                   feed.start, feed.end))


def plan_cdf(table: TableView, starting_version: int | None = None, ending_version: int | None = None, *,
             starting_timestamp: object = None, ending_timestamp: object = None,
             columns: Sequence[str] | None = None, allow_out_of_range: bool = False) -> ChangeFeed:
    """The range :func:`load_cdf` reads (same arguments, same errors), resolved to versions without reading
    any change: what a distributed read plans before its tasks read the versions."""
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
        start = first_at_or_after(log, newest, starting_timestamp)
    if ending_timestamp is not None:
        if end is not None:
            raise InvalidArgumentError("give ending_version or ending_timestamp, not both")
        end = version_at(log, newest, ending_timestamp)
    start = 0 if start is None else start
    end = newest.version if end is None else end
    if start > newest.version or start > end:
        if allow_out_of_range and start > newest.version:
            return _feed(table, newest, newest, start, newest.version, columns)
        raise VersionNotFoundError(
            f"the change data of table {table.uri.table_path} from version {start} to {end} cannot be read: "
            f"its versions go up to {newest.version}" + ("" if start <= end else "; the start is after the end"))
    if end > newest.version:
        if not allow_out_of_range:
            raise VersionNotFoundError(f"ending_version {end} of table {table.uri.table_path} does not exist; its "
                                       f"versions go up to {newest.version}")
        end = newest.version
    final = load_snapshot(log, end) if end != newest.version else newest
    return _feed(table, newest, final, start, end, columns)


def read_changes(feed: ChangeFeed, first: int | None = None, last: int | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of versions ``first`` .. ``last`` of ``feed`` (default: all of it), in version order, in
    ``feed.schema``: exactly those :func:`load_cdf` gives for these versions, read wherever this runs."""
    first = feed.start if first is None else first
    last = feed.end if last is None else last
    if first < feed.start or last > feed.end:
        raise InvalidArgumentError(f"versions {first}..{last} are not in the change data feed read "
                                   f"({feed.start}..{feed.end}) of table {feed.table_path}")
    uri = TableUri.parse(feed.table_path)
    log = open_log_store(uri, storage_options=feed.storage_options)
    yield from _changes(feed, uri, log, filesystem_for(uri, feed.storage_options), first, last)


def change_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` (a table's columns) followed by the change feed's three columns."""
    return pa.schema([*schema, pa.field(CHANGE_TYPE, pa.string()), pa.field(COMMIT_VERSION, pa.int64()),
                      pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"))])


def _feed(table: TableView, newest: Snapshot, final: Snapshot, start: int, end: int,
          columns: Sequence[str] | None) -> ChangeFeed:
    return ChangeFeed(table_path=table.uri.table_path, storage_options=table.storage_options, start=start, end=end,
                      schema=_schema(final, columns), columns=None if columns is None else tuple(columns),
                      layout=final.layout, configuration=dict(newest.configuration))


def _version_argument(name: str, value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ArgumentTypeError(f"{name} must be a version (an int >= 0), got {value!r}")
    return value


def _schema(snapshot: Snapshot, columns: Sequence[str] | None) -> pa.Schema:
    if columns is not None:
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise ArgumentTypeError(f"columns must be a list of column names, got {columns!r}")
        unknown = [c for c in columns if c not in snapshot.schema.names]
        if unknown:
            raise InvalidArgumentError(f"columns {unknown} are not columns of the table at version "
                                       f"{snapshot.version}: its columns are {snapshot.schema.names}")
    return change_schema(pa.schema(list(snapshot.schema) if columns is None
                                   else [snapshot.schema.field(c) for c in columns]))


def _changes(feed: ChangeFeed, uri: TableUri, log: LogStore, fs: pafs.FileSystem, start: int,
             end: int) -> Iterator[pa.RecordBatch]:
    """The rows of versions ``start`` .. ``end``. With column mapping, files of every version are read
    through the last version's mapping (``feed.layout``): physical names never change, so a column
    renamed since comes under its new name."""
    if start > end:
        return
    layout, schema, columns = feed.layout, feed.schema, feed.columns
    state = load_snapshot(log, start - 1) if start > 0 else None
    enabled = state is not None and properties.change_data_feed(state.configuration)
    if state is not None:
        _check_schema(uri, state, layout, start)
    stamp_of = commit_timestamps(log, feed.configuration)
    for version in range(start, end + 1):
        actions = read_commit(log, version)
        metadata = next((a for a in actions if isinstance(a, Metadata)), None)
        if metadata is not None:
            enabled = properties.change_data_feed(metadata.configuration)
        if not enabled:
            raise InvalidArgumentError(
                f"table {uri.table_path} did not record change data at version {version} "
                f"(delta.enableChangeDataFeed is not true there); read changes from a later version")
        before = state
        state = advance(state, [(version, actions)], table_path=log.table_path)
        if metadata is not None:
            _check_schema(uri, state, layout, version)
        stamp = pa.scalar(stamp_of(version, actions) * 1000, pa.timestamp("us", tz="UTC"))
        for rows in _version_rows(uri, fs, before, state, actions, columns, layout):
            if rows.num_rows:
                yield from _stamped(rows, version, stamp, schema).to_batches()


def _check_schema(uri: TableUri, state: Snapshot, last: Layout, version: int) -> None:
    """Refuse a range over which a column is dropped, replaced or changed to a type its values do not widen
    to: rows of ``version`` cannot be given under the last version's schema (Delta refuses such ranges
    too). Columns added and renamed since (column mapping) are fine: added ones read as null, renamed ones
    under their new names."""
    final = {last.physical_name(f.name): f for f in last.logical}
    problems = []
    for field in state.layout.logical:
        now = final.get(state.layout.physical_name(field.name))
        if now is None:
            problems.append(f"column {field.name!r} is not in the table's schema at the last version read")
        elif now.type != field.type and not _widens(field.type, now.type):
            problems.append(f"column {field.name!r} is {field.type} there and {now.type} at the last version read")
    if problems:
        raise InvalidArgumentError(
            f"the change data of table {uri.table_path} cannot be read from version {version} to the last "
            f"version read under one schema: at version {version} {'; '.join(problems)} (a column was dropped, "
            f"replaced or changed in between); read the changes before and after that schema change separately")


_INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


def _widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is one of ``new``: the widenings a schema merge makes and those of
    type widening (``table.log.schema.widening_allowed``), in nested fields too (a struct may gain fields)."""
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(old) <= _INTEGERS.index(new)
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        inner = {new.field(i).name: new.field(i).type for i in range(new.num_fields)}
        return all(old.field(i).name in inner and (old.field(i).type == inner[old.field(i).name] or
                                                   _widens(old.field(i).type, inner[old.field(i).name]))
                   for i in range(old.num_fields))
    if pa.types.is_map(old) and pa.types.is_map(new):
        return all(a == b or _widens(a, b) for a, b in ((old.key_type, new.key_type), (old.item_type, new.item_type)))
    if pa.types.is_list(old) and pa.types.is_list(new):
        return old.value_type == new.value_type or _widens(old.value_type, new.value_type)
    try:
        before, after = arrow_type_to_delta(old, column="?"), arrow_type_to_delta(new, column="?")
    except DynacommitError:
        return False
    return isinstance(before, str) and isinstance(after, str) and widening_allowed(before, after)


def _version_rows(uri: TableUri, fs: pafs.FileSystem, before: Snapshot | None, after: Snapshot,
                  actions: Sequence[Action], columns: Sequence[str] | None, layout: Layout) -> Iterator[pa.Table]:
    changes = [a for a in actions if isinstance(a, Cdc)]
    if changes:
        files = [AddFile(path=c.path, partition_values=c.partition_values, size=c.size, modification_time=0,
                         data_change=False) for c in changes]
        schema = after.schema.append(pa.field(CHANGE_TYPE, pa.string()))
        yield _read(uri, fs, after, files, schema, columns, layout, change_type=None)
        return
    added = [a for a in actions if isinstance(a, AddFile) and a.data_change]
    removed = [a for a in actions if isinstance(a, RemoveFile) and a.data_change]
    revectored = {a.path for a in added} & {r.path for r in removed}
    if revectored and before is not None:
        # A file kept with another deletion vector: its changes are the rows whose deletion changed.
        yield from _vector_changes(uri, fs, before, after, [a for a in added if a.path in revectored], columns,
                                   layout)
        added = [a for a in added if a.path not in revectored]
        removed = [r for r in removed if r.path not in revectored]
    if added:
        yield _read(uri, fs, after, added, after.schema, columns, layout, change_type="insert")
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
            yield _read(uri, fs, before or after, files, (before or after).schema, columns, layout,
                        change_type="delete")


def _vector_changes(uri: TableUri, fs: pafs.FileSystem, before: Snapshot, after: Snapshot, kept: list[AddFile],
                    columns: Sequence[str] | None, layout: Layout) -> Iterator[pa.Table]:
    """The rows of files kept with a new deletion vector: ``delete`` for those the new vector deletes and
    the old one did not, ``insert`` for the reverse."""
    for new in kept:
        old = before.state.files.get(new.path)
        old_rows = deleted_rows_of(uri, fs, old) if old is not None and old.deletion_vector else BitMap64()
        new_rows = deleted_rows_of(uri, fs, new) if new.deletion_vector is not None else BitMap64()
        whole = _read(uri, fs, after, [new.model_copy(update={"deletion_vector": None})], after.schema, columns,
                      layout, change_type=None, plain=True)
        for rows, kind in ((new_rows - old_rows, "delete"), (old_rows - new_rows, "insert")):
            if rows:
                positions = pa.array(np.fromiter(rows, dtype=np.int64, count=len(rows)))
                chosen = whole.take(positions)
                yield chosen.append_column(CHANGE_TYPE, pa.array([kind] * chosen.num_rows, pa.string()))


def _read(uri: TableUri, fs: pafs.FileSystem, snapshot: Snapshot, files: list[AddFile], schema: pa.Schema,
          columns: Sequence[str] | None, layout: Layout, change_type: str | None, plain: bool = False) -> pa.Table:
    layout = layout if layout.mapped else snapshot.layout
    if layout.mapped:  # files hold physical names; change data files add _change_type, which is not mapped
        if CHANGE_TYPE in schema.names and CHANGE_TYPE not in layout.logical.names:
            layout = layout.with_unmapped(schema.field(CHANGE_TYPE))
        named = {physical: logical for logical, physical in layout.names.items()}
        partitions = [named[p] for p in snapshot.layout.physical_columns(snapshot.partition_columns) if p in named]
        dataset = files_dataset(uri, layout.logical, partitions, files, fs, layout=layout)
    else:
        dataset = files_dataset(uri, schema, snapshot.partition_columns, files, fs)
    # A column added after this version is not in its files: it is filled with nulls afterwards (_stamped).
    wanted = None if columns is None else [c for c in [*columns, *([CHANGE_TYPE] if change_type is None and not plain
                                                                   else [])] if c in dataset.schema.names]
    try:
        rows = dataset.to_table(columns=wanted)
    except FileNotFoundError as exc:
        raise DataFileMissingError(
            f"a file of table {uri.table_path} that the change data of version {snapshot.version} needs is "
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
            out.append(null_array(rows.num_rows, field.type))
    return pa.Table.from_arrays(out, schema=schema)
