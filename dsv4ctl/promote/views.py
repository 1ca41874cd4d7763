"""What `dsv4ctl stable`, `stable history` and `stable diff SPEC` show, as plain data (the command draws it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .stable import StableSet, effective


def stable_view(stable: StableSet) -> dict[str, Any]:
    """Each switch with its value and the promotion that set it (or `hand-written`: no promotion recorded)."""
    rows = []
    for name, value in stable.switches.items():
        entry = stable.provenance.get(name, {})
        rows.append({"name": name, "value": value, "promotion": entry.get("promotion"),
                     "date": entry.get("date"), "commit": entry.get("commit"), "runs": entry.get("runs", []),
                     "figures": entry.get("figures", {}), "note": entry.get("note"),
                     "set_by": f"promotion {entry['promotion']}" if entry.get("promotion") else
                     ("hand-written" + (f": {entry['note']}" if entry.get("note") else ""))})
    return {"path": str(stable.path), "sha": stable.sha, "switches": rows,
            "gates": {name: gate.to_json() for name, gate in stable.gates.items()}}


def history_data(store, stable: StableSet, switch: str | None = None) -> dict[str, Any]:
    """Every promotion of this stable file, newest first, accepted or not, with each gate's evidence; and the
    file's own provenance entries that no stored promotion explains (written by hand, or from another database)."""
    from . import store as promo_store

    rows = promo_store.history(store, str(stable.path.resolve())) if store is not None else []
    if switch:
        rows = [r for r in rows if switch in (r["changes"] or {})]
    stored = {r["id"] for r in rows}
    entries = [{"promotion": r["id"], "kind": r["kind"], "changes": r["changes"], "decision": r["decision"],
                "state": r["state"], "reason": r["reason"], "when": r["updated_at"], "commit": r["commit_sha"],
                "gates": [{k: g[k] for k in ("gate", "outcome", "reason", "figures", "runs")} for g in r["gates"]]}
               for r in rows]
    unexplained = [{"switch": name, **entry} for name, entry in stable.provenance.items()
                   if (switch is None or name == switch) and entry.get("promotion") not in stored]
    return {"path": str(stable.path), "switch": switch, "promotions": entries, "file_provenance": unexplained}


def spec_diff(stable: StableSet, spec_path: Path) -> dict[str, Any]:
    """What a spec changes against the stable set: each switch whose value its job gets differs from the one the
    stable set gives (the registry's default where neither names it)."""
    from ..spec import switches as registry
    from ..spec.load import load_spec
    from ..errors import SpecInvalid

    points = load_spec(spec_path)
    errors = [f for p in points for f in p.errors]
    if errors:
        raise SpecInvalid(errors)
    base = effective(stable.switches)
    names = [s.name for s in registry.SWITCHES if s.name in base or s.name in stable.switches]
    out = []
    for point in points:
        got = point.spec.resolved_switches()
        for name in names:
            if got.get(name) != base.get(name):
                out.append({"point": point.point or None, "name": name, "stable": base.get(name),
                            "spec": got.get(name)})
    return {"spec": str(spec_path), "stable": str(stable.path), "changes": out}
