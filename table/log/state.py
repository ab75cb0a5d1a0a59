"""A table's state at a version, computed from its log by a pure function.

Replay follows PROTOCOL.md "Action Reconciliation":

- the latest ``protocol`` and the latest ``metaData`` win;
- ``txn``: the latest action per ``appId`` wins (even with a lower version: the protocol lets an
  application roll back);
- ``domainMetadata``: the latest per domain wins, ``removed=true`` deletes it;
- files: a logical file is ``(path, deletionVector.uniqueId)``; the newest ``add`` or ``remove`` for it
  wins, so re-adding a removed path is legal and makes it live again. Actions inside one commit are
  applied in file order, as delta-spark's replay does;
- ``commitInfo`` and ``cdc`` do not change the snapshot.

Deletion vectors: an ``add`` carrying one is the logical file ``(path, uniqueId)``, which replaces the
file at that path once the ``remove`` of the old logical file (the same path, its old vector or none) is
applied; readers drop the rows it deletes (``table.data.read``). A ``remove`` whose logical key is not
the live one's leaves the live file alone and only records the tombstone.

Nothing here does I/O: ``apply(state, version, actions)`` returns a new :class:`TableState`, so the
snapshot logic is tested without S3 and a ``Table`` can hold its state while reading only new commits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from logstore.errors import CorruptLogError, InvalidArgumentError
from table.log import properties, writable
from table.log.actions import (
    Action,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from table.log.actionset import ActionSet
from table.log.schema import schema_problem

__all__ = ["TableState", "apply", "checkpoint_state", "empty_state", "replay"]

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class TableState:
    """The snapshot of a table at ``version``: what readers and writers need from the log.

    ``files`` maps each live file's ``path`` (as written in the log) to its ``add``; ``tombstones``
    maps removed paths to their latest ``remove`` (for VACUUM; a path can be in both if a ``remove``
    named a deletion-vector variant of a live file). Both are :class:`~table.log.actionset.ActionSet`:
    columnar, read-only, cheap to derive from one another. ``app_txns`` maps ``appId`` to its latest
    ``txn``. ``version`` is -1 and protocol/metadata are None only in :func:`empty_state`.
    """

    version: int
    protocol: Protocol | None
    metadata: Metadata | None
    files: ActionSet[AddFile]
    tombstones: ActionSet[RemoveFile]
    app_txns: Mapping[str, Txn]
    domain_metadata: Mapping[str, DomainMetadata] = dataclasses.field(default_factory=lambda: _EMPTY)

    @property
    def configuration(self) -> Mapping[str, str | None]:
        """The table properties (``metaData.configuration``)."""
        return {} if self.metadata is None else self.metadata.configuration

    @property
    def partition_columns(self) -> list[str]:
        return [] if self.metadata is None else list(self.metadata.partition_columns)

    @property
    def append_only(self) -> bool:
        """Whether ``delta.appendOnly`` is active: set to true on a protocol that supports it (writer
        version 2 to 6, or 7 with the ``appendOnly`` feature). Writers must then refuse ``remove``
        actions with ``dataChange=true``."""
        return writable.append_only(self.protocol, self.metadata)

    @property
    def checkpoint_interval(self) -> int:
        """``delta.checkpointInterval`` (default 10): write a checkpoint every this many commits."""
        return properties.checkpoint_interval(self.configuration)

    def app_version(self, app_id: str) -> int | None:
        """The latest version committed by application ``app_id``, or None if it never committed."""
        txn = self.app_txns.get(app_id)
        return None if txn is None else txn.version


def empty_state() -> TableState:
    """The state before version 0: no protocol, no metadata, no files."""
    return TableState(version=-1, protocol=None, metadata=None, files=ActionSet.empty(AddFile),
                      tombstones=ActionSet.empty(RemoveFile), app_txns=_EMPTY)


def checkpoint_state(version: int, actions: Iterable[Action], files: ActionSet[AddFile],
                     tombstones: ActionSet[RemoveFile]) -> TableState:
    """The state a checkpoint of ``version`` describes: its few row-wise ``actions`` (protocol, metaData,
    txn, domainMetadata) replayed, and its ``files`` and ``tombstones`` taken as they are (columnar).
    Raises CorruptLogError as :func:`replay` does (no protocol or metaData, an unusable schema)."""
    start = dataclasses.replace(empty_state(), files=files, tombstones=tombstones)
    builder = _Builder(start)
    builder.apply(version, actions)
    return builder.freeze()


def apply(state: TableState, version: int, actions: Iterable[Action]) -> TableState:
    """The state after commit ``version`` (whose actions are ``actions``) is applied to ``state``.

    ``version`` must be ``state.version + 1``, except on the empty state, where it may be any version
    (replay that starts from a checkpoint applies the checkpoint's actions at its version). Raises
    ``CorruptLogError`` for a commit with two protocol or two metaData actions, or that leaves the table
    without either.
    """
    return replay([(version, actions)], state=state)


def replay(commits: Iterable[tuple[int, Iterable[Action]]], *, state: TableState | None = None) -> TableState:
    """Apply consecutive commits ``(version, actions)`` to ``state`` (default: the empty state).

    Equivalent to folding :func:`apply`, but the mappings are copied once rather than once per commit.
    """
    start = empty_state() if state is None else state
    builder = _Builder(start)
    for version, actions in commits:
        builder.apply(version, actions)
    return builder.freeze() if builder.version != start.version else start


class _Builder:
    """The mutable working copy behind :func:`replay`; never escapes this module."""

    def __init__(self, state: TableState):
        self.version = state.version
        self.protocol = state.protocol
        self.metadata = state.metadata
        # Changes since ``state``; the sets themselves are copied once, at freeze.
        self.files: ActionSet[AddFile] = state.files  # type: ignore[assignment]
        self.tombstones: ActionSet[RemoveFile] = state.tombstones  # type: ignore[assignment]
        self.added: dict[str, AddFile] = {}
        self.unlisted: set[str] = set()  # paths no longer live
        self.buried: dict[str, RemoveFile] = {}
        self.unburied: set[str] = set()  # paths no longer tombstones
        self.app_txns: dict[str, Txn] = dict(state.app_txns)
        self.domains: dict[str, DomainMetadata] = dict(state.domain_metadata)

    def apply(self, version: int, actions: Iterable[Action]) -> None:
        if self.version >= 0 and version != self.version + 1:
            raise InvalidArgumentError(f"commit {version} cannot follow version {self.version}: versions must be "
                                       f"consecutive")
        if version < 0:
            raise InvalidArgumentError(f"log versions start at 0, got {version}")
        seen_protocol = seen_metadata = False
        for action in actions:
            if isinstance(action, AddFile):
                self._add(version, action)
            elif isinstance(action, RemoveFile):
                self._remove(action)
            elif isinstance(action, Protocol):
                if seen_protocol:
                    raise CorruptLogError(f"version {version} has more than one protocol action")
                seen_protocol, self.protocol = True, action
            elif isinstance(action, Metadata):
                if seen_metadata:
                    raise CorruptLogError(f"version {version} has more than one metaData action")
                problem = schema_problem(action.schema_string, action.partition_columns)
                if problem is not None:
                    raise CorruptLogError(f"version {version}: the metaData action is unusable: {problem}")
                seen_metadata, self.metadata = True, action
            elif isinstance(action, Txn):
                self.app_txns[action.app_id] = action
            elif isinstance(action, DomainMetadata):
                if action.removed:
                    self.domains.pop(action.domain, None)
                else:
                    self.domains[action.domain] = action
        if self.protocol is None or self.metadata is None:
            missing = "protocol" if self.protocol is None else "metaData"
            raise CorruptLogError(
                f"version {version}: the table has no {missing} action (the first version of a table must have both)"
            )
        self.version = version

    def _add(self, version: int, add: AddFile) -> None:
        self.added[add.path] = add
        self.unlisted.discard(add.path)
        self.buried.pop(add.path, None)
        self.unburied.add(add.path)

    def _live(self, path: str) -> AddFile | None:
        if path in self.added:
            return self.added[path]
        return None if path in self.unlisted else self.files.get(path)

    def _remove(self, remove: RemoveFile) -> None:
        live = self._live(remove.path)
        if live is not None and live.logical_key == remove.logical_key:
            self.added.pop(remove.path, None)
            self.unlisted.add(remove.path)
        self.buried[remove.path] = remove
        self.unburied.discard(remove.path)

    def freeze(self) -> TableState:
        return TableState(
            version=self.version,
            protocol=self.protocol,
            metadata=self.metadata,
            files=self.files.updated(self.added, self.unlisted),
            tombstones=self.tombstones.updated(self.buried, self.unburied),
            app_txns=MappingProxyType(self.app_txns),
            domain_metadata=MappingProxyType(self.domains),
        )
