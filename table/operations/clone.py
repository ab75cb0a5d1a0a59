"""CLONE: a new table whose first version holds the files of a source table at one version, by reference
(shallow; delta-spark's ``DeltaTable.clone(target, isShallow=True)`` / ``cloneAtVersion`` /
``cloneAtTimestamp``, Delta's ``CREATE TABLE ... SHALLOW CLONE``) or copied (deep: ``isShallow=False``,
``DEEP CLONE``).

Version 0 of the target holds:

- the source's protocol (raised as the properties given need, and keeping every feature of a replaced
  target), and its ``metaData`` with a new table id (the clone is another table; a replaced target keeps
  its id) and the properties given on top of the source's; the column mapping mode stays the source's;
- an ``add`` of every live file of the source version, its ``path`` made an absolute URI of the source's
  file (as Delta does: the target's readers find the source's files where they are), with its partition
  values, statistics and deletion vector (a vector stored relative to the source table becomes a ``p``
  vector naming its file by absolute URI), without row ids (the clone assigns its own);
- ``commitInfo`` of a ``CLONE`` with Delta's parameters (``source``, ``sourceVersion``, ``isShallow``) and
  metrics (``sourceTableSize``, ``sourceNumOfFiles``, ``numCopiedFiles``, ``copiedFilesSize``, ...).

A shallow clone copies nothing. The clone then lives its own life: writes to it add files under its own
path, DELETE and UPDATE rewrite the source's files into new files of the clone, and VACUUM of the clone never
touches the source's files (they are outside its directory). The source must keep those files while the
clone needs them: a VACUUM of the source after its files were removed there breaks the clone's reads, as in
Delta.

A deep clone copies every data file and deletion vector file of the source version into the target's
directory before the commit (S3 CopyObject, server-side, when both tables are reached with the same
connection settings; else through this process), and its ``add`` actions name them by relative path, with
the source's partition values, statistics and vectors (each vector file copied under a new name, its ``u``
descriptor naming the copy; inline vectors kept as they are): the clone needs nothing of the source any
more. The metrics say what was copied (``numCopiedFiles``, ``copiedFilesSize``; ``isShallow=false``). A file
keeps its relative path; one the source names by absolute URI (the source is itself a shallow clone), and
every file when a table is replaced, gets a new name, so that no path of the replaced table is reused. If
the commit provably did not happen, the copies are deleted. A source file that is gone (vacuumed) is
refused by name before anything is committed.

The target must not be a table yet, unless ``replace``: the clone then replaces it in one commit (every
file of the target removed, the source's schema and properties taken), as ``CREATE OR REPLACE``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, unquote, urlsplit

import pyarrow.compute as pc

from logstore import CommitStateUnknownError, DynacommitError, StorageOptions, TableUri, open_object_store
from logstore.errors import ArgumentTypeError, InvalidArgumentError, ObjectNotFound
from table.data.deletion_vectors import dv_file_name, encode_z85, vector_file
from table.data.jobcommit import engine_info
from table.data.pendingset import encode_path
from table.data.writespec import CommitResult
from table.errors import TableExistsError
from table.log import properties
from table.log.actions import Action, AddFile, DeletionVectorDescriptor
from table.log.commit import Commit, OnExisting, ReadScope
from table.log.outcome import SnapshotAfter
from table.log.column_mapping import MODE as MAPPING_MODE
from table.log.protocol import check_writable, merged_protocol, upgraded_protocol
from table.log.snapshot import Snapshot, load_snapshot
from table.log.timestamps import version_at
from table.location import TableLocation
from table.transaction import TableView, Transaction, snapshot_for_write


__all__ = ["clone"]

log = logging.getLogger(__name__)

_COPY_THREADS = 8
"""Copies a deep clone has in flight at once (each one request when the store copies server-side)."""


def clone(source: TableView, target_uri: str, *, version: int | str | dt.datetime | dt.date | None = None,
          replace: bool = False, properties_: dict[str, str] | None = None,
          storage_options: dict[str, str] | StorageOptions | None = None, shallow: bool = True) -> CommitResult:
    """Clone ``source`` at ``version`` (default: the version the Table reads; a number, or a moment
    resolved as time travel resolves it) to a new table at ``target_uri``, shallow (by reference) or deep
    (``shallow=False``: the files copied); see the module docstring. ``storage_options`` are the target's
    (default: the source's). Returns the target's version and Delta's CLONE metrics."""
    if not isinstance(shallow, bool):
        raise ArgumentTypeError(f"shallow must be True or False, got {shallow!r}")
    if not isinstance(target_uri, str) or not target_uri:
        raise ArgumentTypeError(f"the clone's target must be a table URI, got {target_uri!r}")
    snapshot = _source_snapshot(source, version)
    check_writable(snapshot.protocol, metadata=snapshot.metadata)  # its features must hold in the clone too
    extra = properties.validate_for_create(properties_) if properties_ else {}
    location = TableLocation.open(target_uri, source.storage_options if storage_options is None else storage_options)
    target = Transaction(location, snapshot_for_write(location))
    if target.uri.table_path == source.uri.table_path:
        raise InvalidArgumentError(f"cannot clone {source.uri.table_path} onto itself; RESTORE takes a table back "
                                   f"to an earlier version")
    if target.snapshot is not None and not replace:
        raise TableExistsError(f"a table already exists at {target.uri.table_path} (version {target.snapshot.version}); "
                               f"nothing was written. Clone to a new path, or pass replace=True to replace it")
    if target.snapshot is None:
        location.check_not_nested()
    now = int(time.time() * 1000)
    configuration = {**snapshot.metadata.configuration, **extra}
    _check_mapping(snapshot, target.snapshot, configuration, target.uri.table_path)
    metadata = snapshot.metadata.model_copy(update={
        "id": str(uuid.uuid4()) if target.snapshot is None else target.snapshot.metadata.id,
        "created_time": now, "configuration": configuration})
    # The protocol the clone needs: the source's, with what the properties given turn on, and on a replaced
    # target every feature it had (never a downgrade), as Delta's clone decides it.
    protocol = upgraded_protocol(snapshot.protocol, metadata.schema_string, configuration) or snapshot.protocol
    if target.snapshot is not None:
        protocol = merged_protocol(target.snapshot.protocol, protocol)
    check_writable(protocol, metadata=metadata)
    base = f"{source.uri.scheme}://{source.uri.bucket}/"
    copies = None if shallow else _Copies(source, target, renamed=target.snapshot is not None)
    try:
        adds = [_absolute(add, source) for add in snapshot.files] if copies is None else \
            copies.run(snapshot.files)
    except BaseException:
        if copies is not None:
            copies.undo()
        raise
    removes = [] if target.snapshot is None else [f.remove(deletion_timestamp=now) for f in target.snapshot.files]
    size = int(pc.sum(snapshot.state.files.to_arrow()["size"]).as_py() or 0) if adds else 0
    parameters = {"source": base + source.uri.key(""), "sourceVersion": str(snapshot.version),
                  "isShallow": "true" if shallow else "false"}
    metrics = {"sourceTableSize": str(size), "sourceNumOfFiles": str(len(adds)),
               "numRemovedFiles": str(len(removes)), "removedFilesSize": str(sum(r.size or 0 for r in removes)),
               "numCopiedFiles": str(0 if copies is None else copies.files),
               "copiedFilesSize": str(0 if copies is None else copies.bytes)}
    actions: list[Action] = [protocol, metadata, *removes, *adds]
    commit = Commit(actions=tuple(actions), operation="CLONE", read_scope=ReadScope.whole_table(),
                    operation_parameters=parameters, operation_metrics=metrics, engine_info=engine_info(),
                    on_existing=OnExisting.FAIL if not replace else OnExisting.CONFLICT)
    try:
        outcome = target.commit(commit)
    except CommitStateUnknownError:
        raise  # the commit may have happened: the copies may be the clone's files
    except BaseException:
        if copies is not None:
            copies.undo()
        raise
    return CommitResult.of(outcome.version, {**metrics, "numAttempts": str(outcome.attempts)}, operation="CLONE",
                           snapshot=SnapshotAfter.of(target.log_store, outcome))


def _check_mapping(source: Snapshot, target: Snapshot | None, configuration: dict[str, str | None],
                   where: str) -> None:
    """Refuse a clone whose column mapping mode differs from the source's (the properties given) or from the
    replaced target's: the files' column names would not be the ones the schema maps to."""
    mode = (configuration.get(MAPPING_MODE) or "none")
    if mode != (source.metadata.configuration.get(MAPPING_MODE) or "none"):
        raise InvalidArgumentError(f"a clone keeps the source's column mapping mode; {MAPPING_MODE}={mode!r} "
                                   f"cannot be given to it")
    if target is not None and mode != (target.metadata.configuration.get(MAPPING_MODE) or "none"):
        raise InvalidArgumentError(f"the table at {where} has another column mapping mode than the source; a "
                                   f"clone cannot replace it: clone to a new path")


def _source_snapshot(source: TableView, version: object) -> Snapshot:
    snapshot = source.snapshot
    if snapshot is None:
        raise InvalidArgumentError(f"no table at {source.uri.table_path}: nothing to clone")
    if version is None:
        return snapshot
    if isinstance(version, bool) or not isinstance(version, (int, str, dt.datetime, dt.date)):
        raise ArgumentTypeError(f"the version to clone must be a number or a moment, got {type(version).__name__}")
    number = version if isinstance(version, int) else version_at(source.log_store, snapshot, version)
    return load_snapshot(source.log_store, number)


def _absolute(add: AddFile, source: TableView) -> AddFile:
    """``add`` of the source, naming its file (and its deletion vector's) by absolute URI."""
    # Row ids are not carried over (as Delta's clone does not): the clone assigns its own, above its own
    # high-water mark, when it has row tracking.
    update: dict[str, object] = {"path": _uri_of(add.path, source), "data_change": True, "base_row_id": None,
                                 "default_row_commit_version": None}
    vector = add.deletion_vector
    if vector is not None and vector.storage_type == "u":
        where = vector_file(vector)
        assert where is not None
        update["deletion_vector"] = DeletionVectorDescriptor(
            storage_type="p", path_or_inline_dv=_uri_of(quote(where), source), offset=vector.offset,
            size_in_bytes=vector.size_in_bytes, cardinality=vector.cardinality)
    return add.model_copy(update=update)


def _uri_of(path: str, source: TableView) -> str:
    """The absolute URI of an ``add.path`` of the source (URI-encoded, as the log keeps paths)."""
    if "://" in path:
        return path
    return f"{source.uri.scheme}://{source.uri.bucket}/{quote(source.uri.key(unquote(path)))}"


class _Copies:
    """The files a deep clone copies into the target: data files (their relative path kept, or a new name),
    deletion vector files (a new name each, shared by the files whose vectors are in it)."""

    def __init__(self, source: TableView, target: Transaction, *, renamed: bool):
        self.source = source
        self.target = target
        self.renamed = renamed
        self.tag = uuid.uuid4().hex[:8]
        self.written: list[str] = []
        self.vectors: dict[str, tuple[uuid.UUID, str]] = {}  # source vector file -> (new id, target key)
        self.files = 0
        self.bytes = 0

    def run(self, files: list[AddFile]) -> list[AddFile]:
        plans = [self._plan(add) for add in files]
        jobs = [(self._locate(add.path), key, add.size) for add, key, _ in plans]
        jobs += [(self._locate(quote(where)) if "://" not in where else self._locate(where), key, None)
                 for where, (_, key) in self.vectors.items()]
        with ThreadPoolExecutor(max_workers=_COPY_THREADS) as pool:
            for future in [pool.submit(self._copy, *job) for job in jobs]:
                future.result()
        self.files = len(plans)
        self.bytes = sum(add.size for add in files)
        return [added for _, _, added in plans]

    def _plan(self, add: AddFile) -> tuple[AddFile, str, AddFile]:
        """``add``'s target key and its ``add`` in the clone."""
        relative = unquote(add.path)
        if "://" in add.path or self.renamed:
            folder, _, name = relative.rpartition("/")
            if "://" in add.path:
                folder = ""
            relative = f"{folder}/{self._new_name(name)}" if folder else self._new_name(name)
        path = add.path if relative == unquote(add.path) and "://" not in add.path else encode_path(relative)
        update: dict[str, object] = {"path": path, "data_change": True, "base_row_id": None,
                                     "default_row_commit_version": None}
        vector = add.deletion_vector
        if vector is not None and vector.storage_type in ("u", "p"):
            where = vector_file(vector)
            assert where is not None
            if where not in self.vectors:
                identifier = uuid.uuid4()
                self.vectors[where] = (identifier, self.target.uri.key(dv_file_name(identifier)))
            identifier, _ = self.vectors[where]
            update["deletion_vector"] = DeletionVectorDescriptor(
                storage_type="u", path_or_inline_dv=encode_z85(identifier.bytes), offset=vector.offset,
                size_in_bytes=vector.size_in_bytes, cardinality=vector.cardinality)
        return add, self.target.uri.key(relative), add.model_copy(update=update)

    def _new_name(self, name: str) -> str:
        return f"clone-{self.tag}-{uuid.uuid4().hex[:8]}-{name}"

    def _locate(self, path: str) -> tuple[str, str]:
        """The bucket and key of a source file named by ``path`` (relative to the source, or an absolute URI;
        URI-encoded, as the log keeps it)."""
        if "://" not in path:
            return self.source.uri.bucket, self.source.uri.key(unquote(path))
        parsed = urlsplit(path)
        return parsed.netloc, unquote(parsed.path.lstrip("/"))

    def _copy(self, located: tuple[str, str], key: str, size: int | None) -> None:
        bucket, source_key = located
        objects = self.source.objects if bucket == self.source.objects.bucket else \
            open_object_store(TableUri.parse(f"{self.source.uri.scheme}://{bucket}/x"),
                              storage_options=self.source.storage_options)
        try:
            self.target.objects.copy_from(objects, source_key, key, size=size)
        except ObjectNotFound:
            raise InvalidArgumentError(
                f"cannot deep-clone {self.source.uri.table_path}: its file {self.source.uri.scheme}://{bucket}/"
                f"{source_key} is gone (vacuumed?); clone a newer version, or a shallow clone if the files are "
                f"expected back. Nothing was committed") from None
        self.written.append(key)

    def undo(self) -> None:
        """Delete the copies (the commit provably did not happen)."""
        if self.written:
            try:
                self.target.objects.delete(list(self.written))
            except DynacommitError as exc:
                log.warning("could not delete the %d file(s) a failed clone copied to %s: %s", len(self.written),
                            self.target.uri.table_path, exc)
