"""Parse `sacct --parsable2` text into typed records, and fold a job's rows into one scheduler summary.

Stdlib only. Handles: with or without a header line, any column order (a header names them; without one the
caller says which), job / `.batch` / `.extern` / numbered step rows, array ids (`7_0`, `7_[0-3%2]`),
`CANCELLED by 0`, ExitCode as `exit:signal` (both kept), MaxRSS with K/M/G suffixes, and Elapsed in every form.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .states import FINAL as FINAL_STATES, normalise

DEFAULT_COLUMNS = ("JobID", "JobName", "State", "ExitCode", "Elapsed", "MaxRSS", "Start", "End", "NodeList")
SACCT_FORMAT = ",".join(DEFAULT_COLUMNS)

_JOB_ID = re.compile(r"^(?P<job>[^._\s]+)(?:_(?P<task>\[[^\]]*\]|\d+))?(?:\.(?P<step>[\w-]+))?$")
_RSS = re.compile(r"^(?P<n>[0-9.]+)(?P<unit>[KMGTP]?)$")
_UNITS = {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024**2, "T": 1024**3, "P": 1024**4}


class SacctParseError(ValueError):
    """sacct text that cannot be read as records."""


@dataclass(frozen=True)
class SacctRecord:
    raw_job_id: str
    job_id: str
    array_task: str | None
    step: str | None  # None for the job row; "batch", "extern", "0"...
    job_name: str | None
    state: str  # the bare state word: "CANCELLED" for "CANCELLED by 0"
    state_detail: str | None  # "by 0"
    exit_code: int | None
    signal: int | None
    elapsed_s: int | None
    max_rss_kib: int | None
    start: str | None
    end: str | None
    node_list: str | None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class SchedulerSummary:
    """One job as the scheduler saw it: the job row's state and exit, the steps' peak memory."""

    job_id: str
    state: str
    state_detail: str | None
    exit_code: int | None
    signal: int | None
    elapsed_s: int | None
    max_rss_kib: int | None
    node_list: str | None
    steps: tuple[SacctRecord, ...] = ()

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def completed_ok(self) -> bool:
        """COMPLETED with 0:0 on the job row, and no step that failed under it."""
        steps_ok = all((s.exit_code or 0) == 0 and (s.signal or 0) == 0 for s in self.steps if s.step != "extern")
        return self.state == "COMPLETED" and self.exit_code == 0 and (self.signal or 0) == 0 and steps_ok

    def to_json(self) -> dict:
        return {"job_id": self.job_id, "state": self.state, "state_detail": self.state_detail,
                "exit_code": self.exit_code, "signal": self.signal, "elapsed_s": self.elapsed_s,
                "max_rss_kib": self.max_rss_kib, "node_list": self.node_list}


def parse_elapsed(text: str) -> int | None:
    """`[D-]HH:MM:SS`, `MM:SS(.mmm)` or `SS` -> whole seconds."""
    text = text.strip()
    if not text or text in ("INVALID", "Unknown"):
        return None
    if len(text) > 32:  # garbage, not a duration
        return None
    days = "0"
    if "-" in text:
        days, text = text.split("-", 1)
    parts = text.split(":")
    if len(parts) > 3 or not days.isdigit():
        return None
    try:
        values = [float(p) for p in parts]
    except ValueError:
        return None
    if not all(math.isfinite(v) and v >= 0 for v in values):  # `nan`, `1e999`: unreadable, never a number
        return None
    seconds = 0.0
    for value in values:
        seconds = seconds * 60 + value
    return int(int(days) * 86400 + seconds)


def parse_rss(text: str) -> int | None:
    """MaxRSS (`65899600K`, `1.5G`, `1080K`, bytes without a unit) -> KiB."""
    m = _RSS.match(text.strip())
    if not m or len(m.group("n")) > 24:
        return None
    try:
        kib = float(m.group("n")) * _UNITS[m.group("unit")]
    except ValueError:  # `1.2.3K`
        return None
    return int(round(kib)) if math.isfinite(kib) else None


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    text = text.strip()
    if not text:
        return None, None
    code, _, sig = text.partition(":")
    if len(code) > 6 or len(sig) > 6:  # an exit code or signal number is small; longer is garbage
        return None, None
    try:
        return int(code), int(sig) if sig else 0
    except ValueError:
        return None, None


def _looks_like_header(fields: list[str]) -> bool:
    return any(f.strip().lower() in ("jobid", "jobidraw") for f in fields)


def parse_sacct(text: str, columns: tuple[str, ...] | None = None) -> list[SacctRecord]:
    """Parse `--parsable2` output. A header line, when present, fixes the columns; else `columns` or the default."""
    lines = [ln.rstrip("\r") for ln in text.splitlines() if ln.strip() and not set(ln.strip()) <= set("-+|")]
    if not lines:
        return []
    first = lines[0].split("|")
    if _looks_like_header(first):
        names = [f.strip() for f in first]
        lines = lines[1:]
    else:
        names = list(columns or DEFAULT_COLUMNS)
    index = {name.lower(): i for i, name in enumerate(names)}
    if "jobid" not in index and "jobidraw" not in index:
        raise SacctParseError("sacct text has no JobID column")
    if "state" not in index:
        raise SacctParseError("sacct text has no State column")
    records = []
    for number, line in enumerate(lines, 1):
        fields = line.split("|")
        if len(fields) == len(names) + 1 and fields[-1] == "":  # --parsable (not 2) ends rows with a bar
            fields = fields[:-1]
        if len(fields) != len(names):
            raise SacctParseError(f"sacct row {number} has {len(fields)} fields, expected {len(names)}: {line!r}")
        records.append(_record(dict(zip((n.lower() for n in names), fields)), names))
    return records


def _record(row: dict[str, str], names: list[str]) -> SacctRecord:
    raw_id = (row.get("jobid") or row.get("jobidraw") or "").strip()
    m = _JOB_ID.match(raw_id)
    if not m:
        raise SacctParseError(f"unreadable JobID {raw_id!r}")
    state_text = row.get("state", "").strip()
    state, _, detail = state_text.partition(" ")
    exit_code, signal = parse_exit_code(row.get("exitcode", ""))
    known = {"jobid", "jobidraw", "jobname", "state", "exitcode", "elapsed", "maxrss", "start", "end", "nodelist"}

    def opt(key: str) -> str | None:
        value = row.get(key, "").strip()
        return value or None

    return SacctRecord(
        raw_job_id=raw_id,
        job_id=m.group("job"),
        array_task=m.group("task").strip("[]") if m.group("task") else None,
        step=m.group("step"),
        job_name=opt("jobname"),
        state=normalise(state),
        state_detail=detail.strip() or None,
        exit_code=exit_code,
        signal=signal,
        elapsed_s=parse_elapsed(row.get("elapsed", "")),
        max_rss_kib=parse_rss(row.get("maxrss", "")),
        start=opt("start"),
        end=opt("end"),
        node_list=opt("nodelist"),
        extra={n: row[n.lower()] for n in names if n.lower() not in known},
    )


def summarise(records: list[SacctRecord], job_id: str | None = None,
              array_task: str | None = None) -> SchedulerSummary | None:
    """Fold one job's rows (the job row and its steps) into a summary; None if the job has no job row."""
    rows = [r for r in records
            if (job_id is None or r.job_id == job_id) and (array_task is None or r.array_task == array_task)]
    job_rows = [r for r in rows if r.step is None]
    if not job_rows:
        return None
    job = job_rows[0]
    steps = tuple(r for r in rows if r.step is not None and r.job_id == job.job_id
                  and r.array_task == job.array_task)
    rss = [r.max_rss_kib for r in (job, *steps) if r.max_rss_kib is not None]
    job_key = job.job_id + (f"_{job.array_task}" if job.array_task else "")
    return SchedulerSummary(job_id=job_key, state=job.state, state_detail=job.state_detail,
                            exit_code=job.exit_code, signal=job.signal, elapsed_s=job.elapsed_s,
                            max_rss_kib=max(rss) if rss else None, node_list=job.node_list, steps=steps)
