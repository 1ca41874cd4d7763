"""What the scanner found in a log: plain records, no behaviour beyond a few derived views."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .captures import Traceback
from .tokens import RequestBlock, RequestVerdict


@dataclass
class Event:
    line: int
    kind: str
    text: str
    process: str | None = None
    family: str | None = None
    evidence: list[str] = field(default_factory=list)


@dataclass
class RequestTally:
    """Requests past MAX_REQUESTS: judged one by one as they completed, kept only as counts and examples."""

    judged: int = 0
    bad: int = 0
    examples: list[RequestVerdict] = field(default_factory=list)


@dataclass
class LogFacts:
    stages: list[tuple[int, str]] = field(default_factory=list)
    last_stage: tuple[int, str] | None = None  # kept even when `stages` is capped
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
    overflow: RequestTally = field(default_factory=RequestTally)
    probe_verdict: str | None = None
    probe_verdict_line: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    metrics_line: int | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    py_exit: int | None = None
    py_exit_line: int | None = None
    job_fields: dict[str, str] = field(default_factory=dict)  # DSV4_JOB's key=value pairs (job, array_task...)
    serve: dict[str, Any] = field(default_factory=dict)  # mode serve: the DSV4_SERVE line (load, port, file names)
    request_errors: list[Event] = field(default_factory=list)  # mode serve: DSV4_REQUEST_ERROR lines (capped)
    request_error_count: int = 0
    setup_errors: list[Event] = field(default_factory=list)
    diag_counts: dict[str, int] = field(default_factory=dict)
    diag_last: dict[str, str] = field(default_factory=dict)  # "proc:key" -> last value
    nonfinite: list[Event] = field(default_factory=list)
    tracebacks: list[Traceback] = field(default_factory=list)
    line_errors: list[Event] = field(default_factory=list)  # device/collective/death lines outside tracebacks
    orphan_exceptions: list[Event] = field(default_factory=list)  # `Type: message` lines outside any traceback
    logged_errors: list[Event] = field(default_factory=list)  # ERROR/CRITICAL logger records naming an error
    http_500_count: int = 0  # a server's `... HTTP/1.1" 500 Internal Server Error` access lines
    http_500_first: Event | None = None
    scheduler_events: list[Event] = field(default_factory=list)
    unreadable: list[Event] = field(default_factory=list)  # marker lines that could not be read: never a pass
    noise: list[Event] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # records past a cap: counted, not kept
    lines: int = 0
    ends_mid_line: bool = False
    prefixes: list[str] = field(default_factory=list)  # the outer line prefixes learned (regex text)
    wrap_width: int | None = None

    @property
    def results_line(self) -> int | None:
        """The line where the run's results were complete: probe verdict, else metrics."""
        return self.probe_verdict_line or self.metrics_line

    @property
    def device_errors(self) -> list[Event]:
        return [e for e in self.line_errors if e.family == "device"]

    @property
    def worker_deaths(self) -> list[Event]:
        return [e for e in self.line_errors if e.family == "worker_death"]

    @property
    def request_count(self) -> int:
        return len(self.requests) + self.overflow.judged
