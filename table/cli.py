"""The ``dynacommit`` command: set up the DynamoDB table, inspect and maintain tables.

Storage options come from the environment (the same keys as ``storage_options``: ``AWS_REGION``,
``AWS_ENDPOINT_URL``, ``DELTA_DYNAMO_TABLE_NAME`` ...) and from ``--option KEY=VALUE``, which wins.
Destructive commands (``vacuum``, ``uploads abort``) only report what they would do unless given
``--execute``. A dynacommit error (or a bad argument value) prints ``error: <message>`` on stderr and exits with
status 2, without a traceback; ``doctor``
exits with 1 when it finds an error in the setup.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

from logstore import (
    DEFAULT_EXPIRE_SECONDS,
    RecoveryOutcome,
    StorageOptions,
    TableUri,
    open_log_store,
)
from logstore.admin import Severity, create_ddb_table, doctor
from logstore.errors import DynacommitError
from table.log.checkpoint import describe, read_last_checkpoint, write_checkpoint
from table.maintenance import abort_pending_uploads, list_pending_uploads, vacuum
from table.table import Table

__all__ = ["main"]

_RECOVERY_WORDS = {
    RecoveryOutcome.NOTHING_TO_RECOVER: "nothing to recover: the DynamoDB table holds no entry for it",
    RecoveryOutcome.ALREADY_COMPLETE: "the entry was already complete",
    RecoveryOutcome.COMPLETED: "the commit file existed; marked the entry complete",
    RecoveryOutcome.COPIED_AND_COMPLETED: "wrote the commit file from its temp file and marked the entry complete",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors; report it as a status
        return int(exc.code or 0)
    try:
        options = _options(args.option)
        return args.run(args, options)
    except (DynacommitError, ValueError) as exc:  # ValueError: a bad argument value, e.g. too short a retention
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _options(pairs: Sequence[str]) -> StorageOptions:
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--option expects KEY=VALUE, got {pair!r}")
        given[key] = value
    return StorageOptions.resolve(given)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="storage option (repeatable), e.g. AWS_REGION=eu-west-1; overrides the environment")
    parser = argparse.ArgumentParser(
        prog="dynacommit", description="Set up the DynamoDB commit table; inspect and maintain dynacommit tables.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help, description=help)
        sub.set_defaults(run=run)
        return sub

    command("create-ddb-table", _create_ddb_table, "create the DynamoDB commit table (with TTL) if missing")
    sub = command("doctor", _doctor, "check the DynamoDB table, and the table at URI if given")
    sub.add_argument("uri", nargs="?")
    sub = command("show", _show, "version, schema, partitioning, files and last checkpoint of a table")
    sub.add_argument("uri")
    sub.add_argument("--version", type=_non_negative, help="show this version (time travel)")
    sub.add_argument("--json", action="store_true", help="print JSON")
    sub = command("history", _history, "the table's commits, newest first")
    sub.add_argument("uri")
    sub.add_argument("--limit", type=_non_negative, help="at most this many commits")
    sub.add_argument("--json", action="store_true", help="print JSON, one object per line")
    sub = command("recover", _recover, "finish a commit whose writer died after winning its version")
    sub.add_argument("uri")
    sub.add_argument("--version", type=_non_negative, help="the version to recover (default: the newest)")
    sub = command("checkpoint", _checkpoint, "write a checkpoint of the newest version")
    sub.add_argument("uri")
    sub = command("vacuum", _vacuum, "delete data files no version within the retention needs (dry run by default)")
    sub.add_argument("uri")
    sub.add_argument("--retention-hours", type=float, default=168.0)
    sub.add_argument("--force", action="store_true", help="allow a retention below 168 hours")
    sub.add_argument("--execute", action="store_true", help="delete (default: only report)")
    uploads = commands.add_parser("uploads", help="multipart uploads left by writers that did not commit")
    actions = uploads.add_subparsers(dest="uploads_command", required=True, metavar="ACTION")
    sub = actions.add_parser("list", parents=[common], help="list pending uploads under the table")
    sub.set_defaults(run=_uploads_list)
    sub.add_argument("uri")
    sub.add_argument("--older-than-hours", type=float, default=0.0)
    sub = actions.add_parser("abort", parents=[common], help="abort old pending uploads (dry run by default)")
    sub.set_defaults(run=_uploads_abort)
    sub.add_argument("uri")
    sub.add_argument("--older-than-hours", type=float, default=24.0)
    sub.add_argument("--execute", action="store_true", help="abort (default: only report)")
    return parser


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


# --- commands ---------------------------------------------------------------------------------------


def _create_ddb_table(args: argparse.Namespace, options: StorageOptions) -> int:
    report = create_ddb_table(options)
    print(f"DynamoDB table {report.table_name}: {'created' if report.created else 'already existed'} "
          f"(key tablePath + fileName, on-demand billing)")
    if report.ttl_enabled:
        print(f"TTL: enabled on expireTime; completed commit entries expire {DEFAULT_EXPIRE_SECONDS // 3600} "
              f"hours after completion (DynamoDB deletes expired items within a few days)")
    else:
        print("TTL: NOT enabled; completed commit entries will stay forever")
    for note in report.notes:
        print(f"note: {note}")
    return 0


def _doctor(args: argparse.Namespace, options: StorageOptions) -> int:
    uri = TableUri.parse(args.uri) if args.uri else None
    findings = doctor(options, uri)
    for finding in findings:
        print(finding)
    return 1 if any(f.severity is Severity.ERROR for f in findings) else 0


def _show(args: argparse.Namespace, options: StorageOptions) -> int:
    table = Table(args.uri, version=args.version, storage_options=options)
    snapshot = table.snapshot
    assert snapshot is not None
    hint = read_last_checkpoint(table.log_store)
    files = snapshot.files
    total = sum(f.size for f in files)
    if args.json:
        print(json.dumps({
            "uri": table.uri.table_path,
            "version": snapshot.version,
            "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in snapshot.schema],
            "partitionColumns": snapshot.partition_columns,
            "numFiles": len(files),
            "sizeBytes": total,
            "configuration": snapshot.configuration,
            "lastCheckpoint": None if hint is None else hint.model_dump(by_alias=True, exclude_none=True),
        }))
        return 0
    partitions = set(snapshot.partition_columns)
    print(f"table            {table.uri.table_path}")
    print(f"version          {snapshot.version}")
    print("schema")
    for field in snapshot.schema:
        flags = (" (partition)" if field.name in partitions else "") + ("" if field.nullable else " not null")
        print(f"  {field.name}: {field.type}{flags}")
    print(f"partition columns {', '.join(snapshot.partition_columns) or '(none)'}")
    print(f"files            {len(files)}")
    print(f"total size       {_size(total)}")
    print(f"last checkpoint  {describe(hint)}")
    return 0


def _history(args: argparse.Namespace, options: StorageOptions) -> int:
    table = Table(args.uri, storage_options=options)
    for entry in table.history(limit=args.limit):
        if args.json:
            print(json.dumps(entry.to_dict(), default=str))
            continue
        when = _when(entry.timestamp)
        params = ", ".join(f"{k}={v}" for k, v in entry.operation_parameters.items())
        apps = "".join(f" app {k}@{v}" for k, v in entry.app_txns.items())
        print(f"{entry.version:>8}  {when}  {entry.operation or '(no commitInfo)'}"
              f"{f' [{params}]' if params else ''}{apps}")
    return 0


def _recover(args: argparse.Namespace, options: StorageOptions) -> int:
    store = open_log_store(args.uri, storage_options=options)
    outcome = store.recover(args.version)
    which = "the newest entry" if args.version is None else f"version {args.version}"
    print(f"{store.table_path}, {which}: {outcome.name}: {_RECOVERY_WORDS[outcome]}")
    return 0


def _checkpoint(args: argparse.Namespace, options: StorageOptions) -> int:
    table = Table(args.uri, storage_options=options)
    assert table.snapshot is not None
    hint = write_checkpoint(table.log_store, table.snapshot)
    print(f"wrote checkpoint of {table.uri.table_path}: {describe(hint)}, {hint.num_of_add_files} files")
    return 0


def _vacuum(args: argparse.Namespace, options: StorageOptions) -> int:
    table = Table(args.uri, storage_options=options)
    print(vacuum(table, retention_hours=args.retention_hours, dry_run=not args.execute, force=args.force))
    return 0


def _uploads_list(args: argparse.Namespace, options: StorageOptions) -> int:
    table = Table(args.uri, storage_options=options)
    uploads = list_pending_uploads(table, older_than_hours=args.older_than_hours)
    for upload in uploads:
        print(f"{_when(upload.initiated_ms)}  {upload.key}  {upload.upload_id}")
    print(f"{len(uploads)} pending upload(s) under {table.uri.table_path}")
    return 0


def _uploads_abort(args: argparse.Namespace, options: StorageOptions) -> int:
    table = Table(args.uri, storage_options=options)
    print(abort_pending_uploads(table, older_than_hours=args.older_than_hours, dry_run=not args.execute))
    return 0


def _when(ms: int | None) -> str:
    if ms is None:
        return "unknown time"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: int) -> str:
    value: Any = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({n} bytes)"
        value /= 1024
    raise AssertionError("unreachable")


if __name__ == "__main__":
    raise SystemExit(main())
