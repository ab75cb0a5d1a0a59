"""What every row-level operation shares: staging the rewritten files and the change data, building the
commit, and the re-plan loop that makes a lost race cost a retry instead of an error.

An operation (:mod:`~table.operations.delete`, :mod:`~table.operations.update`,
:mod:`~table.operations.merge`) is a function ``stage(txn, job) -> Staged``: it plans on the snapshot of
one :class:`~table.transaction.Transaction`, records what it reads in it as it reads, and writes the new
files through a :class:`Rewriter` (copy-on-write: a file holding a changed row is written again with its
other rows copied). :func:`execute` then

1. **stages** on the newest snapshot (``stage``);
2. **commits** through the table's job commit (``table.data.jobcommit.commit_files``): the uploads
   are completed and one log entry holds the ``remove`` of every rewritten file, the ``add`` of every
   new one and the ``cdc`` of every change data file. The transaction checks the commits that won the
   versions before ours with Delta's rules; when none conflicts with what we read, ours goes on top
   without redoing any work;
3. on a conflict (:class:`~table.errors.CommitConflictError`: someone removed a file we read, or added
   rows our predicate selects, or changed the schema), the files of the attempt are deleted (the job
   commit does that: the commit provably did not happen), the table is brought up to date and the
   operation **re-plans** from step 1, until it commits or the operation's deadline
   (``DYNACOMMIT_TIMEOUT_SECONDS``) passes; then the last conflict is raised. Delta gives up at the first
   conflict; re-planning is safe because every attempt reads the table as it is when it plans, and the
   commit is accepted only if nothing it read changed since.

Change data (``delta.enableChangeDataFeed``): a commit that updates or deletes rows also writes them to
``_change_data/`` with ``_change_type`` (``update_preimage`` / ``update_postimage`` / ``delete`` /
``insert``), exactly as Delta's commands do. A commit that only removes whole files, or only adds rows,
writes none: readers derive those changes from its ``remove`` and ``add`` actions (PROTOCOL.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Protocol as TypingProtocol

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from logstore import CommitStateUnknownError, DeadlineExceededError, DynacommitError, deadline
from table.data.deletion_vectors import dv_file_name, encode_z85, write_file
from table.data.files import filesystem_for
from table.data.jobcommit import Completer, abort_job, commit_files, engine_info, with_identity
from table.data.pendingset import PendingSet
from table.data.read import deleted_rows_of, physical_row_count
from table.data.staging import CHANGE_TYPE, StagingWriter
from table.data.writer_settings import WriterSettings
from table.data.writespec import CommitResult
from table.errors import CommitConflictError
from table.log import properties
from table.log.actions import (Action, AddFile, Cdc, DeletionVectorDescriptor, DomainMetadata, Metadata, Protocol,
                               RemoveFile)
from table.log.column_mapping import Layout
from table.log.commit import Commit, ReadScope
from table.log.snapshot import Snapshot
from table.log.constraints import rules_of
from table.log.writable import check_operation
from table.log.metrics import metrics_for
from table.operations.scan import FILE, ROW
from table.transaction import Opens, TableView, Transaction, transaction_of

__all__ = ["ClauseKind", "Rewriter", "Staged", "execute", "removes_of", "writes_deletion_vectors"]

log = logging.getLogger(__name__)

_WRITE_METRICS = ("numFiles", "numOutputRows", "numOutputBytes")
"""Metrics the job commit records for a WRITE; a row-level operation records Delta's own names instead."""


@dataclasses.dataclass(frozen=True)
class ClauseKind:
    """What an executor's rewrite task needs of one clause of a row-level operation: its ``kind``
    (``matched``, ``not matched``, ``not matched by source``) and ``action`` (``update``, ``delete``,
    ``insert``). A DELETE is one matched delete, an UPDATE one matched update, a MERGE its clauses'
    (:attr:`table.operations.merge.Clause.shape`)."""

    kind: str
    action: str


def writes_deletion_vectors(snapshot: Snapshot) -> bool:
    """Whether row-level changes to the table mark rows deleted in deletion vectors (merge-on-read) rather
    than writing their files again (copy-on-write): ``delta.enableDeletionVectors`` set and the feature
    in the protocol. Every engine's DELETE, UPDATE and MERGE asks here."""
    return properties.deletion_vectors(snapshot.configuration) and \
        "deletionVectors" in (snapshot.protocol.writer_features or [])


class Rewriter:
    """The files one attempt of an operation writes: data files in the table's layout (through one
    staging writer, split by partition and cut at the target file size) and, when the table has the
    change data feed, change data files (through another). Small files are held in memory and PUT at
    commit, as ``write_table``'s are.

    A file losing rows (:meth:`replace`) is written again without them (copy-on-write), or, when the table
    has ``delta.enableDeletionVectors``, keeps its rows and gets a deletion vector marking them deleted
    (merge-on-read: one small vector file instead of the file's other rows copied); the vectors of one
    attempt go into one file written by :meth:`finish`. :attr:`removes` and :attr:`vector_adds` are then
    the commit's ``remove`` actions and the ``add`` actions of the files with new vectors."""

    def __init__(self, table: TableView, snapshot: Snapshot, job_id: str, *, schema: pa.Schema | None = None,
                 layout: Layout | None = None):
        self.table = table
        self.schema = snapshot.schema if schema is None else schema
        self.change_data_feed = properties.change_data_feed(snapshot.configuration)
        self.deletion_vectors = writes_deletion_vectors(snapshot)
        common = dict(schema=self.schema, partition_by=snapshot.partition_columns, job_id=job_id,
                      settings=WriterSettings.of(snapshot.configuration), hold_small_files=True,
                      layout=snapshot.layout if layout is None else layout)
        self.data = StagingWriter(table.objects, table.uri, task_id=0, copies_rows=True,
                                  rules=rules_of(snapshot.protocol, snapshot.metadata), **common)
        self.changes: StagingWriter | None = None
        if self.change_data_feed:
            self.changes = StagingWriter(table.objects, table.uri, task_id=1, change_data=True, **common)
        self.rows_written = 0
        self.change_rows = 0
        self.removes: list[RemoveFile] = []
        self.vector_adds: list[AddFile] = []
        self.vector_file: str | None = None  # the key of the deletion vector file written, once written
        self._gone: dict[str, tuple[AddFile, pa.Array]] = {}
        self._now = int(time.time() * 1000)

    def write(self, rows: pa.Table) -> pa.Table:
        """New rows of the table (its columns, any order; extra columns are not allowed). Returns them as
        written (generated and identity columns filled in), for the change data that says what was written."""
        if rows.num_rows:
            rows = self.data.write(rows)
            self.rows_written += rows.num_rows
        return rows

    def replace(self, add: AddFile, rows: pa.Table, gone: pa.Array) -> None:
        """File ``add`` loses the rows ``gone`` (a mask over ``rows``: the rows of the file as read, with
        their positions in :data:`~table.operations.scan.ROW`): copy-on-write writes its other rows anew,
        merge-on-read marks these deleted. What replaces them (updated rows) goes through :meth:`write`."""
        if self.deletion_vectors:
            self._gone[add.path] = (add, rows[ROW].filter(gone).combine_chunks())
            return
        self.write(rows.filter(pc.invert(gone)).drop_columns([c for c in (FILE, ROW) if c in rows.column_names]))
        self.removes.append(add.remove(deletion_timestamp=self._now))

    def change(self, rows: pa.Table, change_type: str) -> None:
        """Rows that changed, as ``change_type``; nothing when the table has no change data feed."""
        if self.changes is not None and rows.num_rows:
            columns = rows.select(self.schema.names)
            self.changes.write(columns.append_column(CHANGE_TYPE, pa.array([change_type] * rows.num_rows,
                                                                            pa.string())))
            self.change_rows += rows.num_rows

    def finish(self) -> list[PendingSet]:
        self._write_vectors()
        done = [self.data.finish()]
        if self.changes is not None:
            done.append(self.changes.finish())
        return done

    def _write_vectors(self) -> None:
        """Each file's new deletion vector (its old one and the rows it now loses), all in one file."""
        if not self._gone:
            return
        fs = filesystem_for(self.table.uri, self.table.storage_options)
        vectors: list[tuple[AddFile, BitMap64]] = []
        for add, positions in self._gone.values():
            rows = BitMap64(positions.to_numpy(zero_copy_only=False).astype("uint64"))
            if add.deletion_vector is not None:
                rows |= deleted_rows_of(self.table.uri, fs, add)
            self.removes.append(add.remove(deletion_timestamp=self._now))
            total = physical_row_count(self.table.uri, fs, add)
            if len(rows) >= total:
                continue  # every row of the file is gone: it is removed, with no vector
            vectors.append((add, rows, total))
        if not vectors:
            return
        identifier = uuid.uuid4()
        body, places = write_file([rows for _, rows, _ in vectors])
        key = self.table.uri.key(dv_file_name(identifier))
        self.table.objects.put(key, body)
        self.vector_file = key
        encoded = encode_z85(identifier.bytes)
        for (add, rows, total), (offset, size) in zip(vectors, places):
            descriptor = DeletionVectorDescriptor(storage_type="u", path_or_inline_dv=encoded, offset=offset,
                                                  size_in_bytes=size, cardinality=len(rows))
            self.vector_adds.append(add.model_copy(update={"deletion_vector": descriptor, "data_change": True,
                                                           "stats": _wide(add.stats, total)}))

    def abort(self) -> None:
        self.data.abort()
        if self.changes is not None:
            self.changes.abort()
        self.delete_vector_file()

    def delete_vector_file(self) -> None:
        """The attempt provably committed nothing: its deletion vector file goes (best effort)."""
        if self.vector_file is not None:
            try:
                self.table.objects.delete([self.vector_file])
            except (DynacommitError, OSError) as exc:
                log.warning("could not delete the unused deletion vector file %s (%s); vacuum removes it",
                            self.vector_file, exc)
            self.vector_file = None

    @property
    def stray_uploads_possible(self) -> bool:
        return self.data.stray_uploads_possible or (self.changes is not None and self.changes.stray_uploads_possible)


def _wide(stats: str | None, num_records: int) -> str:
    """A file's statistics once some of its rows are deleted by a vector: its bounds are no longer tight
    (PROTOCOL.md's ``tightBounds``), its ``numRecords`` counts every row of the file, and must be there: a
    file with a deletion vector must have it, so a file written without statistics gets that one."""
    parsed = json.loads(stats) if stats is not None else {}
    parsed["numRecords"] = num_records
    parsed["tightBounds"] = False
    return json.dumps(parsed, separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class Staged:
    """What one attempt of an operation did, for its commit: the files it removes, the PendingSets of the
    files it wrote, what it read (None: what its transaction recorded), and how the log records it. ``pendingsets`` empty and ``removes`` empty:
    nothing to commit (``version`` stays, ``metrics`` are the result)."""

    operation: str
    removes: tuple[RemoveFile, ...]
    pendingsets: tuple[PendingSet, ...]
    read_scope: ReadScope | None
    parameters: Mapping[str, str]
    metrics: Mapping[str, str]
    metadata: Metadata | None = None
    stray_uploads_possible: bool = False
    data_change: bool = True  # False: the rows stay the same, only their files change (a compaction)
    vector_adds: tuple[AddFile, ...] = ()  # files kept with a new deletion vector
    protocol: Protocol | None = None  # a new protocol (a property that needs a table feature)
    rewriter: Rewriter | None = None  # whose deletion vector file goes if the commit provably did not happen
    domains: tuple[DomainMetadata, ...] = ()  # metadata domains the commit sets (delta.clustering)
    clustering_provider: str | None = None  # set on every file added: the files are clustered (OPTIMIZE)
    completer: Completer | None = None  # who completes the uploads (None: this process's bounded pool)

    @property
    def empty(self) -> bool:
        return (not self.removes and not self.vector_adds and not any(p.files for p in self.pendingsets)
                and self.metadata is None and self.protocol is None and not self.domains)


StageFn = Callable[[Transaction, str], Staged]
"""One attempt of an operation: it plans on the transaction's snapshot, records its reads there, stages."""


class PreStaged(TypingProtocol):
    """Files staged before an operation's attempts (a replaceWhere's data): their PendingSets."""

    @property
    def files(self) -> list[PendingSet]: ...


def execute(target: Transaction | Opens, operation: str, stage: StageFn, *, staging_timed: bool = True,
            removes_data: bool = True, job_id: str | None = None, replan: bool = True,
            discard: PreStaged | None = None) -> CommitResult:
    """Plan, stage and commit ``operation`` on the newest version of ``table``, re-planning after each
    conflict until the deadline (module docstring), each plan in a transaction of its own. ``target``: the
    first transaction, or a :class:`~table.table.Table`, which opens it (and learns of the commit).

    Before each plan is staged, the table is checked for the operation
    (:func:`table.log.writable.check_operation`): a table we cannot write, or, when ``removes_data`` (the
    operation removes or changes rows: every DELETE and UPDATE, a MERGE that is not insert-only), an
    append-only table, is refused before anything is uploaded.

    ``replan=False`` is for an operation holding files staged before (``job_id``'s, in ``discard``: a
    replaceWhere's data, which may have been a stream): one attempt, on the snapshot ``target`` holds (the one
    the data was planned on: commits since are judged by Delta's rules at the commit), whose conflict is
    raised; ``discard`` is aborted when the attempt fails before its commit (the commit deletes it otherwise).

    ``staging_timed=False`` is for a ``stage`` whose time grows with the table rather than with a service's
    answers (Spark's operations, and OPTIMIZE wherever it runs: minutes on a big table): the deadline then
    counts everything but the staging, each attempt's reads and commit
    getting the time the earlier attempts left."""
    txn = transaction_of(target)
    limit = _Deadline(txn.storage_options.timeout_seconds, f"{operation} on {txn.uri.table_path}", staging_timed)
    with limit.whole():
        replans = 0
        attempts = 0  # commit attempts of the plans that ended in a conflict
        conflict: CommitConflictError | None = None
        refreshing: Future[Snapshot] | None = None  # the newest version, read while the first plan is staged
        try:
            with limit.phase():
                if txn.snapshot is not None:  # an unloaded Table (Table.unloaded) is loaded by the refresh
                    txn.require(operation.lower())  # a time-travelled Table is refused, not moved on
                if replan and txn.snapshot is not None and staging_timed and job_id is None and discard is None:
                    refreshing = txn.refresh_later()
                elif replan or txn.snapshot is None:  # a change applies to the table as it is now
                    txn.refresh()
        except BaseException:
            _abort_quietly(txn, job_id, discard)
            raise
        given_job = job_id
        while True:
            job_id = given_job or str(uuid.uuid4())
            try:
                with limit.phase():
                    if conflict is not None:
                        txn = txn.restart()  # re-planning: a new transaction on the newest version
                    snapshot = txn.require(operation.lower())
                check_operation(snapshot, operation, table=txn.uri.table_path, removes_data=removes_data)
                started = time.monotonic()
                staged = stage(txn, job_id)
            except DeadlineExceededError:
                _abort_quietly(txn, job_id, discard)
                if conflict is None:
                    raise
                raise conflict from None  # re-planning ran out of time: the conflict is why
            except Exception:
                _abort_quietly(txn, job_id, discard)
                if refreshing is None:
                    raise
                with limit.phase():
                    fresh = _newer(refreshing, snapshot)  # the refresh's own failure comes first, as it would have
                refreshing = None
                if fresh is None:
                    raise
                txn = txn.newer(fresh)  # the plan failed on a version that was not the newest: plan on that
                continue
            except BaseException:
                _abort_quietly(txn, job_id, discard)
                raise
            if refreshing is not None:
                try:
                    with limit.phase():
                        fresh = _newer(refreshing, snapshot)
                except BaseException:
                    _discard_staged(txn, job_id, staged)
                    raise
                refreshing = None
                if fresh is not None:  # a newer version came in: this plan is dropped and made on it
                    _discard_staged(txn, job_id, staged)
                    txn = txn.newer(fresh)
                    continue
            executed = time.monotonic() - started
            if staged.empty:
                return CommitResult.of(snapshot.version, {**staged.metrics, "numReplans": str(replans),
                                                          "numAttempts": str(attempts)},
                                       operation=operation, snapshot=snapshot)
            with limit.phase() as committing:
                try:
                    result = commit_files(txn, staged.pendingsets,
                                          _with_identity(txn, snapshot, staged,
                                                         _builder(txn, staged, executed, replans, attempts)),
                                          job_id=job_id,
                                          partition_by=snapshot.layout.physical_columns(snapshot.partition_columns),
                                          engine_info=engine_info(),
                                          upload_seconds=executed, sweep_strays=staged.stray_uploads_possible,
                                          completer=staged.completer)
                except CommitStateUnknownError:
                    raise  # maybe committed: its deletion vectors may be in use
                except DynacommitError as failure:
                    if staged.rewriter is not None:
                        staged.rewriter.delete_vector_file()
                    if not isinstance(failure, CommitConflictError) or committing.expired() or not replan:
                        raise
                    conflict = failure
                    replans += 1
                    attempts += max(1, conflict.attempts)
                    log.warning("%s on %s: retrying: version %d, committed meanwhile, conflicts with what it read "
                                "(%s); planning it again on the newest version (re-plan %d; this attempt "
                                "committed nothing and its files are deleted)", operation, txn.uri.table_path,
                                conflict.version, conflict.kind.value, replans)
                    continue
            total = attempts + int(result.metrics.get("numAttempts", "1"))
            return dataclasses.replace(result, metrics=metrics_for(operation, {
                **result.metrics, "numReplans": str(replans), "numAttempts": str(total), "numRetries": str(total - 1)}))


def _newer(refreshing: Future[Snapshot], snapshot: Snapshot) -> Snapshot | None:
    """The newest snapshot that ``refreshing`` read, when it is newer than ``snapshot`` (None: ``snapshot`` was
    the newest); raises what the reading raised."""
    fresh = refreshing.result()
    return fresh if fresh.version != snapshot.version else None


def _discard_staged(txn: Transaction, job_id: str, staged: Staged) -> None:
    """An attempt that will not be committed (a newer version came in while it was staged): its uploads
    aborted and its deletion vector file deleted, as after a conflict. Best effort."""
    if staged.rewriter is not None:
        staged.rewriter.delete_vector_file()
    abort_job(txn.objects, txn.uri, job_id, staged.pendingsets, sweep=staged.stray_uploads_possible)


def _with_identity(table: TableView, snapshot: Snapshot, staged: Staged, build):
    """``build`` whose commit carries the high-water marks of identity values the operation handed out (a
    MERGE's inserts). A race lost to another identity write is a conflict here, and the operation is
    planned again (its files mix copied rows with new ones, so its values are not moved)."""
    rules = rules_of(snapshot.protocol, snapshot.metadata)
    if not rules.identity:
        return build
    return lambda adds, metrics: with_identity(table, build(adds, metrics), rules, staged.pendingsets,
                                               snapshot.layout, [], replan=False)


def _abort_quietly(table: TableView, job_id: str | None, staged: PreStaged | None) -> None:
    """Abort the uploads of files staged before an attempt that failed before its commit."""
    if staged is not None and job_id is not None:
        abort_job(table.objects, table.uri, job_id, staged.files)


class _Deadline:
    """An operation's deadline (``DYNACOMMIT_TIMEOUT_SECONDS``). With timed staging, one deadline over the
    whole operation: each phase runs under it. Otherwise only the phases count, each getting what the
    earlier ones left, and staging runs under none."""

    def __init__(self, seconds: float | None, what: str, staging_timed: bool):
        self.seconds = deadline.DEFAULT_TIMEOUT_SECONDS if seconds is None else float(seconds)
        self.what = what
        self.staging_timed = staging_timed
        self.left = self.seconds

    @contextlib.contextmanager
    def whole(self) -> Iterator[None]:
        if not self.staging_timed:
            yield
            return
        with deadline.deadline(self.seconds, self.what):
            yield

    @contextlib.contextmanager
    def phase(self) -> Iterator[deadline.Deadline]:
        began = time.monotonic()
        try:
            with deadline.deadline(self.seconds if self.staging_timed else self.left, self.what) as limit:
                yield limit  # timed: the whole operation's deadline, which ends sooner than this one
        finally:
            if not self.staging_timed:
                self.left -= time.monotonic() - began


def _builder(txn: Transaction, staged: Staged, executed: float, replans: int = 0, attempts_before: int = 0
             ) -> Callable[[list[AddFile | Cdc], dict[str, str]], Commit]:
    """The commit of ``staged`` in ``txn`` (which says what was read, unless ``staged`` does); it records ``numReplans`` and ``numAttempts`` counted across re-plans (the
    attempts of ``replans`` earlier plans were ``attempts_before``)."""
    def build(files: list[AddFile | Cdc], job_metrics: dict[str, str]) -> Commit:
        adds = [f if staged.data_change else f.model_copy(update={"data_change": False})
                for f in files if isinstance(f, AddFile)]
        if staged.clustering_provider is not None:
            adds = [f.model_copy(update={"clustering_provider": staged.clustering_provider}) for f in adds]
        changes = [f for f in files if isinstance(f, Cdc)]
        actions: list[Action] = [*([staged.protocol] if staged.protocol is not None else []),
                                 *([staged.metadata] if staged.metadata is not None else []), *staged.domains,
                                 *staged.removes,
                                 *staged.vector_adds, *adds, *changes]
        metrics = {k: v for k, v in job_metrics.items() if k not in _WRITE_METRICS}
        metrics.update(staged.metrics)
        metrics.update(_file_metrics(staged.operation, adds, changes, staged.removes, staged.vector_adds))
        metrics["executionTimeMs"] = str(int(executed * 1000))
        metrics["numReplans"] = str(replans)
        read_scope = staged.read_scope if staged.read_scope is not None else txn.read_scope
        return Commit(actions=tuple(actions), operation=staged.operation, read_scope=read_scope,
                      operation_parameters=staged.parameters, operation_metrics=metrics, engine_info=engine_info(),
                      attempts_before=attempts_before)

    return build


def _file_metrics(operation: str, adds: Sequence[AddFile], changes: Sequence[Cdc], removes: Sequence[RemoveFile],
                  vector_adds: Sequence[AddFile] = ()) -> dict[str, str]:
    """Delta's file metrics of a row-level operation (MERGE names them ``numTarget...``). A file kept with a
    new deletion vector is neither added nor removed: its vector is added (it had none) or updated."""
    kept = {a.path for a in vector_adds}
    given = [r for r in removes if r.path in kept]  # the old logical file of each file given a new vector
    removes = [r for r in removes if r.path not in kept]
    added, removed = str(len(adds)), str(len(removes))
    added_bytes, removed_bytes = str(sum(a.size for a in adds)), str(sum(r.size or 0 for r in removes))
    vectors = {"DeletionVectorsAdded": str(sum(1 for r in given if r.deletion_vector is None)),
               "DeletionVectorsUpdated": str(sum(1 for r in given if r.deletion_vector is not None)),
               "DeletionVectorsRemoved": str(sum(1 for r in removes if r.deletion_vector is not None))}
    if operation == "RESTORE":
        return {}  # the restore's own metrics (table.operations.restore) say what it added and removed
    if operation == "OPTIMIZE":
        return {"numAddedFiles": added, "numRemovedFiles": removed, "numAddedBytes": added_bytes,
                "numRemovedBytes": removed_bytes, "numDeletionVectorsRemoved": vectors["DeletionVectorsRemoved"]}
    if operation == "MERGE":
        return {"numTargetFilesAdded": added, "numTargetFilesRemoved": removed, "numTargetBytesAdded": added_bytes,
                "numTargetBytesRemoved": removed_bytes, "numTargetChangeFilesAdded": str(len(changes)),
                **{f"numTarget{k}": v for k, v in vectors.items()}}
    return {"numAddedFiles": added, "numRemovedFiles": removed, "numAddedBytes": added_bytes,
            "numRemovedBytes": removed_bytes, "numAddedChangeFiles": str(len(changes)),
            "changeFileBytes": str(sum(c.size for c in changes)), **{f"num{k}": v for k, v in vectors.items()}}


def removes_of(files: Sequence[AddFile]) -> tuple[RemoveFile, ...]:
    """The ``remove`` actions (``dataChange=true``, now) of rewritten or deleted files."""
    now = int(time.time() * 1000)
    return tuple(f.remove(deletion_timestamp=now) for f in files)


def abort_on_error(rewriter: Rewriter, work: Callable[[], Staged]) -> Staged:
    """Run an operation's staging; on any failure abort what it staged, then re-raise."""
    try:
        return work()
    except BaseException:
        rewriter.abort()
        raise
