"""Values as logs print them, read leniently: decode lists, scalars, JSON objects, physical lines."""

from __future__ import annotations

import json
import math
import re
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_MANGLED_ANSI = re.compile(r"\ufffd\[[0-9;]{0,12}m")
LONG_LINE_SLACK = 1 << 16  # where to cut a too-long line: the last separator this close to the limit


def parse_decode_list(text: str) -> list[str]:
    """Parse a TOKEN_DECODE list; bare names like BOS (hand-written logs) are kept as their text."""
    import ast

    if len(text) < (1 << 20):
        try:
            value = ast.literal_eval(text.strip())
            if isinstance(value, (list, tuple)):
                return [str(v) for v in value]
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            pass
    items = re.findall(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|([^,\[\]\s][^,\[\]]*)", text)
    return [a or b or c.strip() for a, b, c in items if (a or b or c.strip())]


def parse_scalar(text: str) -> Any:
    text = text.strip()
    if text in ("True", "False", "true", "false"):
        return text in ("True", "true")
    if len(text) <= 40:
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            pass
    return text


def is_nonfinite_value(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value) or math.isinf(value)
    if isinstance(value, str):
        return bool(re.search(r"(?<![A-Za-z])(nan|inf)(?![A-Za-z])", value[:1000], re.IGNORECASE))
    return False


def json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # ValueError covers ints past Python's 4300-digit limit
        return None
    return value if isinstance(value, dict) else None


def clean_line(raw: bytes) -> str:
    """A physical line as text: CR and colour codes removed; `\\r`-joined progress frames keep their last frame
    unless an earlier frame carries more (a marker printed before a progress bar redraws over it)."""
    text = raw.decode("utf-8", errors="replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\ufffd[" in text:  # colour codes whose ESC byte a copy or a transcoding turned into U+FFFD
        text = _MANGLED_ANSI.sub("", text)
    if "\r" in text:
        frames = [f for f in text.split("\r") if f.strip()]
        text = frames[-1] if len(frames) == 1 else "\r".join(frames)
    return text.rstrip()


def safe_cut(buf: bytes, limit: int) -> int:
    """Where to cut a line longer than `limit`: after the last separator near the limit, so that ids and words
    stay whole."""
    for sep in (b",", b"\r", b" "):
        at = buf.rfind(sep, limit - LONG_LINE_SLACK, limit)
        if at > 0:
            return at + 1
    return limit


def quoted(text: str) -> str:
    """repr() of a text, but an apostrophe beside a double quote left as printed (`'I'll output {"a": 1}'`): a
    blocker quotes the words an engineer would search for, not Python's escapes of them."""
    shown = repr(text)
    if shown[:1] == "'" and "\\'" in shown:
        return "'" + shown[1:-1].replace("\\'", "'") + "'"
    return shown
