"""The level of a logger record written in the line's text, in whatever format the program or a log shipper used.

The scanner takes vLLM's, SGLang's and glog's heads off a line itself (`prefixes`); every other framework writes
its level somewhere in the first columns, and that level is what says whether the line is an error record or
chatter. Recognised, in the first 120 characters:

  delimited anywhere   `[ERROR]`, `[error]`, `(Error)`, `<ERROR>`, `| critical |` (loguru, tt-metal), ` - ERROR - `
                       (Python logging after the logger's name), `::ERROR -->` (InvokeAI), `level=ERROR` (logfmt), `[E] `
  first word           `ERROR something`, `ERROR: something`, `error: something`, `Error: something`, after only a
                       timestamp, `[tags]` or `(process)` tags: `2026-08-07T18:25:43Z ERROR xinference.core ...`,
                       `1:03PM ERR ...` (zerolog's console writer)
  after a logger name  `2024-10-25 12:21:14,974 xinference.api 37502 ERROR    ...` (a timestamp, a name, a pid)
  one letter           `E`, `F`, `W`, `I` after a timestamp (llama.cpp / llama-box: `0.17.512.848 E CUDA error`)

Stdlib only.
"""

from __future__ import annotations

import re

ERROR_LEVELS = frozenset({"ERROR", "CRITICAL", "FATAL"})
QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "WARN", "TRACE", "NOTICE"})
_NORMAL = {"ERR": "ERROR", "CRIT": "CRITICAL", "WARN": "WARNING", "E": "ERROR", "F": "CRITICAL", "W": "WARNING",
           "I": "INFO", "D": "DEBUG"}
_WORD = r"ERROR|ERR|CRITICAL|CRIT|FATAL|WARNING|WARN|INFO|DEBUG|TRACE|NOTICE"
_ANY_CASE = rf"(?i:{_WORD})"
# Delimited on both sides: a level wherever it stands in the head of the line.
_DELIMITED = re.compile(rf"\[\s{{0,8}}(?P<a>{_ANY_CASE})\s{{0,8}}\]|\(\s?(?P<b>{_ANY_CASE})\s?\)|<(?P<c>{_ANY_CASE})>"
                        rf"|\|\s{{1,8}}(?P<d>{_ANY_CASE})\s{{1,8}}\||\s-\s(?P<e>{_WORD})\s-\s|::(?P<f>{_WORD})\b"
                        rf"|(?:^|\s)level=(?P<g>{_ANY_CASE})\b"  # logfmt (Go's slog, ollama: `level=ERROR source=...`)
                        r"|\[(?P<h>[EFW])\] ")  # one letter in brackets (TensorRT's `[TRT] [E] 9: ...`)
# A first word: upper case, or any case followed by a colon.
_FIRST_WORD = re.compile(rf"(?<![\w.\-])(?:(?P<a>{_WORD})(?=:|\s)|(?P<b>(?i:error|fatal|critical|warning|info)):\s)")
_LETTER = re.compile(r"(?<=\d )(?P<a>[EFWID]) +(?=\S)")
# After a timestamp, a logger's name and a pid (`%(asctime)s %(name)s %(process)d %(levelname)s`, xinference):
# `2024-10-25 12:21:14,974 xinference.api.restful_api 37502 ERROR    [address=...] ...`. Upper case only.
_AFTER_NAME = re.compile(rf"^\[?\d{{4}}-\d{{2}}-\d{{2}}[ T][\d:.,]+\]?\s+[A-Za-z_][\w.\-]*(?:\s+\d+)?\s+"
                         rf"(?P<a>{_WORD})(?=\s)")
# What may stand before a first-word level: timestamps, [tags], (process) tags, pid=N, separators.
_PREFIX_PARTS = re.compile(r"\[[^\]]{0,80}\]|\([^)]{0,80}\)|pid[=:]\d+|\d{1,2}:\d{2}(?::\d{2})?[AP]M\b"
                           r"|\d[\d:.,\-/T]*Z?")  # a 12-hour time (zerolog's `1:03PM ERR ...`)
HEAD_CHARS = 120


def text_level(content: str) -> tuple[str, str] | None:
    """(level, message) of a record whose level is written in its text, else None. The level is normalised
    (`ERROR`, `CRITICAL`, `WARNING`, `INFO`, `DEBUG`, ...); the message is the text after it."""
    head = content[:HEAD_CHARS]
    m = _DELIMITED.search(head)
    if m:
        word = next(g for g in m.groups() if g)
        return _normal(word), _message(content, m.end())
    m = _FIRST_WORD.search(head)
    if m and _only_prefix(head[:m.start()]):
        return _normal(m.group("a") or m.group("b")), _message(content, m.end())
    m = _AFTER_NAME.match(head)
    if m:
        return _normal(m.group("a")), _message(content, m.end())
    m = _LETTER.search(head)
    if m and _only_prefix(head[:m.start()]) and any(ch.isdigit() for ch in head[:m.start()]):
        return _normal(m.group("a")), _message(content, m.end())
    return None


def is_quiet(level: str | None) -> bool:
    return level in QUIET_LEVELS


def _only_prefix(before: str) -> bool:
    return not any(ch.isalpha() for ch in _PREFIX_PARTS.sub(" ", before))


def _normal(word: str) -> str:
    word = word.upper()
    return _NORMAL.get(word, word)


def _message(content: str, end: int) -> str:
    return content[end:].lstrip(" \t:|->]").strip()
