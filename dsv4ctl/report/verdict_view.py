"""Draw a verdict for people: status, first blocker in context, the token table, evidence, ignored noise."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

from . import output
from ..judge.rules import Verdict
from ..units import number, quantity, seconds_short

MAX_ROWS = 40  # past this many requests, the table lists only the bad ones
_STATUS_STYLE = {"coherent": "bold green", "degenerate": "bold yellow", "incomplete": "bold yellow"}


def _context(log: Path, line: int, prefixes: list[str], around: int = 3) -> list[tuple[int, str]]:
    """The lines around `line`, with the prefixes the log's transport added (docker, CI, journald...) taken off."""
    import re

    strip = [re.compile(p) for p in prefixes]
    start = max(1, line - around)
    rows = []
    with open(log, "rb") as stream:
        for i, raw in enumerate(islice(stream, start - 1, line + around)):
            text = raw[:4096].decode("utf-8", "replace").rstrip("\r\n")
            for pattern in strip:
                text = pattern.sub("", text, count=1)
            rows.append((start + i, text))
    return rows


def compact_ids(ids: list[int], bos_id: int, limit: int = 20) -> str:
    """Token ids with runs folded (`BOS×31`) so a collapse is visible at a glance."""
    parts: list[str] = []
    i = 0
    while i < len(ids) and len(parts) < limit:
        j = i
        while j < len(ids) and ids[j] == ids[i]:
            j += 1
        name = "BOS" if ids[i] == bos_id else str(ids[i])
        parts.append(f"{name}×{j - i}" if j - i >= 3 else ", ".join([name] * (j - i)))
        i = j
    return ", ".join(parts) + (" …" if i < len(ids) else "")


def _short(text: str | None, width: int = 24) -> str:
    """The decoded text beside its ids, as a repr so that control characters and BOS text stay visible."""
    if not text:
        return "-"
    return text if len(text) <= width else text[:width - 1] + "…"


def unlined_blocker(v: Verdict) -> str:
    """A first blocker no log line holds, in words: `cancelled before start (scheduler)` for a job the scheduler
    stopped before it printed anything (there is no line 0), else its message and kind."""
    b = v.first_blocker
    sched = v.scheduler or {}
    if b.kind == "killed" and b.family == "scheduler" and not v.stage and not v.evidence.get("stages"):
        state = str(sched.get("state") or (b.message.split() or ["stopped"])[0]).lower()
        if not sched.get("elapsed_s"):
            return f"{state} before start (scheduler)"
        from ..units import clock

        return f"{state} after {clock(sched['elapsed_s'])}, before the job wrote a line (scheduler)"
    kind = f"{b.family}: {b.kind}" if b.family else b.kind
    return f"{' '.join(b.message.split())[:200]} ({kind})" if b.message else kind


def show_verdict(v: Verdict, log: Path, bos_id: int = 0) -> None:
    style = _STATUS_STYLE.get(v.status, "bold red")
    verdict_word = "PASSED" if v.passed else "NOT PASSED"
    output.markup(f"[{style}]{v.status.upper()}[/] — {verdict_word}"
                  + ("  [bold red on white] FALSE GREEN [/]" if v.false_green else ""))
    for reason in v.reasons:
        output.text(f"  • {reason}")
    sched = v.scheduler
    output.text(f"  stage: {v.stage or '-'}   PY_EXIT: {v.py_exit if v.py_exit is not None else '-'}   "
                f"probe: {v.probe_verdict or '-'}   scheduler: "
                + (f"{sched['state']} {sched['exit_code']}:{sched['signal']}" if sched else "-")
                + f"   engine ready: {seconds_short(v.engine_ready_s)}")
    if v.first_blocker:
        b = v.first_blocker
        output.text("")
        # A serve run's blocker may come from server.log (its line numbers are that file's) or the request records.
        source = log.parent / "server.log" if b.evidence and str(b.evidence[0]).startswith("server.log") else log
        if b.line > 0:
            output.markup(f"[bold]First blocker[/] ({'' if source == log else 'server.log '}line {b.line}, "
                          + (f"{b.family}: " if b.family else "") + f"{b.kind}"
                          + (f", {output.escape(b.process)}" if b.process else "") + ")")
        else:  # from no log line (the scheduler's record, the request records): no context to show, say it
            output.markup(f"[bold]First blocker[/]: {output.escape(unlined_blocker(v))}")
        context = _context(source, b.line, v.evidence.get("line_prefixes") or []) \
            if b.line > 0 and source.is_file() else []
        for number, text in context:
            mark = ">" if number == b.line else " "
            text = text if len(text) <= 160 else text[:157] + "..."
            output.text(f"  {mark} {number:>6} | {text}", style="bold" if number == b.line else "dim")
        if "\n" in b.message:
            output.text("  full message:")
            for part in b.message.splitlines()[:20]:
                output.text(f"    {part}")
    if v.requests:
        shown = v.requests if len(v.requests) <= MAX_ROWS else [r for r in v.requests if r.problems][:MAX_ROWS]
        judged = v.evidence.get("requests_judged", len(v.requests))
        title = "Requests" if shown is v.requests else f"Requests: {len(shown)} bad shown of {judged} judged"
        output.text("")
        output.table(title, ["#", "tokens", "finish", "BOS", "repeat", "token ids", "text", "problems"],
                     [(r.index, r.n_tokens, r.finish_reason or "-", r.bos_run, r.max_repeat_run,
                       compact_ids(r.token_ids, bos_id, limit=8), _short(r.output_repr), "; ".join(r.problems) or "ok")
                      for r in shown])
    ev = v.evidence
    facts = [f"{k}={quantity(k, ev[k])}" for k in ("expert_dtype", "moe_backend", "kv_format", "kv_cache_tokens",
                                       "model_load_gib") if ev.get(k) is not None]
    from ..judge.serving import is_serve_summary

    serve_run = is_serve_summary(v.metrics)
    if v.metrics and not serve_run:
        facts += [f"{k}={quantity(k, val)}" for k, val in v.metrics.items()]
    if facts:
        output.text("")
        output.text("evidence: " + ", ".join(facts))
    if serve_run:
        output.text("")
        show_metrics({k: val for k, val in v.metrics.items() if isinstance(val, (int, float))})
    for finding in ((ev.get("serve") or {}).get("judgement") or {}).get("findings") or []:
        output.warn(finding)
    if v.nonfinite:
        output.text(f"non-finite: {len(v.nonfinite)} diagnostic(s), first at line {v.nonfinite[0]['line']}: "
                    f"{v.nonfinite[0]['text']}")
    if v.noise:
        output.text(f"ignored noise ({len(v.noise)}): "
                    + "; ".join(f"line {n['line']} {n['kind']}" for n in v.noise[:6])
                    + (" …" if len(v.noise) > 6 else ""), style="dim")


COUNT_UNITS = {"request_throughput": " req/s", "output_throughput": " tok/s", "total_token_throughput": " tok/s",
               "request_goodput": " req/s"}
# What vllm bench serve's max_concurrent_requests counts (judge/serving.py `_peaks`): read as the client's
# concurrency it looks like a broken max_concurrency (11 with max_concurrency 8), issue 26 m24.
CONCURRENCY_NOTE = ("max_concurrent_requests: vLLM's peak over one-second buckets from the first send; a request "
                    "counts in every second it spans, so it can exceed load.max_concurrency")


def show_metrics(metrics: dict[str, float]) -> None:
    """A run's stored metrics; a serve run's as vllm bench serve prints them (latencies in a table)."""
    from ..judge.serving import COUNTS, is_serve_summary, latency_table, summary_names

    rest = dict(metrics)
    if is_serve_summary(metrics):
        output.table("Serving latency (ms)", ["metric", "mean", "median", "p95", "p99"],
                     [(name, *("-" if v is None else f"{v:.2f}" for v in values))
                      for name, values in latency_table(metrics)])
        output.text("serving: " + ", ".join(f"{k}={serve_count(k, metrics[k])}" for k in COUNTS if k in metrics))
        if "max_concurrent_requests" in metrics:
            output.text(f"  {CONCURRENCY_NOTE}", style="dim")
        rest = {k: v for k, v in metrics.items() if k not in summary_names()}
    if rest:
        output.text("metrics: " + ", ".join(f"{k}={quantity(k, v)}" for k, v in rest.items()))


def serve_count(name: str, value: float) -> str:
    """One of vllm bench serve's counts with its unit (`duration` in seconds, as the bench prints it)."""
    if name == "duration":
        return seconds_short(value)
    return number(value) + COUNT_UNITS.get(name, "")
