"""Argument and option types shared by several commands, defined once, and the checks that refuse values out of
range as usage errors (exit 2) before a command runs. Checks are plain callbacks, so adding one to an option leaves
its `--help` unchanged."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..limits import MAX_REPEATS
from ..names import NameRefused, check_campaign_name

SpecArg = Annotated[Path, typer.Argument(help="Experiment spec (YAML).", exists=True, dir_okay=False,
                                         readable=True)]
SpecsArg = Annotated[list[Path], typer.Argument(help="Experiment spec files (YAML).", exists=True, dir_okay=False,
                                                readable=True)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
DbOpt = Annotated[Optional[Path], typer.Option(
    "--db", help="Results database [env: DSV4CTL_DB; else dsv4ctl.toml's, else ./results.db].", show_default=False)]
RunsDirOpt = Annotated[Optional[Path], typer.Option(
    help="Where run directories go [env: DSV4CTL_RUNS_DIR; else dsv4ctl.toml's, else ./runs].", show_default=False)]
TimeoutOpt = Annotated[Optional[float], typer.Option(
    "--timeout", help="Stop waiting after this many seconds (exit 3); the runs go on.", min=0)]


def check_on_stuck(value: str) -> str:
    if value not in ("leave", "cancel"):
        raise typer.BadParameter(f"{value!r} is not one of: leave, cancel")
    return value


OnStuckOpt = Annotated[str, typer.Option(
    "--on-stuck", callback=check_on_stuck, metavar="leave|cancel",
    help="When a job can never start as submitted (PartitionConfig, a QOS limit...), the wait stops at once "
         "(exit 1): leave the job queued, or cancel it.")]


def check_label(value: str | None) -> str | None:
    """--label: a short name that starts with a letter (J18), so it never reads as a run id."""
    import re

    from ..spec.models import LABEL_PATTERN, RESERVED_LABELS

    if value is not None and (not re.fullmatch(LABEL_PATTERN, value) or value in RESERVED_LABELS):
        raise typer.BadParameter(f"{value!r} is not a label: start with a letter, then letters, digits, . _ - "
                                 "(at most 64; not `latest`)")
    if value is not None and re.fullmatch(r"r[0-9]+", value):
        raise typer.BadParameter(f"{value!r} has the shape of the automatic labels (r<run id>): choose another")
    return value


LabelOpt = Annotated[Optional[str], typer.Option(
    callback=check_label, help="Name the run (J18); several runs get J18.1, J18.2, ... A label taken is "
                               "refused [default: the spec's label, else r<run id>].")]


def open_store(db: Path | None, must_exist: bool = False, announce: bool = True):
    """The store (imported on use: sqlite-utils is slow to import and `--help` must stay fast), with the note of
    which database it is on stderr. Commands that only read pass `must_exist`: no database there is an error, not
    an empty table."""
    from ..report import output
    from ..store import open_store as _open

    return _open(db, announce=output.info if announce else None, must_exist=must_exist)


def check_backend(value: str | None) -> str | None:
    """--backend: one of the registered backends, or auto; a typo is a usage error naming them."""
    from ..scheduler import backend_names

    if value is not None and value not in (*backend_names(), "auto"):
        raise typer.BadParameter(f"{value!r} is not a backend; use one of: {', '.join(backend_names())}, auto")
    return value


BackendOpt = Annotated[Optional[str], typer.Option(
    callback=check_backend, show_default=False,
    help="slurm, local, or auto (slurm when sbatch is on PATH) [env: DSV4CTL_BACKEND; else dsv4ctl.toml's, "
         "else auto].")]

def check_repeats(value: int | None) -> int | None:
    """--repeats: at least 1 (0 or -1 would record an empty campaign) and at most MAX_REPEATS."""
    if value is not None and not 1 <= value <= MAX_REPEATS:
        raise typer.BadParameter(f"{value} is outside 1..{MAX_REPEATS}")
    return value


def check_campaign(value: str | None) -> str | None:
    """--campaign / CAMPAIGN: one safe path component (see `dsv4ctl.names`)."""
    if value is None:
        return None
    try:
        return check_campaign_name(value)
    except NameRefused as exc:
        raise typer.BadParameter(str(exc)) from None


def check_alpha(value: float) -> float:
    """A significance level: strictly between 0 and 1."""
    if not 0 < value < 1:
        raise typer.BadParameter(f"{value} is not a significance level; give a number between 0 and 1 (0.05)")
    return value


def check_factor(value: float) -> float:
    """An improvement factor: finite and above 0 (1.05 = 5%)."""
    if not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a factor; give a positive number (1.05 = 5%)")
    return value


def check_direction(value: str | None) -> str | None:
    """--direction: lower or higher (is better)."""
    from ..analysis.compare import DIRECTIONS  # the compare command imports it anyway; keeps --help cold

    if value is not None and value not in DIRECTIONS:
        raise typer.BadParameter(f"{value!r} is not one of: {', '.join(DIRECTIONS)}")
    return value


def at_least(minimum: int) -> Callable[[int | None], int | None]:
    """A check for an int option that must be `minimum` or more (None, when optional, passes)."""

    def check(value: int | None) -> int | None:
        if value is not None and value < minimum:
            raise typer.BadParameter(f"{value} is below the minimum {minimum}")
        return value

    return check


def confirm_plan() -> None:
    """Ask `start?` on the terminal after a plan was shown (bisect, promote); without a terminal, a usage error
    naming --yes, never a wait on a stdin nobody writes to."""
    import sys

    if not sys.stdin.isatty():
        from ..errors import UsageError

        raise UsageError("no terminal to confirm the plan on: pass --yes to start it")
    typer.confirm("start?", abort=True, err=True)
