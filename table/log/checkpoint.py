"""Writing checkpoints (classic V1, or V2 where the table asks for them) and the ``_last_checkpoint`` hint.

A checkpoint of version ``v`` is the table's state at ``v`` written as actions, one per parquet row, so a
reader replays it plus the commits after ``v`` instead of every commit since 0 (PROTOCOL.md,
"Checkpoints" and Appendix "Checkpoint Schema"). Each row sets exactly one of the nullable struct
columns ``txn``, ``add``, ``remove``, ``metaData``, ``protocol``, ``domainMetadata``. What goes in:

- the ``protocol`` and the ``metaData`` (exactly one each);
- the latest ``txn`` of every application, and every live metadata domain (``domainMetadata``; removed
  domains are not checkpointed);
- every live ``add`` (``stats`` as its JSON string, ``partitionValues`` as ``map<string,string>``, and the
  row tracking fields ``baseRowId`` / ``defaultRowCommitVersion`` and ``clusteringProvider`` it carries);
- ``remove`` tombstones whose ``deletionTimestamp`` is within ``delta.deletedFileRetentionDuration``
  (default one week): VACUUM of another client must not delete a file a reader of an older version
  may still read; an older tombstone has served that purpose. ``commitInfo`` is never checkpointed.

Which kind is written follows ``delta.checkpointPolicy`` (delta-spark's property): ``classic`` (the
default) writes ``{v}.checkpoint.parquet``; ``v2``, on a table with the ``v2Checkpoint`` feature, writes a
UUID-named V2 checkpoint ``{v}.checkpoint.{uuid}.parquet``: the same rows plus one ``checkpointMetadata``
row, file actions inline (no sidecars). A table whose policy is ``v2`` but lacks the feature gets no
checkpoint from us. Multi-part checkpoints are read (``table.log.checkpoint_read``), never written.

Then ``_last_checkpoint`` is overwritten with ``{"version", "size", "sizeInBytes", "numOfAddFiles"}``
(and ``v2Checkpoint.path`` naming a V2 checkpoint's file). ``size`` (the row count) is what lets a reader
notice a checkpoint that does not match its hint (``table.log.snapshot`` checks it).

``checkpointProtection`` asks writers not to create checkpoints of versions whose protocol they cannot
write: every checkpoint here is of a snapshot whose protocol and metadata :func:`check_writable` accepts.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstore import failpoints
from logstore.base import LogStore
from logstore.errors import InvalidArgumentError
from table.errors import UnsupportedFeatureError
from table.log.actions import Action, CheckpointMetadata, DomainMetadata, Metadata, Protocol, Txn
from table.log.actionset import ADD_STRUCT, REMOVE_STRUCT
from table.log.checkpoint_files import (
    LAST_CHECKPOINT,
    LastCheckpoint,
    LastCheckpointV2,
    checkpoint_names,
    listed_checkpoints,
    read_last_checkpoint,
    uuid_checkpoint_name,
)
from table.log.checkpoint_read import ACTION_COLUMNS, column_actions, read_checkpoint, read_checkpoint_state
from table.log.properties import checkpoint_policy, tombstone_retention_ms
from table.log.protocol import check_writable, has_writer_feature
from table.log.state import TableState

if TYPE_CHECKING:
    from table.log.snapshot import Snapshot

__all__ = [
    "CHECKPOINT_SCHEMA",
    "LAST_CHECKPOINT",
    "V2_CHECKPOINT_SCHEMA",
    "LastCheckpoint",
    "checkpoint_actions",
    "checkpoint_names",
    "checkpoint_table",
    "describe",
    "read_checkpoint",
    "read_checkpoint_state",
    "read_last_checkpoint",
    "writes_v2_checkpoints",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

AFTER_PARQUET = failpoints.declare(
    "table.checkpoint.after_parquet", "the checkpoint file is written; _last_checkpoint still names the previous one")
AFTER_HINT = failpoints.declare("table.checkpoint.after_hint", "the checkpoint and _last_checkpoint are written")

_STRING_MAP = pa.map_(pa.string(), pa.string())
_STRING_LIST = pa.list_(pa.string())

CHECKPOINT_SCHEMA = pa.schema([
    pa.field("txn", pa.struct([
        pa.field("appId", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("lastUpdated", pa.int64()),
    ])),
    pa.field("add", ADD_STRUCT),
    pa.field("remove", REMOVE_STRUCT),
    pa.field("metaData", pa.struct([
        pa.field("id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field("format", pa.struct([pa.field("provider", pa.string()), pa.field("options", _STRING_MAP)])),
        pa.field("schemaString", pa.string()),
        pa.field("partitionColumns", _STRING_LIST),
        pa.field("createdTime", pa.int64()),
        pa.field("configuration", _STRING_MAP),
    ])),
    pa.field("protocol", pa.struct([
        pa.field("minReaderVersion", pa.int32()),
        pa.field("minWriterVersion", pa.int32()),
        pa.field("readerFeatures", _STRING_LIST),
        pa.field("writerFeatures", _STRING_LIST),
    ])),
    pa.field("domainMetadata", pa.struct([
        pa.field("domain", pa.string()),
        pa.field("configuration", pa.string()),
        pa.field("removed", pa.bool_()),
    ])),
])
"""The checkpoint schema of PROTOCOL.md's appendix (every column nullable, as Spark writes it)."""

V2_CHECKPOINT_SCHEMA = CHECKPOINT_SCHEMA.append(pa.field("checkpointMetadata", pa.struct([
    pa.field("version", pa.int64()),
    pa.field("tags", _STRING_MAP),
])))
"""A V2 checkpoint's schema: :data:`CHECKPOINT_SCHEMA` and the ``checkpointMetadata`` column."""


# --- the rows ---------------------------------------------------------------------------------------


def checkpoint_table(state: TableState, *, now_ms: int, v2: bool = False) -> pa.Table:
    """The parquet rows of the checkpoint of ``state``: with ``v2``, first the ``checkpointMetadata`` row
    (in :data:`V2_CHECKPOINT_SCHEMA`); then protocol, metaData, the latest txn of every application, the
    live metadata domains, every live ``add`` (by path), then the tombstones not yet older than the
    retention (a tombstone without a timestamp is expired, as Spark reads a missing ``deletionTimestamp``
    as 0) whose file is not live again. Files and tombstones go column-wise."""
    if state.protocol is None or state.metadata is None:
        raise InvalidArgumentError("cannot checkpoint a table that has no protocol or metaData (version -1)")
    schema = V2_CHECKPOINT_SCHEMA if v2 else CHECKPOINT_SCHEMA
    head: list[Action] = [CheckpointMetadata(version=state.version, tags={})] if v2 else []
    head += [state.protocol, state.metadata, *(txn for _, txn in sorted(state.app_txns.items())),
             *(domain for _, domain in sorted(state.domain_metadata.items()) if not domain.removed)]
    columns: dict[str, list[dict | None]] = {f.name: [] for f in schema}
    for action in head:
        name, row = _row(action)
        for column, values in columns.items():
            values.append(row if column == name else None)
    rows = pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in schema}, schema=schema)
    adds = state.files.to_arrow()
    adds = adds.take(pc.sort_indices(adds["path"]))
    cutoff = now_ms - tombstone_retention_ms(state.configuration)
    removes = state.tombstones.to_arrow()
    if removes.num_rows:
        keep = pc.and_(pc.greater(pc.fill_null(removes["deletionTimestamp"], 0), cutoff),
                       pc.invert(pc.is_in(removes["path"], value_set=adds["path"])))
        removes = removes.filter(keep)
        removes = removes.take(pc.sort_indices(removes["path"]))
    return pa.concat_tables([rows, _only(adds, "add", schema), _only(removes, "remove", schema)])


def _only(actions: pa.Table, column: str, schema: pa.Schema) -> pa.Table:
    """Rows of ``schema`` holding ``actions`` (the struct's columns) in ``column``."""
    field = schema.field(column)
    struct = pa.StructArray.from_arrays([actions.column(f.name).combine_chunks() for f in field.type],
                                        fields=list(field.type))
    return pa.table({f.name: struct if f.name == column else pa.nulls(actions.num_rows, f.type)
                     for f in schema}, schema=schema)


def checkpoint_actions(state: TableState, *, now_ms: int, v2: bool = False) -> list[Action]:
    """The actions :func:`checkpoint_table` writes, as objects (for tools and tests)."""
    table = checkpoint_table(state, now_ms=now_ms, v2=v2)
    return [action for name in ACTION_COLUMNS if name in table.column_names
            for action in column_actions(table, name, "checkpoint")]


def _row(action: Action) -> tuple[str, dict]:
    if isinstance(action, Txn):
        return "txn", {"appId": action.app_id, "version": action.version, "lastUpdated": action.last_updated}
    if isinstance(action, Metadata):
        return "metaData", {
            "id": action.id, "name": action.name, "description": action.description,
            "format": {"provider": action.format.provider, "options": action.format.options},
            "schemaString": action.schema_string, "partitionColumns": action.partition_columns,
            "createdTime": action.created_time, "configuration": action.configuration,
        }
    if isinstance(action, Protocol):
        return "protocol", {"minReaderVersion": action.min_reader_version,
                            "minWriterVersion": action.min_writer_version,
                            "readerFeatures": action.reader_features, "writerFeatures": action.writer_features}
    if isinstance(action, DomainMetadata):
        return "domainMetadata", {"domain": action.domain, "configuration": action.configuration,
                                  "removed": action.removed}
    if isinstance(action, CheckpointMetadata):
        return "checkpointMetadata", {"version": action.version, "tags": action.tags or {}}
    raise InvalidArgumentError(f"{type(action).__name__} actions are not written to checkpoints row by row")


# --- writing ----------------------------------------------------------------------------------------


def writes_v2_checkpoints(state: TableState) -> bool | None:
    """Whether a checkpoint of ``state`` is V2 (True), classic (False), or must not be written (None:
    ``delta.checkpointPolicy=v2`` on a table without the ``v2Checkpoint`` feature, which no writer may
    give a V2 checkpoint and whose policy forbids a classic one)."""
    if checkpoint_policy(state.configuration) != "v2":
        return False
    return True if has_writer_feature(state.protocol, "v2Checkpoint") else None


def write_checkpoint(log_store: LogStore, snapshot: Snapshot, *, now_ms: int | None = None) -> LastCheckpoint:
    """Write the checkpoint of ``snapshot.version`` and point ``_last_checkpoint`` at it.

    A classic file is put only if absent: a concurrent writer checkpointing the same version wrote an
    equivalent file, and replacing it under a reader that already read the hint could make the row
    count disagree with that hint (a V2 file has a fresh name every time). The hint never moves
    backwards: it is not written when it already names a newer checkpoint, nor when a listing of
    ``_delta_log/`` shows a newer complete checkpoint (one LIST; a concurrent checkpointer can still slip
    between that listing and our PUT, a window of one request, after which readers use an older
    checkpoint and more commits: slower, never wrong). Raises ``UnsupportedFeatureError`` for a table
    this project may not write (a checkpoint is a write: it must carry every feature's state), or whose
    policy allows no checkpoint we can write (see :func:`writes_v2_checkpoints`).
    """
    state = snapshot.state
    if state.protocol is None or state.metadata is None:
        raise InvalidArgumentError("cannot checkpoint a table that does not exist yet")
    check_writable(state.protocol, metadata=state.metadata)
    v2 = writes_v2_checkpoints(state)
    version = state.version
    if v2 is None:
        raise UnsupportedFeatureError(
            f"table {log_store.table_path} has delta.checkpointPolicy=v2 but its protocol lacks the v2Checkpoint "
            f"feature: no writer may give it a V2 checkpoint, and its policy forbids a classic one; nothing was "
            f"written. Add the feature (delta-spark: ALTER TABLE ... SET TBLPROPERTIES) or set the policy to "
            f"classic", feature="v2Checkpoint")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    rows = checkpoint_table(state, now_ms=now, v2=v2)
    sink = io.BytesIO()
    pq.write_table(rows, sink, compression="snappy")
    body = sink.getvalue()
    name = uuid_checkpoint_name(version, str(uuid.uuid4())) if v2 else checkpoint_names(version)[0]
    size, size_in_bytes = rows.num_rows, len(body)
    if not log_store.write_file(name, body, if_absent=True):
        existing = log_store.read_file(name) or b""
        size, size_in_bytes = pq.read_metadata(io.BytesIO(existing)).num_rows, len(existing)
        log.info("checkpoint %s already exists (written concurrently); pointing the hint at it", name)
    failpoints.hit(AFTER_PARQUET)
    hint = LastCheckpoint(version=version, size=size, size_in_bytes=size_in_bytes, num_of_add_files=len(state.files),
                          v2_checkpoint=LastCheckpointV2(path=name, size_in_bytes=size_in_bytes,
                                                         modification_time=now) if v2 else None)
    current = read_last_checkpoint(log_store)
    listed = [f.name for f in log_store.list_files(start_after=f"{version + 1:020d}")]
    newer = [ref.version for ref in listed_checkpoints(listed) if ref.version > version]
    if (current is None or current.version < version) and not newer:
        log_store.write_file(LAST_CHECKPOINT, hint.to_json())
        failpoints.hit(AFTER_HINT)
    else:
        log.info("checkpoint of version %d written; %s left pointing at the newer version %d", version,
                 LAST_CHECKPOINT, max([*newer, current.version if current is not None else -1]))
    return hint


def describe(hint: LastCheckpoint | None) -> str:
    """One line about the last checkpoint, for ``dynacommit show``."""
    if hint is None:
        return "none"
    parts = f", {hint.parts} parts" if hint.parts else ""
    v2 = f", V2 {hint.v2_checkpoint.path}" if hint.v2_checkpoint is not None else ""
    size = f", {hint.size_in_bytes} bytes" if hint.size_in_bytes is not None else ""
    return f"version {hint.version} ({hint.size} actions{parts}{v2}{size})"
