"""A commit as data: the actions to write plus the requirements they were built under.

A :class:`Commit` is what a writer wants to append to the log, built on a snapshot at version R:

- ``actions``: the data and metadata actions (never ``commitInfo`` or our application's ``txn``, which
  :meth:`Commit.entry` adds for each attempt);
- ``read_scope``: what the commit's actions depend on (:class:`ReadScope`): nothing (a blind append),
  some partitions (a dynamic partition overwrite), some files (a compaction rewrites exactly the files
  it read) or the whole table (a full overwrite, a schema change);
- ``app_id``/``app_version``: an idempotent job's identity (Delta's ``txn``);
- ``on_existing``: when the commit creates the table and another writer created it first, what to do
  (:class:`OnExisting`, from the write mode);
- ``isolation``: the isolation level of the conflict check (:class:`IsolationLevel`, from the table's
  ``delta.isolationLevel``).

Commits are frozen values: checking one against a winning commit (``table.log.conflicts``) returns a
commit (the same one, or one rebased onto a concurrently created table), never mutates it, the way
pyiceberg's commits are updates plus requirements.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata as importlib_metadata
from types import MappingProxyType
from typing import TYPE_CHECKING

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.errors import ReadOnlySnapshotError
from table.log.actions import (
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from table.log.schema import DeltaType, parse_partition_value
from table.log.writable import check_commit

if TYPE_CHECKING:  # a commit's re-plan takes a snapshot; snapshots are built elsewhere
    from table.log.snapshot import Snapshot

__all__ = ["Commit", "IsolationLevel", "OnExisting", "ReadKind", "ReadScope", "client_version"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


class IsolationLevel(enum.Enum):
    """Delta's isolation levels for writes (``delta.isolationLevel``).

    ``WRITE_SERIALIZABLE`` (the default): a concurrent blind append never conflicts, not even with an
    overwrite of what it appends to; the serial order puts the append after us. ``SERIALIZABLE``: it
    conflicts when it adds data to what we read.
    """

    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"

    @classmethod
    def of(cls, configuration: Mapping[str, str | None]) -> IsolationLevel:
        """The table's level; an unknown value is taken as the stricter ``Serializable``."""
        raw = (configuration.get("delta.isolationLevel") or "").strip()
        if not raw:
            return cls.WRITE_SERIALIZABLE
        for level in cls:
            if raw.lower() == level.value.lower():
                return level
        return cls.SERIALIZABLE


class OnExisting(enum.Enum):
    """What a commit creating a table does when another writer created the table first."""

    APPEND = "append"      # same schema and partitioning: go on as an append to the winner's table
    CONFLICT = "conflict"  # an overwrite cannot tell what it would have replaced: CommitConflictError
    FAIL = "fail"          # mode="error": TableExistsError
    SKIP = "skip"          # mode="ignore": write nothing


class ReadKind(enum.Enum):
    NOTHING = "nothing"          # a blind append
    PARTITIONS = "partitions"    # the files of some partitions
    FILES = "files"              # exactly some files (a compaction)
    PREDICATE = "predicate"      # the rows a predicate selects: some files, and whatever else could hold such rows
    WHOLE_TABLE = "whole_table"  # every file


FileMatcher = Callable[[AddFile], bool]
"""Whether a file may hold rows a predicate selects (its partition values and statistics do not rule it
out); see :meth:`ReadScope.of_predicate`."""


@dataclasses.dataclass(frozen=True)
class ReadScope:
    """What a commit depends on, for conflict detection. Build one with the class methods."""

    kind: ReadKind
    partitions: tuple[tuple[tuple[str, str | None], ...], ...] = ()
    files: frozenset[str] = frozenset()
    matcher: FileMatcher | None = dataclasses.field(default=None, compare=False)
    predicate: str | None = None

    @classmethod
    def blind_append(cls) -> ReadScope:
        """Read nothing: the commit only adds files, so no concurrent change of data can invalidate it."""
        return cls(ReadKind.NOTHING)

    @classmethod
    def whole_table(cls) -> ReadScope:
        """Read every file (a full overwrite, a schema change)."""
        return cls(ReadKind.WHOLE_TABLE)

    @classmethod
    def of_partitions(cls, values: Sequence[Mapping[str, str | None]]) -> ReadScope:
        """Read the partitions matching any of ``values``; ``{"p": "a"}`` covers every file with p=a
        whatever its other partition columns."""
        specs = tuple(dict.fromkeys(tuple(sorted((k, v or None) for k, v in d.items())) for d in values))
        return cls(ReadKind.PARTITIONS, partitions=specs)

    @classmethod
    def of_files(cls, paths: Sequence[str]) -> ReadScope:
        """Read exactly these files (``add.path`` as in the log)."""
        return cls(ReadKind.FILES, files=frozenset(paths))

    @classmethod
    def of_predicate(cls, paths: Sequence[str], matcher: FileMatcher, predicate: str | None = None) -> ReadScope:
        """Read the rows ``predicate`` selects: exactly the files at ``paths`` (``add.path``) were read to
        find them, and ``matcher`` tells whether another file (one a concurrent commit adds) may hold such
        rows. A row-level operation (DELETE, UPDATE, MERGE) reads this way; ``predicate`` is for messages."""
        return cls(ReadKind.PREDICATE, files=frozenset(paths), matcher=matcher, predicate=predicate)

    def covers_partition(self, partition_values: Mapping[str, str | None] | None, *,
                         types: Mapping[str, DeltaType] | None = None) -> bool:
        """Whether data with these partition values lies inside what was read (unknown values: yes).

        Only for ``NOTHING``, ``PARTITIONS`` and ``WHOLE_TABLE``: a ``FILES`` scope covers files, not
        partitions (see :meth:`covers_file`). ``types`` are the Delta types of the partition columns:
        values then compare as the values they denote, since writers serialize the same value
        differently (delta-rs writes the timestamp ``2024-01-01 00:00:00``, we write
        ``2024-01-01 00:00:00.000000``). A value that does not parse as its type is taken as covered.
        """
        if self.kind in (ReadKind.NOTHING, ReadKind.FILES, ReadKind.PREDICATE):
            return False
        if self.kind is ReadKind.WHOLE_TABLE or partition_values is None:
            return True
        types = types or {}
        return any(all(_same_partition_value(partition_values.get(k) or None, v, types.get(k)) for k, v in spec)
                   for spec in self.partitions)

    def covers_file(self, path: str, partition_values: Mapping[str, str | None] | None, *,
                    types: Mapping[str, DeltaType] | None = None) -> bool:
        """Whether the file at ``path`` (with these partition values, None if unknown) was read."""
        if self.kind in (ReadKind.FILES, ReadKind.PREDICATE):
            return path in self.files
        return self.covers_partition(partition_values, types=types)

    def covers_added(self, add: AddFile, *, types: Mapping[str, DeltaType] | None = None) -> bool:
        """Whether a file someone else added holds data this read would have seen: in a read partition (or
        anywhere, for a whole-table read), or, for a predicate, a file the predicate does not rule out.
        A compaction's read (``FILES``) covers no new file: its files are the ones it rewrites."""
        if self.kind is ReadKind.PREDICATE:
            return self.matcher is None or self.matcher(add)
        if self.kind is ReadKind.FILES:
            return False
        return self.covers_partition(add.partition_values, types=types)


def _same_partition_value(found: str | None, read: str | None, delta_type: DeltaType | None) -> bool:
    if found == read:
        return True
    if found is None or read is None or delta_type is None:
        return False
    try:
        a, b = _parse_partition_value(found, delta_type), _parse_partition_value(read, delta_type)
    except (ValueError, TypeError):
        return True  # cannot tell: taken as the same partition, as a missed conflict could lose data
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


_parse_partition_value = functools.lru_cache(maxsize=4096)(parse_partition_value)
"""Values are parsed again for every file a winning commit touches; most repeat."""


@functools.cache  # reading the installed package's metadata takes about a millisecond
def client_version() -> str:
    """``dynacommit-<version>``, as written to ``commitInfo.clientVersion``."""
    try:
        return f"dynacommit-{importlib_metadata.version('dynacommit')}"
    except importlib_metadata.PackageNotFoundError:
        return "dynacommit-unknown"


@dataclasses.dataclass(frozen=True)
class Commit:
    """What a writer appends to the log, with what it was built under (see the module docstring)."""

    actions: tuple[Action, ...]
    operation: str
    read_scope: ReadScope
    operation_parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    operation_metrics: Mapping[str, str] = dataclasses.field(default_factory=dict)
    app_id: str | None = None
    app_version: int | None = None
    engine_info: str | None = None
    user_metadata: str | None = None
    on_existing: OnExisting = OnExisting.APPEND
    attempts_before: int = 0
    """Commit attempts that earlier plans of the same operation made (each ended in a conflict): an
    attempt records ``numAttempts`` counted across re-plans (table.operations.rewrite)."""
    replan: Callable[[Snapshot, Commit], Commit] | None = dataclasses.field(default=None, compare=False, repr=False)
    """For an append whose files hold identity values it handed out: given a newer snapshot and this
    commit rebased onto it, the commit to attempt there, with the values moved above the winners' high-water marks (table.data.identity). Such a
    commit does not conflict with winners that only moved high-water marks (table.log.conflicts)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))
        object.__setattr__(self, "operation_parameters", MappingProxyType(dict(self.operation_parameters)))
        object.__setattr__(self, "operation_metrics", MappingProxyType(dict(self.operation_metrics)))
        self._check_arguments()

    # --- what it is -------------------------------------------------------------------------------

    @functools.cached_property
    def protocol(self) -> Protocol | None:
        return next((a for a in self.actions if isinstance(a, Protocol)), None)

    @functools.cached_property
    def metadata(self) -> Metadata | None:
        return next((a for a in self.actions if isinstance(a, Metadata)), None)

    @functools.cached_property
    def removes(self) -> frozenset[str]:
        """Paths of the files this commit removes."""
        return frozenset(a.path for a in self.actions if isinstance(a, RemoveFile))

    @property
    def changes_metadata(self) -> bool:
        return self.metadata is not None or self.protocol is not None

    @property
    def appends_only(self) -> bool:
        """Adds files (and maybe a new schema), having read nothing and removing nothing."""
        return self.read_scope.kind is ReadKind.NOTHING and not self.removes and bool(self.added())

    @property
    def is_blind_append(self) -> bool:
        """Delta's ``isBlindAppend``: adds only, having read nothing."""
        return (self.read_scope.kind is ReadKind.NOTHING and not self.removes and not self.changes_metadata)

    # --- checks -----------------------------------------------------------------------------------

    def _check_arguments(self) -> None:
        if (self.app_id is None) != (self.app_version is None):
            raise InvalidArgumentError("app_id and app_version must be given together (or neither)")
        if self.app_id is not None and not isinstance(self.app_id, str):
            raise ArgumentTypeError(f"app_id must be a string, got {type(self.app_id).__name__} {self.app_id!r}")
        if self.app_id is not None and not self.app_id.strip():
            raise InvalidArgumentError(f"app_id must not be empty, got {self.app_id!r}")
        if self.app_version is not None and (not isinstance(self.app_version, int) or isinstance(self.app_version, bool)
                                             or self.app_version < 0):
            raise InvalidArgumentError(f"app_version must be an int >= 0, got {self.app_version!r}")
        for key, value in (*self.operation_parameters.items(), *self.operation_metrics.items()):
            if not isinstance(value, str):
                raise ArgumentTypeError(f"operation parameter or metric {key!r} must be a string (Delta stores them "
                                        f"as strings), got {value!r}; encode it, e.g. with json.dumps")
        if self.user_metadata is not None and not isinstance(self.user_metadata, str):
            raise ArgumentTypeError(f"user_metadata must be a string, got {type(self.user_metadata).__name__}")
        if any(isinstance(a, CommitInfo) for a in self.actions):
            raise InvalidArgumentError("do not pass a commitInfo action: the transaction writes it")
        if self.app_id is not None and any(isinstance(a, Txn) and a.app_id == self.app_id for a in self.actions):
            raise InvalidArgumentError(f"do not pass a txn action for app_id {self.app_id!r}: the transaction writes it")
        if sum(isinstance(a, Protocol) for a in self.actions) > 1 or sum(isinstance(a, Metadata) for a in self.actions) > 1:
            raise InvalidArgumentError("a commit holds at most one protocol and one metaData action")

    def check_against(self, protocol: Protocol | None, metadata: Metadata | None, *, table: str,
                      append_only: bool) -> None:
        """Refuse, before the commit point, a commit that the table it lands on cannot take: a table we may
        not write (its protocol, or the one this commit sets), data removal on an append-only table, or a
        table without protocol and metadata (:func:`table.log.writable.check_commit`). The operation was
        checked before its data moved (:func:`table.log.writable.check_operation`); this catches what
        changed since."""
        protocol = self.protocol or protocol
        metadata = self.metadata or metadata
        if protocol is None or metadata is None:
            raise InvalidArgumentError(f"creating table {table} needs a protocol and a metaData action")
        removed = sum(1 for a in self.actions if isinstance(a, RemoveFile) and a.data_change)
        check_commit(protocol, metadata, table=table, removed_files=removed, append_only_table=append_only)

    @staticmethod
    def check_base(time_travel: bool, version: int, table: str) -> None:
        if time_travel:
            raise ReadOnlySnapshotError(
                f"the snapshot of table {table} was loaded at version {version} (time travel) and cannot be "
                f"written on; open the table without a version to write")

    # --- rebasing ---------------------------------------------------------------------------------

    def as_append_to_existing_table(self) -> Commit:
        """This creating commit, turned into an append to a table someone else created identically."""
        kept = tuple(a for a in self.actions if not isinstance(a, (Protocol, Metadata)))
        return dataclasses.replace(self, actions=kept)

    # --- writing ----------------------------------------------------------------------------------

    @property
    def changes_data(self) -> bool:
        """Whether any file action changes the table's rows (``dataChange``); a compaction's do not."""
        return any(isinstance(a, (AddFile, RemoveFile)) and a.data_change for a in self.actions)

    def entry(self, *, read_version: int | None, txn_id: str, attempt: int,
              isolation: IsolationLevel | None = None) -> list[Action]:
        """The actions of one attempt's log entry: ``commitInfo`` first, our ``txn``, then the actions.
        ``isolation`` (the table's level) is recorded as Delta records it: ``SnapshotIsolation`` for a
        commit that changes no data (a compaction), the table's level otherwise."""
        now = int(time.time() * 1000)
        fields: dict[str, object] = {
            "timestamp": now,
            "operation": self.operation,
            "operation_parameters": dict(self.operation_parameters),
            # The attempt number goes into the commit itself, so history shows how contended it was.
            "operation_metrics": {**self.operation_metrics, "numAttempts": str(self.attempts_before + attempt)},
            "is_blind_append": self.is_blind_append,
            "engine_info": self.engine_info or f"dynacommit python/{sys.version_info.major}.{sys.version_info.minor}",
            "client_version": client_version(),
            "txnId": txn_id,
        }
        if read_version is not None:
            fields["readVersion"] = read_version
        if isolation is not None:
            fields["isolationLevel"] = isolation.value if self.changes_data or not self.actions else "SnapshotIsolation"
        if self.user_metadata is not None:
            fields["userMetadata"] = self.user_metadata
        extra: list[Action] = [] if self.app_id is None else [
            Txn(app_id=self.app_id, version=self.app_version, last_updated=now)]  # type: ignore[arg-type]
        return [CommitInfo(**fields), *extra, *self.actions]

    def added(self) -> list[AddFile]:
        return [a for a in self.actions if isinstance(a, AddFile)]
