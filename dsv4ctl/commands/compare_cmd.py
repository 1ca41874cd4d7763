"""`dsv4ctl compare`: is the candidate faster, and is it still correct?"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import output
from .options import DbOpt, JsonOpt, check_alpha, check_direction, check_factor

SideArg = Annotated[str, typer.Argument(help="Experiment name, spec file, run/job ids (12,13) or tag:NAME.")]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _ci(ci) -> str:
    if ci is None:
        return "-"
    lo, hi = ci
    return "±∞ (need more runs)" if lo == float("-inf") or hi == float("inf") else f"[{_fmt(lo)}, {_fmt(hi)}]"


def compare(baseline: SideArg, candidate: SideArg,
            metric: Annotated[str, typer.Option(help="A stored metric (gen_s, tokens_per_s, ttft_s, ...).")]
            = "gen_s",
            alpha: Annotated[float, typer.Option(help="Significance level of the Mann-Whitney U test.",
                                                  callback=check_alpha)] = 0.05,
            factor: Annotated[float, typer.Option(help="Smallest improvement worth promoting (1.05 = 5%).",
                                                   callback=check_factor)]
            = 1.05,
            expect_diff: Annotated[Optional[list[str]], typer.Option(
                help="The setting meant to differ (e.g. switches.DSV4_MOE_ROUTING_Q1); warns about any other.")]
            = None,
            direction: Annotated[Optional[str], typer.Option(
                help="lower or higher is better [default: from the metric's name].", callback=check_direction)]
            = None,
            markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table.")] = False,
            db: DbOpt = None, json: JsonOpt = False) -> None:
    """Compare two sets of runs: correctness gate, what differs, statistics, decision.
    Exit 0 promote, 1 reject or blocked, 3 inconclusive."""
    from ..compare import compare as run_compare
    from ..store import open_store

    result = run_compare(open_store(db), baseline, candidate, metric, alpha, factor, expect_diff, direction)
    if json:
        output.emit_json(result.to_json())
    elif markdown:
        output.raw(to_markdown(result))
    else:
        show(result)
    raise typer.Exit(result.exit_code)


def rows(c) -> list[tuple[str, str, str]]:
    b, k = c.baseline, c.candidate
    return [("runs (passed / all)", f"{b.n} / {len(b.runs)}", f"{k.n} / {len(k.runs)}"),
            (f"median {c.metric}", _fmt(b.median), _fmt(k.median)),
            ("95% CI of the median", _ci(b.ci), _ci(k.ci))]


def show(c) -> None:
    style = {"promote": "bold green", "reject": "bold red", "blocked": "bold red"}.get(c.decision, "bold yellow")
    output.markup(f"[{style}]{c.decision.upper()}[/] — {output.escape(c.metric)} ({c.direction} is better), "
                  f"candidate/baseline {_fmt(c.ratio)}" + (f" {_ci(c.ratio_ci)}" if c.ratio_ci else "")
                  + f", p = {_fmt(c.p_value)}" + (" (significant)" if c.significant else ""))
    output.table(None, ["", c.baseline.name, c.candidate.name], rows(c))
    for reason in c.reasons:
        output.text(f"  • {reason}")
    if c.paired:
        output.text(f"  paired: {c.paired['pairs']} pairs, median difference {_fmt(c.paired['median_difference'])}, "
                    f"Wilcoxon p = {_fmt(c.paired['wilcoxon_p'])}")
    if c.differences:
        output.table("what differs", ["setting", "baseline", "candidate"],
                     [(d["key"], ", ".join(map(str, d["baseline"])), ", ".join(map(str, d["candidate"])))
                      for d in c.differences])
    for t in c.token_differences:
        output.warn(f"greedy outputs differ: request {t['request']}, token {t['position']}: "
                    f"{t['baseline']} vs {t['candidate']}")
    for warning in c.warnings:
        output.warn(warning)


def to_markdown(c) -> str:
    from ..report import md

    lines = [f"**{c.decision}** — `{md(c.metric)}` ({c.direction} is better): candidate/baseline {_fmt(c.ratio)}, "
             f"p = {_fmt(c.p_value)}", "", f"| | {md(c.baseline.name)} | {md(c.candidate.name)} |", "|---|---:|---:|"]
    lines += [f"| {md(a)} | {md(b)} | {md(d)} |" for a, b, d in rows(c)]
    lines += [""] + [f"- {md(r)}" for r in c.reasons] + [f"- warning: {md(w)}" for w in c.warnings]
    if c.differences:
        lines += ["", "| setting | baseline | candidate |", "|---|---|---|"]
        lines += [f"| {md(d['key'])} | {md(d['baseline'])} | {md(d['candidate'])} |" for d in c.differences]
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    app.command()(compare)
