"""What the terminal, --json and the HTML report draw of profiles: data only, no printing."""

from __future__ import annotations

from typing import Any

from .breakdown import Breakdown
from .diff import ProfileDiff, run_values
from .targets import Profiled


def profile_json(p: Profiled) -> dict[str, Any]:
    """One run's (or trace set's) profile: figures averaged over ranks at the top, each rank below, the spread."""
    values = run_values(p.ranks)
    total = values.get(("total", "(total)"), 0.0) or 1.0
    first = p.ranks[0]
    kernel = [b.kernel_us for b in p.ranks]
    return {
        "target": p.label, "run_id": p.run_id, "window": p.window, "verdict": p.verdict, "notes": p.notes,
        "device": first.device, "rules_hash": first.rules_hash, "ranks": len(p.ranks),
        "kernel_us": round(values.get(("total", "(total)"), 0.0), 3),
        "gpu_busy_us": round(sum(b.busy_us for b in p.ranks) / len(p.ranks), 3),
        "gpu_idle_us": round(sum(b.idle_us for b in p.ranks) / len(p.ranks), 3),
        "categories": [{"name": n, "kernel_us": round(us, 3), "share": round(us / total, 6)}
                       for (k, n), us in values.items() if k == "category"],
        "modules": sorted(({"name": n, "kernel_us": round(us, 3), "share": round(us / total, 6)}
                           for (k, n), us in values.items() if k == "module"), key=lambda m: -m["kernel_us"]),
        "steps": first.steps, "launches_per_step": first.to_json()["launches_per_step"],
        "top_kernels": first.top_kernels, "collectives": collective_totals(p.ranks),
        "rank_spread": {"kernel_us_min": round(min(kernel), 3), "kernel_us_max": round(max(kernel), 3),
                        "max_over_min": round(max(kernel) / min(kernel), 6) if min(kernel) else None},
        "per_rank": [b.to_json() for b in p.ranks],
    }


def collective_totals(ranks: list[Breakdown]) -> list[dict[str, Any]]:
    """Communication kernels by collective (all_reduce, all_gather, ...), the mean over ranks, largest first."""
    totals: dict[str, list[float]] = {}
    for b in ranks:
        for name, (count, us) in b.collectives.items():
            entry = totals.setdefault(name, [0, 0.0])
            entry[0] += count
            entry[1] += us
    n = len(ranks) or 1
    return [{"name": name, "count": round(count / n, 3), "kernel_us": round(us / n, 3)}
            for name, (count, us) in sorted(totals.items(), key=lambda kv: -kv[1][1])]


def collective_rows(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["name"], f"{c['count']:g}", f"{c['kernel_us']:,.1f}") for c in data.get("collectives") or []]


def category_rows(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["name"], f"{c['kernel_us']:,.1f}", f"{c['share']:.1%}") for c in data["categories"] if c["kernel_us"]]


def module_rows(data: dict[str, Any], limit: int = 15) -> list[tuple[str, str, str]]:
    return [(m["name"], f"{m['kernel_us']:,.1f}", f"{m['share']:.1%}") for m in data["modules"][:limit]]


def kernel_rows(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(k["name"], str(k["count"]), f"{k['kernel_us']:,.1f}") for k in data["top_kernels"]]


def headline(data: dict[str, Any]) -> str:
    what = "kernel" if data["device"] == "gpu" else "CPU-op self"
    steps = f", {data['steps']} steps, {data['launches_per_step']} launches a step" if data["steps"] else ""
    spread = (f", ranks {data['rank_spread']['kernel_us_min']:,.0f}-{data['rank_spread']['kernel_us_max']:,.0f} us"
              if data["ranks"] > 1 else "")
    return (f"{data['target']} ({data['window']}): {what} time {data['kernel_us']:,.1f} us, busy "
            f"{data['gpu_busy_us']:,.1f} us, idle {data['gpu_idle_us']:,.1f} us{steps}{spread}")


def diff_rows(d: ProfileDiff) -> list[tuple[str, ...]]:
    def us(v: float) -> str:
        return f"{v:,.1f}"

    return [(r.kind, r.name, us(r.base_us), us(r.cand_us), f"{r.delta_us:+,.1f}",
             "" if r.relative is None else f"{r.relative:+.1%}", "" if r.p is None else f"{r.p:.3g}",
             "CHANGED" if r.changed else r.why) for r in d.rows]


def stacked_bars(profiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The HTML report's stacked bars: one bar per profile, one segment per category (share of kernel time)."""
    return [{"label": p["target"], "kernel_us": p["kernel_us"], "failed": bool(p["verdict"] and
                                                                             not p["verdict"]["passed"]),
             "segments": [{"name": c["name"], "share": c["share"], "kernel_us": c["kernel_us"]}
                          for c in p["categories"] if c["share"] > 0]} for p in profiles]


def breakdown_json(b: Breakdown) -> dict[str, Any]:
    return b.to_json()
