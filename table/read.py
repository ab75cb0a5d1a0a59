"""Reading a table's rows with pyarrow: exactly the snapshot's files, typed partition columns, pruning.

A Delta table is not a directory of Parquet files: files under the table that the log does not
reference (an aborted job's, a removed file awaiting VACUUM) must not be read, and partition values
live in the log, typed by the table schema, not in directory names (which are escaped and may be
anything). So the dataset is built from the snapshot's ``add`` actions, one fragment per file, each
with a ``partition_expression`` (``p == 5``, ``is_null(q)``) from its typed partition values: pyarrow
fills a partition column from that expression, and skips the fragment when a filter contradicts it.

``to_pyarrow_table`` prunes further, before opening anything: files whose partition values or
min/max/nullCount stats show that no row can match the filter are left out (``table.stats``), then
the full filter is applied to the rows read.
"""

from __future__ import annotations

from typing import Any, Protocol as TypingProtocol
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from logstore import StorageOptions, TableUri
from logstore.errors import TableNotFoundError
from table.actions import AddFile
from table.errors import UnsupportedFeatureError
from table.fs import data_path, filesystem_for
from table.schema import arrow_type_to_delta, parse_partition_value
from table.snapshot import Snapshot
from table.stats import file_may_match, predicates_from_expression

__all__ = ["prune_files", "to_pyarrow_dataset", "to_pyarrow_table"]


class _Readable(TypingProtocol):
    """What reading needs of a :class:`table.table.Table` (kept structural: ``table.table`` imports us)."""

    @property
    def uri(self) -> TableUri: ...

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def storage_options(self) -> StorageOptions: ...


def to_pyarrow_dataset(table: _Readable, *, filesystem: pafs.FileSystem | None = None) -> ds.Dataset:
    """A dataset over exactly the files of ``table``'s snapshot, schema = the table schema in table order.

    ``filesystem`` replaces the one built from the table's storage options (paths are ``bucket/key``).
    """
    snapshot = _snapshot(table)
    return _dataset(table, snapshot, snapshot.files, filesystem)


def to_pyarrow_table(table: _Readable, columns: list[str] | None = None, filter: pc.Expression | None = None, *,
                     filesystem: pafs.FileSystem | None = None) -> pa.Table:
    """The rows of ``table`` (``columns`` in the order given, default all), those matching ``filter``.

    Files that provably hold no matching row are not opened. An empty table gives an empty result
    with the table's schema.
    """
    if filter is not None and not isinstance(filter, pc.Expression):
        raise TypeError(f"filter must be a pyarrow.compute.Expression (e.g. pc.field('x') > 1), got {type(filter).__name__}")
    snapshot = _snapshot(table)
    files = prune_files(snapshot, filter) if filter is not None else snapshot.files
    dataset = _dataset(table, snapshot, files, filesystem)
    return dataset.to_table(columns=columns, filter=filter)


def prune_files(snapshot: Snapshot, filter: pc.Expression) -> list[AddFile]:
    """The snapshot's files that may hold a row matching ``filter``, by partition values and stats."""
    predicates = predicates_from_expression(filter)
    if not predicates:
        return snapshot.files
    schema = snapshot.schema
    partition_columns = set(snapshot.partition_columns)
    partition_schema = pa.schema([f for f in schema if f.name in partition_columns])
    data_schema = pa.schema([f for f in schema if f.name not in partition_columns])
    return [add for add in snapshot.files if file_may_match(add, partition_schema, data_schema, predicates)]


def _snapshot(table: _Readable) -> Snapshot:
    snapshot = table.snapshot
    if snapshot is None:
        raise TableNotFoundError(f"no table at {table.uri.table_path} yet: nothing has been written to it")
    return snapshot


def _dataset(table: _Readable, snapshot: Snapshot, files: list[AddFile], filesystem: pafs.FileSystem | None) -> ds.Dataset:
    fs = filesystem if filesystem is not None else filesystem_for(table.uri, table.storage_options)
    schema = snapshot.schema
    fmt = ds.ParquetFileFormat()
    partition_fields = [schema.field(c) for c in snapshot.partition_columns]
    fragments = [
        fmt.make_fragment(_file_path(table.uri, add.path), filesystem=fs,
                          partition_expression=_partition_expression(add, partition_fields), file_size=add.size)
        for add in files
    ]
    return ds.FileSystemDataset(fragments, schema, fmt, fs)


def _file_path(uri: TableUri, path: str) -> str:
    """The filesystem path (``bucket/key``) of an ``add.path``: relative to the table root and
    URI-encoded, or (shallow clones, some writers) an absolute URI in the same store."""
    if "://" in path:
        scheme, _, rest = path.partition("://")
        if scheme not in ("s3", "s3a", "s3n", uri.scheme):
            raise UnsupportedFeatureError(f"data file {path!r} of table {uri.table_path} is not in S3; dynacommit "
                                          f"reads only S3 tables", feature="data files outside S3")
        return unquote(rest)
    return data_path(uri, uri.key(unquote(path)))


def _partition_expression(add: AddFile, fields: list[pa.Field]) -> pc.Expression:
    """``p == value and is_null(q) ...``: true for every row of the file, typed as the table says."""
    expression = pc.scalar(True)
    for field in fields:
        delta_type = arrow_type_to_delta(field.type, column=field.name)
        value: Any = parse_partition_value(add.partition_values.get(field.name), delta_type)
        if value is None:
            term = pc.field(field.name).is_null()
        else:
            term = pc.field(field.name) == pa.scalar(value, type=field.type)
        expression = expression & term
    return expression
