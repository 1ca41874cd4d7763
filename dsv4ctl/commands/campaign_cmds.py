"""Campaign commands: suite, sweep, report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import (BackendOpt, DbOpt, JsonOpt, RunsDirOpt, TimeoutOpt, at_least, check_campaign, check_repeats,
                      open_store)


def suite(directory: Annotated[Path, typer.Argument(help="A folder of specs (experiments/regression-cpu).",
                                                    exists=True, file_okay=False)],
          repeats: Annotated[Optional[int], typer.Option(callback=check_repeats, help="Runs per case [default: each spec's].")] = None,
          platform: Annotated[str, typer.Option(help="What this cluster has: cases for other platforms are "
                                                     "skipped with the reason.")] = "cpu",
          backend: BackendOpt = None,
          campaign: Annotated[Optional[str], typer.Option(callback=check_campaign, help="Campaign name.")] = None,
          runs_dir: RunsDirOpt = None,
          timeout: TimeoutOpt = None,
          db: DbOpt = None, json: JsonOpt = False) -> None:
    """Run a regression suite as one campaign and print the pass/fail matrix. Exit 0 only if every case passed,
    3 when --timeout passed first."""
    from ..campaign.plan import submit as submit_campaign
    from ..config import runs_dir as configured_runs_dir
    from ..campaign.suite import plan_suite, suite_matrix
    from .run_cmds import _watch_until_done

    plan = plan_suite(directory, platform)
    store = open_store(db)
    run_ids: list[int] = []
    if campaign is None:
        from datetime import datetime

        campaign = f"suite-{directory.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    name = campaign
    if plan.runnable:
        outcome = submit_campaign(store, plan.runnable, backend, repeats=repeats,
                                  runs_root=configured_runs_dir(runs_dir), campaign=campaign,
                                  command=f"dsv4ctl suite {directory}")
        name, run_ids = outcome.campaign, outcome.run_ids
        _watch_until_done(store, run_ids, timeout_s=timeout)
    cases = suite_matrix(store, name, plan.skipped) if plan.runnable else \
        suite_matrix(store, "", plan.skipped)
    if json:
        output.emit_json({"campaign": name if plan.runnable else None, "cases": [{"case": c.case, "runs": c.runs, "passed": c.passed,
                                                       "statuses": c.statuses, "first_blocker": c.first_blocker,
                                                       "skipped": c.skipped, "ok": c.ok,
                                                       "reference": {"checked": c.perf_checked,
                                                                     "outside": c.perf_outside}} for c in cases]})
    else:
        output.table(f"suite {directory} — " + (f"campaign {name}" if plan.runnable else "nothing ran"),
                     ["case", "runs", "passed", "result", "reference", "first blocker"],
                     [(c.case, c.runs or "-", c.passed if not c.skipped else "-",
                       "SKIPPED" if c.skipped else ("PASS" if c.ok else "FAIL"), c.reference,
                       c.skipped or c.first_blocker or "") for c in cases])
        if plan.runnable:
            output.text(f"next: dsv4ctl report {name} -o report.html")
        else:  # no campaign was made: a `next:` naming it would send the user to "no campaign named ..."
            output.warn(f"every case was skipped on platform {platform}: nothing ran and no campaign was made")
    failed = [c for c in cases if not c.skipped and not c.ok]
    raise typer.Exit(1 if failed or not plan.runnable else 0)


def sweep(spec: Annotated[Optional[Path], typer.Argument(help="A spec with a matrix (e.g. batch: [1, 2, 4, 8]).")]
          = None,
          repeats: Annotated[Optional[int], typer.Option(callback=check_repeats, help="Runs per point [default: spec.repeats].")] = None,
          campaign: Annotated[Optional[str], typer.Option(
              callback=check_campaign, help="Name it; if it exists (or is `latest`), resume it (unfinished points only) instead of submitting.")] = None,
          backend: BackendOpt = None,
          runs_dir: RunsDirOpt = None,
          wait: Annotated[bool, typer.Option(help="Wait for every run before summarising.")] = True,
          timeout: TimeoutOpt = None,
          db: DbOpt = None, json: JsonOpt = False) -> None:
    """Failure rate per matrix point with Wilson 95% intervals, and where failures start. Resumable.
    Exit 3 when --timeout passed first."""
    from ..campaign.plan import resume
    from ..campaign.plan import submit as submit_campaign
    from ..config import runs_dir as configured_runs_dir
    from ..errors import Dsv4Error
    from ..store import RunNotFound
    from ..campaign.sweep import summarise_campaign
    from .run_cmds import _watch_until_done

    store = open_store(db)
    existing = None
    if campaign:
        try:
            existing = store.campaign(campaign)
        except RunNotFound:
            if campaign == "latest" or spec is None:
                raise  # nothing to resume, and nothing to start: the message names the known campaigns
            existing = None
    if existing:
        name = existing["name"]
        resume(store, name)
    elif spec is not None:
        _require_matrix(spec)
        name = submit_campaign(store, [spec], backend, repeats=repeats, campaign=campaign,
                               runs_root=configured_runs_dir(runs_dir), command=f"dsv4ctl sweep {spec}").campaign
    else:
        raise Dsv4Error("give a SPEC to start a sweep, or --campaign NAME of an existing one")
    if wait:
        _watch_until_done(store, [r.id for r in store.runs(campaign=name)], timeout_s=timeout)
    summary = summarise_campaign(store, name)
    from ..modes.serve.report import best_load_text, campaign_serving

    serving = campaign_serving(store, store.runs(campaign=name))  # a load sweep of serve runs (issue 14)
    if json:
        from dataclasses import asdict

        output.emit_json({**asdict(summary), "serving": serving})
        raise typer.Exit(0)
    output.table(f"sweep {name}: failure rate per point (Wilson 95%)",
                 ["point", "runs", "failures", "rate", "interval", "first blocker"],
                 [(p.label, f"{p.judged}/{p.runs}", p.failures, "-" if p.rate is None else f"{p.rate:.0%}",
                   f"{p.interval[0]:.0%}–{p.interval[1]:.0%}", p.first_blocker or "") for p in summary.points])
    if summary.boundary:
        below = summary.clean_below
        output.text(f"failures start at {summary.boundary.label}: {summary.boundary.failures}/"
                    f"{summary.boundary.judged}, {summary.boundary.interval[0]:.0%}–"
                    f"{summary.boundary.interval[1]:.0%}"
                    + (f"; {below.label}: 0/{below.judged}, at most {below.interval[1]:.0%}" if below else ""))
    elif not any(p.judged for p in summary.points):
        output.warn(f"nothing judged yet ({summary.pending} run(s) pending): no failure rate to read; "
                    f"`dsv4ctl status --campaign {name} --watch`, then this again")
    else:
        output.text(f"no failures in {sum(p.judged for p in summary.points)} judged run(s)"
                    + (f"; {summary.pending} still pending" if summary.pending else ""))
    for line in best_load_text(serving) if serving else []:
        output.text(line)
    output.text(f"next: dsv4ctl report {name} -o report.html")


def _require_matrix(spec: Path) -> None:
    """A sweep is over matrix points: a spec without one would be a silent one-point sweep (issue 26 m20)."""
    from ..errors import UsageError
    from ..spec.load import read_document

    if not read_document(spec).data.get("matrix"):
        error = UsageError(f"{spec} has no matrix: use submit --repeats N to run one spec several times")
        error.hint = (f"add `matrix: {{batch: [1, 2, 4]}}` (any field path) to sweep it, or "
                      f"`dsv4ctl submit {spec} --repeats 5`")
        raise error


def report(campaign: Annotated[str, typer.Argument(callback=check_campaign, help="Campaign name or `latest` (see `dsv4ctl campaigns`).")],
           out: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the page here.")] = None,
           markdown: Annotated[bool, typer.Option("--markdown", help="Markdown instead of HTML.")] = False,
           metric: Annotated[Optional[str], typer.Option(
               help="Metric whose distribution is plotted [default: gen_s; output_throughput for serve runs].")]
           = None,
           db: DbOpt = None,
           json: Annotated[bool, typer.Option("--json", help="The report's data as nested JSON instead of a page "
                                                            "(to stdout, or to --output).")] = False) -> None:
    """A self-contained HTML (or Markdown, or JSON) report of a campaign: runs, failure rates, metric
    distributions and, for an A/B campaign, the decision and each side's provenance."""
    import json as json_module

    from ..errors import UsageError
    from ..report.campaign import check_metric, render_html, render_markdown, report_data

    if json and markdown:
        raise UsageError("--json and --markdown are two formats: pick one")
    store = open_store(db, must_exist=True)
    name = store.campaign_name(campaign)
    if metric is not None:
        check_metric(store, name, metric)
    data = report_data(store, name, metric)
    if json:
        text = json_module.dumps(data.to_json(), indent=2, ensure_ascii=False, default=str) + "\n"
    else:
        text = render_markdown(data) if markdown else render_html(data)
    if out:
        out.write_text(text, encoding="utf-8")
        output.text(f"wrote {out}")
    else:
        output.raw(text)


CAMPAIGNS_SHOWN = 50


def campaigns(limit: Annotated[Optional[int], typer.Option(
                  "-n", "--limit", callback=at_least(1),
                  help=f"Only the newest N campaigns [default: {CAMPAIGNS_SHOWN}].", show_default=False)] = None,
              all_campaigns: Annotated[bool, typer.Option("--all", help="Every campaign.")] = False,
              db: DbOpt = None, json: JsonOpt = False) -> None:
    """List campaigns, newest first (the newest 50 unless --limit or --all): when made, how many runs, passed,
    failed and still running."""
    from ..store.queries import campaign_count, newest_campaigns

    store = open_store(db, must_exist=True)
    shown = None if all_campaigns else (limit or CAMPAIGNS_SHOWN)
    rows = newest_campaigns(store, shown)
    total = campaign_count(store) if shown is not None and len(rows) == shown else len(rows)
    if total > len(rows):
        output.info(f"the newest {len(rows)} of {total} campaigns; `dsv4ctl campaigns --all` lists every one")
    if json:
        output.emit_json(rows)
        return
    output.table(f"{len(rows)} campaign(s)", ["campaign", "created", "runs", "passed", "failed", "running"],
                 [(c["name"], (c["created_at"] or "")[:16].replace("T", " "), c["runs"], c["passed"], c["failed"],
                   c["running"]) for c in rows])
    if rows:
        output.text(f"next: dsv4ctl runs --campaign {rows[0]['name']} (or --campaign latest)")


def register(app: typer.Typer) -> None:
    for command in (campaigns, suite, sweep, report):
        app.command()(command)
