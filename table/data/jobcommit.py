"""The job commit of the staging committer: the one moment a job's files become visible.

Tasks (``write_table``'s single task, or Spark's executors) staged their files as incomplete multipart
uploads and reported them as PendingSets. :func:`commit_staged` runs on the driver, in named stages:

1. **validate** every PendingSet (keys under the table, carrying the job id, ordered parts ...);
2. **complete** every upload in parallel: the objects exist now, but no log entry references them;
3. **commit** one log entry with their ``add`` actions (plus ``remove`` actions for an overwrite)
   through :func:`table.log.transaction.commit`, which retries lost races and detects conflicts;
4. **clean up** uploads of task attempts whose PendingSets never reached the driver.

Failure handling (DESIGN.md, data path point 4): a failure that provably left the log untouched (a
conflict, a schema error, exhausted retries, anything before the commit point) deletes the objects the
job completed and aborts its other uploads before re-raising; ``CommitStateUnknownError`` leaves
everything in place, since the entry may reference those objects; and before deleting anything the
job reads the commits after its snapshot to make sure none references its files (an error raised
after the commit point must not delete committed data). When the application's ``txn``
shows the job already committed (a retried job), the completed files are deleted (nothing references
them) and the result carries the version that holds the txn.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Literal
from urllib.parse import unquote

import pyarrow as pa

from logstore import (
    CommitStateUnknownError,
    DynacommitError,
    TableNotFoundError,
    TableUri,
)
from table.data.pendingset import (
    PendingSet,
    PendingSetError,
    validate_pendingsets,
)
from table.data.uploads import (
    abort_pending,
    abort_stray_uploads,
    complete_pending,
    delete_completed,
)
from table.errors import SchemaMismatchError
from table.log.actions import Action, AddFile, Metadata, Protocol, RemoveFile
from table.log.schema import (
    DeltaType,
    arrow_type_to_delta,
    parse_partition_value,
    required_features,
    schema_diff,
    schema_string,
)
from table.log.snapshot import read_commit
from table.log.transaction import (
    CommitOutcome,
    ReadOnlySnapshotError,
    ReadScope,
    client_version,
    commit,
    txn_version,
)
from table.table import Table

__all__ = ["CommitResult", "TableExistsError", "already_applied", "commit_staged", "engine_info"]

log = logging.getLogger(__name__)

Mode = Literal["append", "overwrite", "error", "ignore"]
PartitionOverwrite = Literal["static", "dynamic"]
_MODES = ("append", "overwrite", "error", "ignore")
_SPARK_MODE = {"append": "Append", "overwrite": "Overwrite", "error": "ErrorIfExists", "ignore": "Ignore"}


class TableExistsError(DynacommitError, FileExistsError):
    """``mode="error"`` and a table already exists at the URI; nothing was written."""


@dataclasses.dataclass(frozen=True)
class CommitResult:
    """What a write committed: the table version holding it, and its metrics (string values, the
    ``operationMetrics`` of the commit plus what is known only afterwards: ``commitSeconds``,
    ``numAttempts``; ``skipped="true"`` when the application's txn was already committed)."""

    version: int
    metrics: dict[str, str]


def already_applied(table: Table, app_id: str | None, app_version: int | None) -> CommitResult | None:
    """The skipped result when the table's snapshot already holds ``app_id`` at ``app_version`` or newer:
    checked before any data is staged, so a re-run job costs no uploads. (The transaction checks again
    at commit time, against the newest version, for re-runs racing each other.)"""
    if (app_id is None) != (app_version is None):
        raise ValueError("app_id and app_version must be given together")
    if app_id is None or table.snapshot is None:
        return None
    held = table.snapshot.state.app_version(app_id)
    if held is None or held < app_version:
        return None
    version = txn_version(table.log_store, table.snapshot, app_id)
    return CommitResult(version=version, metrics={"skipped": "true", "appVersionHeld": str(held)})


def engine_info() -> str:
    """``dynacommit 0.1.0 / python 3.11 / pyarrow 26.0.1``, as written to ``commitInfo.engineInfo``."""
    version = client_version().removeprefix("dynacommit-")
    return f"dynacommit {version} / python {sys.version_info.major}.{sys.version_info.minor} / pyarrow {pa.__version__}"


def commit_staged(table: Table, pendingsets: Sequence[PendingSet], *, mode: Mode, partition_overwrite: PartitionOverwrite,
                  app_id: str | None, app_version: int | None, schema: pa.Schema, partition_by: Sequence[str],
                  configuration: Mapping[str, str] | None, engine_info: str, job_id: str,
                  upload_seconds: float | None = None, max_workers: int = 16,
                  sweep_strays: bool = True) -> CommitResult:
    """The job commit (module docstring): validate, complete, commit, clean up. ``schema`` and
    ``partition_by`` are what the tasks wrote with; ``table`` is left at the committed version.
    ``sweep_strays=False`` skips listing the table's uploads for lost task attempts: a job with one
    in-process task (``write_table``) has none, since its writer aborts its own uploads.

    Raises PendingSetError, SchemaMismatchError, TableExistsError, CommitConflictError,
    CommitRetriesExhaustedError (all after deleting and aborting everything of the job), or
    CommitStateUnknownError (after touching nothing).
    """
    _check_mode(mode, partition_overwrite)
    objects, uri = table.objects, table.uri
    try:
        validate_pendingsets(pendingsets, uri, job_id, partition_columns=list(partition_by))
        _check_not_pinned(table)
        if table.exists:
            _check_existing(table, mode, schema, partition_by, configuration)
    except (PendingSetError, SchemaMismatchError, TableExistsError, ValueError):
        _abort_job(objects, uri, job_id, [p for p in pendingsets if _inside(p, uri)])
        raise
    if table.exists and mode == "ignore":
        _abort_job(objects, uri, job_id, pendingsets)
        return CommitResult(version=table.version, metrics={"skipped": "true"})
    started = time.monotonic()
    try:
        adds = complete_pending(objects, pendingsets, max_workers=max_workers)
    except Exception:  # before the commit point, re-raised unchanged; complete_pending cleaned up its own work
        _abort_job(objects, uri, job_id, ())
        raise
    complete_seconds = time.monotonic() - started
    actions, scope, removed = _actions(table, adds, mode, partition_overwrite, schema, partition_by, configuration)
    metrics = _metrics(pendingsets, removed, job_id, engine_info, upload_seconds, complete_seconds)
    parameters = {"mode": _SPARK_MODE[mode], "partitionBy": json.dumps(list(partition_by))}
    if mode == "overwrite" and partition_overwrite == "dynamic":
        parameters["partitionOverwriteMode"] = "DYNAMIC"
    started = time.monotonic()
    try:
        outcome = commit(table.log_store, table.snapshot, actions, operation="WRITE",
                         operation_parameters=parameters, read_scope=scope, app_id=app_id, app_version=app_version,
                         operation_metrics=metrics, engine_info=engine_info)
    except CommitStateUnknownError:
        log.error("job %s: the commit to %s may or may not have happened; its %d files are left in place",
                  job_id, uri.table_path, len(adds))
        raise
    except (DynacommitError, ValueError) as exc:
        if _provably_not_committed(table, adds):
            log.warning("job %s: commit to %s failed (%s); deleting its %d files", job_id, uri.table_path, exc,
                        len(adds))
            _delete_job(objects, uri, job_id, [uri.key(unquote(a.path)) for a in adds])
        raise
    return _finish(table, outcome, adds, metrics, time.monotonic() - started, job_id, sweep_strays)


def _check_mode(mode: str, partition_overwrite: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if partition_overwrite not in ("static", "dynamic"):
        raise ValueError(f"partition_overwrite must be 'static' or 'dynamic', got {partition_overwrite!r}")


def _check_not_pinned(table: Table) -> None:
    snapshot = table.snapshot
    if snapshot is not None and snapshot.time_travel:
        raise ReadOnlySnapshotError(
            f"this Table is pinned to version {snapshot.version} of {table.uri.table_path} (time travel) and "
            f"cannot be written; open Table({table.uri.table_path!r}) without a version, or call update()")


def _check_existing(table: Table, mode: str, schema: pa.Schema, partition_by: Sequence[str],
                    configuration: Mapping[str, str] | None) -> None:
    snapshot = table.snapshot
    assert snapshot is not None
    if mode == "error":
        raise TableExistsError(f"a table already exists at {table.uri.table_path} (version {snapshot.version}); "
                               f"nothing was written. Use mode='append' or 'overwrite'")
    if list(partition_by) != snapshot.partition_columns:
        raise ValueError(f"table {table.uri.table_path} is partitioned by {snapshot.partition_columns}, "
                         f"the job wrote with {list(partition_by)}")
    differences = schema_diff(snapshot.schema, schema)
    if differences:
        raise SchemaMismatchError(differences, table=table.uri.table_path)
    changed = {k: v for k, v in (configuration or {}).items() if snapshot.configuration.get(k) != v}
    if changed:
        raise ValueError(f"configuration {changed} differs from table {table.uri.table_path}'s; table properties "
                         f"are set when the table is created")


def _actions(table: Table, adds: list[AddFile], mode: str, partition_overwrite: str, schema: pa.Schema,
             partition_by: Sequence[str], configuration: Mapping[str, str] | None
             ) -> tuple[list[Action], ReadScope, list[RemoveFile]]:
    """The commit's actions, its read scope and the removes among them."""
    snapshot = table.snapshot
    if snapshot is None:
        # Racing creators of the same table: an append goes on as an append on the winner's table
        # (same schema), anything else must not pretend the table it found empty was empty.
        scope = ReadScope.blind_append() if mode == "append" else ReadScope.whole_table()
        return [*_create_actions(schema, partition_by, configuration), *adds], scope, []
    if mode != "overwrite":
        return list(adds), ReadScope.blind_append(), []
    now = int(time.time() * 1000)
    if partition_overwrite == "dynamic" and snapshot.partition_columns:
        types = {c: arrow_type_to_delta(snapshot.schema.field(c).type, column=c) for c in snapshot.partition_columns}
        touched = {_partition_key(a.partition_values, types) for a in adds}
        removes = [f.remove(deletion_timestamp=now) for f in snapshot.files
                   if _partition_key(f.partition_values, types) in touched]
        specs = {tuple((c, a.partition_values.get(c) or None) for c in types): None for a in adds}
        scope = ReadScope.partitions([dict(spec) for spec in specs])
    else:
        removes = [f.remove(deletion_timestamp=now) for f in snapshot.files]
        scope = ReadScope.whole_table()
    return [*removes, *adds], scope, removes


def _create_actions(schema: pa.Schema, partition_by: Sequence[str], configuration: Mapping[str, str] | None
                    ) -> list[Action]:
    """``protocol`` (reader 1 / writer 2, or 3/7 with ``timestampNtz`` when the schema needs it) and
    ``metaData`` of a new table."""
    text = schema_string(schema)
    features = sorted(required_features(text))
    if features:
        protocol = Protocol(min_reader_version=3, min_writer_version=7, reader_features=features,
                            writer_features=features)
    else:
        protocol = Protocol(min_reader_version=1, min_writer_version=2)
    metadata = Metadata(id=str(uuid.uuid4()), schema_string=text, partition_columns=list(partition_by),
                        configuration=dict(configuration or {}), created_time=int(time.time() * 1000))
    return [protocol, metadata]


def _metrics(pendingsets: Sequence[PendingSet], removed: list[RemoveFile], job_id: str, engine: str,
             upload_seconds: float | None, complete_seconds: float) -> dict[str, str]:
    """What the S3A committers' ``_SUCCESS`` file records, as ``operationMetrics`` (string values)."""
    files = [f for p in pendingsets for f in p.files]
    metrics = {
        "numFiles": str(len(files)),
        "numOutputRows": str(sum(f.num_records for f in files)),
        "numOutputBytes": str(sum(f.size for f in files)),
        "numParts": str(sum(len(f.parts) for f in files)),
        "numTasks": str(len(pendingsets)),
        "numRemovedFiles": str(len(removed)),
        "numRemovedBytes": str(sum(r.size or 0 for r in removed)),
        "completeSeconds": f"{complete_seconds:.3f}",
        "jobId": job_id,
        "host": socket.gethostname(),
        "engine": engine,
    }
    if upload_seconds is not None:
        metrics["uploadSeconds"] = f"{upload_seconds:.3f}"
    return metrics


def _finish(table: Table, outcome: CommitOutcome, adds: list[AddFile], metrics: dict[str, str],
            commit_seconds: float, job_id: str, sweep_strays: bool) -> CommitResult:
    """After the commit point: move the Table forward, and tidy up without ever failing the write."""
    objects, uri = table.objects, table.uri
    table.set_snapshot(outcome.snapshot)
    result = dict(metrics, commitSeconds=f"{commit_seconds:.3f}", numAttempts=str(outcome.attempts),
                  numRetries=str(max(0, outcome.attempts - 1)))
    if outcome.skipped:
        result["skipped"] = "true"
        live = outcome.snapshot.state.files
        if any(a.path in live for a in adds):
            # The txn that "already" holds the job is this very commit, landed by an attempt whose answer
            # was lost: its files are the table's now.
            log.error("job %s: version %d of %s holds this job's own files; keeping them", job_id,
                      outcome.version, uri.table_path)
            return CommitResult(version=outcome.version, metrics=result)
        log.info("job %s: version %d of %s already holds this application's txn; deleting the job's %d files",
                 job_id, outcome.version, uri.table_path, len(adds))
        _delete_job(objects, uri, job_id, [uri.key(unquote(a.path)) for a in adds], sweep=sweep_strays)
        return CommitResult(version=outcome.version, metrics=result)
    if sweep_strays:
        try:
            abort_stray_uploads(objects, uri, job_id, ())
        except (DynacommitError, OSError) as exc:  # the commit landed: tidying up must not fail it
            log.warning("job %s committed version %d, but aborting its stray uploads failed: %s; "
                        "`dynacommit uploads abort` removes them", job_id, outcome.version, exc)
    return CommitResult(version=outcome.version, metrics=result)


def _provably_not_committed(table: Table, adds: list[AddFile]) -> bool:
    """Whether no commit after the Table's snapshot adds any of ``adds``: checked before deleting them,
    so that an error raised after the commit point (a bug) cannot make us delete committed files."""
    if not adds:
        return True
    base = table.version
    paths = {a.path for a in adds}
    try:
        latest = table.log_store.latest_version(start=max(base, 0))
        for version in range(base + 1, latest + 1):
            if any(isinstance(a, AddFile) and a.path in paths for a in read_commit(table.log_store, version)):
                log.error("the commit of %s failed, yet version %d holds its files; leaving them in place",
                          table.uri.table_path, version)
                return False
    except TableNotFoundError:
        return True
    except DynacommitError as exc:
        log.warning("could not check the log of %s (%s); leaving the job's files in place", table.uri.table_path,
                    exc)
        return False
    return True


def _abort_job(objects, uri: TableUri, job_id: str, pendingsets: Sequence[PendingSet], *,
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


def _delete_job(objects, uri: TableUri, job_id: str, keys: list[str], *, sweep: bool = True) -> None:
    """The commit provably did not reference them: delete the completed files, abort stray uploads."""
    try:
        delete_completed(objects, keys)
    except (DynacommitError, OSError) as exc:
        log.warning("job %s: could not delete %d unreferenced files (%s); `dynacommit vacuum` removes them",
                    job_id, len(keys), exc)
    _abort_job(objects, uri, job_id, (), sweep=sweep)


def _inside(pending: PendingSet, uri: TableUri) -> bool:
    """Whether every key of a PendingSet lies under the table: only such uploads are aborted for a
    PendingSet that failed validation (a tampered one must not steer our aborts elsewhere)."""
    root = uri.key("")
    return all(f.key.startswith(root) and "/_delta_log/" not in "/" + uri.relative(f.key) for f in pending.files)


def _partition_key(values: Mapping[str, str | None], types: Mapping[str, DeltaType]) -> tuple:
    """Partition values compared as values, not text: another writer may spell the same timestamp or
    number differently (``2024-01-01 00:00:00`` vs ``2024-01-01 00:00:00.000000``)."""
    try:
        return tuple((c, parse_partition_value(values.get(c), t)) for c, t in types.items())
    except ValueError:
        return tuple((c, values.get(c) or None) for c in types)
