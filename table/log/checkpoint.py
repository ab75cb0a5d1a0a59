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

Then ``_last_checkpoint`` is overwritten with ``{"version", "size", "sizeInBytes", "numOfAddFiles"}``
(never to name an older checkpoint than it names: :func:`point_hint`), and the log files that
``delta.logRetentionDuration`` lets go are deleted (:mod:`table.log.cleanup`).
``size`` (the row count) is what lets a reader notice a checkpoint that does not match its hint
(``table.log.snapshot`` checks it). Multi-part checkpoints (``{v}.checkpoint.{o:010d}.{p:010d}.parquet``) are
read, never written; V2 checkpoints need the ``v2Checkpoint`` feature, which ``check_readable`` refuses.
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
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
from table.log.actionset import ADD_STRUCT, REMOVE_STRUCT, ActionSet, plain_value
from table.log.cleanup import cleanup_expired_logs
from table.log.properties import tombstone_retention_ms
from table.log.protocol import check_writable
from table.log.state import TableState, checkpoint_state

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
    "point_hint",
    "read_checkpoint",
    "read_checkpoint_state",
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
])
"""The V1 checkpoint schema of PROTOCOL.md's appendix (every column nullable, as Spark writes it)."""

# Columns of checkpoints written by others that hold the same thing in another form; not actions.
_DERIVED_FIELDS = frozenset({"partitionValues_parsed", "stats_parsed"})
_ACTION_COLUMNS = ("protocol", "metaData", "txn", "add", "remove", "domainMetadata", "cdc")
_ROW_WISE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata")
"""Action columns read as objects; ``add`` and ``remove`` stay columns (``cdc`` is not in checkpoints)."""
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
    return None if body is None else _parse_hint(log_store, body)


def _parse_hint(log_store: LogStore, body: bytes) -> LastCheckpoint | None:
    try:
        return LastCheckpoint.model_validate_json(body)
    except ValidationError as exc:
        log.warning("ignoring unusable %s of table %s (%s); listing the log instead", LAST_CHECKPOINT,
                    log_store.table_path, exc.errors()[0]["msg"])
        return None


# --- reading ----------------------------------------------------------------------------------------


def _read_parts(log_store: LogStore, version: int, parts: int | None) -> list[tuple[str, pa.Table]]:
    """Each part file of the checkpoint of ``version``, read whole with pyarrow, with its URI."""
    tables = []
    for name in checkpoint_names(version, parts):
        where = log_store.location(name)
        body = log_store.read_file(name)
        if body is None:
            raise CorruptLogError(f"checkpoint file {where} of version {version} does not exist")
        try:
            table = pq.read_table(io.BytesIO(body))
        except (pa.ArrowException, OSError) as exc:
            raise CorruptLogError(f"checkpoint file {where} is not readable parquet: {exc}") from None
        _check_columns(table, where)
        tables.append((where, table))
    return tables


def _check_columns(table: pa.Table, where: str) -> None:
    for column in _V2_COLUMNS:
        if column in table.column_names and table.column(column).null_count < table.num_rows:
            raise UnsupportedFeatureError(
                f"checkpoint {where} is a V2 checkpoint (it has {column} rows), which dynacommit cannot read; "
                f"read this table with delta-spark or deltalake (delta-rs)", feature="v2Checkpoint")
    if "protocol" not in table.column_names or "metaData" not in table.column_names:
        raise CorruptLogError(f"checkpoint {where} lacks the protocol or metaData column: {table.column_names}")
    if "add" in table.column_names:
        add_type = table.schema.field("add").type
        if pa.types.is_struct(add_type) and add_type.get_field_index("deletionVector") >= 0:
            vectors = pc.struct_field(table.column("add"), "deletionVector")
            if vectors.null_count < len(vectors):
                raise UnsupportedFeatureError(
                    f"checkpoint {where} holds files with deletion vectors (table feature deletionVectors), which "
                    f"dynacommit does not implement; read this table with delta-spark or deltalake (delta-rs)",
                    feature="deletionVectors")


def read_checkpoint_state(log_store: LogStore, version: int, *, parts: int | None = None) -> TableState:
    """The table state the checkpoint of ``version`` holds, read column-wise: its files and tombstones stay
    Arrow columns (:class:`~table.log.actionset.ActionSet`), only protocol, metaData and txn rows become
    objects. Raises ``CorruptLogError`` naming the file when a part is missing or unreadable, or the
    actions do not make a table state; ``UnsupportedFeatureError`` for V2 checkpoints and deletion vectors.
    """
    tables = _read_parts(log_store, version, parts)
    row_wise: list[Action] = []
    for where, table in tables:
        for name in _ROW_WISE_COLUMNS:
            if name in table.column_names:
                row_wise.extend(_column_actions(table, name, where))

    def columnar(name: str, model):
        columns = [t.column(name) for _, t in tables if name in t.column_names]
        if not columns:
            return ActionSet.empty(model)
        chunks = [chunk for column in columns for chunk in column.chunks]
        try:
            return ActionSet.from_struct_array(model, pa.chunked_array(chunks, type=chunks[0].type) if chunks
                                               else columns[0])
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise CorruptLogError(f"checkpoint of version {version}: its {name} column does not hold {name} "
                                  f"actions: {exc}") from None

    files, tombstones = columnar("add", AddFile), columnar("remove", RemoveFile)
    if files.to_arrow()["path"].null_count:
        raise CorruptLogError(f"checkpoint of version {version}: an add row has no path")
    try:
        return checkpoint_state(version, row_wise, files, tombstones)
    except CorruptLogError as exc:
        raise CorruptLogError(f"checkpoint of version {version} is not a table state: {exc}") from None


def read_checkpoint(log_store: LogStore, version: int, *, parts: int | None = None) -> list[Action]:
    """Every action of the checkpoint of ``version`` as an object (all parts, in part order): for tools
    and tests; loading a table uses :func:`read_checkpoint_state`, which does not build a million objects.

    Raises ``CorruptLogError`` naming the file when a part is missing, is not readable parquet or holds a
    row that is not an action. Raises ``UnsupportedFeatureError`` for a V2 checkpoint (sidecars).
    """
    actions: list[Action] = []
    for where, table in _read_parts(log_store, version, parts):
        for name in _ACTION_COLUMNS:
            if name in table.column_names:
                actions.extend(_column_actions(table, name, where))
    return actions


def _column_actions(table: pa.Table, name: str, where: str) -> list[Action]:
    column = table.column(name)
    if column.null_count == len(column):
        return []
    arrow_type = column.type
    actions: list[Action] = []
    for row, value in enumerate(column.to_pylist()):
        if value is None:
            continue
        try:
            actions.append(action_from_dict({name: _plain(value, arrow_type)}))
        except ValueError as exc:
            raise CorruptLogError(f"checkpoint {where}, {name} row {row}: {exc}") from None
    return actions


def _plain(value: Any, arrow_type: pa.DataType) -> Any:
    """A checkpoint cell as the JSON a commit would hold, derived ``*_parsed`` columns left out."""
    if pa.types.is_struct(arrow_type) and isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in _DERIVED_FIELDS}
        arrow_type = pa.struct([f for f in arrow_type if f.name not in _DERIVED_FIELDS])
    return plain_value(value, arrow_type)


# --- writing ----------------------------------------------------------------------------------------


def checkpoint_table(state: TableState, *, now_ms: int) -> pa.Table:
    """The parquet rows of the checkpoint of ``state``, in :data:`CHECKPOINT_SCHEMA`: protocol, metaData,
    the latest txn of every application, every live ``add`` (by path), then the tombstones not yet older
    than the retention (a tombstone without a timestamp is expired, as Spark reads a missing
    ``deletionTimestamp`` as 0) whose file is not live again. Files and tombstones go column-wise."""
    if state.protocol is None or state.metadata is None:
        raise InvalidArgumentError("cannot checkpoint a table that has no protocol or metaData (version -1)")
    head = [state.protocol, state.metadata, *(txn for _, txn in sorted(state.app_txns.items()))]
    columns: dict[str, list[dict | None]] = {f.name: [] for f in CHECKPOINT_SCHEMA}
    for action in head:
        name, row = _row(action)
        for column, values in columns.items():
            values.append(row if column == name else None)
    rows = pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in CHECKPOINT_SCHEMA},
                    schema=CHECKPOINT_SCHEMA)
    adds = state.files.to_arrow()
    adds = adds.take(pc.sort_indices(adds["path"]))
    cutoff = now_ms - tombstone_retention_ms(state.configuration)
    removes = state.tombstones.to_arrow()
    if removes.num_rows:
        keep = pc.and_(pc.greater(pc.fill_null(removes["deletionTimestamp"], 0), cutoff),
                       pc.invert(pc.is_in(removes["path"], value_set=adds["path"])))
        removes = removes.filter(keep)
        removes = removes.take(pc.sort_indices(removes["path"]))
    return pa.concat_tables([rows, _only(adds, "add"), _only(removes, "remove")])


def _only(actions: pa.Table, column: str) -> pa.Table:
    """Rows of :data:`CHECKPOINT_SCHEMA` holding ``actions`` (the struct's columns) in ``column``."""
    field = CHECKPOINT_SCHEMA.field(column)
    struct = pa.StructArray.from_arrays([actions.column(f.name).combine_chunks() for f in field.type],
                                        fields=list(field.type))
    return pa.table({f.name: struct if f.name == column else pa.nulls(actions.num_rows, f.type)
                     for f in CHECKPOINT_SCHEMA}, schema=CHECKPOINT_SCHEMA)


def checkpoint_actions(state: TableState, *, now_ms: int) -> list[Action]:
    """The actions :func:`checkpoint_table` writes, as objects (for tools and tests)."""
    table = checkpoint_table(state, now_ms=now_ms)
    return [action for name in _ACTION_COLUMNS if name in table.column_names
            for action in _column_actions(table, name, "checkpoint")]


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
    raise InvalidArgumentError(f"{type(action).__name__} actions are not written to checkpoints row by row")


def write_checkpoint(log_store: LogStore, snapshot: Snapshot, *, now_ms: int | None = None) -> LastCheckpoint:
    """Write the checkpoint of ``snapshot.version`` and point ``_last_checkpoint`` at it.

    The parquet file is put only if absent: a concurrent writer checkpointing the same version wrote an
    equivalent file, and replacing it under a reader that already read the hint could make the row
    count disagree with that hint. The hint never moves backwards (:func:`point_hint`: a compare-and-swap
    on its ETag).
    Raises ``UnsupportedFeatureError`` for a table this project may not write (a checkpoint is a write:
    it must carry every feature's state).
    """
    state = snapshot.state
    if state.protocol is None:
        raise InvalidArgumentError("cannot checkpoint a table that does not exist yet")
    check_writable(state.protocol)
    version = state.version
    rows = checkpoint_table(state, now_ms=int(time.time() * 1000) if now_ms is None else now_ms)
    sink = io.BytesIO()
    pq.write_table(rows, sink, compression="snappy")
    body = sink.getvalue()
    (name,) = checkpoint_names(version)
    size, size_in_bytes = rows.num_rows, len(body)
    if not log_store.write_file(name, body, if_absent=True):
        existing = log_store.read_file(name) or b""
        size, size_in_bytes = pq.read_metadata(io.BytesIO(existing)).num_rows, len(existing)
        log.info("checkpoint %s already exists (written concurrently); pointing the hint at it", name)
    failpoints.hit(AFTER_PARQUET)
    hint = LastCheckpoint(version=version, size=size, size_in_bytes=size_in_bytes,
                          num_of_add_files=len(state.files))
    written, named = point_hint(log_store, hint, name)
    if written:
        failpoints.hit(AFTER_HINT)
    if named is not None:
        cleanup_expired_logs(log_store, state.configuration, checkpoint_version=named,
                             now_ms=int(time.time() * 1000) if now_ms is None else now_ms)
    return hint


HINT_ATTEMPTS = 8
"""Compare-and-swaps of ``_last_checkpoint`` tried while other writers keep changing it."""


def point_hint(log_store: LogStore, hint: LastCheckpoint, name: str) -> tuple[bool, int | None]:
    """Make ``_last_checkpoint`` name ``hint`` (whose checkpoint file ``name`` exists), unless it names a
    newer checkpoint already or a listing shows one (its writer is about to name it). Whether it was
    written, and the version ``_last_checkpoint`` names as far as this writer knows (None: no usable one).

    The hint never moves backwards: it is replaced with a compare-and-swap on the ETag it was read with
    (S3 ``If-Match``; ``If-None-Match: *`` when there is none), so a writer that read an older hint and was
    slow to write its own fails the swap when another writer named a newer checkpoint meanwhile, reads again
    and leaves it. A hint naming a newer checkpoint is never replaced, so neither can it come to name a
    checkpoint that log cleanup (which keeps the hint's checkpoint and everything after it) has deleted.
    """
    newer = [v for v in checkpoint_versions([f.name for f in log_store.list_files(start_after=name)])
             if v > hint.version]
    for _ in range(HINT_ATTEMPTS):
        found = log_store.read_file_tagged(LAST_CHECKPOINT)
        current = _parse_hint(log_store, found[0]) if found is not None else None
        if newer or (current is not None and current.version >= hint.version):
            log.info("checkpoint of version %d written; %s left pointing at the newer version %d", hint.version,
                     LAST_CHECKPOINT, max([*newer, current.version if current is not None else -1]))
            return False, None if current is None else current.version
        if log_store.write_file(LAST_CHECKPOINT, hint.to_json(), if_absent=found is None,
                                if_match=None if found is None else found[1]):
            return True, hint.version
        log.debug("%s of %s changed while it was being replaced; reading it again", LAST_CHECKPOINT,
                  log_store.table_path)
    log.warning("%s of %s kept changing under %d attempts to point it at version %d; left as it is (it names "
                "another writer's checkpoint)", LAST_CHECKPOINT, log_store.table_path, HINT_ATTEMPTS, hint.version)
    return False, None


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
