"""The scan planner shared by every row-level operation: which files a predicate can touch, and their rows.

A row-level operation (DELETE, UPDATE, MERGE) must find the rows its predicate selects without reading
the files that cannot hold one. The predicate is a SQL string; DataFusion binds and optimizes it
(:mod:`table.engine`), and what it then says about the table (the conjuncts pushed onto the
table's scan, literals typed as the columns) is turned into a pyarrow filter that every selected row
satisfies. That filter prunes files exactly as reads prune them (``table.data.read``: partition values and
statistics as each file's guarantee), so an operation opens only files a read with the same filter
would open. The same filter tells the conflict check whether a file another writer added may hold rows
the operation would have selected (:func:`file_matcher`).

Rows are read file by file with two columns of our own, the file's position in the candidate list
(:data:`FILE`) and the row's position in its file (:data:`ROW`, the physical position: rows a deletion
vector deletes are not read, and their positions are skipped): the operations decide per row, and
rewrite per file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import CorruptLogError
from table.data.read import prune_adds, prune_files, read_each_file
from table.data.stats import parse_stats
from table.log.actions import AddFile
from table.log.commit import FileMatcher
from table.log.schema import arrow_type_to_delta, parse_partition_value
from table.log.snapshot import Snapshot
from table.engine import INTERNAL_PREFIX
from table.transaction import TableView, Transaction

__all__ = ["FILE", "ROW", "Candidates", "candidates", "file_matcher", "file_rows", "partition_values_table", "read",
           "read_window", "split_by_file", "windows"]

FILE = INTERNAL_PREFIX + "file"
"""Column added to the rows an operation reads: the position of the row's file among the candidates."""
ROW = INTERNAL_PREFIX + "row"
"""Column added to the rows an operation reads: the row's position in its file."""

WINDOW_BYTES = 128 * 1024 * 1024
"""Bytes of Parquet (as the log records the files' sizes) an operation holds in memory at once."""


@dataclasses.dataclass(frozen=True)
class Candidates:
    """The files an operation reads: those the filter does not rule out, of all the snapshot's."""

    files: tuple[AddFile, ...]
    filter: pc.Expression | None
    files_before: int
    bytes_before: int
    columns: tuple[str, ...] = ()  # the columns the filter references

    def matcher(self, snapshot: Snapshot) -> FileMatcher:
        """Whether a file another writer adds may hold rows these candidates were chosen for."""
        return file_matcher(snapshot, self.filter, self.columns)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def metrics(self) -> dict[str, str]:
        """Delta's skipping metrics (``numFilesBeforeSkipping`` ...)."""
        return {"numFilesBeforeSkipping": str(self.files_before), "numBytesBeforeSkipping": str(self.bytes_before),
                "numFilesAfterSkipping": str(len(self.files)), "numBytesAfterSkipping": str(self.bytes)}


def candidates(snapshot: Snapshot, filter: pc.Expression | None, columns: Sequence[str] = ()) -> Candidates:
    """The snapshot's files a read with ``filter`` opens (all of them for None), by path. ``columns``
    (those the filter references) lets files with some nulls in them be pruned too (``prune_adds``)."""
    every = snapshot.state.files  # counted from its columns: the objects of only the files kept are built
    before = every.total("size")
    files = snapshot.files if filter is None else prune_files(snapshot, filter, columns=columns)
    if filter is not None and columns:
        files = prune_adds(snapshot.schema, snapshot.partition_columns, files, filter, columns=columns,
                           layout=snapshot.layout)
    return Candidates(tuple(sorted(files, key=lambda f: f.path)), filter, len(every), before, tuple(columns))


def read(txn: Transaction, filter: pc.Expression | None, columns: Sequence[str] = (), *,
         predicate: str | None) -> Candidates:
    """:func:`candidates` of the transaction's snapshot, recorded in ``txn`` as read: these files, and any file
    another writer adds that ``filter`` does not rule out (``predicate`` describes it in messages)."""
    snapshot = txn.snapshot
    found = candidates(snapshot, filter, columns)
    txn.read_predicate(found.files, found.matcher(snapshot), predicate)
    return found


def file_matcher(snapshot: Snapshot, filter: pc.Expression | None, columns: Sequence[str] = ()) -> FileMatcher:
    """Whether a file of this table (an ``add`` another writer committed) may hold rows ``filter``
    selects: its partition values and statistics do not rule them all out. With no filter, every file."""
    if filter is None:
        return lambda add: True
    schema, partition_columns, layout = snapshot.schema, list(snapshot.partition_columns), snapshot.layout
    return lambda add: bool(prune_adds(schema, partition_columns, [add], filter, columns=columns, layout=layout))


def windows(files: Sequence[AddFile], max_bytes: int = WINDOW_BYTES) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of ``files`` holding about ``max_bytes`` each (at least one file each)."""
    ranges, start, size = [], 0, 0
    for index, add in enumerate(files):
        if index > start and size + add.size > max_bytes:
            ranges.append((start, index))
            start, size = index, 0
        size += add.size
    if start < len(files):
        ranges.append((start, len(files)))
    return ranges


def read_window(table: TableView, snapshot: Snapshot, files: Sequence[AddFile], start: int, end: int, *,
                columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of ``files[start:end]`` with the snapshot's schema (``columns`` only, if given), plus
    :data:`FILE` (the file's index in ``files``) and :data:`ROW` (the row's index in its file)."""
    schema = snapshot.schema if columns is None else pa.schema([snapshot.schema.field(c) for c in columns])
    parts = []
    for index, (rows, positions) in zip(range(start, end),
                                        read_each_file(table, snapshot, files[start:end], columns=columns)):
        count = rows.num_rows
        numbers = pa.array(range(count), pa.int64()) if positions is None else positions.cast(pa.int64())
        parts.append(rows.cast(schema)
                     .append_column(FILE, pa.array([index] * count, pa.int32()) if count else pa.array([], pa.int32()))
                     .append_column(ROW, numbers))
    if not parts:
        return schema.empty_table().append_column(FILE, pa.array([], pa.int32())).append_column(
            ROW, pa.array([], pa.int64()))
    return pa.concat_tables(parts)


def partition_values_table(snapshot: Snapshot, files: Sequence[AddFile]) -> pa.Table:
    """One row per file: its partition values, typed as the table's partition columns, and :data:`FILE`.
    A predicate over partition columns alone is evaluated on it, exactly, without opening a file.

    The data columns are there too, all null: a predicate counts as over partition columns alone when the
    engine proved the rest of it irrelevant (``p = 'a' AND (x > 0 OR true)`` reads no data column), but the
    predicate is run as written, naming them."""
    partitions = set(snapshot.partition_columns)
    columns: dict[str, pa.Array] = {field.name: pa.nulls(len(files), field.type)
                                    for field in snapshot.schema if field.name not in partitions}
    for column in snapshot.partition_columns:
        arrow_type = snapshot.schema.field(column).type
        delta_type = arrow_type_to_delta(arrow_type, column=column)
        try:
            physical = snapshot.layout.physical_name(column)
            values = [parse_partition_value(f.partition_values.get(physical), delta_type) for f in files]
        except ValueError as exc:
            raise CorruptLogError(f"a file of table {snapshot.table_path} has an unusable value for partition "
                                  f"column {column!r}: {exc}") from None
        columns[column] = pa.array(values, type=arrow_type)
    columns[FILE] = pa.array(range(len(files)), pa.int32())
    return pa.table(columns)


def record_count(files: Sequence[AddFile]) -> int | None:
    """The rows of ``files`` by their statistics (``numRecords``), or None if any file lacks them."""
    total = 0
    for add in files:
        stats = parse_stats(add.stats)
        if stats is None or not isinstance(stats.num_records, int):
            return None
        total += stats.num_records - (0 if add.deletion_vector is None else add.deletion_vector.cardinality)
    return total


def file_rows(window: pa.Table) -> dict[int, pa.Table]:
    """The rows of each file of a window from :func:`read_window`, by file index (zero-copy slices: a
    window holds each file's rows together, in order)."""
    files = window.column(FILE).to_numpy()
    if not len(files):
        return {}
    starts = [0, *(int(i) + 1 for i in (files[1:] != files[:-1]).nonzero()[0])]
    ends = [*starts[1:], len(files)]
    return {int(files[start]): window.slice(start, end - start) for start, end in zip(starts, ends)}


def split_by_file(rows: pa.Table, column: str = FILE) -> Iterator[tuple[int, pa.Table]]:
    """``(file index, its rows)`` for each file present in ``rows`` (in file order, rows in their order)."""
    if rows.num_rows == 0:
        return
    order = pc.sort_indices(rows, sort_keys=[(column, "ascending"), (ROW, "ascending")])
    rows = rows.take(order)
    files = rows.column(column).combine_chunks()
    bounds = pc.indices_nonzero(pc.not_equal(files[1:], files[:-1])).to_pylist() if len(files) > 1 else []
    start = 0
    for end in [b + 1 for b in bounds] + [rows.num_rows]:
        yield files[start].as_py(), rows.slice(start, end - start)
        start = end
