"""The scanning engine: raw job-log bytes in, `LogFacts` out, in bounded memory.

Stdlib only (the job-side probe imports it in a venv without the CLI's dependencies).

How it stays fast on huge logs: it does not look at every line. It jumps between a few narrow anchors found with
one multi-pattern search (markers, `Traceback`, exception names, device and collective signatures, slurmstepd) and
reads line by line only while a multi-line construct is open (a traceback, a request block, a wrapped token list)
or when the log was hard-wrapped by a terminal. vLLM's engine-start lines are only looked for until it is ready.

What a line goes through: CR/ANSI cleaning -> outer prefixes learned from the log's first lines (docker, CI,
srun --label, journald...) -> process tag -> logger head -> content (see `prefixes`). What the content means is
decided by the tables in `classify` and the marker protocol in `markers`.

Bounds: every list of records has a cap and a count of what was dropped; requests past the cap are judged as they
complete and only tallied; a line longer than CHUNK_SIZE is read in pieces (a token list of any length is judged
whole, as it streams).
"""

from __future__ import annotations

import os
from typing import IO

from . import classify, levels, markers, plaintext, prefixes, printed
from .anchors import ANCHORS, finder, newline_counter  # noqa: F401  (finder re-exported)
from .captures import DONE, MAX_CAPTURE_LINES, MORE, REJECT, Capture
from .facts import Event, LogFacts
from .printed import READ_ALL_LINES
from .scan_records import (StreamedAnswer, _HTTP_500, MAX_BAD_KEPT, MAX_DIAG_EXAMPLES, MAX_DIAG_KEYS,  # noqa: F401
                           MAX_EVENTS, MAX_NOISE, MAX_REQUESTS, MAX_STAGES, MAX_TRACEBACKS, RecordHandlers,
                           _orphan_exception)
from .tokens import RequestBlock, VerdictOptions, judge_request, parse_token_ids  # noqa: F401  (re-exported)
from .values import (quoted, clean_line, is_nonfinite_value, json_object, parse_decode_list,  # noqa: F401  (re-exported)
                     parse_scalar, safe_cut)

CHUNK_SIZE = 1 << 20  # small enough to stay in cache across the read, the anchor pass and the line count
HEAD_LINES = 256  # the first lines, read before anything else, teach the prefixes
CAPTURE_IDLE_LINES = 200  # a capture whose process printed nothing for this many lines is closed
FAST_COUNT_BYTES = 64 << 20  # from this log size on, importing numpy (~50 ms) to count newlines pays off

# A log's first lines are all read, anchors or not, until the engine is ready (printed.READ_ALL_LINES).
RECORDS_ABOVE = 8  # lines looked back from a traceback's header for ERROR records of its process


# ---- the parser -----------------------------------------------------------------------------------------------------


class LogParser(RecordHandlers):
    """Feed bytes in any chunking with `feed`, then call `close` for the facts."""

    def __init__(self, options: VerdictOptions | None = None) -> None:
        self.facts = LogFacts()
        self.options = options or VerdictOptions()
        self._head: bytearray | None = bytearray()  # the first lines, held until the prefixes are learned
        self._prefixes = prefixes.LinePrefixes()
        self._carry = b""
        self._line_no = 1  # number of the next line to be read
        self._captures: dict[str | None, Capture] = {}
        self._engine_ready = False
        self._current_request: RequestBlock | None = None
        self._current_overflow = False
        self._stream: StreamedAnswer | None = None  # a streamed answer's first line and its deltas so far
        self._plain = plaintext.PlainBlocks()  # bare lines of a short paste: an answer pasted as plain text?
        self._printed_lines = printed.PrintedLines()  # pretty JSON bodies, id lists cut over lines
        self._labelled = printed.LabelledLines()  # `Response: ...` lines of a short paste
        self._nan_rows = printed.NanRows()  # rows of printed numbers with a NaN column
        self._bare = False  # the line just dispatched matched nothing
        self.fast_count = False  # count newlines with numpy (set for big inputs, where its import pays off)

    # -- options --

    def bos_id(self) -> int:
        return self.options.merged_with(self.facts.expect).bos_id

    # -- feeding --

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self._head is not None:
            self._head += data
            if self._head.count(b"\n") < HEAD_LINES and len(self._head) < CHUNK_SIZE:
                return
            data, self._head = bytes(self._head), None
            self._learn(data)
        buf = self._carry + data if self._carry else data
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            self._carry = buf
            while len(self._carry) > CHUNK_SIZE:  # one huge line: read it in pieces, all on the same line number
                piece = safe_cut(self._carry, CHUNK_SIZE)
                self._scan_piece(self._carry[:piece])
                self._carry = self._carry[piece:]
            return
        self._carry = buf[cut:]
        self._scan(buf, cut)

    def feed_lines(self, buf: bytes | bytearray, end: int) -> None:
        """Scan buf[:end], which must end with a newline (a caller that owns its buffer skips feed's copy)."""
        if self._carry or self._head is not None:
            self.feed(bytes(buf[:end]))
        else:
            self._scan(buf, end)

    def close(self) -> LogFacts:
        if self._head is not None:
            data, self._head = bytes(self._head), None
            self._learn(data)
            self.feed(data)
        if self._carry:
            self.facts.ends_mid_line = True
            tail = self._carry + b"\n"
            self._carry = b""
            self._scan(tail, len(tail))
        for capture in list(self._captures.values()):
            capture.close()
        self._captures.clear()
        self._end_stream()
        self._finish_request()
        self._printed_many(self._printed_lines.close())
        run = printed.nan_rows(self.facts, self._nan_rows)
        if run is not None:
            self.facts.nonfinite.append(Event(run[0], "printed_nan", f"{run[2]} rows with NaN: {run[1]}"))
        self._plain.end()
        self._plain_answer()
        # Captures finish out of order when ranks interleave: keep records in log order.
        self.facts.tracebacks.sort(key=lambda tb: tb.line)
        self.facts.noise.sort(key=lambda e: e.line)
        self.facts.lines = self._line_no - 1
        return self.facts

    def _plain_answer(self) -> None:
        limit = self.options.merged_with(self.facts.expect).max_repeat_run
        answer = plaintext.plain_result(self.facts, self._plain, limit)
        if answer is not None:
            self._printed_request(answer.line, answer.text, None, "plain_text")
            self.facts.requests[-1].output_repr = quoted(answer.shown[:4096])
            return
        for line_no, text in printed.labelled_outputs(self.facts, self._labelled):
            self._printed_request(line_no, text, None, "labelled_text")

    def _learn(self, data: bytes) -> None:
        lines = [clean_line(raw) for raw in data.split(b"\n", HEAD_LINES)[:HEAD_LINES]]
        self._prefixes = prefixes.learn(lines)
        self.facts.prefixes = [p.pattern for p in self._prefixes.outer]
        self.facts.wrap_width = self._prefixes.wrap_width

    def _scan_piece(self, piece: bytes) -> None:
        """A piece of a line longer than CHUNK_SIZE, read as if it were a line of its own but numbered as the
        line it belongs to."""
        self._scan(piece + b"\n", len(piece) + 1)
        self._line_no -= 1
        self.facts.dropped["long_line_pieces"] = self.facts.dropped.get("long_line_pieces", 0) + 1

    def _scan(self, buf: bytes, end: int) -> None:
        """Scan the complete lines in buf[:end]. Jumps from anchor hit to anchor hit unless a capture wants every
        line; line numbers come from counting the newlines jumped over."""
        hits = finder(self._engine_ready).find(buf, end)
        newlines = newline_counter(buf, end, self.fast_count)
        n_base = len(ANCHORS)
        wrap = self._prefixes.wrap_width
        pos = hi = 0
        while pos < end:
            if self._captures or wrap or (self._line_no <= READ_ALL_LINES and not self._engine_ready):
                stop = buf.find(b"\n", pos, end)
                raw = buf[pos:stop]
                first = self._line_no
                if wrap:
                    raw, stop = self._unwrap(buf, raw, stop, end, wrap)
                self._line(first, raw, buf, pos)
                self._line_no += 1
                pos = stop + 1
                if not self._line_no % 64:
                    self._expire_captures()
                continue
            while hi < len(hits) and (hits[hi][0] < pos or (self._engine_ready and hits[hi][1] >= n_base)):
                hi += 1  # already read, or a start-up anchor after the engine is up
            if hi == len(hits):
                self._line_no += newlines(pos, end)
                return
            hit = hits[hi][0]
            start = buf.rfind(b"\n", pos, hit) + 1 or pos
            self._line_no += newlines(pos, start)
            stop = buf.find(b"\n", hit, end)
            self._line(self._line_no, buf[start:stop], buf, start)
            self._line_no += 1
            pos = stop + 1

    def _unwrap(self, buf: bytes, raw: bytes, stop: int, end: int, width: int) -> tuple[bytes, int]:
        """Join the physical lines a terminal cut at `width` back into one (numbered as its first line)."""
        joined = raw
        for _ in range(64):
            nxt = buf.find(b"\n", stop + 1, end)
            if nxt < 0:
                break
            following = buf[stop + 1:nxt]
            if not prefixes.continues(clean_line(raw), clean_line(following), width):
                break
            joined += following
            raw, stop = following, nxt
            self._line_no += 1
        return joined, stop

    def _expire_captures(self) -> None:
        """Close captures of processes that went quiet (a rank that died mid-traceback), back to anchor jumps."""
        for proc, capture in list(self._captures.items()):
            if self._line_no - capture.last_line > CAPTURE_IDLE_LINES:
                del self._captures[proc]
                capture.close()

    def _open(self, proc: str | None, capture: Capture) -> None:
        capture.last_line = self._line_no
        self._captures[proc] = capture

    # -- one line --

    def heads(self, frame: str) -> prefixes.Heads:
        return prefixes.split_heads(self._prefixes.strip(frame))

    def _line(self, line_no: int, raw: bytes, buf: bytes, start: int) -> None:
        text = clean_line(raw)
        for frame in text.split("\r") if "\r" in text else (text,):
            outer = self._prefixes.strip(frame)
            heads = prefixes.split_heads(outer)
            capture = self._captures.get(heads.process)
            if capture is not None:
                capture.last_line = line_no
                limit = getattr(capture, "max_lines", MAX_CAPTURE_LINES)
                state = capture.feed(line_no, heads) if capture.lines_seen < limit else REJECT
                if state == MORE:
                    self._plain.end()
                    continue
                if self._captures.get(heads.process) is capture:
                    del self._captures[heads.process]
                capture.close()
                if state == DONE:
                    self._plain.end()
                    continue
            self._bare = False
            if line_no <= READ_ALL_LINES and "nan" in frame and not self._engine_ready:
                self._nan_rows.add(line_no, frame)  # the whole row: a prefix learned from its numbers is no head
            self._dispatch(line_no, heads, buf, start)
            if (self._bare and heads.level is None and heads.where is None and line_no <= READ_ALL_LINES
                    and not self._engine_ready and not plaintext.PROGRESS.search(outer)):
                # no logger head, not a progress bar; a process tag may stand before it (a Ray actor's stdout,
                # `(TaskRunner pid=7) ...`, is what the script in it printed)
                self._plain.add(line_no, heads.content)
            else:
                self._plain.end()

    def _previous_line(self, proc: str | None, buf: bytes, start: int) -> str:
        """The nearest non-blank line of the same process above `start`, looking back a few lines in the buffer."""
        end = start - 1
        for _ in range(4):
            if end < 0:
                break
            begin = buf.rfind(b"\n", 0, end) + 1
            heads = self.heads(clean_line(buf[begin:end]))
            if heads.content.strip() and heads.process == proc:
                return heads.content
            end = begin - 1
        return ""

    def _records_above(self, proc: str | None, buf: bytes, start: int, line_no: int) -> list[tuple[int, str]]:
        """ERROR/CRITICAL records naming an error among the few lines of the same process above `start`, nearest
        first, as (line, message); the record just above the header counts by its level alone (Python's
        `logger.exception` prints its message, then the traceback). Stops at an earlier traceback's frames."""
        found: list[tuple[int, str]] = []
        end = start - 1
        for back in range(1, RECORDS_ABOVE + 1):
            if end < 0:
                break
            begin = buf.rfind(b"\n", 0, end) + 1
            heads = self.heads(clean_line(buf[begin:end]))
            end = begin - 1
            content = heads.content
            if heads.process != proc or not content.strip():
                continue
            if content[:1] in (" ", "\t") or content.startswith(("File ", "Traceback")):
                break
            message = classify.error_record(heads.level, content)
            if message is None and heads.level in classify.ERROR_LEVELS and _orphan_exception(content):
                message = content.strip()
            if message is None and back == 1:  # `logger.exception(msg)`: the record just above says what failed
                message = classify.error_record(heads.level, content, by_level=True)
            if message:
                found.append((line_no - back, message[:1000]))
        return found

    def _signature_line(self, line_no: int, proc: str | None, content: str, buf: bytes, start: int) -> bool:
        """A line that names an OOM or a device fault the way runtimes print it, outside any traceback and logger
        record (llama.cpp's `CUDA error 209 at ...: no kernel image ...`, a C++ `what():` line, vLLM's message
        printed without its exception type): an error line of that family."""
        text = content.strip()
        if content[:1] in (" ", "\t") and not text.startswith("what():"):
            return False  # a frame's source line, an indented hint
        family = classify.signature_family(text)
        if family is None:
            return False
        self._add(self.facts.line_errors, Event(line_no, "printed_error", text[:1000], proc, family,
                                                [s[:300] for s in (self._previous_line(proc, buf, start), text) if s]),
                  "line_errors")
        return True

    def _dispatch(self, line_no: int, heads: prefixes.Heads, buf: bytes, start: int) -> None:
        facts, content, proc = self.facts, heads.content, heads.process
        if markers.DIAG in content:  # first: debug runs print one per rank per layer (the report's J14-J16)
            m = markers.DIAG_RE.search(content)
            if m:
                self._diag(line_no, m.group("tag") or proc, m.group("key"), m.group("value"))
                return
        if content.startswith(markers.STAGE):
            m = markers.STAGE_RE.match(content)
            self._stage(line_no, m.group("name")[:200] if m else "")
            return
        at = content.find("Traceback (most recent call last)")
        if at >= 0:
            self._start_traceback(line_no, heads, content[:at].strip(), buf, start)
            return
        m = markers.FIELD_RE.match(content)
        if m and m.group("key") == "TOKEN_IDS":
            self._start_request(line_no, m.group("idx") or self._request_line_index(buf, start), m.group("value"))
            return
        if markers.ENGINE_READY in content or markers.SERVER_READY in content:
            m = markers.ENGINE_READY_RE.search(content)
            if m:
                facts.engine_ready_s = float(m.group("s"))
                self._engine_ready = True
                return
        if content.startswith(markers.PY_EXIT):
            self._py_exit(line_no, content)
            return
        if "DSV4_" in content and self._dsv4_line(line_no, proc, content):
            return
        if self._printed_outputs(line_no, content):
            return
        if "slurmstepd" in content:
            for kind, family, rx in classify.STEPD_EVENTS:
                if rx.search(content):
                    self._add(facts.scheduler_events, Event(line_no, kind, content.strip()[:500], proc, family),
                              "scheduler_events")
                    return
        if "50" in content and _HTTP_500.search(content):
            facts.http_500_count += 1
            if facts.http_500_first is None:
                facts.http_500_first = Event(line_no, "http_500", content.strip()[:300], proc)
            return
        found = classify.line_error(content)
        if found is not None:
            family, kind = found
            previous = self._previous_line(proc, buf, start)
            self._add(facts.line_errors, Event(line_no, kind, content.strip()[:1000], proc, family,
                                               [s[:300] for s in (previous, content.strip()) if s]), "line_errors")
            return
        level = heads.level
        if level is None and content[:1] not in (" ", "\t"):
            level = (levels.text_level(content) or (None, ""))[0]
        if levels.is_quiet(level):
            if not self._engine_ready:
                self._engine_line(content)
            return
        # (not on a line indented like code: `    Raises:\n        IndexError: If the stack is empty.` in a docstring)
        if ("Error" in content or "Exception" in content) and not content.startswith(("    ", "\t\t")):
            text = _orphan_exception(content)
            if text:
                self._add(facts.orphan_exceptions,
                          Event(line_no, "exception", text, proc, classify.exception_family(text),
                                [s[:300] for s in (self._previous_line(proc, buf, start), text) if s]),
                          "orphan_exceptions")
                return
        if level in classify.ERROR_LEVELS and content[:1] not in (" ", "\t"):
            message = classify.error_record(heads.level, content)
            if message:
                self._add(facts.logged_errors, Event(line_no, "logged_error", message[:1000], proc,
                                                     classify.record_family(message), [content.strip()[:300]]),
                          "logged_errors")
                return
        if self._signature_line(line_no, proc, content, buf, start):
            return
        if content[:1] not in (" ", "\t") and classify.WRAPPERS.match(content):
            # A wrapper's message printed bare (`WorkerProc failed to start.`): an error, but the least of them.
            self._add(facts.line_errors, Event(line_no, "wrapper", content.strip()[:1000], proc, "python",
                                               [content.strip()[:300]]), "line_errors")
            return
        if not self._engine_ready:
            self._engine_line(content)
        self._bare = levels.text_level(content) is None if content.strip() else True


def parse_stream(stream: IO[bytes], chunk_size: int = CHUNK_SIZE, options: VerdictOptions | None = None) -> LogFacts:
    """Parse a binary stream with one reused buffer: `readinto`, scan the complete lines, keep the partial last
    line at the front. (Concatenating fresh 8 MiB chunks cost a third of the parse in page faults.)"""
    parser = LogParser(options)
    try:
        parser.fast_count = os.fstat(stream.fileno()).st_size > FAST_COUNT_BYTES
    except (OSError, AttributeError, ValueError):  # not a file
        pass
    buf = bytearray(chunk_size)
    filled = 0
    while True:
        with memoryview(buf) as view:
            n = stream.readinto(view[filled:])
        if not n:
            break
        filled += n
        cut = buf.rfind(b"\n", 0, filled) + 1
        if cut == 0:
            if filled == len(buf):  # one line longer than the buffer: hand it to feed(), which reads it in pieces
                parser.feed(bytes(buf))
                filled = 0
            continue
        parser.feed_lines(buf, cut)
        tail = filled - cut
        buf[:tail] = buf[cut:filled]
        filled = tail
    if filled:
        parser.feed(bytes(buf[:filled]))
    return parser.close()


def parse_bytes(data: bytes, options: VerdictOptions | None = None) -> LogFacts:
    parser = LogParser(options)
    parser.feed(data)
    return parser.close()


def parse_file(path: str, options: VerdictOptions | None = None) -> LogFacts:
    with open(path, "rb") as stream:
        return parse_stream(stream, options=options)
