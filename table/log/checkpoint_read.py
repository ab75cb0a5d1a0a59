"""Reading a checkpoint of any kind into a table state: classic, multi-part and V2 (with sidecars).

A checkpoint's files hold one action per row: Parquet files one nullable struct column per action kind
(``protocol``, ``metaData``, ``txn``, ``domainMetadata``, ``add``, ``remove``, and in V2 checkpoints
``checkpointMetadata`` and ``sidecar``), JSON files one action per line as a commit does. A checkpoint
that holds a ``checkpointMetadata`` action follows the V2 spec: its ``sidecar`` actions name Parquet
files under ``_delta_log/_sidecars/`` that hold (all of) its ``add`` and ``remove`` actions.

The few row-wise actions (protocol, metaData, txn, domainMetadata) become objects; ``add`` and ``remove``
stay Arrow columns (:class:`~table.log.actionset.ActionSet`), so a checkpoint of a million files is not a
million objects. Columns other writers add to those structs (``stats_parsed``, ``partitionValues_parsed``)
hold what ``stats`` and ``partitionValues`` hold in another form and are dropped.

Every failure to read (a file missing, not Parquet, not JSON, rows that are not actions, a sidecar
missing) is :class:`~logstore.errors.CorruptLogError` naming the file, so that the caller can fall back to
another checkpoint or to the commits.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from logstore.base import LogStore
from logstore.errors import CorruptLogError
from logstore.external import SIDECARS
from table.buffers import arrow_buffer
from table.log.actions import (
    Action,
    AddFile,
    CheckpointMetadata,
    RemoveFile,
    Sidecar,
    action_from_dict,
    parse_commit,
)
from table.log.actionset import ADD_STRUCT, REMOVE_STRUCT, ActionSet, actions_to_arrow, plain_value
from table.log.checkpoint_files import CheckpointRef, checkpoint_names
from table.log.state import TableState, checkpoint_state

__all__ = ["LoadedCheckpoint", "column_actions", "load_checkpoint", "read_checkpoint", "read_checkpoint_state"]


_DERIVED_FIELDS = frozenset({"partitionValues_parsed", "stats_parsed"})
"""Columns of checkpoints written by others that hold the same thing in another form; not actions."""
ACTION_COLUMNS = ("checkpointMetadata", "protocol", "metaData", "txn", "domainMetadata", "add", "remove",
                  "sidecar", "cdc")
_ROW_WISE_COLUMNS = ("checkpointMetadata", "protocol", "metaData", "txn", "domainMetadata", "sidecar")
"""Action columns read as objects; ``add`` and ``remove`` stay columns (``cdc`` is never in checkpoints)."""


@dataclasses.dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint read: the ``state`` it describes and the number of ``actions`` its files held (every
    row, sidecars' included), to compare with the hint's ``size``."""

    state: TableState
    actions: int
    v2: bool


def _ref(checkpoint: CheckpointRef | int, parts: int | None) -> CheckpointRef:
    if isinstance(checkpoint, CheckpointRef):
        return checkpoint
    return CheckpointRef(checkpoint, tuple(checkpoint_names(checkpoint, parts)))


def read_checkpoint_state(log_store: LogStore, checkpoint: CheckpointRef | int, *,
                          parts: int | None = None) -> TableState:
    """The table state a checkpoint holds (a :class:`CheckpointRef`, or a version and ``parts`` for a
    classic or multi-part one). Raises ``CorruptLogError`` naming the file when a file is missing or
    unreadable, or the actions do not make a table state."""
    return load_checkpoint(log_store, _ref(checkpoint, parts)).state


def load_checkpoint(log_store: LogStore, ref: CheckpointRef) -> LoadedCheckpoint:
    """:func:`read_checkpoint_state`, with the count of actions read."""
    tops = [_read_file(log_store, name, ref.version) for name in ref.names]
    row_wise: list[Action] = []
    file_tables: list[tuple[str, pa.Table]] = []
    inline: list[Action] = []
    for where, content in tops:
        if isinstance(content, pa.Table):
            for name in _ROW_WISE_COLUMNS:
                if name in content.column_names:
                    row_wise.extend(column_actions(content, name, where))
            file_tables.append((where, content))
        else:
            row_wise.extend(a for a in content if not isinstance(a, (AddFile, RemoveFile)))
            inline.extend(a for a in content if isinstance(a, (AddFile, RemoveFile)))
    metadata = [a for a in row_wise if isinstance(a, CheckpointMetadata)]
    sidecars = [a for a in row_wise if isinstance(a, Sidecar)]
    if sidecars and not metadata:
        raise CorruptLogError(f"checkpoint {_where(log_store, ref)} has sidecar actions but no checkpointMetadata: "
                              f"sidecars belong to V2 checkpoints only")
    if len(metadata) > 1:
        raise CorruptLogError(f"checkpoint {_where(log_store, ref)} has {len(metadata)} checkpointMetadata actions")
    if metadata and metadata[0].version != ref.version:
        raise CorruptLogError(f"checkpoint {_where(log_store, ref)} says it is of version {metadata[0].version}")
    for sidecar in sidecars:
        name = _sidecar_name(log_store, sidecar, ref)
        where, content = _read_file(log_store, name, ref.version)
        assert isinstance(content, pa.Table)
        file_tables.append((where, content))
    files = _columnar(file_tables, "add", AddFile, inline, ref.version)
    tombstones = _columnar(file_tables, "remove", RemoveFile, inline, ref.version)
    if files.to_arrow()["path"].null_count:
        raise CorruptLogError(f"checkpoint of version {ref.version}: an add row has no path")
    replayed = [a for a in row_wise if not isinstance(a, (CheckpointMetadata, Sidecar))]
    try:
        state = checkpoint_state(ref.version, replayed, files, tombstones)
    except CorruptLogError as exc:
        raise CorruptLogError(f"checkpoint of version {ref.version} is not a table state: {exc}") from None
    return LoadedCheckpoint(state, len(row_wise) + len(files) + len(tombstones), bool(metadata))


def read_checkpoint(log_store: LogStore, checkpoint: CheckpointRef | int, *,
                    parts: int | None = None) -> list[Action]:
    """Every action of a checkpoint as an object (top-level files in part order, then the sidecars' rows):
    for tools and tests; loading a table uses :func:`read_checkpoint_state`, which does not build a
    million objects. Raises ``CorruptLogError`` as :func:`read_checkpoint_state` does."""
    ref = _ref(checkpoint, parts)
    actions: list[Action] = []
    for where, content in (_read_file(log_store, name, ref.version) for name in ref.names):
        if isinstance(content, pa.Table):
            for name in ACTION_COLUMNS:
                if name in content.column_names:
                    actions.extend(column_actions(content, name, where))
        else:
            actions.extend(content)
    for sidecar in [a for a in actions if isinstance(a, Sidecar)]:
        where, content = _read_file(log_store, _sidecar_name(log_store, sidecar, ref), ref.version)
        assert isinstance(content, pa.Table)
        for name in ("add", "remove"):
            if name in content.column_names:
                actions.extend(column_actions(content, name, where))
    return actions


# --- files --------------------------------------------------------------------------------------------


def _read_file(log_store: LogStore, name: str, version: int) -> tuple[str, pa.Table | list[Action]]:
    """One file of a checkpoint, with its URI: Parquet read whole with pyarrow, JSON parsed as actions."""
    where = log_store.location(name)
    body = log_store.read_file(name)
    if body is None:
        raise CorruptLogError(f"checkpoint file {where} of version {version} does not exist")
    if name.endswith(".json"):
        return where, parse_commit(body, version=version, where=where)
    try:
        table = pq.read_table(pa.BufferReader(arrow_buffer(body)))  # not a Python file: see arrow_buffer
    except (pa.ArrowException, OSError) as exc:
        raise CorruptLogError(f"checkpoint file {where} is not readable parquet: {exc}") from None
    if not set(table.column_names) & set(ACTION_COLUMNS):
        raise CorruptLogError(f"checkpoint file {where} has no action column: {table.column_names}")
    return where, table


def _sidecar_name(log_store: LogStore, sidecar: Sidecar, ref: CheckpointRef) -> str:
    """The name (relative to ``_delta_log/``) of a sidecar file: its path is URI-encoded and relative to
    ``_delta_log/_sidecars/``, or an absolute URI that must lie there."""
    path = sidecar.path
    if "://" in path:
        directory = log_store.location(SIDECARS + "/").split("://", 1)[-1]
        within = path.split("://", 1)[1]
        if not within.startswith(directory):
            raise CorruptLogError(f"checkpoint of version {ref.version} names sidecar {path!r}, which is not in "
                                  f"_delta_log/{SIDECARS}/ of this table")
        path = within[len(directory):]
    name = unquote(path)
    if not name or "/" in name:
        raise CorruptLogError(f"checkpoint of version {ref.version} names sidecar {sidecar.path!r}, which is not "
                              f"a file directly in _delta_log/{SIDECARS}/")
    return f"{SIDECARS}/{name}"


def _where(log_store: LogStore, ref: CheckpointRef) -> str:
    return log_store.location(ref.names[0])


# --- columns ------------------------------------------------------------------------------------------


def _columnar(tables: list[tuple[str, pa.Table]], name: str, model, inline: list[Action], version: int):
    """The ``add`` (or ``remove``) actions of every Parquet file as one columnar set, plus those of JSON
    files (few: a JSON checkpoint with many files keeps them in sidecars)."""
    struct = ADD_STRUCT if model is AddFile else REMOVE_STRUCT
    chunks = []
    for _, table in tables:
        if name in table.column_names:
            chunks.append(_conformed(table.column(name), struct, version, name))
    objects = [a for a in inline if isinstance(a, model)]
    if objects:
        chunks.append(_conformed(pa.chunked_array(
            [pa.StructArray.from_arrays([c.combine_chunks() for c in actions_to_arrow(objects, struct).columns],
                                        fields=list(struct))]), struct, version, name))
    if not chunks:
        return ActionSet.empty(model)
    return ActionSet.from_struct_array(model, pa.chunked_array([c for chunk in chunks for c in chunk.chunks],
                                                               type=struct))


def _conformed(column: pa.ChunkedArray, struct: pa.StructType, version: int, name: str) -> pa.ChunkedArray:
    """The non-null rows of a checkpoint's ``add``/``remove`` column in :data:`ADD_STRUCT` form (fields of
    other writers dropped, missing ones null), so that files of several writers concatenate."""
    try:
        conformed = ActionSet.from_struct_array(AddFile if struct is ADD_STRUCT else RemoveFile, column)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise CorruptLogError(f"checkpoint of version {version}: its {name} column does not hold {name} "
                              f"actions: {exc}") from None
    table = conformed.to_arrow()
    return pa.chunked_array([pa.StructArray.from_arrays([table.column(f.name).combine_chunks() for f in struct],
                                                        fields=list(struct))], type=struct)


def column_actions(table: pa.Table, name: str, where: str) -> list[Action]:
    """The actions of one action column of a checkpoint file, as objects (null rows skipped)."""
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
