"""What server.log says about a serve run: did the server end, and what ended it (issue 29).

vLLM logs far more errors than the ones that end it, and a serve job stops its own server:
  - a request the server refuses (HTTP 400: a prompt over max_model_len, an id out of the vocabulary) is logged as a
    traceback in the API server (VLLMValidationError), and the server goes on serving: a request failure, not a death;
  - the job stops the server with SIGINT (then SIGTERM, SIGKILL): a KeyboardInterrupt traceback (a server stopped
    while it starts), or an EngineDeadError from a shutdown that kills EngineCore first (vllm#48745), are the job's
    own doing. The job marks the moment in server.log (JOB_STOP_MARK, runtime/dsv4rt/serverlog.py); older logs
    have vLLM's own shutdown lines (SHUTDOWN_MARKS). Nothing after the first of them is a root cause;
  - an engine that dies under load (EngineCore's "fatal error" with its traceback, a dead engine process) is the root
    cause even when the API server logged other errors first (a KeyError in a request handler at 20,000 streams).
`read_story` sorts server.log's errors into those three; serve_files.py decides the status from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .rules import Blocker, main_path_errors, root_cause
from .scan import LogFacts

# Where the server's shutdown begins in server.log (vLLM 0.1x-0.3x launcher, uvicorn, older vLLM).
SHUTDOWN_MARKS: tuple[bytes, ...] = (b"shutdown triggered", b"Shutting down", b"Gracefully stopping")
JOB_STOP_MARK = b"### dsv4: the job stops the server"  # written by the job (runtime/dsv4rt/server.py)
ALREADY_ENDED = b"it had already ended"  # ... in that line: the server was dead before the job stopped it
MAX_LINE_BYTES = 4 << 20
MAX_MARK_SCAN_LINES = 1 << 22
SAME_RECORD_LINES = 80  # a logged error and the traceback under it
# The job's own signals at stop, seen as exceptions in server.log.
SIGNAL_NOISE = re.compile(r"^(?:\w+\.)*(?:KeyboardInterrupt|SystemExit)\b|^\s*KeyboardInterrupt\s*$")
ENGINE_DEATH = re.compile(r"EngineCore encountered a fatal error|Engine process \(pid \d+\) died|already dead|"
                          r"EngineCore.*(?:died|exited) unexpectedly|EngineDeadError")
# A refused request: an HTTP 4xx, or vLLM's error event with a 4xx code in the stream.
REFUSED = re.compile(r"^HTTP 4\d\d\b|^error event in the stream: (?:[\w.]+: )?4\d\d\b")


def refused(error: str | None) -> bool:
    return bool(error) and bool(REFUSED.search(error))


@dataclass
class Marks:
    shutdown: int | None = None  # the first line where a shutdown began (vLLM's or the job's)
    job_stop: int | None = None  # the job's stop line
    ended_before_stop: bool = False  # the job found the server already dead


@dataclass
class ServerStory:
    marks: Marks
    cause: Blocker | None = None  # the root cause before the shutdown, signal noise left out
    engine_death: Blocker | None = None  # the engine's own fatal error (or the line saying it died)
    before: list[Blocker] = field(default_factory=list)  # errors while the server was serving
    after: list[Blocker] = field(default_factory=list)  # errors of its shutdown, or the job's signals


def read_marks(path: Path) -> Marks:
    """The shutdown lines of server.log, read once and bounded (a line at most MAX_LINE_BYTES at a time)."""
    marks = Marks()
    try:
        with path.open("rb") as f:
            number = 0
            while number < MAX_MARK_SCAN_LINES:
                line = f.readline(MAX_LINE_BYTES)
                if not line:
                    break
                number += 1
                if JOB_STOP_MARK in line and marks.job_stop is None:
                    marks.job_stop = number
                    marks.ended_before_stop = ALREADY_ENDED in line
                    marks.shutdown = marks.shutdown or number
                    break  # nothing after the job's stop can move either line
                if marks.shutdown is None and any(mark in line for mark in SHUTDOWN_MARKS):
                    marks.shutdown = number
                while line and not line.endswith(b"\n"):
                    line = f.readline(MAX_LINE_BYTES)
    except OSError:
        pass
    return marks


def _noise(error: Blocker) -> bool:
    """The job's own signal: a KeyboardInterrupt (or SystemExit) as the exception, read from its type, or the first
    or last line of its message (a traceback cut before its exception line ends in a bare `KeyboardInterrupt`)."""
    lines = [line for line in (error.message or "").splitlines() if line.strip()]
    said = [lines[0], lines[-1]] if lines else []
    return ((error.exc_type or "").rsplit(".", 1)[-1] in ("KeyboardInterrupt", "SystemExit")
            or any(SIGNAL_NOISE.search(line) for line in said))


def _engine_death(errors: list[Blocker]) -> Blocker | None:
    """The engine's own error: EngineCore's traceback (not the API server's EngineDeadError pointing at it), else a
    worker's death, else the line that says the engine died."""
    in_engine = [e for e in errors if (e.process or "").startswith("EngineCore")]
    own = [e for e in in_engine if not e.wrapper]
    if own:
        return sharpest(own)
    died = [e for e in errors if e.family == "worker_death"]
    if died:
        return died[0]
    said = [e for e in errors if ENGINE_DEATH.search(e.message or "")]  # an EngineDeadError with no cause above
    return said[0] if said else None


def sharpest(errors: list[Blocker]) -> Blocker | None:
    """root_cause, but a logger's line ("Error in completion stream generator.") gives way to the exception its
    traceback ends in, logged by the same process within SAME_RECORD_LINES lines after it."""
    cause = root_cause(errors)
    if cause is None or cause.kind != "logged_error":
        return cause
    return next((e for e in errors if e.exc_type and e.process == cause.process
                 and cause.line < e.line <= cause.line + SAME_RECORD_LINES and not e.wrapper), cause)


def read_story(facts: LogFacts, path: Path | None) -> ServerStory:
    errors = main_path_errors(facts)
    marks = read_marks(path) if errors and path is not None else Marks()
    cut = marks.shutdown
    story = ServerStory(marks)
    for error in errors:
        (story.after if (cut is not None and error.line > cut) or _noise(error) else story.before).append(error)
    story.engine_death = _engine_death(story.before)
    story.cause = story.engine_death or sharpest(story.before)
    for blocker in (story.cause, story.engine_death):
        if blocker is not None and not (blocker.evidence and blocker.evidence[0].startswith("server.log line")):
            blocker.evidence = [f"server.log line {blocker.line}", *blocker.evidence]
    return story


def first_line(blocker: Blocker, width: int = 300) -> str:
    return blocker.message.splitlines()[0][:width] if blocker.message else blocker.kind
