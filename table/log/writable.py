"""Whether a table may take an operation: the refusals of every write path, in one place.

Every refusal that can be known before data moves is made here, before the first byte of an operation's
data is uploaded:

- the table was loaded at an older version (time travel): :class:`~table.errors.ReadOnlySnapshotError`;
- its protocol asks for a reader or writer version or a table feature dynacommit does not implement, or
  its schema or properties use one it does not enforce (CHECK constraints, identity and generated
  columns, ...): :class:`~table.errors.UnsupportedFeatureError` (:func:`table.log.protocol.check_writable`);
- the operation would remove or change data of an append-only table (``delta.appendOnly``: an
  overwrite, DELETE, UPDATE, a MERGE with a clause that updates or deletes):
  :class:`~table.errors.AppendOnlyError`, whether or not any row would in the end be touched, as Delta
  refuses them.

:func:`check_operation` is called by ``write_table`` and Spark's batch and streaming writes (through
:meth:`~table.data.writespec.WriteSpec.plan`, on the driver before any task runs) and by every row-level
operation and OPTIMIZE, in process or on Spark (:func:`table.operations.rewrite.execute`, before each
plan is staged). The commit checks again with :func:`check_commit` against the table it lands on, which
may have changed meanwhile; a refusal there comes after the job staged its files, which the job commit
then deletes, and its message says so.
"""

from __future__ import annotations

from typing import Protocol as TypingProtocol

from table.errors import AppendOnlyError, ReadOnlySnapshotError
from table.log import collations, iceberg_compat, properties
from table.log.actions import Metadata, Protocol
from table.log.protocol import check_writable



class Snapshot(TypingProtocol):
    """What the checks read of a :class:`table.log.snapshot.Snapshot` (which imports this module)."""

    @property
    def version(self) -> int: ...

    @property
    def time_travel(self) -> bool: ...

    @property
    def protocol(self) -> Protocol: ...

    @property
    def metadata(self) -> Metadata: ...

__all__ = ["append_only", "check_commit", "check_not_time_travel", "check_operation"]


def append_only(protocol: Protocol | None, metadata: Metadata | None) -> bool:
    """Whether ``delta.appendOnly`` binds writers: set to true on a protocol that supports it (writer
    version 2 to 6, or 7 listing ``appendOnly``)."""
    if protocol is None or metadata is None or protocol.min_writer_version < 2:
        return False
    if protocol.min_writer_version >= 7 and "appendOnly" not in (protocol.writer_features or []):
        return False
    return properties.append_only(metadata.configuration)


def check_not_time_travel(snapshot: Snapshot, *, table: str, operation: str) -> None:
    """Refuse to write on a snapshot loaded at an explicit version or timestamp."""
    if snapshot.time_travel:
        raise ReadOnlySnapshotError(
            f"this Table is pinned to version {snapshot.version} of {table} (time travel) and cannot be written; "
            f"{operation} was refused and nothing was written. Open Table({table!r}) without a version, or call "
            f"refresh()")


def check_operation(snapshot: Snapshot | None, operation: str, *, table: str, removes_data: bool,
                    protocol: Protocol | None = None, metadata: Metadata | None = None) -> None:
    """Refuse, before anything is uploaded, ``operation`` on the table as ``snapshot`` shows it (None: the
    operation creates the table). ``removes_data``: whether the operation removes or changes rows (an
    overwrite, DELETE, UPDATE, a MERGE that is not insert-only). ``protocol`` and ``metadata``: the ones
    the operation sets, when it changes them (a schema evolution, a new table); the table's otherwise.

    Raises ReadOnlySnapshotError, UnsupportedFeatureError (naming the feature) or AppendOnlyError (module
    docstring)."""
    if snapshot is not None:
        check_not_time_travel(snapshot, table=table, operation=operation)
    protocol = protocol or (snapshot.protocol if snapshot is not None else None)
    metadata = metadata or (snapshot.metadata if snapshot is not None else None)
    if protocol is None or metadata is None:
        return  # a new table whose actions are not built yet: the commit checks them
    check_writable(protocol, metadata=metadata)
    collations.check_operation(protocol, metadata, operation, table=table)
    if snapshot is not None:
        iceberg_compat.check_replace(snapshot.metadata, metadata, snapshot.protocol, table=table)
    if snapshot is not None and removes_data and append_only(snapshot.protocol, snapshot.metadata):
        raise AppendOnlyError(
            f"table {table} has delta.appendOnly=true and {operation} would remove or change its data; nothing "
            f"was written. Append instead, or set delta.appendOnly=false on the table")


def check_commit(protocol: Protocol, metadata: Metadata, *, table: str, removed_files: int,
                 append_only_table: bool) -> None:
    """The same refusals, at commit, against the table the commit lands on (``protocol`` and ``metadata``:
    the commit's own if it sets them, else that table's). ``removed_files``: the files it removes with
    ``dataChange=true``. The job that staged files for the commit deletes them after this raises."""
    check_writable(protocol, metadata=metadata)
    if append_only_table and removed_files:
        raise AppendOnlyError(
            f"table {table} has delta.appendOnly=true and this commit would remove {removed_files} file(s) of "
            f"data; nothing was committed. Append instead, or set delta.appendOnly=false on the table")
