"""What the scanner does with the lines it recognised: the probe's markers (stages, PY_EXIT, DSV4_* lines,
diagnostics), outputs printed by people's own scripts, vLLM's engine-start facts, request blocks and tracebacks.
`RecordHandlers` is mixed into `scan.LogParser`, the line engine that finds these lines and hands them over; the
multi-line constructs they open are read by `captures`.

Stdlib only, like the rest of the judge.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from . import classify, markers, outputs, prefixes
from .captures import Capture, ListCapture, RequestCapture, Traceback, TracebackCapture
from .facts import Event, LogFacts
from .printed import READ_ALL_LINES
from .tokens import RequestBlock, VerdictOptions, judge_request
from .values import clean_line, is_nonfinite_value, json_object, parse_decode_list, parse_scalar

MAX_TRACEBACKS = 64
MAX_NOISE = 200
MAX_REQUESTS = 4096  # requests kept in full; later ones are judged on the fly and tallied
MAX_BAD_KEPT = 32  # bad requests past MAX_REQUESTS kept as examples
MAX_DIAG_EXAMPLES = 32
MAX_DIAG_KEYS = 256
MAX_STAGES = 256
MAX_EVENTS = 200

# Ray's wrapped exceptions name the inner type in parentheses: `ray.exceptions.RayTaskError(RuntimeError): ...`.
_ORPHAN_EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)"
                               r"(?:\([\w.]{1,80}\))?)"
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
# A server's 5xx answers: 500 (its engine died), 502/503/504 (nothing behind it answers: down, or gone).
_HTTP_500 = re.compile(r'HTTP/[\d.]+"? 50[0234]\b|\b(?:500 Internal Server Error|502 Bad Gateway|503 Service Unavailable'
                       r'|504 Gateway Time-?out)')
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


class StreamedAnswer:
    """A streamed answer's deltas so far (kept up to outputs.MAX_TEXT characters, counted as they come: a stream of
    a million one-character chunks is linear) and whether any chunk was a piece of a tool call."""

    __slots__ = ("line_no", "parts", "length", "tool_call")

    def __init__(self, line_no: int) -> None:
        self.line_no, self.parts, self.length, self.tool_call = line_no, [], 0, False

    def add(self, delta: str | None) -> None:
        if delta is None:
            self.tool_call = True
        elif self.length < outputs.MAX_TEXT:
            self.parts.append(delta)
            self.length += len(delta)


class RecordHandlers:
    """The handlers of recognised lines, mixed into `scan.LogParser` (which owns the state they use)."""

    facts: LogFacts
    options: VerdictOptions
    _captures: dict[str | None, Capture]
    _engine_ready: bool
    _current_request: RequestBlock | None
    _current_overflow: bool
    _stream: StreamedAnswer | None

    if TYPE_CHECKING:
        def heads(self, frame: str) -> prefixes.Heads: ...

        def _open(self, proc: str | None, capture: Capture) -> None: ...

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
        multi = self._printed_lines.feed(line_no, content)
        if multi is not None:
            self._printed_many(multi)
            return True
        if content.startswith("data:"):
            return self._stream_chunk(line_no, content)
        if not any(key in content for key in _OUTPUT_KEYS) and not _may_be_ids(content):
            if line_no <= READ_ALL_LINES and not self._engine_ready:
                self._labelled.add(line_no, content)  # kept aside; the line goes on to be read as it is
            return False
        found = outputs.read_outputs(content)
        if not found and (nan := outputs.labelled_nonfinite(content)):  # log-probs listed, NaN among them
            self._add(self.facts.nonfinite, Event(line_no, "logprob", nan[:200]), "nonfinite", cap=MAX_DIAG_EXAMPLES)
            return True
        for printed in found:
            if printed.nonfinite:
                self._add(self.facts.nonfinite, Event(line_no, "logprob", printed.nonfinite[:200]), "nonfinite",
                          cap=MAX_DIAG_EXAMPLES)
            self._printed_request(line_no, printed.text, printed.token_ids, _output_source(content, printed))
            if printed.text is not None and not printed.text.strip():  # an empty answer: quote the line it is on
                self.facts.requests[-1].output_repr = content.strip()[:300]
        return bool(found)

    def _printed_many(self, found: list[outputs.PrintedOutput]) -> None:
        for printed in found:
            source = "printed_ids" if printed.text is None else "openai_json"
            self._printed_request(self._printed_lines.first_line, printed.text, printed.token_ids, source)

    def _printed_request(self, line_no: int, text: str | None, ids: list[int] | None, source: str) -> None:
        self._finish_request()
        request = RequestBlock(line=line_no, index=self.facts.request_count, output=text, source=source)
        if ids is not None:
            request.token_ids = ids[:]
            request.n_ids = len(ids)
        if text is None and ids:  # shown as the log shows it: the list's first ids
            request.output_repr = "[" + ", ".join(map(str, ids[:24])) + (", ...]" if len(ids) > 24 else "]")
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
            self._stream = StreamedAnswer(line_no)
        self._stream.add(delta)
        if finished:
            self._end_stream()
        return True

    def _end_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and (stream.length or not stream.tool_call):
            # a stream that only made tool calls said no text, and that is no fault
            self._printed_request(stream.line_no, "".join(stream.parts), None, "openai_stream")

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


_OUTPUT_KEYS = ("Generated text", "Beam ", "Response(text=", "nan", "NaN", "CompletionOutput(", "ChatCompletionMessage(", "CompletionChoice(", "tensor([", "begin▁of▁sentence", '"choices"', '"message"', '"delta"', "_ids",
                "'choices'", "'message'", "generated_text", '"text"', "'usage'", "log_prob", "logprob", "logits",
                "'loss'", "grad_norm", "_loss'", "'rewards/", "'logps/",
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
    if "'choices'" in content or "'message'" in content:
        return "openai_dict"
    return "printed_text"


def _may_be_ids(content: str) -> bool:
    """A line that may be token ids printed without brackets (`7, 7, 7, ...`, a wrapped list's next line)."""
    return content[:1] in "0123456789," and content.count(",") >= 15


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
