"""Watching runs: one scheduler poll per backend per round (one sacct call for every Slurm job), states recorded,
and each job judged once it has settled in a final state."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .campaign import reconcile
from .judge.scan import parse_file
from .judge.sacct import SchedulerSummary
from .judge.states import PAUSED, normalise
from .scheduler import JobRef, JobStatus, get_scheduler
from .store import SUBMITTING, RunRow, Store, StoreError
from .judge.rules import Verdict, judge, options_for_spec

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
    snapshot = json.loads(store.spec_json(row.experiment_id))
    log = Path(row.log_path) if row.log_path else None
    from .judge.scan import LogFacts

    facts = parse_file(str(log)) if log and log.exists() else LogFacts()
    verdict = judge(facts, summary_of(status) if status else None, options_for_spec(snapshot))
    store.save_verdict(row.id, verdict.to_json())
    return verdict


def _age_s(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    then = datetime.fromisoformat(stamp)
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - then).total_seconds()


HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", "job requeued in held state")  # squeue's reasons for a held job


def is_paused(state: str, detail: str | None = None) -> bool:
    """A job that will not move until someone acts: stopped, suspended, or pending because it is held."""
    return normalise(state) in PAUSED or (normalise(state) == "PENDING" and (detail or "") in HELD_REASONS)


def waiting_on(rows: list[RunRow], judged: set[int], limit: int = 8) -> str:
    """One line of progress: which runs a wait still follows and in what state, paused states named as such
    (held, stopped, suspended: they will not move until someone acts)."""
    left = [r for r in rows if r.id not in judged]
    if not left:
        return "nothing left to wait on"
    shown = ", ".join(f"run {r.id} {r.state}" for r in left[:limit]) + (f" (+{len(left) - limit} more)"
                                                                           if len(left) > limit else "")
    line = f"waiting on {len(left)} run(s): {shown}"
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
          max_interval_s: float = 30.0, timeout_s: float | None = None) -> PollReport:
    """Poll until none of `run_ids` (default: every run in the store) is in flight. Backs off while nothing
    changes; calls on_round(report) each round."""
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
        if report.in_flight == 0:
            return total
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            return total
        delay = interval_s if report.changed else min(delay * 1.5, max_interval_s)
        time.sleep(delay)


def rejudge(ref: str, db: str | None = None) -> tuple[Verdict, Path]:
    """`dsv4ctl verdict JOB`: judge a stored run again from its log and the scheduler's live record."""
    from .judge.files import judge_files
    from .store import open_store

    store = open_store(db)
    row = store.find_run(ref)
    if row.ingested:
        verdict = judge_files(Path(row.log_path))
        store.save_verdict(row.id, verdict.to_json())
        return verdict, Path(row.log_path)
    status = None
    if row.job_id:
        statuses, _ = get_scheduler(row.backend).poll([JobRef(row.job_id, Path(row.run_dir))])
        status = statuses.get(row.job_id)
    return judge_run(store, row, status), Path(row.log_path)
