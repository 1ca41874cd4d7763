"""Exceptions a user can meet, each turned into a one-line message by the CLI (see `cli.py`)."""

from __future__ import annotations


class Dsv4Error(Exception):
    """Base of every error dsv4ctl reports to the user without a traceback."""

    exit_code = 1
    hint: str | None = None


class SpecError(Dsv4Error):
    """A spec file could not be read or parsed (I/O, YAML syntax, `extends` cycle)."""


class SpecInvalid(Dsv4Error):
    """A spec parsed but broke one or more rules; `findings` says which and where."""

    def __init__(self, findings: list) -> None:
        self.findings = findings
        errors = [f for f in findings if f.severity == "error"]
        super().__init__(f"{len(errors)} error(s) in the spec")


class LogError(Dsv4Error):
    """A job log or sacct file could not be read."""
