"""Watching runs: one scheduler poll per backend per round (one sacct call for every Slurm job), states recorded,
and each job judged once it has settled in a final state."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .progress import (HELD_REASONS, STAGE_TAIL_BYTES, STUCK_REASONS, _age_s, elapsed_of,  # noqa: F401
                       is_paused, stage_of, stuck_reason)
from .reconcile import reconcile
from ..errors import Dsv4Error, LogError
from ..judge.scan import parse_file
from ..judge.sacct import SchedulerSummary
from ..judge.states import FINAL, is_waiting, normalise
from ..scheduler import JobRef, JobStatus, get_scheduler
from ..store import SUBMITTING, RunRow, Store, StoreError
from ..versions import read_versions
from .verdicts import record_verdict
from ..judge.rules import Verdict, VerdictOptions, options_for_spec

class WaitTimedOut(Dsv4Error):
    """A wait's --timeout passed with runs still in flight (they go on; exit 3)."""

    exit_code = 3
    hint = "the runs go on: `dsv4ctl status --watch` (or `dsv4ctl logs latest -f`) picks the wait up again"


SETTLE_GRACE_S = 15  # sacct fills step rows in a few seconds after the job row turns final


@dataclass
class PollReport:
    changed: list[int] = field(default_factory=list)
    judged: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    in_flight: int = 0
    waiting: list[RunRow] = field(default_factory=list)  # the runs still followed after this poll


def summary_of(status: JobStatus) -> SchedulerSummary:
    return SchedulerSummary(job_id=status.job_id, state=status.state, state_detail=status.state_detail,
                            exit_code=status.exit_code, signal=status.signal, elapsed_s=status.elapsed_s,
                            max_rss_kib=status.max_rss_kib, node_list=status.node)


def judge_run(store: Store, row: RunRow, status: JobStatus | None) -> Verdict:
    """Judge a run from its raw log and scheduler record, and store the verdict and its metrics."""
    return judge_stored(store, row, summary_of(status) if status else None)


def stored_mode(snapshot: dict[str, Any]) -> str:
    """A stored run's mode: its spec's, or for an ingested run the one its log's markers (or --mode) gave."""
    from ..spec.models import DEFAULT_MODE

    return snapshot.get("mode") or DEFAULT_MODE


def judge_stored(store: Store, row: RunRow, scheduler: SchedulerSummary | None) -> Verdict:
    """The one judgement of a stored run (issue 29), submitted or ingested: the mode's judge (modes.judge_facts),
    an align run compared from its capture, the verdict stored. An ingested run is judged as it was at ingest: the
    default options, its copied log and the serve files or capture copied beside it."""
    from ..judge.scan import LogFacts
    from ..modes.registry import mode_of

    snapshot = json.loads(store.spec_json(row.experiment_id))
    mode = stored_mode(snapshot)
    log = Path(row.log_path) if row.log_path else None
    if row.ingested:
        options, spec = VerdictOptions(), None
        if log is None or not log.is_file():
            raise LogError(f"cannot read log {row.log_path}: the ingested copy is gone")
    else:
        options, spec = options_for_spec(snapshot), snapshot
    try:
        if log is None or not log.exists():
            facts = LogFacts()  # the job never wrote its log: judged as such
        else:
            facts = parse_file(str(log), options) if row.ingested else parse_file(str(log))
    except OSError as exc:
        raise LogError(f"cannot read log {log}: {exc}") from None
    found = mode_of(mode)
    verdict = found.judge(facts, scheduler, spec, Path(row.run_dir), options)
    verdict, record = found.settle_stored(store, row.id, verdict)  # an align run: compared from its capture again
    record_verdict(store, row.id, verdict.to_json(), read_versions(log), mode, record)
    return verdict


def _where(row: RunRow) -> str:
    """` (stage generate, 42s)` for a run that has started; empty before."""
    if normalise(row.state) in ("PENDING", "PLANNED", "SUBMITTING"):
        return ""
    parts = [f"stage {stage}" if (stage := stage_of(row.data.get("log_path"))) else "",
             f"{elapsed}s" if (elapsed := elapsed_of(row)) is not None else ""]
    parts = [p for p in parts if p]
    return f" ({', '.join(parts)})" if parts else ""


def waiting_on(rows: list[RunRow], judged: set[int], limit: int = 8) -> str:
    """One line of progress: which runs a wait still follows and in what state, paused states named as such
    (held, stopped, suspended: they will not move until someone acts)."""
    left = [r for r in rows if r.id not in judged]
    if not left:
        return "nothing left to wait on"
    shown = ", ".join(f"run {r.id} {r.state}{_where(r)}" for r in left[:limit]) + (f" (+{len(left) - limit} more)"
                                                                           if len(left) > limit else "")
    line = f"waiting on {len(left)} run(s): {shown}"
    stuck = [(r, reason) for r in left if (reason := stuck_reason(r.state, r.data.get("state_detail")))]
    if stuck:
        line += " · can never start as submitted (cancel, fix the spec, resubmit): " + ", ".join(
            f"run {r.id} PENDING ({reason})" + (f" job {r.job_id}" if r.job_id else "") for r, reason in stuck)
    midway = [r for r in left if r.state == SUBMITTING and not r.job_id]
    if midway:
        from .inflight import submitting_note

        line += " · " + "; ".join(note for r in midway if (note := submitting_note(r)))
    paused = [r for r in left if is_paused(r.state, r.data.get("state_detail"))]
    if paused:
        line += " · paused until someone releases or resumes them: " + ", ".join(
            f"run {r.id} {r.state}" + (f" ({r.data['state_detail']})" if r.data.get("state_detail") else "")
            + (f" job {r.job_id}" if r.job_id else "") for r in paused)
    return line


def _judge_safely(store: Store, row: RunRow, status: JobStatus, report: PollReport) -> None:
    """Judge one run; if judging raises (a log the scanner chokes on, a bug), record that on the run and go on:
    one bad log must not stop `status` or a watch for every other run."""
    try:
        judge_run(store, store.find_run(str(row.id)), status)
    except StoreError:
        raise  # the database itself failed: nothing else can be recorded either
    except Exception as exc:  # noqa: BLE001 - any judging failure is this run's, recorded and reported
        message = f"{type(exc).__name__}: {exc}"[:500]
        store.update_run(row.id, judge_error=message)
        report.notes.append(f"run {row.id}: judging failed ({message}); recorded on the run")
        return
    report.judged.append(row.id)


def poll_once(store: Store, run_ids: list[int] | None = None) -> PollReport:
    """One poll of the runs in flight (only among `run_ids` when given): states recorded, settled jobs judged."""
    report = PollReport()
    rows = store.runs_in_flight(run_ids)
    by_backend: dict[str, list[RunRow]] = {}
    for row in rows:
        by_backend.setdefault(row.backend, []).append(row)
    for backend, group in by_backend.items():
        scheduler = get_scheduler(backend)
        recovered = [r.id for r in group if r.state == SUBMITTING and reconcile(store, scheduler, r)]
        if recovered:  # only these changed in the store since the rows were read
            report.notes += [f"run {i}: found its job after an interrupted submit" for i in recovered]
            report.changed += recovered
            fresh = {r.id: r for r in store.runs_by_ids(recovered)}
            group = [fresh.get(r.id, r) for r in group]
        refs = [JobRef(r.job_id, Path(r.run_dir)) for r in group if r.job_id]
        statuses, notes = scheduler.poll(refs)
        report.notes += notes
        for row in group:
            status = statuses.get(row.job_id) if row.job_id else None
            if status is None:
                continue
            fields = {"state": status.state, "state_detail": status.state_detail, "state_source": status.source}
            for key in ("exit_code", "signal", "elapsed_s", "max_rss_kib", "node", "started_at", "ended_at"):
                value = getattr(status, key)
                if value is not None:
                    fields[key] = value
            seen_before = row.state == status.state
            if not seen_before or any(row.data.get(k) != v for k, v in fields.items()):
                store.update_run(row.id, **fields)
                report.changed.append(row.id)
            if status.is_final and (status.settled or (seen_before and _age_s(row.updated_at) >= SETTLE_GRACE_S)):
                _judge_safely(store, row, status, report)
    report.waiting = store.runs_in_flight(run_ids)
    report.in_flight = len(report.waiting)
    return report


def watch(store: Store, run_ids: list[int] | None = None, on_round=None, interval_s: float = 2.0,
          max_interval_s: float = 30.0, timeout_s: float | None = None,
          on_stuck: str | None = None) -> PollReport:
    """Poll until none of `run_ids` (default: every run in the store) is in flight. Backs off while nothing
    changes; calls on_round(report) each round. With `on_stuck` (leave or cancel), a job that can never start
    stops the wait at once (WaitStuck, see `stop_if_stuck`)."""
    started = time.monotonic()
    delay = interval_s
    total = PollReport()
    while True:
        report = poll_once(store, run_ids)
        total.changed += report.changed
        total.judged += report.judged
        total.notes += [n for n in report.notes if n not in total.notes]
        total.in_flight = report.in_flight
        total.waiting = report.waiting
        if on_round:
            on_round(report)
        if on_stuck is not None:
            from .inflight import stop_if_stuck

            stop_if_stuck(store, report.waiting, on_stuck)
        if report.in_flight == 0:
            return total
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            return total
        delay = interval_s if report.changed else min(delay * 1.5, max_interval_s)
        time.sleep(delay)


CANCEL_SETTLE_S = 5.0  # how long `cancel` waits for the scheduler to record the jobs it ended


def refresh_states(store: Store, rows: list[RunRow]) -> list[str]:
    """One poll of these runs (a SUBMITTING one looked for by its token), so a command acts on the scheduler's
    state now rather than the one last recorded; the poll's notes."""
    return poll_once(store, [r.id for r in rows]).notes if rows else []


def cancel_and_settle(store: Store, rows: list[RunRow], settle_s: float = CANCEL_SETTLE_S) -> tuple[list[str],
                                                                                                  list[RunRow]]:
    """Cancel these runs' jobs, then poll (a few seconds at most) until the scheduler records them ended, so the
    next `status` or `cancel` says CANCELLED rather than RUNNING (issue 26 m7, m8). The problems the scheduler
    reported, and the rows as recorded after."""
    import time

    from .inflight import cancel_rows

    problems = cancel_rows(rows)
    ids = [r.id for r in rows]
    deadline = time.monotonic() + settle_s
    while True:
        poll_once(store, ids)
        after = store.runs_by_ids(ids)
        if problems or not any(is_waiting(r.state) for r in after) or time.monotonic() >= deadline:
            return problems, after
        time.sleep(0.5)


def stored_status(store: Store, row: RunRow) -> JobStatus | None:
    """The scheduler record a run was last judged or polled with: the stored verdict's, else the run's columns
    when they hold a final state. None when nothing final was ever recorded."""
    previous = (store.verdict(row.id) or {}).get("scheduler")
    if previous and previous.get("state"):
        return JobStatus(previous.get("job_id") or row.job_id or "", previous["state"],
                         state_detail=previous.get("state_detail"), exit_code=previous.get("exit_code"),
                         signal=previous.get("signal"), elapsed_s=previous.get("elapsed_s"),
                         max_rss_kib=previous.get("max_rss_kib"), node=previous.get("node_list"), source="stored",
                         settled=True)
    if row.job_id and row.state in FINAL:
        return JobStatus(row.job_id, row.state, state_detail=row.state_detail, exit_code=row.exit_code,
                         signal=row.signal, elapsed_s=row.elapsed_s, max_rss_kib=row.max_rss_kib, node=row.node,
                         source="stored", settled=True)
    return None


def rejudge(ref: str, store: Store) -> tuple[Verdict, Path]:
    """`dsv4ctl verdict RUN`: judge a stored run again from its log, with the scheduler's live record where it has
    one that is final, else the record stored with the run (sacct forgets old jobs; an ingested run has no live
    record): re-judging never throws away what was recorded."""
    row = store.find_run(ref)
    status = None
    if row.job_id and not row.ingested:
        statuses, _ = get_scheduler(row.backend).poll([JobRef(row.job_id, Path(row.run_dir))])
        status = statuses.get(row.job_id)
    if status is None or not status.is_final:
        stored = stored_status(store, row)
        stored = stored if stored is not None and stored.is_final else None  # never a verdict stored in flight
        if stored is None and not row.ingested and (is_waiting(status.state) if status else is_waiting(row.state)):
            from .inflight import RunInFlight

            raise RunInFlight(row, status)  # the scheduler's until it ends: nothing judged, nothing stored
        status = stored or status
    return judge_stored(store, row, summary_of(status) if status else None), Path(row.log_path)


def tail_offset(path: Path | None, lines: int, block: int = 64 * 1024) -> int:
    """Where the last `lines` lines of a file start (0: the whole file), read backwards a block at a time."""
    if path is None or not path.exists():
        return 0
    with open(path, "rb") as f:
        end = f.seek(0, 2)
        position, newlines = end, 0
        if end and lines:
            f.seek(end - 1)
            if f.read(1) == b"\n":
                newlines = -1  # the final newline ends the last line, it starts none
        while position > 0:
            start = max(0, position - block)
            f.seek(start)
            chunk = f.read(position - start)
            for i in range(len(chunk) - 1, -1, -1):
                if chunk[i] == 0x0A:
                    newlines += 1
                    if newlines == lines:
                        return start + i + 1
            position = start
    return 0 if lines else end


def follow_log(store: Store, row: RunRow, *, follow: bool, write, note, timeout_s: float | None = None,
               interval_s: float = 1.0, poll_every_s: float = 5.0, tail_lines: int | None = None) -> None:
    """`dsv4ctl logs`: say the run's state and current stage (`note`), write raw.log (`write`), and with `follow`
    keep writing what is appended until the run is final (polled every `poll_every_s`, judged like any wait).
    WaitTimedOut when `timeout_s` passes first."""
    import codecs

    path = Path(row.log_path) if row.log_path else None
    stage = stage_of(path)
    note(f"run {row.id} ({row.data.get('label')}) {row.state}" + (f", stage {stage}" if stage else "")
         + ("" if path and path.exists() else f"; no log yet at {path}" if path else "; no log recorded"))
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    offset = tail_offset(path, tail_lines) if tail_lines is not None else 0
    started = last_poll = time.monotonic()

    def drain() -> None:
        nonlocal offset
        if path is None or not path.exists():
            return
        with open(path, "rb") as f:
            f.seek(offset)
            while chunk := f.read(1 << 16):
                offset += len(chunk)
                write(decoder.decode(chunk))

    drain()
    if not follow:
        return
    while store.runs_in_flight([row.id]):
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            raise WaitTimedOut(f"stopped following run {row.id} after {timeout_s:g} s; it is still running")
        time.sleep(interval_s)
        drain()
        if time.monotonic() - last_poll >= poll_every_s and not store.read_only:
            poll_once(store, [row.id])
            last_poll = time.monotonic()
    drain()
    final = store.find_run(str(row.id))
    note(f"run {final.id} ({final.data.get('label')}) {final.state}")
