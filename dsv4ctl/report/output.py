"""The one output layer: commands hand it data, it draws rich tables for people or JSON for scripts.

Commands never print. Human output goes to stdout, messages about failures to stderr, JSON to stdout alone.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


@lru_cache(maxsize=2)
def _console(stderr: bool = False) -> "Console":
    from rich.console import Console  # imported on first output: keeps `dsv4ctl --help` fast

    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = 160  # logs and pipes: wide tables rather than folded cells (COLUMNS, when set, wins)
    return console


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


def problem(message: str) -> None:
    """A line on stderr that already says what it is (a finding: `file:line:col: error: ...`)."""
    _console(True).print(escape(message), style="red")


def info(message: str) -> None:
    """A note about how the command ran (which database it used) on stderr: never mixed into --json stdout."""
    _console(True).print(escape(message), style="dim")


def progress(message: str) -> None:
    """A line of progress while waiting, on stderr: stdout stays the result alone (clean --json)."""
    _console(True).print(escape(message), markup=True)


def warn(message: str) -> None:
    _console(True).print(f"[yellow]warning:[/] {escape(message)}")


def escape(value: str) -> str:
    from rich.markup import escape as _escape

    return _escape(value)


def wide() -> bool:
    """--wide (or DSV4CTL_WIDE=1): tables show every cell whole, folding rather than eliding."""
    return os.environ.get("DSV4CTL_WIDE", "") not in ("", "0")


def cells(value: str) -> int:
    """How many terminal columns `value` takes (`你好` takes 4): what a table's widths are counted in."""
    from rich.cells import cell_len

    return cell_len(value)


def _head(value: str, width: int) -> str:
    """The longest start of `value` that takes at most `width` terminal columns."""
    out, used = [], 0
    for char in value:
        used += cells(char)
        if used > width:
            break
        out.append(char)
    return "".join(out)


def _tail(value: str, width: int) -> str:
    """The longest end of `value` that takes at most `width` terminal columns."""
    return _head(value[::-1], width)[::-1] if width > 0 else ""


def elide(value: str, width: int) -> str:
    """`value` cut to `width` terminal columns in the middle (`cpu-smo…1201-2116`): both ends of a name say the
    most. Counted in columns, not characters: a wide character (CJK) takes two."""
    if cells(value) <= width:
        return value
    if width <= 1:
        return _head(value, width)
    head = (width - 1) // 2 + (width - 1) % 2
    return _head(value, head) + "…" + _tail(value, width - 1 - head)


def fit_widths(natural: Sequence[int], minimum: Sequence[int], available: int) -> list[int]:
    """Column widths that fit `available` characters: the widest column gives way first, one character at a
    time, and none goes below its minimum (its header, or a few characters); short columns stay whole."""
    widths = list(natural)
    while sum(widths) > available:
        shrinkable = [i for i, w in enumerate(widths) if w > minimum[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          styles: Sequence[str | None] | None = None, row_styles: Sequence[str | None] | None = None) -> None:
    """A table sized to its content. On a terminal too narrow for it, the widest columns are elided in the middle
    (never folded over several lines: `--wide` shows them whole, `--json` has every value)."""
    _console().print(fitted_table(title, columns, rows, styles, _console().width, row_styles=row_styles))


def squeeze_widths(natural: Sequence[int], minimum: Sequence[int], available: int) -> list[int]:
    """`fit_widths`, then, where the minimums alone do not fit, the widest columns below their minimum too (a
    header then wraps), down to one character each: a table never runs past the terminal's edge."""
    widths = fit_widths(natural, minimum, available)
    return fit_widths(widths, [1] * len(widths), available)


def fitted_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                 styles: Sequence[str | None] | None, width: int,
                 elisions: Sequence[Any] | None = None, row_styles: Sequence[str | None] | None = None) -> Any:
    """`table`'s rich Table for a terminal `width` columns wide (the live wait table draws one every poll);
    `elisions` per column: how a cell too wide is cut [default: `elide`, in the middle].

    Each column gets a fixed width computed here, in terminal columns, and rich is left no choice: its own
    width arithmetic counts cell padding (and, with collapsed padding, counts it unlike it draws it), which drew
    an 80-column table 82 wide (issue 26 M4). Narrow (< 120): no borders, one space before each cell, so the
    table is sum(widths) + columns wide; wide: heavy-head borders, sum(widths) + 3 * columns + 1."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cells_ = [["" if cell is None else str(cell).replace("\n", " ") for cell in row] for row in rows]
    narrow = width < 120
    widths: list[int | None] = [None] * len(columns)
    if not wide():
        # A header may wrap at its spaces ("first / blocker") where the columns are short of room; a cell never does.
        header = [max(cells(word) for word in (column.split() or [""])) for column in columns]
        natural = [max([cells(columns[i])] + [cells(row[i]) for row in cells_ if i < len(row)])
                   for i in range(len(columns))]
        minimum = [min(n, max(h, 6)) for n, h in zip(natural, header)]
        gaps = len(columns) if narrow else 3 * len(columns) + 1  # a space before each cell; or rules and padding
        fitted = squeeze_widths(natural, minimum, width - gaps)
        cut = list(elisions or []) + [None] * len(columns)
        cells_ = [[(cut[i] or elide)(cell, fitted[i]) if i < len(fitted) else cell for i, cell in enumerate(row)]
                  for row in cells_]
        widths = list(fitted)
        if title is not None:
            # A title is a sentence (`campaign C: 0 resubmitted, 1 left as they are`): wrapped at the width here,
            # at its spaces, since our soft-wrapping console would print it whole past the edge.
            import textwrap

            title = Text("\n".join(textwrap.wrap(title, max(width, 1), break_on_hyphens=False)) or title,
                         style="table.title")
    # On a narrow terminal no borders, one space before each cell: the cells get the columns.
    grid = Table(title=Text(title, style="table.title") if isinstance(title, str) else title, title_justify="left", show_lines=False,
                 box=None if narrow else box.HEAVY_HEAD, show_edge=not narrow, pad_edge=True,
                 padding=(0, 0, 0, 1) if narrow else (0, 1), collapse_padding=False,
                 header_style="bold underline" if narrow else "bold")
    for i, column in enumerate(columns):
        grid.add_column(column, style=(styles[i] if styles else None), overflow="fold", width=widths[i])
    for n, row in enumerate(cells_):
        grid.add_row(*(escape(cell) for cell in row), style=row_styles[n] if row_styles else None)
    return grid


def elide_message(text: str, width: int) -> str:
    """A first blocker's message cut to `width`, its head kept whole where 8 characters are left after it (`line 40:
    FileNotFoundError: …/tiny-qwen3/config.json`): the line and the exception type say what it is, the end where."""
    import re

    head = re.match(r"(line \d+: )?[\w.]+: ", text)
    if head is None or cells(text) <= width or len(head.group(0)) > width - 8:
        return elide(text, width)
    rest = width - len(head.group(0))
    return head.group(0) + "…" + _tail(text, rest - 1)


def first_blocker_cell(verdict: dict | None) -> str:
    """What stopped a judged run, as the wait table shows it: the first blocker's message with its line
    (`line 40: FileNotFoundError: …/config.json`), its kind only where it has no message (issue 26 M5)."""
    if not verdict or verdict.get("passed"):
        return ""
    message = " ".join(str(verdict.get("first_blocker_message") or "").split())
    line = verdict.get("first_blocker_line")
    if not message:
        return str(verdict.get("first_blocker_kind") or "")
    return (f"line {line}: " if line else "") + message


class _LiveStatus:
    """Progress while waiting on jobs, on stderr (stdout stays the result, clean for --json): a live table with each
    run's state, stage and elapsed time on a terminal, one line per change elsewhere (CI logs); nothing if quiet."""

    def __init__(self, quiet: bool = False) -> None:
        self.live = None
        self.quiet = quiet
        self.last_line = ""

    def __enter__(self) -> "_LiveStatus":
        if not self.quiet and _console(True).is_terminal:
            from rich.live import Live

            self.live = Live(console=_console(True), refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, rows: list, verdicts: dict, notes: list[str]) -> None:
        from ..campaign.progress import elapsed_of, stage_of

        if self.quiet:
            return
        judged = sum(1 for r in rows if r.id in verdicts)
        states: dict[str, int] = {}
        for r in rows:
            states[r.state] = states.get(r.state, 0) + 1
        line = f"{judged}/{len(rows)} judged · " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(states.items()))
        line += "".join(f" · {n}" for n in notes)
        if self.live is None:
            if line != self.last_line:
                progress(line)
                self.last_line = line
            return
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.text import Text

        from ..units import clock

        cells = []
        for r in rows:
            # One column for what a run is at: its stage while it runs, what stopped it once judged (the
            # message, not its kind), so that 80 columns leave the message room.
            v = verdicts.get(r.id)
            now = first_blocker_cell(v) if v else \
                (stage_of(r.log_path) or "-") if r.state not in ("PLANNED", "PENDING") else "-"
            cells.append((r.id, r.data.get("label") or "-", r.job_id or "-", r.state, clock(elapsed_of(r)),
                          v["status"] if v else "…", now))
        grid = fitted_table(None, ("run", "label", "job", "state", "elapsed", "verdict", "stage or first blocker"),
                            cells, None, self.live.console.width, elisions=[None] * 6 + [elide_message])
        self.live.update(Group(grid, ProgressBar(total=max(len(rows), 1), completed=judged, width=40),
                               Text(line)))


def live_status(quiet: bool = False) -> _LiveStatus:
    return _LiveStatus(quiet)
