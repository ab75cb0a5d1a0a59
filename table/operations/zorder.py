"""Z-order clustering (``OPTIMIZE ... ZORDER BY``): the rows of a partition rewritten in the order of a
space-filling curve over some columns, so that each new file covers a small box of their values and a
filter on any of them skips most files by their min/max statistics.

The curve (:func:`zorder_values`), the one delta-spark uses in spirit (``range_partition_id`` then
``interleave_bits``), computed exactly rather than from a sample:

1. each column's values are **ranked** among the rows being clustered (a dense rank: equal values share
   a rank; nulls rank last, NaN just before them, as Spark orders them);
2. each rank is **scaled** to ``b`` bits, ``b = min(32, 64 // k)`` for ``k`` columns: rank ``r`` of ``d``
   distinct values becomes ``floor(r * 2**b / d)``, so every column spans the same range whatever its
   type, its distribution or how many distinct values it has;
3. the ``k`` scaled values are **interleaved** bit by bit, most significant first (column 1's top bit,
   column 2's top bit, ..., then the next bit of each): a 64-bit Z-value.

Sorting by the Z-value and cutting the sorted rows into files of equal row counts gives files whose
boxes barely overlap. Ranking instead of using the raw bytes (delta-rs interleaves the values' bytes)
makes skewed columns, strings with a common prefix and negative numbers cluster as well as uniform
integers do, at the price of holding the partition's rows in memory while they are ranked and sorted.

:func:`check_columns` refuses what Delta refuses, with its reasons: partition columns (every file of a
partition already has one value), columns the table does not have, nested columns (no order), and
columns without statistics (``delta.dataSkippingStatsColumns`` or ``delta.dataSkippingNumIndexedCols``:
clustering them could not help any reader skip a file).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.data.stats import resolve_stats_columns

__all__ = ["MAX_COLUMNS", "check_columns", "zorder_values", "zorder_sort"]

MAX_COLUMNS = 64
"""At most this many columns: each gets at least one bit of the 64-bit Z-value."""


def check_columns(columns: Sequence[str], schema: pa.Schema, partition_columns: Sequence[str], *,
                  num_indexed_cols: int, table: str,
                  stats_columns: Sequence[Sequence[str]] | None = None) -> list[str]:
    """``columns`` as given, after Delta's checks (module docstring); InvalidArgumentError naming the
    column and what to do otherwise."""
    if isinstance(columns, str) or not isinstance(columns, Sequence) or \
            not all(isinstance(c, str) and c for c in columns):
        raise ArgumentTypeError(f"z_order must be a list of column names, got {columns!r}")
    if not columns:
        raise InvalidArgumentError("z_order names no column; give at least one, or compact without z_order")
    if len(set(columns)) != len(columns):
        raise InvalidArgumentError(f"z_order names a column twice: {list(columns)}")
    if len(columns) > MAX_COLUMNS:
        raise InvalidArgumentError(f"z_order takes at most {MAX_COLUMNS} columns, got {len(columns)}")
    indexed = _indexed_columns(schema, partition_columns, num_indexed_cols, stats_columns)
    for column in columns:
        if column in partition_columns:
            raise InvalidArgumentError(
                f"{column!r} is a partition column of {table}; Z-ordering by a partition column is not allowed "
                f"(every file of a partition holds one value of it): Z-order by data columns only")
        if column not in schema.names:
            raise InvalidArgumentError(f"{column!r} is not a column of {table} (its columns: {schema.names}); "
                                       f"Z-order by existing data columns")
        kind = schema.field(column).type
        if pa.types.is_nested(kind):
            raise InvalidArgumentError(f"column {column!r} of {table} has type {kind}, which has no order; "
                                       f"Z-order by columns of a primitive type")
        if column not in indexed and stats_columns is not None:
            raise InvalidArgumentError(
                f"column {column!r} of {table} has no statistics (delta.dataSkippingStatsColumns does not name "
                f"it), so Z-ordering by it could not help a read skip files: add it to "
                f"delta.dataSkippingStatsColumns")
        if column not in indexed:
            raise InvalidArgumentError(
                f"column {column!r} of {table} has no statistics (delta.dataSkippingNumIndexedCols="
                f"{num_indexed_cols} covers the first columns only), so Z-ordering by it could not help a read "
                f"skip files: raise delta.dataSkippingNumIndexedCols or move the column forward")
    return list(columns)


def _indexed_columns(schema: pa.Schema, partition_columns: Sequence[str], num_indexed_cols: int,
                     stats_columns: Sequence[Sequence[str]] | None = None) -> set[str]:
    """The top-level data columns whose files carry min/max statistics, as
    :class:`~table.data.stats.StatsCollector` chooses them: the columns ``stats_columns``
    (``delta.dataSkippingStatsColumns``) names when set, else the first ``num_indexed_cols`` leaf columns
    of the data files' schema (partition columns are not in the files)."""
    if stats_columns is not None:
        return {logical[0] for logical, _, _ in resolve_stats_columns(stats_columns, schema)
                if len(logical) == 1 and logical[0] not in partition_columns}
    budget = math.inf if num_indexed_cols < 0 else num_indexed_cols
    covered: set[str] = set()
    for field in schema:
        if field.name in partition_columns:
            continue
        if budget > 0:
            covered.add(field.name)
        budget -= _leaves(field.type)
    return covered


def _leaves(kind: pa.DataType) -> int:
    if pa.types.is_struct(kind):
        return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields))
    return 1


def _scaled_ranks(values: pa.ChunkedArray | pa.Array, bits: int) -> np.ndarray:
    """Steps 1 and 2 of the module docstring for one column."""
    ranks = pc.rank(values, sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.uint64) - np.uint64(1)
    distinct = int(ranks.max()) + 1 if len(ranks) else 1
    # rank * 2**bits stays below 2**63 for fewer than 2**31 distinct values; a bigger partition cannot be
    # held in memory anyway
    return (ranks << np.uint64(bits)) // np.uint64(distinct)


def zorder_values(rows: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """The 64-bit Z-value of every row of ``rows`` over ``columns`` (module docstring), as uint64."""
    bits = min(32, 64 // len(columns))
    scaled = [_scaled_ranks(rows.column(c), bits) for c in columns]
    z = np.zeros(rows.num_rows, dtype=np.uint64)
    one = np.uint64(1)
    for bit in range(bits - 1, -1, -1):
        shift = np.uint64(bit)
        for column in scaled:
            z = (z << one) | ((column >> shift) & one)
    return z


def zorder_sort(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``rows`` sorted by their Z-value over ``columns``; rows with equal Z-values keep their order."""
    if rows.num_rows < 2:
        return rows
    order = np.argsort(zorder_values(rows, columns), kind="stable")
    return rows.take(pa.array(order))
