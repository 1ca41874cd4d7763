"""Run commands: submit, status, runs, show, cancel, resume, ingest."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import output
from .options import (BackendOpt, DbOpt, JsonOpt, LabelOpt, RunsDirOpt, SpecsArg, TimeoutOpt, check_campaign,
                      check_label, check_repeats, open_store)

RunArg = Annotated[str, typer.Argument(help="Run id, label (J17), job id, token, or `latest`.")]
CampaignOpt = Annotated[Optional[str], typer.Option(callback=check_campaign,
                                                    help="Only this campaign's runs (a name or `latest`).")]


def _runs_table(store, rows, title: str) -> None:
    from ..watch import stuck_reason

    from ..perf import outside_reference

    verdicts = store.verdict_summaries([r.id for r in rows])
    outside = outside_reference(store, [r.id for r in rows])
    output.table(title, ["run", "label", "campaign", "experiment", "job", "state", "exit", "elapsed", "verdict",
                         "first blocker"],
                 [(r.id, r.data.get("label") or "-", r.campaign or "-", r.experiment, r.job_id or "-",
                   _state_cell(r, stuck_reason(r.state, r.data.get("state_detail"))),
                   f"{r.exit_code}:{r.signal}" if r.exit_code is not None else "-",
                   f"{r.elapsed_s}s" if r.elapsed_s is not None else "-",
                   _verdict_cell(verdicts.get(r.id)) + (" OUTSIDE REFERENCE" if r.id in outside else ""),
                   (verdicts.get(r.id) or {}).get("first_blocker_kind")
                   or (f"judge error: {r.judge_error}" if r.data.get("judge_error") else "")[:60]
                   or (r.submit_message or "")[:60] or "")
                  for r in rows])


def _state_cell(row, stuck: str | None) -> str:
    if stuck:
        return f"PENDING ({stuck}: can never start)"
    return row.state + (f" ({row.state_detail})" if row.state_detail and row.state == "PENDING" else "")


def _verdict_cell(v: dict | None) -> str:
    if not v:
        return "-"
    return f"{v['status']}{' PASSED' if v['passed'] else ''}{' FALSE GREEN' if v['false_green'] else ''}"


def _run_json(store, row) -> dict:
    """The one run object of every command's --json (see `RunRow.to_json`), with its verdict and metrics."""
    data = row.to_json()
    data["verdict"] = store.verdict(row.id)
    data["metrics"] = store.metrics(row.id)
    from ..perf import stored_check

    data["perf"] = stored_check(store, row.id)
    from ..align import stored_alignment

    data["align"] = stored_alignment(store, row.id)  # mode: align runs only (None otherwise)
    return data


def _all_passed(store, run_ids: list[int]) -> bool:
    verdicts = store.verdict_summaries(run_ids)
    return bool(run_ids) and all(verdicts.get(i, {}).get("passed") for i in run_ids)


def _watch_until_done(store, run_ids: list[int], quiet: bool = False, timeout_s: float | None = None) -> None:
    """Follow these runs, and only these, until each is judged: a held job elsewhere in the database never
    keeps this wait going. Progress (on stderr: stdout stays the result) names the runs with their state, stage and
    elapsed time, and says which are paused or can never start. WaitTimedOut (exit 3) when `timeout_s` passes."""
    from ..watch import WaitTimedOut, waiting_on, watch

    wanted = sorted(set(run_ids))
    live = output.live_status(quiet=quiet)
    with live:
        def on_round(report) -> None:
            rows = store.runs_by_ids(wanted)
            live.update(rows, store.verdict_summaries(wanted), [*report.notes, waiting_on(report.waiting, set())])

        report = watch(store, wanted, on_round=on_round, timeout_s=timeout_s)
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
           json: JsonOpt = False) -> None:
    """Render and submit specs: one job per matrix point and repeat, every run recorded in the store.
    With --wait: exit 0 only if all passed, 1 if any did not, 3 when --timeout passed first."""
    from ..campaign import interleave, plan
    from ..campaign import submit as submit_campaign
    from ..config import runs_dir as configured_runs_dir
    from ..golden import needs_store, resolve_goldens
    from ..scheduler import resolve_backend

    planned = plan(specs, repeats, label)  # refuses invalid specs before anything is recorded
    pairs = None
    if ab:
        planned, pairs = interleave(specs, repeats, label)
    if check:
        _preflight(planned, resolve_backend(backend), json)
    store = open_store(db) if not dry_run or needs_store(planned) else None
    if store is not None:
        resolve_goldens(store, planned)  # expect.golden_from: J17 -> its token ids, before anything is recorded
        from ..align import check_references

        check_references(store, planned)  # align.reference: run:ID must name a stored capture
    if dry_run:
        rows = [{"name": p.spec.name, "label": p.label, "point": p.point, "repeat": p.repeat,
                 "spec_hash": p.spec.spec_hash()} for p in planned]
        if json:
            output.emit_json({"backend": resolve_backend(backend), "runs": rows})
        else:
            output.table(f"would submit {len(rows)} run(s) on {resolve_backend(backend)}",
                         ["name", "label", "repeat", "spec"],
                         [(r["name"], r["label"] or "(J<run id>)", r["repeat"], r["spec_hash"]) for r in rows])
        return
    command = shlex.join(["dsv4ctl", *sys.argv[1:]])
    outcome = submit_campaign(store, specs, backend, repeats=repeats, campaign=campaign,
                              runs_root=configured_runs_dir(runs_dir), array=array, command=command,
                              planned=planned, pairs=pairs)
    if wait:
        _watch_until_done(store, outcome.run_ids, timeout_s=timeout)
    rows = store.runs_by_ids(outcome.run_ids)
    if json:
        output.emit_json({"campaign": outcome.campaign, "runs": [_run_json(store, r) for r in rows]})
    else:
        _runs_table(store, rows, f"campaign {outcome.campaign}: {outcome.submitted} submitted, "
                                 f"{len(outcome.failed)} failed to submit")
        for run_id, message in outcome.failed:
            output.warn(f"run {run_id} was not submitted: {message}")
        if not wait:
            output.text(f"next: dsv4ctl status --campaign {outcome.campaign} --watch")
    ok = _all_passed(store, outcome.run_ids) if wait else not outcome.failed
    raise typer.Exit(0 if ok else 1)


def _preflight(planned, backend: str, as_json: bool) -> None:
    """`submit --check`: one line per point the cluster would never run, and exit 1 before anything is recorded."""
    from ..errors import UsageError
    from ..preflight import check_planned

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
           db: DbOpt = None, json: JsonOpt = False) -> None:
    """Poll the scheduler once (one sacct call for all jobs), record states, judge finished jobs.
    With --watch: exit 0 only if all passed, 1 if any did not, 3 when --timeout passed first."""
    from ..watch import poll_once, stuck_reason

    store = open_store(db, must_exist=True)
    campaign = store.campaign_name(campaign)
    rows = store.runs(campaign=campaign) if campaign else store.runs_in_flight()
    ids = [r.id for r in rows]
    notes: list[str] = []
    if store.read_only:
        notes = [f"{store.path} is read-only: showing the recorded states, without polling the scheduler"]
    elif watch:
        _watch_until_done(store, ids, timeout_s=timeout)
    else:
        notes = poll_once(store, ids if campaign else None).notes
    rows = store.runs_by_ids(ids)
    notes += [f"run {r.id} ({r.data.get('label')}) can never start as submitted: PENDING ({reason}); cancel it, "
              "fix the spec and resubmit" for r in rows if (reason := stuck_reason(r.state, r.state_detail))]
    if json:
        output.emit_json({"notes": notes, "runs": [_run_json(store, r) for r in rows]})
    else:
        _runs_table(store, rows, f"{len(rows)} run(s)" + (f" of campaign {campaign}" if campaign else " in flight"))
    for note in notes:
        output.warn(note)
    if watch:
        raise typer.Exit(0 if _all_passed(store, ids) else 1)


def runs(experiment: Annotated[Optional[str], typer.Option(help="Only this experiment.")] = None,
         status: Annotated[Optional[str], typer.Option(
             help="Only runs whose verdict has this status (coherent, degenerate, crashed, ...; any case).")] = None,
         state: Annotated[Optional[str], typer.Option(
             help="Only runs in this scheduler state (COMPLETED, PENDING, ...; any case).")] = None,
         campaign: CampaignOpt = None,
         db: DbOpt = None, json: JsonOpt = False) -> None:
    """List recorded runs. An unknown status, state or campaign is a usage error (exit 2) naming the known ones."""
    store = open_store(db, must_exist=True)
    rows = store.runs(experiment=experiment, state=state, campaign=campaign, status=status)
    if json:
        output.emit_json([_run_json(store, r) for r in rows])
    else:
        _runs_table(store, rows, f"{len(rows)} run(s)")


def show(run: RunArg, db: DbOpt = None, json: JsonOpt = False) -> None:
    """Everything recorded about one run."""
    store = open_store(db, must_exist=True)
    data = _run_json(store, store.find_run(run))
    if json:
        output.emit_json(data)
        return
    alignment = data.pop("align")
    verdict = data.pop("verdict") or {}
    metrics = data.pop("metrics")
    perf = data.pop("perf")
    output.table(f"run {data['id']} ({data['label']})", ["field", "value"],
                 [(k, v if not isinstance(v, (dict, list)) else _compact(v)) for k, v in data.items()
                  if v not in (None, "", [], {})])
    if verdict:
        blocker = verdict.get("first_blocker") or {}
        output.text(f"verdict: {verdict['status']} passed={verdict['passed']} false_green={verdict['false_green']}"
                    + (f"; first blocker line {blocker.get('line')}: {blocker.get('kind')}" if blocker else ""))
        for reason in verdict.get("reasons", []):
            output.text(f"  • {reason}")
    if metrics:
        from ..verdict_view import show_metrics

        show_metrics(metrics)
    if perf:
        output.text(f"performance ({perf['source']}): " + ("within its reference" if perf["within"] else
                    "; ".join(f["message"] for f in perf["failures"])))
    if alignment:
        from ..align_view import show_alignment

        show_alignment(alignment)


def _compact(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return ", ".join(map(str, value))


def cancel(refs: Annotated[Optional[list[str]], typer.Argument(
               help="Run ids, labels, job ids, tokens or `latest`.")] = None,
           campaign: Annotated[Optional[str], typer.Option(
               callback=check_campaign, help="Cancel every unfinished run of a campaign (a name or `latest`).")]
           = None,
           db: DbOpt = None, json: JsonOpt = False) -> None:
    """Cancel runs (scancel, or SIGTERM for local jobs)."""
    from ..errors import Dsv4Error
    from ..judge.states import is_waiting
    from ..scheduler import JobRef, get_scheduler

    store = open_store(db, must_exist=True)
    rows = [store.find_run(r) for r in refs or []]
    if campaign:
        rows += [r for r in store.runs(campaign=campaign) if is_waiting(r.state)]
    rows = [r for r in rows if r.job_id]
    if not rows:
        raise Dsv4Error("nothing to cancel: name runs (see `dsv4ctl runs`) or --campaign with unfinished runs")
    problems: list[str] = []
    for backend in {r.backend for r in rows}:
        problems += get_scheduler(backend).cancel([JobRef(r.job_id, Path(r.run_dir)) for r in rows
                                                   if r.backend == backend])
    if json:
        output.emit_json({"cancelled": [_run_json(store, r) for r in rows], "problems": problems})
    else:
        for problem in problems:
            output.warn(problem)
        output.text(f"asked to cancel {len(rows)} job(s): {', '.join(r.job_id for r in rows)}")
    raise typer.Exit(1 if problems else 0)


def resume(campaign: Annotated[str, typer.Argument(callback=check_campaign, help="Campaign name (see `dsv4ctl runs`).")],
           wait: Annotated[bool, typer.Option(help="Watch until every resubmitted run is judged.")] = False,
           db: DbOpt = None, json: JsonOpt = False) -> None:
    """Resubmit the runs of a campaign that never got a job or never produced a verdict, and nothing else."""
    from ..campaign import resume as resume_campaign
    store = open_store(db, must_exist=True)
    outcome = resume_campaign(store, campaign)
    if wait and outcome.run_ids:
        _watch_until_done(store, outcome.run_ids, quiet=json)
    rows = store.runs_by_ids(outcome.run_ids)
    if json:
        output.emit_json({"campaign": campaign, "resubmitted": [_run_json(store, r) for r in rows]})
    else:
        _runs_table(store, rows, f"campaign {campaign}: {outcome.submitted} resubmitted, "
                                 f"{len(outcome.failed)} failed to submit")
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
               callback=check_label, help="Name the run [default: the job id of its sacct record (J08), else "
                                          "J<run id>].")] = None,
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
    from ..ingest import ingest_log, ingest_root

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
                    + (f" [{done.mode}]" if done.mode != "offline" else ""))
        output.text(f"next: dsv4ctl verdict {row.label}")


def logs(run: RunArg,
         follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new lines until the run is "
                                                                     "final.")] = False,
         timeout: TimeoutOpt = None,
         db: DbOpt = None) -> None:
    """Print a run's raw.log (its current stage first, on stderr); with -f, follow it until the run ends.
    Exit 3 when --timeout passes first."""
    from ..watch import follow_log

    store = open_store(db, must_exist=True)
    row = store.find_run(run)
    follow_log(store, row, follow=follow, write=output.raw, note=output.progress, timeout_s=timeout)


def init(directory: Annotated[Path, typer.Argument(help="Where to write dsv4ctl.toml.", file_okay=False)]
         = Path(".")) -> None:
    """Write a commented starter dsv4ctl.toml (refuses to overwrite one). Every command run in this folder or
    below then uses its database and runs directory."""
    from ..config import write_starter

    path = write_starter(directory)
    output.text(f"wrote {path}: edit it, then `dsv4ctl runs` from anywhere below {path.parent.resolve()}")


def register(app: typer.Typer) -> None:
    for command in (init, submit, status, runs, show, logs, cancel, resume, ingest):
        app.command()(command)
