"""The commands: each reads or changes a table and returns a :class:`~table.cli.render.Report`.

To add a command, write a function ``(args, options) -> Report`` and declare it with :func:`command`
(name, help line, arguments); it then appears in ``dynacommit --help`` and takes the common flags. The
function never prints: the report is rendered as a table, plain text or JSON by :mod:`table.cli.render`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
from collections.abc import Callable
from types import ModuleType

from logstore import (
    DEFAULT_EXPIRE_SECONDS,
    StorageOptions,
    TableUri,
    open_log_store,
)
from logstore.admin import TTL_ATTRIBUTE, Finding, Severity, create_ddb_table, doctor
from logstore.entries import drop_entries, plan_recovery
from logstore.errors import DynacommitError, InvalidArgumentError, TableNotFoundError
from logstore.sweep import DEFAULT_SWEEP_AGE_SECONDS
from table.cli.args import Arg, Command, arg, hours, non_negative_int, positive_bytes
from table.cli.render import Cell, Column, Fields, Note, Report, Rows
from table.log.checkpoint import describe, read_last_checkpoint, write_checkpoint
from table.log.protocol import NEEDED_BECAUSE, missing_features
from table.maintenance import (
    MIN_RETENTION_HOURS,
    AbortReport,
    abort_pending_uploads,
    list_pending_uploads,
    upload_to_dict,
    vacuum,
)
from table.operations.delete import plan_delete
from table.operations.optimize import DEFAULT_TARGET_SIZE, optimize
from table.operations.restore import plan_restore
from table.operations.scan import record_count as scan_count
from table.table import Table

__all__ = ["COMMANDS", "GROUPS", "command"]

COMMANDS: list[Command] = []
"""Every command, in the order ``--help`` lists them."""
GROUPS = {"uploads": "multipart uploads left by writers that did not commit"}
"""The help line of each group of two-word commands."""

_STATUS_STYLE = {Severity.OK: "green", Severity.WARNING: "yellow", Severity.ERROR: "bold red"}

Run = Callable[[argparse.Namespace, StorageOptions], Report]


def command(name: str, help: str, *args: Arg, changes: str | None = None,
            acted_by_default: bool = False) -> Callable[[Run], Run]:
    """Declare the function below as the command ``name`` (see the module docstring). A command that changes
    anything says what (``changes``: what ``--execute`` does); it then takes ``--execute`` and ``--dry-run``
    (:mod:`table.cli.args`) and reads ``args.execute``."""
    def declare(run: Run) -> Run:
        COMMANDS.append(Command(name, help, run, args, changes=changes, acted_by_default=acted_by_default))
        return run
    return declare


def dry_run_note(what: str, *, would: bool = True) -> Note:
    """The last line of every dry run: nothing changed, and the flag that acts."""
    if not would:
        return Note("dry run: nothing was changed; there is nothing to do")
    return Note(f"dry run: nothing was changed; pass --execute to {what}", "yellow")


# --- the DynamoDB table ------------------------------------------------------------------------------


@command("create-ddb-table", "create the DynamoDB commit table (with TTL) if missing (dry run by default)",
         changes="create the table and enable TTL", acted_by_default=True)
def _create_ddb_table(args: argparse.Namespace, options: StorageOptions) -> Report:
    report = create_ddb_table(options, dry_run=not args.execute)
    billing = "on-demand (PAY_PER_REQUEST)" if report.billing_mode == "PAY_PER_REQUEST" else (
        f"{report.billing_mode.lower()}: run `dynacommit doctor` for advice")
    expiry = (f"completed commit entries expire {DEFAULT_EXPIRE_SECONDS // 3600} hours after completion "
              f"(DynamoDB deletes expired items within a few days)")
    if report.dry_run and not report.ttl_was_enabled:
        ttl = Cell(f"would be enabled on {TTL_ATTRIBUTE}: {expiry}", "yellow")
    elif report.ttl_enabled:
        ttl = Cell(f"enabled on {TTL_ATTRIBUTE}: {expiry}", "green")
    else:
        ttl = Cell("NOT enabled: completed commit entries will stay forever", "yellow")
    if report.dry_run:
        status = "does not exist: would be created" if report.created else "exists"
    else:
        status = "created" if report.created else "already existed"
    fields = Fields([
        ("DynamoDB table", report.table_name),
        ("status", status),
        ("keys", "tablePath (S, HASH) + fileName (S, RANGE)"),
        ("billing", billing),
        ("TTL", ttl),
    ])
    blocks = [fields, *(Note(f"note: {n}", "yellow") for n in report.notes)]
    if report.dry_run:
        blocks.append(dry_run_note("create it", would=report.created or not report.ttl_was_enabled))
    return Report(report.to_dict(), blocks)


@command("doctor", "check the DynamoDB table, and the table at URI if given",
         arg("uri", nargs="?", help="also check this table's bucket and how other writers spell its URI"))
def _doctor(args: argparse.Namespace, options: StorageOptions) -> Report:
    findings = doctor(options, TableUri.parse(args.uri) if args.uri else None)
    if args.uri:
        findings.append(_protocol_finding(args.uri, options))
    errors = sum(f.severity is Severity.ERROR for f in findings)
    warnings = sum(f.severity is Severity.WARNING for f in findings)
    rows = Rows([Column("status"), Column("check"), Column("message")],
                [[Cell(f.severity.value, _STATUS_STYLE[f.severity]), f.check, f.message] for f in findings])
    verdict = (Note(f"{errors} error(s), {warnings} warning(s)", "bold red" if errors else "yellow")
               if errors or warnings else Note("every check passed", "green"))
    document = {"ok": errors == 0, "errors": errors, "warnings": warnings,
                "findings": [f.to_dict() for f in findings]}
    return Report(document, [rows, verdict], status=1 if errors else 0)


def _protocol_finding(uri: str, options: StorageOptions) -> Finding:
    """Whether the table's protocol lists every feature its schema and properties need (a table that
    lacks one breaks Delta's protocol: a client that does not know the feature misreads or miswrites it)."""
    try:
        snapshot = Table(uri, storage_options=options).snapshot
    except TableNotFoundError:
        return Finding(Severity.OK, "protocol", "no table at the URI yet: nothing to check")
    except DynacommitError as exc:
        return Finding(Severity.WARNING, "protocol", f"cannot read the table's protocol: {exc}")
    assert snapshot is not None  # Table() raises TableNotFoundError instead
    protocol = snapshot.protocol
    versions = f"reader {protocol.min_reader_version} / writer {protocol.min_writer_version}"
    reader, writer = missing_features(protocol, snapshot.metadata)
    missing = sorted(set(reader) | set(writer))
    if not missing:
        return Finding(Severity.OK, "protocol", f"{versions} allows every feature the schema and properties use")
    causes = "; ".join(f"{f} (for {NEEDED_BECAUSE.get(f, 'the schema')}"
                       f"{', readers and writers' if f in reader else ', writers'})" for f in missing)
    settings = ", ".join(f"'delta.feature.{f}' = 'supported'" for f in missing)
    return Finding(
        Severity.ERROR, "protocol",
        f"the table uses features its protocol ({versions}) does not list: {causes}; clients that do not know "
        f"them can misread or corrupt it. Add them to the protocol before any other write, e.g. with "
        f"delta-spark: ALTER TABLE delta.`{snapshot.table_path}` SET TBLPROPERTIES ({settings})")


# --- reading a table ---------------------------------------------------------------------------------


@command("show", "version, schema, partitioning, files and last checkpoint of a table",
         arg("uri"), arg("--version", type=non_negative_int, metavar="N", help="show this version (time travel)"))
def _show(args: argparse.Namespace, options: StorageOptions) -> Report:
    table = Table(args.uri, version=args.version, storage_options=options)
    snapshot = table.snapshot
    assert snapshot is not None  # Table() raises TableNotFoundError instead
    hint = read_last_checkpoint(table.log_store)
    files = snapshot.state.files
    total = files.total("size")
    document = {
        "uri": table.uri.table_path,
        "version": snapshot.version,
        "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in snapshot.schema],
        "partitionColumns": snapshot.partition_columns,
        "numFiles": len(files),
        "sizeBytes": total,
        "configuration": snapshot.configuration,
        "lastCheckpoint": None if hint is None else hint.model_dump(by_alias=True, exclude_none=True),
    }
    fields = Fields([
        ("table", table.uri.table_path),
        ("version", str(snapshot.version)),
        ("partition columns", ", ".join(snapshot.partition_columns) or "(none)"),
        ("files", str(len(files))),
        ("total size", _size(total)),
        ("last checkpoint", describe(hint)),
        ("configuration", ", ".join(f"{k}={v}" for k, v in sorted(snapshot.configuration.items())) or "(none)"),
    ])
    partitions = set(snapshot.partition_columns)
    schema = Rows([Column("column"), Column("type"), Column("nullable"), Column("partition")],
                  [[f.name, str(f.type), _yes(f.nullable), _yes(f.name in partitions)] for f in snapshot.schema],
                  title="schema")
    return Report(document, [fields, schema])


_SHOWN_METRICS = (
    "numOutputRows", "numDeletedRows", "numUpdatedRows", "numCopiedRows", "numTargetRowsInserted",
    "numTargetRowsUpdated", "numTargetRowsDeleted", "numTargetRowsCopied", "numFiles", "numAddedFiles",
    "numRemovedFiles", "numTargetFilesAdded", "numTargetFilesRemoved", "numAddedChangeFiles",
    "numTargetChangeFilesAdded",
)
"""The metrics ``history`` shows in its table (``--json`` gives every metric); those a commit lacks are skipped."""
_FOLD = 30
"""Width at which ``history`` folds parameters and metrics: a row of a MERGE fits 120 columns."""


@command("history", "the table's commits, newest first, with their operations, attempts and row and file counts",
         arg("uri"), arg("--limit", type=non_negative_int, metavar="N", help="at most this many commits"))
def _history(args: argparse.Namespace, options: StorageOptions) -> Report:
    entries = Table(args.uri, storage_options=options).history(limit=args.limit)
    rows = Rows([Column("version", right=True), Column("timestamp"), Column("operation"), Column("attempts"),
                 Column("parameters", width=_FOLD), Column("metrics", width=_FOLD)],
                [[str(e.version), _instant(e.timestamp), e.operation or "(no commitInfo)", _attempts(e),
                  ", ".join([*(f"{k}={v}" for k, v in e.operation_parameters.items()),
                             *(f"txn={k}@{v}" for k, v in e.app_txns.items())]),
                  ", ".join(f"{k}={e.operation_metrics[k]}" for k in _SHOWN_METRICS
                            if k in (e.operation_metrics or {}))] for e in entries])
    return Report([e.to_dict() for e in entries], [rows], json_lines=True)


def _attempts(entry) -> str:
    """``numAttempts``, with the re-plans they include: ``2 (1 re-plan)``; empty when not recorded."""
    metrics = entry.operation_metrics or {}
    attempts, replans = metrics.get("numAttempts"), metrics.get("numReplans")
    if attempts is None:
        return ""
    if replans in (None, "0"):
        return str(attempts)
    return f"{attempts} ({replans} re-plan{'' if replans == '1' else 's'})"


def _instant(ms: int | None) -> str:
    if ms is None:
        return "unknown time"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- changing rows -----------------------------------------------------------------------------------


@command("delete", "delete the rows a SQL predicate selects, in one commit (dry run by default)",
         arg("uri"),
         arg("--where", required=True, metavar="PREDICATE",
             help="SQL over the table's columns, e.g. \"day < '2024-01-01'\" (\"true\" deletes every row)"),
         changes="delete the rows")
def _delete(args: argparse.Namespace, options: StorageOptions) -> Report:
    table = Table(args.uri, storage_options=options)
    if not args.execute:
        snapshot = table.snapshot
        assert snapshot is not None  # Table() raises TableNotFoundError instead
        plan = plan_delete(table, snapshot, args.where)
        rows = Rows([Column("file"), Column("how"), Column("rows deleted", right=True)],
                    [[f.path, "removed whole (partition values decide)", "?" if scan_count([f]) is None
                      else str(scan_count([f]))] for f in plan.removed_whole]
                    + [[f.path, "rewritten without them", str(n)] for f, n in plan.touched])
        rows_deleted = plan.deleted_rows
        document = {"table": table.uri.table_path, "version": plan.version, "predicate": args.where, "dryRun": True,
                    "filesRemovedWhole": [f.path for f in plan.removed_whole],
                    "filesRewritten": {f.path: n for f, n in plan.touched}, "rowsDeleted": rows_deleted}
        summary = (f"would delete {'an unknown number of' if rows_deleted is None else rows_deleted} row(s) from "
                   f"{len(plan.files)} file(s) at version {plan.version}")
        return Report(document, [rows, Note(summary, "bold"), dry_run_note("delete them", would=bool(plan.files))])
    before = table.version
    result = table.delete(args.where)
    committed = result.version > before
    document = {"table": table.uri.table_path, "version": result.version, "predicate": args.where, "dryRun": False,
                "committed": committed, "metrics": dict(result.metrics)}
    deleted = result.metrics.get("numDeletedRows", "?")
    verdict = (f"deleted {deleted} row(s): version {result.version}" if committed
               else f"no row matched: nothing committed (the table stays at version {result.version})")
    fields = Fields([(k, result.metrics[k]) for k in ("numDeletedRows", "numCopiedRows", "numRemovedFiles",
                                                      "numAddedFiles", "numAddedChangeFiles", "executionTimeMs")
                     if k in result.metrics])
    return Report(document, [fields, Note(verdict, "bold")])


@command("restore", "make the newest version hold what an earlier version held, in one commit (dry run by default)",
         arg("uri"),
         arg("--version", type=non_negative_int, metavar="N", default=None, help="the version to restore"),
         arg("--timestamp", metavar="WHEN", default=None,
             help="or the version the table was at this moment (ISO-8601, e.g. 2026-11-22T08:00:00Z)"),
         arg("--ignore-missing-files", action="store_true",
             help="restore without the files of that version that VACUUM has deleted since"),
         changes="commit the restore")
def _restore(args: argparse.Namespace, options: StorageOptions) -> Report:
    if (args.version is None) == (args.timestamp is None):
        raise InvalidArgumentError("give --version N or --timestamp WHEN (one of them): the version to restore")
    target = args.version if args.version is not None else args.timestamp
    table = Table(args.uri, storage_options=options)
    if not args.execute:
        snapshot = table.snapshot
        assert snapshot is not None  # Table() raises TableNotFoundError instead
        plan = plan_restore(table, snapshot, target, ignore_missing_files=args.ignore_missing_files)
        changes = bool(plan.restored or plan.removed or plan.metadata_changed or plan.protocol is not None)
        document = {"table": table.uri.table_path, "dryRun": True, **plan.to_dict()}
        fields = Fields([("table", table.uri.table_path), ("version", str(plan.version)),
                         ("restore to", f"version {plan.target_version}"),
                         ("files added back", str(len(plan.restored))), ("files removed", str(len(plan.removed))),
                         ("missing files left out", str(len(plan.missing))),
                         ("schema and properties", "as then" if plan.metadata_changed else "unchanged")])
        summary = (f"would restore version {plan.target_version} at version {plan.version + 1}" if changes
                   else f"version {plan.version} already holds what version {plan.target_version} held")
        return Report(document, [fields, Note(summary, "bold"), dry_run_note("restore it", would=changes)])
    before = table.version
    result = table.restore(target, ignore_missing_files=args.ignore_missing_files)
    committed = result.version > before
    document = {"table": table.uri.table_path, "version": result.version, "dryRun": False, "committed": committed,
                "metrics": dict(result.metrics)}
    fields = Fields([(k, result.metrics[k]) for k in ("numRestoredFiles", "numRemovedFiles", "numOfFilesAfterRestore",
                                                      "tableSizeAfterRestore") if k in result.metrics])
    verdict = (f"restored: version {result.version}" if committed
               else f"nothing to restore: the table stays at version {result.version}")
    return Report(document, [fields, Note(verdict, "bold")])


# --- repairing and maintaining a table ---------------------------------------------------------------


@command("recover", "finish (or, when its content is lost, abandon) every commit whose writer died after winning "
                    "its version, then delete orphan commit temp files (dry run by default)",
         arg("uri"),
         arg("--version", type=non_negative_int, metavar="N",
             help="only this version (default: every incomplete entry of the table)"),
         arg("--temp-age-hours", type=hours, metavar="HOURS", default=DEFAULT_SWEEP_AGE_SECONDS / 3600,
             help=f"delete orphan temp files older than this (default {DEFAULT_SWEEP_AGE_SECONDS / 3600:g})"),
         changes="finish the commits and delete the orphan temp files", acted_by_default=True)
def _recover(args: argparse.Namespace, options: StorageOptions) -> Report:
    store = open_log_store(args.uri, storage_options=options)
    if args.execute:
        done = store.recover_all() if args.version is None else [(args.version, store.recover(args.version))]
        entries = [{"version": v, "outcome": o.name, "description": o.description} for v, o in done]
        rows = [[str(v), Cell(o.name, "bold"), o.description] for v, o in done]
    else:
        planned = plan_recovery(store, args.version)
        entries = [{**p.to_dict(), "description": p.outcome.description} for p in planned]
        rows = [[str(p.version), Cell(p.outcome.name, "bold"), f"would {p.action}"] for p in planned]
    swept = store.sweep_temp_files(older_than_seconds=args.temp_age_hours * 3600, dry_run=not args.execute)
    document = {"table": store.table_path, "version": args.version, "dryRun": not args.execute, "entries": entries,
                "tempFiles": {"deleted": list(swept.deleted), "inUse": list(swept.in_use),
                              "tooYoung": list(swept.too_young), "dryRun": swept.dry_run}}
    if args.version is not None:
        document.update(outcome=entries[0]["outcome"], description=entries[0]["description"])
    fields = Fields([
        ("table", store.table_path),
        ("entries", f"every incomplete entry ({len(entries)} found)" if args.version is None
         else f"version {args.version}"),
        ("temp files", str(swept)),
    ])
    blocks = [fields, Rows([Column("version", right=True), Column("outcome"), Column("meaning")], rows,
                           title="entries")]
    if not args.execute:
        would = any(e["outcome"] not in ("ALREADY_COMPLETE", "NOTHING_TO_RECOVER") for e in entries)
        blocks.append(dry_run_note("do it", would=would or bool(swept.deleted)))
    return Report(document, blocks)


@command("checkpoint", "write a checkpoint of the newest version (dry run by default)", arg("uri"),
         changes="write the checkpoint", acted_by_default=True)
def _checkpoint(args: argparse.Namespace, options: StorageOptions) -> Report:
    table = Table(args.uri, storage_options=options)
    snapshot = table.snapshot
    assert snapshot is not None  # Table() raises TableNotFoundError instead
    if not args.execute:
        hint = read_last_checkpoint(table.log_store)
        document = {"table": table.uri.table_path, "dryRun": True, "version": snapshot.version,
                    "dataFiles": len(snapshot.state.files),
                    "lastCheckpoint": None if hint is None else hint.model_dump(by_alias=True, exclude_none=True)}
        fields = Fields([("table", table.uri.table_path), ("version", str(snapshot.version)),
                         ("data files", str(len(snapshot.state.files))), ("last checkpoint", describe(hint))])
        return Report(document, [Note(f"would write a checkpoint of version {snapshot.version}"), fields,
                                 dry_run_note("write it")])
    hint = write_checkpoint(table.log_store, snapshot)
    document = {"table": table.uri.table_path, "dryRun": False,
                "checkpoint": hint.model_dump(by_alias=True, exclude_none=True)}
    fields = Fields([
        ("table", table.uri.table_path),
        ("checkpoint", describe(hint)),
        ("data files", "unknown" if hint.num_of_add_files is None else str(hint.num_of_add_files)),
    ])
    return Report(document, [Note("wrote a checkpoint"), fields])


@command("vacuum", "delete data files no version within the retention needs (dry run by default)",
         arg("uri"),
         arg("--retention-hours", type=hours, metavar="HOURS", default=None,
             help=f"keep files removed less than this long ago (default: the table's "
                  f"delta.deletedFileRetentionDuration, {MIN_RETENTION_HOURS:g} h unless set)"),
         arg("--force", action="store_true", help="allow a retention below the table's"),
         arg("--spark", action="store_true",
             help="list and delete in Spark tasks (a local session, or the cluster of --master); needs pyspark"),
         arg("--master", metavar="URL", default=None,
             help="with --spark: the Spark master to run on (spark://host:port); default a local session"),
         changes="delete the files")
def _vacuum(args: argparse.Namespace, options: StorageOptions) -> Report:
    table = Table(args.uri, storage_options=options)
    _check_master(args, "VACUUM")
    if args.spark:
        report = _spark_layer("vacuum", "vacuum").vacuum_from_cli(
            table, master=args.master, retention_hours=args.retention_hours, dry_run=not args.execute,
            force=args.force)
    else:
        report = vacuum(table, retention_hours=args.retention_hours, dry_run=not args.execute, force=args.force)
    verb = "would delete" if report.dry_run else "deleted"
    fields = Fields([("table", report.table), ("version", str(report.version)),
                     ("retention", f"{report.retention_hours:g} h")])
    rows = Rows([Column("file"), Column("size", right=True), Column("last modified")],
                [[f.path, str(f.size), _when(f.last_modified_ms)] for f in report.deleted])
    blocks = [fields, rows,
              Note(f"{verb} {report.count} file(s), {report.bytes} bytes; kept {report.kept_unreferenced} "
                   f"unreferenced file(s) newer than the retention", "bold")]
    if report.dry_run:
        blocks.append(dry_run_note("delete them", would=bool(report.count)))
    return Report(report.to_dict(), blocks)


@command("optimize", "compact small files into bigger ones, in one commit that changes no data (dry run by default)",
         arg("uri"),
         arg("--target-size", type=positive_bytes, metavar="BYTES", default=None,
             help=f"size the new files aim at (default: the table's delta.targetFileSize, else "
                  f"{DEFAULT_TARGET_SIZE // (1024 * 1024)} MiB)"),
         arg("--partition", action="append", default=[], metavar="COLUMN=VALUE",
             help="only this partition (repeatable, one per partition column)"),
         arg("--zorder-by", metavar="COLUMNS", default=None,
             help="Z-order every file of each partition by these data columns (comma-separated)"),
         arg("--full", action="store_true",
             help="on a clustered table: recluster the files already clustered here too (after the clustering "
                  "columns changed), not only the new ones"),
         arg("--spark", action="store_true",
             help="rewrite the bins as Spark tasks (a local session, or the cluster of --master); needs pyspark"),
         arg("--master", metavar="URL", default=None,
             help="with --spark: the Spark master to run on (spark://host:port); default a local session"),
         changes="rewrite the files and commit", acted_by_default=True)
def _optimize(args: argparse.Namespace, options: StorageOptions) -> Report:
    table = Table(args.uri, storage_options=options)
    partition = dict(pair.partition("=")[::2] for pair in args.partition) if args.partition else None
    if args.partition and any("=" not in pair for pair in args.partition):
        raise InvalidArgumentError(f"--partition expects COLUMN=VALUE, got {args.partition!r}")
    z_order = None if args.zorder_by is None else [c.strip() for c in args.zorder_by.split(",")]
    _check_master(args, "OPTIMIZE")
    if args.spark and args.execute:
        report = _spark_layer("optimize", "optimize").optimize_from_cli(
            table, master=args.master, target_size=args.target_size, partition=partition, z_order=z_order,
            full=args.full)
    else:  # a dry run only plans, in this process
        report = optimize(table, target_size=args.target_size, partition=partition, dry_run=not args.execute,
                          z_order=z_order, full=args.full)
    rows = Rows([Column("partition"), Column("files", right=True), Column("bytes", right=True)],
                [[", ".join(f"{k}={v}" for k, v in b.partition_values.items()) or "(table)", str(len(b.files)),
                  str(b.size)] for b in report.bins])
    blocks = [Fields([("table", report.table), ("version", str(report.version)),
                      ("target size", _size(report.target_size))]), rows, Note(str(report), "bold")]
    if report.dry_run:
        blocks.append(dry_run_note("rewrite them", would=bool(report.bins)))
    return Report(report.to_dict(), blocks)


def _check_master(args: argparse.Namespace, operation: str) -> None:
    if args.master is not None and not args.spark:
        raise InvalidArgumentError(f"--master runs {operation} on a Spark cluster: give --spark with it")


def _spark_layer(module: str, operation: str) -> ModuleType:
    """``spark_integration.<module>``, loaded only for ``--spark``: the table layer never depends on the
    Spark layer, and the commands work without pyspark installed."""
    try:
        return importlib.import_module(f"spark_integration.{module}")
    except ImportError as exc:
        raise InvalidArgumentError(f"--spark needs pyspark, which cannot be imported ({exc}); install "
                                   f"dynacommit[spark], or leave out --spark to {operation} in this process") from None


@command("uploads list", "list pending uploads under the table",
         arg("uri"),
         arg("--older-than-hours", type=hours, metavar="HOURS", default=0.0,
             help="only those started at least this long ago"))
def _uploads_list(args: argparse.Namespace, options: StorageOptions) -> Report:
    table = Table(args.uri, storage_options=options)
    uploads = list_pending_uploads(table, older_than_hours=args.older_than_hours)
    age = f" older than {args.older_than_hours:g} h" if args.older_than_hours else ""
    document = {"table": table.uri.table_path, "olderThanHours": args.older_than_hours, "count": len(uploads),
                "uploads": [upload_to_dict(u) for u in uploads]}
    return Report(document, [_upload_rows(uploads),
                             Note(f"{len(uploads)} pending upload(s){age} under {table.uri.table_path}")])


@command("uploads abort", "abort old pending uploads (dry run by default)",
         arg("uri"),
         arg("--older-than-hours", type=hours, metavar="HOURS", default=24.0,
             help="only those started at least this long ago (default 24)"),
         changes="abort the uploads")
def _uploads_abort(args: argparse.Namespace, options: StorageOptions) -> Report:
    table = Table(args.uri, storage_options=options)
    report: AbortReport = abort_pending_uploads(table, older_than_hours=args.older_than_hours,
                                                dry_run=not args.execute)
    verb = "would abort" if report.dry_run else "aborted"
    blocks = [_upload_rows(report.uploads),
              Note(f"{verb} {report.count} pending upload(s) older than {report.older_than_hours:g} h under "
                   f"{report.table}; {report.remaining} younger one(s) left alone", "bold")]
    if report.dry_run:
        blocks.append(dry_run_note("abort them", would=bool(report.count)))
    return Report(report.to_dict(), blocks)


@command("drop-table", "delete the DynamoDB entries of a table whose S3 files were deleted (dry run by default)",
         arg("uri"), changes="delete the entries")
def _drop_table(args: argparse.Namespace, options: StorageOptions) -> Report:
    report = drop_entries(open_log_store(args.uri, storage_options=options), dry_run=not args.execute)
    versions = [e.version for e in report.entries]
    span = f"versions {versions[0]}-{versions[-1]}" if len(versions) > 1 else f"version {versions[0]}" if versions \
        else "none"
    left = (f"{len(report.objects_left)}{' or more' if report.to_dict()['objectsLeftTruncated'] else ''} object(s) "
            f"still under the table's prefix (data files of the deleted table: no table references them; delete "
            f"them with your S3 tools)" if report.objects_left else "none (the table's S3 prefix is empty)")
    fields = Fields([("table", report.table), ("entries in", report.place),
                     ("entries", f"{len(versions)} ({span}; {report.incomplete} incomplete)"),
                     ("S3 files left", left)])
    rows = Rows([Column("version", right=True), Column("file name"), Column("complete"), Column("temp path")],
                [[str(e.version), e.file_name, _yes(e.complete), e.temp_path] for e in report.entries])
    if report.dry_run:
        return Report(report.to_dict(), [fields, rows, Note(f"would delete {len(versions)} entr"
                                                             f"{'y' if len(versions) == 1 else 'ies'}", "bold"),
                                         dry_run_note("delete them", would=bool(versions))])
    verdict = f"deleted {len(report.dropped)} entr{'y' if len(report.dropped) == 1 else 'ies'}"
    if report.changed:
        verdict += (f"; left {len(report.changed)} that changed since they were read (versions "
                    f"{', '.join(map(str, report.changed))}): a writer is using the path, run the command again")
    return Report(report.to_dict(), [fields, rows, Note(verdict, "bold")])


# --- words ------------------------------------------------------------------------------------------


def _upload_rows(uploads) -> Rows:
    return Rows([Column("initiated"), Column("key"), Column("upload id")],
                [[_when(u.initiated_ms), u.key, u.upload_id] for u in uploads])


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _when(ms: int | None) -> str:
    if ms is None:
        return "unknown time"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({n} bytes)"
        value /= 1024
    return f"{value:.1f} TiB ({n} bytes)"
