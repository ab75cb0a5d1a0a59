"""The live files (and the tombstones) of a table state, kept columnar so that size does not cost time.

A table of 100,000 files would need 100,000 ``AddFile`` objects, built from a checkpoint row by row and
copied on every commit. An :class:`ActionSet` is instead an immutable view of

- a **base**: an Arrow table of actions, one row each, with the columns of the action's checkpoint
  struct (``add`` or ``remove``): what a checkpoint holds, read with pyarrow and never turned into Python
  objects wholesale;
- an **overlay**: the actions applied since (``path -> action``) and the base paths they removed.

Applying a commit copies only the overlay (:meth:`updated`); once the overlay passes
:data:`COMPACT_AT` entries it is folded into a new base with Arrow kernels (:meth:`compacted`), so each
commit costs the same at 1,000 files as at 1,000,000. A row of the base becomes an action object only when
asked for by path (:meth:`get`, an index built on the first lookup); whole-table consumers (checkpoints,
readers) take the columns (:meth:`to_arrow`). It is a read-only ``Mapping[str, action]`` keyed by path.

Actions are keyed by path alone: a deletion vector makes another logical file at the same path, but a
table never holds two live logical files of one path (a new vector for a file comes with the ``remove``
of the file with its old one), so a path names one live file here; its ``deletionVector`` is a column.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from table.log.actions import AddFile, RemoveFile

__all__ = ["ADD_STRUCT", "COMPACT_AT", "DELETION_VECTOR_STRUCT", "REMOVE_STRUCT", "ActionSet", "actions_to_arrow",
           "plain_value"]

_STRING_MAP = pa.map_(pa.string(), pa.string())

DELETION_VECTOR_STRUCT = pa.struct([
    pa.field("storageType", pa.string()),
    pa.field("pathOrInlineDv", pa.string()),
    pa.field("offset", pa.int32()),
    pa.field("sizeInBytes", pa.int32()),
    pa.field("cardinality", pa.int64()),
])
"""The ``deletionVector`` struct of ``add``/``remove`` in a checkpoint (PROTOCOL.md)."""

ADD_STRUCT = pa.struct([
    pa.field("path", pa.string()),
    pa.field("partitionValues", _STRING_MAP),
    pa.field("size", pa.int64()),
    pa.field("modificationTime", pa.int64()),
    pa.field("dataChange", pa.bool_()),
    pa.field("stats", pa.string()),
    pa.field("tags", _STRING_MAP),
    pa.field("deletionVector", DELETION_VECTOR_STRUCT),
    pa.field("baseRowId", pa.int64()),
    pa.field("defaultRowCommitVersion", pa.int64()),
    pa.field("clusteringProvider", pa.string()),
])
"""The ``add`` struct of a checkpoint (PROTOCOL.md, Appendix "Checkpoint Schema"), with the fields row
tracking and clustering ask writers to carry into checkpoints."""

REMOVE_STRUCT = pa.struct([
    pa.field("path", pa.string()),
    pa.field("deletionTimestamp", pa.int64()),
    pa.field("dataChange", pa.bool_()),
    pa.field("deletionVector", DELETION_VECTOR_STRUCT),
    pa.field("baseRowId", pa.int64()),
    pa.field("defaultRowCommitVersion", pa.int64()),
])
"""The ``remove`` struct of a checkpoint: tombstones carry no stats or tags, but their deletion vector
(VACUUM keeps a vector file while a tombstone within the retention names it) and the row tracking fields
of the file they remove (PROTOCOL.md, "Writer Requirements for Row Tracking")."""

COMPACT_AT = 4096
"""Overlay entries (actions applied plus base rows removed) at which the overlay is folded into the base."""

A = TypeVar("A", AddFile, RemoveFile)

_MODELS: dict[type, pa.StructType] = {AddFile: ADD_STRUCT, RemoveFile: REMOVE_STRUCT}


def plain_value(value: Any, arrow_type: pa.DataType) -> Any:
    """An Arrow cell (``as_py``/``to_pylist`` form) as the JSON a commit would hold: maps become dicts,
    absent (null) struct fields are dropped, as Delta reads a missing field."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {k: plain_value(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        out = {}
        for field in arrow_type:
            item = value.get(field.name)
            if item is not None:
                out[field.name] = plain_value(item, field.type)
        return out
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [plain_value(v, arrow_type.value_type) for v in value]
    return value


class ActionSet(Mapping[str, A], Generic[A]):
    """The live ``add`` (or tombstone ``remove``) actions of a table state, by path (module docstring)."""

    def __init__(self, model: type[A], base: pa.Table | None = None, *, removed: frozenset[str] = frozenset(),
                 overlay: Mapping[str, A] | None = None):
        self.model = model
        self.struct: pa.StructType = _MODELS[model]
        self._base = base if base is not None else pa.Table.from_batches([], schema=_schema(self.struct))
        self._removed = removed
        self._overlay: dict[str, A] = dict(overlay or {})

    @classmethod
    def empty(cls, model: type[A]) -> ActionSet[A]:
        return cls(model)

    @classmethod
    def from_struct_array(cls, model: type[A], column: pa.ChunkedArray | pa.Array) -> ActionSet[A]:
        """The set of the non-null rows of a checkpoint's ``add``/``remove`` struct column. Fields other
        than the checkpoint struct's are dropped (derived ``*_parsed`` columns, fields of features this
        project refuses to write); a missing field becomes nulls."""
        struct = _MODELS[model]
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        present = column.filter(pc.is_valid(column))
        fields = {f.name: i for i, f in enumerate(present.type)}
        arrays = []
        for field in struct:
            if field.name in fields:
                child = present.field(fields[field.name])
                arrays.append(child if child.type == field.type else child.cast(field.type))
            else:
                arrays.append(pa.nulls(len(present), field.type))
        base = pa.Table.from_arrays(arrays, schema=_schema(struct))
        return cls(model, base)

    # --- Mapping ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._base.num_rows - len(self._removed) + len(self._overlay)

    def __getitem__(self, path: str) -> A:
        found = self.get(path)
        if found is None:
            raise KeyError(path)
        return found

    def get(self, path: str, default: Any = None) -> Any:
        if path in self._overlay:
            return self._overlay[path]
        if path in self._removed:
            return default
        row = self._index.get(path)
        if row is None:
            return default
        return self._materialize(row)

    def __contains__(self, path: object) -> bool:
        return path in self._overlay or (path not in self._removed and path in self._index)

    def __iter__(self) -> Iterator[str]:
        removed, overlay = self._removed, self._overlay
        for path in self._base_paths:
            if path not in removed and path not in overlay:
                yield path
        yield from overlay

    # --- changes ----------------------------------------------------------------------------------

    def updated(self, put: Mapping[str, A], deleted: Iterable[str]) -> ActionSet[A]:
        """A new set: ``deleted`` paths gone, then ``put`` actions in (by path). This set is unchanged."""
        overlay = dict(self._overlay)
        removed = set(self._removed)
        index = self._index if self._base.num_rows else {}
        for path in deleted:
            overlay.pop(path, None)
            if path in index:
                removed.add(path)
        for path, action in put.items():
            overlay[path] = action
            if path in index:
                removed.add(path)
        result = ActionSet(self.model, self._base, removed=frozenset(removed), overlay=overlay)
        for shared in ("_index", "_base_paths"):  # same base: its index is built once
            if shared in self.__dict__:
                result.__dict__[shared] = self.__dict__[shared]
        if len(overlay) + len(removed) >= COMPACT_AT:
            return result.compacted()
        return result

    def compacted(self) -> ActionSet[A]:
        """The same actions with the overlay folded into the base."""
        if not self._overlay and not self._removed:
            return self
        return ActionSet(self.model, self.to_arrow())

    # --- columns ----------------------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        """Every action as a row of the checkpoint struct's columns: the base's rows in base order, then the
        overlay's."""
        return self._arrow

    @functools.cached_property
    def _arrow(self) -> pa.Table:
        base = self._base
        if self._removed:  # every base path the overlay replaces is among them (see updated)
            hidden = pa.array(list(self._removed), pa.string())
            base = base.filter(pc.invert(pc.is_in(base["path"], value_set=hidden)))
        if not self._overlay:
            return base
        return pa.concat_tables([base, actions_to_arrow(list(self._overlay.values()), self.struct)])

    def sorted_actions(self) -> list[A]:
        """Every action as an object, ordered by path (built once per set; costly for large sets)."""
        return self._sorted

    @functools.cached_property
    def _sorted(self) -> list[A]:
        table = self.to_arrow()
        table = table.take(pc.sort_indices(table["path"]))
        names = _attribute_names(self.model)
        columns = []
        for field in self.struct:
            values = table[field.name].to_pylist()
            if pa.types.is_map(field.type) or pa.types.is_struct(field.type):
                values = [plain_value(v, field.type) for v in values]
            columns.append(values)
        keys = [names[f.name] for f in self.struct]
        model = self.model
        return [model(**{k: v for k, v in zip(keys, row) if v is not None}) for row in zip(*columns)]

    def total(self, column: str) -> int:
        """The sum of an integer column (``size``) over every action."""
        value = pc.sum(self.to_arrow()[column]).as_py()
        return int(value or 0)

    # --- internals --------------------------------------------------------------------------------

    @functools.cached_property
    def _base_paths(self) -> list[str]:
        return self._base["path"].to_pylist()

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {path: row for row, path in enumerate(self._base_paths)}

    def _materialize(self, row: int) -> A:
        value = self._base.slice(row, 1).to_pylist()[0]
        return self.model.model_validate(plain_value(value, self.struct))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(other.get(path) == self.get(path) for path in self)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ActionSet({self.model.__name__}, {len(self)} actions, overlay {len(self._overlay)})"


def _schema(struct: pa.StructType) -> pa.Schema:
    return pa.schema(list(struct))


def actions_to_arrow(actions: list[AddFile] | list[RemoveFile], struct: pa.StructType) -> pa.Table:
    """``actions`` as rows of the columns of ``struct`` (Delta's names), built column by column."""
    if not actions:
        return pa.Table.from_batches([], schema=_schema(struct))
    names = _attribute_names(type(actions[0]))
    arrays = []
    for field in struct:
        attribute = names[field.name]
        values = [getattr(action, attribute, None) for action in actions]
        if pa.types.is_map(field.type):
            values = [None if v is None else list(v.items()) for v in values]
        elif pa.types.is_struct(field.type):
            values = [None if v is None else v.model_dump(by_alias=True) for v in values]
        arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=_schema(struct))


@functools.lru_cache(maxsize=None)
def _attribute_names(model: type) -> dict[str, str]:
    """Delta's (camelCase) field names to the model's attribute names."""
    return {(f.alias or name): name for name, f in model.model_fields.items()}
