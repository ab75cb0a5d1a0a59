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
(and ``v2Checkpoint.path`` naming a V2 checkpoint's file), never to name an older checkpoint than it names
(:func:`point_hint`), and the log files that ``delta.logRetentionDuration`` lets go are deleted
(:mod:`table.log.cleanup`). ``size`` (the row count) is what lets a reader
notice a checkpoint that does not match its hint (``table.log.snapshot`` checks it).

``checkpointProtection`` asks writers not to create checkpoints of versions whose protocol they cannot
write: every checkpoint here is of a snapshot whose protocol and metadata :func:`check_writable` accepts.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
import weakref
from collections.abc import Iterator
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
    parse_last_checkpoint,
    read_last_checkpoint,
    uuid_checkpoint_name,
)
from table.log.checkpoint_read import ACTION_COLUMNS, column_actions, read_checkpoint, read_checkpoint_state
from table.log.cleanup import cleanup_expired_logs
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
    "checkpoint_parts",
    "checkpoint_table",
    "describe",
    "point_hint",
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


CHECKPOINT_SLICE_ROWS = 65_536
"""Files (``add`` or ``remove`` rows) per row group of a checkpoint we write: the files are sorted by path
and taken into the file this many at a time, so no sorted copy of all of them is held at once."""


def checkpoint_table(state: TableState, *, now_ms: int, v2: bool = False) -> pa.Table:
    """The parquet rows of the checkpoint of ``state``: with ``v2``, first the ``checkpointMetadata`` row
    (in :data:`V2_CHECKPOINT_SCHEMA`); then protocol, metaData, the latest txn of every application, the
    live metadata domains, every live ``add`` (by path), then the tombstones not yet older than the
    retention (a tombstone without a timestamp is expired, as Spark reads a missing ``deletionTimestamp``
    as 0) whose file is not live again. Files and tombstones go column-wise."""
    return pa.concat_tables(list(checkpoint_parts(state, now_ms=now_ms, v2=v2)))


def checkpoint_parts(state: TableState, *, now_ms: int, v2: bool = False) -> Iterator[pa.Table]:
    """The rows of :func:`checkpoint_table`, in its order, as consecutive tables: the head rows, then the
    files and the tombstones each :data:`CHECKPOINT_SLICE_ROWS` at a time, taken from the state's columns as
    they are asked for (what :func:`write_checkpoint` writes, one row group each)."""
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
    yield pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in schema}, schema=schema)
    adds = state.files.to_arrow()
    yield from _sliced(adds, "add", schema)
    cutoff = now_ms - tombstone_retention_ms(state.configuration)
    removes = state.tombstones.to_arrow()
    if removes.num_rows:
        keep = pc.and_(pc.greater(pc.fill_null(removes["deletionTimestamp"], 0), cutoff),
                       pc.invert(pc.is_in(removes["path"], value_set=adds["path"])))
        yield from _sliced(removes.filter(keep), "remove", schema)


def _sliced(actions: pa.Table, column: str, schema: pa.Schema) -> Iterator[pa.Table]:
    """``actions`` sorted by path, as rows of ``schema`` (:func:`_only`), :data:`CHECKPOINT_SLICE_ROWS` at a time."""
    order = pc.sort_indices(actions["path"])
    for start in range(0, len(order), CHECKPOINT_SLICE_ROWS):
        yield _only(actions.take(order.slice(start, CHECKPOINT_SLICE_ROWS)), column, schema)


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
    backwards (:func:`point_hint`: a compare-and-swap on its ETag). Raises ``UnsupportedFeatureError`` for a table
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
    sink, size = io.BytesIO(), 0
    with pq.ParquetWriter(sink, V2_CHECKPOINT_SCHEMA if v2 else CHECKPOINT_SCHEMA, compression="snappy") as writer:
        for part in checkpoint_parts(state, now_ms=now, v2=v2):  # one row group each: no sorted copy of every file
            writer.write_table(part)
            size += part.num_rows
    body = sink.getvalue()
    name = uuid_checkpoint_name(version, str(uuid.uuid4())) if v2 else checkpoint_names(version)[0]
    size_in_bytes = len(body)
    if not log_store.write_file(name, body, if_absent=True):
        existing = log_store.read_file(name) or b""
        size, size_in_bytes = pq.read_metadata(io.BytesIO(existing)).num_rows, len(existing)
        log.info("checkpoint %s already exists (written concurrently); pointing the hint at it", name)
    failpoints.hit(AFTER_PARQUET)
    hint = LastCheckpoint(version=version, size=size, size_in_bytes=size_in_bytes, num_of_add_files=len(state.files),
                          v2_checkpoint=LastCheckpointV2(path=name, size_in_bytes=size_in_bytes,
                                                         modification_time=now) if v2 else None)
    written, named = point_hint(log_store, hint)
    if written:
        failpoints.hit(AFTER_HINT)
    if named is not None:
        cleanup_expired_logs(log_store, state.configuration, checkpoint_version=named, now_ms=now)
    return hint


_HINT_WRITTEN: weakref.WeakKeyDictionary[LogStore, tuple[int, str]] = weakref.WeakKeyDictionary()
"""Per log store: the version named by the ``_last_checkpoint`` it last wrote, and the tag of those bytes
(:func:`point_hint` replaces them with one compare-and-swap, without a LIST and a GET first)."""


def _remember(log_store: LogStore, version: int, tag: str | None) -> None:
    if tag:
        _HINT_WRITTEN[log_store] = (version, tag)


HINT_ATTEMPTS = 8
"""Compare-and-swaps of ``_last_checkpoint`` tried while other writers keep changing it."""


def point_hint(log_store: LogStore, hint: LastCheckpoint) -> tuple[bool, int | None]:
    """Make ``_last_checkpoint`` name ``hint`` (whose checkpoint file exists), unless it names a newer
    checkpoint already or a listing shows one (its writer is about to name it). Whether it was written, and
    the version ``_last_checkpoint`` names as far as this writer knows (None: no usable one).

    The hint never moves backwards: it is replaced with a compare-and-swap on the ETag it was read with
    (S3 ``If-Match``; ``If-None-Match: *`` when there is none), so a writer that read an older hint and was
    slow to write its own fails the swap when another writer named a newer checkpoint meanwhile, reads again
    and leaves it. A hint naming a newer checkpoint is never replaced, so neither can it come to name a
    checkpoint that log cleanup (which keeps the hint's checkpoint and everything after it) has deleted.

    A log store that wrote the hint itself remembers the tag of those bytes: its next hint is one
    compare-and-swap on that tag, with no LIST and no GET before it (a long-lived writer checkpointing every
    tenth commit sends one request for the hint, not three). When the swap fails, someone replaced the hint
    since, and the hint is read as above.
    """
    body = hint.to_json()
    mine = _HINT_WRITTEN.pop(log_store, None)
    if mine is not None and mine[0] < hint.version:
        # The hint as this log store last wrote it, unless someone replaced it since: then the swap fails and
        # the hint is read below. An older hint of ours is replaced by a newer one, as below; a checkpoint
        # newer than ours whose writer has not named it yet (what the listing below would see) is named by
        # that writer's own swap, which fails on our write, reads again and replaces our older hint.
        written, tag = log_store.write_file_tagged(LAST_CHECKPOINT, body, if_match=mine[1])
        if written:
            _remember(log_store, hint.version, tag)
            return True, hint.version
    listed = [f.name for f in log_store.list_files(start_after=f"{hint.version + 1:020d}")]
    newer = [ref.version for ref in listed_checkpoints(listed) if ref.version > hint.version]
    for _ in range(HINT_ATTEMPTS):
        found = log_store.read_file_tagged(LAST_CHECKPOINT)
        current = parse_last_checkpoint(log_store, found[0]) if found is not None else None
        if newer or (current is not None and current.version >= hint.version):
            log.info("checkpoint of version %d written; %s left pointing at the newer version %d", hint.version,
                     LAST_CHECKPOINT, max([*newer, current.version if current is not None else -1]))
            return False, None if current is None else current.version
        written, tag = log_store.write_file_tagged(LAST_CHECKPOINT, body, if_absent=found is None,
                                                   if_match=None if found is None else found[1])
        if written:
            _remember(log_store, hint.version, tag)
            return True, hint.version
        log.debug("%s of %s changed while it was being replaced; reading it again", LAST_CHECKPOINT,
                  log_store.table_path)
    log.warning("%s of %s kept changing under %d attempts to point it at version %d; left as it is (it names "
                "another writer's checkpoint)", LAST_CHECKPOINT, log_store.table_path, HINT_ATTEMPTS, hint.version)
    return False, None


def describe(hint: LastCheckpoint | None) -> str:
    """One line about the last checkpoint, for ``dynacommit show``."""
    if hint is None:
        return "none"
    parts = f", {hint.parts} parts" if hint.parts else ""
    v2 = f", V2 {hint.v2_checkpoint.path}" if hint.v2_checkpoint is not None else ""
    size = f", {hint.size_in_bytes} bytes" if hint.size_in_bytes is not None else ""
    return f"version {hint.version} ({hint.size} actions{parts}{v2}{size})"
