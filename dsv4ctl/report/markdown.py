"""Markdown text of data, safe in any renderer: the one escaping every Markdown page uses (campaign, bisection,
alignment, serving reports)."""

from __future__ import annotations

import html
import re
from typing import Any


def md(value: Any) -> str:
    """Data as Markdown text, one line, table pipes escaped: raw HTML escaped (a spec name or a log line must not
    become markup in a rendered page), and nothing else, so `p = 0.19 >= 0.05` stays as written (issue 26 m13). A
    `>` is markup only after a `<`, an `&` only where it starts an entity (`&lt;`)."""
    text = str(value)
    if "<" in text:
        text = html.escape(text, quote=False)
    else:
        text = re.sub(r"&(?=#?\w+;)", r"\&", text)
    return " ".join(text.replace("|", "\\|").splitlines())
