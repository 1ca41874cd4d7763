"""The verdict rules: raw-log facts + the scheduler's record -> one verdict that never calls a broken run green.

Stdlib only; the job-side probe judges its own results with this very module.

Status, first match wins:
  device_error  a device-side failure (assertion, GPU memory fault/VMFault, HSA error, HIP/CUDA error)
  nonfinite     a diagnostic or metric shows NaN/Inf, or a `*_finite = False` diagnostic
  crashed       an error ended the run (exception, OOM, collective timeout, compile or config error, worker
                death, a failed setup step), or Python died without results
  incomplete    no (or not all) results and no error: killed by the scheduler, or the log stops early
  degenerate    results exist, but a request has a BOS run >= 2, one token repeated >= max_repeat_run times,
                no tokens, unreadable ids, fewer tokens than asked with ignore_eos, tokens that diverge from the
                expected golden sequence (unless vLLM's logprob rule accepts the first difference: each side's token
                in the other's top-N), printed text that is empty, one character/word repeated to the end,
                replacement characters or token soup, or the probe itself said so
  coherent      none of the above

passed       = coherent, PY_EXIT 0, no scheduler record or COMPLETED 0:0, and every marker line readable.
false_green  = not coherent while something said success: PY_EXIT=0, COMPLETED 0:0, or the probe's COHERENT (J08).
first_blocker= the root cause: among main-path errors, the earliest one of the most specific family
               (`classify.SPECIFICITY`); a generic wrapper ("Engine core initialization failed. See root cause
               above") only when nothing else is there; chained exceptions root first. For a degenerate run, the
               first bad request. `family` says which kind of failure it is, `evidence` the lines around it.
Noise        = the usage-report thread, atexit/shutdown tracebacks, `libcudart is not loaded`, and any traceback
               after the results were printed (report §11).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from . import classify, outputs
from .sacct import SchedulerSummary
from .scan import LogFacts
from .states import KILLED as KILLED_STATES
from .tokens import RequestVerdict, VerdictOptions, first_divergence, judge_request  # noqa: F401  (re-exported)

MAX_BAD_REASONS = 32
HTTP_500_WALL = 5  # this many 500s from a server: its engine died, whether or not the log shows why  # bad requests named in `reasons`; the rest are counted
STATUSES = ("device_error", "nonfinite", "crashed", "incomplete", "degenerate", "coherent")


@dataclass
class Blocker:
    line: int
    kind: str
    message: str
    exc_type: str | None = None
    process: str | None = None
    family: str | None = None  # one of classify.FAMILIES; None for a degenerate output
    evidence: list[str] = field(default_factory=list)  # the few lines around it
    wrapper: bool = False  # a generic "see the root cause above" message


@dataclass
class Verdict:
    status: str
    passed: bool
    false_green: bool
    reasons: list[str]
    stage: str | None
    first_blocker: Blocker | None
    requests: list[RequestVerdict]
    bos_run: int
    max_repeat_run: int
    py_exit: int | None
    probe_verdict: str | None
    scheduler: dict[str, Any] | None
    engine_ready_s: float | None
    metrics: dict[str, Any]
    nonfinite: list[dict[str, Any]]
    noise: list[dict[str, Any]]
    evidence: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def batch_size(snapshot: dict[str, Any]) -> int:
    """How many requests a spec submits together: `batch`, else the number of requests."""
    return snapshot.get("batch") or len(snapshot["requests"])


def options_for_spec(snapshot: dict[str, Any]) -> VerdictOptions:
    """The verdict options a spec implies, from its JSON snapshot (what the CLI stores and the job receives)."""
    expect, sampling = snapshot["expect"], snapshot["sampling"]
    n = batch_size(snapshot)
    ids = expect.get("golden_token_ids") or []
    if ids and not isinstance(ids[0], list):
        ids = [ids]  # one flat list is the first request's golden
    golden = tuple(tuple(ids[i]) if i < len(ids) else None for i in range(n)) if ids else ()
    return VerdictOptions(bos_id=expect["bos_id"], max_repeat_run=expect["max_repeat_run"],
                          expected_tokens=sampling["max_tokens"], ignore_eos=sampling["ignore_eos"],
                          expected_requests=n, golden=golden,
                          golden_logprobs=tuple(expect.get("golden_logprobs") or ()))


# ---- errors -----------------------------------------------------------------------------------------------------


def _traceback_blocker(tb) -> Blocker:
    if not tb.exc_type and not tb.message:
        return _headless_blocker(tb)
    links = [link for link in (tb.text, *[c for c in tb.chain if c != "(chained)"]) if link]
    text = "\n".join(links)
    real = [link for link in links if not classify.is_wrapper(link)]
    # An assert's own source line says what was asserted (`assert is_fa_version_supported(...)`).
    family_text = "\n".join(real or links) + ("\n" + tb.last_source if tb.exc_type == "AssertionError" else "")
    family = classify.exception_family(family_text)
    kind = "device_error" if family == "device" else "exception"
    return Blocker(tb.exc_line or tb.line, kind, text, exc_type=tb.exc_type, process=tb.process, family=family,
                   evidence=list(tb.evidence), wrapper=not real)


def _headless_blocker(tb) -> Blocker:
    """A traceback whose exception line is missing (a cut paste, a logger that split the record, a rank that died
    mid-print): its message comes from the best evidence near it. First the ERROR record of its process just above
    the header that names an error (`Failed to create ... weights: CUDA out of memory`), nearest first; else the
    exceptions chained after it; else the earliest generic record of that run (`Engine iteration timed out`)
    or chained wrapper. With none of these it says that its exception line is missing, and counts as a wrapper:
    any other error in the log explains more."""
    chained = [c for c in tb.chain if c and c != "(chained)"]
    frames = list(tb.evidence) or ([tb.last_source] if tb.last_source else [])
    records = tb.records_above
    record = next(((line, text) for line, text in records if not classify.is_wrapper(text)), None)
    if record is None and not any(not classify.is_wrapper(c) for c in chained) and records:
        record = records[-1]
    if record is not None:
        line, text = record
        found = classify.line_error(text)
        family = found[0] if found else classify.exception_family(text)
        kind = found[1] if found else ("device_error" if family == "device" else "logged_error")
        return Blocker(line, kind, text, process=tb.process, family=family,
                       evidence=[text[:300], "Traceback (most recent call last):", *frames][:6],
                       wrapper=classify.is_wrapper(text))
    if chained:
        real = [link for link in chained if not classify.is_wrapper(link)]
        family = classify.exception_family("\n".join(real or chained))
        return Blocker(tb.line, "device_error" if family == "device" else "exception", "\n".join(real or chained),
                       exc_type=(real or chained)[0].split(":", 1)[0][:200], process=tb.process, family=family,
                       evidence=frames, wrapper=not real)
    context = f"{tb.context} " if tb.context else ""
    where = f" (innermost frame: {tb.last_source})" if tb.last_source else ""
    return Blocker(tb.line, "exception", f"{context}Traceback (most recent call last): its exception line is "
                   f"missing{where}", process=tb.process, family="python", evidence=frames, wrapper=True)


def main_path_errors(facts: LogFacts) -> list[Blocker]:
    """Every error that counts, in log order: tracebacks that are not noise, stand-alone error lines (device,
    collective, worker deaths), exception lines outside any traceback (a cut log), setup failures."""
    errors = [Blocker(e.line, e.kind, e.text, process=e.process, family=e.family, evidence=list(e.evidence),
                      wrapper=classify.is_wrapper(e.text)) for e in facts.line_errors]
    errors += [Blocker(e.line, e.kind, e.text, exc_type=e.text.split(":", 1)[0], process=e.process,
                       family=e.family, evidence=list(e.evidence), wrapper=classify.is_wrapper(e.text))
               for e in facts.orphan_exceptions]
    errors += [Blocker(e.line, "setup_error", e.text, process=e.process, family="setup", evidence=list(e.evidence))
               for e in facts.setup_errors]
    errors += [Blocker(e.line, e.kind, e.text, process=e.process, family=e.family, evidence=list(e.evidence),
                       wrapper=classify.is_wrapper(e.text)) for e in facts.logged_errors]
    if facts.http_500_count >= HTTP_500_WALL:
        first = facts.http_500_first
        errors.append(Blocker(first.line, "http_500", f"{facts.http_500_count} requests answered with a server error "
                              f"(500/502/503/504: the engine behind the server died or never answered): {first.text}",
                              process=first.process,
                              family="worker_death", evidence=[first.text], wrapper=True))
    errors += [_traceback_blocker(tb) for tb in facts.tracebacks if not tb.noise]
    # The scheduler's OOM kill, when it comes first, explains the errors printed after it (a workflow tool's
    # report, torchrun's ChildFailedError, a shell's exit status); after an error, it is that error's echo.
    kill = next((e for e in facts.scheduler_events if e.family == "oom"), None)
    if kill is not None and all(e.line > kill.line for e in errors):
        errors.append(Blocker(kill.line, "oom_kill", kill.text, process=kill.process, family="oom",
                              evidence=[kill.text]))
    return sorted(errors, key=lambda b: b.line)


def is_weak(error: Blocker) -> bool:
    """A logger record that names an error but no specific family: evidence, not a root cause, while anything
    stronger is in the log."""
    return ((error.kind == "logged_error" and error.family not in classify.STRONG_RECORD_FAMILIES)
            or error.kind == "http_500")


def root_cause(errors: list[Blocker]) -> Blocker | None:
    """The earliest error of the most specific family; weak logger records only when no other error is there,
    wrappers only when nothing else is."""
    pool = ([e for e in errors if not e.wrapper and not is_weak(e)] or [e for e in errors if not e.wrapper]
            or errors)
    if not pool:
        return None
    best = min(classify.rank(e.family) for e in pool)
    ranked = [e for e in pool if classify.rank(e.family) == best]
    # The same error is often both logged or printed (`ERROR ... RuntimeError('CUDA error: ...')`, vLLM's message
    # printed without its type) and raised: the raised exception, with its traceback, is the line to name.
    raised = [e for e in ranked if e.kind not in PRINTED_KINDS]
    if raised:
        return raised[0]
    # Of printed lines, one that says what happened (`ggml-cuda.cu:72: CUDA error` is followed by the line with
    # `CUDA error: no kernel image is available ...`).
    return next((e for e in ranked if not _terse(e.message)), ranked[0])


PRINTED_KINDS = ("logged_error", "printed_error")
_PATHS = re.compile(r"\S*[/\\]\S*|\S+\.\w+:\d+:?")


def _terse(message: str) -> bool:
    """A message that only names the error's kind: three words or fewer once paths and file:line are gone."""
    words = [w for w in _PATHS.sub(" ", message.splitlines()[0] if message else "").split()
             if any(ch.isalpha() for ch in w)]
    return len(words) <= 3


def _missing_reason(facts: LogFacts, expected: int, printed: int) -> str:
    """Which requests have no result (issue 29 S19): named while every block is kept, counted past the cap."""
    if facts.overflow.judged:
        return f"{expected - printed} request(s) have no result ({printed} of {expected} printed)"
    seen = {r.index for r in facts.requests}
    absent = [i for i in range(expected) if i not in seen]
    if not absent:  # indices off the 0..n-1 numbering: only the count is sure
        return f"{expected - printed} request(s) have no result ({printed} of {expected} printed)"
    named = ", ".join(map(str, absent[:3])) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
    return f"request{'s' if len(absent) > 1 else ''} {named} {'have' if len(absent) > 1 else 'has'} no result " \
           f"({printed} of {expected} printed)"


def _scheduler_killed(facts: LogFacts, scheduler: SchedulerSummary | None) -> str | None:
    if scheduler is not None and scheduler.state in KILLED_STATES:
        return scheduler.state + (f" {scheduler.state_detail}" if scheduler.state_detail else "")
    for event in facts.scheduler_events:
        return f"slurmstepd: {event.kind}"
    return None


def _attribute_kill(cause: Blocker, facts: LogFacts, scheduler: SchedulerSummary | None) -> Blocker | None:
    """A bare `Killed` (SIGKILL, exit 137 / -9) is a fatal signal of unknown origin unless the scheduler says whose:
    its OUT_OF_MEMORY (or slurmstepd's oom-kill) makes it an OOM; a time limit, a cancel or a preemption make it
    the scheduler's stop (None: judged as a scheduler kill, `incomplete`)."""
    oom = (scheduler is not None and scheduler.state == "OUT_OF_MEMORY") or any(
        e.family == "oom" for e in facts.scheduler_events)
    if oom:
        return replace(cause, family="oom")
    if _scheduler_killed(facts, scheduler):
        return None
    return cause


def _kill_blocker(facts: LogFacts, scheduler: SchedulerSummary | None, killed: str) -> Blocker:
    event = next(iter(facts.scheduler_events), None)
    oom = (scheduler is not None and scheduler.state == "OUT_OF_MEMORY") or (event is not None and event.family == "oom")
    return Blocker(event.line if event else facts.lines, "killed", event.text if event else killed,
                   family="oom" if oom else "scheduler", evidence=[event.text] if event else [])


# ---- the verdict --------------------------------------------------------------------------------------------------


def judge(facts: LogFacts, scheduler: SchedulerSummary | None = None,
          options: VerdictOptions | None = None) -> Verdict:
    opts = (options or VerdictOptions()).merged_with(facts.expect)
    requests = [judge_request(r, opts) for r in facts.requests]
    overflow = facts.overflow
    n_requests = len(requests) + overflow.judged
    errors = main_path_errors(facts)
    killed = _scheduler_killed(facts, scheduler)
    missing = max(0, (opts.expected_requests or 0) - n_requests)
    has_results = n_requests > 0 and not missing
    cause = root_cause(errors)
    if cause is not None and cause.kind == "killed" and cause.family == "signal":
        cause = _attribute_kill(cause, facts, scheduler)
    nonfinite_events = [Blocker(e.line, "nonfinite", e.text, process=e.process) for e in facts.nonfinite]
    bad = [r for r in requests if r.problems] + overflow.examples
    reasons: list[str] = []

    # Results printed by the probe make later errors noise (they are marked so by the scan); a third-party log
    # has no such line, so an error anywhere in it counts.
    error_ends_run = cause is not None and (not has_results or (facts.results_line is None and not is_weak(cause))
                                            or cause.family == "setup")
    if cause is not None and cause.family == "device":
        status = "device_error"
        reasons.append(f"device-side failure at line {cause.line}: {cause.message.splitlines()[0][:300]}")
    elif nonfinite_events:
        status = "nonfinite"
        reasons.append(f"non-finite values at line {nonfinite_events[0].line}: {nonfinite_events[0].message}")
    elif error_ends_run:
        status = "crashed"
        reasons.append(f"{cause.family} error at line {cause.line} ended the run: "
                       f"{cause.message.splitlines()[0][:300] if cause.message else cause.kind}")
        if killed:
            reasons.append(f"the scheduler reports {killed}")
    elif not has_results and facts.py_exit not in (None, 0) and not killed:
        status = "crashed"
        reasons.append(f"Python exited {facts.py_exit} without results")
    elif not has_results:
        status = "incomplete"
        if killed:
            reasons.append(f"no results: the scheduler stopped the job ({killed})")
        elif facts.py_exit is None:
            reasons.append("no results and no PY_EXIT line: the log stops early")
        elif missing and n_requests:
            reasons.append(_missing_reason(facts, opts.expected_requests, n_requests))
        else:
            reasons.append("no results were printed")
        if missing and n_requests:
            reasons.append(f"{missing} of {opts.expected_requests} request(s) have no results")
    else:
        probe_says_bad = facts.probe_verdict not in (None, "COHERENT")
        if bad or overflow.bad:
            status = "degenerate"
            shown = bad[:MAX_BAD_REASONS]
            reasons += [f"request {r.index}: {'; '.join(r.problems)}" for r in shown]
            n_bad = len(bad) - len(overflow.examples) + overflow.bad  # examples are a part of the tally, not more
            if n_bad > len(shown):
                reasons.append(f"... and {n_bad - len(shown)} more bad request(s)")
        elif probe_says_bad:
            status = "degenerate"
            reasons.append(f"the probe itself judged the output {facts.probe_verdict}")
        else:
            status = "coherent"

    sched_ok = scheduler is None or scheduler.completed_ok
    readable = not facts.unreadable
    passed = status == "coherent" and facts.py_exit == 0 and sched_ok and readable
    if status == "coherent" and not passed:
        if facts.py_exit is None:
            reasons.append("no PY_EXIT line: Python's exit code is unknown")
        elif facts.py_exit != 0:
            reasons.append(f"PY_EXIT={facts.py_exit}")
        if not sched_ok:
            reasons.append(f"scheduler: {scheduler.state} {scheduler.exit_code}:{scheduler.signal}")
    if not readable:
        first = facts.unreadable[0]
        reasons.append(f"unreadable {first.kind} line at line {first.line}: the run's own record cannot be trusted")
    success_signals = [s for s, on in (("PY_EXIT=0", facts.py_exit == 0),
                                       ("COMPLETED 0:0", scheduler is not None and scheduler.completed_ok),
                                       ("probe said COHERENT", facts.probe_verdict == "COHERENT")) if on]
    false_green = status != "coherent" and bool(success_signals)
    if false_green:
        reasons.append(f"FALSE GREEN: {', '.join(success_signals)} although the run is {status}")

    first_blocker = None
    if status in ("device_error", "crashed") and cause is not None:
        first_blocker = cause
    elif status == "nonfinite":
        first_blocker = min([*nonfinite_events, *([cause] if cause else [])], key=lambda b: b.line)
    elif status == "degenerate":
        bad_request = min(bad, key=lambda r: r.line) if bad else None
        if bad_request is not None:
            shown = (f": {outputs.shown_as_printed(bad_request.source, bad_request.output_repr)[:200]}"
                     if bad_request.output_repr else "")
            first_blocker = Blocker(bad_request.line, "degenerate_output", bad_request.problems[0] + shown,
                                    evidence=[(bad_request.output_repr or "")[:300]] if bad_request.output_repr
                                    else [])
    elif status == "incomplete" and killed:
        first_blocker = _kill_blocker(facts, scheduler, killed)

    return Verdict(
        status=status,
        passed=passed,
        false_green=false_green,
        reasons=reasons,
        stage=facts.last_stage[1] if facts.last_stage else (facts.stages[-1][1] if facts.stages else None),
        first_blocker=first_blocker,
        requests=requests,
        bos_run=max([r.bos_run for r in requests] + [r.bos_run for r in overflow.examples], default=0),
        max_repeat_run=max([r.max_repeat_run for r in requests] + [r.max_repeat_run for r in overflow.examples],
                           default=0),
        py_exit=facts.py_exit,
        probe_verdict=facts.probe_verdict,
        scheduler=scheduler.to_json() if scheduler else None,
        engine_ready_s=facts.engine_ready_s if facts.engine_ready_s is not None else facts.init_engine_s,
        metrics=dict(facts.metrics),
        nonfinite=[{"line": e.line, "key": e.kind, "text": e.text, "process": e.process} for e in facts.nonfinite],
        noise=[{"line": e.line, "kind": e.kind, "text": e.text.splitlines()[0] if e.text else ""}
               for e in facts.noise],
        evidence=_evidence(facts, errors, n_requests),
    )


MAX_EVIDENCE_ERRORS = 64


def _evidence(facts: LogFacts, errors: list[Blocker], n_requests: int) -> dict[str, Any]:
    return {
        "stages": [{"line": line, "name": name} for line, name in facts.stages],
        "model_load_gib": facts.model_load_gib,
        "model_load_s": facts.model_load_s,
        "init_engine_s": facts.init_engine_s,
        "kv_cache_tokens": facts.kv_cache_tokens,
        "expert_dtype": facts.expert_dtype,
        "moe_backend": facts.moe_backend,
        "kv_format": facts.kv_format,
        "indexer_cache": facts.indexer_cache,
        "errors": [asdict(e) for e in errors[:MAX_EVIDENCE_ERRORS]],
        "device_errors": len(facts.device_errors),
        "diag_counts": dict(facts.diag_counts),
        "requests_judged": n_requests,
        "requests_past_cap": {"judged": facts.overflow.judged, "bad": facts.overflow.bad},
        "unreadable": [{"line": e.line, "kind": e.kind, "text": e.text} for e in facts.unreadable],
        "line_prefixes": list(facts.prefixes),
        "wrap_width": facts.wrap_width,
        "lines": facts.lines,
        "ends_mid_line": facts.ends_mid_line,
        "dropped": dict(facts.dropped, errors=max(0, len(errors) - MAX_EVIDENCE_ERRORS)) if len(errors) >
        MAX_EVIDENCE_ERRORS else dict(facts.dropped),
    }
