"""Multi-line constructs the scanner reads line by line while they are open: a traceback, one request's block, a
token list wrapped over several lines (or one line of millions of ids, fed in pieces)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from . import markers
from .prefixes import Heads
from .tokens import IdStream, RequestBlock


MAX_CAPTURE_LINES = 400
MAX_MESSAGE_LINES = 60
MAX_MESSAGE_CHARS = 4000
EVIDENCE_LINES = 4
MORE, DONE, REJECT = "more", "done", "reject"


@dataclass
class Traceback:
    line: int
    process: str | None
    exc_type: str | None = None
    message: str = ""
    exc_line: int | None = None
    frames: int = 0
    noise: str | None = None  # None: main path; else why it is noise
    chain: list[str] = field(default_factory=list)  # later exceptions of a chained traceback, in order
    context: str = ""  # what the header line said before `Traceback` (SGLang's "Scheduler hit an exception: ")
    last_source: str = ""  # the source line of the innermost frame (an `assert ...` says what was asserted)
    evidence: list[str] = field(default_factory=list)
    level: str | None = None  # the logger level its lines carried, if any
    # ERROR/CRITICAL logger records of the same process just above the header, nearest first: (line, text). They
    # say what happened when the traceback's own exception line is missing (cut paste, split logger record).
    records_above: list[tuple[int, str]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return f"{self.exc_type}: {self.message}" if self.message else (self.exc_type or "")


class Capture:
    """A multi-line construct in progress for one process."""

    lines_seen = 0
    last_line = 0

    def feed(self, line_no: int, heads: Heads) -> str:
        """Take one line. MORE: consumed, keep going; DONE: consumed, finished; REJECT: not ours, finished."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def _ends_message(heads: Heads, where: str | None) -> bool:
    content = heads.content
    return (not content.strip() or (heads.where is not None and heads.where != where)
            or content.startswith(("Traceback", "###", markers.PY_EXIT, "During handling", "The above exception"))
            or markers.FIELD_RE.match(content) is not None or markers.DSV4_RE.match(content) is not None)


class LogParser(Protocol):
    """What a capture asks of the line engine (judge/scan.py LogParser): declared here so the captures need not
    import the engine that drives them."""

    def bos_id(self) -> int: ...

    def finish_traceback(self, tb: Traceback) -> None: ...

    def open_request_block(self, request: RequestBlock) -> None: ...

    def set_decode(self, request: RequestBlock, text: str) -> None: ...

    def set_field(self, request: RequestBlock, key: str, value: str) -> None: ...


class TracebackCapture(Capture):
    def __init__(self, parser: "LogParser", tb: Traceback, where: str | None) -> None:
        self.parser, self.tb, self.where = parser, tb, where
        self.in_message = False
        self.message_lines = 0
        self.after_file = False
        self.recent: deque[str] = deque(maxlen=EVIDENCE_LINES)

    def feed(self, line_no: int, heads: Heads) -> str:
        self.lines_seen += 1
        tb, content = self.tb, heads.content
        if self.in_message:
            if _ends_message(heads, self.where) or self.message_lines >= MAX_MESSAGE_LINES:
                return REJECT
            if len(tb.message) < MAX_MESSAGE_CHARS:
                tb.message = f"{tb.message}\n{content}" if tb.message else content
            self.message_lines += 1
            return MORE
        stripped = content.strip()
        if not stripped or set(stripped) <= set("^~ "):
            return MORE
        if stripped.startswith("File \"") or stripped.startswith("File '"):
            tb.frames += 1
            # A log collector that strips indentation leaves the source line unindented too.
            self.after_file = content[:1] not in (" ", "\t")
            self._remember(stripped)
            if "_report_usage_worker" in content or "usage_lib" in content:
                tb.noise = tb.noise or "usage_thread"
            return MORE
        if content[:1] in (" ", "\t") or self.after_file:
            # The frame's source line (indented, or not when a log collector stripped the indentation).
            self.after_file = False
            tb.last_source = stripped[:300]
            self._remember(stripped)
            return MORE
        if content.startswith("Traceback (most recent call last)"):
            return MORE
        if content.startswith(("During handling of the above exception", "The above exception was the direct")):
            return REJECT  # the traceback ended without its exception line; the next one is chained to it
        tb.exc_line = line_no
        exc_type, _, message = content.partition(":")
        tb.exc_type = exc_type.strip()[:200]
        tb.message = message.strip()[:MAX_MESSAGE_CHARS]
        tb.level = heads.level
        self._remember(content.strip())
        tb.evidence = list(self.recent)
        # Only a message left open (Triton's "at 12:12:") continues on the next lines.
        self.in_message = not tb.message or tb.message.endswith(":")
        return MORE if self.in_message else DONE

    def _remember(self, text: str) -> None:
        self.recent.append(text[:300])

    def close(self) -> None:
        self.parser.finish_traceback(self.tb)


class ListCapture(Capture):
    """A TOKEN_IDS or TOKEN_DECODE list printed over several lines (or one huge line fed in pieces)."""

    def __init__(self, parser: "LogParser", request: RequestBlock, key: str, text: str) -> None:
        self.parser, self.request, self.key = parser, request, key
        self.depth = text.count("[") - text.count("]")
        self.stream = IdStream(request, parser.bos_id()) if key == "TOKEN_IDS" else None
        self.text = text
        if self.stream is not None:
            self.stream.feed(text)

    def feed(self, line_no: int, heads: Heads) -> str:
        self.lines_seen += 1
        content = heads.content
        if (markers.FIELD_RE.match(content) or markers.DSV4_RE.match(content)
                or content.startswith(("###", markers.PY_EXIT, "Traceback"))):
            return REJECT
        self.depth += content.count("[") - content.count("]")
        if self.stream is not None:
            self.stream.feed(" " + content)
        elif len(self.text) < (1 << 20):
            self.text += " " + content.strip()
        return DONE if self.depth <= 0 else MORE

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        else:
            self.parser.set_decode(self.request, self.text)
        self.parser.open_request_block(self.request)


class RequestCapture(Capture):
    """Lines after TOKEN_IDS: the rest of one request's block (FINISH_REASON, TOKEN_DECODE, OUTPUT...)."""

    def __init__(self, parser: "LogParser", request: RequestBlock) -> None:
        self.parser, self.request = parser, request
        self.output_open = False

    def feed(self, line_no: int, heads: Heads) -> str:
        self.lines_seen += 1
        content = heads.content
        m = markers.FIELD_RE.match(content)
        if m:
            key, value = m.group("key"), m.group("value")
            if key == "TOKEN_IDS":
                return REJECT
            self.output_open = key == "OUTPUT"
            self.parser.set_field(self.request, key, value)
            return MORE
        if self.output_open and not (markers.DSV4_RE.match(content) or heads.level is not None
                                     or content.startswith(("###", markers.PY_EXIT, "Traceback", markers.DIAG,
                                                            "REQUEST"))):
            output = self.request.output or ""
            if len(output) < (1 << 16):
                self.request.output = output + "\n" + content
            return MORE
        return REJECT
