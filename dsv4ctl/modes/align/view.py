"""Draw an alignment for people (`dsv4ctl show RUN`): the verdict line and one table row per rung."""

from __future__ import annotations

from typing import Any

from ...report import output


def _num(value: Any, digits: int = 6) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def rung_detail(rung: dict[str, Any]) -> str:
    """What a rung measured besides cosine / max abs / relative L2."""
    kind = rung.get("kind")
    if kind in ("cache", "attention"):
        return f"reader {rung.get('reader')}"
    if kind == "logits":
        return f"top-1 equal {rung.get('top1_equal')}, min overlap {rung.get('min_overlap')}"
    if kind == "greedy":
        divergences = rung.get("divergences") or []
        first = (f"; first difference prompt {divergences[0]['prompt']} token {divergences[0]['position']} "
                 f"({'accepted' if divergences[0]['accepted'] else 'refused'} by the logprob rule)"
                 if divergences else "")
        return f"{rung.get('positions')} positions, min overlap {rung.get('min_overlap')}{first}"
    if kind == "perplexity":
        return (f"engine {_num(rung.get('engine'))}, reference {_num(rung.get('reference'))}, "
                f"ratio {_num(rung.get('ratio'))}")
    worst = rung.get("worst")
    return f"worst: prompt {worst[0]}, kept position {worst[1]}" if worst else ""


def show_alignment(result: dict[str, Any]) -> None:
    from .result import describe

    style = "bold green" if result.get("aligned") else "bold red"
    output.text("")
    output.markup(f"alignment against {output.escape(str(result.get('reference')))}: "
                  f"[{style}]{output.escape(describe(result))}[/]")
    rungs = result.get("rungs") or []
    if rungs:
        output.table("rungs, lowest first", ["rung", "ok", "cosine", "max abs", "rel L2", "detail"],
                     [(r["name"], "ok" if r["ok"] else "BELOW", _num(r.get("cosine"), 7), _num(r.get("max_abs"), 3),
                       _num(r.get("rel_l2"), 3), rung_detail(r)) for r in rungs])
