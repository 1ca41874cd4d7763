"""The store's words and values: the names a run or campaign is found by (`latest`, labels), the errors of a
lookup, and the conversion of what a log holds into what SQLite can store. No database here."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from ..errors import Dsv4Error, UsageError

DEFAULT_DB = "results.db"
LATEST = "latest"  # accepted wherever a run or a campaign is named: the newest one

# Run states: the one list (judge/states.py); dsv4ctl's own words re-exported for the modules that set them.
from ..judge.states import FINAL, LOST, PLANNED, SUBMIT_FAILED, SUBMITTING, UNKNOWN  # noqa: F401, E402
# Not waiting on the scheduler: never submitted, refused, or lost. Every other non-final word is followed.
NOT_WAITING = (PLANNED, SUBMIT_FAILED, LOST)


class RunNotFound(Dsv4Error):
    """No run matches the given run id, label, job id or token: a usage error (exit 2), never a test result."""

    exit_code = 2


class CampaignNotFound(RunNotFound):
    """No campaign has the given name: a usage error, the message names the closest known ones."""

    exit_code = 2


class LabelTaken(UsageError):
    """A label is already used by another run of this database."""


AUTO_LABEL = re.compile(r"r[0-9]+")  # r<run id>: the labels dsv4ctl gives, never one a user chooses


def check_chosen_label(label: str) -> str:
    """A label a user (or a spec's `label:`) chose: refused when it has the automatic labels' shape."""
    if AUTO_LABEL.fullmatch(label):
        raise UsageError(f"label {label!r} has the shape of the automatic labels (r<run id>): choose another "
                         "(J18, baseline-1, ...)")
    return label


def closest(word: str, known: Iterable[str]) -> str:
    """`; did you mean X?` when one known word is close to `word`, else the known words (at most 10)."""
    import difflib

    known = list(known)
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6) or difflib.get_close_matches(
        word.lower(), [k.lower() for k in known], n=1, cutoff=0.6)
    if near:
        return f"; did you mean {near[0]!r}?"
    if not known:
        return ""
    shown = ", ".join(known[:10]) + (f" (+{len(known) - 10} more)" if len(known) > 10 else "")
    return f"; known: {shown}"


INT64_MAX = 2**63 - 1


def bindable(value: Any) -> Any:
    """A value SQLite can store: integers past int64, NaN and infinities become NULL (the verdict's JSON keeps them
    exactly). Not text: an INTEGER column would turn a 400-digit text back into the REAL infinity."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def finite_number(value: Any) -> float | None:
    """A metric as a finite float, or None (text, booleans, NaN, infinities, integers too big for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")



def known_state(state: str) -> str:
    """A scheduler state as stored (any case); UsageError listing the known ones otherwise."""
    from ..judge.states import ACTIVE, OWN

    known = sorted(FINAL | ACTIVE | OWN | {"INGESTED"})
    word = state.strip().upper()
    if word not in known:
        raise UsageError(f"unknown state {state!r}; known states: {', '.join(known)}")
    return word


def known_status(status: str) -> str:
    """A verdict status (any case); UsageError listing the known ones otherwise."""
    from ..judge.rules import STATUSES

    word = status.strip().lower()
    if word not in STATUSES:
        raise UsageError(f"unknown verdict status {status!r}; known statuses: {', '.join(STATUSES)}")
    return word
