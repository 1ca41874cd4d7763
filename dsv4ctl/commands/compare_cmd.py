"""`dsv4ctl compare`: is the candidate faster, and is it still correct?"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..report import output
from .options import DbOpt, JsonOpt, check_alpha, check_campaign, check_direction, check_factor

SideArg = Annotated[Optional[str], typer.Argument(
    help="Experiment name, spec file, run/job ids (12,13), tag:NAME, campaign:NAME or experiment:NAME.")]
MetricOpt = Annotated[str, typer.Option(help="Stored metrics, comma-separated (gen_s,ttft_s).")]


def compare(baseline: SideArg = None, candidate: SideArg = None, metric: MetricOpt = "gen_s",
            campaign: Annotated[Optional[str], typer.Option(
                callback=check_campaign, help="An A/B campaign (a name or `latest`): compare its own two sides, "
                                              "as its report does.")] = None,
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
            profile: Annotated[bool, typer.Option("--profile", help="Also the A/B of the passed runs' profiles: "
                                                  "per category and module, as `dsv4ctl profile A B`.")] = False,
            db: DbOpt = None, json: JsonOpt = False) -> None:
    """Compare two sets of runs: correctness gate, what differs, statistics, decision. Two experiments that are
    one --ab campaign's sides mean that campaign's runs only; cancelled runs are left out and said so.
    Exit 0 promote, 1 reject or blocked, 5 inconclusive, 2 usage (an unknown side, campaign or metric)."""
    from ..analysis.compare import compare as run_compare
    from ..analysis.compare import parse_metrics
    from .options import open_store

    # With --json, a failure is a JSON error object on stderr: cli.main does that for every command.
    store = open_store(db, must_exist=True)
    result = run_compare(store, baseline, candidate, parse_metrics(metric), alpha, factor,
                         expect_diff, direction, campaign=campaign)
    profiled = None
    if profile:  # issue 23: the A/B of compare's own runs' profiles; the decision and exit code stay compare's
        from ..profile.compared import compare_profiles

        profiled = compare_profiles(store, result)
    if json:
        output.emit_json({**result.to_json(), **({"profile": profiled.to_json()} if profiled else {})})
    elif markdown:
        from .profile_cmd import profile_markdown

        output.raw(to_markdown(result) + (profile_markdown(profiled) if profiled else ""))
    else:
        show(result)
        if profiled:
            from .profile_cmd import show_profile_comparison

            show_profile_comparison(profiled)
    raise typer.Exit(result.exit_code)


# ---- drawing --------------------------------------------------------------------------------------------------------


def _side_line(label: str, side) -> str:
    mix = f", {len(side.experiments)} experiments" if len(side.experiments) > 1 else ""
    return f"{label} {side.name}: {len(side.runs)} runs, {len(side.runs) - len(side.failed_runs)} passed{mix}"


CONFIDENCE_TEXT = "95%"
METRIC_COLUMNS = ["metric", "baseline", "candidate", "ratio", "p", "decision"]


def _notes(c) -> list[str]:
    from ..report.campaign import number, p_text

    several = len(c.metrics) > 1
    lines = list(c.reasons)
    unbounded: dict[tuple[int, int], list[str]] = {}
    for m in c.metrics:
        if not c.reasons:  # failed runs block every metric: said once above
            lines += [f"{m.metric}: {r}" if several else r for r in m.reasons]
        if (m.baseline.n and not m.baseline.ci_bounded) or (m.candidate.n and not m.candidate.ci_bounded):
            unbounded.setdefault((m.baseline.n, m.candidate.n), []).append(m.metric)
        if m.bootstrap_ci:
            few = min(m.baseline.n, m.candidate.n) < c.min_runs_bounded_ci
            lines.append(f"{m.metric} ratio, bootstrap {CONFIDENCE_TEXT} interval over the runs: "
                         f"{m.bootstrap_ci[0]:.3f} to {m.bootstrap_ci[1]:.3f}"
                         + (f" (from {m.baseline.n} and {m.candidate.n} runs: a bootstrap of so few is narrower "
                            f"than the truth; read it as a rough range, not as the {CONFIDENCE_TEXT} it says)"
                            if few else ""))
        if m.paired:
            lines.append(f"{m.metric} paired: {m.paired['pairs']} pairs, median difference "
                         f"{number(m.paired['median_difference'])}, Wilcoxon p = {p_text(m.paired['wilcoxon_p'])}")
    for (nb, nc), names in unbounded.items():
        lines.append(f"±∞: need >= {c.min_runs_bounded_ci} samples per side for a bounded 95% interval "
                     "(" + (f"{', '.join(names)}: " if several else "") + f"have {nb} and {nc})")
    return lines


def show(c) -> None:
    from ..report.campaign import metric_rows

    style = {"promote": "bold green", "reject": "bold red", "blocked": "bold red"}.get(c.decision, "bold yellow")
    output.markup(f"[{style}]{c.decision.upper()}[/] at alpha {c.alpha}, factor {c.factor}")
    for line in (_side_line("baseline ", c.baseline), _side_line("candidate", c.candidate), LEGEND):
        _wrapped(line)
    output.table(None, METRIC_COLUMNS, metric_rows(c))
    for note in _notes(c):
        _wrapped(note, "  • ")
    if c.mixed:
        output.table("runs per experiment (pooled within a side)", group_columns(c), group_rows(c))
    if c.differences:
        output.table("what differs", ["setting", "baseline", "candidate"], difference_rows(c))
    for t in c.token_differences:
        if t["baseline"] is not None and t["candidate"] is not None:  # a length difference is a warning of its own
            output.warn(f"greedy outputs differ: request {t['request']}, token {t['position']}: "
                        f"{t['baseline']} vs {t['candidate']}")
    for warning in c.warnings:
        output.warn(warning)


LEGEND = "ratio: candidate / baseline median; ↓ lower is better, ↑ higher"


def _wrapped(text: str, first: str = "") -> None:
    """Plain lines within 80 columns (the console soft-wraps, which would let them run past a narrow terminal)."""
    import textwrap

    output.text(textwrap.fill(text, 80, initial_indent=first, subsequent_indent=" " * len(first),
                              break_on_hyphens=False))


def group_columns(c) -> list[str]:
    return ["side", "experiment", "runs", "passed"] + [f"median {m.metric}" for m in c.metrics]


def group_rows(c) -> list[tuple[str, ...]]:
    from ..report.campaign import number

    rows = []
    for label, side in (("baseline", c.baseline), ("candidate", c.candidate)):
        for i, g in enumerate(side.experiments):
            medians = [number(getattr(m, label).by_experiment[i]["median"]) for m in c.metrics]
            rows.append((label, g["experiment"], str(g["runs"]), str(g["passed"]), *medians))
    return rows


def difference_rows(c) -> list[tuple[str, str, str]]:
    from ..report.campaign import values

    return [(d["key"], values(d["baseline"]), values(d["candidate"])) for d in c.differences]


def to_markdown(c) -> str:
    from ..report.campaign import md, metric_rows

    def table(columns: list[str], rows: list[tuple[str, ...]]) -> list[str]:
        return ["| " + " | ".join(map(md, columns)) + " |", "|" + "---|" * len(columns)] + [
            "| " + " | ".join(md(cell) for cell in row) + " |" for row in rows]

    lines = [f"**{c.decision}** at alpha {c.alpha}, factor {c.factor}; {LEGEND}", "",
             f"- {md(_side_line('baseline', c.baseline))}", f"- {md(_side_line('candidate', c.candidate))}", ""]
    lines += table(METRIC_COLUMNS, metric_rows(c))
    lines += [""] + [f"- {md(note)}" for note in _notes(c)] + [f"- warning: {md(w)}" for w in c.warnings]
    if c.mixed:
        lines += [""] + table(group_columns(c), group_rows(c))
    if c.differences:
        lines += [""] + table(["setting", "baseline", "candidate"], difference_rows(c))
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    app.command()(compare)
