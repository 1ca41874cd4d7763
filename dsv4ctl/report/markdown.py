"""Markdown text of data, safe in any renderer: the one escaping every Markdown page uses (campaign, bisection,
alignment, serving reports)."""

from __future__ import annotations

import html
import re
from typing import Any


def md(value: Any) -> str:
    """Data as Markdown text, one line, table pipes escaped: raw HTML escaped (a spec name or a log line must not
    become markup in a rendered page), and nothing else, so `p = 0.19 >= 0.05` stays as written (issue 26 m13). A
    `>` is markup only after a `<`, an `&` only where it starts an entity (`&lt;`)."""
    text = str(value)
    if "<" in text:
        text = html.escape(text, quote=False)
    else:
        text = re.sub(r"&(?=#?\w+;)", r"\&", text)
    return " ".join(text.replace("|", "\\|").splitlines())


def markdown_profiles(profiles: list[dict[str, Any]]) -> list[str]:
    """The campaign report's profile section in Markdown, the HTML stacked bars' figures as a table (issue 23):
    one row per profiled run (`data.profiles`, from dsv4ctl.profile.stored.campaign_profiles), its categories
    largest first with their share, its top modules below the model's wrappers, a run that failed its verdict
    said, a run whose traces are not read yet named with the command that reads them."""
    if not profiles:
        return []
    lines = ["", "## Where the time goes (profiles)", "",
             "One row per profiled run: its kernel time by category (CPU-op self time on a CPU-only trace), the mean "
             "over its ranks. `dsv4ctl profile RUN` prints every figure, `dsv4ctl compare --profile` tests the A/B.",
             "", "| run | experiment | window | kernel µs | categories | top modules |", "|---:|---|---|---:|---|---|"]
    for bar in profiles:
        run = str(bar["run"]) + (f" ({bar['label']})" if str(bar["label"]) != str(bar["run"]) else "")
        window = (bar["window"] or "-") + (" · CPU ops" if bar["device"] == "cpu" else "")
        if bar["unread"]:
            shares = f"traces not read yet: `dsv4ctl profile {bar['run']}`"
        else:
            ranked = sorted(bar["segments"], key=lambda s: -s["share"])
            shares = ", ".join(f"{md(s['name'])} {s['share']:.1%}" for s in ranked) or "-"
        if bar["failed"]:
            shares = f"**FAILED its verdict ({md(bar['verdict']['status'])})**: a profile of a broken run; " + shares
        modules = ", ".join(f"{md(m['name'])} {m['share']:.0%}" for m in bar["modules"][:4]) or "-"
        kernel = "-" if bar["kernel_us"] is None else f"{bar['kernel_us']:,.1f}"
        lines.append(f"| {md(run)} | {md(bar['experiment'])} | {md(window)} | {kernel} | {shares} | {modules} |")
    return lines
