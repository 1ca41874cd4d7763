"""Exceptions a user can meet, each turned into a one-line message by the CLI (see `cli.py`).

`explain` is the one table from any exception that escapes a command to what the user reads: a one-line message, a
hint naming what to do next, and the exit code (`ExitCode`, the one table of exit codes). Standard library only.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """Every command's exit codes, one meaning each, so a CI gate can rely on them (docs/reference/commands.md)."""

    OK = 0                  # passed, promoted, done
    FAILED = 1              # the thing checked failed: a run not passed, a spec invalid, a candidate rejected
    USAGE = 2               # a usage error or something named that does not exist (a run, a campaign, a metric)
    TIMEOUT = 3             # a wait's --timeout passed; the runs go on
    OUTSIDE_REFERENCE = 4   # a run passed but is outside its performance reference
    INCONCLUSIVE = 5        # compare could not decide (too few runs, too much noise)
    INTERRUPTED = 130       # Ctrl-C


class Dsv4Error(Exception):
    """Base of every error dsv4ctl reports to the user without a traceback."""

    exit_code = 1
    hint: str | None = None


class UsageError(Dsv4Error):
    """Arguments out of range or that cannot work together: exit 2, like a command-line usage error."""

    exit_code = 2


class SpecError(Dsv4Error):
    """A spec file could not be read or parsed (I/O, YAML syntax, `extends` cycle, a file too large or deep)."""


class SpecInvalid(Dsv4Error):
    """A spec parsed but broke one or more rules; `findings` says which and where."""

    def __init__(self, findings: list) -> None:
        self.findings = list(dict.fromkeys(findings))  # one finding every matrix point shares, said once
        errors = [f for f in self.findings if f.severity == "error"]
        super().__init__(f"{len(errors)} error(s) in the spec")


class LogError(Dsv4Error):
    """A job log or sacct file could not be read."""


@dataclass(frozen=True)
class Explanation:
    """What the user reads about a failure: one line, what to do next, and the exit code."""

    message: str
    hint: str | None
    exit_code: int


DEBUG_HINT = "run again with --debug (or DSV4CTL_DEBUG=1) for the traceback, and report it if it is a bug"

# errno -> (what happened to the path, what to do about it)
FILESYSTEM_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOENT: ("no such file or directory", "check the path; create the directory first if it is new"),
    errno.ENOTDIR: ("a part of the path is not a directory", "check the path"),
    errno.EISDIR: ("is a directory, a file was expected", "give a file path"),
    errno.EACCES: ("permission denied", "choose a path you can write to, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose a path you can write to, or fix its permissions"),
    errno.EROFS: ("the file system is read-only", "write somewhere else (--output, --runs-dir, --db)"),
    errno.ENOSPC: ("no space left on the device", "free some space, or write somewhere else"),
    errno.EDQUOT: ("disk quota exceeded", "free some space, or write somewhere else"),
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter path"),
}


def one_line(text: str, limit: int = 300) -> str:
    """The first line of a message, cut to `limit` characters: a message must never flood a terminal."""
    first = (text.strip().splitlines() or [""])[0]
    return first if len(first) <= limit else first[:limit - 1] + "…"


def _explain_os_error(exc: OSError) -> Explanation:
    what, hint = FILESYSTEM_ERRORS.get(exc.errno, (exc.strerror or str(exc), DEBUG_HINT))
    path = exc.filename if exc.filename is not None else None
    message = f"{path}: {what}" if path is not None else what
    return Explanation(one_line(message), hint, 1)


def explain(exc: BaseException) -> Explanation:
    """How the CLI reports an exception that escaped a command (see `cli.main`)."""
    if isinstance(exc, KeyboardInterrupt):
        return Explanation("interrupted", None, 130)
    if isinstance(exc, Dsv4Error):
        return Explanation(one_line(str(exc), 2000), exc.hint, exc.exit_code)
    if isinstance(exc, OSError):
        return _explain_os_error(exc)
    if isinstance(exc, MemoryError):
        return Explanation("out of memory", "the input is probably far larger than intended; " + DEBUG_HINT, 1)
    if isinstance(exc, RecursionError):
        return Explanation("the input is nested too deeply", DEBUG_HINT, 1)
    if type(exc).__module__ == "sqlite3":
        return Explanation(one_line(f"results database: {exc}"), "check --db (or DSV4CTL_DB) and that the file is "
                                                                  "a dsv4ctl database you can write to", 1)
    return Explanation(one_line(f"unexpected {type(exc).__name__}: {exc}"), DEBUG_HINT, 1)
