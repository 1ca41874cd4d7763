"""`dsv4ctl stable` (the stable set with provenance; `history`, `diff SPEC`), `dsv4ctl promote` (a change enters
the stable set only through the numerics, end-to-end and throughput gates) and `dsv4ctl promotion-report ID`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import BackendOpt, DbOpt, JsonOpt, RunsDirOpt, confirm_plan, open_store

StableOpt = Annotated[Optional[Path], typer.Option(
    "--stable", help="The stable file [env: DSV4CTL_STABLE; else dsv4ctl.toml's [promote] stable, else stable.yaml "
                     "beside dsv4ctl.toml, else ./stable.yaml].", show_default=False)]

stable_app = typer.Typer(invoke_without_command=True)  # its help is the callback's docstring


@stable_app.callback()
def stable(ctx: typer.Context, stable_file: StableOpt = None, json: JsonOpt = False) -> None:
    """Show the stable set: each switch, its value and the promotion that set it (date, commit, runs, figures),
    and the gates a change must pass. `stable history` lists every promotion; `stable diff SPEC` what a spec
    changes against it."""
    if ctx.invoked_subcommand is not None:
        return
    from ..promote.stable import load_stable, locate
    from ..promote.views import stable_view

    view = stable_view(load_stable(locate(stable_file)))
    if json:
        output.emit_json(view)
        return
    output.text(f"stable set {view['path']} (sha {view['sha']})")
    output.table(None, ["switch", "value", "set by", "date", "commit", "figures"],
                 [(r["name"], r["value"], r["set_by"], r["date"] or "-", (r["commit"] or "-")[:12],
                   "; ".join(f"{k}: {v}" for k, v in r["figures"].items()) or "-") for r in view["switches"]])
    for name, gate in view["gates"].items():
        output.text(f"gate {name}: " + ", ".join(f"{k} {v}" for k, v in gate.items() if k != "name"))


@stable_app.command("history")
def stable_history(switch: Annotated[Optional[str], typer.Argument(help="Only the promotions of this switch.")] = None,
                   stable_file: StableOpt = None, db: DbOpt = None, json: JsonOpt = False) -> None:
    """Every promotion of the stable set, newest first, promoted, refused or undecided, with each gate's
    outcome, reason and figures: why a switch has its value."""
    from ..promote.stable import load_stable, locate
    from ..promote.views import history_data

    from ..config import database

    stable = load_stable(locate(stable_file))
    store = open_store(db) if Path(database(db).value).exists() else None  # no database: the file's own record
    data = history_data(store, stable, switch)
    if json:
        output.emit_json(data)
        return
    if not data["promotions"] and not data["file_provenance"]:
        output.text("no promotion recorded" + (f" for {switch}" if switch else ""))
    for p in data["promotions"]:
        changes = ", ".join(f"{k}={'(default)' if v is None else v}" for k, v in p["changes"].items())
        output.text(f"promotion {p['promotion']} ({p['kind']} {changes}): {p['decision'] or p['state']} "
                    f"[{p['when']}]")
        for g in p["gates"]:
            output.text(f"  {g['gate']}: {g['outcome']}: {g['reason']}" + (f" (runs {_ids(g['runs'])})"
                                                                          if g["runs"] else ""))
    for entry in data["file_provenance"]:
        output.text(f"{entry['switch']}: in the file" + (f" (promotion {entry['promotion']}, not in this database)"
                                                        if entry.get("promotion") else "")
                    + (f": {entry['note']}" if entry.get("note") else "")
                    + "".join(f"; {k}: {v}" for k, v in (entry.get("figures") or {}).items()))


@stable_app.command("diff")
def stable_diff(spec: Annotated[Path, typer.Argument(help="Experiment spec (YAML).", exists=True, dir_okay=False,
                                                     readable=True)],
                stable_file: StableOpt = None, json: JsonOpt = False) -> None:
    """Name what SPEC changes against the stable set: each switch whose value its job gets differs. Exit 0 when
    it changes nothing, 1 when it does."""
    from ..promote.stable import load_stable, locate
    from ..promote.views import spec_diff

    data = spec_diff(load_stable(locate(stable_file)), spec)
    if json:
        output.emit_json(data)
    elif not data["changes"]:
        output.text(f"{spec}: runs the stable set unchanged")
    else:
        output.table(f"{spec} against {data['stable']}", ["switch", "stable", "spec", "point"],
                     [(c["name"], c["stable"] or "(unset)", c["spec"] or "(unset)",
                       ",".join(f"{k}={v}" for k, v in (c["point"] or {}).items()) or "-") for c in data["changes"]])
    raise typer.Exit(1 if data["changes"] else 0)


def promote(changes: Annotated[Optional[list[str]], typer.Argument(
                help="SWITCH=VALUE to put into the stable set (one or more).", show_default=False)] = None,
            demote: Annotated[Optional[str], typer.Option(
                help="Take SWITCH back out (a flag goes to 0, another switch to its default), through the same "
                     "gates.", show_default=False)] = None,
            yes: Annotated[bool, typer.Option("--yes", "-y", help="Start without asking (required without a "
                                                                 "terminal).")] = False,
            dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan (gates, jobs, node-hours) and "
                                                                   "stop.")] = False,
            commit: Annotated[bool, typer.Option("--commit", help="Commit the new stable file (git) when "
                                                                 "promoted.")] = False,
            stable_file: StableOpt = None, backend: BackendOpt = None, runs_dir: RunsDirOpt = None,
            db: DbOpt = None, json: JsonOpt = False) -> None:
    """Run the gates, in order, for a change to the stable set: numerics, end to end (failure rate, Wilson upper
    bound), throughput (interleaved A/B against the stable set); stop at the first that does not pass. The stable
    file is written only when all three pass. The same command again resumes a promotion killed mid-way. Exit 0
    promoted, 1 refused, 5 could not decide (a gate could not run: sbatch refused, every run lost), 2 usage."""
    from ..config import runs_dir as configured_runs_dir
    from ..errors import UsageError
    from ..promote.run import Settings, demotion, execute, parse_changes, prepare
    from ..promote.stable import load_stable, locate
    from ..scheduler import resolve_backend

    if bool(changes) == bool(demote):
        raise UsageError("give SWITCH=VALUE ... to promote, or --demote SWITCH, not both")
    stable = load_stable(locate(stable_file))
    kind, wanted = ("demote", demotion(stable, demote)) if demote else ("promote", parse_changes(changes or []))
    prepared = prepare(stable, kind, wanted)
    _show_plan(prepared, json and dry_run)
    if dry_run:
        return
    settings = Settings(resolve_backend(backend), str(configured_runs_dir(runs_dir).resolve()), commit)
    store = open_store(db)
    _confirm(store, prepared, settings, yes)
    result = execute(store, prepared, settings, " ".join(["dsv4ctl", *sys.argv[1:]]), output.info)
    _show(result, json)
    raise typer.Exit(result["exit_code"])


def _show_plan(prepared, as_json: bool) -> None:
    if as_json:
        output.emit_json({"kind": prepared.kind, "diff": prepared.diff, "plan": prepared.plan,
                          "stable": str(prepared.stable.path)})
        return
    words = ", ".join(f"{d['name']} {d['before'] or '(unset)'} -> {d['after'] or '(default)'}" for d in prepared.diff)
    output.info(f"plan: {prepared.kind} {words} in {prepared.stable.path}; gates in order, stopping at the first "
                "that does not pass:")
    for step in prepared.plan:
        hours = "?" if step["node_hours"] is None else f"{step['node_hours']:.2f}"
        output.info(f"  {step['gate']}: {step['what']}: {step['jobs']} job(s), {hours} node-hour(s)")


def _confirm(store, prepared, settings, yes: bool) -> None:
    """Asked once; a promotion already finished or under way needs no confirmation."""
    from ..promote import store as promo_store

    key = promo_store.inputs_key(prepared.kind, prepared.changes, prepared.stable.sha, settings.backend)
    if not (yes or store.db.execute("SELECT 1 FROM promotions WHERE inputs_key = ?", [key]).fetchone()):
        confirm_plan()


def _show(result: dict, as_json: bool) -> None:
    if as_json:
        output.emit_json(result)
        return
    for g in result["gates"]:
        output.text(f"{g['gate']}: {g['outcome']}: {g['reason']}")
    output.text(f"promotion {result['promotion']}: {result['decision']}: {result['reason']}")
    if result["written"]:
        output.text(f"wrote {result['stable_path']}" + (f" (commit {result['commit'][:12]})"
                                                        if result.get("commit") else ""))
    else:
        output.text(f"{result['stable_path']} unchanged")
    output.text(f"next: dsv4ctl promotion-report {result['promotion']} -o promotion.html")


def promotion_report(promotion: Annotated[int, typer.Argument(help="The promotion's id (`promote` prints it).")],
                     out: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the page here "
                                                                 "(.html, .md or .json by its suffix).")] = None,
                     markdown: Annotated[bool, typer.Option("--markdown", help="Markdown instead of HTML.")] = False,
                     db: DbOpt = None, json: JsonOpt = False) -> None:
    """A stored promotion as a self-contained HTML page (or --markdown, --json): each gate's verdicts, rates and
    figures, the decision and the stable diff."""
    import json as json_module

    from ..promote.report import promotion_data, render_html, render_markdown

    data = promotion_data(open_store(db, must_exist=True), promotion)
    suffix = out.suffix.lower() if out else ""
    if json or suffix == ".json":
        text = json_module.dumps(data, indent=2, default=str) + "\n"
    elif markdown or suffix == ".md":
        text = render_markdown(data)
    else:
        text = render_html(data)
    if out:
        out.write_text(text, encoding="utf-8")
        output.text(f"wrote {out}")
    else:
        output.raw(text)


def _ids(runs: list[int]) -> str:
    return ",".join(map(str, runs[:12])) + (" ..." if len(runs) > 12 else "")


def register(app: typer.Typer) -> None:
    app.add_typer(stable_app, name="stable")
    app.command()(promote)
    app.command("promotion-report")(promotion_report)
