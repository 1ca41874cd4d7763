"""`dsv4ctl profile`: where the time goes in a run, and what changed between two (issue 23)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import DbOpt, JsonOpt, check_alpha

TargetsArg = Annotated[list[str], typer.Argument(
    help="A run (12, J17, latest), campaign:NAME, an experiment, a trace file (.pt.trace.json[.gz], rocprofv3 "
         "kernel_trace.csv or _results.json) or a folder of one run's traces. Two targets: their A/B.")]


def profile(targets: TargetsArg,
            rules: Annotated[Optional[Path], typer.Option(
                help="Category rules (JSON) instead of the shipped ones.", exists=True, dir_okay=False)] = None,
            again: Annotated[bool, typer.Option("--again", help="Read a run's traces again, not its stored rows.")]
            = False,
            keep: Annotated[bool, typer.Option("--store/--no-store", help="Store a run's breakdown with it.")]
            = True,
            alpha: Annotated[float, typer.Option(help="A/B: significance level of the Mann-Whitney U test.",
                                                  callback=check_alpha)] = 0.05,
            min_change: Annotated[float, typer.Option(help="A/B: smallest relative change called one (0.05 = 5%).",
                                                       min=0)] = 0.05,
            min_us: Annotated[float, typer.Option(help="A/B: smallest absolute change called one, in us.", min=0)]
            = 50.0,
            db: DbOpt = None, json: JsonOpt = False) -> None:
    """Break a profile's time down by category, module and kernel, or (two targets) compare two. Exit 0 shown
    (or no change), 1 a category or module changed past the gate or a trace could not be read (cut, not a
    trace, too large), 2 usage (no such run, a run without traces, bad --rules)."""
    from ..errors import UsageError
    from ..profile.categories import load_rules
    from ..profile.targets import resolve
    from .options import open_store

    if len(targets) > 2:
        raise UsageError(f"{len(targets)} targets: give one to show or two to compare (a folder holds one run's "
                         "ranks)")
    rule_set = load_rules(str(rules) if rules else None)
    opened = []

    def store():
        if not opened:
            opened.append(open_store(db, must_exist=True, announce=not json))
        return opened[0]

    found = [resolve(store, t, rule_set, keep, again) for t in targets]
    if len(found) == 1:
        _show(found[0], json)
        return
    _compare(targets, found, alpha, min_change, min_us, json)


def _show(profiles, as_json: bool) -> None:
    from ..profile.view import profile_json

    data = [profile_json(p) for p in profiles]
    if as_json:
        output.emit_json(data[0] if len(data) == 1 else data)
        return
    for d in data:
        draw_profile(d)


def draw_profile(d, modules: int = 15, kernels: bool = True) -> None:
    """One profile in the terminal: its headline, what it must say (a FAILED verdict), categories, modules and
    (unless `show` draws it) the top kernels."""
    from ..profile.view import category_rows, collective_rows, headline, kernel_rows, module_rows

    output.text(headline(d))
    for note in d["notes"]:
        output.warn(note)
    output.table("categories", ["category", "us", "share"], category_rows(d))
    output.table("modules (inclusive)" if modules >= len(d["modules"]) else f"top {modules} modules (inclusive)",
                 ["module", "us", "share"], module_rows(d, modules))
    if kernels:
        output.table("top kernels" if d["device"] == "gpu" else "top CPU ops", ["name", "count", "us"],
                     kernel_rows(d))
    if kernels and d.get("collectives"):
        output.table("communication by collective", ["collective", "kernels", "us"], collective_rows(d))


def show_stored_profile(profile, unread: str | None, run_id) -> None:
    """`show RUN`'s profile section: the stored profile, or where its traces wait to be read."""
    if profile is not None:
        output.text("profile:", style="bold")
        draw_profile(profile, modules=8, kernels=False)
    elif unread:
        output.text(f"profile: traces in {unread}, not read yet: `dsv4ctl profile {run_id}` reads and stores them")


def _compare(targets, found, alpha, min_change, min_us, as_json: bool) -> None:
    from ..profile.diff import Gate, diff_profiles

    result = diff_profiles(targets[0], [p.ranks for p in found[0]], targets[1], [p.ranks for p in found[1]],
                           Gate(alpha, min_change, min_us))
    notes = result.notes + [n for side in found for p in side for n in p.notes]
    changed = any(r.changed for r in result.rows)
    if as_json:
        output.emit_json({**result.to_json(), "notes": notes, "changed": changed})
    else:
        output.text(f"baseline {targets[0]} ({len(found[0])} profiles) vs candidate {targets[1]} "
                    f"({len(found[1])} profiles); {gate_text(result.gate)}")
        show_diff(result, notes)
    raise typer.Exit(1 if changed else 0)


def gate_text(gate) -> str:
    return f"gate: p < {gate.alpha}, |change| >= {gate.min_relative:.0%} and >= {gate.min_us:g} us"


DIFF_COLUMNS = ["kind", "name", "base us", "cand us", "delta us", "change", "p", "decision"]


def show_diff(result, notes: list[str]) -> None:
    """The A/B table of profiles, what explains the delta, and the notes (`profile A B`, `compare --profile`)."""
    from ..profile.view import diff_rows

    output.table(None, DIFF_COLUMNS, diff_rows(result))
    if result.explains:
        output.text(f"what explains the delta: {', '.join(result.explains)} "
                    f"({result.explained_share:.0%} of the total change)")
    for note in notes:
        output.warn(note)


def show_profile_comparison(pc) -> None:
    """`compare --profile`'s section under compare's own output."""
    output.text(f"profiles: {len(pc.baseline.profiled_runs)} baseline and {len(pc.candidate.profiled_runs)} "
                f"candidate runs that passed; {gate_text(pc.gate)}", style="bold")
    if pc.diff is None:
        output.warn(f"no profile A/B: {pc.error}")
        for note in pc.notes():
            output.warn(note)
        return
    show_diff(pc.diff, pc.notes())


def profile_markdown(pc) -> str:
    """`compare --profile --markdown`: the same table in Markdown."""
    from ..profile.view import diff_rows
    from ..report.markdown import md

    lines = ["", f"**profiles**: {len(pc.baseline.profiled_runs)} baseline and {len(pc.candidate.profiled_runs)} "
             f"candidate runs that passed; {md(gate_text(pc.gate))}", ""]
    if pc.diff is None:
        lines.append(f"- no profile A/B: {md(pc.error)}")
    else:
        lines += ["| " + " | ".join(DIFF_COLUMNS) + " |", "|" + "---|" * len(DIFF_COLUMNS)]
        lines += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in diff_rows(pc.diff)]
        if pc.diff.explains:
            lines += ["", f"What explains the delta: {md(', '.join(pc.diff.explains))} "
                          f"({pc.diff.explained_share:.0%} of the total change)."]
    lines += [""] * bool(pc.notes()) + [f"- {md(note)}" for note in pc.notes()]
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    app.command()(profile)
