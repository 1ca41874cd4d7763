"""Serving metrics: per-request records of a serve run -> vllm bench serve's figures, under its names.

Stdlib only: the job's load driver calls `summarise` in the engine's venv and prints the result as DSV4_METRICS;
the CLI calls it again on the run directory's serve-requests.jsonl.

Definitions are those of `vllm bench serve` (vllm/benchmarks/serve.py, calculate_metrics), per successful request:
  TTFT   send -> first streamed chunk           TPOT  (E2EL - TTFT) / (output_tokens - 1), only when output > 1
  E2EL   send -> last byte                      ITL   every gap between consecutive chunks, pooled over requests
  request_throughput = completed / duration     output_throughput = sum(output_tokens) / duration
  total_token_throughput = (sum(prompt_tokens) + sum(output_tokens)) / duration
  request_goodput = requests meeting every SLO / duration (TPOT counted 0 when output <= 1); None without SLOs
  max_output_tokens_per_s, max_concurrent_requests: peaks over one-second buckets from the first send
Each latency gets mean/median/std (population, as numpy) and pNN (numpy's default linear interpolation), in ms,
named like `p95_ttft_ms`. Where vllm prints 0 for a metric with no sample (no request with output > 1 has a TPOT),
this returns None: a missing figure must not read as a perfect one.

A record (one line of serve-requests.jsonl) is
  {"index", "warmup", "send_s", "ttft_s", "itl_s", "e2el_s", "prompt_tokens", "output_tokens", "token_ids",
   "finish_reason", "stop_reason", "text", "error"}
and counts as completed when `error` is null and its TTFT and E2EL are numbers; warm-up records are left out.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

PERCENTILES = (50, 90, 95, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")  # the spec's load.slo names; vllm's --goodput keys without _ms


def _number(value: Any) -> float | None:
    """A finite float, or None for anything else (bool, NaN, strings, null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def is_completed(record: dict[str, Any]) -> bool:
    """vllm's `success`: no error, and the timings a completed streamed request has."""
    return (record.get("error") is None and _number(record.get("ttft_s")) is not None
            and _number(record.get("e2el_s")) is not None)


def measured(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records the figures are taken over: every one but the warm-up requests."""
    return [r for r in records if isinstance(r, dict) and r.get("warmup") is not True]


# ---- numpy's statistics, in the stdlib -------------------------------------------------------------------------


def percentile(ordered: list[float], p: float) -> float:
    """numpy.percentile(values, p) with its default method ('linear'), on values already sorted; the same
    arithmetic as numpy (virtual index (n - 1) * q, then its two-sided lerp) so the figures agree to the bit."""
    n = len(ordered)
    q = p / 100
    virtual = (n - 1) * q
    below = math.floor(virtual)
    gamma = virtual - below
    lo = ordered[min(max(below, 0), n - 1)]
    hi = ordered[min(max(below + 1, 0), n - 1)]
    diff = hi - lo
    # numpy's _lerp computes from the nearer end to keep monotonicity.
    return hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma


def _pairwise_sum(values: list[float], lo: int, n: int) -> float:
    """numpy's pairwise summation (add.reduce on a contiguous float64 array): the same additions in the same order,
    so a mean or std agrees with numpy's to the bit, not merely to rounding."""
    if n < 8:
        total = 0.0
        for i in range(lo, lo + n):
            total += values[i]
        return total
    if n <= 128:
        acc = values[lo:lo + 8]
        whole = n - n % 8
        for i in range(8, whole, 8):
            for j in range(8):
                acc[j] += values[lo + i + j]
        total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
        for i in range(lo + whole, lo + n):
            total += values[i]
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(values, lo, half) + _pairwise_sum(values, lo + half, n - half)


def _mean(values: list[float]) -> float:
    return _pairwise_sum(values, 0, len(values)) / len(values)


def _std(values: list[float]) -> float:
    """Population standard deviation, computed as numpy's _var does (ddof=0)."""
    mean = _mean(values)
    squares = [(v - mean) * (v - mean) for v in values]
    return math.sqrt(_pairwise_sum(squares, 0, len(squares)) / len(squares))


def _median(ordered: list[float]) -> float:
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def latency_stats(name: str, seconds: list[float], percentiles: Iterable[float]) -> dict[str, float | None]:
    """mean/median/std/pNN of one latency in milliseconds (numpy computes in seconds, then scales: so do we).
    Mean and std are summed in the records' order, as vllm's lists are."""
    ordered = sorted(seconds)
    stats: dict[str, float | None] = {}
    stats[f"mean_{name}_ms"] = _mean(seconds) * 1000 if seconds else None
    stats[f"median_{name}_ms"] = _median(ordered) * 1000 if ordered else None
    stats[f"std_{name}_ms"] = _std(seconds) * 1000 if seconds else None
    for p in percentiles:
        stats[f"p{p:g}_{name}_ms"] = percentile(ordered, p) * 1000 if ordered else None
    return stats


# ---- the summary ------------------------------------------------------------------------------------------------


def _tpot_s(record: dict[str, Any], output_len: int) -> float:
    """(E2EL - TTFT)/(out - 1); 0 when out <= 1 (vllm counts it so for goodput, and leaves it out of the stats)."""
    if output_len <= 1:
        return 0.0
    return (record["e2el_s"] - record["ttft_s"]) / (output_len - 1)


def _output_len(record: dict[str, Any]) -> int:
    value = record.get("output_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _meets_slos(ttft: float, tpot: float, e2el: float, slo: dict[str, float]) -> bool:
    seen = {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el}
    return all(limit / 1000 >= seen[key] for key, limit in slo.items())


def slo_limits(slo: dict[str, Any] | None) -> dict[str, float]:
    """The SLOs that are set, in ms, from the spec's load.slo (None values are unset)."""
    return {key: float(v) for key, v in (slo or {}).items() if key in SLO_KEYS and _number(v) is not None}


def _peaks(done: list[dict[str, Any]]) -> tuple[float, int]:
    """vllm's max_output_tokens_per_s and max_concurrent_requests: one-second buckets counted from the first send
    (a request is active in every bucket from its send's to its end's, both included). Counted from events, not a
    per-second array, so a hostile timestamp cannot ask for a billion buckets."""
    start = min(r["send_s"] for r in done)
    chunks: dict[int, int] = {}
    edges: dict[int, int] = {}
    for r in done:
        t = r["send_s"] + r["ttft_s"]
        for gap in [0.0, *r["itl"]]:
            t += gap
            bucket = int(t - start)
            if bucket >= 0:
                chunks[bucket] = chunks.get(bucket, 0) + 1
        first, last = int(r["send_s"] - start), int(r["send_s"] + r["e2el_s"] - start)
        if last >= first:  # vllm's range(first, last + 1) is empty otherwise
            edges[first] = edges.get(first, 0) + 1
            edges[last + 1] = edges.get(last + 1, 0) - 1
    active = peak = 0
    for second in sorted(edges):
        active += edges[second]
        peak = max(peak, active)
    # vllm's bucket array ends at ceil(span) + 1: chunks past it are not counted.
    span = max(r["send_s"] + r["e2el_s"] for r in done) - start
    limit = math.ceil(span) + 1
    return float(max((n for b, n in chunks.items() if b < limit), default=0)), peak


def _clean(record: dict[str, Any]) -> dict[str, Any]:
    """A completed record's timings as floats (gaps that are not numbers are dropped from ITL)."""
    itl = record.get("itl_s")
    gaps = [g for g in (_number(x) for x in itl) if g is not None] if isinstance(itl, list) else []
    return {"send_s": _number(record.get("send_s")) or 0.0, "ttft_s": float(record["ttft_s"]),
            "e2el_s": float(record["e2el_s"]), "itl": gaps}


def summarise(records: list[dict[str, Any]], duration_s: float, slo: dict[str, Any] | None = None,
              percentiles: Iterable[float] = PERCENTILES) -> dict[str, float | int | None]:
    """vllm bench serve's figures over the non-warm-up records; `duration_s` is the load's wall time (throughputs
    are None when it is not a positive number); `slo` is load.slo ({"ttft_ms", "tpot_ms", "e2el_ms"})."""
    runs = measured(records)
    done = [r for r in runs if is_completed(r)]
    clean = [_clean(r) for r in done]
    limits = slo_limits(slo)
    out_lens = [_output_len(r) for r in done]
    prompt_lens = [r.get("prompt_tokens") for r in done]
    total_in = (sum(prompt_lens) if all(isinstance(n, int) and not isinstance(n, bool) for n in prompt_lens)
                else None)
    total_out = sum(out_lens)
    ttfts = [c["ttft_s"] for c in clean]
    e2els = [c["e2el_s"] for c in clean]
    all_tpots = [_tpot_s(c, n) for c, n in zip(clean, out_lens)]
    tpots = [t for t, n in zip(all_tpots, out_lens) if n > 1]
    itls = [gap for c in clean for gap in c["itl"]]
    good = sum(_meets_slos(a, b, c, limits) for a, b, c in zip(ttfts, all_tpots, e2els))
    duration = _number(duration_s)
    per_s = (lambda n: n / duration) if duration and duration > 0 else (lambda n: None)
    peak_tokens, peak_requests = _peaks(clean) if clean else (0.0, 0)
    summary: dict[str, float | int | None] = {
        "duration": duration,
        "completed": len(done),
        "failed": len(runs) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(done)),
        "request_goodput": per_s(good) if limits else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out) if total_in is not None else None,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        summary.update(latency_stats(name, values, percentiles))
    return summary


# ---- for people ------------------------------------------------------------------------------------------------

TABLE_STATS = ("mean", "median", "p95", "p99")
COUNTS = ("completed", "failed", "request_throughput", "output_throughput", "total_token_throughput",
          "request_goodput", "max_concurrent_requests", "duration")


def is_serve_summary(metrics: dict[str, Any]) -> bool:
    return any(f"{stat}_ttft_ms" in metrics for stat in TABLE_STATS)


def latency_table(metrics: dict[str, Any]) -> list[tuple[str, list[float | None]]]:
    """One row per latency (TTFT, TPOT, ITL, E2EL), its mean/median/p95/p99 in ms: what `show` draws."""
    return [(f"{name}_ms", [metrics.get(f"{stat}_{name}_ms") for stat in TABLE_STATS]) for name in LATENCIES]


def summary_names(percentiles: Iterable[float] = PERCENTILES) -> set[str]:
    """Every name summarise() writes: the rest of a run's metrics are the job's own (engine_ready_s...)."""
    names = set(COUNTS) | {"total_input_tokens", "total_output_tokens", "max_output_tokens_per_s"}
    for name in LATENCIES:
        names |= {f"{stat}_{name}_ms" for stat in ("mean", "median", "std", *(f"p{p:g}" for p in percentiles))}
    return names
