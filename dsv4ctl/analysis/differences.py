"""What differs between the two sides of a comparison: every setting of their specs, switches and provenance, how
each side times its runs, and the first token where greedy outputs part."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..store import Store

if TYPE_CHECKING:
    from .sides import CompareRow, Side

# Labels and bookkeeping: they differ between any two specs and change nothing a run does.
IGNORED_KEYS = ("name", "description", "tags", "repeats", "matrix")


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): json.dumps(value, sort_keys=True, ensure_ascii=False)}


def _spec_facts(store: Store, experiment_id: int, cache: dict[int, dict[str, str]]) -> dict[str, str]:
    if experiment_id not in cache:
        spec = {k: v for k, v in json.loads(store.spec_json(experiment_id)).items()
                if k not in IGNORED_KEYS and k != "switches"}
        cache[experiment_id] = _flatten(spec)
    return cache[experiment_id]


def run_facts(store: Store, run: CompareRow, cache: dict[int, dict[str, str]] | None = None) -> dict[str, str]:
    """Every setting of a run as `key -> JSON text`: its spec, its switches and its provenance."""
    facts = dict(_spec_facts(store, run.experiment_id, {} if cache is None else cache))
    facts.update({f"switches.{k}": json.dumps(v) for k, v in json.loads(run.switches_json or "{}").items()})
    facts.update({f"provenance.{k}": json.dumps(v) for k, v in run.provenance})
    return facts


def _settings(store: Store, side: Side, cache: dict[int, dict[str, str]]) -> list[dict[str, str]]:
    """The distinct settings of a side's runs: thousands of repeats share a handful."""
    seen: dict[tuple, dict[str, str]] = {}
    for run in side.runs:
        key = (run.experiment_id, run.switches_json, run.provenance)
        if key not in seen:
            seen[key] = run_facts(store, run, cache)
    return list(seen.values())


def _values(texts: set[str]) -> list[Any]:
    return [json.loads(t) for t in sorted(texts)]  # sorted as JSON text: values of mixed types never meet `<`


def differences(store: Store, base: Side, cand: Side) -> list[dict[str, Any]]:
    """Every key whose values differ between the sides, with each side's distinct values (a key a spec lacks is
    null). A side mixing experiments may list several values."""
    cache: dict[int, dict[str, str]] = {}
    a, b = _settings(store, base, cache), _settings(store, cand, cache)
    keys = sorted({k for facts in a + b for k in facts})
    out = []
    for key in keys:
        left = {facts.get(key, "null") for facts in a}
        right = {facts.get(key, "null") for facts in b}
        if left != right:
            out.append({"key": key, "baseline": _values(left), "candidate": _values(right)})
    return out


def _timing(spec: dict[str, Any]) -> str:
    throughput = spec.get("throughput") or {}
    iterations = throughput.get("iterations") or 0
    if not iterations:  # the probe warms up only before timed iterations (runtime/dsv4rt/offline.py)
        return "one cold generation per run"
    return f"the median of {iterations} generations after {throughput.get('warmup', 0)} warm-up per run"


def timing_warning(store: Store, base: Side, cand: Side) -> str | None:
    """A cold single generation and a warmed median measure different things: say so in words."""
    def timings(side: Side) -> set[str]:
        return {_timing(json.loads(store.spec_json(e))) for e in {r.experiment_id for r in side.runs}}

    left, right = timings(base), timings(cand)
    if left == right:
        return None
    return (f"the sides time different things: baseline {' / '.join(sorted(left))}, candidate "
            f"{' / '.join(sorted(right))} (throughput.iterations, throughput.warmup)")


def _greedy(store: Store, run: CompareRow) -> bool:
    return (json.loads(store.spec_json(run.experiment_id)).get("sampling") or {}).get("temperature", 0) == 0


def token_differences(store: Store, base: Side, cand: Side) -> list[dict[str, Any]]:
    """Greedy runs should agree token for token: the first differing position per request, if any (a null token
    where that side's output ended: one output is longer, see `token_comparison`)."""
    return token_comparison(store, base, cand)[0]


def token_comparison(store: Store, base: Side, cand: Side) -> tuple[list[dict[str, Any]], list[str]]:
    """The first differing position per request of the first passed greedy run of each side, and a sentence per
    request where one output is the other's beginning: a length difference is said as one (`the candidate is
    longer (64 vs 32 tokens); the first 32 tokens agree`), not as `token 32: None vs 167`."""
    def first_tokens(side: Side) -> list[list[int]] | None:
        for run in side.runs:
            if run.passed and _greedy(store, run):
                verdict = store.verdict(run.id) or {}
                return [r["token_ids"] for r in verdict.get("requests", [])]
        return None

    a, b = first_tokens(base), first_tokens(cand)
    if a is None or b is None:
        return [], []
    from ..judge.rules import first_divergence

    out, lengths = [], []
    for index, (left, right) in enumerate(zip(a, b)):
        found = first_divergence(left, right)
        if not found:
            continue
        out.append({"request": index, "position": found[0], "baseline": found[1], "candidate": found[2]})
        if found[1] is None or found[2] is None:
            longer = "candidate" if found[1] is None else "baseline"
            counts = (len(right), len(left)) if longer == "candidate" else (len(left), len(right))
            lengths.append(f"greedy outputs differ in length: request {index}: the {longer} is longer "
                           f"({counts[0]} vs {counts[1]} tokens); the first {found[0]} tokens agree")
    return out, lengths
