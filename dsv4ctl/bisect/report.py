"""A bisection people can look at (`dsv4ctl bisect-report ID`): `bisection_data` gathers each step with its probes,
their runs and rates, and the result with its evidence; `render_bisection` draws a self-contained HTML page (inline
CSS and SVG, no scripts, every value escaped)."""

from __future__ import annotations

import json
from typing import Any

from ..store import Store


def _probes(store: Store, bisection_id: int) -> dict[str, dict[str, Any]]:
    cursor = store.db.execute("SELECT * FROM bisect_probes WHERE bisection_id = ? ORDER BY id", [bisection_id])
    names = [d[0] for d in cursor.description]
    probes = {}
    for row in cursor.fetchall():
        probe = dict(zip(names, row))
        probe["subset"] = json.loads(probe.pop("subset_json")) if probe.get("subset_json") else None
        runs = store.runs(experiment=probe["spec_name"]) if probe["spec_name"] else []
        verdicts = store.verdict_summaries([r.id for r in runs])
        probe["run_list"] = [{"id": r.id, "label": r.label, "job_id": r.job_id, "state": r.state,
                              "status": verdicts.get(r.id, {}).get("status")} for r in runs]
        probes[probe["key"]] = probe
    return probes


def bisection_data(store: Store, bisection_id: int) -> dict[str, Any]:
    """The bisection, its steps in order (each with its probes), and its result (None until it has one)."""
    from .run import load

    row = load(store, bisection_id)
    changes = row["changes"] or []
    probes = _probes(store, bisection_id)
    steps = []
    for step, what, keys in store.db.execute("SELECT step, what, probes_json FROM bisect_steps WHERE "
                                             "bisection_id = ? ORDER BY step", [bisection_id]):
        shown = []
        for key in json.loads(keys):
            probe = probes.get(key)
            if probe is None:
                continue
            if probe["subset"] is not None:
                probe["changes"] = [changes[i]["name"] for i in probe["subset"]]
            shown.append(probe)
        steps.append({"step": step, "what": what, "probes": shown})
    return {"id": row["id"], "kind": row["kind"], "command": row["command"], "backend": row["backend"],
            "state": row["state"], "created_at": row["created_at"], "changes": changes,
            "settings": row["settings"], "steps": steps, "result": row["result"]}


def svg_interval(lo: float | None, hi: float | None, rate: float | None, width: int = 160) -> str:
    """One failure rate as a dot on its Wilson 95% interval, 0-100%."""
    if lo is None or hi is None:
        return ""
    x = lambda v: 4 + v * (width - 8)  # noqa: E731 - a scale, read inline
    dot = "" if rate is None else f'<circle cx="{x(rate):.1f}" cy="8" r="3.5" fill="#c0392b"/>'
    return (f'<svg width="{width}" height="16" role="img" aria-label="failure rate interval">'
            f'<line x1="4" y1="8" x2="{width - 4}" y2="8" stroke="#e5e5e5"/>'
            f'<line x1="{x(lo):.1f}" y1="8" x2="{x(hi):.1f}" y2="8" stroke="#555" stroke-width="2"/>{dot}</svg>')


def render_bisection(data: dict[str, Any]) -> str:
    from markupsafe import Markup

    from ..spec.render import _environment

    return _environment().get_template("report_bisect.html.j2").render(
        data=data, interval=lambda p: Markup(svg_interval(p.get("lo"), p.get("hi"), p.get("rate"))))
