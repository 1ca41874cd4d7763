"""Names a user chooses that become directory names, Slurm job names or database keys (campaigns).

A name must stay one path component that no shell or option parser misreads: `../x`, `a/b`, `-rf`, a NUL byte or a
newline are refused where the name is accepted, before anything is written. Standard library only (cold path).
"""

from __future__ import annotations

import re

from .errors import UsageError

CAMPAIGN_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._+=,@-]{0,127}"
_CAMPAIGN_NAME = re.compile(CAMPAIGN_NAME_PATTERN)


class NameRefused(UsageError):
    """A chosen name that could escape its directory or be read as an option."""


def check_campaign_name(name: str) -> str:
    """Return `name` if it is a safe campaign name; raise NameRefused saying why not."""
    if _CAMPAIGN_NAME.fullmatch(name):
        return name
    raise NameRefused(f"campaign name {name!r} {_why_refused(name)}; use letters, digits and . _ + = , @ - "
                      "(at most 128, starting with a letter or digit)")


def _why_refused(name: str) -> str:
    if not name:
        return "is empty"
    if "\x00" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character"
    if "/" in name or "\\" in name or ".." in name:
        return "could leave the runs directory"
    if name.startswith("-"):
        return "would read as an option"
    if len(name) > 128:
        return "is too long"
    return "has characters that need quoting"
