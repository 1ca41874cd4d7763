"""A profile's rows in the store (migration m011_profiles): one `profiles` row per run, rank, window and
rules hash, and its category, module, top-kernel and collective figures in `profile_rows`. Old profiles stay:
a breakdown under other rules is another row, never compared as an equal (diff refuses mixed hashes)."""

from __future__ import annotations

import json
from typing import Any

from ..store.values import now
from .breakdown import Breakdown

KINDS = ("category", "module", "kernel", "collective")


def save_profile(store, run_id: int, window: str, b: Breakdown) -> None:
    """Store (or replace) one rank's breakdown of a run, all in one transaction."""
    key = {"run_id": run_id, "rank": b.rank, "window": window, "rules_hash": b.rules_hash}
    row = {**key, "trace_path": b.path, "device": b.device, "kernel_us": b.kernel_us, "busy_us": b.busy_us,
           "idle_us": b.idle_us, "span_us": b.span_us, "steps": b.steps, "launches": b.launches,
           "unattributed_us": b.unattributed_us, "events": b.events, "meta_json": json.dumps(b.meta),
           "created_at": now()}
    rows = [{**key, "kind": "category", "name": n, "kernel_us": us, "count": None} for n, us in b.categories.items()]
    rows += [{**key, "kind": "module", "name": n, "kernel_us": us, "count": None} for n, us in b.modules.items()]
    rows += [{**key, "kind": "kernel", "name": k["name"], "kernel_us": k["kernel_us"], "count": k["count"]}
             for k in b.top_kernels]
    rows += [{**key, "kind": "collective", "name": n, "kernel_us": us, "count": int(c)}
             for n, (c, us) in b.collectives.items()]
    with store.transaction():
        where = "run_id = ? AND rank = ? AND window = ? AND rules_hash = ?"
        params = [run_id, b.rank, window, b.rules_hash]
        store.db.execute(f"DELETE FROM profile_rows WHERE {where}", params)
        store.db.execute(f"DELETE FROM profiles WHERE {where}", params)
        store.db["profiles"].insert(row)
        store.db["profile_rows"].insert_all(rows)


def load_profiles(store, run_id: int, rules_hash: str | None = None) -> list[Breakdown]:
    """A run's stored breakdowns, one per rank and window (under `rules_hash` when given), oldest rank first."""
    if "profiles" not in store.db.table_names():
        return []
    sql = "SELECT * FROM profiles WHERE run_id = ?" + (" AND rules_hash = ?" if rules_hash else "")
    heads = [dict(zip([c[0] for c in cur.description], r)) for cur in [store.db.execute(
        sql + " ORDER BY window, rank", [run_id, *([rules_hash] if rules_hash else [])])] for r in cur.fetchall()]
    found = []
    for h in heads:
        rows = store.db.execute("SELECT kind, name, kernel_us, count FROM profile_rows WHERE run_id = ? AND "
                                "rank = ? AND window = ? AND rules_hash = ? ORDER BY rowid",
                                [run_id, h["rank"], h["window"], h["rules_hash"]]).fetchall()
        b = Breakdown(path=h["trace_path"], rank=h["rank"], device=h["device"], kernel_us=h["kernel_us"],
                      busy_us=h["busy_us"], span_us=h["span_us"], steps=h["steps"], launches=h["launches"],
                      rules_hash=h["rules_hash"], unattributed_us=h["unattributed_us"] or 0.0,
                      events=h["events"] or 0, meta={**json.loads(h["meta_json"] or "{}"), "window": h["window"]},
                      categories={n: us for k, n, us, _ in rows if k == "category"},
                      modules={n: us for k, n, us, _ in rows if k == "module"},
                      top_kernels=[{"name": n, "count": c, "kernel_us": us} for k, n, us, c in rows if k == "kernel"],
                      collectives={n: [c or 0, us] for k, n, us, c in rows if k == "collective"})
        found.append(b)
    return found


def verdict_of(store, run_id: int) -> dict[str, Any] | None:
    """The run's verdict summary (status, passed), so a profile of a failed run says so."""
    v = store.verdict(run_id)
    return None if v is None else {"status": v.get("status"), "passed": bool(v.get("passed"))}
