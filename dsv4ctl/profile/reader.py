"""A streaming reader for torch profiler (Kineto) Chrome traces, `.pt.trace.json` and `.pt.trace.json.gz`.

The file is read in chunks and each element of `traceEvents` is decoded on its own with the standard library's
`json.JSONDecoder.raw_decode` (measured against ijson in docs/profiles.md: faster here, and no dependency). Only
the top-level keys other than `traceEvents` are kept (distributedInfo gives the rank); every event is handed to
the caller and dropped. Memory is bounded by CHUNK_BYTES plus the largest single event (MAX_EVENT_BYTES); what a
caller keeps is its own business (breakdown caps it). Bad input is a TraceError with one line: a cut gzip stream,
a file that is not JSON, a JSON value that is not a trace, an event too large.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import Dsv4Error

CHUNK_BYTES = 1 << 20
MAX_EVENT_BYTES = 4 << 20  # one event; Kineto's largest (a python_function with a long name) is a few KB
MAX_HEADER_BYTES = 16 << 20  # every top-level key but traceEvents together (deviceProperties of 8 GPUs: ~4 KB)

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


class TraceError(Dsv4Error):
    """A trace file that cannot be read as a profile (cut, not JSON, not a trace, too large)."""


def open_chunks(path: Path) -> Callable[[], str]:
    """A function returning the next text chunk of the file ('' at its end), gunzipping when it is gzip."""
    raw = path.open("rb")
    gz = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    stream = gzip.GzipFile(fileobj=raw) if gz else raw
    decoder = __import__("codecs").getincrementaldecoder("utf-8")("replace")

    def read() -> str:
        try:
            data = stream.read(CHUNK_BYTES)
        except EOFError:
            raise TraceError(f"{path}: the gzip stream ends early (the file was cut, or is still being written)") \
                from None
        except (OSError, zlib.error) as exc:
            raise TraceError(f"{path}: not a readable gzip file ({exc})") from None
        if not data:
            raw.close()
        return decoder.decode(data, final=not data)

    return read


class _Buffer:
    """Text read so far and not yet decoded; `more()` appends the next chunk (False at the end of the file)."""

    def __init__(self, path: Path, read: Callable[[], str]) -> None:
        self.path, self.read, self.text, self.pos, self.done, self.offset = path, read, "", 0, False, 0

    def more(self) -> bool:
        if self.done:
            return False
        chunk = self.read()
        if not chunk:
            self.done = True
            return False
        self.offset += self.pos
        self.text = self.text[self.pos:] + chunk
        self.pos = 0
        return True

    def skip_ws(self) -> str:
        """The next non-blank character ('' at the end of the file), not consumed."""
        while True:
            text, pos = self.text, self.pos
            while pos < len(text) and text[pos] in _WS:
                pos += 1
            self.pos = pos
            if pos < len(text):
                return text[pos]
            if not self.more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.skip_ws()
        if not c or c not in chars:
            self.fail(f"expected {what}" + (f", found {c!r}" if c else ", found the end of the file"))
        self.pos += 1
        return c

    def value(self, limit: int) -> Any:
        """Decode one JSON value at the current position, reading more until it is whole (at most `limit`)."""
        self.skip_ws()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if len(self.text) - self.pos > limit:
                    self.fail(f"one value is larger than {limit >> 20} MiB")
                if not self.more():
                    self.fail(f"not JSON or cut short ({exc.msg})")
                continue
            if end == len(self.text) and not self.done and not isinstance(value, (dict, list, str)):
                if self.more():  # a number may go on in the next chunk
                    continue
            self.pos = end
            return value

    def fail(self, message: str) -> None:
        raise TraceError(f"{self.path}: {message} at character {self.offset + self.pos}: not a torch profiler trace"
                         if "not a torch" not in message else f"{self.path}: {message}")


def read_trace(path: str | Path, on_event: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Stream `path`'s events to `on_event` one at a time; return the other top-level keys (the header)."""
    path = Path(path)
    try:
        buf = _Buffer(path, open_chunks(path))
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    header: dict[str, Any] = {}
    header_size = 0
    seen_events = False
    if buf.expect("{[", "a JSON object (a Chrome trace)") == "[":
        _events(buf, on_event, closing_seen=True)  # the bare-array form of the Chrome trace format
        return {"_bare_array": True}
    if buf.skip_ws() == "}":
        buf.pos += 1
    else:
        while True:
            key = buf.value(MAX_EVENT_BYTES)
            if not isinstance(key, str):
                buf.fail("expected a key")
            buf.expect(":", "':' after a key")
            if key == "traceEvents":
                buf.expect("[", "the traceEvents list")
                _events(buf, on_event, closing_seen=True)
                seen_events = True
            else:
                start = buf.offset + buf.pos
                header[key] = buf.value(MAX_HEADER_BYTES)
                header_size += buf.offset + buf.pos - start
                if header_size > MAX_HEADER_BYTES:
                    buf.fail(f"the keys beside traceEvents hold more than {MAX_HEADER_BYTES >> 20} MiB")
            if buf.expect(",}", "',' or '}' in the trace object") == "}":
                break
    if buf.skip_ws():
        buf.fail("text after the end of the trace")
    if not seen_events:
        raise TraceError(f"{path}: a JSON object without traceEvents: not a torch profiler trace")
    return header


def _events(buf: _Buffer, on_event: Callable[[dict[str, Any]], None], closing_seen: bool) -> None:
    if buf.skip_ws() == "]":
        buf.pos += 1
        return
    while True:
        event = buf.value(MAX_EVENT_BYTES)
        if isinstance(event, dict):
            on_event(event)
        if buf.expect(",]", "',' or ']' in traceEvents") == "]":
            return


def iter_trace(path: str | Path) -> Iterator[dict[str, Any]]:
    """Every event of a trace (tests and small tools; the breakdown uses read_trace's callback)."""
    events: list[dict[str, Any]] = []
    read_trace(path, events.append)
    yield from events
