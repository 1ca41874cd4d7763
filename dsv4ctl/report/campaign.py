"""Campaign reports people can look at: `report_data` gathers, `render_html` / `render_markdown` draw.

The HTML page is self-contained (inline CSS and SVG, no scripts, no network): the campaign table in the spirit of
the port report's §6.1 (job, state, exit, elapsed, verdict, first blocker), failure rate per point with Wilson 95%
intervals, and the distribution of a metric per experiment for A/B campaigns, with `compare`'s decision, ratio, p,
what differs and each side's provenance.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .markdown import md  # noqa: F401 - re-exported
from ..analysis import stats
from ..store import Store
from ..analysis.sides import ab_sides  # noqa: F401 - the A/B sides, chosen as `compare --campaign` chooses them
from ..campaign.sweep import SweepSummary, summarise_campaign

if TYPE_CHECKING:
    from ..analysis.compare import Comparison

# Provenance a run may carry; the versions only once the store records them (see `compare.PROVENANCE_COLUMNS`).
PROVENANCE = (("git sha", "git_sha"), ("dsv4ctl", "dsv4ctl_version"), ("node", "node"), ("vLLM", "vllm_version"),
              ("torch", "torch_version"), ("Triton", "triton_version"))


@dataclass
class ReportData:
    campaign: dict[str, Any]
    runs: list[dict[str, Any]]
    sweep: SweepSummary
    metric: str
    distributions: list[tuple[str, list[float]]]
    ab: "Comparison | None" = None
    ab_error: str | None = None  # why an A/B campaign has no comparison (e.g. the metric is not stored)
    provenance: list[dict[str, Any]] = field(default_factory=list)  # [{side, name, facts: [(label, values)], values}]
    run_objects: list[dict[str, Any]] = field(default_factory=list)  # each run as `runs --json` shows it
    histories: list[Any] = field(default_factory=list)  # history.History per experiment, up to this campaign
    alignments: list[dict[str, Any]] = field(default_factory=list)  # align runs (report_align.py)
    serving: dict[str, Any] | None = None  # a sweep of serve runs' load (report_serve.py)
    profiles: list[dict[str, Any]] = field(default_factory=list)  # stacked bars of profiled runs (profile/stored.py)

    def to_json(self) -> dict[str, Any]:
        """What the page shows, as nested data (`report --json`): the campaign, its runs (the one run object of
        `runs --json`, with a verdict summary), failure rate per point, the metric's samples per experiment and,
        for an A/B campaign, compare's result and each side's provenance."""
        from dataclasses import asdict

        return {"campaign": self.campaign, "metric": self.metric,
                "summary": {"runs": len(self.runs), "passed": sum(1 for r in self.runs if r["passed"])},
                "runs": self.run_objects, "sweep": asdict(self.sweep),
                "distributions": [{"experiment": name, "values": values, "median": stats.median(values)}
                                  for name, values in self.distributions],
                "ab": None if self.ab is None and self.ab_error is None else {
                    "comparison": self.ab.to_json() if self.ab else None, "error": self.ab_error,
                    "provenance": [{"side": p["side"], "experiments": p["name"], **p["values"]}
                                   for p in self.provenance]},
                "histories": [h.to_json() for h in self.histories], "alignments": self.alignments,
                "serving": self.serving, "profiles": self.profiles}


def report_data(store: Store, campaign: str, metric: str | None = None) -> ReportData:
    """Everything the page shows; `metric` defaults to the campaign's own (see `default_metric`)."""
    from ..store.queries import metric_names, metrics_of, verdict_columns

    info = store.campaign(campaign)
    rows = store.runs(campaign=campaign)
    ids = [row.id for row in rows]
    metric = metric or default_metric(metric_names(store, ids))
    verdicts, metrics = verdict_columns(store, ids), metrics_of(store, ids)  # one query per chunk, no JSON decoded
    runs, run_objects = [], []
    distributions: dict[str, list[float]] = {}
    for row in rows:
        verdict = verdicts.get(row.id) or {}
        blocker = verdict.get("first_blocker") or {}
        run_objects.append({**row.to_json(), "verdict": {
            "status": verdict["status"], "passed": bool(verdict.get("passed")),
            "false_green": bool(verdict.get("false_green")),
            "first_blocker": {k: blocker.get(k) for k in ("line", "kind", "message")} if blocker else None}
            if verdict else None})
        runs.append({"run": row.id, "experiment": row.experiment, "job": row.job_id or "-", "state": row.state,
                     "exit": f"{row.exit_code}:{row.signal}" if row.exit_code is not None else "-",
                     "elapsed": f"{row.elapsed_s} s" if row.elapsed_s is not None else "-",
                     "verdict": verdict.get("status", "-"), "passed": bool(verdict.get("passed")),
                     "false_green": bool(verdict.get("false_green")),
                     "blocker": blocker_line(blocker) if blocker else (row.submit_message or "")})
        value = metrics.get(row.id, {}).get(metric)
        if value is not None and verdict.get("passed"):
            distributions.setdefault(row.experiment, []).append(value)
    data = ReportData(info, runs, summarise_campaign(store, campaign), metric, list(distributions.items()),
                      run_objects=run_objects)
    sides = ab_sides(rows)
    if sides:
        add_comparison(store, data, *sides)
    from ..analysis.history import campaign_histories

    data.histories = campaign_histories(store, campaign, metric)
    from ..modes.align.report import campaign_alignments

    data.alignments = campaign_alignments(store, rows)
    from ..modes.serve.report import campaign_serving

    data.serving = campaign_serving(store, rows)
    from ..profile.stored import campaign_profiles

    data.profiles = campaign_profiles(store, rows)
    return data


DEFAULT_METRIC = "gen_s"
SERVE_METRIC = "output_throughput"  # every serve run records it (judge/serving.summarise); serve runs have no gen_s


def recorded_metrics(store: Store, rows: list) -> list[str]:
    """The metric names any of these runs recorded, sorted."""
    from ..store.queries import metric_names

    return metric_names(store, [row.id for row in rows])


def default_metric(present: list[str]) -> str:
    """gen_s, except for a campaign of serve runs (they never record it): output_throughput (issue 29 S35)."""
    return SERVE_METRIC if DEFAULT_METRIC not in present and SERVE_METRIC in present else DEFAULT_METRIC


def check_metric(store: Store, campaign: str, metric: str) -> None:
    """A metric no run of the campaign recorded is a typo, not an empty plot: refused (exit 2) with the metrics
    present, as `compare` and `history` refuse it."""
    from ..errors import UsageError
    from ..analysis.history import known_words

    present = recorded_metrics(store, store.runs(campaign=campaign))
    if present and metric not in present:
        raise UsageError(f"no run of campaign {campaign!r} has the metric {metric!r}"
                         + known_words(metric, present, "metrics present"))


def blocker_line(blocker: dict[str, Any]) -> str:
    """`line 40: exception — FileNotFoundError: ...`; a blocker no log line holds (a job cancelled before it
    started) has no `line 0`, and one with no message is its kind alone."""
    message = ((blocker.get("message") or "").splitlines() or [""])[0][:120]
    where = f"line {blocker['line']}: " if blocker.get("line") else ""
    return where + str(blocker.get("kind") or "") + (f" — {message}" if message else "")


def add_comparison(store: Store, data: ReportData, base_rows: list, cand_rows: list) -> None:
    from ..analysis.compare import Side, compare_sides, load_rows
    from ..errors import Dsv4Error

    def side(rows: list) -> Side:
        return Side(", ".join(dict.fromkeys(r.experiment for r in rows)), load_rows(store, [r.id for r in rows]))

    try:
        data.ab = compare_sides(store, side(base_rows), side(cand_rows), data.metric)
    except Dsv4Error as exc:
        data.ab_error = str(exc)
    for label, rows in (("baseline", base_rows), ("candidate", cand_rows)):
        data.provenance.append({"side": label, "name": ", ".join(dict.fromkeys(r.experiment for r in rows)),
                                "facts": provenance(rows), "values": provenance_values(rows)})


def provenance(rows: list) -> list[tuple[str, str]]:
    """Each provenance fact of a side's runs with its distinct values; a version the store does not keep is said
    to be not recorded rather than left out."""
    facts = []
    for label, column in PROVENANCE:
        values = sorted({str(r.data[column]) for r in rows if r.data.get(column) is not None})
        facts.append((label, ", ".join(values) if values else
                      ("not recorded" if column in rows[0].data else "not recorded by this store")))
    switches = sorted({r.switches_json or "{}" for r in rows})
    facts.append(("switches", " | ".join(" ".join(f"{k}={v}" for k, v in sorted(json.loads(s).items()))
                                         for s in switches) or "none"))
    return facts


def provenance_values(rows: list) -> dict[str, list[Any]]:
    """Each provenance column of a side's runs with its distinct values (empty when none was recorded), and the
    distinct switch sets."""
    values: dict[str, list[Any]] = {column: sorted({r.data[column] for r in rows if r.data.get(column) is not None},
                                                   key=str) for _, column in PROVENANCE}
    values["switches"] = [json.loads(s) for s in sorted({r.switches_json or "{}" for r in rows})]
    return values


# ---- SVG ------------------------------------------------------------------------------------------------------------


def _label_width(labels) -> int:
    """Room on the left for the longest label (about 7 px a character at 12 px), within reason."""
    return min(520, max(120, 16 + 7 * max((len(label) for label in labels), default=10)))


def svg_rates(summary: SweepSummary, width: int = 640) -> str:
    """Failure rate per point: a dot with its Wilson 95% interval, 0-100% scale."""
    points = summary.points
    if not points:
        return ""
    row_h, right = 28, 40
    left = _label_width(p.label for p in points)
    width = max(width, left + 380)
    height = row_h * len(points) + 40
    scale = width - left - right
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="failure rate per point">']
    for tick in (0, 25, 50, 75, 100):
        x = left + scale * tick / 100
        out.append(f'<line x1="{x}" y1="10" x2="{x}" y2="{height - 25}" stroke="#ddd"/>'
                   f'<text x="{x}" y="{height - 8}" font-size="11" text-anchor="middle">{tick}%</text>')
    for i, p in enumerate(points):
        y = 22 + i * row_h
        lo, hi = p.interval
        colour = "#c0392b" if p.failures else "#27ae60"
        out.append(f'<text x="{left - 8}" y="{y + 4}" font-size="12" text-anchor="end">{html.escape(p.label)}</text>')
        out.append(f'<line x1="{left + scale * lo}" y1="{y}" x2="{left + scale * hi}" y2="{y}" stroke="{colour}" '
                   f'stroke-width="3" stroke-linecap="round"/>')
        if p.rate is not None:
            out.append(f'<circle cx="{left + scale * p.rate}" cy="{y}" r="5" fill="{colour}"/>')
        out.append(f'<text x="{width - right + 4}" y="{y + 4}" font-size="11">{p.failures}/{p.judged}</text>')
    out.append("</svg>")
    return "".join(out)


def svg_strip(groups: list[tuple[str, list[float]]], metric: str, width: int = 640) -> str:
    """One row per experiment: every sample as a dot, the median as a bar."""
    values = [v for _, vs in groups for v in vs]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    row_h, right = 34, 20
    left = _label_width(f"{name} (n={len(vs)})" for name, vs in groups)
    width = max(width, left + 380)
    height = row_h * len(groups) + 45
    scale = width - left - right

    def x(v: float) -> float:
        return left + scale * (v - lo) / (hi - lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{html.escape(metric)} per experiment">']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        out.append(f'<line x1="{x(v)}" y1="10" x2="{x(v)}" y2="{height - 30}" stroke="#ddd"/>'
                   f'<text x="{x(v)}" y="{height - 14}" font-size="11" text-anchor="middle">{v:.4g}</text>')
    out.append(f'<text x="{left + scale / 2}" y="{height - 1}" font-size="11" text-anchor="middle">'
               f'{html.escape(metric)}</text>')
    for i, (name, vs) in enumerate(groups):
        y = 24 + i * row_h
        out.append(f'<text x="{left - 8}" y="{y + 4}" font-size="12" text-anchor="end">{html.escape(name)} '
                   f'(n={len(vs)})</text>')
        for v in vs:
            out.append(f'<circle cx="{x(v):.1f}" cy="{y}" r="3.5" fill="#2c7fb8" fill-opacity="0.6"/>')
        m = stats.median(vs)
        out.append(f'<line x1="{x(m):.1f}" y1="{y - 10}" x2="{x(m):.1f}" y2="{y + 10}" stroke="#111" '
                   f'stroke-width="2"/>')
    out.append("</svg>")
    return "".join(out)


# ---- pages -----------------------------------------------------------------------------------------------------------


def render_html(data: ReportData) -> str:
    from ..analysis.history import sparkline
    from ..spec.render import _environment
    from ..modes.align.report import svg_cosines
    from ..modes.serve.report import best_load_text, svg_curve

    return _environment().get_template("report.html.j2").render(
        data=data, rates_svg=svg_rates(data.sweep), strip_svg=svg_strip(data.distributions, data.metric),
        passed=sum(1 for r in data.runs if r["passed"]), ab_rows=metric_rows(data.ab) if data.ab else [],
        values=values, sparkline=sparkline, align_plot=svg_cosines, serve_curve=svg_curve, serve_best=best_load_text)


def render_markdown(data: ReportData) -> str:
    lines = [f"# Campaign {md(data.campaign['name'])}", "",
             f"{len(data.runs)} run(s) on {md(data.campaign['backend'])}; "
             f"{sum(1 for r in data.runs if r['passed'])} passed.", "",
             "| run | experiment | job | state | exit | elapsed | verdict | first blocker |",
             "|---:|---|---|---|---|---:|---|---|"]
    for r in data.runs:
        verdict = r["verdict"] + (" FALSE GREEN" if r["false_green"] else "")
        cells = [r["run"], r["experiment"], r["job"], r["state"], r["exit"], r["elapsed"], verdict, r["blocker"]]
        lines.append("| " + " | ".join(md(cell) for cell in cells) + " |")
    lines += ["", "## Failure rate per point (Wilson 95%)", "", "| point | failures | rate | interval |",
              "|---|---:|---:|---|"]
    for p in data.sweep.points:
        rate = "-" if p.rate is None else f"{p.rate:.0%}"
        lines.append(f"| {md(p.label)} | {p.failures}/{p.judged} | {rate} | "
                     f"{p.interval[0]:.0%}–{p.interval[1]:.0%} |")
    if data.sweep.boundary:
        lines += ["", f"Failures start at **{md(data.sweep.boundary.label)}**."]
    if data.ab or data.ab_error:
        lines += ["", "## A/B comparison", ""] + markdown_comparison(data)
    lines += markdown_histories(data)
    from ..modes.align.report import markdown_alignments

    lines += markdown_alignments(data)
    from ..modes.serve.report import markdown_serving

    lines += markdown_serving(data.serving)
    from .markdown import markdown_profiles

    lines += markdown_profiles(data.profiles)  # issue 23
    return "\n".join(lines) + "\n"


def markdown_histories(data: ReportData) -> list[str]:
    """Each experiment's metric by commit up to this campaign, with the steps found (dsv4ctl history)."""
    from ..analysis.history import sparkline

    lines = []
    for h in data.histories:
        lines += ["", f"## History of {md(h.metric)}: {md(h.experiment)} {sparkline([p.median for p in h.points])}",
                  "", "| commit | runs | median |", "|---|---:|---:|"]
        lines += [f"| {md(p.group[:12])} | {p.n} | {p.median:g} |" for p in h.points]
        lines += [f"- step {md(s.before[:12])} → {md(s.after[:12])}: "
                  f"{f'x{s.ratio:.3f}' if math.isfinite(s.ratio) else s.size}, p={s.p_value:.2g}"
                  + (f" ({md('; '.join(s.notes))})" if s.notes else "") for s in h.steps]
    return lines


def markdown_comparison(data: ReportData) -> list[str]:
    if data.ab is None:
        return [f"No comparison: {md(data.ab_error)}"]
    c = data.ab
    lines = [f"**{c.decision}** — {md(data.provenance[1]['name'])} against {md(data.provenance[0]['name'])}", "",
             "| metric | baseline | candidate | ratio | p | decision |", "|---|---:|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in metric_rows(c)]
    lines += [""] + [f"- {md(r)}" for r in c.reasons + [r for m in c.metrics for r in m.reasons]]
    lines += [f"- warning: {md(w)}" for w in c.warnings]
    lines += ["", "| differs | baseline | candidate |", "|---|---|---|"]
    lines += [f"| {md(d['key'])} | {md(values(d['baseline']))} | {md(values(d['candidate']))} |"
              for d in c.differences] or ["| nothing | | |"]
    lines += ["", "| provenance | baseline | candidate |", "|---|---|---|"]
    base, cand = data.provenance
    lines += [f"| {md(label)} | {md(left)} | {md(right)} |"
              for (label, left), (_, right) in zip(base["facts"], cand["facts"])]
    return lines


# ---- cells shared with `dsv4ctl compare` ------------------------------------------------------------------------------


def number(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def p_text(x: float | None) -> str:
    return "-" if x is None else f"{x:.2g}"


def centre(s) -> str:
    """`101.3 ±1.2%`: a side's median and the half-width of its 95% interval (benchstat's style); ±∞ unbounded."""
    if s.median is None:
        return "-"
    if s.ci is None:
        return f"{number(s.median)} ±∞"
    half = max(s.median - s.ci[0], s.ci[1] - s.median)
    if not s.median:
        return f"{number(s.median)} ±{half:.2g}"
    percent = 100 * half / abs(s.median)  # `±2900%`, never `±2.9e+03%` (issue 26 M3)
    return f"{number(s.median)} ±{percent:.2g}%" if percent < 100 else f"{number(s.median)} ±{percent:.0f}%"


def metric_rows(c: "Comparison") -> list[tuple[str, ...]]:
    """One row per metric: metric (↓ lower / ↑ higher is better), both sides, ratio, p, decision."""
    return [(m.metric + (" ↓" if m.direction == "lower" else " ↑"), centre(m.baseline), centre(m.candidate),
             number(m.ratio), p_text(m.p_value), m.decision) for m in c.metrics]


def values(items: list) -> str:
    """A side's distinct values of a setting: strings as they are, anything else as JSON (null, [..], true)."""
    return ", ".join(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in items)
