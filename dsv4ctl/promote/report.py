"""`dsv4ctl promotion-report ID`: a stored promotion as data (each gate's outcome, reason, figures and runs with
their verdicts; the decision and the stable diff), drawn as a self-contained HTML page or Markdown."""

from __future__ import annotations

from html import escape
from typing import Any

from . import store as promo_store
from ..store import Store


def promotion_data(store: Store, promotion_id: int) -> dict[str, Any]:
    row = promo_store.load(store, promotion_id)
    gates = []
    for gate in row["gates"]:
        runs = store.runs_by_ids(gate["runs"]) if gate["runs"] else []
        verdicts = store.verdict_summaries([r.id for r in runs])
        gates.append({**gate, "run_rows": [
            {"run": r.id, "experiment": r.experiment, "side": r.side, "state": r.state, "job_id": r.job_id,
             "verdict": verdicts[r.id]["status"] if r.id in verdicts else None,
             "passed": bool(verdicts[r.id]["passed"]) if r.id in verdicts else None} for r in runs]})
    return {"promotion": promotion_id, "kind": row["kind"], "changes": row["changes"], "state": row["state"],
            "decision": row["decision"], "reason": row["reason"], "stable_path": row["stable_path"],
            "stable_sha": row["stable_sha"], "baseline": row["baseline"], "diff": row["diff"] or [],
            "commit": row["commit_sha"], "command": row["command"], "created_at": row["created_at"],
            "updated_at": row["updated_at"], "gates": gates}


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "(unset)" if v is None else str(v)


def _md(v: Any) -> str:
    from ..report.markdown import md

    return md(_value(v))


def render_markdown(data: dict[str, Any]) -> str:
    lines = [f"# Promotion {data['promotion']}: {_md(data['decision'] or data['state'])}", "",
             f"{_md(data['kind'])} in {_md(data['stable_path'])} (sha {_md(data['stable_sha'])}): "
             f"{_md(data['reason'] or '')}", "", "## Stable diff", "", "| switch | stable | candidate |",
             "|---|---|---|"]
    lines += [f"| {_md(d['name'])} | {_md(d['before'])} | {_md(d['after'])} |" for d in data["diff"]]
    for gate in data["gates"]:
        lines += ["", f"## Gate {_md(gate['gate'])}: {_md(gate['outcome'])}", "", _md(gate["reason"]), ""]
        figures = {k: v for k, v in gate["figures"].items() if k != "summary" and v not in ("", None)}
        lines += [f"- {_md(k)}: {_md(v)}" for k, v in figures.items()]
        if gate["run_rows"]:
            lines += ["", "| run | experiment | side | state | verdict |", "|---|---|---|---|---|"]
            lines += [f"| {r['run']} | {_md(r['experiment'])} | {_md(r['side'] or '-')} | {_md(r['state'])} | "
                      f"{_md(r['verdict'] or 'not judged')} |" for r in gate["run_rows"]]
    return "\n".join(lines) + "\n"


def render_html(data: dict[str, Any]) -> str:
    e = lambda v: escape(_value(v))  # noqa: E731
    parts = [f"<h1>Promotion {data['promotion']}: {e(data['decision'] or data['state'])}</h1>",
             f"<p>{e(data['kind'])} in <code>{e(data['stable_path'])}</code> (sha {e(data['stable_sha'])})</p>",
             f"<p class=reason>{e(data['reason'] or '')}</p>", "<h2>Stable diff</h2>",
             "<table><tr><th>switch</th><th>stable</th><th>candidate</th></tr>"
             + "".join(f"<tr><td>{e(d['name'])}</td><td>{e(d['before'])}</td><td>{e(d['after'])}</td></tr>"
                       for d in data["diff"]) + "</table>"]
    for gate in data["gates"]:
        figures = "".join(f"<li>{e(k)}: {e(v)}</li>" for k, v in gate["figures"].items()
                          if k != "summary" and v not in ("", None))
        runs = "".join(f"<tr><td>{r['run']}</td><td>{e(r['experiment'])}</td><td>{e(r['side'] or '-')}</td>"
                       f"<td>{e(r['state'])}</td><td>{e(r['verdict'] or 'not judged')}</td></tr>"
                       for r in gate["run_rows"])
        parts += [f"<h2>Gate {e(gate['gate'])}: <span class='{e(gate['outcome']).replace(' ', '-')}'>"
                  f"{e(gate['outcome'])}</span></h2>", f"<p>{e(gate['reason'])}</p>", f"<ul>{figures}</ul>",
                  ("<table><tr><th>run</th><th>experiment</th><th>side</th><th>state</th><th>verdict</th></tr>"
                   + runs + "</table>") if runs else ""]
    style = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 8px}.passed{color:#060}.failed{color:#a00}"
             ".could-not-decide{color:#a60}")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>Promotion {data['promotion']}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")
