"""The ``dynacommit`` command: set up the DynamoDB table, inspect and maintain tables.

Storage options come from the environment (the same keys as ``storage_options``: ``AWS_REGION``,
``AWS_ENDPOINT_URL``, ``DELTA_DYNAMO_TABLE_NAME`` ...) and from ``--option KEY=VALUE``, which wins.
Every command that changes a table, its files or DynamoDB is a dry run unless given ``--execute``:
``--dry-run`` (the default) only reports what it would do, and sends no request that changes anything
(:mod:`logstore.readonly`).

Output (stdout): aligned tables on a terminal, plain stable text otherwise, JSON with ``--json`` (one
document per command; ``history`` prints JSON lines, one commit per line). Progress bars and log lines
go to stderr, credentials redacted (:mod:`table.cli.logs`).

Exit status:

- 0: done;
- 1: ``doctor`` found an error in the setup;
- 2: a usage error (argparse's message), or a dynacommit error: ``error: <message>`` on stderr, no
  traceback (with ``--debug``, the traceback first);
- 3: an unexpected error: ``error: unexpected <type>: <message> (run with --debug for the traceback)``;
- 130: interrupted (Ctrl-C).

Layout: :mod:`~table.cli.args` (grammar), :mod:`~table.cli.commands` (one function per command, returning
a report), :mod:`~table.cli.render` (report to table, text or JSON), :mod:`~table.cli.logs` (logging),
:mod:`~table.cli.progressbar` (progress on a terminal).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import TextIO

from logstore import StorageOptions, readonly
from logstore.errors import DynacommitError
from logstore.redaction import redact
from table import progress
from table.cli.args import build_parser
from table.cli.commands import COMMANDS, GROUPS
from table.cli.logs import level_for, logging_to
from table.cli.render import Output, Report, render

__all__ = ["EXIT_ERROR", "EXIT_FINDINGS", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNEXPECTED", "main"]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_UNEXPECTED = 3
EXIT_INTERRUPTED = 130

log = logging.getLogger("table.cli")

_DESCRIPTION = "Set up the DynamoDB commit table; inspect and maintain dynacommit tables."


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    stdout, stderr = sys.stdout, sys.stderr
    try:
        args = build_parser(COMMANDS, GROUPS, description=_DESCRIPTION).parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on usage errors (2)
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    secrets: tuple[str, ...] = ()
    try:
        options = StorageOptions.resolve(dict(args.option))
        secrets = tuple(s for s in (options.access_key_id, options.secret_access_key, options.session_token) if s)
        report = _run(args, options, stderr, secrets)
    except DynacommitError as exc:
        return _fail(stderr, f"error: {exc}", EXIT_ERROR, debug=args.debug, secrets=secrets)
    except KeyboardInterrupt:
        return _fail(stderr, "interrupted", EXIT_INTERRUPTED, debug=False, secrets=secrets)
    except Exception as exc:
        hint = "" if args.debug else " (run with --debug for the traceback)"
        message = " ".join(str(exc).split())
        return _fail(stderr, f"error: unexpected {type(exc).__name__}: {message}{hint}", EXIT_UNEXPECTED,
                     debug=args.debug, secrets=secrets)
    return _print(report, Output.JSON if args.json else Output.RICH if stdout.isatty() else Output.PLAIN, stdout)


def _run(args: argparse.Namespace, options: StorageOptions, stderr: TextIO, secrets: Sequence[str]) -> Report:
    console = _console(stderr)
    level = level_for(verbose=args.verbose, debug=args.debug)
    command = args.command
    with logging_to(stderr, level=level, console=console, secrets=secrets), _progress(console):
        if not command.changes or args.execute:
            return command.run(args, options)
        if command.acted_by_default and not args.dry_run:
            log.warning("`dynacommit %s` is a dry run unless --execute is given (it acted at once before): "
                        "nothing is changed; add --execute to %s", command.name, command.changes)
        with readonly.read_only(f"`dynacommit {command.name}` without --execute is a dry run"):
            return command.run(args, options)


def _console(stderr: TextIO):
    """A rich console on stderr when it is a terminal (progress bars, log lines), else None."""
    if not stderr.isatty():
        return None
    from rich.console import Console

    return Console(file=stderr, highlight=False, markup=False, emoji=False)


def _progress(console) -> contextlib.AbstractContextManager:
    if console is None:
        return contextlib.nullcontext()  # table.progress's default: log lines, shown by logging_to
    from table.cli.progressbar import ProgressBars

    return progress.reporting(ProgressBars(console))


def _fail(stderr: TextIO, line: str, status: int, *, debug: bool, secrets: Sequence[str]) -> int:
    if debug:
        stderr.write(redact(traceback.format_exc(), secrets))
    stderr.write(redact(line, secrets) + "\n")
    stderr.flush()
    return status


def _print(report: Report, output: Output, stdout: TextIO) -> int:
    try:
        render(report, output, stdout)
    except BrokenPipeError:
        # The reader went away (`dynacommit history ... | head`): not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
    return report.status
