"""How the commands print: tables that read well on a terminal and in a pipe, and `--output json`.

On a terminal rich draws its boxed tables at the terminal's width. Anywhere else (a pipe, a CI
log, `| less`) rich would assume 80 columns and fold every cell to a few words per line; there
the tables are plain text instead: one line per row, aligned columns, no box, like
`kubectl get`. ``--output json`` (alias ``--json``) prints one JSON document on
stdout instead of the table.
"""

from __future__ import annotations

import argparse
from typing import Mapping, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

# Width for text that is not a terminal and not a table (tables there are plain_table, which
# never wraps): long enough that a sentence stays on one line.
PIPE_WIDTH = 400


def make_console(width: int | None = None, *, stderr: bool = False,
                 min_width: int = 0) -> Console:
    """A console for tables: ``width`` when given (tests, --width), the terminal's own width
    (at least ``min_width``) on a terminal, else PIPE_WIDTH."""
    if width:
        return Console(width=width, stderr=stderr)
    console = Console(stderr=stderr)
    if not console.is_terminal:
        return Console(width=PIPE_WIDTH, stderr=stderr)
    if console.width < min_width:
        return Console(width=min_width, stderr=stderr)
    return console


def plain_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Aligned columns, one line per row, no box and no trailing spaces (like `kubectl get`)."""
    widths = [max([len(columns[i])] + [len(r[i]) for r in rows]) for i in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    lines = ([title] if title else []) + [line([c.upper() for c in columns])]
    return "\n".join(lines + [line(r) for r in rows])


def print_table(console: Console, title: str | None, columns: Sequence[str],
                rows: Sequence[Sequence[str]], styles: Mapping[str, str] | None = None) -> None:
    """A boxed rich table on a terminal (``styles`` colours a first cell by its text), else
    ``plain_table``. Cells are plain text, never markup."""
    if not console.is_terminal:
        console.print(plain_table(title, columns, rows), markup=False, highlight=False,
                      soft_wrap=True)
        return
    table = Table(title=escape(title) if title else None)
    for col in columns:
        table.add_column(escape(col), overflow="fold")
    for row in rows:
        cells = [escape(c) for c in row]
        style = (styles or {}).get(row[0])
        if style:
            cells[0] = f"[{style}]{cells[0]}[/]"
        table.add_row(*cells)
    console.print(table)


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """--output/-o text|json, and --json as its alias."""
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text",
                        help="text (a table; plain columns when not a terminal) or json")
    parser.add_argument("--json", dest="output", action="store_const", const="json",
                        help="same as --output json")


def wants_json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "text") == "json"
