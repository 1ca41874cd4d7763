"""The software versions a job actually ran, read from the head of its raw.log.

The probe prints them in its first stages (`torch X, cuda available: ...` in env, `vllm X` and `triton X` in the
vLLM import stage); older logs print torch inside the python line (`python 3.10.12, torch 2.5.1+das...`). Only the
head is read: a log can be gigabytes, and these lines come before the engine starts.
"""

from __future__ import annotations

import re
from pathlib import Path

HEAD_BYTES = 64 * 1024
VERSION_COLUMNS = ("vllm_version", "torch_version", "triton_version")
# A version starts with a digit: `torch not importable: ...` is no version.
_PATTERNS = {
    "vllm_version": re.compile(r"^vllm (\d[^\s,]*)", re.MULTILINE),
    "torch_version": re.compile(r"(?:^|, )torch (\d[^\s,]*)", re.MULTILINE),
    "triton_version": re.compile(r"^triton (\d[^\s,]*)", re.MULTILINE),
}


def versions_in(text: str) -> dict[str, str]:
    """The versions a log's text names (the first of each), by column name; absent ones are left out."""
    found = {}
    for column, pattern in _PATTERNS.items():
        m = pattern.search(text)
        if m:
            found[column] = m.group(1)
    return found


def read_versions(log: str | Path | None, head_bytes: int = HEAD_BYTES) -> dict[str, str]:
    """The versions named in the first `head_bytes` of a raw.log; {} when there is no log or it cannot be read."""
    if not log:
        return {}
    try:
        with open(log, "rb") as f:
            head = f.read(head_bytes)
    except OSError:
        return {}
    return versions_in(head.decode("utf-8", errors="replace"))
