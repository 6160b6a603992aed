"""How the commands print: tables that read well on a terminal and in a pipe, and `--output json`.

On a terminal rich draws its boxed tables at the terminal's width. Anywhere else (a pipe, a CI
log, `| less`) rich would assume 80 columns and fold every cell to a few words per line; there
the tables are plain text instead: one line per row, aligned columns, no box, like
`kubectl get`. A table too wide for the terminal drops its least important columns first
(``fit_columns``). ``-o json`` (alias ``--json``) or ``-o yaml`` prints one document on stdout
instead (``emit``); its shape per command is listed in docs/cli.md.

A closed stdout (``rlkit ... | head``) is not an error: ``StdoutGuard`` swallows the broken pipe,
the command finishes its work (files are still written), and the exit status is 141, what a shell
reports for a process killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import sys
from typing import Any, Mapping, Sequence

import yaml

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


def plain_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[str]],
                upper: bool = True) -> str:
    """Aligned columns, one line per row, no box and no trailing spaces (like `kubectl get`);
    headers upper-cased unless ``upper`` is False (headers with units: GiB, $/M tok)."""
    widths = [max([len(columns[i])] + [len(r[i]) for r in rows]) for i in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    lines = ([title] if title else []) + [line([c.upper() if upper else c for c in columns])]
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


def fit_columns(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int,
                drop_order: Sequence[str], overhead: int = 3) -> list[int]:
    """Indices of the columns to show so that the table fits ``width`` characters: the columns
    named in ``drop_order`` go first, in that order, until it fits (the others always stay;
    rich folds what still does not fit). ``overhead``: characters per column for padding and
    borders."""
    keep = list(range(len(columns)))

    def needed() -> int:
        return 1 + sum(overhead + max([len(columns[i])] + [len(r[i]) for r in rows])
                       for i in keep)

    for name in drop_order:
        if needed() <= width:
            break
        if name in columns and columns.index(name) in keep and len(keep) > 1:
            keep.remove(columns.index(name))
    return keep


def print_fitted_table(console: Console, columns: Sequence[str], rows: Sequence[Sequence[str]],
                       drop_order: Sequence[str], right: Sequence[str] = ()) -> list[str]:
    """A table at the console's width: on a terminal, a rich table without the columns that do
    not fit (``drop_order``, least important first); elsewhere every column, plain. Returns the
    names of the dropped columns (the caller says so)."""
    if not console.is_terminal:
        console.print(plain_table(None, columns, rows, upper=False), markup=False,
                      highlight=False, soft_wrap=True)
        return []
    keep = fit_columns(columns, rows, console.width, drop_order)
    table = Table()
    for i in keep:
        table.add_column(escape(columns[i]), justify="right" if columns[i] in right else "left",
                         overflow="fold")
    for row in rows:
        table.add_row(*(escape(row[i]) for i in keep))
    console.print(table)
    return [c for i, c in enumerate(columns) if i not in keep]


# --- structured output ----------------------------------------------------------------------------

FORMATS = ("text", "json", "yaml")


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """--output/-o text|json|yaml, and --json as an alias of -o json."""
    parser.add_argument("-o", "--output", choices=FORMATS, default="text",
                        help="text (a table; plain columns when not a terminal), json or yaml: one "
                        "document with the shape docs/cli.md lists")
    parser.add_argument("--json", dest="output", action="store_const", const="json",
                        help="same as --output json")


def wants_json(args: argparse.Namespace) -> bool:
    """True when the command prints one document (-o json or -o yaml) instead of text."""
    return getattr(args, "output", "text") in ("json", "yaml")


def emit(args: argparse.Namespace, doc: Any) -> None:
    """Print ``doc`` as the one document of -o json / -o yaml on stdout."""
    if getattr(args, "output", "json") == "yaml":
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    else:
        print(json.dumps(doc, indent=2))


# --- a closed pipe ---------------------------------------------------------------------------------

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell shows for `yes | head`


class StdoutGuard(io.TextIOBase):
    """Wraps stdout: once the reader is gone (EPIPE), further output is dropped silently, so the
    command completes (and writes its files); ``closed_early`` tells the entry point to exit 141."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.closed_early = False

    def _guard(self, call: Any, *a: Any) -> Any:
        if self.closed_early:
            return None
        try:
            return call(*a)
        except BrokenPipeError:
            self._closed()
        except OSError as err:
            if err.errno != errno.EPIPE:
                raise
            self._closed()
        return None

    def _closed(self) -> None:
        self.closed_early = True
        try:  # the interpreter's own flush at exit must not fail on the dead pipe either
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass

    def write(self, text: str) -> int:
        self._guard(self.stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guard(self.stream.flush)

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")

    def writable(self) -> bool:
        return True
