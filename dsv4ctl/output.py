"""The one output layer: commands hand it data, it draws rich tables for people or JSON for scripts.

Commands never print. Human output goes to stdout, messages about failures to stderr, JSON to stdout alone.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


@lru_cache(maxsize=2)
def _console(stderr: bool = False) -> "Console":
    from rich.console import Console  # imported on first output: keeps `dsv4ctl --help` fast

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def text(message: str = "", style: str | None = None) -> None:
    _console().print(message, style=style, markup=False)


def markup(message: str) -> None:
    """Print a line that uses rich markup written by dsv4ctl itself (never user data)."""
    _console().print(message)


def raw(data: str) -> None:
    """Write text exactly as given (a rendered script): no wrapping, no markup."""
    sys.stdout.write(data)


def error(message: str, hint: str | None = None) -> None:
    _console(True).print(f"[bold red]error:[/] {escape(message)}")
    if hint:
        _console(True).print(f"[dim]hint:[/] {escape(hint)}")


def warn(message: str) -> None:
    _console(True).print(f"[yellow]warning:[/] {escape(message)}")


def escape(value: str) -> str:
    from rich.markup import escape as _escape

    return _escape(value)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          styles: Sequence[str | None] | None = None) -> None:
    from rich.table import Table

    grid = Table(title=title, title_justify="left", show_lines=False)
    for i, column in enumerate(columns):
        grid.add_column(column, style=(styles[i] if styles else None), overflow="fold")
    for row in rows:
        grid.add_row(*(escape("" if cell is None else str(cell)) for cell in row))
    _console().print(grid)
