"""A promotion's tables (migration m012_promotions): `promotions` (the change, the stable file it started from, the
decision), `promotion_gates` (each gate's outcome, reason, figures, runs) and `promotion_campaigns` (what each gate
submitted). Reads and writes rows; decides nothing."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..errors import UsageError
from ..store import Store, now
from ..store.records import load_record

RUNNING, DONE = "running", "done"


class PromotionNotFound(UsageError):
    """No stored promotion has the given id (exit 2, as every unknown name)."""


def inputs_key(kind: str, changes: dict[str, Any], stable_sha: str, backend: str) -> str:
    """The same command on the same stable file finds its promotion again."""
    text = json.dumps({"kind": kind, "changes": changes, "stable": stable_sha, "backend": backend}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def find_or_create(store: Store, key: str, fields: dict[str, Any]) -> tuple[int, bool]:
    """(promotion id, resumed): the newest promotion with these inputs, else a new one."""
    with store.transaction():
        row = store.db.execute("SELECT id FROM promotions WHERE inputs_key = ? ORDER BY id DESC LIMIT 1",
                               [key]).fetchone()
        if row:
            return row[0], True
        new = store.db["promotions"].insert({**fields, "inputs_key": key, "state": RUNNING, "created_at": now(),
                                             "updated_at": now()}).last_pk
    return new, False


def load(store: Store, promotion_id: int) -> dict[str, Any]:
    data = load_record(store, "promotions", promotion_id, ("changes_json", "baseline_json", "settings_json",
                                                           "diff_json"), PromotionNotFound)
    data["gates"] = gates(store, promotion_id)
    return data


def gates(store: Store, promotion_id: int) -> list[dict[str, Any]]:
    rows = store.db.execute("SELECT gate, outcome, reason, figures_json, runs_json, updated_at FROM promotion_gates "
                            "WHERE promotion_id = ? ORDER BY position", [promotion_id]).fetchall()
    return [{"gate": g, "outcome": o, "reason": r, "figures": json.loads(f or "{}"), "runs": json.loads(u or "[]"),
             "updated_at": t, "campaigns": campaigns(store, promotion_id, g)} for g, o, r, f, u, t in rows]


def gate_result(store: Store, promotion_id: int, gate: str) -> dict[str, Any] | None:
    return next((g for g in gates(store, promotion_id) if g["gate"] == gate and g["outcome"]), None)


def record_gate(store: Store, promotion_id: int, position: int, result: dict[str, Any]) -> None:
    with store.transaction():
        store.db["promotion_gates"].upsert({"promotion_id": promotion_id, "gate": result["gate"], "position": position,
                                            "outcome": result["outcome"], "reason": result["reason"],
                                            "figures_json": json.dumps(result["figures"]),
                                            "runs_json": json.dumps(result["runs"]), "updated_at": now()},
                                           pk=("promotion_id", "gate"))


def add_campaign(store: Store, promotion_id: int, gate: str, campaign: str) -> None:
    with store.transaction():
        store.db["promotion_campaigns"].upsert({"promotion_id": promotion_id, "gate": gate, "campaign": campaign},
                                               pk="campaign")


def campaigns(store: Store, promotion_id: int, gate: str) -> list[str]:
    return [r[0] for r in store.db.execute("SELECT campaign FROM promotion_campaigns WHERE promotion_id = ? AND "
                                           "gate = ? ORDER BY rowid", [promotion_id, gate])]


def campaign_state(store: Store, name: str) -> str | None:
    """None: never recorded; 'planned': recorded, not all submitted; 'submitted'."""
    row = store.db.execute("SELECT submitted_at FROM campaigns WHERE name = ?", [name]).fetchone()
    if row is None:
        return None
    return "submitted" if row[0] else "planned"


def finish(store: Store, promotion_id: int, decision: str, reason: str, diff: list[dict[str, Any]] | None,
           commit_sha: str | None = None) -> None:
    with store.transaction():
        store.db["promotions"].update(promotion_id, {"state": DONE, "decision": decision, "reason": reason,
                                                     "diff_json": json.dumps(diff) if diff is not None else None,
                                                     "commit_sha": commit_sha, "updated_at": now()})


def reopen(store: Store, promotion_id: int) -> None:
    """A promotion that could not decide, run again: running until it decides anew."""
    with store.transaction():
        store.db["promotions"].update(promotion_id, {"state": RUNNING, "updated_at": now()})


def history(store: Store, stable_path: str | None = None) -> list[dict[str, Any]]:
    """Every promotion, newest first (of one stable file when given): accepted, refused or undecided."""
    where, params = ("WHERE stable_path = ?", [stable_path]) if stable_path else ("", [])
    ids = [r[0] for r in store.db.execute(f"SELECT id FROM promotions {where} ORDER BY id DESC", params)]
    return [load(store, i) for i in ids]
