"""The alignment section of a campaign report (issue 15): per align run, its verdict and a cosine-by-layer plot.

The plot draws 1 - cosine on a log scale (cosines of an aligned float32 run sit at 0.9999999, where a linear axis
shows nothing), one point per layer and the final norm, with the tolerance as a dashed line: a point above it is
out of tolerance, and the first such point is the layer the verdict names.
"""

from __future__ import annotations

import html
import math
from typing import Any

FLOOR = 1e-12  # 1 - cosine below this is drawn at the floor (float32 round-off)


def campaign_alignments(store: Any, rows: list) -> list[dict[str, Any]]:
    """Each align run of the campaign that has a stored alignment: run, label, experiment, verdict, rungs."""
    from .result import describe, stored_alignment

    found = []
    for row in rows:
        result = stored_alignment(store, row.id)
        if result is None:
            continue
        found.append({"run": row.id, "label": row.data.get("label"), "experiment": row.experiment,
                      "aligned": bool(result.get("aligned")), "verdict": describe(result),
                      "reference": result.get("reference"), "cosine_tolerance": (result.get("tolerances") or {})
                      .get("cosine"), "rungs": result.get("rungs") or []})
    return found


def _gap(cosine: float | None) -> float:
    """1 - cosine for the log axis; a missing (non-finite) cosine is drawn at the top, as far off as it gets."""
    if cosine is None:
        return 1.0
    return min(1.0, max(FLOOR, 1.0 - cosine))


def svg_cosines(alignment: dict[str, Any], width: int = 640, height: int = 220) -> str:
    """One run's layers as an inline SVG: x the layer (then the final norm), y 1 - cosine on a log scale."""
    points = [r for r in alignment["rungs"] if r.get("kind") in ("layer", "norm")]
    if not points:
        return ""
    left, right, top, bottom = 70, 20, 15, 40
    span_x = max(1, len(points) - 1)

    def x(i: int) -> float:
        return left + (width - left - right) * (i / span_x if len(points) > 1 else 0.5)

    def y(gap: float) -> float:
        decades = -math.log10(gap)  # 0 (cosine 0) at the top, 12 at the bottom
        return top + (height - top - bottom) * decades / -math.log10(FLOOR)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="1 - cosine by layer">']
    for decade in range(0, 13, 3):
        yy = y(10.0 ** -decade)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">1e-{decade}</text>')
    tol = alignment.get("cosine_tolerance")
    if isinstance(tol, (int, float)) and tol < 1:
        yy = y(_gap(tol))
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#c00" '
                     f'stroke-dasharray="4 3"/><text x="{width - right}" y="{yy - 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#c00">tolerance {tol:g}</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{x(i):.1f},{y(_gap(p.get('cosine'))):.1f}" for i, p in enumerate(points))
    parts.append(f'<path d="{path}" fill="none" stroke="#888"/>')
    for i, p in enumerate(points):
        colour = "#2a2" if p.get("ok") else "#c00"
        label = html.escape(str(p["name"]))
        cosine = "non-finite" if p.get("cosine") is None else f"{p['cosine']:.9f}"
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(_gap(p.get("cosine"))):.1f}" r="4" fill="{colour}">'
                     f'<title>{label}: cosine {cosine}</title></circle>'
                     f'<text x="{x(i):.1f}" y="{height - bottom + 16}" font-size="11" text-anchor="middle">'
                     f'{label.replace("layer ", "")}</text>')
    parts.append(f'<text x="{left}" y="{height - 6}" font-size="11">layer (then the final norm); '
                 f'y: 1 − cosine, log scale</text></svg>')
    return "".join(parts)


def markdown_alignments(data: Any) -> list[str]:
    from ...report.markdown import md

    lines: list[str] = []
    for a in getattr(data, "alignments", []):
        lines += ["", f"## Alignment of run {a['run']} ({md(a['label'])}, {md(a['experiment'])}) against "
                      f"{md(a['reference'])}", "", f"**{md(a['verdict'])}**", "",
                  "| rung | ok | cosine | max abs | rel L2 |", "|---|---|---:|---:|---:|"]
        for r in a["rungs"]:
            cells = [r["name"], "ok" if r["ok"] else "BELOW"] + [
                "-" if r.get(k) is None else f"{r[k]:.9g}" for k in ("cosine", "max_abs", "rel_l2")]
            lines.append("| " + " | ".join(md(c) for c in cells) + " |")
    return lines
