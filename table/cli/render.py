"""What a command prints: a :class:`Report` of data, rendered three ways.

A command returns a :class:`Report`: its JSON ``document`` and the same facts as display ``blocks``
(:class:`Fields` for ``name  value`` pairs, :class:`Rows` for a table, :class:`Note` for a sentence). The
renderers never look at the command:

- ``json`` (``--json``): the document, as one JSON document, or as JSON lines (one value per line) when
  the report says ``json_lines`` (``history``, which can be long and is read newest first);
- ``rich`` (stdout is a terminal): aligned tables with a header, colours where a cell has a style;
- ``plain`` (stdout is a file or a pipe): the same blocks as stable text for people and ``grep``: no colour,
  no control characters, no dependence on the terminal's width; columns separated by at least two spaces
  under a header line, blocks separated by a blank line. A column with a ``width`` folds longer cells onto
  continuation lines (the row's other cells blank there), so that a table of long values stays readable in a
  terminal or a pager. Scripts should read ``--json``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO, Union

__all__ = ["Cell", "Column", "Fields", "Note", "Output", "Report", "Rows", "render"]


class Output(enum.Enum):
    JSON = "json"
    RICH = "rich"
    PLAIN = "plain"


@dataclasses.dataclass(frozen=True)
class Cell:
    """A value shown with a rich style (``"red"``) on a terminal, as plain text elsewhere."""

    text: str
    style: str = ""


Value = Union[str, Cell]


@dataclasses.dataclass(frozen=True)
class Column:
    header: str
    right: bool = False
    """Right-aligned (numbers)."""
    width: int | None = None
    """Cells longer than this are folded onto more lines (at spaces where there are some)."""


@dataclasses.dataclass(frozen=True)
class Fields:
    """``name  value`` pairs, names aligned."""

    items: Sequence[tuple[str, Value]]


@dataclasses.dataclass(frozen=True)
class Rows:
    """A table: a header and rows of cells. Not shown at all when it has no rows."""

    columns: Sequence[Column]
    rows: Sequence[Sequence[Value]]
    title: str = ""


@dataclasses.dataclass(frozen=True)
class Note:
    """A sentence on its own line (a summary, what to do next)."""

    text: str
    style: str = ""


Block = Union[Fields, Rows, Note]


@dataclasses.dataclass(frozen=True)
class Report:
    """What a command found or did: the JSON ``document`` and the ``blocks`` people read; ``status`` is the
    exit status."""

    document: Any
    blocks: Sequence[Block] = ()
    status: int = 0
    json_lines: bool = False


def render(report: Report, output: Output, stream: TextIO) -> None:
    """Write ``report`` to ``stream`` as ``output``."""
    if output is Output.JSON:
        _render_json(report, stream)
    elif output is Output.RICH:
        _render_rich(report, stream)
    else:
        stream.write(plain_text(report))
    stream.flush()


def _render_json(report: Report, stream: TextIO) -> None:
    values = report.document if report.json_lines else [report.document]
    for value in values:
        stream.write(json.dumps(value, default=str) + "\n")


# --- plain ------------------------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _text(value: Value) -> str:
    text = value.text if isinstance(value, Cell) else value
    return _CONTROL.sub(" ", text)


def plain_text(report: Report) -> str:
    """The report as plain text (see the module docstring)."""
    lines: list[str] = []
    previous: Block | None = None
    for block in report.blocks:
        block_lines = _plain_block(block)
        if not block_lines:
            continue
        if _blank_line_between(previous, block):
            lines.append("")
        lines.extend(block_lines)
        previous = block
    return "".join(line + "\n" for line in lines)


def _blank_line_between(previous: Block | None, block: Block) -> bool:
    """Blocks are separated by a blank line, except consecutive notes."""
    return previous is not None and not (isinstance(previous, Note) and isinstance(block, Note))


def _plain_block(block: Block) -> list[str]:
    if isinstance(block, Note):
        return [_text(block.text)]
    if isinstance(block, Fields):
        width = max((len(name) for name, _ in block.items), default=0)
        return [f"{name:<{width}}  {_text(value)}".rstrip() for name, value in block.items]
    if not block.rows:
        return []
    header = [c.header for c in block.columns]
    table = [[_fold(_text(v), col.width) for v, col in zip(row, block.columns)] for row in block.rows]
    widths = [max([len(header[i]), *(len(part) for row in table for part in row[i])])
              for i in range(len(block.columns))]
    lines = [block.title] if block.title else []
    for row in [[[h] for h in header], *table]:
        for depth in range(max(len(parts) for parts in row)):
            cells = [(parts[depth] if depth < len(parts) else "") for parts in row]
            cells = [cell.rjust(w) if col.right else cell.ljust(w) for cell, w, col in zip(cells, widths, block.columns)]
            lines.append("  ".join(cells).rstrip())
    return lines


def _fold(text: str, width: int | None) -> list[str]:
    """``text`` as the lines of a cell at most ``width`` wide (one line when no width is set)."""
    if width is None or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_on_hyphens=False) or [text]


# --- rich -------------------------------------------------------------------------------------------


def _render_rich(report: Report, stream: TextIO) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def text(value: Value) -> Text:
        # Text, not markup: data such as "[ok]" or "[mode=Append]" must print as it is.
        return Text(value.text, style=value.style) if isinstance(value, Cell) else Text(value)

    console = Console(file=stream, highlight=False, markup=False, emoji=False)
    previous: Block | None = None
    for block in report.blocks:
        if isinstance(block, Rows) and not block.rows:
            continue
        if _blank_line_between(previous, block):
            console.print()
        previous = block
        if isinstance(block, Note):
            console.print(Text(block.text, style=block.style))
        elif isinstance(block, Fields):
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold")
            grid.add_column()
            for name, value in block.items:
                grid.add_row(Text(name), text(value))
            console.print(grid)
        else:
            table = Table(title=block.title or None, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, header_style="bold",
                          pad_edge=False)
            for column in block.columns:
                table.add_column(column.header, justify="right" if column.right else "left", overflow="fold",
                                 max_width=column.width)
            for row in block.rows:
                table.add_row(*(text(v) for v in row))
            console.print(table)
