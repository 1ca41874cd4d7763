"""`dsv4ctl reference set` and `dsv4ctl history`: performance references and the history of a metric (issue 17)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import output
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
    experiment is warned about."""
    from ..perf import (SpecLayoutError, parse_tolerance, perf_yaml, reference_from,
                        save_reference, spec_mismatch, write_into_spec)
    from ..reference_source import samples_from
    from ..specload import read_spec_text

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
    save_reference(store, experiment, block, described)
    if new_text is not None:
        spec.write_text(new_text, encoding="utf-8")
        output.info(f"wrote expect.perf into {spec}")
    if json:
        output.emit_json({"experiment": experiment, "from": described, "perf": block})
    else:
        output.raw(perf_yaml(block))


def history(experiment: ExperimentArg,
            metric: Annotated[str, typer.Option(help="The stored metric.")] = "gen_s",
            by: Annotated[str, typer.Option(help="Group runs by `commit` (git sha, else vLLM version) or `date`.")]
            = "commit",
            db: DbOpt = None, json: JsonOpt = False) -> None:
    """Every passed run's metric over commits or dates: medians with 95% intervals, a sparkline, and the steps
    found by change-point detection (PELT, MBIC penalty; Mann-Whitney p per step). Failed runs never count."""
    from ..history import build_history, check_series, samples, sparkline

    if by not in ("commit", "date"):
        raise typer.BadParameter(f"{by!r}: use commit or date", param_hint="--by")
    store = open_store(db, must_exist=True)
    check_series(store, experiment, metric)
    result = build_history(experiment, metric, by, samples(store, experiment, metric, by))
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
