"""The serving section of a campaign report (issue 14): the latency-throughput curve of a sweep over request_rate or
max_concurrency, and per side the highest load that meets the SLOs.

A point is one experiment of the campaign (one value of the swept load setting). Its figures are medians over the
runs that passed: x the achieved request (or output) throughput, y the p95/p99 TTFT and E2EL. A side (one line) is
the experiment with the swept setting taken out of its name, so an A/B sweep draws one line per configuration.
A point *meets the SLOs* when every one of its runs passed and every measured request met them: request_goodput
equals request_throughput (vllm bench serve's goodput counts the requests within all SLOs) and none failed. Without
SLOs in the spec, passing is all a point can meet, and the section says so.
"""

from __future__ import annotations

import html
import json
import math
import re
from typing import Any

from ...analysis import stats

AXES = ("load.request_rate", "load.max_concurrency")
Y_METRICS = ("p95_ttft_ms", "p99_ttft_ms", "p95_e2el_ms", "p99_e2el_ms")
X_METRICS = ("request_throughput", "output_throughput")
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _axis(point: dict[str, Any]) -> tuple[str, Any] | None:
    return next(((k, point[k]) for k in AXES if k in point), None)


def _side_name(experiment: str, axis: str) -> str:
    """The experiment's name without the swept setting's part (`serve.request_rate=4` -> `serve`)."""
    short = re.escape(axis.rsplit(".", 1)[-1])
    return re.sub(rf"\.{short}=[^.]*", "", experiment) or experiment


def _meets(metrics: dict[str, float]) -> bool:
    goodput, rate = metrics.get("request_goodput"), metrics.get("request_throughput")
    if goodput is None:
        return True  # no SLOs: passing is the bar
    return metrics.get("failed", 0) == 0 and rate is not None and math.isclose(goodput, rate, rel_tol=1e-9)


def campaign_serving(store: Any, rows: list) -> dict[str, Any] | None:
    """The curve's data, or None when the campaign swept no load setting of serve runs."""
    groups: dict[str, list] = {}
    axis_name = None
    for row in rows:
        found = _axis(json.loads(row.data.get("point_json") or "{}"))
        if found is None:
            continue
        axis_name = axis_name or found[0]
        groups.setdefault(row.experiment, []).append((row, found[1]))
    if not groups:
        return None
    verdicts = store.verdict_summaries([row.id for group in groups.values() for row, _ in group])
    sides: dict[str, list[dict[str, Any]]] = {}
    slo_set = False
    for experiment, group in groups.items():
        runs = [(row, store.metrics(row.id)) for row, _ in group]
        passed = [m for row, m in runs if (verdicts.get(row.id) or {}).get("passed")]
        slo_set = slo_set or any("request_goodput" in m for m in passed)
        point = {"experiment": experiment, "load": group[0][1], "runs": len(runs), "passed": len(passed),
                 "meets_slo": bool(passed) and len(passed) == len(runs) and all(map(_meets, passed))}
        for name in (*X_METRICS, *Y_METRICS):
            values = [m[name] for m in passed if name in m]
            point[name] = stats.median(values) if values else None
        sides.setdefault(_side_name(experiment, axis_name), []).append(point)
    lines = []
    for side, points in sides.items():
        points.sort(key=lambda p: (math.inf if p["load"] == "inf" else float(p["load"])))
        meeting = [p for p in points if p["meets_slo"]]
        lines.append({"side": side, "points": points,
                      "best_load": meeting[-1]["load"] if meeting else None,
                      "best_experiment": meeting[-1]["experiment"] if meeting else None})
    return {"axis": axis_name, "slo_set": slo_set, "sides": lines}


def best_load_text(serving: dict[str, Any]) -> list[str]:
    """One sentence per side: the highest swept load that meets the SLOs."""
    axis = serving["axis"].rsplit(".", 1)[-1]
    bar = "meets the SLOs" if serving["slo_set"] else "passes (no SLOs in the spec)"
    out = []
    for line in serving["sides"]:
        if line["best_load"] is None:
            out.append(f"{line['side']}: no {axis} swept {bar} in every run")
        else:
            out.append(f"{line['side']}: the highest {axis} that {bar} in every run is {line['best_load']} "
                       f"({line['best_experiment']})")
    return out


def svg_curve(serving: dict[str, Any], y_metric: str = "p95_ttft_ms", x_metric: str = "request_throughput",
              width: int = 640, height: int = 260) -> str:
    """Latency against achieved throughput, one polyline per side; hollow markers for points that miss the SLOs."""
    points = [p for line in serving["sides"] for p in line["points"]
              if p.get(x_metric) is not None and p.get(y_metric) is not None]
    if not points:
        return ""
    left, right, top, bottom = 70, 20, 15, 45
    x_max = max(p[x_metric] for p in points) * 1.05 or 1.0
    y_max = max(p[y_metric] for p in points) * 1.1 or 1.0

    def x(v: float) -> float:
        return left + (width - left - right) * v / x_max

    def y(v: float) -> float:
        return height - bottom - (height - top - bottom) * v / y_max

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{y_metric} against {x_metric}">',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>',
             f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" font-size="12" text-anchor="middle">'
             f'{x_metric}</text>',
             f'<text x="12" y="{(top + height - bottom) / 2:.0f}" font-size="12" text-anchor="middle" '
             f'transform="rotate(-90 12 {(top + height - bottom) / 2:.0f})">{y_metric}</text>']
    for tick in range(5):
        xv, yv = x_max * tick / 4, y_max * tick / 4
        parts.append(f'<text x="{x(xv):.1f}" y="{height - bottom + 14}" font-size="10" text-anchor="middle">'
                     f'{xv:.3g}</text><text x="{left - 6}" y="{y(yv) + 4:.1f}" font-size="10" text-anchor="end">'
                     f'{yv:.3g}</text>')
    for i, line in enumerate(serving["sides"]):
        colour = COLOURS[i % len(COLOURS)]
        drawn = [p for p in line["points"] if p.get(x_metric) is not None and p.get(y_metric) is not None]
        path = " ".join(f"{x(p[x_metric]):.1f},{y(p[y_metric]):.1f}" for p in drawn)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in drawn:
            fill = colour if p["meets_slo"] else "white"
            parts.append(f'<circle cx="{x(p[x_metric]):.1f}" cy="{y(p[y_metric]):.1f}" r="4" fill="{fill}" '
                         f'stroke="{colour}"><title>{html.escape(str(p["experiment"]))}: load {p["load"]}, '
                         f'{p[y_metric]:.3g} ms</title></circle>')
        parts.append(f'<text x="{width - right - 4}" y="{top + 14 * (i + 1)}" font-size="11" text-anchor="end" '
                     f'fill="{colour}">{html.escape(line["side"])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def markdown_serving(serving: dict[str, Any] | None) -> list[str]:
    if not serving:
        return []
    lines = ["", f"## Serving: latency against throughput ({serving['axis']})", ""]
    lines += [f"- {text}" for text in best_load_text(serving)]
    lines += ["", "| side | load | runs passed | req/s | out tok/s | p95 TTFT ms | p99 TTFT ms | p95 E2EL ms | "
                  "meets SLOs |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for line in serving["sides"]:
        for p in line["points"]:
            cells = [line["side"], p["load"], f"{p['passed']}/{p['runs']}",
                     *("-" if p[k] is None else f"{p[k]:.3g}" for k in ("request_throughput", "output_throughput",
                                                                        "p95_ttft_ms", "p99_ttft_ms",
                                                                        "p95_e2el_ms")),
                     "yes" if p["meets_slo"] else "no"]
            lines.append("| " + " | ".join(html.escape(str(c), quote=False).replace("|", "\\|") for c in cells)
                         + " |")
    return lines
