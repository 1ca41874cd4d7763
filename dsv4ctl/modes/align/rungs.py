"""One row per rung of the alignment ladder, lowest first: cache round trip, one-token attention, every decoder
layer, the final norm, the next token's top-k, the greedy continuation, perplexity. Each row says `ok` against the
spec's tolerances; the first row that is not ok names where the engine diverged. numpy inside the functions."""

from __future__ import annotations

import math
from typing import Any

from ...judge.tokens import close_by_logprobs, first_divergence


class CaptureError(ValueError):
    """A capture file that is missing, unreadable, or does not fit the other side."""


def _error(message: str) -> Exception:

    return CaptureError(message)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def lower_rungs(recorded: Any, tol: dict[str, Any]) -> list[dict[str, Any]]:
    """The cache round trip (bit-exact) and the one-token attention (cosine vs bf16), as the job measured them."""
    recorded = recorded if isinstance(recorded, dict) else {}
    cache = recorded.get("cache") if isinstance(recorded.get("cache"), dict) else {}
    attention = recorded.get("attention") if isinstance(recorded.get("attention"), dict) else {}
    cosine = _number(attention.get("cosine"))
    return [
        {"name": "cache round trip", "kind": "cache", "ok": cache.get("exact") is True,
         "reader": str(cache.get("reader", "not recorded"))[:64], "max_abs": _number(cache.get("max_abs"))},
        {"name": "attention", "kind": "attention", "ok": cosine is not None and cosine >= tol["attention_cosine"],
         "reader": str(attention.get("reader", "not recorded"))[:64], "cosine": cosine,
         "max_abs": _number(attention.get("max_abs")), "rel_l2": _number(attention.get("rel_l2"))},
    ]


def _pair(engine, reference, prompt: int, key: str, positions: list[int]):
    name = f"p{prompt}.{key}"
    a, b = engine.tensors.get(name), reference.tensors.get(name)
    if a is None or b is None:
        raise _error(f"tensor {name} is missing from {engine.where if a is None else reference.where}")
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] != len(positions) or a.shape[1] == 0:
        raise _error(f"tensor {name}: shapes {a.shape} and {b.shape} for {len(positions)} kept positions")
    return a, b


def _span(layers: list[int]) -> str:
    """`0..1` for a run of consecutive layers, else the first eight listed."""
    if layers and layers == list(range(layers[0], layers[0] + len(layers))):
        return f"{layers[0]}..{layers[-1]}"
    return str(layers[:8])


def difference(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    """Worst per-position cosine (None when a value is not finite), max abs and worst relative L2 over prompts."""
    import numpy as np

    worst, where, max_abs, rel_l2 = 1.0, None, 0.0, 0.0
    for prompt, (a, b) in enumerate(pairs):
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            return {"cosine": None, "max_abs": None, "rel_l2": None, "worst": [prompt, None]}
        na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        dot = (a * b).sum(axis=1)
        both = (na > 0) & (nb > 0)
        cos = np.where(both, dot / np.where(both, na * nb, 1.0), np.where((na == 0) & (nb == 0), 1.0, 0.0))
        row = int(np.argmin(cos))
        if cos[row] < worst or where is None:
            worst, where = min(worst, float(cos[row])), [prompt, row]
        max_abs = max(max_abs, float(np.abs(a - b).max()))
        denom = float(np.linalg.norm(b))
        rel_l2 = max(rel_l2, float(np.linalg.norm(a - b)) / denom if denom > 0 else (0.0 if not a.any() else 1.0))
    values = (worst, max_abs, rel_l2)
    if not all(math.isfinite(v) for v in values):
        return {"cosine": None, "max_abs": None, "rel_l2": None, "worst": where}
    return {"cosine": worst, "max_abs": max_abs, "rel_l2": rel_l2, "worst": where}


def layer_rungs(engine, reference, wanted: list[int] | None, tol: dict[str, Any]) -> list[dict[str, Any]]:
    e_layers, r_layers = engine.meta["layers"], reference.meta["layers"]
    layers = sorted(set(wanted if wanted is not None else e_layers + r_layers))  # a layer on one side only: refused
    missing = [layer for layer in layers if layer not in e_layers or layer not in r_layers]
    if not layers:
        raise _error("no layer to compare (align.layers is empty, or the captures hold none)")
    if missing:
        nowhere = [layer for layer in missing if layer not in e_layers and layer not in r_layers]
        if nowhere == missing:
            raise _error(f"layers {missing[:8]} are not layers of the captured model (both captures hold "
                         f"{_span(e_layers)})")
        raise _error(f"layers {missing[:8]} are not in both captures (engine {_span(e_layers)}, reference "
                     f"{_span(r_layers)})")
    keys = [(f"layer {layer}", "layer", f"layer.{layer}", layer) for layer in layers]
    has_norm = ("p0.norm" in engine.tensors, "p0.norm" in reference.tensors)
    if any(has_norm) and not all(has_norm):
        raise _error("the final norm is captured on one side only")
    if all(has_norm):
        keys.append(("final norm", "norm", "norm", None))
    prompts = engine.meta["prompts"]
    rows = []
    for name, kind, key, layer in keys:
        pairs = []
        for i, p in enumerate(prompts):
            if p["positions"] != reference.meta["prompts"][i]["positions"]:
                raise _error(f"prompt {i}: the two captures kept different positions")
            pairs.append(_pair(engine, reference, i, key, p["positions"]))
        found = difference(pairs)
        ok = found["cosine"] is not None and found["cosine"] >= tol["cosine"]
        rows.append({"name": name, "kind": kind, "layer": layer, "ok": ok, **found})
    return rows


def _overlap(a: list, b: list, k: int) -> tuple[bool, int]:
    top_a, top_b = [int(p[0]) for p in a[:k]], [int(p[0]) for p in b[:k]]
    if not top_a or not top_b:
        return False, 0
    return top_a[0] == top_b[0], len(set(top_a) & set(top_b))


def logits_rung(e_prompts: list, r_prompts: list, tol: dict[str, Any]) -> dict[str, Any]:
    """The next token after each prompt: top-1 equal and at least `topk_overlap` of the top-k shared."""
    worst_overlap, all_top1, worst = tol["topk"], True, None
    for i, (e, r) in enumerate(zip(e_prompts, r_prompts)):
        top1, overlap = _overlap(e["next_top"], r["next_top"], tol["topk"])
        if overlap < worst_overlap or (not top1 and all_top1):
            worst = i
        worst_overlap, all_top1 = min(worst_overlap, overlap), all_top1 and top1
    ok = (all_top1 or not tol["top1"]) and worst_overlap >= tol["topk_overlap"]
    return {"name": "next-token logits", "kind": "logits", "ok": ok, "top1_equal": all_top1,
            "min_overlap": worst_overlap, "worst": [worst, 0] if worst is not None else None}


def greedy_rung(e_prompts: list, r_prompts: list, tol: dict[str, Any]) -> dict[str, Any]:
    """Along each greedy continuation: top-k overlap at every position both sides share, and at the first
    position where the tokens differ vLLM's rule (each side's token in the other's top-k)."""
    divergences, worst_overlap, compared, ok = [], tol["topk"], 0, True
    for i, (e, r) in enumerate(zip(e_prompts, r_prompts)):
        found = first_divergence(r["greedy_ids"], e["greedy_ids"])
        end = found[0] if found else len(e["greedy_ids"])
        for position in range(1, min(end, len(e["greedy_top"]), len(r["greedy_top"]))):
            top1, overlap = _overlap(e["greedy_top"][position], r["greedy_top"][position], tol["topk"])
            worst_overlap = min(worst_overlap, overlap)
            ok = ok and (top1 or not tol["top1"]) and overlap >= tol["topk_overlap"]
            compared += 1
        if found:
            position, expected, got = found
            accepted = close_by_logprobs(position, expected, got, e["greedy_top"], r["greedy_top"])
            ok = ok and accepted
            divergences.append({"prompt": i, "position": position, "expected": expected, "got": got,
                                "accepted": accepted})
    return {"name": "greedy tokens", "kind": "greedy", "ok": ok, "positions": compared,
            "min_overlap": worst_overlap, "divergences": divergences[:64]}


def perplexity_rung(engine: dict, reference: dict, tol: dict[str, Any]) -> dict[str, Any]:
    e, r = _number(engine.get("ppl")), _number(reference.get("ppl"))
    ratio = max(e / r, r / e) if e and r and e > 0 and r > 0 else None
    ratio = ratio if ratio is not None and math.isfinite(ratio) else None
    return {"name": "perplexity", "kind": "perplexity", "ok": ratio is not None and ratio <= tol["perplexity_ratio"],
            "engine": e, "reference": r, "ratio": ratio}
