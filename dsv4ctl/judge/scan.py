"""Streaming parser for raw job logs: bytes in, `LogFacts` out, in constant memory.

Stdlib only: the job-side probe imports this module in a venv without the CLI's dependencies.

How it stays fast on huge logs: it does not look at every line. It jumps between a few anchors found with
`bytes.find` (probe markers, `Traceback`, device errors, slurmstepd) and only switches to line-by-line reading while
a multi-line construct is open (a traceback, a request block, a wrapped token list). vLLM's engine-start lines
(model load, KV cache size, init time, backends) are only looked for until the engine is ready.

Tolerated input: ANSI colour codes, `\\r` progress bars sharing a physical line, CRLF, invalid UTF-8, vLLM's
`(Worker_TP3 pid=N) ` prefixes, and ranks interleaving their tracebacks line by line.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import IO, Any

CHUNK_SIZE = 1 << 20  # small enough to stay in cache across the read, the anchor pass and the line count
MAX_TRACEBACKS = 64
MAX_NOISE = 200
MAX_REQUESTS = 4096
MAX_DIAG_EXAMPLES = 32
MAX_CAPTURE_LINES = 400
MAX_MESSAGE_LINES = 60
CAPTURE_IDLE_LINES = 200  # a capture whose process printed nothing for this many lines is closed

BOS_TEXT = "<｜begin▁of▁sentence｜>"

# Anchors scanned for in the whole log, always.
_ANCHORS: tuple[bytes, ...] = (
    b"###",
    b"TOKEN_IDS",
    b"DSV4_",
    b"ENGINE_READY",
    b"PY_EXIT=",
    b"Traceback (most recent call last)",
    b"Device-side assert",
    b"Memory access fault",
    b"HSA_STATUS_ERROR",
    b"slurmstepd",
    b"died unexpectedly",
)
# Anchors of vLLM's engine-start lines: dropped once the engine is ready, they never occur during generation.
_ENGINE_ANCHORS: tuple[bytes, ...] = (
    b"Model loading took",
    b"KV cache",
    b"init engine (",
    b"expert_dtype",
    b"MoE backend",
    b"indexer cache",
)

_ALL_ANCHORS = _ANCHORS + _ENGINE_ANCHORS

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# vLLM's `(Worker_TP3 pid=5123) ` and torch.distributed's `[rank0]: ` line prefixes.
_PREFIX = re.compile(r"^(?:\((?P<proc>[A-Za-z][\w.\-]*)(?: pid=(?P<pid>\d+))?\) ?|\[(?P<rank>rank\d+)\]: ?)")
_VLLM_LINE = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ")
_STAGE = re.compile(r"^### STAGE:\s*(?P<name>.*?)\s*$")
_ENGINE_READY = re.compile(r"ENGINE_READY in (?P<s>[0-9.]+)\s*s")
_PY_EXIT = re.compile(r"^PY_EXIT=(?P<rc>-?\d+)\s*$")
_FIELD = re.compile(r"^(?P<key>TOKEN_IDS|FINISH_REASON|TOKEN_DECODE|OUTPUT_REPR|OUTPUT|STOP_REASON|LOGPROBS)"
                    r"(?:\[(?P<idx>\d+)\])?:\s?(?P<value>.*)$")
_REQUEST = re.compile(r"^(?:REQUEST|### REQUEST)[ :]\s*(?P<idx>\d+)")
_DSV4 = re.compile(r"^(?P<key>DSV4_VERDICT|DSV4_METRICS|DSV4_EXPECT|DSV4_SETUP_ERROR|DSV4_JOB|DSV4_FAULT):\s*"
                   r"(?P<value>.*?)\s*$")
_DIAG = re.compile(r"\[DSV4_DIAG\](?:\[(?P<tag>[^\]]+)\])?\s*(?P<key>[\w.]+)\s*[=:]\s*(?P<value>.*?)\s*$")
_MODEL_LOAD = re.compile(r"Model loading took (?P<gib>[0-9.]+) GiB(?: memory)? and (?P<s>[0-9.]+) seconds")
_KV_TOKENS = re.compile(r"(?P<pool>[A-Za-z +]+?) KV cache size: (?P<n>[0-9,]+) tokens")
_INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<s>[0-9.]+) s")
_EXPERT = re.compile(r"expert_dtype resolved to '(?P<v>[^']+)'")
_MOE = re.compile(r"Using '(?P<v>[^']+)' (?P<kind>\w+) MoE backend")
_KV_FORMAT = re.compile(r"Using (?P<v>.+?) KV cache format")
_INDEXER = re.compile(r"Using (?P<v>\w+) indexer cache")
_DEVICE = (
    ("device_assert", re.compile(r"Device-side assert")),
    ("gpu_memory_fault", re.compile(r"Memory access fault by GPU|VMFault")),
    ("hsa_error", re.compile(r"HSA_STATUS_ERROR\w*")),
)
_DEVICE_EXC = re.compile(r"HIP error|hipError\w+|CUDA error|cudaError\w+|illegal memory access|Device-side assert"
                         r"|HSA_STATUS_ERROR|Memory access fault")
_STEPD = (
    ("time_limit", re.compile(r"CANCELLED AT \S+ DUE TO TIME LIMIT")),
    ("preempted", re.compile(r"CANCELLED AT \S+ DUE TO PREEMPTION")),
    ("node_fail", re.compile(r"DUE TO NODE FAILURE")),
    ("oom_kill", re.compile(r"oom-kill event|Exceeded job memory limit|OUT_OF_MEMORY")),
    ("cancelled", re.compile(r"CANCELLED AT")),
)


@dataclass
class Traceback:
    line: int
    process: str | None
    exc_type: str | None = None
    message: str = ""
    exc_line: int | None = None
    frames: int = 0
    noise: str | None = None  # None: main path; else why it is noise
    chain: list[str] = field(default_factory=list)  # earlier exceptions of a chained traceback

    @property
    def text(self) -> str:
        return f"{self.exc_type}: {self.message}" if self.message else (self.exc_type or "")


@dataclass
class RequestBlock:
    line: int
    index: int | None = None
    token_ids: list[int] = field(default_factory=list)
    ids_gaps: list[int] = field(default_factory=list)  # where the log abbreviated the list with `...`
    ids_unparsed: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    token_decode: list[str] | None = None
    output_repr: str | None = None
    output: str | None = None
    logprobs: list[list[list[float]]] | None = None  # per position, the top-N [token_id, logprob] pairs


@dataclass
class Event:
    line: int
    kind: str
    text: str
    process: str | None = None


@dataclass
class LogFacts:
    stages: list[tuple[int, str]] = field(default_factory=list)
    engine_ready_s: float | None = None
    init_engine_s: float | None = None
    model_load_gib: float | None = None
    model_load_s: float | None = None
    kv_cache_tokens: int | None = None
    expert_dtype: str | None = None
    moe_backend: str | None = None
    kv_format: str | None = None
    indexer_cache: str | None = None
    requests: list[RequestBlock] = field(default_factory=list)
    probe_verdict: str | None = None
    probe_verdict_line: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    metrics_line: int | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    py_exit: int | None = None
    py_exit_line: int | None = None
    setup_errors: list[Event] = field(default_factory=list)
    diag_counts: dict[str, int] = field(default_factory=dict)
    diag_last: dict[str, str] = field(default_factory=dict)  # "proc:key" -> last value
    nonfinite: list[Event] = field(default_factory=list)
    tracebacks: list[Traceback] = field(default_factory=list)
    device_errors: list[Event] = field(default_factory=list)
    scheduler_events: list[Event] = field(default_factory=list)
    worker_deaths: list[Event] = field(default_factory=list)
    noise: list[Event] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # records past a cap: counted, not kept
    lines: int = 0
    ends_mid_line: bool = False

    @property
    def results_line(self) -> int | None:
        """The line where the run's results were complete: probe verdict, else metrics."""
        return self.probe_verdict_line or self.metrics_line


# ---- anchor finders -------------------------------------------------------------------------------------------------


class _PythonFinder:
    """Every anchor occurrence by `bytes.find`, one pass per anchor: stdlib only (the job venv), ~2 GB/s a pass."""

    def __init__(self, anchors: tuple[bytes, ...]) -> None:
        self.anchors = anchors

    def find(self, buf: bytes, end: int) -> list[tuple[int, int]]:
        hits = []
        for index, anchor in enumerate(self.anchors):
            at = buf.find(anchor, 0, end)
            while at >= 0:
                hits.append((at, index))
                at = buf.find(anchor, at + 1, end)
        hits.sort()
        return hits


class _AhoCorasickFinder:
    """All anchors in one SIMD-prefiltered pass (ahocorasick-rs, leftmost-first: several GB/s). Overlapping
    occurrences are reported once, which is all the line-level scan needs."""

    def __init__(self, anchors: tuple[bytes, ...]) -> None:
        import ahocorasick_rs

        self.automaton = ahocorasick_rs.BytesAhoCorasick(list(anchors),
                                                         matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST)

    def find(self, buf: bytes, end: int) -> list[tuple[int, int]]:
        view = memoryview(buf)[:end]
        try:
            return [(start, index) for index, start, _ in self.automaton.find_matches_as_indexes(view)]
        finally:
            view.release()


_FINDERS: dict[tuple[bool, bool], _PythonFinder | _AhoCorasickFinder] = {}
USE_ACCELERATOR = True


def finder(engine_ready: bool) -> _PythonFinder | _AhoCorasickFinder:
    """The anchor finder for the current phase: start-up anchors are only wanted until the engine is ready."""
    key = (engine_ready, USE_ACCELERATOR)
    if key not in _FINDERS:
        anchors = _ANCHORS if engine_ready else _ALL_ANCHORS
        made: _PythonFinder | _AhoCorasickFinder = _PythonFinder(anchors)
        if USE_ACCELERATOR:
            try:
                made = _AhoCorasickFinder(anchors)
            except ImportError:  # the job venv has no accelerator: same hits, slower
                pass
        _FINDERS[key] = made
    return _FINDERS[key]


# ---- value parsing ------------------------------------------------------------------------------------------------


def parse_token_ids(text: str) -> tuple[list[int], list[int], list[str]]:
    """Parse `[1, 2, ..., 0]` leniently: ints kept, where `...` cut the list noted (as the index of the id that
    follows the gap), anything else (log garbling) listed."""
    body = text.strip().strip("[]")
    ids: list[int] = []
    gaps: list[int] = []
    bad: list[str] = []
    for item in body.split(","):
        item = item.strip().strip("[]").strip()
        if not item:
            continue
        if item in ("...", "…"):
            gaps.append(len(ids))
        elif re.fullmatch(r"-?\d+", item):
            ids.append(int(item))
        else:
            bad.append(item)
    return ids, gaps, bad


def parse_decode_list(text: str) -> list[str]:
    """Parse a TOKEN_DECODE list; bare names like BOS (hand-written logs) are kept as their text."""
    try:
        value = ast.literal_eval(text.strip())
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    items = re.findall(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|([^,\[\]\s][^,\[\]]*)", text)
    return [a or b or c.strip() for a, b, c in items if (a or b or c.strip())]


def parse_scalar(text: str) -> Any:
    text = text.strip()
    if text in ("True", "False", "true", "false"):
        return text in ("True", "true")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def is_nonfinite_value(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value) or math.isinf(value)
    if isinstance(value, str):
        return bool(re.search(r"(?<![A-Za-z])(nan|inf)(?![A-Za-z])", value, re.IGNORECASE))
    return False


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _split_prefix(text: str) -> tuple[str | None, str]:
    m = _PREFIX.match(text)
    if m:
        return m.group("proc") or m.group("rank"), text[m.end():]
    return None, text


def clean_line(raw: bytes) -> str:
    """A physical line as text: CR and colour codes removed; `\\r`-joined progress frames keep their last frame
    unless an earlier frame carries more (a marker printed before a progress bar redraws over it)."""
    text = raw.decode("utf-8", errors="replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        frames = [f for f in text.split("\r") if f.strip()]
        text = frames[-1] if len(frames) == 1 else "\r".join(frames)
    return text.rstrip()


# ---- multi-line captures --------------------------------------------------------------------------------------------


MORE, DONE, REJECT = "more", "done", "reject"


class _Capture:
    """A multi-line construct in progress for one process prefix."""

    lines_seen = 0
    last_line = 0

    def feed(self, line_no: int, content: str) -> str:
        """Take one line. MORE: consumed, keep going; DONE: consumed, finished; REJECT: not ours, finished."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class _TracebackCapture(_Capture):
    def __init__(self, parser: "LogParser", tb: Traceback) -> None:
        self.parser = parser
        self.tb = tb
        self.in_message = False
        self.message_lines = 0

    def feed(self, line_no: int, content: str) -> str:
        self.lines_seen += 1
        tb = self.tb
        if not self.in_message:
            if not content.strip():
                return MORE
            if content[:1] in (" ", "\t"):
                if content.lstrip().startswith("File "):
                    tb.frames += 1
                    if "_report_usage_worker" in content or "usage_lib" in content:
                        tb.noise = tb.noise or "usage_thread"
                return MORE
            if content.startswith("Traceback (most recent call last)"):
                return MORE
            tb.exc_line = line_no
            exc_type, _, message = content.partition(":")
            tb.exc_type = exc_type.strip()
            tb.message = message.strip()
            # Only a message left open (Triton's "at 12:12:") continues on the next lines.
            self.in_message = not tb.message or tb.message.endswith(":")
            return MORE if self.in_message else DONE
        # Continuation of the exception message (Triton prints the failing source under it).
        if (not content.strip() or _VLLM_LINE.match(content) or content.startswith(("Traceback", "###", "PY_EXIT="))
                or _FIELD.match(content) or _DSV4.match(content) or content.startswith("During handling")
                or content.startswith("The above exception") or self.message_lines >= MAX_MESSAGE_LINES):
            return REJECT
        tb.message = f"{tb.message}\n{content}" if tb.message else content
        self.message_lines += 1
        return MORE

    def close(self) -> None:
        self.parser._finish_traceback(self.tb)


class _ListCapture(_Capture):
    """A Python list printed over several lines (TOKEN_IDS / TOKEN_DECODE wrapped by the printer)."""

    def __init__(self, parser: "LogParser", request: RequestBlock, key: str, text: str) -> None:
        self.parser, self.request, self.key, self.text = parser, request, key, text

    def feed(self, line_no: int, content: str) -> str:
        self.lines_seen += 1
        if _FIELD.match(content) or _DSV4.match(content) or content.startswith(("###", "PY_EXIT=", "Traceback")):
            return REJECT
        self.text += " " + content.strip()
        return DONE if _balanced(self.text) else MORE

    def close(self) -> None:
        self.parser._set_list(self.request, self.key, self.text)


class _RequestCapture(_Capture):
    """Lines after TOKEN_IDS: the rest of one request's block (FINISH_REASON, TOKEN_DECODE, OUTPUT...)."""

    def __init__(self, parser: "LogParser", request: RequestBlock) -> None:
        self.parser, self.request = parser, request
        self.output_open = False

    def feed(self, line_no: int, content: str) -> str:
        self.lines_seen += 1
        m = _FIELD.match(content)
        if m:
            key, value = m.group("key"), m.group("value")
            if key == "TOKEN_IDS":
                return REJECT
            self.output_open = key == "OUTPUT"
            self.parser._set_field(self.request, key, value, line_no)
            return MORE
        if self.output_open and not (_DSV4.match(content) or content.startswith(("###", "PY_EXIT=", "Traceback",
                                                                                 "[DSV4_DIAG]", "REQUEST"))
                                     or _VLLM_LINE.match(content)):
            self.request.output = (self.request.output or "") + "\n" + content
            return MORE
        return REJECT


def _balanced(text: str) -> bool:
    return text.count("[") <= text.count("]")


# ---- the parser -----------------------------------------------------------------------------------------------------


class LogParser:
    """Feed bytes in any chunking with `feed`, then call `close` for the facts."""

    def __init__(self) -> None:
        self.facts = LogFacts()
        self._carry = b""
        self._line_no = 1  # number of the next line to be read
        self._captures: dict[str | None, _Capture] = {}
        self._engine_ready = False
        self._current_request: RequestBlock | None = None

    # -- feeding --

    def feed(self, data: bytes) -> None:
        if not data:
            return
        buf = self._carry + data if self._carry else data
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            self._carry = buf
            if len(self._carry) > CHUNK_SIZE:  # a pathological line: judge its head, drop the rest
                self._scan(self._carry[:CHUNK_SIZE] + b"\n", CHUNK_SIZE + 1)
                self._carry = b""
            return
        self._carry = buf[cut:]
        self._scan(buf, cut)

    def feed_lines(self, buf: bytes | bytearray, end: int) -> None:
        """Scan buf[:end], which must end with a newline (a caller that owns its buffer skips feed's copy)."""
        if self._carry:
            self.feed(bytes(buf[:end]))
        else:
            self._scan(buf, end)

    def close(self) -> LogFacts:
        if self._carry:
            self.facts.ends_mid_line = True
            tail = self._carry + b"\n"
            self._scan(tail, len(tail))
            self._carry = b""
        for capture in list(self._captures.values()):
            capture.close()
        self._captures.clear()
        # Captures finish out of order when ranks interleave: keep records in log order.
        self.facts.tracebacks.sort(key=lambda tb: tb.line)
        self.facts.noise.sort(key=lambda e: e.line)
        self.facts.lines = self._line_no - 1
        return self.facts

    def _scan(self, buf: bytes, end: int) -> None:
        """Scan the complete lines in buf[:end]. Jumps from anchor hit to anchor hit unless a capture wants every
        line; line numbers come from counting the newlines jumped over."""
        engine_was_ready = self._engine_ready
        hits = finder(engine_was_ready).find(buf, end)
        n_base = len(_ANCHORS)
        pos = hi = 0
        while pos < end:
            if self._captures:
                stop = buf.find(b"\n", pos, end)
                self._line(self._line_no, buf[pos:stop], buf, pos)
                self._line_no += 1
                pos = stop + 1
                if not self._line_no % 64:
                    self._expire_captures()
                continue
            while hi < len(hits) and (hits[hi][0] < pos or (self._engine_ready and hits[hi][1] >= n_base)):
                hi += 1  # already read, or a start-up anchor after the engine is up
            if hi == len(hits):
                self._line_no += buf.count(b"\n", pos, end)
                return
            hit = hits[hi][0]
            start = buf.rfind(b"\n", pos, hit) + 1 or pos
            self._line_no += buf.count(b"\n", pos, start)
            stop = buf.find(b"\n", hit, end)
            self._line(self._line_no, buf[start:stop], buf, start)
            self._line_no += 1
            pos = stop + 1

    def _open(self, proc: str | None, capture: _Capture) -> None:
        capture.last_line = self._line_no
        self._captures[proc] = capture

    def _expire_captures(self) -> None:
        """Close captures of processes that went quiet (a rank that died mid-traceback), back to anchor jumps."""
        for proc, capture in list(self._captures.items()):
            if self._line_no - capture.last_line > CAPTURE_IDLE_LINES:
                del self._captures[proc]
                capture.close()

    # -- one line --

    def _line(self, line_no: int, raw: bytes, buf: bytes, start: int) -> None:
        text = clean_line(raw)
        for frame in text.split("\r") if "\r" in text else (text,):
            proc, content = _split_prefix(frame)
            capture = self._captures.get(proc)
            if capture is not None:
                capture.last_line = line_no
                state = capture.feed(line_no, content) if capture.lines_seen < MAX_CAPTURE_LINES else REJECT
                if state == MORE:
                    continue
                if self._captures.get(proc) is capture:
                    del self._captures[proc]
                capture.close()
                if state == DONE:
                    continue
            self._dispatch(line_no, proc, content, buf, start)

    @staticmethod
    def _previous_line(proc: str | None, buf: bytes, start: int) -> str:
        """The nearest non-blank line of the same process above `start`, looking back a few lines in the buffer."""
        end = start - 1
        for _ in range(4):
            if end < 0:
                break
            begin = buf.rfind(b"\n", 0, end) + 1
            p, content = _split_prefix(clean_line(buf[begin:end]))
            if content.strip() and p == proc:
                return content
            end = begin - 1
        return ""

    def _dispatch(self, line_no: int, proc: str | None, content: str, buf: bytes, start: int) -> None:
        facts = self.facts
        head = content[:1]
        if head == "#" and content.startswith("### STAGE:"):
            facts.stages.append((line_no, _STAGE.match(content).group("name")))
            if facts.stages[-1][1].startswith("generate"):
                self._engine_ready = True
            return
        if content.startswith("Traceback (most recent call last)"):
            self._start_traceback(line_no, proc, buf, start)
            return
        m = _FIELD.match(content)
        if m and m.group("key") == "TOKEN_IDS":
            self._start_request(line_no, m.group("idx"), m.group("value"))
            return
        if "ENGINE_READY" in content:
            m = _ENGINE_READY.search(content)
            if m:
                facts.engine_ready_s = float(m.group("s"))
                self._engine_ready = True
                return
        m = _PY_EXIT.match(content)
        if m:
            facts.py_exit, facts.py_exit_line = int(m.group("rc")), line_no
            return
        if "DSV4_" in content:
            if self._dsv4_line(line_no, proc, content):
                return
        for kind, rx in _DEVICE:
            m = rx.search(content)
            if m:
                self._add(facts.device_errors, Event(line_no, kind, content.strip(), proc), "device_errors")
                return
        if "died unexpectedly" in content:  # vLLM's word for a worker killed from outside (OOM killer, signal)
            self._add(facts.worker_deaths, Event(line_no, "worker_died", content.strip(), proc), "worker_deaths")
            return
        if "slurmstepd" in content:
            for kind, rx in _STEPD:
                if rx.search(content):
                    self._add(facts.scheduler_events, Event(line_no, kind, content.strip(), proc), "scheduler")
                    return
        if not self._engine_ready:
            self._engine_line(content)

    def _dsv4_line(self, line_no: int, proc: str | None, content: str) -> bool:
        facts = self.facts
        m = _DIAG.search(content)
        if m:
            self._diag(line_no, m.group("tag") or proc, m.group("key"), m.group("value"))
            return True
        m = _DSV4.match(content)
        if not m:
            return False
        key, value = m.group("key"), m.group("value")
        if key == "DSV4_VERDICT":
            facts.probe_verdict, facts.probe_verdict_line = value.split()[0] if value else "", line_no
        elif key == "DSV4_METRICS":
            obj = _json_object(value)
            if obj is not None:
                facts.metrics.update(obj)
                facts.metrics_line = line_no
                if any(is_nonfinite_value(v) for v in obj.values() if isinstance(v, float)):
                    self._add(facts.nonfinite, Event(line_no, "metrics", value, proc), "nonfinite")
        elif key == "DSV4_EXPECT":
            facts.expect.update(_json_object(value) or {})
        elif key == "DSV4_SETUP_ERROR":
            facts.setup_errors.append(Event(line_no, "setup", value, proc))
        return True

    def _engine_line(self, content: str) -> None:
        facts = self.facts
        if "took" in content:
            m = _MODEL_LOAD.search(content)
            if m:
                facts.model_load_gib, facts.model_load_s = float(m.group("gib")), float(m.group("s"))
                return
            m = _INIT_ENGINE.search(content)
            if m:
                facts.init_engine_s = float(m.group("s"))
                return
        m = _KV_TOKENS.search(content)
        if m:
            facts.kv_cache_tokens = int(m.group("n").replace(",", ""))
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
        facts.diag_counts[key] = facts.diag_counts.get(key, 0) + 1
        facts.diag_last[f"{proc or '-'}:{key}"] = value[:200]
        parsed = parse_scalar(value)
        bad = (key.endswith("_finite") and parsed is False) or (
            not key.endswith(("_shape", "_stride", "shape", "stride")) and is_nonfinite_value(parsed))
        if bad:
            self._add(facts.nonfinite, Event(line_no, key, f"{key} = {value}", proc), "nonfinite",
                      cap=MAX_DIAG_EXAMPLES)

    def _start_request(self, line_no: int, idx: str | None, value: str) -> None:
        facts = self.facts
        request = RequestBlock(line=line_no, index=int(idx) if idx else len(facts.requests))
        if len(facts.requests) < MAX_REQUESTS:
            facts.requests.append(request)
        else:
            facts.dropped["requests"] = facts.dropped.get("requests", 0) + 1
        self._current_request = request
        self._set_field(request, "TOKEN_IDS", value, line_no)
        if None not in self._captures:
            self._open(None, _RequestCapture(self, request))

    def _set_field(self, request: RequestBlock, key: str, value: str, line_no: int) -> None:
        if key in ("TOKEN_IDS", "TOKEN_DECODE") and not _balanced(value):
            # A wrapped list: read on until its bracket closes, then hand back to the request block.
            self._open(None, _ListCapture(self, request, key, value))
            return
        if key in ("TOKEN_IDS", "TOKEN_DECODE"):
            self._set_list(request, key, value)
        elif key == "FINISH_REASON":
            request.finish_reason = value.strip() or None
        elif key == "OUTPUT_REPR":
            request.output_repr = value
        elif key == "OUTPUT":
            request.output = value
        elif key == "LOGPROBS":
            try:
                request.logprobs = json.loads(value)
            except (ValueError, RecursionError):
                request.logprobs = None

    def _set_list(self, request: RequestBlock, key: str, text: str) -> None:
        if key == "TOKEN_IDS":
            request.token_ids, request.ids_gaps, request.ids_unparsed = parse_token_ids(text)
        else:
            request.token_decode = parse_decode_list(text)
        if self._captures.get(None) is None or isinstance(self._captures.get(None), _ListCapture):
            self._open(None, _RequestCapture(self, request))

    def _start_traceback(self, line_no: int, proc: str | None, buf: bytes, start: int) -> None:
        tb = Traceback(line=line_no, process=proc)
        previous = self._previous_line(proc, buf, start)
        if "_report_usage_worker" in previous:
            tb.noise = "usage_thread"
        elif previous.startswith(("Exception ignored in", "Error in atexit")):
            tb.noise = "shutdown"
        elif previous.startswith(("During handling of the above exception",
                                  "The above exception was the direct cause")):
            tb.chain = ["(chained)"]
        previous_capture = self._captures.pop(proc, None)
        if previous_capture is not None:
            previous_capture.close()
        self._open(proc, _TracebackCapture(self, tb))

    def _finish_traceback(self, tb: Traceback) -> None:
        facts = self.facts
        if tb.message and "libcudart is not loaded" in tb.message:
            tb.noise = tb.noise or "shutdown"
        results = facts.results_line
        if tb.noise is None and results is not None and tb.line > results:
            tb.noise = "after_result"
        if tb.chain:  # merge into the traceback it continues: one error, root cause first
            for earlier in reversed(facts.tracebacks):
                if earlier.process == tb.process:
                    earlier.chain.append(tb.text)
                    return
        if tb.noise:
            self._add(facts.noise, Event(tb.line, tb.noise, tb.text, tb.process), "noise")
        if len(facts.tracebacks) < MAX_TRACEBACKS:
            facts.tracebacks.append(tb)
        else:
            facts.dropped["tracebacks"] = facts.dropped.get("tracebacks", 0) + 1


def parse_stream(stream: IO[bytes], chunk_size: int = CHUNK_SIZE) -> LogFacts:
    """Parse a binary stream with one reused buffer: `readinto`, scan the complete lines, keep the partial last
    line at the front. (Concatenating fresh 8 MiB chunks cost a third of the parse in page faults.)"""
    parser = LogParser()
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
            if filled == len(buf):  # one line longer than the buffer: hand it to feed(), which caps it
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


def parse_bytes(data: bytes) -> LogFacts:
    parser = LogParser()
    parser.feed(data)
    return parser.close()


def parse_file(path: str) -> LogFacts:
    with open(path, "rb") as stream:
        return parse_stream(stream)


def device_like(message: str) -> bool:
    """Whether an exception's text reports a device-side failure (HIP/CUDA error, illegal access...)."""
    return bool(_DEVICE_EXC.search(message))
