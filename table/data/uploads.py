"""What a job does with its staged uploads: complete them, abort them, find the strays.

A staged file is an incomplete multipart upload named in a :class:`~table.data.pendingset.PendingSet`.
The job commit completes them all (:func:`complete_pending`, all or nothing); a failed task or job aborts
them (:func:`abort_pending`, best effort); uploads of attempts whose PendingSet never reached the driver
are found by the job id in their keys (:func:`abort_stray_uploads`); objects a failed job completed are
deleted (:func:`delete_completed`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, wait

from logstore import ObjectStore, Part, StorageError, TableUri, deadline, failpoints
from logstore.pool import Pool
from table import progress
from table.data.pendingset import PendingSet, StagedFile, check_job_id, data_file_job
from table.log.actions import AddFile, Cdc

__all__ = ["abort_pending", "abort_stray_uploads", "complete_files", "complete_pending", "delete_completed",
           "staged_add"]

log = logging.getLogger(__name__)

AFTER_COMPLETE_ONE = failpoints.declare(
    "table.jobcommit.after_complete_one", "one upload of the job is completed, others may not be; nothing committed")


def complete_pending(objects: ObjectStore, pendingsets: Sequence[PendingSet], *, max_workers: int = 16
                     ) -> list[AddFile | Cdc]:
    """Complete every staged upload in parallel and return their ``add`` actions (in PendingSet order).

    All or nothing: if any completion fails, the objects completed so far are deleted and every other
    upload is aborted before the error is re-raised, so a failed job leaves no visible file behind.
    The caller must have validated the PendingSets (:func:`validate_pendingsets`).
    """
    files = [staged for pending in pendingsets for staged in pending.files]
    if not files:
        return []
    if len(files) == 1:  # an in-process write of one file: no thread pool to start for it
        try:
            return [_complete_one(objects, files[0])]
        except BaseException as failure:
            log.warning("completing the upload of job %s failed (%s); aborting it", pendingsets[0].job_id, failure)
            abort_pending(objects, pendingsets, max_workers=1)
            raise
    completed, failure = _complete_in_pool(objects, files, max_workers)
    if failure is not None:
        log.warning("completing the uploads of job %s failed (%s); deleting %d completed objects and aborting "
                    "the rest", pendingsets[0].job_id, failure, len(completed))
        _best_effort_delete(objects, [files[i].key for i in completed])
        abort_pending(objects, pendingsets, max_workers=max_workers)
        raise failure
    return [completed[i] for i in range(len(files))]


def complete_files(objects: ObjectStore, files: Sequence[StagedFile], *, max_workers: int = 16) -> None:
    """Complete ``files`` on a bounded pool, without cleaning up on failure: the first error is raised once
    every completion under way has ended. For a part of a job's files (an executor's share, see
    :mod:`spark_integration.completion`) whose caller cleans up the whole job. Completing a file again
    is harmless: an upload found completed with the staged size counts as done."""
    _, failure = _complete_in_pool(objects, files, max_workers)
    if failure is not None:
        raise failure


def _complete_in_pool(objects: ObjectStore, files: Sequence[StagedFile], max_workers: int
                      ) -> tuple[dict[int, AddFile | Cdc], BaseException | None]:
    """Complete ``files`` on at most ``max_workers`` threads, stopping at the first failure: the ``add``
    actions of those completed (by index) and the first failure, once nothing is under way any more."""
    completed: dict[int, AddFile | Cdc] = {}
    with progress.task("completing uploads", total=len(files)) as task, \
            Pool(max(1, min(max_workers, len(files))), "dynacommit-complete") as pool:
        def complete(staged: StagedFile) -> AddFile | Cdc:
            add = _complete_one(objects, staged)
            task.advance()
            return add

        futures = {pool.submit(complete, staged): index for index, staged in enumerate(files)}
        done, not_done = wait(futures, return_when=FIRST_EXCEPTION)
        for future in not_done:
            future.cancel()
        done, _ = wait(futures)
    failure: BaseException | None = None
    for future, index in futures.items():
        if future.cancelled():
            continue
        error = future.exception()
        if error is None:
            completed[index] = future.result()
        elif failure is None:
            failure = error
    return completed, failure


def _complete_one(objects: ObjectStore, staged: StagedFile) -> AddFile:
    if staged.held is not None:  # a small file of this process's own task: one PUT makes it whole
        objects.put(staged.key, staged.held)
        failpoints.hit(AFTER_COMPLETE_ONE)
        return staged_add(staged)
    parts = [Part(p.number, p.etag) for p in staged.parts]
    try:
        objects.complete_upload(staged.key, staged.upload_id, parts)
        failpoints.hit(AFTER_COMPLETE_ONE)
    except FileNotFoundError:
        # The upload is gone. If a retried CompleteMultipartUpload raced its own first, successful
        # attempt, the object is there with our size; otherwise the upload was aborted (e.g. by a
        # lifecycle rule or `uploads abort`) and the file is lost.
        found = objects.head(staged.key)
        if found is None or found.size != staged.size:
            raise
    return staged_add(staged)


def staged_add(staged: StagedFile) -> AddFile | Cdc:
    """The ``add`` action of a staged file, as its job commit records it once the file is whole (the ``cdc``
    action of a change data file)."""
    if staged.change_data:
        return Cdc(path=staged.path, partition_values=dict(staged.partition_values), size=staged.size,
                   data_change=False)
    return AddFile(path=staged.path, partition_values=dict(staged.partition_values), size=staged.size,
                   modification_time=int(time.time() * 1000), data_change=True, stats=staged.stats)


def abort_pending(objects: ObjectStore, pendingsets: Sequence[PendingSet], *, max_workers: int = 16) -> int:
    """Abort every upload of ``pendingsets`` (completed ones are unaffected). Best effort, as aborts run
    while handling another failure: a failing abort is logged, not raised. Each abort has a cleanup deadline
    of its own (``logstore.deadline.cleanup``): the failure being handled is often the operation's deadline,
    under which no request could leave and every upload would stay. Returns how many were aborted."""
    files = [staged for pending in pendingsets for staged in pending.files if staged.held is None]
    if not files:
        return 0

    def abort(staged: StagedFile) -> bool:
        try:
            with deadline.cleanup(f"aborting upload {staged.upload_id} of {staged.key}"):
                objects.abort_upload(staged.key, staged.upload_id)
            return True
        except Exception as exc:  # noqa: BLE001 - best effort while another error propagates
            log.warning("could not abort upload %s of %s: %s; `dynacommit uploads abort` or a lifecycle rule "
                        "will remove it", staged.upload_id, staged.key, exc)
            return False

    with Pool(max(1, min(max_workers, len(files))), "dynacommit-abort") as pool:
        futures = [pool.submit(abort, staged) for staged in files]
    return sum(future.result() for future in futures)


def delete_completed(objects: ObjectStore, keys: Sequence[str]) -> None:
    """Delete objects a failed job completed: no log entry references them."""
    if keys:
        objects.delete(list(keys))


def _best_effort_delete(objects: ObjectStore, keys: Sequence[str]) -> None:
    try:
        delete_completed(objects, keys)
    except StorageError as exc:
        log.warning("could not delete %d unreferenced objects (%s); `dynacommit vacuum` will remove them",
                    len(keys), exc)


def abort_stray_uploads(objects: ObjectStore, uri: TableUri, job_id: str, keep_upload_ids: Iterable[str]) -> int:
    """Abort the job's incomplete uploads under the table that are not in ``keep_upload_ids``.

    These are the uploads of failed or speculative task attempts whose PendingSets never reached the
    driver: found by the job id in their file name. Returns how many were aborted.
    """
    check_job_id(job_id)
    keep = set(keep_upload_ids)
    aborted = 0
    for upload in objects.list_uploads(uri.key("")):
        if data_file_job(upload.key.rsplit("/", 1)[-1]) != job_id or upload.upload_id in keep:
            continue
        try:
            with deadline.cleanup(f"aborting stray upload {upload.upload_id} of {upload.key}"):
                objects.abort_upload(upload.key, upload.upload_id)
            aborted += 1
        except StorageError as exc:
            log.warning("could not abort stray upload %s of %s: %s", upload.upload_id, upload.key, exc)
    return aborted
