"""`dsv4ctl reference set` and `dsv4ctl history`: performance references and the history of a metric (issue 17)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import DbOpt, JsonOpt, open_store

reference_app = typer.Typer(help="Performance references: the bounds each passed run is checked against.",
                            no_args_is_help=True)
ExperimentArg = Annotated[str, typer.Argument(help="Experiment name (as in `dsv4ctl runs`).")]


@reference_app.command("set")
def reference_set(experiment: ExperimentArg,
                  source: Annotated[list[str], typer.Option(
                      "--from", help="A campaign name or a run (id, label, latest); repeatable: the medians of "
                                     "their passed runs.")],
                  metric: Annotated[Optional[list[str]], typer.Option(
                      help="Metric to reference (repeatable) [default: gen_s].")] = None,
                  tolerance: Annotated[str, typer.Option(help="Slack on each bound: 5% or 0.05.")] = "5%",
                  spec: Annotated[Optional[Path], typer.Option(
                      help="Write the block into this spec file's expect.perf (its other lines, comments and flow "
                           "style are kept).",
                      exists=True, dir_okay=False)] = None,
                  db: DbOpt = None, json: JsonOpt = False) -> None:
    """Set an experiment's performance reference from measured medians: print the `expect.perf` block, store it
    for the experiment (runs judged or ingested later are checked against it), and with --spec write it there.
    Nothing is stored when the spec cannot take it (not YAML, a layout it cannot edit); a spec that names another
    experiment is warned about, and so is a reference from fewer than 6 passed runs."""
    from ..analysis.perf import (
        SpecLayoutError,
        describe_reference,
        few_samples_warning,
        parse_tolerance,
        perf_yaml,
        reference_from,
        save_reference,
        spec_mismatch,
        write_into_spec,
    )
    from ..analysis.reference_source import samples_from
    from ..spec.load import read_spec_text

    store = open_store(db, must_exist=True)
    found, described = samples_from(store, experiment, source)
    block = reference_from(found, parse_tolerance(tolerance), metric or ["gen_s"])
    new_text = None
    if spec is not None:
        try:
            mismatch = spec_mismatch(spec, experiment)
            new_text = write_into_spec(read_spec_text(spec), block, str(spec))
        except SpecLayoutError as exc:
            output.raw(perf_yaml(block))
            exc.hint = f"nothing stored; paste the block above into {spec} by hand, or run without --spec"
            raise
        if mismatch:
            output.warn(mismatch)
    few = few_samples_warning(found, block)
    replaced = save_reference(store, experiment, block, described)
    if new_text is not None:
        spec.write_text(new_text, encoding="utf-8")
        output.info(f"wrote expect.perf into {spec}")
    if json:  # the warning and what was replaced are data here, so stderr stays for failures
        output.emit_json({"experiment": experiment, "from": described, "perf": block,
                          "samples": {m: len(found.get(m) or []) for m in block},
                          "replaces": replaced.to_json() if replaced else None, "warnings": [few] if few else []})
        return
    if few:
        output.warn(few)
    output.info(f"stored for {experiment}" + (f" (replaces {describe_reference(replaced)})" if replaced else "")
                + f"; `dsv4ctl reference show {experiment}` shows it, `reference unset {experiment}` removes it")
    output.raw(perf_yaml(block))


@reference_app.command("show")
def reference_show(experiment: Annotated[Optional[str], typer.Argument(
                       help="Experiment name [default: every stored reference].")] = None,
                   db: DbOpt = None, json: JsonOpt = False) -> None:
    """The references stored by `reference set`: per experiment its bounds, the runs they were measured on and
    when. A spec's own expect.perf is in the spec, not here. An experiment with none exits 2."""
    from ..analysis.perf import describe_reference, perf_yaml, reference_of, stored_references

    store = open_store(db, must_exist=True)
    found = [reference_of(store, experiment)] if experiment is not None else stored_references(store)
    if json:
        output.emit_json([r.to_json() for r in found])
    elif experiment is not None:
        output.info(describe_reference(found[0]))
        output.raw(perf_yaml(found[0].perf))
    else:
        output.table(f"{len(found)} stored reference(s)", ["experiment", "reference", "set"],
                     [(r.experiment, describe_reference(r).split(" from ")[0],
                       f"{r.set_at[:16].replace('T', ' ')} from {r.source}") for r in found])


@reference_app.command("unset")
def reference_unset(experiment: ExperimentArg, db: DbOpt = None, json: JsonOpt = False) -> None:
    """Remove the reference stored for an experiment: runs judged or ingested later are not checked against it
    (checks already recorded stay; a spec's expect.perf still applies). An experiment with none exits 2."""
    from ..analysis.perf import describe_reference, unset_reference

    store = open_store(db, must_exist=True)
    removed = unset_reference(store, experiment)
    if json:
        output.emit_json({"experiment": experiment, "removed": removed.to_json()})
    else:
        output.text(f"removed the reference of {experiment}: {describe_reference(removed)}")


def history(experiment: ExperimentArg,
            metric: Annotated[str, typer.Option(help="The stored metric.")] = "gen_s",
            by: Annotated[str, typer.Option(help="Group runs by `commit` (git sha, else vLLM version) or `date`.")]
            = "commit",
            all_groups: Annotated[bool, typer.Option("--all", help="Every commit or date, not the newest 50.")]
            = False,
            db: DbOpt = None, json: JsonOpt = False) -> None:
    """Every passed run's metric over the newest 50 commits or dates (--all: every one): medians with 95%
    intervals, a sparkline, and the steps found by change-point detection (PELT, MBIC penalty; Mann-Whitney p per
    step). Failed runs never count."""
    from ..analysis.history import GROUPS_SHOWN, build_history, check_series, sparkline, window

    if by not in ("commit", "date"):
        raise typer.BadParameter(f"{by!r}: use commit or date", param_hint="--by")
    store = open_store(db, must_exist=True)
    check_series(store, experiment, metric)
    found, older = window(store, experiment, metric, by, groups=None if all_groups else GROUPS_SHOWN)
    result = build_history(experiment, metric, by, found)
    if older:
        output.info(f"the newest {GROUPS_SHOWN} {by}s shown; older runs left out (--all shows every one)")
    if json:
        output.emit_json(result.to_json())
        return
    if not result.points:
        output.info(f"no passed run of {experiment!r} with metric {metric!r}")
        return
    output.table(f"{experiment} {metric} by {by}: {sparkline([p.median for p in result.points])}",
                 [by, "runs", "median", "95% CI", "vLLM", "spec"],
                 [(_short(p.group), p.n, f"{p.median:g}", _ci(p.ci), ", ".join(p.vllm_versions),
                   ", ".join(p.spec_hashes)) for p in result.points])
    for s in result.steps:
        output.text(f"step {_short(s.before)} -> {_short(s.after)}: {s.median_before:g} -> {s.median_after:g} "
                    f"({s.size}), Mann-Whitney p={s.p_value:.2g}"
                    + (f"; {'; '.join(s.notes)}" if s.notes else ""))
    if not result.steps:
        output.text("no step found")


def _short(group: str) -> str:
    """A git sha to 12 characters; other groups (a vLLM version, a date) whole."""
    import re

    found = re.fullmatch(r"([0-9a-f]{13,64})(-dirty)?", group)  # campaigns record `git describe`-like -dirty
    return found.group(1)[:12] + (found.group(2) or "") if found else group


def _ci(ci) -> str:
    lo, hi = ci
    return "±∞ (need >= 6 runs)" if lo == float("-inf") else f"{lo:g} .. {hi:g}"


def register(app: typer.Typer) -> None:
    app.add_typer(reference_app, name="reference")
    app.command()(history)
