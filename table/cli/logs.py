"""Where the command's log lines go: stderr, at the level asked, credentials redacted.

- By default: WARNING and above from every logger, plus the progress lines of long operations
  (``table.progress``, INFO) when stderr is not a terminal (a terminal shows progress bars instead).
- ``--verbose``: INFO from every logger; ``--debug``: DEBUG, including botocore's log of every request.
- On a terminal the lines go through rich, on the console the progress bars use (so a line prints above
  the bars, never through them); elsewhere they are plain ``time level logger: message`` lines.
- Every handler of the root logger, ours and any that was already there, gets a
  :class:`~logstore.redaction.RedactingFilter` that also knows the configured access key, secret and
  session token.

Everything is undone when the block ends: ``main()`` may run many times in one process (tests, a program
that embeds the command).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TextIO

from logstore.redaction import RedactingFilter, install_redaction, remove_redaction
from table import progress

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["PLAIN_FORMAT", "level_for", "logging_to"]

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def level_for(*, verbose: bool, debug: bool) -> int:
    if debug:
        return logging.DEBUG
    return logging.INFO if verbose else logging.WARNING


@contextlib.contextmanager
def logging_to(stream: TextIO, *, level: int, console: Console | None, secrets: Iterable[str] = ()
               ) -> Iterator[RedactingFilter]:
    """Log to ``stream`` (through ``console`` when given: a terminal) at ``level`` inside the block."""
    root = logging.getLogger()
    progress_logger = progress.log
    handler = _handler(stream, console)
    saved_levels = root.level, progress_logger.level
    root.addHandler(handler)
    root.setLevel(level)
    if console is None and level > logging.INFO:
        progress_logger.setLevel(logging.INFO)
    redacting = install_redaction(secrets=secrets)
    try:
        yield redacting
    finally:
        remove_redaction(redacting)
        root.removeHandler(handler)
        root.setLevel(saved_levels[0])
        progress_logger.setLevel(saved_levels[1])


def _handler(stream: TextIO, console: Console | None) -> logging.Handler:
    if console is not None:
        from rich.logging import RichHandler

        # rich_tracebacks=False: a rich traceback is rendered from the exception itself, past the
        # redacted text the filter leaves in the record.
        return RichHandler(console=console, show_path=False, rich_tracebacks=False, markup=False)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    return handler
