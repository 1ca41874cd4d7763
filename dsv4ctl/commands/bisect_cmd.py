"""`dsv4ctl bisect`: find the change (or the value) that breaks a run, judging each point by its failure rate;
`dsv4ctl bisect-report`: a stored bisection as a page."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import BackendOpt, DbOpt, JsonOpt, RunsDirOpt, at_least, confirm_plan, open_store


def check_rate(value: float) -> float:
    if not 0 <= value < 1:
        raise typer.BadParameter(f"{value} is not a failure rate; give a number in 0..1 (0.1 = 10%)")
    return value


def bisect(specs: Annotated[Optional[list[Path]], typer.Argument(
               help="GOOD.yaml BAD.yaml (the changes between them), or one SPEC with --field and --range.",
               exists=True, dir_okay=False, readable=True, show_default=False)] = None,
           field: Annotated[Optional[str], typer.Option(help="A whole-number field path of SPEC (batch, "
                                                             "sampling.max_tokens).")] = None,
           range_: Annotated[Optional[str], typer.Option("--range", help="LOW..HIGH for --field (1..64).")] = None,
           threshold: Annotated[float, typer.Option(callback=check_rate, help="--field: the failure rate a value "
                                                    "must exceed to count as failing.")] = 0.1,
           max_jobs: Annotated[int, typer.Option(callback=at_least(1), help="Spend at most this many jobs.")] = 200,
           cap: Annotated[int, typer.Option(callback=at_least(1), help="Runs per point at most; a point still "
                                            "undecided there is ambiguous.")] = 20,
           base_runs: Annotated[int, typer.Option(callback=at_least(1), help="Runs of GOOD and BAD (or of the top "
                                                  "of the range) before anything else.")] = 5,
           resume: Annotated[Optional[int], typer.Option(help="Go on with a stored bisection (its id).")] = None,
           yes: Annotated[bool, typer.Option("--yes", "-y", help="Start without asking (required without a "
                                                                "terminal).")] = False,
           backend: BackendOpt = None, runs_dir: RunsDirOpt = None, db: DbOpt = None, json: JsonOpt = False) -> None:
    """Bisect GOOD.yaml BAD.yaml to the smallest set of changes that turns good into bad (ddmin), or SPEC --field F
    --range LOW..HIGH to the smallest failing value. Every point is real jobs, judged by its failure rate with Wilson
    95% intervals; the plan and its worst-case cost come first. The same command again resumes. Exit 0 with a sure
    answer, 1 when it is not sure (ambiguous, or --max-jobs spent)."""
    from ..bisect.search import execute, finished_result, prepared_from_store
    from ..config import runs_dir as configured_runs_dir

    store = open_store(db)
    result = None
    if resume is not None:
        prepared, settings = prepared_from_store(store, resume, max_jobs)
        if specs or field or range_:
            _same_as_resumed(resume, prepared, _prepare(specs or [], field, range_, settings), settings)
    else:
        settings = _settings(backend, configured_runs_dir(runs_dir), max_jobs, cap, base_runs, threshold)
        prepared = _prepare(specs or [], field, range_, settings)
        result = finished_result(store, prepared, settings)  # a finished one needs no job, so no confirmation
        if result is None:
            _confirm(prepared.plan, yes, json)
    if result is None:
        result = execute(store, prepared, settings, " ".join(["dsv4ctl", *sys.argv[1:]]), output.info, resume)
    _show(result, json)
    raise typer.Exit(0 if result["sure"] else 1)


def _same_as_resumed(resume: int, stored, given, settings) -> None:
    """`--resume N` with specs (or --field/--range) that are not bisection N's: refused, never silently ignored."""
    from ..bisect.run import inputs_key
    from ..errors import UsageError

    if inputs_key(given.kind, given.inputs, settings) != inputs_key(stored.kind, stored.inputs, settings):
        inputs = stored.inputs
        what = (f"{inputs['good_path']} {inputs['bad_path']}" if stored.kind == "changes" else
                f"{inputs['spec_path']} --field {inputs['field']} --range {inputs['range'][0]}..{inputs['range'][1]}")
        raise UsageError(f"--resume {resume} is the bisection of {what}; the specs given are not: drop them to "
                         f"resume it, or drop --resume to bisect them")


def _settings(backend, runs_root: Path, max_jobs: int, cap: int, base_runs: int, threshold: float):
    from ..bisect.run import Settings
    from ..scheduler import resolve_backend

    return Settings(resolve_backend(backend), str(runs_root.resolve()), max_jobs, cap, base_runs, threshold)


def _prepare(specs: list[Path], field: str | None, range_: str | None, settings):
    from ..bisect.changes import parse_range
    from ..bisect.search import prepare_boundary, prepare_changes
    from ..errors import UsageError

    if field or range_:
        if len(specs) != 1 or not (field and range_):
            raise UsageError("a numeric bisection takes one SPEC with both --field and --range")
        return prepare_boundary(specs[0], field, *parse_range(range_), settings)
    if len(specs) != 2:
        raise UsageError("give GOOD.yaml BAD.yaml, or one SPEC with --field and --range")
    return prepare_changes(specs[0], specs[1], settings)


def _confirm(plan, yes: bool, as_json: bool) -> None:
    hours = "unknown (the spec sets no slurm.time)" if plan.node_hours is None else f"{plan.node_hours:.2f}"
    output.info(f"plan: bisect {plan.points}; worst case {plan.worst_jobs} job(s), bounded by --max-jobs "
                f"{plan.max_jobs}: at most {min(plan.worst_jobs, plan.max_jobs)} job(s), {hours} node-hour(s)")
    if not yes:
        confirm_plan()


def _show(result: dict, as_json: bool) -> None:
    if as_json:
        output.emit_json(result)
        return
    if result["kind"] == "nothing":
        output.text(f"bisection {result['bisection']}: nothing to bisect: {result['reason']}")
        output.text(f"jobs spent: {result['jobs']}")
        return
    if result["kind"] == "changes":
        output.text(f"bisection {result['bisection']}: GOOD fails {_rate(result['good'])}, BAD {_rate(result['bad'])}")
        output.table("culprit" + ("" if result["minimal"] else " (not shown minimal)"),
                     ["change", "GOOD", "BAD"],
                     [(c["name"], "(unset)" if c["good_missing"] else c["good"],
                       "(unset)" if c["bad_missing"] else c["bad"]) for c in result["culprit"]])
    else:
        output.text(f"bisection {result['bisection']}: {result['field']} fails above {result['threshold']:g} from "
                    f"{result['boundary']}" + ("" if result["below"] is None else f" (passes at {result['below']})"))
    output.text(f"how sure: {result['how_sure']}" + ("" if result["sure"] else " — NOT SURE"))
    if result.get("stopped"):
        output.warn(result["stopped"])
    output.text(f"jobs spent: {result['jobs']}")
    output.text(f"next: dsv4ctl bisect-report {result['bisection']} -o bisect.html")


def _rate(rate: dict) -> str:
    lo, hi = rate["interval"]
    return f"{rate['failures']}/{rate['runs']} ({lo:.0%}–{hi:.0%})"


def bisect_report(bisection: Annotated[int, typer.Argument(help="The bisection's id (`dsv4ctl bisect` prints it).")],
                  out: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the page here.")] = None,
                  db: DbOpt = None, json: JsonOpt = False) -> None:
    """A stored bisection as a self-contained HTML page (or --json): each step with its probes, runs and rates, and
    the culprit with its evidence."""
    import json as json_module

    from ..bisect.report import bisection_data, render_bisection

    data = bisection_data(open_store(db, must_exist=True), bisection)
    text = json_module.dumps(data, indent=2, default=str) + "\n" if json else render_bisection(data)
    if out:
        out.write_text(text, encoding="utf-8")
        output.text(f"wrote {out}")
    else:
        output.raw(text)


def register(app: typer.Typer) -> None:
    app.command()(bisect)
    app.command("bisect-report")(bisect_report)
