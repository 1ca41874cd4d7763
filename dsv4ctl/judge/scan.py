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

import json
import os
import re
from typing import IO, Any

from . import classify, markers, outputs, prefixes
from .anchors import ANCHORS, finder, newline_counter  # noqa: F401  (finder re-exported)
from .captures import (DONE, MAX_CAPTURE_LINES, MORE, REJECT, Capture, ListCapture, RequestCapture, Traceback,
                       TracebackCapture)
from .facts import Event, LogFacts
from .tokens import RequestBlock, VerdictOptions, judge_request, parse_token_ids  # noqa: F401  (re-exported)
from .values import (clean_line, is_nonfinite_value, json_object, parse_decode_list,  # noqa: F401  (re-exported)
                     parse_scalar, safe_cut)

CHUNK_SIZE = 1 << 20  # small enough to stay in cache across the read, the anchor pass and the line count
HEAD_LINES = 256  # the first lines, read before anything else, teach the prefixes
MAX_TRACEBACKS = 64
MAX_NOISE = 200
MAX_REQUESTS = 4096  # requests kept in full; later ones are judged on the fly and tallied
MAX_BAD_KEPT = 32  # bad requests past MAX_REQUESTS kept as examples
MAX_DIAG_EXAMPLES = 32
MAX_DIAG_KEYS = 256
MAX_STAGES = 256
MAX_EVENTS = 200
CAPTURE_IDLE_LINES = 200  # a capture whose process printed nothing for this many lines is closed
FAST_COUNT_BYTES = 64 << 20  # from this log size on, importing numpy (~50 ms) to count newlines pays off

_ORPHAN_EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure))"
                               r"(?::\s?(?P<msg>.*))?$")
_QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "WARN"})
# An exception line behind a prefix the scanner did not learn (a three-line paste, a launcher nobody has seen):
# accepted only when what precedes it looks like a prefix (timestamps, [tags], (process) tags, an error level).
_EXCEPTION_IN_LINE = re.compile(r"(?:^|(?<=[\s|\]):]))(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)"
                                r"(?::\s.*|:?$))")
_PREFIX_PARTS = re.compile(r"\[[^\]]{0,80}\]|\([^)]{0,80}\)|\b(?:ERROR|CRITICAL|FATAL|Error|E\d{3,4})\b|pid=\d+")
# `exception=RayTaskError(RuntimeError)(RuntimeError('probability tensor ...'))`: asyncio's report of a future that
# failed holds the exception only as its repr.
_EXCEPTION_REPR = re.compile(r"exception=(?:[\w.]+\([\w.]+\))?\(?(?P<type>[\w.]*(?:Error|Exception))\((?P<q>['\"])"
                             r"(?P<msg>.{1,1000}?)(?P=q)\)")
_HTTP_500 = re.compile(r'HTTP/[\d.]+" 500\b|\b500 Internal Server Error')
RECORDS_ABOVE = 8  # lines looked back from a traceback's header for ERROR records of its process
_MODEL_LOAD = re.compile(r"Model loading took (?P<gib>[0-9.]{1,20}) GiB(?: memory)? and (?P<s>[0-9.]{1,20}) seconds")
_KV_TOKENS = re.compile(r"(?P<pool>[A-Za-z +]+?) KV cache size: (?P<n>[0-9,]{1,24}) tokens")
_INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<s>[0-9.]{1,20}) s")
_EXPERT = re.compile(r"expert_dtype resolved to '(?P<v>[^']{1,64})'")
_MOE = re.compile(r"Using '(?P<v>[^']{1,64})' (?P<kind>\w+) MoE backend")
_KV_FORMAT = re.compile(r"Using (?P<v>.{1,64}?) KV cache format")
_INDEXER = re.compile(r"Using (?P<v>\w{1,32}) indexer cache")
_EXPECT_TYPES: dict[str, tuple[type, int, int]] = {  # DSV4_EXPECT key -> (type, min, max)
    "max_tokens": (int, 1, 10**8), "n_requests": (int, 0, 10**9), "bos_id": (int, 0, 2**40),
    "max_repeat_run": (int, 1, 10**9), "ignore_eos": (bool, 0, 1),
}


# ---- the parser -----------------------------------------------------------------------------------------------------


class LogParser:
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
        self._stream: tuple[int, list[str]] | None = None  # a streamed answer's first line and its deltas so far
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
        # Captures finish out of order when ranks interleave: keep records in log order.
        self.facts.tracebacks.sort(key=lambda tb: tb.line)
        self.facts.noise.sort(key=lambda e: e.line)
        self.facts.lines = self._line_no - 1
        return self.facts

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
            if self._captures or wrap:
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
            heads = self.heads(frame)
            capture = self._captures.get(heads.process)
            if capture is not None:
                capture.last_line = line_no
                limit = getattr(capture, "max_lines", MAX_CAPTURE_LINES)
                state = capture.feed(line_no, heads) if capture.lines_seen < limit else REJECT
                if state == MORE:
                    continue
                if self._captures.get(heads.process) is capture:
                    del self._captures[heads.process]
                capture.close()
                if state == DONE:
                    continue
            self._dispatch(line_no, heads, buf, start)

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
        first, as (line, message). Stops at an earlier traceback's frames."""
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
            if message:
                found.append((line_no - back, message[:1000]))
        return found

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
        if "500" in content and _HTTP_500.search(content):
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
        if heads.level not in _QUIET_LEVELS and ("Error" in content or "Exception" in content):
            text = _orphan_exception(content)
            if text:
                self._add(facts.orphan_exceptions,
                          Event(line_no, "exception", text, proc, classify.exception_family(text),
                                [s[:300] for s in (self._previous_line(proc, buf, start), text) if s]),
                          "orphan_exceptions")
                return
        if content[:1] not in (" ", "\t") and (heads.level in classify.ERROR_LEVELS
                                                 or (heads.level is None and _may_hold_level(content))):
            message = classify.error_record(heads.level, content)
            if message:
                self._add(facts.logged_errors, Event(line_no, "logged_error", message[:1000], proc,
                                                     classify.record_family(message), [content.strip()[:300]]),
                          "logged_errors")
                return
        if not self._engine_ready:
            self._engine_line(content)

    def _stage(self, line_no: int, name: str) -> None:
        facts = self.facts
        facts.last_stage = (line_no, name)
        if len(facts.stages) < MAX_STAGES:
            facts.stages.append((line_no, name))
        else:
            facts.dropped["stages"] = facts.dropped.get("stages", 0) + 1
        if name.startswith("generate"):
            self._engine_ready = True

    def _py_exit(self, line_no: int, content: str) -> None:
        facts = self.facts
        m = markers.PY_EXIT_RE.match(content)
        digits = m.group("rc").lstrip("-") if m else ""
        facts.py_exit_line = line_no
        if m and len(digits) <= markers.MAX_EXIT_DIGITS:
            facts.py_exit = int(m.group("rc"))
        else:
            facts.py_exit = None
            self._unreadable(line_no, "py_exit", content)

    def _unreadable(self, line_no: int, kind: str, text: str) -> None:
        self._add(self.facts.unreadable, Event(line_no, kind, text[:200]), "unreadable", cap=MAX_DIAG_EXAMPLES)

    def _dsv4_line(self, line_no: int, proc: str | None, content: str) -> bool:
        facts = self.facts
        if markers.DIAG in content:
            m = markers.DIAG_RE.search(content)
            if m:
                self._diag(line_no, m.group("tag") or proc, m.group("key"), m.group("value"))
                return True
        m = markers.DSV4_RE.match(content)
        if not m:
            return False
        key, value = m.group("key"), m.group("value")
        if key == "DSV4_VERDICT":
            facts.probe_verdict, facts.probe_verdict_line = (value.split()[0][:40] if value else ""), line_no
        elif key == "DSV4_METRICS":
            obj = json_object(value)
            if obj is None:
                self._unreadable(line_no, "metrics", content)
                return True
            for name, metric in list(obj.items())[:256]:
                facts.metrics[str(name)[:100]] = metric
            facts.metrics_line = line_no
            if any(is_nonfinite_value(v) for v in obj.values() if isinstance(v, float)):
                self._add(facts.nonfinite, Event(line_no, "metrics", value[:500], proc), "nonfinite")
        elif key == "DSV4_EXPECT":
            self._expect(line_no, value, content)
        elif key == "DSV4_SETUP_ERROR":
            self._add(facts.setup_errors, Event(line_no, "setup_error", value[:1000], proc, "setup", [content[:300]]),
                      "setup_errors", cap=MAX_EVENTS)
        elif key == "DSV4_JOB":
            if not facts.job_fields:  # the job script prints it once, among its first lines
                facts.job_fields = dict(re.findall(r"(\w{1,32})=(\S{0,64})", value)[:16])
        elif key == "DSV4_SERVE":
            obj = json_object(value)
            if obj is None:
                self._unreadable(line_no, "serve", content)
            elif not facts.serve:
                facts.serve = {str(k)[:100]: v for k, v in list(obj.items())[:64]}
        elif key == "DSV4_REQUEST_ERROR":
            facts.request_error_count += 1
            self._add(facts.request_errors, Event(line_no, "request_error", value[:1000], proc), "request_errors",
                      cap=MAX_EVENTS)
        return True

    def _expect(self, line_no: int, value: str, content: str) -> None:
        obj = json_object(value)
        if obj is None:
            self._unreadable(line_no, "expect", content)
            return
        for key, item in obj.items():
            kind = _EXPECT_TYPES.get(key)
            if kind is None:
                continue
            want, low, high = kind
            ok = isinstance(item, bool) if want is bool else (type(item) is int and low <= item <= high)
            if ok:
                self.facts.expect[key] = item
            else:
                self._unreadable(line_no, f"expect.{key}", content)

    def _printed_outputs(self, line_no: int, content: str) -> bool:
        if content.startswith("data:"):
            return self._stream_chunk(line_no, content)
        if not any(key in content for key in _OUTPUT_KEYS):
            return False
        found = outputs.read_outputs(content)
        for printed in found:
            if printed.nonfinite:
                self._add(self.facts.nonfinite, Event(line_no, "logprob", printed.nonfinite[:200]), "nonfinite",
                          cap=MAX_DIAG_EXAMPLES)
            self._printed_request(line_no, printed.text, printed.token_ids, _output_source(content, printed))
        return bool(found)

    def _printed_request(self, line_no: int, text: str | None, ids: list[int] | None, source: str) -> None:
        self._finish_request()
        request = RequestBlock(line=line_no, index=self.facts.request_count, output=text, source=source)
        if ids is not None:
            request.token_ids = ids[:]
            request.n_ids = len(ids)
        self._add_request(request)
        self._finish_request()

    def _stream_chunk(self, line_no: int, content: str) -> bool:
        """A streamed answer (`data: {...}` chunks, then `data: [DONE]`): the deltas joined into one output."""
        if content.startswith("data: [DONE]") or content.startswith("data:[DONE]"):
            self._end_stream()
            return True
        chunk = outputs.stream_delta(content)
        if chunk is None:
            return False
        delta, finished = chunk
        if self._stream is None:
            self._stream = (line_no, [])
        if sum(map(len, self._stream[1])) < outputs.MAX_TEXT:
            self._stream[1].append(delta)
        if finished:
            self._end_stream()
        return True

    def _end_stream(self) -> None:
        if self._stream is not None:
            line_no, parts = self._stream
            self._stream = None
            self._printed_request(line_no, "".join(parts), None, "openai_stream")

    def _engine_line(self, content: str) -> None:
        facts = self.facts
        if "took" in content:
            m = _MODEL_LOAD.search(content)
            if m:
                facts.model_load_gib, facts.model_load_s = _float(m.group("gib")), _float(m.group("s"))
                return
            m = _INIT_ENGINE.search(content)
            if m:
                facts.init_engine_s = _float(m.group("s"))
                return
        m = _KV_TOKENS.search(content)
        if m:
            facts.kv_cache_tokens = int(m.group("n").replace(",", "") or 0)
            return
        for rx, attr in ((_EXPERT, "expert_dtype"), (_MOE, "moe_backend"), (_KV_FORMAT, "kv_format"),
                         (_INDEXER, "indexer_cache")):
            m = rx.search(content)
            if m:
                setattr(facts, attr, m.group("v"))
                return

    # -- records --

    def _add(self, bucket: list, item: Any, name: str, cap: int = MAX_NOISE) -> None:
        if len(bucket) < cap:
            bucket.append(item)
        else:
            self.facts.dropped[name] = self.facts.dropped.get(name, 0) + 1

    def _diag(self, line_no: int, proc: str | None, key: str, value: str) -> None:
        facts = self.facts
        if key in facts.diag_counts or len(facts.diag_counts) < MAX_DIAG_KEYS:
            facts.diag_counts[key] = facts.diag_counts.get(key, 0) + 1
            slot = f"{proc or '-'}:{key}"
            if slot in facts.diag_last or len(facts.diag_last) < MAX_DIAG_KEYS * 8:
                facts.diag_last[slot] = value[:200]
        else:
            facts.dropped["diag_keys"] = facts.dropped.get("diag_keys", 0) + 1
        parsed = parse_scalar(value)
        bad = (key.endswith("_finite") and parsed is False) or (
            not key.endswith(("_shape", "_stride", "shape", "stride")) and is_nonfinite_value(parsed))
        if bad:
            self._add(facts.nonfinite, Event(line_no, key[:100], f"{key} = {value}"[:500], proc), "nonfinite",
                      cap=MAX_DIAG_EXAMPLES)

    # -- requests --

    def _add_request(self, request: RequestBlock) -> None:
        self._finish_request()
        self._current_request = request
        self._current_overflow = len(self.facts.requests) >= MAX_REQUESTS
        if not self._current_overflow:
            self.facts.requests.append(request)

    def _finish_request(self) -> None:
        """A request past the cap is judged the moment it is complete, then only tallied."""
        request, self._current_request = self._current_request, None
        if request is None or not self._current_overflow:
            return
        tally = self.facts.overflow
        verdict = judge_request(request, self.options.merged_with(self.facts.expect))
        tally.judged += 1
        if verdict.problems:
            tally.bad += 1
            if len(tally.examples) < MAX_BAD_KEPT:
                verdict.token_ids = verdict.token_ids[:64]
                tally.examples.append(verdict)

    def _request_line_index(self, buf: bytes, start: int) -> str | None:
        """The index of a `REQUEST: N` line right above TOKEN_IDS (the probe's block), so a block is numbered as
        printed, not by its place (issue 29 S19: request 5 missing of 10 is request 5, not 9)."""
        if start <= 0:
            return None
        begin = buf.rfind(b"\n", 0, start - 1) + 1
        m = markers.REQUEST_RE.match(self.heads(clean_line(buf[begin:start - 1])).content)
        return m.group("idx") if m else None

    def _start_request(self, line_no: int, idx: str | None, value: str) -> None:
        self._finish_request()
        index = int(idx) if idx else self.facts.request_count
        self._add_request(RequestBlock(line=line_no, index=index))
        self.set_field(self._current_request, "TOKEN_IDS", value)
        if None not in self._captures:
            self._open(None, RequestCapture(self, self._current_request))

    def set_field(self, request: RequestBlock, key: str, value: str) -> None:
        if key in ("TOKEN_IDS", "TOKEN_DECODE"):
            capture = ListCapture(self, request, key, value)
            if capture.depth > 0:  # a wrapped list: read on until its bracket closes
                capture.max_lines = 1 << 62  # a token list is judged whole, however many pieces it comes in
                self._open(None, capture)
            else:
                capture.close()
        elif key == "FINISH_REASON":
            request.finish_reason = value.strip()[:40] or None
        elif key == "OUTPUT_REPR":
            request.output_repr = value[:1 << 16]
        elif key == "OUTPUT":
            request.output = value[:1 << 16]
        elif key == "LOGPROBS":
            try:
                request.logprobs = json.loads(value) if len(value) < (1 << 22) else None
            except (ValueError, RecursionError):
                request.logprobs = None

    def set_decode(self, request: RequestBlock, text: str) -> None:
        request.token_decode = parse_decode_list(text)[:1 << 16]

    def open_request_block(self, request: RequestBlock) -> None:
        """After a list closed: the rest of the request's block follows."""
        if self._captures.get(None) is None or isinstance(self._captures.get(None), ListCapture):
            self._open(None, RequestCapture(self, request))

    # -- tracebacks --

    def _start_traceback(self, line_no: int, heads: prefixes.Heads, context: str, buf: bytes, start: int) -> None:
        proc = heads.process
        tb = Traceback(line=line_no, process=proc, context=context[:300])
        tb.records_above = self._records_above(proc, buf, start, line_no)
        previous = self._previous_line(proc, buf, start)
        for kind, rx in classify.NOISE_BEFORE:
            if rx.search(previous):
                tb.noise = kind
                break
        if previous.startswith(("During handling of the above exception",
                                "The above exception was the direct cause")):
            tb.chain = ["(chained)"]
        previous_capture = self._captures.pop(proc, None)
        if previous_capture is not None:
            previous_capture.close()
        self._open(proc, TracebackCapture(self, tb, heads.where))

    def finish_traceback(self, tb: Traceback) -> None:
        facts = self.facts
        for kind, rx in classify.NOISE_TEXT:
            if rx.search(tb.message or ""):
                tb.noise = tb.noise or kind
        results = facts.results_line
        if tb.noise is None and results is not None and tb.line > results:
            tb.noise = "after_result"
        if tb.chain:  # merge into the traceback it continues: one error, root cause first
            for earlier in reversed(facts.tracebacks):
                if earlier.process == tb.process:
                    if len(earlier.chain) < 16:
                        earlier.chain.append(tb.text[:1000])
                    return
            tb.chain = []
        if tb.noise:
            self._add(facts.noise, Event(tb.line, tb.noise, tb.text[:500], tb.process), "noise")
        if len(facts.tracebacks) < MAX_TRACEBACKS:
            facts.tracebacks.append(tb)
        else:
            facts.dropped["tracebacks"] = facts.dropped.get("tracebacks", 0) + 1


_OUTPUT_KEYS = ("Generated text", "CompletionOutput(", "begin▁of▁sentence", '"choices"', '"message"', '"delta"', "_ids",
                "token ids", "output ids",
                "0, 0, 0, 0, 0", "\\n", "<s><s>", "<|begin_of_text|><|begin")


def _output_source(content: str, printed: outputs.PrintedOutput) -> str:
    if "Generated text" in content:
        return "generated_text"
    if "CompletionOutput(" in content:
        return "request_output"
    if printed.text is None:
        return "printed_ids"
    if '"choices"' in content or '"message"' in content or '"delta"' in content:
        return "openai_json"
    return "printed_text"


def _may_hold_level(content: str) -> bool:
    return "ERROR" in content or "CRITICAL" in content or "[Error]" in content or "FATAL" in content


def _orphan_exception(content: str) -> str | None:
    """`Type: message` on a line outside any traceback: at the start of the content, or behind what can only be a
    prefix nobody taught the scanner (no words of its own besides an error level)."""
    text = content.strip()
    if _ORPHAN_EXCEPTION.match(text):
        return text[:1000]
    if "exception=" in text:
        m = _EXCEPTION_REPR.search(text)
        if m:
            return f"{m.group('type')}: {m.group('msg')}"
    m = _EXCEPTION_IN_LINE.search(text)
    if m is None or m.start() == 0:
        return None
    before = _PREFIX_PARTS.sub(" ", text[:m.start()])
    if any(ch.isalpha() for ch in before):
        return None
    exc = m.group("exc")
    return exc[:1000] if _ORPHAN_EXCEPTION.match(exc) else None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


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
