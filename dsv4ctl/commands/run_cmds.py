"""Run commands: submit, status, runs, show, cancel, resume, ingest."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import (
    BackendOpt,
    DbOpt,
    JsonOpt,
    LabelOpt,
    OnStuckOpt,
    RunsDirOpt,
    SpecsArg,
    TimeoutOpt,
    at_least,
    check_campaign,
    check_label,
    check_repeats,
    open_store,
)

RunArg = Annotated[str, typer.Argument(help="Run id, label (J17), job id, token, or `latest`.")]
CampaignOpt = Annotated[Optional[str], typer.Option(callback=check_campaign,
                                                    help="Only this campaign's runs (a name or `latest`).")]


def _runs_table(store, rows, title: str) -> None:
    from .run_view import runs_table

    runs_table(store, rows, title)


def _run_json(store, row) -> dict:
    """The one run object of every command's --json (see `RunRow.to_json`), with its verdict and metrics."""
    data = row.to_json()
    data["verdict"] = store.verdict(row.id)
    data["metrics"] = store.metrics(row.id)
    from ..analysis.perf import stored_check

    data["perf"] = stored_check(store, row.id)
    from ..modes.registry import stored_records

    data.update(stored_records(store, row.id))  # each mode's record: `align` (None for runs of other modes)
    from ..profile.stored import stored_profile

    data["profile"] = stored_profile(store, row)  # a profiled run's stored breakdown (issue 23; None otherwise)
    return data


def _all_passed(store, run_ids: list[int]) -> bool:
    verdicts = store.verdict_summaries(run_ids)
    return bool(run_ids) and all(verdicts.get(i, {}).get("passed") for i in run_ids)


def _watch_until_done(store, run_ids: list[int], quiet: bool = False, timeout_s: float | None = None,
                      on_stuck: str = "leave", campaign: str | None = None) -> None:
    """Follow these runs, and only these, until each is judged: a held job elsewhere in the database never
    keeps this wait going. Progress (on stderr: stdout stays the result) names the runs with their state, stage and
    elapsed time, and says which are paused. WaitTimedOut (exit 3) when `timeout_s` passes; WaitStuck (exit 1) at
    once when a job can never start (left queued or cancelled, `on_stuck`); Ctrl-C names the jobs left queued."""
    from ..campaign.watch import WaitTimedOut, waiting_on, watch

    wanted = sorted(set(run_ids))
    live = output.live_status(quiet=quiet)
    try:
        with live:
            def on_round(report) -> None:
                rows = store.runs_by_ids(wanted)
                live.update(rows, store.verdict_summaries(wanted), [*report.notes, waiting_on(report.waiting, set())])

            report = watch(store, wanted, on_round=on_round, timeout_s=timeout_s, on_stuck=on_stuck)
    except KeyboardInterrupt:
        from ..campaign.inflight import interrupted

        rows = store.runs_by_ids(wanted)
        name = campaign or (rows[0].campaign if rows and len({r.campaign for r in rows}) == 1 else None)
        if name is None:
            raise
        raise interrupted(store, name, wanted) from None
    if report.in_flight:
        raise WaitTimedOut(f"stopped waiting after {timeout_s:g} s: {waiting_on(report.waiting, set())}")


def submit(specs: SpecsArg,
           repeats: Annotated[Optional[int], typer.Option(callback=check_repeats, help="Runs per matrix point [default: spec.repeats].")]
           = None,
           wait: Annotated[bool, typer.Option(help="Watch until every run is judged; exit 0 only if all passed.")]
           = False,
           dry_run: Annotated[bool, typer.Option(help="Show what would be submitted; write nothing.")] = False,
           backend: BackendOpt = None,
           db: DbOpt = None,
           campaign: Annotated[Optional[str], typer.Option(callback=check_campaign, help="Campaign name [default: spec name + time].")]
           = None,
           runs_dir: RunsDirOpt = None,
           label: LabelOpt = None,
           array: Annotated[bool, typer.Option(help="Submit Slurm repeats as one job array.")] = True,
           ab: Annotated[bool, typer.Option("--ab", help="Exactly two specs, BASELINE then CANDIDATE: submit them "
                                                         "interleaved A B A B and record the pairs.")] = False,
           check: Annotated[bool, typer.Option("--check", help="First ask Slurm (sbatch --test-only) whether it "
                                                               "would ever run each point; if any is refused, "
                                                               "record and queue nothing (exit 1).")] = False,
           timeout: TimeoutOpt = None,
           on_stuck: OnStuckOpt = "leave",
           json: JsonOpt = False) -> None:
    """Render and submit specs: one job per matrix point and repeat, every run recorded in the store.
    With --wait: exit 0 only if all passed, 1 if any did not or a job can never start, 3 when --timeout passed
    first, 4 if all passed but one is outside its performance reference."""
    from ..campaign.plan import interleave, plan
    from ..campaign.plan import submit as submit_campaign
    from ..config import runs_dir as configured_runs_dir
    from ..campaign.golden import needs_store, resolve_goldens
    from ..scheduler import resolve_backend

    planned = plan(specs, repeats, label)  # refuses invalid specs before anything is recorded
    pairs = None
    if ab:
        planned, pairs = interleave(specs, repeats, label)
        if planned[0].spec.spec_hash() == planned[1].spec.spec_hash():
            output.warn(f"both sides are the same ({specs[0]} and {specs[1]} resolve to one spec): the A/B can "
                        "only measure noise")
    if check:
        _preflight(planned, resolve_backend(backend), json)
    store = open_store(db) if not dry_run or needs_store(planned) else None
    if store is not None:
        resolve_goldens(store, planned)  # expect.golden_from: J17 -> its token ids, before anything is recorded
        from ..modes.registry import prepare_submission

        prepare_submission(store, planned)  # each mode's checks (align.reference: run:ID names a stored capture)
    if dry_run:
        rows = [{"name": p.spec.name, "label": p.label, "point": p.point, "repeat": p.repeat,
                 "spec_hash": p.spec.spec_hash()} for p in planned]
        if json:
            output.emit_json({"backend": resolve_backend(backend), "runs": rows})
        else:
            output.table(f"would submit {len(rows)} run(s) on {resolve_backend(backend)}",
                         ["name", "label", "repeat", "spec"],
                         [(r["name"], r["label"] or "(r<run id>)", r["repeat"], r["spec_hash"]) for r in rows])
        return
    command = shlex.join(["dsv4ctl", *sys.argv[1:]])
    outcome = submit_campaign(store, specs, backend, repeats=repeats, campaign=campaign,
                              runs_root=configured_runs_dir(runs_dir), array=array, command=command,
                              planned=planned, pairs=pairs)
    submitted = f"campaign {outcome.campaign}: {outcome.submitted} submitted, {len(outcome.failed)} failed to submit"
    try:
        if wait:
            if not json:
                output.text(submitted)  # the submission line first, before the live table (issue 26 m22)
            _watch_until_done(store, outcome.run_ids, timeout_s=timeout, on_stuck=on_stuck,
                              campaign=outcome.campaign)
    except KeyboardInterrupt:
        from ..campaign.inflight import interrupted

        raise interrupted(store, outcome.campaign, outcome.run_ids) from None
    rows = store.runs_by_ids(outcome.run_ids)
    if json:
        output.emit_json({"campaign": outcome.campaign, "runs": [_run_json(store, r) for r in rows]})
    else:
        _runs_table(store, rows, f"campaign {outcome.campaign}" if wait else submitted)
        for run_id, message in outcome.failed:
            output.warn(f"run {run_id} was not submitted: {message}")
        if not wait:
            output.text(f"next: dsv4ctl status --campaign {outcome.campaign} --watch")
    if not wait:
        raise typer.Exit(1 if outcome.failed else 0)
    raise typer.Exit(_wait_exit(store, outcome.run_ids))


def _wait_exit(store, run_ids: list[int]) -> int:
    """A finished wait's exit code, as `verdict` gives it: 0 all passed, 1 any not, 4 all passed but one is outside
    its performance reference."""
    from ..analysis.perf import EXIT_OUTSIDE_REFERENCE, outside_reference

    if not _all_passed(store, run_ids):
        return 1
    return EXIT_OUTSIDE_REFERENCE if outside_reference(store, run_ids) else 0


def _preflight(planned, backend: str, as_json: bool) -> None:
    """`submit --check`: one line per point the cluster would never run, and exit 1 before anything is recorded."""
    from ..errors import UsageError
    from ..scheduler.preflight import check_planned

    if backend != "slurm":
        raise UsageError(f"--check asks Slurm (sbatch --test-only); this submission uses the {backend} backend: "
                         "drop --check or pass --backend slurm")
    refused = [c for c in check_planned(planned) if not c.result.ok]
    if not refused:
        return
    if as_json:
        output.emit_json({"refused": [{"name": c.name, "point": c.point, "message": c.result.message}
                                      for c in refused], "runs": []})
    for c in refused:
        point = ",".join(f"{k}={v}" for k, v in c.point.items())
        output.error(f"{c.name}{f' [{point}]' if point else ''}: the cluster would never run it: "
                     f"{' '.join(c.result.message.split())}")
    raise typer.Exit(1)


def status(campaign: CampaignOpt = None,
           watch: Annotated[bool, typer.Option(help="Keep polling (with backoff) until every run is judged.")]
           = False,
           timeout: TimeoutOpt = None,
           on_stuck: OnStuckOpt = "leave",
           db: DbOpt = None, json: JsonOpt = False) -> None:
    """Poll the scheduler once (one sacct call for all jobs), record states, judge finished jobs.
    With --watch: exit 0 if all passed or nothing is in flight, 1 if any did not or a job can never start, 3 when
    --timeout passed first, 4 if all passed but one is outside its performance reference."""
    from ..campaign.inflight import submitting_note
    from ..campaign.progress import stuck_reason
    from ..store.queries import in_flight_ids

    store = open_store(db, must_exist=True)
    campaign = store.campaign_name(campaign)
    rows = store.runs(campaign=campaign) if campaign else store.runs_by_ids(in_flight_ids(store))
    ids = [r.id for r in rows]
    notes: list[str] = []
    if store.read_only:
        notes = [f"{store.path} is read-only: showing the recorded states, without polling the scheduler"]
    elif watch and ids:
        _watch_until_done(store, ids, timeout_s=timeout, on_stuck=on_stuck, campaign=campaign)
    elif ids:
        from ..campaign.watch import poll_once

        notes = poll_once(store, ids).notes  # the runs found above: no second scan for them
    rows = store.runs_by_ids(ids)
    flying = {r.id for r in store.runs_in_flight(ids)} if ids else set()
    notes += [f"run {r.id} ({r.data.get('label')}) can never start as submitted: PENDING ({reason}); "
              f"`dsv4ctl cancel {r.data.get('label')}`, fix the spec and resubmit"
              for r in rows if (reason := stuck_reason(r.state, r.state_detail))]
    notes += [note for r in rows if (note := submitting_note(r))]
    if json:
        output.emit_json({"notes": notes, "in_flight": sorted(flying), "runs": [_run_json(store, r) for r in rows]})
    elif not rows:
        output.text("nothing in flight" + (f" in campaign {campaign}" if campaign else ""))
    else:
        # The count is of the rows shown, after this poll: a run judged by it is no longer in flight (m8).
        what = f" of campaign {campaign}" if campaign else " followed"
        _runs_table(store, rows, f"{len(rows)} run(s){what}, {len(flying)} still in flight")
    for note in notes:
        output.warn(note)
    if watch:
        raise typer.Exit(_wait_exit(store, ids) if ids else 0)


DEFAULT_RUNS_SHOWN = 50


def runs(experiment: Annotated[Optional[str], typer.Option(help="Only this experiment.")] = None,
         status: Annotated[Optional[str], typer.Option(
             help="Only runs whose verdict has this status (coherent, degenerate, crashed, ...; any case).")] = None,
         state: Annotated[Optional[str], typer.Option(
             help="Only runs in this scheduler state (COMPLETED, PENDING, ...; any case).")] = None,
         campaign: CampaignOpt = None,
         limit: Annotated[Optional[int], typer.Option(
             "-n", "--limit", callback=at_least(1),
             help=f"Only the newest N runs (as `tail -n`) [default: {DEFAULT_RUNS_SHOWN}].", show_default=False)]
         = None,
         all_runs: Annotated[bool, typer.Option("--all", help="Every matching run (streamed, oldest first).")]
         = False,
         before: Annotated[Optional[int], typer.Option(
             callback=at_least(1), help="Only runs older than this run id: the next page, as the note under a "
                                        "cut listing says.")] = None,
         since: Annotated[Optional[str], typer.Option(
             help="Only runs submitted (or ingested) since then: a UTC date or time (2026-12-01, "
                  "2026-12-01T09:00), or an age (90m, 6h, 2d), as `sacct -S`.")] = None,
         db: DbOpt = None, json: JsonOpt = False) -> None:
    """List recorded runs: the newest 50 unless --limit or --all (oldest first, as `tail`). An unknown status,
    state or campaign is a usage error (exit 2) naming the known ones."""
    from ..errors import UsageError
    from ..store.queries import RunFilter, iter_runs, newest_runs
    from ..units import since_cutoff
    from .run_view import stream_json

    if all_runs and limit is not None:
        raise UsageError("--all and --limit: give one (--all lists every matching run)")
    wanted = RunFilter(experiment, state, campaign, status, since_cutoff(since) if since else None)
    store = open_store(db, must_exist=True)
    if all_runs:
        rows, page = iter_runs(store, wanted, before), None
    else:
        page = newest_runs(store, wanted, limit or DEFAULT_RUNS_SHOWN, before)
        rows = page.rows
    if json:
        stream_json(_run_json(store, r) for r in rows)
    else:
        rows = list(rows)
        _runs_table(store, rows, f"{len(rows)} run(s)" + (" (the newest)" if page and page.older else ""))
    if page and page.older:
        output.warn(f"older runs match too: `dsv4ctl runs --before {page.next_before}` shows the page before, "
                    "--all every one")


def show(run: RunArg, db: DbOpt = None, json: JsonOpt = False) -> None:
    """Everything recorded about one run: its verdict and first blocker first, then the recorded fields."""
    store = open_store(db, must_exist=True)
    data = _run_json(store, store.find_run(run))
    if json:
        output.emit_json(data)
        return
    from .run_view import show_run

    show_run(data)


def cancel(refs: Annotated[Optional[list[str]], typer.Argument(
               help="Run ids, labels, job ids, tokens or `latest`.")] = None,
           campaign: Annotated[Optional[str], typer.Option(
               callback=check_campaign, help="Cancel every unfinished run of a campaign (a name or `latest`).")]
           = None,
           db: DbOpt = None, json: JsonOpt = False) -> None:
    """Cancel runs (scancel, or SIGTERM for local jobs). A named run that is finished or ingested is said so and
    left alone (exit 0: nothing to do)."""
    from ..errors import Dsv4Error
    from ..campaign.watch import cancel_and_settle, refresh_states
    from ..judge.states import is_waiting

    store = open_store(db, must_exist=True)
    named = [store.find_run(r) for r in refs or []]
    candidates = named + (store.runs(campaign=campaign) if campaign else [])
    # The scheduler's word first: a job cancelled a moment ago (or found after an interrupted submit) is said as
    # it is now, never asked to cancel a second time (issue 26 m7).
    notes = refresh_states(store, [r for r in candidates if not r.ingested and is_waiting(r.state)])
    fresh = {r.id: r for r in store.runs_by_ids([r.id for r in candidates])}
    named = [fresh[r.id] for r in named]
    rows = [r for r in named if r.job_id and not r.ingested and is_waiting(r.state)]
    skipped = [(r, _nothing_to_cancel(r)) for r in named if r not in rows]
    if campaign:
        rows += [fresh[r.id] for r in store.runs(campaign=campaign)
                 if is_waiting(fresh[r.id].state) and fresh[r.id].job_id and fresh[r.id] not in rows]
    if not rows and not skipped:
        raise Dsv4Error("nothing to cancel: name runs (see `dsv4ctl runs`) or --campaign with unfinished runs")
    problems, after = cancel_and_settle(store, rows) if rows else ([], [])
    if json:
        output.emit_json({"cancelled": [_run_json(store, r) for r in after], "problems": problems,
                          "skipped": [{"run": r.id, "label": r.label, "why": why} for r, why in skipped]})
    else:
        for row, why in skipped:
            output.text(f"{row.label or row.id} {why}")
        for problem in problems + notes:
            output.warn(problem)
        if after:
            output.text(_cancelled_line(after))
        elif campaign:
            output.text(f"campaign {campaign}: no unfinished runs")
    raise typer.Exit(1 if problems else 0)


def _cancelled_line(rows) -> str:
    """`cancelled 2 job(s): 367, 368` once the scheduler says so; the ones it has not ended yet named apart."""
    from ..judge.states import is_waiting

    done = [r for r in rows if not is_waiting(r.state)]
    going = [r for r in rows if is_waiting(r.state)]
    parts = []
    if done:
        parts.append(f"cancelled {len(done)} job(s): {', '.join(f'{r.job_id} ({r.state})' for r in done)}")
    if going:
        parts.append(f"asked to cancel {len(going)} job(s), still ending: "
                     + ", ".join(f"{r.job_id} ({r.state})" for r in going)
                     + " (`dsv4ctl status` records them once the scheduler has)")
    return "; ".join(parts)


def _nothing_to_cancel(row) -> str:
    """Why a named run is left alone by `cancel` (issue 26 m7)."""
    if row.ingested:
        return "was ingested: nothing to cancel"
    if not row.job_id:
        return f"has no job ({row.state}): nothing to cancel"
    return f"is already {row.state}: nothing to cancel"


def resume(campaign: Annotated[str, typer.Argument(callback=check_campaign, help="Campaign name (see `dsv4ctl runs`).")],
           wait: Annotated[bool, typer.Option(help="Watch until every resubmitted run is judged.")] = False,
           db: DbOpt = None, json: JsonOpt = False) -> None:
    """Resubmit the runs of a campaign that never got a job or never produced a verdict, and nothing else."""
    from ..campaign.plan import resume as resume_campaign
    store = open_store(db, must_exist=True)
    outcome = resume_campaign(store, campaign)
    if wait and outcome.run_ids:
        _watch_until_done(store, outcome.run_ids, quiet=json, campaign=outcome.campaign)
    rows = store.runs_by_ids(outcome.run_ids)
    if json:
        output.emit_json({"campaign": outcome.campaign, "resubmitted": [
            {**_run_json(store, r), "why": outcome.why.get(r.id)} for r in rows], "kept": outcome.kept})
    else:
        for row in rows:
            output.text(f"resubmitting run {row.id} ({row.label}): {outcome.why.get(row.id)}")
        _runs_table(store, rows, f"campaign {outcome.campaign}: {outcome.submitted} resubmitted, "
                                 f"{len(outcome.failed)} failed to submit, {outcome.kept} left as they are "
                                 "(judged or in flight)")
    raise typer.Exit(1 if outcome.failed else 0)


def ingest(log: Annotated[Path, typer.Option("--log", help="Raw log of an earlier run (a regular file: it is "
                                                               "copied into the runs directory).", exists=True,
                                             dir_okay=False)],
           experiment: Annotated[str, typer.Option(help="Experiment name to file it under.")],
           sacct: Annotated[Optional[Path], typer.Option(help="Its sacct --parsable2 text.", exists=True,
                                                         dir_okay=False)] = None,
           switch: Annotated[Optional[list[str]], typer.Option(help="A switch it ran with, K=V (repeatable).")]
           = None,
           tag: Annotated[Optional[list[str]], typer.Option(help="A tag (repeatable).")] = None,
           label: Annotated[Optional[str], typer.Option(
               callback=check_label, help="Name the run [default: the job id of its sacct record (J08) when "
                                          "free, else r<run id>].")] = None,
           git_sha: Annotated[Optional[str], typer.Option(
               help="The commit it ran (for `dsv4ctl history`).")] = None,
           mode: Annotated[Optional[str], typer.Option(
               help="offline, serve or align [default: what the log's own markers say].")] = None,
           again: Annotated[bool, typer.Option(
               "--again", help="Record a log whose content is stored already (it then counts twice in compare, "
                               "history and references).")] = False,
           force: Annotated[bool, typer.Option(
               "--force", help="Ingest a file that looks binary or has no job-log line.")] = False,
           runs_dir: Annotated[Optional[Path], typer.Option(
               help="Where the copy goes, under ingested/ [env: DSV4CTL_RUNS_DIR; else dsv4ctl.toml's, else the "
                    "runs folder beside the database].", show_default=False)] = None,
           db: DbOpt = None, json: JsonOpt = False) -> None:
    """Import the log of an earlier run: copied into the runs directory, judged by its mode and stored like a
    submitted one. The same log twice is refused (exit 2) unless --again."""
    from ..campaign.ingest import ingest_log, ingest_root
    from ..modes.registry import mode_of

    store = open_store(db)
    done = ingest_log(store, log, experiment, sacct, switch or [], tag or [], label, git_sha,
                      runs_root=ingest_root(runs_dir, store.path), mode=mode, again=again, force=force)
    run_id, verdict = done.run_id, done.verdict
    row = store.find_run(str(run_id))
    if done.copy_of is not None:
        copy = store.find_run(str(done.copy_of))
        output.warn(f"run {run_id} is a second copy of run {copy.id} ({copy.label}): the same log now counts twice "
                    "in compare, history and reference medians (--again)")
    if json:
        output.emit_json(_run_json(store, row))
    else:
        perf = _run_json(store, row)["perf"]
        output.text(f"run {run_id} ({row.label}): {verdict.status}{' (passed)' if verdict.passed else ''}"
                    f"{' FALSE GREEN' if verdict.false_green else ''}"
                    f"{' OUTSIDE ITS PERFORMANCE REFERENCE' if perf and not perf['within'] else ''}"
                    + (f" [{mode_of(done.mode).tag}]" if mode_of(done.mode).tag else ""))
        output.text(f"next: dsv4ctl verdict {row.label}")


def logs(run: RunArg,
         follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new lines until the run is "
                                                                     "final.")] = False,
         tail: Annotated[Optional[int], typer.Option(
             "-n", "--tail", callback=at_least(0), help="Only the last N lines (then, with -f, what follows).")]
         = None,
         timeout: TimeoutOpt = None,
         db: DbOpt = None) -> None:
    """Print a run's raw.log (its current stage first, on stderr); with -f, follow it until the run ends.
    Exit 3 when --timeout passes first."""
    from ..campaign.watch import follow_log

    store = open_store(db, must_exist=True)
    row = store.find_run(run)
    follow_log(store, row, follow=follow, write=output.raw, note=output.progress, timeout_s=timeout,
               tail_lines=tail)


def init(directory: Annotated[Path, typer.Argument(help="Where to write dsv4ctl.toml.", file_okay=False)]
         = Path(".")) -> None:
    """Write a commented starter dsv4ctl.toml (refuses to overwrite one). Every command run in this folder or
    below then uses its database and runs directory."""
    from ..config import write_starter

    from ..store.filesystem import journal_for

    path = write_starter(directory)
    output.text(f"wrote {path}: edit it, then `dsv4ctl runs` from anywhere below {path.parent.resolve()}")
    database = path.parent.resolve() / "results.db"
    output.text(f"database {database}: {journal_for(database).describe(database)}")


def register(app: typer.Typer) -> None:
    for command in (init, submit, status, runs, show, logs, cancel, resume, ingest):
        app.command()(command)
