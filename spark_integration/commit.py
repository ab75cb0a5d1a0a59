"""Where every Spark write meets the table's job commit.

Every Spark write path (``write_dataframe``, ``df.write.format("dynacommit")``, the streaming sink) says
what it wants as a :class:`~table.data.writespec.WriteSpec` (the table layer's one place for the rules of
modes, partitioning, idempotent jobs and table properties), checks it on the driver before any task stages
a byte with ``spec.plan(table, data_schema)``, and commits through :func:`commit_job`: the only call of
:func:`table.data.jobcommit.commit_staged` in this package (validate, complete, commit one log entry, clean
up), with this engine's ``commitInfo.engineInfo``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from logstore.deadline import CLEANUP_SECONDS
from table.data.jobcommit import Completer, commit_staged
from table.data.jobcommit import engine_info as table_engine_info
from table.data.pendingset import PendingSet
from table.data.writespec import CommitResult, WritePlan, WriteSpec
from table.operations.replace_on import ReplaceOn, decode_keys
from table.operations.replace_where import ReplaceWhere
from table.table import Table

__all__ = ["commit_job", "commit_replace_on", "commit_replace_where", "engine_info"]

log = logging.getLogger(__name__)


def commit_job(table: Table, pendingsets: Sequence[PendingSet], spec: WriteSpec, plan: WritePlan, *, job_id: str,
               upload_seconds: float | None = None, sweep_strays: bool = True,
               completer: Completer | None = None) -> CommitResult:
    """The job commit of ``spec`` as ``spec.plan`` planned it (see ``commit_staged`` for what it raises and
    cleans up). ``completer``: who completes the uploads (the driver's pool by default; ``write_dataframe``
    passes :class:`~spark_integration.completion.ExecutorCompleter`).

    It returns once the commit's own finishing steps (the UpdateItem marking its entry complete) have
    ended, for at most the cleanup deadline: the Python process running a Spark driver's commit may be
    ended right after it, without exit handlers (Spark's Python workers end with ``os._exit``)."""
    result = commit_staged(table, pendingsets, spec, plan, job_id=job_id, engine_info=engine_info(),
                           upload_seconds=upload_seconds, sweep_strays=sweep_strays, completer=completer)
    if not table.log_store.wait_finished(timeout=CLEANUP_SECONDS):
        log.info("job %s committed version %d of %s; its entry is still being marked complete (the next "
                 "writer or reader finishes it)", job_id, result.version, table.uri.table_path)
    return result


def commit_replace_where(table: Table, replace_where: ReplaceWhere, pendingsets: Sequence[PendingSet], spec: WriteSpec,
                         plan: WritePlan, *, job_id: str, upload_seconds: float | None = None) -> CommitResult:
    """The job commit of a replaceWhere overwrite: the tasks' staged rows (each task's data and, with the change
    data feed, its ``insert`` change data) and the DELETE part of the predicate, in one commit read at the
    version the job was planned on (:meth:`~table.operations.replace_where.ReplaceWhere.commit`)."""
    table = replace_where.at_version(table)
    result = replace_where.commit(table, spec, plan, pendingsets, job_id=job_id, upload_seconds=upload_seconds or 0.0,
                                  stray_uploads_possible=True)
    if not table.log_store.wait_finished(timeout=CLEANUP_SECONDS):
        log.info("job %s committed version %d of %s; its entry is still being marked complete (the next "
                 "writer or reader finishes it)", job_id, result.version, table.uri.table_path)
    return result


def commit_replace_on(table: Table, replace_on: ReplaceOn, pendingsets: Sequence[PendingSet],
                      keys: Mapping[tuple[int, int], bytes], spec: WriteSpec, plan: WritePlan, *, job_id: str,
                      upload_seconds: float | None = None) -> CommitResult:
    """The job commit of a replaceOn / replaceUsing overwrite: the kept tasks' staged rows, and the DELETE part
    matching the values they kept (``keys``: by the task and attempt of each data PendingSet), in one commit read
    at the version the job was planned on (:meth:`~table.operations.replace_on.ReplaceOn.commit`)."""
    table = replace_on.at_version(table)
    kept = [decode_keys(keys[(p.task_id, p.attempt_id)]) for p in pendingsets
            if not ReplaceWhere.is_change_data(p) and (p.task_id, p.attempt_id) in keys]
    result = replace_on.commit(table, spec, plan, pendingsets, kept, job_id=job_id,
                               upload_seconds=upload_seconds or 0.0, stray_uploads_possible=True)
    if not table.log_store.wait_finished(timeout=CLEANUP_SECONDS):
        log.info("job %s committed version %d of %s; its entry is still being marked complete (the next "
                 "writer or reader finishes it)", job_id, result.version, table.uri.table_path)
    return result


def engine_info() -> str:
    """``commitInfo.engineInfo`` of a Spark job: the table layer's, plus the pyspark version."""
    import pyspark

    return f"{table_engine_info()} / pyspark {pyspark.__version__}"
