"""A streaming reader for torch profiler (Kineto) Chrome traces, `.pt.trace.json` and `.pt.trace.json.gz`.

The file is read as bytes in chunks (gunzipped on the fly). `traceEvents` is decoded a slice at a time: the
buffered bytes up to the last `},` are tried as one JSON array (one decode call for ~4,000 events, by msgspec
when installed, see events.py); the decode succeeds only when the cut falls between two events (a cut inside a
string or an object leaves the array unclosed), so a slice that fails is read again one event at a time with
the standard library's `raw_decode`, which also words the errors. Only the top-level keys other than
`traceEvents` are kept (distributedInfo gives the rank). Memory is bounded by twice CHUNK_BYTES plus the largest
single event (MAX_EVENT_BYTES); what a caller keeps is its own business (breakdown caps it). Bad input is a
TraceError with one line: a cut gzip stream, a file that is not JSON, a JSON value that is not a trace, an event
too large. Measured against ijson, orjson, pysimdjson and the old per-event reader in docs/profiles.md."""

from __future__ import annotations

import codecs
import json
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import Dsv4Error

CHUNK_BYTES = 1 << 20
GZIP_READ_BYTES = 256 << 10  # compressed bytes given to zlib at once
GUNZIP_BYTES = CHUNK_BYTES  # the most text one zlib call gives back
MAX_EVENT_BYTES = 4 << 20  # one event; Kineto's largest (a python_function with a long name) is a few KB
MAX_HEADER_BYTES = 16 << 20  # every top-level key but traceEvents together (deviceProperties of 8 GPUs: ~4 KB)
FIRST_WINDOW = 1024  # bytes first tried for one value on the slow path (grown x4 until it holds the value)

_DECODER = json.JSONDecoder()
_WS = re.compile(rb"[ \t\r\n]*")


class TraceError(Dsv4Error):
    """A trace file that cannot be read as a profile (cut, not JSON, not a trace, too large)."""


def open_bytes(path: Path) -> Callable[[], bytes]:
    """A function returning the next chunk of the file's bytes (b'' at its end), gunzipping when it is gzip."""
    raw = path.open("rb")
    gz = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    if gz:
        return _gunzip(path, raw)

    def read() -> bytes:
        data = raw.read(CHUNK_BYTES)
        if not data:
            raw.close()
        return data

    return read


def _gunzip(path: Path, raw: Any) -> Callable[[], bytes]:
    """Chunks of a gzip file (its members one after another), one zlib call each, in the reading thread. (A
    thread gunzipping ahead was measured slower, 2.2 s against 2.0 s on the 205 MB trace: it waits for the GIL
    the decoder holds at every hand-over; and GzipFile's reader runs Python between small zlib calls.)"""
    inflate = zlib.decompressobj(wbits=31)
    pending = b""  # compressed bytes not yet given to zlib

    def read() -> bytes:
        nonlocal inflate, pending
        try:
            while True:
                if inflate.unconsumed_tail:
                    out = inflate.decompress(inflate.unconsumed_tail, GUNZIP_BYTES)
                else:
                    if not pending:
                        pending = raw.read(GZIP_READ_BYTES)
                    if not pending:
                        raw.close()
                        if not inflate.eof:
                            raise TraceError(f"{path}: the gzip stream ends early (the file was cut, or is still "
                                             "being written)")
                        return b""
                    out, pending = inflate.decompress(pending, GUNZIP_BYTES), b""
                if inflate.eof:  # the end of a member: another may follow (cat a.gz b.gz)
                    pending = inflate.unused_data + pending
                    if pending.strip(b"\x00"):
                        inflate = zlib.decompressobj(wbits=31)
                    else:
                        pending = b""
                if out:
                    return out
        except zlib.error as exc:
            raise TraceError(f"{path}: not a readable gzip file ({exc})") from None
        except OSError as exc:
            raise TraceError(f"{path}: cannot be read ({exc.strerror or exc})") from None

    return read


def open_chunks(path: Path) -> Callable[[], str]:
    """The same chunks as text (invalid UTF-8 replaced), for the line-oriented readers (rocprof's CSV)."""
    read, decoder = open_bytes(path), codecs.getincrementaldecoder("utf-8")("replace")

    def text() -> str:
        data = read()
        return decoder.decode(data, final=not data)

    return text


class _Buffer:
    """Bytes read so far and not yet decoded; `more()` appends the next chunk (False at the end of the file)."""

    def __init__(self, path: Path, read: Callable[[], bytes]) -> None:
        self.path, self.read, self.data, self.pos, self.done, self.offset = path, read, b"", 0, False, 0
        self.slow_until = 0  # file offset up to which events are read one at a time (a slice that failed)

    def more(self) -> bool:
        if self.done:
            return False
        chunk = self.read()
        if not chunk:
            self.done = True
            return False
        self.offset += self.pos
        self.data = self.data[self.pos:] + chunk
        self.pos = 0
        return True

    def skip_ws(self) -> str:
        """The next non-blank character ('' at the end of the file), not consumed."""
        while True:
            self.pos = _WS.match(self.data, self.pos).end()
            if self.pos < len(self.data):
                return chr(self.data[self.pos])
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
        window = FIRST_WINDOW
        while True:
            available = len(self.data) - self.pos
            if available < window and self.more():
                continue
            piece = self.data[self.pos:self.pos + window]
            text = piece.decode("utf-8", "surrogateescape")  # one char per invalid byte: offsets map back
            try:
                value, end = _DECODER.raw_decode(text)
            except json.JSONDecodeError as exc:
                if len(piece) > limit:
                    self.fail(f"one value is larger than {limit >> 20} MiB")
                if len(piece) < available or not self.done:
                    window *= 4
                    continue
                self.fail(f"not JSON or cut short ({exc.msg})")
            except RecursionError:
                self.fail("JSON nested too deeply")
            if end == len(text) and not isinstance(value, (dict, list, str)) and (
                    len(piece) < available or not self.done):
                window *= 4  # a number may go on past the window
                continue
            size = end
            if not piece.isascii():
                head = text[:end]
                size = len(head.encode("utf-8", "surrogateescape"))
                if _has_surrogates(head):  # invalid UTF-8 inside: replaced, as a text reader does
                    value = _DECODER.raw_decode(self.data[self.pos:self.pos + size].decode("utf-8", "replace"))[0]
            self.pos += size
            return value

    def batch(self, decode: Callable[[bytes], list[Any]], errors: tuple[type[BaseException], ...]
              ) -> list[Any] | None:
        """Every whole event buffered from here to the last `},`, decoded at once; None when there is none, or
        when they are not one JSON array (then the next ones up to that cut are read one at a time)."""
        if len(self.data) - self.pos < CHUNK_BYTES and not self.done:
            self.more()
        cut = self.data.rfind(b"},", self.pos)
        if cut < 0 or self.offset + cut < self.slow_until:
            return None
        try:
            events = decode(b"[" + self.data[self.pos:cut + 1] + b"]")
        except errors:
            self.slow_until = self.offset + cut + 1
            return None
        self.pos = cut + 1
        return events

    def fail(self, message: str) -> None:
        raise TraceError(f"{self.path}: {message} at byte {self.offset + self.pos}: not a torch profiler trace"
                         if "not a torch" not in message else f"{self.path}: {message}")


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class _Sink:
    """Where the decoded events go: a batch decoder for slices, what one slow-path value becomes, the caller."""

    def __init__(self, decode: Callable[[bytes], list[Any]], errors: tuple[type[BaseException], ...],
                 one: Callable[[Any], Any], emit: Callable[[list[Any]], None]) -> None:
        self.decode, self.errors, self.one, self.emit = decode, errors, one, emit


def read_trace(path: str | Path, on_event: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Stream `path`'s events to `on_event` one at a time, as dicts (every field, as json.load gives them);
    return the other top-level keys (the header)."""
    from .events import DECODE_ERRORS, dicts_decoder

    def emit(events: list[Any]) -> None:
        for e in events:
            if isinstance(e, dict):
                on_event(e)

    return _read(Path(path), _Sink(dicts_decoder(), DECODE_ERRORS, lambda e: [e], emit))


def read_events(path: str | Path, on_batch: Callable[[list[Any]], None]) -> dict[str, Any]:
    """Stream `path`'s events to `on_batch` a list at a time, as events.Event records (the fields a breakdown
    reads); return the header. The fast path of the breakdown."""
    from .events import DECODE_ERRORS, record_of, records_decoder

    def emit(events: list[Any]) -> None:
        if events:
            on_batch(events)

    return _read(Path(path), _Sink(records_decoder(), DECODE_ERRORS,
                                   lambda e: [r] if (r := record_of(e)) is not None else [], emit))


def _read(path: Path, sink: _Sink) -> dict[str, Any]:
    try:
        source = open_bytes(path)
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return _parse(path, _Buffer(path, source), sink)


def _parse(path: Path, buf: _Buffer, sink: _Sink) -> dict[str, Any]:
    header: dict[str, Any] = {}
    header_size = 0
    seen_events = False
    if buf.expect("{[", "a JSON object (a Chrome trace)") == "[":
        _events(buf, sink)  # the bare-array form of the Chrome trace format
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
                _events(buf, sink)
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


def _events(buf: _Buffer, sink: _Sink) -> None:
    if buf.skip_ws() == "]":
        buf.pos += 1
        return
    while True:
        events = buf.batch(sink.decode, sink.errors)
        if events is None:
            sink.emit(sink.one(buf.value(MAX_EVENT_BYTES)))
        else:
            sink.emit(events)
        if buf.expect(",]", "',' or ']' in traceEvents") == "]":
            return
        buf.skip_ws()


def iter_trace(path: str | Path) -> Iterator[dict[str, Any]]:
    """Every event of a trace (tests and small tools; the breakdown uses read_events' batches)."""
    events: list[dict[str, Any]] = []
    read_trace(path, events.append)
    yield from events
