"""The serve rules: a serve run's request records and memory samples -> what is wrong with them.

Stdlib only. Two callers:
  the job   `judge_serve(spec, records, memory, eos_ids=..., ready_s=...) -> ServeJudgement`: the offline rules per
            request (BOS runs, repeats, golden ids when greedy) and the serve rules below; print
            `DSV4_VERDICT: <status.upper()> (<'; '.join(reasons)>)` and exit 0 only when `judgement.ok`.
  the CLI   `assess(...)` (serve rules only: the offline rules already ran on raw.log's request blocks), merged
            into the verdict by judge/serve_files.py.

The serve rules, in the order they decide the status:
  a failed request (HTTP error, timeout, reset; or no first token)   incomplete, the first one named
  fewer records than num_prompts (not a soak)                         incomplete
  ignore_eos off: a `stop` finish must end in EOS or a stop string,
  and no EOS id may appear before the last token                      degenerate
  ignore_eos on: a `stop` finish (EOS was to be ignored)              degenerate
  output_tokens that disagree with the ids returned                   degenerate
  server memory: the least-squares slope of RSS after the server is ready, with its 95% interval; a *suspected
  leak* (a finding, not a failure) when the interval is above 0 over MIN_LEAK_SAMPLES samples and the fitted growth
  passes MIN_LEAK_GROWTH_MIB; a blocker (the run cannot pass) when the growth above the first sample exceeds
  load.memory_limit_mib.
Non-greedy sampling (temperature > 0) gets the structural checks only: no golden.
"""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .serving import is_completed, measured
from .tokens import RequestBlock, VerdictOptions, judge_request

_ID_LISTS = (list, tuple, array)  # the CLI packs ids read from disk into arrays
MAX_REASONS = 32  # bad requests named; the rest are counted
MIN_LEAK_SAMPLES = 8
# RSS is paged, allocators grow in steps, and a CPU server warms up by ~80 MiB/min for its first 15 s of load (seen
# on the tiny model): a fitted rise below this is not a leak. A real leak over a soak passes it by far.
MIN_LEAK_GROWTH_MIB = 64.0
LEAK_BURN_IN = 0.2  # the first fifth of the window after ready is left out: caches fill while the load ramps up
# Student t, two-sided 95% (0.975 quantile), df 1..30; past 30 a Cornish-Fisher expansion of the normal's.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


@dataclass
class MemoryTrend:
    samples: int  # samples fitted (after ready and the burn-in)
    window_s: float
    slope_mib_per_min: float
    slope_low: float  # 95% interval of the slope
    slope_high: float
    baseline_mib: float  # the first sample after ready
    peak_mib: float
    growth_mib: float  # peak - baseline
    suspected_leak: bool = False
    over_limit: bool = False


def _sample(item: Any) -> tuple[float, float] | None:
    if not isinstance(item, dict):
        return None
    t, rss = item.get("t_s"), item.get("rss_mib")
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (t, rss))
    return (float(t), float(rss)) if ok and rss >= 0 else None


def memory_trend(samples: list[dict[str, Any]], ready_s: float | None = None,
                 limit_mib: float | None = None) -> MemoryTrend | None:
    """The slope of server RSS (MiB/min) after the server was ready, or None with fewer than 3 usable samples."""
    points = sorted(p for p in map(_sample, samples) if p is not None)
    if ready_s is not None:
        points = [p for p in points if p[0] >= ready_s]
    if len(points) < 3:
        return None
    baseline, peak = points[0][1], max(rss for _, rss in points)
    start = points[0][0] + LEAK_BURN_IN * (points[-1][0] - points[0][0])
    fitted = [p for p in points if p[0] >= start]
    if len(fitted) < 3:
        fitted = points
    n = len(fitted)
    mean_t = sum(t for t, _ in fitted) / n
    mean_m = sum(m for _, m in fitted) / n
    sxx = sum((t - mean_t) ** 2 for t, _ in fitted)
    if sxx <= 0:
        return None
    slope = sum((t - mean_t) * (m - mean_m) for t, m in fitted) / sxx
    residual = sum((m - mean_m - slope * (t - mean_t)) ** 2 for t, m in fitted)
    half = t975(n - 2) * math.sqrt(residual / (n - 2) / sxx)
    window = fitted[-1][0] - fitted[0][0]
    trend = MemoryTrend(samples=n, window_s=round(window, 3), slope_mib_per_min=slope * 60,
                        slope_low=(slope - half) * 60, slope_high=(slope + half) * 60, baseline_mib=baseline,
                        peak_mib=peak, growth_mib=peak - baseline)
    trend.suspected_leak = (n >= MIN_LEAK_SAMPLES and slope - half > 0 and slope * window >= MIN_LEAK_GROWTH_MIB)
    trend.over_limit = limit_mib is not None and trend.growth_mib > limit_mib
    return trend


# ---- requests ---------------------------------------------------------------------------------------------------


def model_eos_ids(model_dir: str | None) -> frozenset[int]:
    """The model's EOS ids: generation_config.json's, else config.json's (empty when neither names one). Used by the
    job and by the judge alike."""
    for name in ("generation_config.json", "config.json"):
        try:
            value = json.loads((Path(model_dir) / name).read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        ids = {v for v in (value if isinstance(value, list) else [value])
               if isinstance(v, int) and not isinstance(v, bool)}
        if ids:
            return frozenset(ids)
    return frozenset()


def eos_problems(record: dict[str, Any], ignore_eos: bool, eos_ids: frozenset[int]) -> list[str]:
    """How a request's end breaks the EOS rules (see the module docstring)."""
    finish, stop = record.get("finish_reason"), record.get("stop_reason")
    ids = record.get("token_ids") if isinstance(record.get("token_ids"), _ID_LISTS) else None
    if ignore_eos:
        return [f"finish_reason 'stop' (stop_reason {stop!r}) although ignore_eos is on"] if finish == "stop" else []
    problems = []
    if ids and eos_ids:
        early = next((i for i, t in enumerate(ids[:-1]) if t in eos_ids), None)
        if early is not None:
            problems.append(f"EOS id {ids[early]} at token {early} of {len(ids)}, before the end")
    if finish == "stop" and not isinstance(stop, str):
        # stop_reason None: the EOS token; an int: one of the request's stop_token_ids. Either is the last id.
        wanted = {stop} if isinstance(stop, int) and not isinstance(stop, bool) else set(eos_ids)
        if ids is not None and wanted and (not ids or ids[-1] not in wanted):
            problems.append(f"finish_reason 'stop' but the last token {ids[-1] if ids else None} is not EOS "
                            f"{sorted(wanted)[:4]} nor a stop string")
    return problems


def count_problems(record: dict[str, Any]) -> list[str]:
    ids, n = record.get("token_ids"), record.get("output_tokens")
    if isinstance(ids, _ID_LISTS) and isinstance(n, int) and n != len(ids):
        return [f"output_tokens {n} but {len(ids)} token ids came back"]
    return []


@dataclass
class ServeJudgement:
    status: str  # coherent | incomplete | degenerate (the verdict's statuses)
    reasons: list[str]
    blockers: list[str] = field(default_factory=list)  # what keeps a coherent run from passing (memory limit)
    findings: list[str] = field(default_factory=list)  # worth saying, not failing (a suspected leak)
    first_failed: dict[str, Any] | None = None  # {"index", "error"} of the first failed request
    first_bad: dict[str, Any] | None = None  # {"index", "problem"} of the first request breaking a serve rule
    memory: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "coherent" and not self.blockers

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _load(spec: dict[str, Any]) -> dict[str, Any]:
    return spec.get("load") or {}


def _failure(record: dict[str, Any]) -> str:
    error = record.get("error")
    if error is not None:
        return str(error)[:300]
    return "no first token or end time came back (the stream ended without a completion)"


def assess(spec: dict[str, Any], records: list[dict[str, Any]], memory: list[dict[str, Any]], *,
           eos_ids: frozenset[int] | set[int] | tuple[int, ...] = (), ready_s: float | None = None,
           unreadable: int = 0) -> ServeJudgement:
    """The serve rules over the records (warm-up left out) and the server's memory samples."""
    load, sampling = _load(spec), spec.get("sampling") or {}
    runs = measured(records)
    ignore_eos = bool(sampling.get("ignore_eos", True))
    eos = frozenset(i for i in eos_ids if isinstance(i, int) and not isinstance(i, bool))
    reasons: list[str] = []
    failed = [r for r in runs if not is_completed(r)]
    bad = [(r, p) for r in runs if is_completed(r)
           for p in (eos_problems(r, ignore_eos, eos) + count_problems(r))[:1]]
    expected = load.get("num_prompts") if load.get("duration_s") is None else None
    missing = max(0, expected - len(runs)) if isinstance(expected, int) else 0
    status = "coherent"
    if expected is None and not runs:
        status = "incomplete"
        reasons.append(f"the soak sent no request in duration_s={load.get('duration_s')}")
    if failed or missing:
        status = "incomplete"
        if failed:
            reasons.append(f"request {failed[0].get('index')} failed: {_failure(failed[0])}")
            if len(failed) > 1:
                reasons.append(f"{len(failed)} of {len(runs)} requests failed")
        if missing:
            reasons.append(f"{missing} of {expected} requests have no record")
    if bad:
        status = "degenerate" if status == "coherent" else status
        reasons += [f"request {r.get('index')}: {p}" for r, p in bad[:MAX_REASONS]]
        if len(bad) > MAX_REASONS:
            reasons.append(f"... and {len(bad) - MAX_REASONS} more bad request(s)")
    judgement = ServeJudgement(status=status, reasons=reasons,
                               counts={"records": len(runs), "failed": len(failed), "bad": len(bad),
                                       "missing": missing, "unreadable": unreadable})
    if failed:
        judgement.first_failed = {"index": failed[0].get("index"), "error": _failure(failed[0])}
    if bad:
        judgement.first_bad = {"index": bad[0][0].get("index"), "problem": bad[0][1]}
    if unreadable:
        judgement.blockers.append(f"{unreadable} unreadable request record(s): the run's own record cannot be "
                                  "trusted")
    if not ignore_eos and not eos:
        judgement.findings.append("EOS ids unknown: the EOS rules checked the finish reasons only")
    _judge_memory(judgement, memory, ready_s, load.get("memory_limit_mib"))
    return judgement


def _judge_memory(judgement: ServeJudgement, memory: list[dict[str, Any]], ready_s: float | None,
                  limit: Any) -> None:
    limit = float(limit) if isinstance(limit, (int, float)) and not isinstance(limit, bool) else None
    trend = memory_trend(memory, ready_s, limit)
    if trend is None:
        if limit is not None:
            judgement.blockers.append(f"load.memory_limit_mib is {limit:g} but fewer than 3 memory samples after "
                                      "ready: the limit cannot be checked")
        return
    judgement.memory = asdict(trend)
    slope = (f"{trend.slope_mib_per_min:+.2f} MiB/min (95% interval {trend.slope_low:+.2f} to "
             f"{trend.slope_high:+.2f}) over {trend.window_s:g} s, {trend.samples} samples")
    if trend.over_limit:
        judgement.blockers.append(f"server memory grew {trend.growth_mib:.1f} MiB, over load.memory_limit_mib "
                                  f"{limit:g}: {slope}")
    elif trend.suspected_leak:
        judgement.findings.append(f"suspected leak: server RSS {slope}")


def request_blocks(records: list[dict[str, Any]]) -> list[RequestBlock]:
    """Completed records as the offline rules' request blocks (ids, finish reason, text)."""
    blocks = []
    for r in measured(records):
        if not is_completed(r):
            continue
        ids = r.get("token_ids")
        ids = [t for t in ids if isinstance(t, int) and not isinstance(t, bool)] if isinstance(ids, _ID_LISTS) else []
        index = r.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else len(blocks)
        text = r.get("text") if isinstance(r.get("text"), str) else None
        block = RequestBlock(line=0, index=index, token_ids=ids, n_ids=len(ids),
                             finish_reason=r.get("finish_reason") if isinstance(r.get("finish_reason"), str) else None,
                             output=text, output_repr=repr(text[:4096]) if text is not None else None)
        blocks.append(block)
    return blocks


def serve_options(spec: dict[str, Any], n_records: int = 0) -> VerdictOptions:
    """The offline rules' options for a serve run: no request count or token count (the load decides them), and a
    golden only for greedy sampling over the spec's own requests (cycled, as the load sends them)."""
    expect, sampling = spec.get("expect") or {}, spec.get("sampling") or {}
    greedy = not sampling.get("temperature")
    ids = expect.get("golden_token_ids") or []
    if ids and not isinstance(ids[0], list):
        ids = [ids]
    golden: Any = ()
    if greedy and ids and (spec.get("load") or {}).get("dataset") == "requests":
        golden = CycledGolden(ids, max(1, len(spec.get("requests") or ())), n_records)
    return VerdictOptions(bos_id=expect.get("bos_id", 0), max_repeat_run=expect.get("max_repeat_run", 8),
                          golden=golden)


class CycledGolden:
    """Request i's golden is the golden of spec request i % n (the load cycles the spec's requests): a sequence
    of any length without building it (a soak's request indices can run into the millions)."""

    def __init__(self, ids: list[Any], n_spec: int, length: int) -> None:
        self.ids, self.n_spec, self.length = ids, n_spec, max(0, length)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[int, ...] | None:
        position = index % self.n_spec
        return tuple(self.ids[position]) if position < len(self.ids) else None


def judge_serve(spec: dict[str, Any], records: list[dict[str, Any]], memory: list[dict[str, Any]], *,
                eos_ids: frozenset[int] | set[int] | tuple[int, ...] = (),
                ready_s: float | None = None) -> ServeJudgement:
    """The job side's whole verdict on its own load: offline rules per completed request, then the serve rules."""
    judgement = assess(spec, records, memory, eos_ids=eos_ids, ready_s=ready_s)
    offline_rules(judgement, spec, records)
    return judgement


def offline_rules(judgement: ServeJudgement, spec: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """The offline rules (BOS runs, repeats, golden) on the records' ids, folded into the judgement. The CLI runs them
    too when raw.log has no request blocks (a job killed before it printed them): what got through is judged."""
    blocks = request_blocks(records)
    options = serve_options(spec, 1 + max((b.index for b in blocks), default=-1))
    verdicts = [judge_request(block, options) for block in blocks]
    bad = [v for v in verdicts if v.problems]
    if bad:
        if judgement.status == "coherent":
            judgement.status = "degenerate"
        judgement.reasons = [f"request {v.index}: {'; '.join(v.problems)}" for v in bad[:MAX_REASONS]] \
            + judgement.reasons
        if judgement.first_bad is None:
            judgement.first_bad = {"index": bad[0].index, "problem": bad[0].problems[0]}
        judgement.counts["bad"] += len(bad)
