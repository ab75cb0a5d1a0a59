"""A table's detail, in the shape of delta-spark's ``DESCRIBE DETAIL`` (``DeltaTable.detail()``).

One record: ``format``, ``id``, ``name``, ``description``, ``location``, ``createdAt`` and ``lastModified``
(milliseconds since the epoch; ``lastModified`` is the newest commit's time), ``partitionColumns``,
``clusteringColumns``, ``numFiles``, ``sizeInBytes``, ``properties``, ``minReaderVersion``,
``minWriterVersion`` and ``tableFeatures`` (reader and writer features together, as delta-spark lists them).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.compute as pc

from logstore.base import LogStore
from table.log.history import history
from table.log.snapshot import Snapshot

__all__ = ["CLUSTERING_DOMAIN", "table_detail"]

CLUSTERING_DOMAIN = "delta.clustering"
"""The domain whose configuration lists a clustered table's clustering columns (PROTOCOL.md, Clustered Table)."""


def table_detail(log_store: LogStore, snapshot: Snapshot, location: str) -> dict[str, Any]:
    """The ``DESCRIBE DETAIL`` record of ``snapshot`` (module docstring); ``location`` is the table's URI."""
    metadata, protocol = snapshot.metadata, snapshot.protocol
    newest = history(log_store, 1) if not snapshot.time_travel else []
    last_modified = newest[0].timestamp if newest and newest[0].version == snapshot.version else None
    if snapshot.in_commit_timestamp is not None:
        last_modified = snapshot.in_commit_timestamp
    features = sorted(set(protocol.reader_features or ()) | set(protocol.writer_features or ()))
    files = snapshot.state.files
    return {
        "format": "delta",
        "id": metadata.id,
        "name": metadata.name,
        "description": metadata.description,
        "location": location,
        "createdAt": metadata.created_time,
        "lastModified": last_modified,
        "partitionColumns": list(metadata.partition_columns),
        "clusteringColumns": _clustering_columns(snapshot),
        "numFiles": len(files),
        "sizeInBytes": int(pc.sum(files.to_arrow()["size"]).as_py() or 0) if len(files) else 0,
        "properties": {k: v for k, v in metadata.configuration.items() if v is not None},
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": protocol.min_writer_version,
        "tableFeatures": features,
    }


def _clustering_columns(snapshot: Snapshot) -> list[str]:
    """The clustering columns the ``delta.clustering`` domain names: column paths (physical names there,
    logical ones here) joined by dots."""
    domain = snapshot.state.domain_metadata.get(CLUSTERING_DOMAIN)
    if domain is None or domain.removed:
        return []
    try:
        paths = json.loads(domain.configuration).get("clusteringColumns", [])
    except (ValueError, AttributeError):
        return []
    logical = {physical: name for name, physical in snapshot.layout.names.items()}
    columns = []
    for path in paths:
        parts = [str(p) for p in path] if isinstance(path, list) else [str(path)]
        if parts:
            parts[0] = logical.get(parts[0], parts[0])
        columns.append(".".join(parts))
    return columns
