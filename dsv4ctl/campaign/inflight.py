"""Runs still in the scheduler's hands (issue 26): a verdict asked too early says so and stores nothing, a wait
for a job that can never start stops at once, and an interrupted submit or wait names the jobs already queued with
the commands that cancel or follow them."""

from __future__ import annotations

from pathlib import Path

from ..errors import Dsv4Error
from ..judge.states import normalise
from ..scheduler import JobRef, JobStatus, get_scheduler
from ..store import RunRow, Store
from .progress import _age_s, elapsed_of, stuck_reason
from .reconcile import reconcile


class RunInFlight(Dsv4Error):
    """`verdict RUN` of a run still queued or running: its state, reason and elapsed time, no verdict (exit 5:
    not decided yet), and nothing stored (issue 26 M2)."""

    exit_code = 5

    def __init__(self, row: RunRow, status: JobStatus | None) -> None:
        from ..units import clock

        state = status.state if status else row.state
        detail = (status.state_detail if status else row.state_detail) or ""
        if normalise(state) not in ("PENDING", "SUBMITTING"):  # a pending job's Start is sacct's expected start
            elapsed = status.elapsed_s if status and status.elapsed_s is not None else elapsed_of(row)
            since = f"running for {clock(elapsed)}" if elapsed is not None else "running"
        else:
            since = f"queued for {clock(_age_s(row.data.get('submitted_at')))}"
        stuck = stuck_reason(state, detail)
        label = row.data.get("label")
        super().__init__(f"run {row.id} ({label}) is {state}" + (f" ({detail})" if detail else "")
                         + (f" job {row.job_id}" if row.job_id else "") + f", {since}: no verdict yet"
                         + (": it can never start as submitted" if stuck else ""))
        self.hint = (f"cancel it (`dsv4ctl cancel {label}`), fix the spec and resubmit" if stuck else
                     f"wait for it: `dsv4ctl status --watch` or `dsv4ctl logs {label} -f`, then verdict again")


class WaitStuck(Dsv4Error):
    """A wait stopped because a job can never start as submitted (exit 1: the run cannot pass as it is)."""


ON_STUCK = ("leave", "cancel")


def stop_if_stuck(store: Store, rows: list[RunRow], on_stuck: str) -> None:
    """Raise WaitStuck at once when any of `rows` is pending for a reason that never clears (issue 26 M1), naming
    the run, the job, the reason and the fix; with on_stuck `cancel` the stuck jobs are cancelled first, with
    `leave` they stay queued (someone may change the cluster instead)."""
    stuck = [(r, reason) for r in rows if (reason := stuck_reason(r.state, r.data.get("state_detail")))]
    if not stuck:
        return
    said = ", ".join(f"run {r.id} ({r.data.get('label')})" + (f" job {r.job_id}" if r.job_id else "")
                     + f" PENDING ({reason})" for r, reason in stuck)
    labels = " ".join(str(r.data.get("label") or r.id) for r, _ in stuck)
    if on_stuck == "cancel":
        problems = cancel_rows([r for r, _ in stuck])
        done = ("cancelled (--on-stuck cancel)" if not problems else "cancel failed: " + "; ".join(problems))
        error = WaitStuck(f"can never start as submitted: {said}; {done}")
        error.hint = "fix the spec (`dsv4ctl validate --cluster SPEC` names what the cluster refused) and resubmit"
    else:
        error = WaitStuck(f"can never start as submitted: {said}; left queued (--on-stuck leave)")
        error.hint = (f"`dsv4ctl cancel {labels}`, fix the spec (`dsv4ctl validate --cluster SPEC` names what the "
                      "cluster refused) and resubmit; or --on-stuck cancel")
    raise error


def cancel_rows(rows: list[RunRow]) -> list[str]:
    """Cancel these runs' jobs, one scheduler call per backend; the problems the schedulers reported."""
    problems: list[str] = []
    for backend in sorted({r.backend for r in rows if r.job_id}):
        problems += get_scheduler(backend).cancel([JobRef(r.job_id, Path(r.run_dir)) for r in rows
                                                   if r.job_id and r.backend == backend])
    return problems


def submitting_note(row: RunRow) -> str | None:
    """What happens to a run left SUBMITTING (the command that submitted it stopped before the scheduler
    answered): `status` looks for its job by the run's token until the scheduler's grace has passed, then marks it
    SUBMIT_FAILED for `resume`. None for any other run."""
    from ..judge.states import SUBMITTING
    from ..units import clock

    if row.state != SUBMITTING or row.job_id:
        return None
    grace = get_scheduler(row.backend).submit_grace_s
    left = max(0.0, grace - _age_s(row.data.get("submitted_at")))
    label = row.data.get("label") or row.id
    return (f"run {row.id} ({label}) is SUBMITTING: the command that submitted it stopped before the scheduler "
            f"answered; `dsv4ctl status` looks for its job by the run's token for {clock(left)} more (a "
            f"{clock(grace)} grace), then marks it SUBMIT_FAILED for `dsv4ctl resume`")


class Interrupted(Dsv4Error):
    """Ctrl-C after jobs were queued: which ones, and the commands that cancel or follow them (exit 130)."""

    exit_code = 130


def interrupted(store: Store, campaign: str, run_ids: list[int]) -> Interrupted:
    """What a Ctrl-C during a submit or its wait leaves behind (issue 26 M7): the runs queued or running, any run
    caught mid-submission, and the campaign's commands to cancel, follow or complete it."""
    from ..judge.states import SUBMITTING, is_waiting

    for row in store.runs_by_ids(run_ids):  # a job sbatch queued just before the interrupt: found by its token
        if row.state == SUBMITTING:
            try:
                reconcile(store, get_scheduler(row.backend), row)
            except Dsv4Error:
                pass  # the scheduler cannot say now: the run is named as being submitted below
    rows = store.runs_by_ids(run_ids)
    queued = [r for r in rows if r.job_id and is_waiting(r.state)]
    midway = [r for r in rows if r.state == SUBMITTING and not r.job_id]
    unsent = [r for r in rows if not r.job_id and r.state != SUBMITTING and not r.data.get("ingested")
              and r.id not in {q.id for q in queued} and normalise(r.state) == "PLANNED"]
    if not queued and not midway:
        error = Interrupted(f"interrupted before any job was queued (campaign {campaign} is recorded)")
        error.hint = f"`dsv4ctl resume {campaign}` submits it"
        return error
    jobs = ", ".join(r.job_id for r in queued[:10]) + (f" (+{len(queued) - 10} more)" if len(queued) > 10 else "")
    message = (f"interrupted: {len(queued)} run(s) already queued in campaign {campaign}"
               + (f" (jobs {jobs})" if queued else "") + "; they go on")
    if midway:
        message += f"; {len(midway)} run(s) were being submitted (`dsv4ctl status` finds their jobs)"
    hints = [f"`dsv4ctl cancel --campaign {campaign}` to drop them",
             f"`dsv4ctl status --campaign {campaign} --watch` to follow"]
    if unsent:
        hints.append(f"`dsv4ctl resume {campaign}` submits the {len(unsent)} not sent yet")
    error = Interrupted(message)
    error.hint = ", ".join(hints)
    return error
