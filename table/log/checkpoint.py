"""Classic (V1) parquet checkpoints and the ``_delta_log/_last_checkpoint`` hint.

A checkpoint of version ``v`` is the table's state at ``v`` written as actions, one per parquet row, so a
reader replays it plus the commits after ``v`` instead of every commit since 0 (PROTOCOL.md,
"Checkpoints" and Appendix "Checkpoint Schema"). The file ``{v:020d}.checkpoint.parquet`` has one
nullable struct column per action kind: ``txn``, ``add``, ``remove``, ``metaData``, ``protocol``; in each
row exactly one of them is set. What goes in:

- the ``protocol`` and the ``metaData`` (exactly one each);
- the latest ``txn`` of every application;
- every live ``add`` (``stats`` as its JSON string, ``partitionValues`` as ``map<string,string>``);
- ``remove`` tombstones whose ``deletionTimestamp`` is within ``delta.deletedFileRetentionDuration``
  (default one week): VACUUM of another client must not delete a file a reader of an older version
  may still read; an older tombstone has served that purpose. ``commitInfo`` is never checkpointed.

Then ``_last_checkpoint`` is overwritten with ``{"version", "size", "sizeInBytes", "numOfAddFiles"}``.
``size`` (the row count) is what lets a reader notice a checkpoint that does not match its hint
(``table.log.snapshot`` checks it). Multi-part checkpoints (``{v}.checkpoint.{o:010d}.{p:010d}.parquet``) are
read, never written; V2 checkpoints need the ``v2Checkpoint`` feature, which ``check_readable`` refuses.
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from logstore import failpoints
from logstore.base import LogStore
from logstore.errors import CorruptLogError, InvalidArgumentError
from table.errors import UnsupportedFeatureError
from table.log.actions import (
    Action,
    AddFile,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
    action_from_dict,
)
from table.log.properties import tombstone_retention_ms
from table.log.protocol import check_writable
from table.log.state import TableState

if TYPE_CHECKING:
    from table.log.snapshot import Snapshot

__all__ = [
    "CHECKPOINT_SCHEMA",
    "LAST_CHECKPOINT",
    "LastCheckpoint",
    "checkpoint_actions",
    "checkpoint_names",
    "checkpoint_table",
    "checkpoint_versions",
    "describe",
    "read_checkpoint",
    "read_last_checkpoint",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

AFTER_PARQUET = failpoints.declare(
    "table.checkpoint.after_parquet", "the checkpoint file is written; _last_checkpoint still names the previous one")
AFTER_HINT = failpoints.declare("table.checkpoint.after_hint", "the checkpoint and _last_checkpoint are written")

LAST_CHECKPOINT = "_last_checkpoint"

_STRING_MAP = pa.map_(pa.string(), pa.string())
_STRING_LIST = pa.list_(pa.string())

CHECKPOINT_SCHEMA = pa.schema([
    pa.field("txn", pa.struct([
        pa.field("appId", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("lastUpdated", pa.int64()),
    ])),
    pa.field("add", pa.struct([
        pa.field("path", pa.string()),
        pa.field("partitionValues", _STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("stats", pa.string()),
        pa.field("tags", _STRING_MAP),
    ])),
    pa.field("remove", pa.struct([
        pa.field("path", pa.string()),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_()),
    ])),
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
])
"""The V1 checkpoint schema of PROTOCOL.md's appendix (every column nullable, as Spark writes it)."""

# Columns of checkpoints written by others that hold the same thing in another form; not actions.
_DERIVED_FIELDS = frozenset({"partitionValues_parsed", "stats_parsed"})
_ACTION_COLUMNS = ("protocol", "metaData", "txn", "add", "remove", "domainMetadata", "cdc")
_V2_COLUMNS = ("sidecar", "checkpointMetadata")


class LastCheckpoint(BaseModel):
    """The ``_last_checkpoint`` hint: which checkpoint is newest and how many actions it holds."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, alias_generator=to_camel, extra="allow",
                              strict=True)

    version: int
    size: int
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None

    def to_json(self) -> bytes:
        return self.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")


def checkpoint_names(version: int, parts: int | None = None) -> list[str]:
    """The file names (in ``_delta_log/``) of the checkpoint of ``version``: one classic file, or ``parts``
    part files."""
    if parts is None:
        return [f"{version:020d}.checkpoint.parquet"]
    return [f"{version:020d}.checkpoint.{part:010d}.{parts:010d}.parquet" for part in range(1, parts + 1)]


def read_last_checkpoint(log_store: LogStore) -> LastCheckpoint | None:
    """The ``_last_checkpoint`` hint, or None when it is absent or unusable.

    An unusable hint (not JSON, no ``version`` or ``size``) is logged and treated as absent, as
    delta-spark and delta-kernel do: it is only a hint, and the log can be listed instead.
    """
    body = log_store.read_file(LAST_CHECKPOINT)
    if body is None:
        return None
    try:
        return LastCheckpoint.model_validate_json(body)
    except ValidationError as exc:
        log.warning("ignoring unusable %s of table %s (%s); listing the log instead", LAST_CHECKPOINT,
                    log_store.table_path, exc.errors()[0]["msg"])
        return None


# --- reading ----------------------------------------------------------------------------------------


def read_checkpoint(log_store: LogStore, version: int, *, parts: int | None = None) -> list[Action]:
    """The actions of the checkpoint of ``version`` (all parts, in part order).

    Raises ``CorruptLogError`` naming the file when a part is missing, is not readable parquet or holds a
    row that is not an action. Raises ``UnsupportedFeatureError`` for a V2 checkpoint (sidecars).
    """
    actions: list[Action] = []
    rows = 0
    names = checkpoint_names(version, parts)
    for name in names:
        where = log_store.location(name)
        body = log_store.read_file(name)
        if body is None:
            raise CorruptLogError(f"checkpoint file {where} of version {version} does not exist")
        try:
            table = pq.read_table(io.BytesIO(body))
        except (pa.ArrowException, OSError) as exc:
            raise CorruptLogError(f"checkpoint file {where} is not readable parquet: {exc}") from None
        rows += table.num_rows
        actions.extend(_rows_to_actions(table, where))
    return actions


def _rows_to_actions(table: pa.Table, where: str) -> list[Action]:
    for column in _V2_COLUMNS:
        if column in table.column_names and table.column(column).null_count < table.num_rows:
            raise UnsupportedFeatureError(
                f"checkpoint {where} is a V2 checkpoint (it has {column} rows), which dynacommit cannot read; "
                f"read this table with delta-spark or deltalake (delta-rs)", feature="v2Checkpoint")
    columns = [c for c in _ACTION_COLUMNS if c in table.column_names]
    if "protocol" not in columns or "metaData" not in columns:
        raise CorruptLogError(f"checkpoint {where} lacks the protocol or metaData column: {table.column_names}")
    actions: list[Action] = []
    for name in columns:
        column = table.column(name)
        if column.null_count == len(column):
            continue
        arrow_type = column.type
        for row, value in enumerate(column.to_pylist()):
            if value is None:
                continue
            try:
                actions.append(action_from_dict({name: _plain(value, arrow_type, top=True)}))
            except ValueError as exc:
                raise CorruptLogError(f"checkpoint {where}, {name} row {row}: {exc}") from None
    return actions


def _plain(value: Any, arrow_type: pa.DataType, *, top: bool = False) -> Any:
    """A checkpoint cell as the JSON a commit would hold: maps become dicts, absent struct fields are
    dropped (a parquet null is Delta's "field not present"), derived columns are left out."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {k: _plain(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        out = {}
        for field in arrow_type:
            if top and field.name in _DERIVED_FIELDS:
                continue
            item = value.get(field.name)
            if item is not None:
                out[field.name] = _plain(item, field.type)
        return out
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [_plain(v, arrow_type.value_type) for v in value]
    return value


# --- writing ----------------------------------------------------------------------------------------

def checkpoint_actions(state: TableState, *, now_ms: int) -> list[Action]:
    """The actions a checkpoint of ``state`` holds, in a stable order: protocol, metaData, txns, adds,
    then the tombstones not yet older than the retention (a tombstone without a timestamp is expired,
    as Spark reads a missing ``deletionTimestamp`` as 0)."""
    if state.protocol is None or state.metadata is None:
        raise InvalidArgumentError("cannot checkpoint a table that has no protocol or metaData (version -1)")
    cutoff = now_ms - tombstone_retention_ms(state.configuration)
    removes = [r for _, r in sorted(state.tombstones.items())
               if (r.deletion_timestamp or 0) > cutoff and r.path not in state.files]
    return [
        state.protocol,
        state.metadata,
        *(txn for _, txn in sorted(state.app_txns.items())),
        *(add for _, add in sorted(state.files.items())),
        *removes,
    ]


def checkpoint_table(actions: Iterable[Action]) -> pa.Table:
    """The parquet rows of ``actions`` in :data:`CHECKPOINT_SCHEMA`."""
    columns: dict[str, list[dict | None]] = {f.name: [] for f in CHECKPOINT_SCHEMA}
    for action in actions:
        name, row = _row(action)
        for column, values in columns.items():
            values.append(row if column == name else None)
    return pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in CHECKPOINT_SCHEMA},
                    schema=CHECKPOINT_SCHEMA)


def _row(action: Action) -> tuple[str, dict]:
    if isinstance(action, AddFile):
        return "add", {"path": action.path, "partitionValues": action.partition_values, "size": action.size,
                       "modificationTime": action.modification_time, "dataChange": action.data_change,
                       "stats": action.stats, "tags": action.tags}
    if isinstance(action, RemoveFile):
        return "remove", {"path": action.path, "deletionTimestamp": action.deletion_timestamp,
                          "dataChange": action.data_change}
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
    raise InvalidArgumentError(f"{type(action).__name__} actions are not written to checkpoints")


def write_checkpoint(log_store: LogStore, snapshot: Snapshot, *, now_ms: int | None = None) -> LastCheckpoint:
    """Write the checkpoint of ``snapshot.version`` and point ``_last_checkpoint`` at it.

    The parquet file is put only if absent: a concurrent writer checkpointing the same version wrote an
    equivalent file, and replacing it under a reader that already read the hint could make the row
    count disagree with that hint. The hint never moves backwards: it is not written when it already
    names a newer checkpoint, nor when a listing of ``_delta_log/`` shows a newer complete checkpoint
    (one LIST; a concurrent checkpointer can still slip between that listing and our PUT, a window of
    one request, after which readers use an older checkpoint and more commits: slower, never wrong).
    Raises ``UnsupportedFeatureError`` for a table this project may not write (a checkpoint is a write:
    it must carry every feature's state).
    """
    state = snapshot.state
    if state.protocol is None:
        raise InvalidArgumentError("cannot checkpoint a table that does not exist yet")
    check_writable(state.protocol)
    version = state.version
    actions = checkpoint_actions(state, now_ms=int(time.time() * 1000) if now_ms is None else now_ms)
    sink = io.BytesIO()
    pq.write_table(checkpoint_table(actions), sink, compression="snappy")
    body = sink.getvalue()
    (name,) = checkpoint_names(version)
    size, size_in_bytes = len(actions), len(body)
    if not log_store.write_file(name, body, if_absent=True):
        existing = log_store.read_file(name) or b""
        size, size_in_bytes = pq.read_metadata(io.BytesIO(existing)).num_rows, len(existing)
        log.info("checkpoint %s already exists (written concurrently); pointing the hint at it", name)
    failpoints.hit(AFTER_PARQUET)
    hint = LastCheckpoint(version=version, size=size, size_in_bytes=size_in_bytes,
                          num_of_add_files=len(state.files))
    current = read_last_checkpoint(log_store)
    newer = [v for v in checkpoint_versions([f.name for f in log_store.list_files(start_after=name)]) if v > version]
    if (current is None or current.version < version) and not newer:
        log_store.write_file(LAST_CHECKPOINT, hint.to_json())
        failpoints.hit(AFTER_HINT)
    else:
        log.info("checkpoint of version %d written; %s left pointing at the newer version %d", version,
                 LAST_CHECKPOINT, max([*newer, current.version if current is not None else -1]))
    return hint


def checkpoint_versions(names: Sequence[str]) -> dict[int, int | None]:
    """Complete checkpoints among file names of ``_delta_log/``: ``{version: parts or None}``.

    A multi-part checkpoint counts only when all its parts are listed; V2 (uuid-named) checkpoints and
    anything else are ignored.
    """
    classic: set[int] = set()
    multi: dict[tuple[int, int], set[int]] = {}
    for name in names:
        match = _CHECKPOINT_NAME.match(name)
        if match is None:
            continue
        version = int(match.group(1))
        if match.group(2) is None:
            classic.add(version)
        else:
            multi.setdefault((version, int(match.group(3))), set()).add(int(match.group(2)))
    found: dict[int, int | None] = {}
    for (version, parts), seen in multi.items():
        if seen == set(range(1, parts + 1)):
            found[version] = parts
    for version in classic:
        found[version] = None
    return found


_CHECKPOINT_NAME = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


def describe(hint: LastCheckpoint | None) -> str:
    """One line about the last checkpoint, for ``dynacommit show``."""
    if hint is None:
        return "none"
    parts = f", {hint.parts} parts" if hint.parts else ""
    size = f", {hint.size_in_bytes} bytes" if hint.size_in_bytes is not None else ""
    return f"version {hint.version} ({hint.size} actions{parts}{size})"
