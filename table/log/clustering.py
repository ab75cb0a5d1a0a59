"""Liquid clustering (PROTOCOL.md, "Clustered Table"): a table's clustering columns, kept in the
``delta.clustering`` metadata domain, and the protocol a clustered table needs.

Invariant: a table clustered here lists the writer features ``clustering`` and ``domainMetadata``, has
no partition columns, and its ``delta.clustering`` domain names its clustering columns by physical name
paths (``{"clusteringColumns": [["col-..."], ["a", "b"]]}``, as delta-spark writes them). Files OPTIMIZE
clusters carry ``clusteringProvider`` = :data:`PROVIDER`; files without it are the unclustered ones an
incremental OPTIMIZE clusters next.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.log.actions import DomainMetadata, Protocol
from table.log.column_mapping import Layout
from table.log.protocol import has_writer_feature, merged_protocol
from table.log.state import TableState
from table.log.writer_features import CLUSTERING_DOMAIN, clustering_columns

__all__ = ["FEATURES", "PROVIDER", "check_columns", "clustered", "columns_of", "domain_for", "names",
           "with_clustering"]

PROVIDER = "liquid"
"""The ``clusteringProvider`` of the files OPTIMIZE clusters: Delta's own name for liquid clustering, so that
delta-spark's OPTIMIZE and ours each treat the other's clustered files as clustered."""

FEATURES = ("clustering", "domainMetadata")


def names(columns: object, *, argument: str) -> tuple[str, ...]:
    """``columns`` (a list of column names; dotted for a nested field) checked as an argument; empty for
    ``None`` or ``[]`` (no clustering)."""
    if columns is None:
        return ()
    if isinstance(columns, str) or not isinstance(columns, Sequence) or \
            not all(isinstance(c, str) and c for c in columns):
        raise ArgumentTypeError(f"{argument} must be a list of column names, got {columns!r}")
    if len({c.lower() for c in columns}) != len(columns):
        raise InvalidArgumentError(f"{argument} names a column twice: {list(columns)}")
    return tuple(columns)


def check_columns(columns: Sequence[str], schema: pa.Schema, partition_columns: Sequence[str], *,
                  table: str, num_indexed_cols: int = 32,
                  stats_columns: Sequence[Sequence[str]] | None = None) -> None:
    """Refuse what Delta refuses: clustering a partitioned table, a column the table lacks, a column whose
    type has no order (struct, array, map), a column without statistics, which a clustered table requires
    of every file: one ``stats_columns`` (``delta.dataSkippingStatsColumns``, when the table sets it) does
    not name (itself or a struct holding it), else one outside the first ``num_indexed_cols`` leaf columns
    (``delta.dataSkippingNumIndexedCols``)."""
    listed = None if stats_columns is None else {tuple(p.lower() for p in c) for c in stats_columns}
    if columns and partition_columns:
        raise InvalidArgumentError(f"table {table} is partitioned by {list(partition_columns)}; Delta does not "
                                   f"allow a table to be both partitioned and clustered (drop partition_by)")
    for column in columns:
        kind: pa.DataType | None = None
        fields = schema
        for step in column.split("."):
            found = next((f for f in (fields or []) if f.name == step), None) if fields is not None else None
            if found is None:
                raise InvalidArgumentError(f"clustering column {column!r} is not a column of table {table} (its "
                                           f"columns: {schema.names})")
            kind = found.type
            fields = [kind.field(i) for i in range(kind.num_fields)] if pa.types.is_struct(kind) else None
        if kind is not None and pa.types.is_nested(kind):
            raise InvalidArgumentError(f"clustering column {column!r} of table {table} is {kind}, which has no "
                                       f"order; cluster by a primitive column")
        if listed is not None:
            path = tuple(column.lower().split("."))
            if not any(path[:n] in listed for n in range(1, len(path) + 1)):
                raise InvalidArgumentError(f"clustering column {column!r} of table {table} gets no statistics: "
                                           f"delta.dataSkippingStatsColumns does not name it; add it there")
        elif num_indexed_cols >= 0 and _leaf_index(schema, column) >= num_indexed_cols:
            raise InvalidArgumentError(f"clustering column {column!r} of table {table} is not among the first "
                                       f"{num_indexed_cols} columns that get statistics; raise "
                                       f"delta.dataSkippingNumIndexedCols or move the column forward")


def _leaf_index(schema: pa.Schema, column: str) -> int:
    """The position of ``column`` (dotted) among the schema's leaf columns, as statistics count them."""
    def leaves(fields, prefix: str):
        for field in fields:
            if pa.types.is_struct(field.type):
                yield from leaves([field.type.field(i) for i in range(field.type.num_fields)], prefix + field.name + ".")
            else:
                yield prefix + field.name

    return next(i for i, name in enumerate(leaves(schema, "")) if name == column)


def domain_for(columns: Sequence[str], layout: Layout | None) -> DomainMetadata:
    """The ``delta.clustering`` domain naming ``columns`` (logical, dotted) by physical name paths."""
    paths = []
    for column in columns:
        parts = column.split(".")
        if layout is not None:
            parts[0] = layout.physical_name(parts[0])
        paths.append(parts)
    configuration = {"clusteringColumns": paths, "domainName": CLUSTERING_DOMAIN}  # as delta-spark writes it
    return DomainMetadata(domain=CLUSTERING_DOMAIN, configuration=json.dumps(configuration, separators=(",", ":")),
                          removed=False)


def columns_of(state: TableState, layout: Layout | None) -> tuple[str, ...]:
    """The clustering columns of a clustered table, logical and dotted; empty for any other table."""
    if not clustered(state.protocol):
        return ()
    logical = {physical: name for name, physical in (layout.names.items() if layout is not None else ())}
    return tuple(".".join([logical.get(path[0], path[0]), *path[1:]])
                 for path in clustering_columns(state.domain_metadata))


def clustered(protocol: Protocol | None) -> bool:
    """Whether ``protocol`` makes a table a clustered table (writer feature ``clustering``)."""
    return has_writer_feature(protocol, "clustering")


def with_clustering(protocol: Protocol) -> Protocol:
    """``protocol`` with the writer features a clustered table needs (writer version 7)."""
    if all(has_writer_feature(protocol, f) for f in FEATURES):
        return protocol
    return merged_protocol(protocol, Protocol(min_reader_version=1, min_writer_version=7,
                                              writer_features=list(FEATURES)))
