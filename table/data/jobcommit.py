"""The job commit of the staging committer: the one moment a job's files become visible.

Tasks (``write_table``'s single task, or Spark's executors) staged their files as incomplete multipart
uploads and reported them as PendingSets. :func:`commit_staged` runs on the driver, in named stages
(with the failpoints between them):

1. **validate** every PendingSet (keys under the table, carrying the job id, ordered parts ...);
2. **complete** every upload in parallel (``table.jobcommit.after_complete``): the objects exist now,
   but no log entry references them. A :class:`Completer` does it: a bounded pool of threads here, or
   a Spark job over the PendingSets on the executors (``write_dataframe``). Files held in memory (an
   in-process write's small files, one PUT each) are completed beside stage 3's first round trips
   instead: the log store's checks and temp file go out meanwhile, and its commit point waits for them
   (``LogStore.write(before_commit=...)``);
3. **commit** one log entry with their ``add`` actions (plus ``remove`` actions for an overwrite): the
   :class:`~table.data.writespec.WriteSpec` builds the commit, :func:`table.log.transaction.commit` retries
   lost races and detects conflicts (``table.jobcommit.after_commit``);
4. **finish**: move the Table to the new version and abort the uploads of task attempts whose
   PendingSets never reached the driver. Nothing here fails the write.

Failure handling (docs/protocol.md, "The staging committer", point 4). The transaction says whether the
commit happened: a ``CommitStateUnknownError`` means it may have, so everything is left in place; any other
error from it means it did not, so the job deletes the objects it completed and aborts its uploads before
re-raising.
An error that is not one of ours (a bug, an interrupt) after the transaction was entered leaves
everything in place too: only a commit that provably did not happen is cleaned up. When the
application's ``txn`` shows the job already committed (a retried job), or mode ``ignore`` met a table
created concurrently, the completed files are deleted (nothing references them).
"""

from __future__ import annotations

import functools
import logging
import socket
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Protocol
from urllib.parse import unquote

import pyarrow as pa

from logstore import (
    CommitStateUnknownError,
    DynacommitError,
    ObjectStore,
    StorageError,
    TableUri,
    failpoints,
    pool,
)
from table.data.identity import IdentityJob
from table.data.pendingset import PendingSet, PendingSetError, validate_pendingsets
from table.data.uploads import (
    abort_pending,
    abort_stray_uploads,
    complete_pending,
    delete_completed,
    staged_add,
)
from table.data.writespec import CommitResult, WritePlan, WriteSpec
from table.errors import CommitConflictError
from table.log import transaction
from table.log.actions import AddFile, Cdc, RemoveFile
from table.log.column_mapping import Layout
from table.log.commit import Commit, client_version
from table.log.outcome import SnapshotAfter
from table.log.constraints import TableRules
from table.transaction import Opens, TableView, Transaction, transaction_of

__all__ = ["Completer", "abort_job", "commit_files", "commit_staged", "engine_info", "validate_or_abort"]

log = logging.getLogger(__name__)


class Completer(Protocol):
    """Stage 2 of a job commit: complete every staged upload of ``pendingsets`` and return their ``add``
    actions in PendingSet order, all or nothing: on failure, what it completed is deleted and the rest
    aborted before the error is raised. :func:`~table.data.uploads.complete_pending` is the in-process one;
    a Spark job completes them on its executors (:mod:`spark_integration.completion`)."""

    def __call__(self, objects: ObjectStore, pendingsets: Sequence[PendingSet], *, max_workers: int
                 ) -> list[AddFile | Cdc]: ...


AFTER_COMPLETE = failpoints.declare(
    "table.jobcommit.after_complete", "every upload of the job is completed; no log entry references them")
AFTER_COMMIT = failpoints.declare(
    "table.jobcommit.after_commit", "the job's log entry is committed; stray uploads are not swept yet")


@functools.cache
def engine_info() -> str:
    """``dynacommit 0.1.0 / python 3.11 / pyarrow 26.0.1``, as written to ``commitInfo.engineInfo``."""
    version = client_version().removeprefix("dynacommit-")
    return f"dynacommit {version} / python {sys.version_info.major}.{sys.version_info.minor} / pyarrow {pa.__version__}"


def commit_staged(target: Transaction | Opens, pendingsets: Sequence[PendingSet], spec: WriteSpec, plan: WritePlan, *,
                  job_id: str, engine_info: str, upload_seconds: float | None = None, max_workers: int = 16,
                  sweep_strays: bool = True, completer: Completer | None = None) -> CommitResult:
    """The job commit of a write (module docstring): validate, complete, commit, finish. ``plan`` is what
    the tasks wrote with (from ``spec.plan(table, ...)``). ``target``: the transaction to commit in, or a
    :class:`~table.table.Table`, which opens one and is left at the committed version.
    ``sweep_strays=False`` skips listing the table's uploads for lost task attempts: a job with one
    in-process task (``write_table``) has none, since its writer aborts its own uploads. ``completer``
    runs stage 2 (default :func:`~table.data.uploads.complete_pending`, a bounded pool in this process).

    Raises PendingSetError, TableExistsError, CommitConflictError, CommitTimeoutError ... (all after
    deleting and aborting everything of the job), or CommitStateUnknownError (after touching nothing).
    """
    txn = transaction_of(target)
    if plan.done is not None:
        validate_or_abort(txn, pendingsets, job_id, plan.physical_partition_by)
        abort_job(txn.objects, txn.uri, job_id, pendingsets, sweep=sweep_strays)
        return plan.done

    jobs: list[IdentityJob] = []

    def build(adds: list[AddFile], metrics: dict[str, str]) -> Commit:
        commit = spec.commit_for(txn, plan, adds, engine_info=engine_info, operation_metrics=metrics)
        return with_identity(txn, commit, plan.rules, pendingsets, plan.layout, jobs)

    return commit_files(txn, pendingsets, build, job_id=job_id, partition_by=plan.physical_partition_by,
                        engine_info=engine_info, upload_seconds=upload_seconds, max_workers=max_workers,
                        sweep_strays=sweep_strays, completer=completer,
                        written=lambda: [key for job in jobs for key in job.written])


def with_identity(table: TableView, commit: Commit, rules: TableRules, pendingsets: Sequence[PendingSet],
                  layout: Layout | None, jobs: list[IdentityJob], *, replan: bool = True) -> Commit:
    """``commit`` carrying the identity high-water marks of the values ``pendingsets`` handed out
    (:mod:`table.data.identity`); with ``replan``, re-planned after a race lost to other identity appends.
    The job is added to ``jobs`` (its re-plans' files are deleted with the job's if the commit fails)."""
    if not rules.identity:
        return commit
    physical = {i.column: (layout.physical_name(i.column) if layout is not None and layout.mapped else i.column)
                for i in rules.identity}
    job = IdentityJob(table.objects, table.uri, rules, pendingsets, physical)
    if not job.ranges:
        return commit
    jobs.append(job)
    base = table.snapshot.metadata if table.snapshot is not None else None
    return job.commit_with_marks(commit, base, replan=replan)


def validate_or_abort(table: TableView, pendingsets: Sequence[PendingSet], job_id: str,
                      partition_by: Sequence[str]) -> None:
    """Stage 1: validate the PendingSets; on failure abort the uploads of those under the table, re-raise."""
    try:
        validate_pendingsets(pendingsets, table.uri, job_id, partition_columns=list(partition_by))
    except PendingSetError:
        abort_job(table.objects, table.uri, job_id, [p for p in pendingsets if _inside(p, table.uri)])
        raise


def commit_files(target: Transaction | Opens, pendingsets: Sequence[PendingSet],
                 build: Callable[[list[AddFile | Cdc], dict[str, str]], Commit], *, job_id: str,
                 partition_by: Sequence[str], engine_info: str, upload_seconds: float | None = None,
                 max_workers: int = 16, sweep_strays: bool = True, completer: Completer | None = None,
                 written: Callable[[], Sequence[str]] | None = None) -> CommitResult:
    """The stages of the module docstring for any job whose output is staged files: ``build`` makes the
    commit of the completed files (their ``add`` actions and the job's metrics). ``partition_by``: the
    partition columns as the staged files name them (physical names on a table with column mapping). A write builds it from its
    :class:`~table.data.writespec.WriteSpec`, a compaction from the files it rewrites. The commit is
    ``target``'s (a transaction, or one a :class:`~table.table.Table` opens). ``written``: keys of objects
    the commit wrote while it ran (an identity re-plan's files), deleted with the job's files when the
    commit provably did not happen."""
    txn = transaction_of(target)
    objects, uri = txn.objects, txn.uri
    validate_or_abort(txn, pendingsets, job_id, partition_by)
    started = time.monotonic()
    completing: _HeldCompletion | None = None
    if _held_only(pendingsets):
        # Files held in memory (an in-process write) become whole with one PUT each: those go out beside
        # the log store's own preparation, and its commit point waits for them (before_commit).
        completing = _HeldCompletion(lambda: pool.submit(_complete, objects, uri, job_id, pendingsets, max_workers,
                                                         sweep_strays, complete_pending))
        adds = [staged_add(staged) for pending in pendingsets for staged in pending.files]
        complete_seconds = None
    else:
        adds = _complete(objects, uri, job_id, pendingsets, max_workers, sweep_strays, completer or complete_pending)
        complete_seconds = time.monotonic() - started
    started = time.monotonic()
    entered = False
    try:
        commit = build(adds, _metrics(pendingsets, job_id, engine_info, upload_seconds, complete_seconds))
        metrics = dict(commit.operation_metrics)
        entered = True
        outcome = txn.commit(commit, before_commit=completing)
    except CommitStateUnknownError:
        log.error("job %s: the commit to %s may or may not have happened; its %d files are left in place",
                  job_id, uri.table_path, len(adds))
        raise
    except BaseException as exc:
        if completing is not None:
            completing.wait_quietly()  # its PUTs are over before anything of the job is deleted
        if entered and not isinstance(exc, DynacommitError):
            log.error("job %s: the commit to %s failed unexpectedly (%r); its %d files are left in place, since "
                      "it cannot be told whether the commit happened", job_id, uri.table_path, exc, len(adds))
            raise
        # A conflict is the caller's to report: a row-level operation retries it (a re-plan, logged there as a
        # retry), a write raises it. Anything else ends the job here.
        log.log(logging.INFO if isinstance(exc, CommitConflictError) else logging.WARNING,
                "job %s: nothing was committed to %s (%s); deleting its %d files", job_id, uri.table_path, exc,
                len(adds))
        deleted = _delete_job(objects, uri, job_id, adds, sweep=sweep_strays,
                              also=written() if written is not None else ())
        if isinstance(exc, DynacommitError):
            _say_what_was_staged(exc, len(adds), deleted, uri)
        raise
    if completing is not None:
        completing.wait_quietly()  # a commit that was skipped (a replay) never waited for it
    failpoints.hit(AFTER_COMMIT)
    return _finish(objects, uri, outcome, adds, metrics, time.monotonic() - started, job_id, sweep_strays,
                   written() if written is not None and not outcome.committed else (), operation=commit.operation,
                   after=SnapshotAfter.of(txn.log_store, outcome))


class _HeldCompletion:
    """The PUTs of an in-process job's held files, sent beside the log store's preparation; the
    transaction's ``before_commit``: each attempt's commit point waits for them. When they failed
    transiently, the attempt fails before its commit point and the transaction tries again: the files are
    PUT again (the same bytes at the same keys) for that next attempt."""

    def __init__(self, start: Callable[[], Future]):
        self._start = start
        self._future = start()

    def __call__(self) -> object:
        try:
            return self._future.result()
        except StorageError as exc:
            if exc.retryable:
                self._future = self._start()  # under way while the transaction pauses
            raise

    def wait_quietly(self) -> None:
        pool.wait_quietly(self._future)


def _held_only(pendingsets: Sequence[PendingSet]) -> bool:
    files = [staged for pending in pendingsets for staged in pending.files]
    return bool(files) and all(staged.held is not None for staged in files)


def _complete(objects: ObjectStore, uri: TableUri, job_id: str, pendingsets: Sequence[PendingSet],
              max_workers: int, sweep_strays: bool, completer: Completer) -> list[AddFile | Cdc]:
    """Stage 2: every upload completed, or none (and the job's uploads aborted) and the error raised."""
    try:
        adds = completer(objects, pendingsets, max_workers=max_workers)
    except BaseException:  # before the commit point; complete_pending cleaned up its own work
        abort_job(objects, uri, job_id, (), sweep=sweep_strays)
        raise
    failpoints.hit(AFTER_COMPLETE)
    return adds


def _metrics(pendingsets: Sequence[PendingSet], job_id: str, engine: str, upload_seconds: float | None,
             complete_seconds: float | None) -> dict[str, str]:
    """What the S3A committers' ``_SUCCESS`` file records, as ``operationMetrics`` (string values);
    ``completeSeconds`` only when the uploads were completed before the commit was built."""
    files = [f for p in pendingsets for f in p.files]
    data = [f for f in files if not f.change_data]
    metrics = {
        "numFiles": str(len(data)),
        "numOutputRows": str(sum(f.num_records for f in data)),
        "numOutputBytes": str(sum(f.size for f in data)),
        "numParts": str(sum(len(f.parts) for f in files)),
        "numTasks": str(len(pendingsets)),
        "jobId": job_id,
        "host": socket.gethostname(),
        "engine": engine,
    }
    if complete_seconds is not None:
        metrics["completeSeconds"] = f"{complete_seconds:.3f}"
    if upload_seconds is not None:
        metrics["uploadSeconds"] = f"{upload_seconds:.3f}"
    return metrics


def _finish(objects: ObjectStore, uri: TableUri, outcome: transaction.CommitOutcome, adds: list[AddFile | Cdc],
            metrics: dict[str, str], commit_seconds: float, job_id: str, sweep_strays: bool,
            written: Sequence[str] = (), *, operation: str, after: SnapshotAfter) -> CommitResult:
    """After the commit point: tidy up without ever failing the write (the transaction told its handle of the
    new version already). The result's metrics are ``operation``'s typed metrics of the job's one count
    (``metrics``, what the commit recorded) plus the commit's own; its snapshot is ``after``."""
    counted = dict(metrics, commitSeconds=f"{commit_seconds:.3f}", numAttempts=str(outcome.attempts),
                   numRetries=str(max(0, outcome.attempts - 1)))
    if not outcome.committed:
        counted["skipped"] = "true"
    try:
        result = CommitResult.of(outcome.version, counted, operation=operation, snapshot=after)
    except ValueError:  # a metric the typed metrics cannot read: a bug, which must not fail a commit that landed
        log.exception("job %s: version %d of %s is committed; its metrics are returned untyped", job_id,
                      outcome.version, uri.table_path)
        result = CommitResult(outcome.version, counted, after)
    if not outcome.committed:
        live = outcome.snapshot.state.files if outcome.snapshot is not None else {}
        if any(a.path in live for a in adds):
            # Never delete what the log references, whatever the outcome says.
            log.error("job %s: version %d of %s holds this job's own files; keeping them", job_id,
                      outcome.version, uri.table_path)
            return result
        log.info("job %s: %s at version %d of %s; deleting the job's %d files", job_id, outcome.status.value,
                 outcome.version, uri.table_path, len(adds))
        _delete_job(objects, uri, job_id, adds, sweep=sweep_strays, also=written)
        return result
    if sweep_strays:
        try:
            abort_stray_uploads(objects, uri, job_id, ())
        except (DynacommitError, OSError) as exc:  # the commit landed: tidying up must not fail it
            log.warning("job %s committed version %d, but aborting its stray uploads failed: %s; "
                        "`dynacommit uploads abort` removes them", job_id, outcome.version, exc)
    return result


def abort_job(objects: ObjectStore, uri: TableUri, job_id: str, pendingsets: Sequence[PendingSet], *,
              sweep: bool = True) -> None:
    """Nothing was completed: abort the job's uploads, those reported and (``sweep``) those of lost
    attempts. Best effort: it runs while another error propagates, or after a commit."""
    abort_pending(objects, pendingsets)
    if not sweep:
        return
    try:
        abort_stray_uploads(objects, uri, job_id, ())
    except (DynacommitError, OSError) as exc:
        log.warning("job %s: could not list its uploads to abort them (%s); `dynacommit uploads abort` "
                    "removes them", job_id, exc)


def _delete_job(objects: ObjectStore, uri: TableUri, job_id: str, adds: Sequence[AddFile | Cdc | RemoveFile], *,
                sweep: bool = True, also: Sequence[str] = ()) -> bool:
    """The commit provably did not reference them: delete the completed files (and the objects ``also``
    names), abort stray uploads. Returns whether the files were deleted (a failure is logged, not raised)."""
    keys = [uri.key(unquote(a.path)) for a in adds] + list(also)
    deleted = True
    try:
        delete_completed(objects, keys)
    except (DynacommitError, OSError) as exc:
        deleted = False
        log.warning("job %s: could not delete %d unreferenced files (%s); `dynacommit vacuum` removes them",
                    job_id, len(keys), exc)
    abort_job(objects, uri, job_id, (), sweep=sweep)
    return deleted


def _say_what_was_staged(exc: DynacommitError, files: int, deleted: bool, uri: TableUri) -> None:
    """A commit refused after the job staged its files (a refusal only the commit could know: the table
    changed since the job was planned, a concurrent commit conflicts) tells the truth about them: their
    uploads happened, and they were deleted again (or could not be, and vacuum removes them). The
    error's message gains that sentence; errors whose message is not their one argument are left as
    they are."""
    if not files or len(exc.args) != 1 or not isinstance(exc.args[0], str) or str(exc) != exc.args[0]:
        return
    if deleted:
        said = f" The {files} file(s) this job staged for the commit were deleted again."
    else:
        said = (f" The {files} file(s) this job staged for the commit could not be deleted; they are "
                f"referenced by no version, and `dynacommit vacuum {uri.table_path}` removes them.")
    exc.args = (exc.args[0].rstrip() + said,)


def _inside(pending: PendingSet, uri: TableUri) -> bool:
    """Whether every key of a PendingSet lies under the table: only such uploads are aborted for a
    PendingSet that failed validation (a tampered one must not steer our aborts elsewhere)."""
    root = uri.key("")
    return all(f.key.startswith(root) and "/_delta_log/" not in "/" + uri.relative(f.key) for f in pending.files)
