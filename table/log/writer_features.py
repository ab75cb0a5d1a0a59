"""What table features ask of every commit we write, applied to a commit's actions just before each attempt.

Pure functions, no I/O: :func:`prepare_entry` takes the actions of one attempt at ``version`` (the
``commitInfo`` first) and the state the attempt is built on, and returns them as the table's features
require (PROTOCOL.md):

- **In-commit timestamps** (writer feature ``inCommitTimestamp`` with ``delta.enableInCommitTimestamps``):
  the ``commitInfo``, first action of the commit, carries ``inCommitTimestamp``, the larger of the time of
  the attempt and one millisecond after the previous commit's; its ``timestamp`` is the same moment, as
  delta-spark writes it. Recomputed at every attempt, so a commit that lost a race is later than the
  winner.
- **Row tracking** (writer feature ``rowTracking``, unless ``delta.rowTrackingSuspended``): every new
  ``add`` gets ``baseRowId`` (fresh row ids above the ``delta.rowTracking`` domain's
  ``rowIdHighWaterMark``, ``numRecords`` of them per file) and ``defaultRowCommitVersion`` (the version
  written), and the commit carries the domain with the new high-water mark. Recomputed at every attempt
  too: a concurrent commit that assigned row ids moves the mark, and the version changes. When row
  tracking is *enabled* (``delta.enableRowTracking``), ``commitInfo.tags`` says whether stable row ids
  were preserved: they are not when rows are copied or updated into new files, as materialized row id
  columns are not written here. A file re-added with a deletion vector keeps its ``baseRowId`` and
  ``defaultRowCommitVersion`` (carried from the file it replaces).
- **Clustering** (writer feature ``clustering``): new files must have statistics for every clustering
  column; a file without them is refused rather than committed.
- **IcebergCompatV1/V2** (active): every new file has ``numRecords``, and the partition columns of a
  partitioned table are not renamed (:mod:`table.log.iceberg_compat`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from table.errors import UnsupportedFeatureError
from table.log import iceberg_compat, properties
from table.log.actions import Action, AddFile, CommitInfo, DomainMetadata, Metadata, Protocol, RemoveFile
from table.log.protocol import has_writer_feature
from table.log.state import TableState

__all__ = [
    "CLUSTERING_DOMAIN",
    "ROW_TRACKING_DOMAIN",
    "clustering_columns",
    "enables_in_commit_timestamps",
    "in_commit_timestamps_enabled",
    "prepare_entry",
    "row_id_high_water_mark",
    "row_tracking_active",
]

ROW_TRACKING_DOMAIN = "delta.rowTracking"
CLUSTERING_DOMAIN = "delta.clustering"
ENABLE_ROW_TRACKING = "delta.enableRowTracking"
ROW_TRACKING_PRESERVED = "delta.rowTracking.preserved"


def _current(actions: Sequence[Action], state: TableState | None) -> tuple[Protocol | None, Mapping[str, str | None]]:
    """The protocol and table properties the commit will have: its own if it changes them, else the state's."""
    protocol = next((a for a in reversed(actions) if isinstance(a, Protocol)), None)
    metadata = next((a for a in reversed(actions) if isinstance(a, Metadata)), None)
    if protocol is None and state is not None:
        protocol = state.protocol
    if metadata is None and state is not None:
        metadata = state.metadata
    return protocol, ({} if metadata is None else metadata.configuration)


def in_commit_timestamps_enabled(protocol: Protocol | None, configuration: Mapping[str, str | None]) -> bool:
    return has_writer_feature(protocol, "inCommitTimestamp") and properties.in_commit_timestamps(configuration)


def row_tracking_active(protocol: Protocol | None, configuration: Mapping[str, str | None]) -> bool:
    """Whether writers must assign row ids: the feature is supported and not suspended."""
    return has_writer_feature(protocol, "rowTracking") and not properties.row_tracking_suspended(configuration)


def row_id_high_water_mark(domains: Mapping[str, DomainMetadata]) -> int:
    """The highest row id assigned so far (-1 when none was), from the ``delta.rowTracking`` domain."""
    domain = domains.get(ROW_TRACKING_DOMAIN)
    if domain is None or domain.removed:
        return -1
    try:
        mark = json.loads(domain.configuration)["rowIdHighWaterMark"]
    except (ValueError, KeyError, TypeError):
        raise UnsupportedFeatureError(
            f"the table's {ROW_TRACKING_DOMAIN} domain is not a row id high-water mark ({domain.configuration!r}): "
            f"dynacommit cannot assign row ids above it; write with delta-spark", feature="rowTracking") from None
    if isinstance(mark, bool) or not isinstance(mark, int):
        raise UnsupportedFeatureError(f"the table's rowIdHighWaterMark {mark!r} is not an integer",
                                      feature="rowTracking")
    return mark


def clustering_columns(domains: Mapping[str, DomainMetadata]) -> list[tuple[str, ...]]:
    """The clustering columns (physical name paths) the ``delta.clustering`` domain names."""
    domain = domains.get(CLUSTERING_DOMAIN)
    if domain is None or domain.removed:
        return []
    try:
        columns = json.loads(domain.configuration).get("clusteringColumns") or []
    except (ValueError, AttributeError):
        columns = None
    paths = []
    for column in columns if isinstance(columns, list) else [None]:
        if isinstance(column, str):
            paths.append((column,))
        elif isinstance(column, list) and column and all(isinstance(p, str) for p in column):
            paths.append(tuple(column))
        else:
            raise UnsupportedFeatureError(
                f"the table's {CLUSTERING_DOMAIN} domain does not list clustering columns as Delta defines them "
                f"({domain.configuration!r}); write with delta-spark", feature="clustering")
    return paths


def prepare_entry(actions: Sequence[Action], *, state: TableState | None, version: int,
                  previous_in_commit_timestamp: int | None, now_ms: int) -> list[Action]:
    """The actions of one attempt at ``version`` as the table's features require (module docstring).

    ``state`` is the table the attempt is built on (None when the commit creates the table);
    ``previous_in_commit_timestamp`` the ``inCommitTimestamp`` of the commit at ``version - 1`` (None if
    it has none). Raises ``UnsupportedFeatureError`` when a feature's requirement cannot be met (a new
    file without ``numRecords`` on a row-tracking table, without statistics for a clustering column).
    """
    out = list(actions)
    protocol, configuration = _current(out, state)
    domains: Mapping[str, DomainMetadata] = {} if state is None else state.domain_metadata
    if has_writer_feature(protocol, "clustering"):
        _check_clustering_stats(out, clustering_columns(domains))
    iceberg_compat.check_files(out, protocol, configuration)
    if state is not None:
        new_metadata = next((a for a in reversed(out) if isinstance(a, Metadata)), None)
        if new_metadata is not None:
            iceberg_compat.check_replace(state.metadata, new_metadata, state.protocol, table="the table")
    if row_tracking_active(protocol, configuration):
        if properties.row_tracking(configuration):
            out = _with_row_tracking_columns(out)
            if state is not None and not properties.row_tracking(state.metadata.configuration):
                out = _backfill_row_ids(out, state)
        out = _assign_row_ids(out, version, row_id_high_water_mark(domains))
        if properties.boolean_property(configuration, ENABLE_ROW_TRACKING):
            out = _with_commit_info(out, tags={ROW_TRACKING_PRESERVED: "false" if _moves_rows(out) else "true"})
    if in_commit_timestamps_enabled(protocol, configuration):
        moment = now_ms if previous_in_commit_timestamp is None else max(now_ms, previous_in_commit_timestamp + 1)
        out = _with_commit_info(out, in_commit_timestamp=moment, timestamp=moment)
        if state is not None and enables_in_commit_timestamps(out, state):
            out = _with_configuration(out, {properties.ICT_ENABLEMENT_VERSION: str(version),
                                            properties.ICT_ENABLEMENT_TIMESTAMP: str(moment)})
    return out


def _with_row_tracking_columns(actions: list[Action]) -> list[Action]:
    """A ``metaData`` of the commit that turns row tracking on gets the names of the materialized row id and
    row commit version columns (PROTOCOL.md requires both before enabling), as delta-spark names them. They
    are only names: rows are never materialized here (``delta.rowTracking.preserved`` says so)."""
    metadata = next((a for a in actions if isinstance(a, Metadata)), None)
    if metadata is None or (properties.ROW_ID_COLUMN in metadata.configuration
                            and properties.ROW_COMMIT_VERSION_COLUMN in metadata.configuration):
        return actions
    return _with_configuration(actions, {
        properties.ROW_ID_COLUMN: metadata.configuration.get(properties.ROW_ID_COLUMN) or f"_row-id-col-{uuid.uuid4()}",
        properties.ROW_COMMIT_VERSION_COLUMN: metadata.configuration.get(properties.ROW_COMMIT_VERSION_COLUMN)
        or f"_row-commit-version-col-{uuid.uuid4()}"})


def _backfill_row_ids(actions: list[Action], state: TableState) -> list[Action]:
    """The commit turning row tracking on for a table with files: every live file without ``baseRowId``
    that the commit leaves alone is committed again (``dataChange=false``), so that it gets its ids in
    this commit, as PROTOCOL.md requires of the enabling version."""
    touched = {a.path for a in actions if isinstance(a, (AddFile, RemoveFile))}
    again = [state.files[path] for path in state.files if path not in touched]
    return [*actions, *(add.model_copy(update={"data_change": False}) for add in again if add.base_row_id is None)]


def enables_in_commit_timestamps(actions: Sequence[Action], state: TableState | None) -> bool:
    """Whether the commit turns in-commit timestamps on for a table that had commits without them (its
    enablement version and timestamp must then be recorded; a table created with them needs neither)."""
    if state is None or in_commit_timestamps_enabled(state.protocol, state.metadata.configuration):
        return False
    return in_commit_timestamps_enabled(*_current(actions, state))


def _with_configuration(actions: list[Action], changes: Mapping[str, str]) -> list[Action]:
    """``actions`` with ``changes`` set in the configuration of their ``metaData`` (which must be there)."""
    index = next(i for i, a in enumerate(actions) if isinstance(a, Metadata))
    metadata = actions[index]
    assert isinstance(metadata, Metadata)
    updated = metadata.model_copy(update={"configuration": {**metadata.configuration, **changes}})
    return [*actions[:index], updated, *actions[index + 1:]]


def _moves_rows(actions: list[Action]) -> bool:
    """Whether the commit puts rows of files it removes into new files (a rewrite, a compaction, updated
    rows): their new files' fresh row ids are not the rows' old ones. A deletion vector re-adds the same
    file, whose row ids stay; an append only inserts."""
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    return bool(removed) and any(isinstance(a, AddFile) and a.path not in removed for a in actions)


def _with_commit_info(actions: list[Action], **changes: Any) -> list[Action]:
    """``actions`` with the commitInfo (put first if there is none) updated: ``tags`` are merged."""
    index = next((i for i, a in enumerate(actions) if isinstance(a, CommitInfo)), None)
    info = CommitInfo() if index is None else actions[index]
    assert isinstance(info, CommitInfo)
    fields = info.model_dump()
    if "tags" in changes:
        changes["tags"] = {**(fields.get("tags") or {}), **changes["tags"]}
    updated = CommitInfo(**{**fields, **changes})
    rest = [a for i, a in enumerate(actions) if i != index]
    return [updated, *rest]


def _num_records(add: AddFile) -> int | None:
    if not add.stats:
        return None
    try:
        value = json.loads(add.stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _assign_row_ids(actions: list[Action], version: int, high_water_mark: int) -> list[Action]:
    mark = high_water_mark
    out: list[Action] = []
    for action in actions:
        if isinstance(action, AddFile) and action.base_row_id is None:
            records = _num_records(action)
            if records is None:
                raise UnsupportedFeatureError(
                    f"file {action.path!r} has no numRecords statistic, which row tracking needs to assign its rows "
                    f"their ids; nothing was committed", feature="rowTracking")
            action = action.model_copy(update={"base_row_id": mark + 1, "default_row_commit_version": version})
            mark += records
        elif isinstance(action, AddFile) and action.default_row_commit_version is None:
            action = action.model_copy(update={"default_row_commit_version": version})
        if isinstance(action, DomainMetadata) and action.domain == ROW_TRACKING_DOMAIN:
            continue  # the mark is ours to set, from the table's
        out.append(action)
    if mark > high_water_mark:
        out.append(DomainMetadata(domain=ROW_TRACKING_DOMAIN, configuration=json.dumps({"rowIdHighWaterMark": mark}),
                                  removed=False))
    return out


def _check_clustering_stats(actions: list[Action], columns: list[tuple[str, ...]]) -> None:
    if not columns:
        return
    for action in actions:
        if not isinstance(action, AddFile):
            continue
        try:
            null_count = json.loads(action.stats or "{}").get("nullCount") or {}
        except (ValueError, AttributeError):
            null_count = {}
        for path in columns:
            node: Any = null_count
            for part in path:
                node = node.get(part) if isinstance(node, Mapping) else None
            if node is None:
                raise UnsupportedFeatureError(
                    f"file {action.path!r} has no statistics for clustering column {'.'.join(path)!r}, which a "
                    f"clustered table requires of every file; nothing was committed. Raise "
                    f"delta.dataSkippingNumIndexedCols or name it in delta.dataSkippingStatsColumns so that "
                    f"statistics cover it", feature="clustering")
