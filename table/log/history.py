"""A table's history: its commits, newest first, as ``commitInfo`` describes them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from logstore.base import LogStore
from logstore.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    VersionNotFoundError,
)
from table.log.actions import Action, CommitInfo, Txn
from table.log.snapshot import read_commit

__all__ = ["HistoryEntry", "history"]


@dataclasses.dataclass(frozen=True)
class HistoryEntry:
    """One commit as ``history`` reports it, from its ``commitInfo`` (fields None when absent)."""

    version: int
    timestamp: int | None
    operation: str | None
    operation_parameters: dict[str, Any]
    operation_metrics: dict[str, Any]
    app_txns: dict[str, int]
    engine_info: str | None = None
    client_version: str | None = None
    is_blind_append: bool | None = None
    user_metadata: str | None = None
    read_version: int | None = None      # the version the commit was planned on (``readVersion``)
    isolation_level: str | None = None   # ``isolationLevel`` as the writer recorded it

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "timestamp": self.timestamp,
            "operation": self.operation,
            "operationParameters": self.operation_parameters,
            "operationMetrics": self.operation_metrics,
            "appTxns": self.app_txns,
            "engineInfo": self.engine_info,
            "clientVersion": self.client_version,
            "isBlindAppend": self.is_blind_append,
            "userMetadata": self.user_metadata,
        }


def history(log_store: LogStore, limit: int | None = None) -> list[HistoryEntry]:
    """The commits, newest first, read one commit file each from the newest down.

    ``limit`` bounds the number of commit files read. Stops early, without error, where older commits
    were removed by log cleanup. A commit without a ``commitInfo`` timestamp gets its file's
    modification time, as delta-spark reports it.
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
        raise ArgumentTypeError(f"limit must be an int, got {limit!r}")
    if limit is not None and limit < 0:
        raise InvalidArgumentError(f"limit must be >= 0, got {limit}")
    return list(_iter_history(log_store, limit))


def _iter_history(log_store: LogStore, limit: int | None) -> Iterator[HistoryEntry]:
    latest = log_store.latest_version()
    count = 0
    for version in range(latest, -1, -1):
        if limit is not None and count >= limit:
            return
        try:
            actions = read_commit(log_store, version)
        except VersionNotFoundError:
            return
        count += 1
        yield _history_entry(log_store, version, actions)


def _history_entry(log_store: LogStore, version: int, actions: Iterable[Action]) -> HistoryEntry:
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    txns = {a.app_id: a.version for a in actions if isinstance(a, Txn)}
    timestamp = None if info is None else (info.in_commit_timestamp or info.timestamp)
    if timestamp is None:
        found = log_store.stat_file(f"{version:020d}.json")
        timestamp = None if found is None else found.last_modified_ms
    if info is None:
        return HistoryEntry(version, timestamp, None, {}, {}, txns)
    return HistoryEntry(
        version=version,
        timestamp=timestamp,
        operation=info.operation,
        operation_parameters=dict(info.operation_parameters or {}),
        operation_metrics=dict(info.operation_metrics or {}),
        app_txns=txns,
        engine_info=info.engine_info,
        client_version=info.client_version,
        is_blind_append=info.is_blind_append,
        user_metadata=info.user_metadata if isinstance(info.user_metadata, str) else None,
        read_version=_extra(info, "readVersion", int),
        isolation_level=_extra(info, "isolationLevel", str),
    )


def _extra(info: CommitInfo, key: str, kind: type) -> Any:
    """A conventional commitInfo field the model keeps as an extra, if it has the expected type."""
    value = (info.model_extra or {}).get(key)
    return value if isinstance(value, kind) and not isinstance(value, bool) else None
