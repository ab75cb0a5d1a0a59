"""The command line's grammar: commands declared as data, the parser built from them, values checked.

A command is a :class:`Command`: its name (two words for a group: ``"uploads list"``), a help line, the
function that runs it and its arguments (:func:`arg`, the arguments of ``add_argument``). Every command
also takes the common flags: ``--option KEY=VALUE`` (repeatable), ``--json``, ``--verbose``/``-v`` and
``--debug``; the last three may also come before the command.

A command that changes a table, its files or DynamoDB declares what it does (``changes``, e.g. "delete
the files") and gets the same two flags as every other such command: ``--execute`` to act, and
``--dry-run``, the default, to only report; never both. ``args.execute`` says which was asked; a dry run
runs inside :func:`logstore.readonly.read_only`, so it cannot change anything whatever path it takes.

Values are checked while parsing, so a bad one is a usage error (exit status 2, ``argument --limit: ...``
on stderr, no traceback): whole numbers are >= 0, hours are finite and from 0 to 100 years.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from logstore import StorageOptions
from table.cli.render import Report
from table.maintenance import MAX_HOURS

__all__ = ["Arg", "Command", "arg", "build_parser", "hours", "key_value", "non_negative_int"]


@dataclasses.dataclass(frozen=True)
class Arg:
    flags: tuple[str, ...]
    options: Mapping[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    """An argument of a command, as ``argparse.ArgumentParser.add_argument(*flags, **options)`` takes it."""
    return Arg(flags, options)


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    help: str
    run: Callable[[argparse.Namespace, StorageOptions], Report]
    args: Sequence[Arg] = ()
    changes: str | None = None
    """What ``--execute`` does (``"delete the files"``); None for a command that only reads."""
    acted_by_default: bool = False
    """Whether the command acted without ``--execute`` before it became a dry run by default: without either
    flag it then warns that nothing was changed, for scripts written before."""

    @property
    def flags(self) -> set[str]:
        """Every ``--flag`` of the command but the common ones."""
        own = {f for a in self.args for f in a.flags if f.startswith("--")}
        return own | ({"--execute", "--dry-run"} if self.changes else set())


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


_SIZE = re.compile(r"^(\d+)\s*(?:([kmg])(?:i?b)?)?$", re.IGNORECASE)
_UNIT_BYTES = {None: 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def positive_bytes(text: str) -> int:
    """A size in bytes, optionally with a binary unit: ``134217728``, ``128MiB``, ``128m``, ``1GiB``."""
    found = _SIZE.match(text.strip())
    if found is None or int(found.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a size in bytes > 0 such as 134217728 or 128MiB, got {text!r}")
    unit = found.group(2).lower() if found.group(2) else None
    return int(found.group(1)) * _UNIT_BYTES[unit]


def hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of hours, got {text!r}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_HOURS:
        raise argparse.ArgumentTypeError(f"expected a number of hours from 0 to {MAX_HOURS:g} (100 years), "
                                         f"got {text!r}")
    return value


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _global_flags(parser: argparse.ArgumentParser, *, default: Any) -> None:
    # On the main parser and on every command; the command's copy defaults to SUPPRESS so that a flag
    # given before the command is not reset by the command's parser.
    parser.add_argument("--json", action="store_true", default=default,
                        help="print JSON for machines (history: one JSON object per line)")
    parser.add_argument("-v", "--verbose", action="store_true", default=default,
                        help="log at INFO (dynacommit and boto3) on stderr")
    parser.add_argument("--debug", action="store_true", default=default,
                        help="log at DEBUG, including every AWS request (credentials redacted), and print the "
                             "traceback of an error")


def build_parser(commands: Sequence[Command], groups: Mapping[str, str], *, description: str
                 ) -> argparse.ArgumentParser:
    """The parser of ``commands``; ``groups`` gives the help line of each group of two-word commands.
    ``parse_args`` sets ``command`` to the :class:`Command` chosen and ``option`` to a list of pairs."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--option", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="storage option (repeatable), e.g. AWS_REGION=eu-west-1; overrides the environment")
    _global_flags(common, default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="dynacommit", description=description)
    _global_flags(parser, default=False)
    top = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")
    group_parsers: dict[str, argparse._SubParsersAction] = {}
    for command in commands:
        words = command.name.split()
        within = top
        if len(words) == 2:
            if words[0] not in group_parsers:
                group = top.add_parser(words[0], help=groups[words[0]], description=groups[words[0]])
                group_parsers[words[0]] = group.add_subparsers(dest=f"{words[0]}_command", required=True,
                                                               metavar="ACTION")
            within = group_parsers[words[0]]
        sub = within.add_parser(words[-1], parents=[common], help=command.help, description=command.help)
        sub.set_defaults(command=command, execute=False, dry_run=False)
        for argument in command.args:
            sub.add_argument(*argument.flags, **argument.options)
        if command.changes:
            mode = sub.add_mutually_exclusive_group()
            mode.add_argument("--execute", action="store_true", help=f"{command.changes} (default: a dry run)")
            mode.add_argument("--dry-run", action="store_true",
                              help="only report what --execute would do, changing nothing (the default)")
    return parser
