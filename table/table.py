"""``Table``: a Delta table on S3 as a user holds it, a handle on one snapshot that opens transactions.

A ``Table`` holds the table's :class:`~table.location.TableLocation` and the snapshot it reads. Opening it
loads the newest checkpoint and the commits after it; ``refresh()`` reads only the commits written since.
Every operation runs in a :class:`~table.transaction.Transaction` the Table opens (:meth:`Table.transaction`);
the Table follows it to the snapshot it commits, so a long-lived writer never reloads the table. No
operation changes the Table otherwise.

``Table(uri, version=N)`` (or ``timestamp=``) is time travel: a read-only view of version N. Commits on it are refused
(:class:`~table.log.transaction.ReadOnlySnapshotError`); ``refresh()`` moves it to the newest version,
after which it is an ordinary, writable Table.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from logstore import LogStore, ObjectStore, StorageOptions, TableUri
from logstore.errors import DynacommitError, InvalidArgumentError, TableNotFoundError
from table.data import read as reader
from table.data.cdf import load_cdf
from table.data.add_actions import add_actions_table
from table.data.writespec import CommitResult
from table.errors import ReadOnlySnapshotError
from table.log.actions import AddFile, Metadata, Protocol
from table.log.checkpoint import LastCheckpoint, read_last_checkpoint, write_checkpoint
from table.log.cleanup import cleanup_expired_logs
from table.log.detail import table_detail
from table.log.history import HistoryEntry, history
from table.location import TableLocation
from table.log.snapshot import Snapshot, load_snapshot, update
from table.log.transaction import CommitOutcome
from table.log.timestamps import version_at
from table.maintenance.common import newest_snapshot
from table.maintenance.vacuum import VacuumReport, vacuum
from table.operations import clone as clone_op
from table.operations.create import create_table
from table.operations import delete as delete_op
from table.operations import restore as restore_op
from table.operations import update as update_op
from table.operations.alter import TableAlterer
from table.operations.merge import MergeBuilder
from table.operations.optimize import OptimizeReport, optimize
from table.transaction import REUSE_SECONDS, Transaction, forget_snapshots, remember, snapshot_for_write
from table.transaction import newest_snapshot as newest_of

__all__ = ["REUSE_SECONDS", "Table", "Version", "forget_snapshots"]


class Version(int):
    """A table version: an ``int`` that returns itself when called (deltalake's ``version()`` is a method,
    this project's ``Table.version`` a property; both forms work)."""

    def __call__(self) -> int:
        return int(self)

log = logging.getLogger(__name__)


class Table:
    """A Delta table at ``uri`` (``s3://bucket/path``, ``s3a://...``; ``memory://`` in tests).

    Raises ``TableNotFoundError`` when there is no table there (``VersionNotFoundError`` when
    ``version`` does not exist), ``ConfigurationError`` for a malformed URI or unknown storage option.
    """

    def __init__(self, uri: str, *, version: int | None = None, timestamp: object = None,
                 storage_options: dict[str, str] | StorageOptions | None = None):
        self._init(uri, storage_options)
        self._snapshot: Snapshot | None = None
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("give version or timestamp, not both: each picks the version to read")
        if version is not None:
            self._snapshot = load_snapshot(self._log_store, version)
        elif timestamp is not None:
            self.load_as_version(timestamp)
        else:
            self._load()

    def _init(self, uri: str | TableUri, storage_options: dict[str, str] | StorageOptions | None) -> None:
        self._location = TableLocation.open(uri, storage_options)
        self._uri = self._location.uri
        self._log_store = self._location.log_store
        self._objects = self._location.objects

    @classmethod
    def for_write(cls, uri: str, *, storage_options: dict[str, str] | StorageOptions | None = None,
                  reuse: bool = False) -> Table:
        """The table at ``uri`` for a writer: loaded if it exists, else empty (``exists`` False,
        ``version`` -1, ``snapshot`` None) so that the first commit creates it. ``reuse``: a snapshot this
        process saw less than :data:`REUSE_SECONDS` ago is taken as it is (for blind appends, whose commit
        checks the version anyway)."""
        table = cls.__new__(cls)
        table._init(uri, storage_options)
        table._snapshot = snapshot_for_write(table._location, reuse=reuse)
        return table

    @classmethod
    def unloaded(cls, uri: str, *, storage_options: dict[str, str] | StorageOptions | None = None) -> Table:
        """The table at ``uri`` with its log not read yet (``snapshot`` None): for an operation, whose first
        step, :meth:`refresh`, reads it once (a Table opened the usual way would be read twice)."""
        table = cls.__new__(cls)
        table._init(uri, storage_options)
        table._snapshot = None
        return table

    # The snapshot, and a commit's catch-up not run yet (``defer_snapshot``): run on first use.
    @property
    def _snapshot(self) -> Snapshot | None:
        pending = self.__dict__.get("_pending")
        if pending is not None:
            self.__dict__["_pending"] = None
            self.__dict__["_behind"] = None
            caught = pending()
            if caught is not None:
                self._snapshot = caught
                remember(self._location, caught)
            else:
                stale = self.__dict__.get("_snap")
                try:
                    self._snapshot = update(self._log_store, stale) if stale is not None else load_snapshot(
                        self._log_store)
                    remember(self._location, self._snapshot)
                except DynacommitError as exc:  # the commit stands; this Table reads its older snapshot
                    log.warning("table %s: reading the newest version after a commit failed (%s); this Table "
                                "stays at version %s until refresh()", self._uri.table_path, exc,
                                None if stale is None else stale.version)
        return self.__dict__.get("_snap")

    @_snapshot.setter
    def _snapshot(self, snapshot: Snapshot | None) -> None:
        self.__dict__["_pending"] = None
        self.__dict__["_behind"] = None
        self.__dict__["_snap"] = snapshot

    def defer_snapshot(self, catch_up: Callable[[], Snapshot | None]) -> None:
        """After a commit that went on top of winners judged by their DynamoDB entries alone
        (``CommitOutcome.catch_up``): the snapshot is brought up to date when it is next used, not now.
        ``catch_up`` returning None means: reload."""
        self.__dict__["_pending"] = catch_up
        self.__dict__["_behind"] = None

    def _load(self) -> None:
        """The newest snapshot: from this process's last one when there is one (reading only the commits
        since), else from the table's checkpoint."""
        self._snapshot = newest_of(self._location)

    # --- transactions -----------------------------------------------------------------------------
    def transaction(self, *, appending: bool = False) -> Transaction:
        """A transaction on the snapshot this Table reads; the Table follows it (:meth:`observed`,
        :meth:`committed`). Every operation runs in one (:mod:`table.transaction`). ``appending``: the
        operation is an append that reads no data (``write_table`` in mode ``append``): when the last commit
        left versions unread (judged by their DynamoDB entries), the transaction reads the snapshot before
        them, which holds the newest schema and properties, and its commit goes past them unread when it is a
        blind append (``table.log.outcome.may_go_past``)."""
        behind = self.__dict__.get("_behind") if appending and self.__dict__.get("_pending") is not None else None
        if behind is not None and behind.catch_up is not None and behind.catch_up.base is not None:
            return Transaction(self._location, None, observer=self, behind=behind)
        return Transaction(self._location, self._snapshot, observer=self)

    def observed(self, snapshot: Snapshot) -> None:
        """A transaction this Table opened read ``snapshot``, a newer version: the Table reads it too."""
        self.set_snapshot(snapshot)

    def committed(self, outcome: CommitOutcome) -> None:
        """A transaction this Table opened committed: the Table moves to the version after it (winners judged
        by their entries alone are read when the snapshot is next used, through ``outcome.snapshot``, which the
        operation's ``CommitResult.snapshot`` reads too: once for both). Never raises: the commit stands."""
        try:
            if outcome.known is not None:
                self.set_snapshot(outcome.known)
            elif outcome.catch_up is not None:
                self.defer_snapshot(lambda: outcome.snapshot)
                self.__dict__["_behind"] = outcome
            else:
                self.refresh()
        except DynacommitError as exc:  # the commit stands; the Table catches up on its next refresh()
            log.warning("version %d of %s is committed, but moving the Table to it failed: %s", outcome.version,
                        self._uri.table_path, exc)

    # --- what the table is ------------------------------------------------------------------------
    @property
    def location(self) -> TableLocation:
        return self._location

    @property
    def uri(self) -> TableUri:
        return self._uri

    @property
    def log_store(self) -> LogStore:
        return self._log_store

    @property
    def objects(self) -> ObjectStore:
        """The object store of the table's data files."""
        return self._objects

    @property
    def storage_options(self) -> StorageOptions:
        return self._location.storage_options

    @property
    def exists(self) -> bool:
        return self._snapshot is not None

    @property
    def snapshot(self) -> Snapshot | None:
        """The snapshot this Table reads (None only for a ``for_write`` Table whose table is not created)."""
        return self._snapshot

    @property
    def version(self) -> Version:
        """The version this Table reads (-1 before the table is created). An ``int`` that can also be called,
        so that deltalake's ``dt.version()`` and this project's ``table.version`` both give it."""
        return Version(-1 if self._snapshot is None else self._snapshot.version)

    def metadata(self) -> Metadata:
        """The table's ``metaData`` action (deltalake's ``metadata()``: ``id``, ``name``, ``description``,
        ``partition_columns``, ``created_time``, ``configuration``)."""
        return self._require().metadata

    def protocol(self) -> Protocol:
        """The table's ``protocol`` action (deltalake's ``protocol()``: ``min_reader_version``,
        ``min_writer_version``, ``reader_features``, ``writer_features``)."""
        return self._require().protocol

    @property
    def schema(self) -> pa.Schema:
        """The pyarrow schema, partition columns included, in table order."""
        return self._require().schema

    @property
    def partition_columns(self) -> list[str]:
        return self._require().partition_columns

    def check_not_nested(self) -> None:
        """Refuse to create a table inside another table's directory (:meth:`TableLocation.check_not_nested`)."""
        self._location.check_not_nested()

    def _require(self) -> Snapshot:
        if self._snapshot is None:
            raise TableNotFoundError(f"no table at {self._uri.table_path} yet: nothing has been written to it")
        return self._snapshot

    # --- files and history ------------------------------------------------------------------------
    def add_actions(self) -> list[AddFile]:
        """The ``add`` action of every live data file, ordered by path."""
        return self._require().files

    def detail(self) -> dict[str, object]:
        """What delta-spark's ``DESCRIBE DETAIL`` says of the table: id, location, sizes, properties, protocol
        versions and features (:mod:`table.log.detail`)."""
        return table_detail(self._log_store, self._require(), self._uri.table_path)

    @classmethod
    def create(cls, table_uri: str, schema: object, mode: str = "error", partition_by: list[str] | None = None,
               name: str | None = None, description: str | None = None,
               configuration: Mapping[str, str] | None = None,
               storage_options: dict[str, str] | StorageOptions | None = None, *,
               cluster_by: list[str] | None = None, user_metadata: str | None = None) -> Table:
        """Create a table with ``schema`` and no data, and return it (deltalake's ``DeltaTable.create``, the
        same arguments; :func:`table.operations.create.create_table`). ``mode``: ``error`` (the default: a
        table already there raises TableExistsError), ``ignore`` (keep it), ``overwrite`` (replace it);
        ``append`` creates only where there is no table."""
        create_table(table_uri, schema, mode=mode, partition_by=partition_by, name=name, description=description,
                     configuration=configuration, storage_options=storage_options, cluster_by=cluster_by,
                     user_metadata=user_metadata)
        return cls(table_uri, storage_options=storage_options)

    @staticmethod
    def is_deltatable(uri: str, storage_options: dict[str, str] | StorageOptions | None = None) -> bool:
        """Whether a Delta table is at ``uri`` (deltalake's ``DeltaTable.is_deltatable``): its log has a
        version. A malformed URI or unknown option still raises ``ConfigurationError``."""
        table = Table.__new__(Table)
        table._init(uri, storage_options)
        try:
            table._load()
        except TableNotFoundError:
            return False
        return True

    def get_add_actions(self, flatten: bool = False) -> pa.Table:
        """The live files with their size, modification time, record count, statistics and partition values,
        one row each, as deltalake's ``get_add_actions`` (:mod:`table.data.add_actions`)."""
        return add_actions_table(self._require(), flatten=flatten)

    def files(self) -> list[str]:
        """The URI of every live data file (``s3://bucket/key``), as deltalake's ``file_uris()``."""
        base = f"{self._uri.scheme}://{self._uri.bucket}/"
        paths = self._require().state.files.to_arrow()["path"]  # the column: no action objects are built
        return [base + self._uri.key(unquote(path)) for path in paths.take(pc.sort_indices(paths)).to_pylist()]

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """The commits, newest first (``limit`` bounds how many commit files are read)."""
        self._require()
        return history(self._log_store, limit)

    def load_as_version(self, version: int | str | dt.datetime | dt.date) -> Table:
        """Time travel (deltalake's name): this Table becomes a read-only view of ``version``, or of the
        version the table was at a moment (a ``datetime``, naive meaning UTC, or an ISO-8601 string), by
        Delta's rules (:mod:`table.log.timestamps`: commit timestamps, in-commit timestamps when the table
        has them, an error for a moment before the earliest version). :meth:`refresh` moves it back to the
        newest version. Returns self."""
        if not isinstance(version, int) or isinstance(version, bool):
            newest = update(self._log_store, self._snapshot) if self._snapshot is not None and \
                not self._snapshot.time_travel else load_snapshot(self._log_store)
            version = version_at(self._log_store, newest, version)
        self._snapshot = load_snapshot(self._log_store, version)
        return self

    def refresh(self) -> Table:
        """Move to the newest version, reading only the commits since this one. Returns self."""
        if self._snapshot is None:
            try:
                self._load()
            except TableNotFoundError:
                pass
        else:
            self._snapshot = update(self._log_store, self._snapshot)
            remember(self._location, self._snapshot)
        return self

    # --- row-level changes ------------------------------------------------------------------------
    def delete(self, predicate: str | None = None) -> CommitResult:
        """Delete the rows for which ``predicate`` (SQL, e.g. ``"day < '2024-01-01' AND status = 'gone'"``)
        is true, or every row without one (:mod:`table.operations.delete`). One commit; the Table moves to it.
        Metrics (Delta's names) are in ``CommitResult.metrics``."""
        return delete_op.delete(self, predicate)

    def update(self, updates: Mapping[str, str] | None = None, *, predicate: str | None = None) -> CommitResult:
        """Set columns to SQL expressions (``updates={"price": "price * 1.1"}``) on the rows for which
        ``predicate`` is true, all rows without one (:mod:`table.operations.update`). One commit; the
        Table moves to it. To read the commits others wrote since this Table was loaded, call
        :meth:`refresh`."""
        if updates is None:
            raise InvalidArgumentError(
                "Table.update() updates rows and needs updates={column: SQL expression}; to move the Table to the "
                "newest version (what update() did before row-level changes), call Table.refresh()")
        return update_op.update(self, updates, predicate)

    def merge(self, source: object, predicate: str, *, source_alias: str = "source", target_alias: str = "target",
              merge_schema: bool = False) -> MergeBuilder:
        """Start a MERGE of ``source`` (pyarrow Table/RecordBatch/RecordBatchReader, pandas, or any Arrow stream)
        into this table on ``predicate`` (SQL over ``target.`` and ``source.`` columns): add ``when_*`` clauses,
        then ``execute()`` (:mod:`table.operations.merge`, deltalake's ``TableMerger`` names)."""
        return MergeBuilder(self, source, predicate, source_alias=source_alias, target_alias=target_alias,
                            merge_schema=merge_schema)

    def restore(self, target: int | str | dt.datetime | dt.date, *, ignore_missing_files: bool = False,
                protocol_downgrade_allowed: bool = False) -> CommitResult:
        """Make the newest version hold what version ``target`` held (a version, or a moment as for
        :meth:`load_as_version`), in one commit: deltalake's ``restore``, Delta's RESTORE
        (:mod:`table.operations.restore`). Metrics (Delta's names) are in ``CommitResult.metrics``; the Table
        moves to the new version."""
        return restore_op.restore(self, target, ignore_missing_files=ignore_missing_files,
                                  protocol_downgrade_allowed=protocol_downgrade_allowed)

    def clone(self, target: str, *, version: int | str | dt.datetime | dt.date | None = None, replace: bool = False,
              properties: dict[str, str] | None = None,
              storage_options: dict[str, str] | StorageOptions | None = None, shallow: bool = True) -> CommitResult:
        """Clone this table (at ``version``, default the version this Table reads) to a new table at
        ``target``: shallow, whose files are this table's, referenced by absolute URI (Delta's SHALLOW CLONE),
        or with ``shallow=False`` deep, its data and deletion vector files copied into ``target`` (DEEP
        CLONE; :mod:`table.operations.clone`). ``properties`` are added to the clone's table properties;
        ``replace`` replaces a table already at ``target``."""
        return clone_op.clone(self, target, version=version, replace=replace, properties_=properties,
                              storage_options=storage_options, shallow=shallow)

    def load_cdf(self, starting_version: int | None = None, ending_version: int | None = None, *,
                 starting_timestamp: object = None, ending_timestamp: object = None,
                 columns: list[str] | None = None, allow_out_of_range: bool = False) -> pa.RecordBatchReader:
        """The change data feed of versions ``starting_version`` (default 0) .. ``ending_version`` (default:
        the newest), or of those committed between two timestamps (deltalake's name and arguments): the
        changed rows with ``_change_type``, ``_commit_version`` and ``_commit_timestamp``
        (:mod:`table.data.cdf`). Needs ``delta.enableChangeDataFeed`` over the whole range."""
        self._require()
        return load_cdf(self, starting_version, ending_version, starting_timestamp=starting_timestamp,
                        ending_timestamp=ending_timestamp, columns=columns, allow_out_of_range=allow_out_of_range)

    @property
    def alter(self) -> TableAlterer:
        """Schema and property changes without rewriting data: ``rename_column``, ``drop_columns`` (column
        mapping in ``name`` mode), ``add_columns``, ``change_column_type`` (type widening),
        ``set_table_properties`` (:mod:`table.operations.alter`)."""
        self._require()
        return TableAlterer(self)

    # --- reading data -----------------------------------------------------------------------------
    def to_pyarrow_dataset(self) -> ds.Dataset:
        """The live files as a pyarrow dataset (partition columns as Delta stores them); on a table with deletion
        vectors or column mapping, a dataset each of whose scans streams the rows (``table.data.scanned``)."""
        self._require()
        return reader.to_pyarrow_dataset(self)

    def to_pyarrow_reader(self, columns: list[str] | None = None,
                          filter: pc.Expression | None = None) -> pa.RecordBatchReader:
        """The rows ``to_pyarrow_table`` gives, streamed: batches are read as they are consumed, deletion
        vectors applied batch by batch, so memory does not grow with the table (DuckDB and polars read it)."""
        self._require()
        return reader.to_pyarrow_reader(self, columns=columns, filter=filter)

    def to_pyarrow_table(self, columns: list[str] | None = None, filter: pc.Expression | None = None) -> pa.Table:
        """The table's rows; ``filter`` prunes files by partition values and stats, then filters rows."""
        self._require()
        return reader.to_pyarrow_table(self, columns=columns, filter=filter)

    def to_pandas(self, columns: list[str] | None = None, filter: pc.Expression | None = None):  # noqa: A002
        """The table's rows as a pandas DataFrame (:meth:`to_pyarrow_table`, then ``to_pandas()``)."""
        return self.to_pyarrow_table(columns=columns, filter=filter).to_pandas()

    # --- maintenance ------------------------------------------------------------------------------
    def vacuum(self, retention_hours: float | None = None, dry_run: bool = True,
               enforce_retention_duration: bool = True) -> list[str]:
        """Delete the data files no version within the retention needs, deltalake's call form: a dry run
        unless ``dry_run=False``; a retention below the table's ``delta.deletedFileRetentionDuration`` needs
        ``enforce_retention_duration=False``. Returns the paths (relative to the table root) deleted, or
        that would be. The same rules as ``dynacommit vacuum`` (:mod:`table.maintenance.vacuum`), whose
        :class:`~table.maintenance.vacuum.VacuumReport` :meth:`vacuum_report` returns."""
        return list(self.vacuum_report(retention_hours=retention_hours, dry_run=dry_run,
                                       force=not enforce_retention_duration).files)

    def vacuum_report(self, *, retention_hours: float | None = None, dry_run: bool = True,
                      force: bool = False) -> VacuumReport:
        """:meth:`vacuum` with the whole report: sizes, ages, and the unreferenced files kept."""
        return vacuum(self, retention_hours=retention_hours, dry_run=dry_run, force=force)

    def create_checkpoint(self) -> LastCheckpoint:
        """Write a checkpoint of the newest version (deltalake's ``create_checkpoint``; ``dynacommit checkpoint
        --execute``), then delete the log files ``delta.logRetentionDuration`` lets go, as Delta does after a
        checkpoint. Returns what ``_last_checkpoint`` now says."""
        return write_checkpoint(self._log_store, newest_snapshot(self, "checkpoint"))

    def cleanup_metadata(self) -> list[str]:
        """Delete the commits and checkpoints older than ``delta.logRetentionDuration`` that the newest
        checkpoint makes unneeded (deltalake's ``cleanup_metadata``; :mod:`table.log.cleanup`). Returns the
        names of the files deleted; none when the table has no checkpoint or turned cleanup off."""
        snapshot = newest_snapshot(self, "clean up the log")
        hint = read_last_checkpoint(self._log_store)
        if hint is None:
            return []
        return cleanup_expired_logs(self._log_store, snapshot.configuration, checkpoint_version=hint.version,
                                    now_ms=int(time.time() * 1000))

    def optimize(self, *, target_size: int | None = None, partition: dict[str, str | None] | None = None,
                 dry_run: bool = False, z_order: list[str] | None = None, full: bool = False) -> OptimizeReport:
        """Compact small files into files of about ``target_size`` bytes (default: the table's
        ``delta.targetFileSize``, else 128 MiB) in one commit
        that changes no data (``dataChange=false``); concurrent appends never conflict with it. With
        ``z_order`` (data columns), every file of each partition is rewritten clustered by those columns
        (Delta's ``ZORDER BY``). On a clustered table (``write_table(..., cluster_by=)``) the files not yet
        clustered are clustered by the clustering columns (``full``: every file, after the columns changed).
        Returns an :class:`~table.operations.optimize.OptimizeReport`; the Table moves to the new version."""
        return optimize(self, target_size=target_size, partition=partition, dry_run=dry_run, z_order=z_order,
                        full=full)

    # --- writers ----------------------------------------------------------------------------------
    def set_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the snapshot with a newer one of the same table (never move backwards)."""
        behind = self.__dict__.get("_behind")
        if (self.__dict__.get("_pending") is not None and behind is not None
                and snapshot.table_path == self._uri.table_path and snapshot.version >= behind.version):
            # newer than what the last commit left unread: those versions need not be read
            self._snapshot = snapshot
            remember(self._location, snapshot)
            return
        if self._snapshot is not None and self._snapshot.time_travel:
            raise ReadOnlySnapshotError(
                f"this Table is pinned to version {self._snapshot.version} of {self._uri.table_path} (time "
                f"travel) and cannot be written; open Table({self._uri.table_path!r}) without a version")
        if snapshot.table_path != self._uri.table_path:
            raise InvalidArgumentError(f"snapshot of {snapshot.table_path} given to the Table of "
                                       f"{self._uri.table_path}")
        if self._snapshot is None or snapshot.version >= self._snapshot.version:
            self._snapshot = snapshot
            remember(self._location, snapshot)

    def __repr__(self) -> str:
        pinned = " (time travel)" if self._snapshot is not None and self._snapshot.time_travel else ""
        return f"Table({self._uri.table_path!r}, version={self.version}{pinned})"
