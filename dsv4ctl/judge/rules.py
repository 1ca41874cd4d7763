"""The verdict rules: raw-log facts + the scheduler's record -> one verdict that never calls a broken run green.

Stdlib only; the job-side probe judges its own results with this very module.

Status, first match wins:
  device_error  a device-side failure (assertion, GPU memory fault/VMFault, HSA error, HIP/CUDA error)
  nonfinite     a diagnostic or metric shows NaN/Inf, or a `*_finite = False` diagnostic
  crashed       a main-path exception ended the run, a setup step failed, or Python died without results
  incomplete    no (or not all) results and no error: killed by the scheduler, or the log stops early
  degenerate    results exist, but a request has a BOS run >= 2, one token repeated >= max_repeat_run times,
                no tokens, unreadable ids, fewer tokens than asked with ignore_eos, tokens that diverge from the
                expected golden sequence (unless vLLM's logprob rule accepts the first difference: each side's token
                in the other's top-N), or the probe itself said so
  coherent      none of the above

passed       = coherent, PY_EXIT 0, and no scheduler record or COMPLETED 0:0.
false_green  = not coherent while something said success: PY_EXIT=0, COMPLETED 0:0, or the probe's COHERENT (J08).
first_blocker= the earliest main-path error (noise never counts); for a degenerate run, the first bad request.
Noise        = the usage-report thread, atexit/shutdown tracebacks, `libcudart is not loaded`, and any traceback
               after the results were printed (report §11).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .scan import BOS_TEXT, LogFacts, RequestBlock, device_like
from .sacct import SchedulerSummary
from .states import KILLED as KILLED_STATES

STATUSES = ("device_error", "nonfinite", "crashed", "incomplete", "degenerate", "coherent")
BOS_MARKERS = frozenset({BOS_TEXT, "BOS", "<s>"})


@dataclass(frozen=True)
class VerdictOptions:
    bos_id: int = 0
    max_repeat_run: int = 8
    expected_tokens: int | None = None  # max_tokens asked for
    ignore_eos: bool | None = None
    expected_requests: int | None = None
    golden: tuple[tuple[int, ...] | None, ...] = ()  # expected greedy token ids per request
    golden_logprobs: tuple[Any, ...] = ()  # per request: the golden's top-N [token_id, logprob] pairs per position

    def merged_with(self, expect: dict[str, Any]) -> "VerdictOptions":
        """Fill what the caller left unset from the probe's DSV4_EXPECT line."""
        return VerdictOptions(
            bos_id=self.bos_id if self.bos_id != 0 or "bos_id" not in expect else int(expect["bos_id"]),
            max_repeat_run=int(expect.get("max_repeat_run", self.max_repeat_run)) if self.max_repeat_run == 8
            else self.max_repeat_run,
            expected_tokens=self.expected_tokens if self.expected_tokens is not None else expect.get("max_tokens"),
            ignore_eos=self.ignore_eos if self.ignore_eos is not None else expect.get("ignore_eos"),
            expected_requests=self.expected_requests if self.expected_requests is not None
            else expect.get("n_requests"),
            golden=self.golden,
            golden_logprobs=self.golden_logprobs,
        )


@dataclass
class Blocker:
    line: int
    kind: str
    message: str
    exc_type: str | None = None
    process: str | None = None


@dataclass
class RequestVerdict:
    index: int
    line: int
    token_ids: list[int]
    n_tokens: int
    finish_reason: str | None
    bos_run: int
    max_repeat_run: int
    problems: list[str] = field(default_factory=list)
    ids_elided: bool = False
    output_repr: str | None = None


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


# ---- token checks ------------------------------------------------------------------------------------------------


def longest_run(flags: list[bool | None]) -> int:
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def bos_flags(request: RequestBlock, bos_id: int) -> list[bool | None]:
    """Per position: BOS or not; None marks a `...` gap, which no run may cross."""
    ids = request.token_ids
    if request.ids_gaps:  # an abbreviated list: positions of the decode list no longer line up
        flags: list[bool | None] = []
        for i, token in enumerate(ids):
            if i in request.ids_gaps:
                flags.append(None)
            flags.append(token == bos_id)
        return flags
    decode = request.token_decode or []
    n = max(len(ids), len(decode))
    return [(i < len(ids) and ids[i] == bos_id) or (i < len(decode) and decode[i] in BOS_MARKERS)
            for i in range(n)]


def max_repeat(ids: list[int], gaps: list[int] = ()) -> int:
    best = run = 0
    for i, token in enumerate(ids):
        run = run + 1 if i and i not in gaps and token == ids[i - 1] else 1
        best = max(best, run)
    return best


def first_divergence(golden: tuple[int, ...] | list[int], ids: list[int]) -> tuple[int, int | None, int | None] | None:
    """The first position where the tokens differ from the golden: (position, expected, got), or None."""
    for position in range(max(len(golden), len(ids))):
        expected = golden[position] if position < len(golden) else None
        got = ids[position] if position < len(ids) else None
        if expected != got:
            return position, expected, got
    return None


def _top_ids(logprobs: Any, position: int) -> set[int] | None:
    if not logprobs or position >= len(logprobs) or logprobs[position] is None:
        return None
    return {int(pair[0]) for pair in logprobs[position]}


def close_by_logprobs(position: int, expected: int | None, got: int | None, run_logprobs: Any,
                      golden_logprobs: Any) -> bool:
    """vLLM's check_logprobs_close: at the first differing position, each side's token must be in the other
    side's top-N logprobs; after that the sequences may legitimately diverge. Without the run's logprobs at that
    position, a difference is a difference."""
    if expected is None or got is None:
        return False
    run_top = _top_ids(run_logprobs, position)
    if run_top is None or expected not in run_top:
        return False
    golden_top = _top_ids(golden_logprobs, position)
    return golden_top is None or got in golden_top


def judge_request(request: RequestBlock, opts: VerdictOptions) -> RequestVerdict:
    ids = request.token_ids
    bos = longest_run(bos_flags(request, opts.bos_id))
    repeat = max_repeat(ids, request.ids_gaps)
    problems = []
    if bos >= 2:
        problems.append(f"a run of {bos} BOS tokens (id {opts.bos_id})")
    if repeat >= opts.max_repeat_run:
        problems.append(f"one token repeated {repeat} times in a row (limit {opts.max_repeat_run})")
    if not ids and not request.ids_gaps:
        problems.append("no tokens generated")
    if request.ids_unparsed:
        problems.append(f"unreadable token ids: {', '.join(request.ids_unparsed[:3])}")
    if opts.ignore_eos and opts.expected_tokens and not request.ids_gaps and 0 < len(ids) < opts.expected_tokens:
        problems.append(f"{len(ids)} tokens, {opts.expected_tokens} asked with ignore_eos")
    index = request.index if request.index is not None else 0
    golden = opts.golden[index] if index < len(opts.golden) else None
    divergence = first_divergence(golden, ids) if golden is not None and not request.ids_gaps else None
    if divergence is not None:
        position, expected, got = divergence
        golden_top = opts.golden_logprobs[index] if index < len(opts.golden_logprobs) else None
        if not close_by_logprobs(position, expected, got, request.logprobs, golden_top):
            problems.append(f"diverges from the golden at token {position}: expected {expected}, got {got}")
    return RequestVerdict(index=request.index if request.index is not None else 0, line=request.line,
                          token_ids=ids, n_tokens=len(ids), finish_reason=request.finish_reason, bos_run=bos,
                          max_repeat_run=repeat, problems=problems, ids_elided=bool(request.ids_gaps),
                          output_repr=request.output_repr)


# ---- errors -----------------------------------------------------------------------------------------------------


def main_path_errors(facts: LogFacts) -> list[Blocker]:
    """Every error that counts, in log order: tracebacks that are not noise, device errors, setup failures."""
    errors = [Blocker(e.line, e.kind, e.text, process=e.process) for e in facts.device_errors]
    errors += [Blocker(e.line, e.kind, e.text, process=e.process) for e in facts.worker_deaths]
    errors += [Blocker(e.line, "setup_error", e.text, process=e.process) for e in facts.setup_errors]
    for tb in facts.tracebacks:
        if tb.noise:
            continue
        text = tb.text if not tb.chain else "\n".join([tb.text, *tb.chain[1:]])
        kind = "device_error" if device_like(text) else "exception"
        errors.append(Blocker(tb.exc_line or tb.line, kind, text, exc_type=tb.exc_type, process=tb.process))
    return sorted(errors, key=lambda b: b.line)


def _scheduler_killed(facts: LogFacts, scheduler: SchedulerSummary | None) -> str | None:
    if scheduler is not None and scheduler.state in KILLED_STATES:
        return scheduler.state + (f" {scheduler.state_detail}" if scheduler.state_detail else "")
    for event in facts.scheduler_events:
        return f"slurmstepd: {event.kind}"
    return None


# ---- the verdict --------------------------------------------------------------------------------------------------


def judge(facts: LogFacts, scheduler: SchedulerSummary | None = None,
          options: VerdictOptions | None = None) -> Verdict:
    opts = (options or VerdictOptions()).merged_with(facts.expect)
    requests = [judge_request(r, opts) for r in facts.requests]
    errors = main_path_errors(facts)
    killed = _scheduler_killed(facts, scheduler)
    missing = max(0, (opts.expected_requests or 0) - len(requests))
    has_results = bool(requests) and not missing
    device = [e for e in errors if e.kind in ("device_assert", "gpu_memory_fault", "hsa_error", "device_error")]
    nonfinite_events = [Blocker(e.line, "nonfinite", e.text, process=e.process) for e in facts.nonfinite]
    reasons: list[str] = []

    if device:
        status = "device_error"
        reasons.append(f"device-side failure at line {device[0].line}: {device[0].message.splitlines()[0]}")
    elif nonfinite_events:
        status = "nonfinite"
        reasons.append(f"non-finite values at line {nonfinite_events[0].line}: {nonfinite_events[0].message}")
    elif errors and (not has_results or errors[0].kind == "setup_error"):
        status = "crashed"
        reasons.append(f"{errors[0].exc_type or errors[0].kind} at line {errors[0].line} ended the run")
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
        else:
            reasons.append("no results were printed")
        if missing and requests:
            reasons.append(f"{missing} of {opts.expected_requests} request(s) have no results")
    else:
        bad = [r for r in requests if r.problems]
        probe_says_bad = facts.probe_verdict not in (None, "COHERENT")
        if bad:
            status = "degenerate"
            reasons += [f"request {r.index}: {'; '.join(r.problems)}" for r in bad]
        elif probe_says_bad:
            status = "degenerate"
            reasons.append(f"the probe itself judged the output {facts.probe_verdict}")
        else:
            status = "coherent"

    sched_ok = scheduler is None or scheduler.completed_ok
    passed = status == "coherent" and facts.py_exit == 0 and sched_ok
    if status == "coherent" and not passed:
        if facts.py_exit is None:
            reasons.append("no PY_EXIT line: Python's exit code is unknown")
        elif facts.py_exit != 0:
            reasons.append(f"PY_EXIT={facts.py_exit}")
        if not sched_ok:
            reasons.append(f"scheduler: {scheduler.state} {scheduler.exit_code}:{scheduler.signal}")
    success_signals = [s for s, on in (("PY_EXIT=0", facts.py_exit == 0),
                                       ("COMPLETED 0:0", scheduler is not None and scheduler.completed_ok),
                                       ("probe said COHERENT", facts.probe_verdict == "COHERENT")) if on]
    false_green = status != "coherent" and bool(success_signals)
    if false_green:
        reasons.append(f"false green: {', '.join(success_signals)} although the run is {status}")

    blockers = sorted(errors + nonfinite_events, key=lambda b: b.line)
    first_blocker = blockers[0] if blockers and status != "coherent" else None
    if first_blocker is None and status == "degenerate":
        bad_request = next((r for r in requests if r.problems), None)
        if bad_request is not None:
            first_blocker = Blocker(bad_request.line, "degenerate_output", bad_request.problems[0])
    if first_blocker is None and killed and status == "incomplete":
        event = next(iter(facts.scheduler_events), None)
        first_blocker = Blocker(event.line if event else facts.lines, "killed", event.text if event else killed)

    return Verdict(
        status=status,
        passed=passed,
        false_green=false_green,
        reasons=reasons,
        stage=facts.stages[-1][1] if facts.stages else None,
        first_blocker=first_blocker,
        requests=requests,
        bos_run=max((r.bos_run for r in requests), default=0),
        max_repeat_run=max((r.max_repeat_run for r in requests), default=0),
        py_exit=facts.py_exit,
        probe_verdict=facts.probe_verdict,
        scheduler=scheduler.to_json() if scheduler else None,
        engine_ready_s=facts.engine_ready_s if facts.engine_ready_s is not None else facts.init_engine_s,
        metrics=dict(facts.metrics),
        nonfinite=[{"line": e.line, "key": e.kind, "text": e.text, "process": e.process} for e in facts.nonfinite],
        noise=[{"line": e.line, "kind": e.kind, "text": e.text.splitlines()[0] if e.text else ""}
               for e in facts.noise],
        evidence=_evidence(facts, errors),
    )


def _evidence(facts: LogFacts, errors: list[Blocker]) -> dict[str, Any]:
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
        "errors": [asdict(e) for e in errors],
        "device_errors": len(facts.device_errors),
        "diag_counts": dict(facts.diag_counts),
        "lines": facts.lines,
        "ends_mid_line": facts.ends_mid_line,
        "dropped": dict(facts.dropped),
    }
