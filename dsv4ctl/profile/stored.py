"""A run's profile as `show` and the campaign report draw it: what is stored with the run, never a trace read
on the way (a 240 MB trace takes seconds; `dsv4ctl profile RUN` reads and stores it). The breakdown under the
current category rules when there is one, else the newest under other rules, said so. A run whose traces are
on disk but not read yet is named, with the command that reads them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from .categories import load_rules
from .sources import NoProfile, from_run, trace_files
from .store import load_profiles
from .targets import Profiled, judged
from .view import profile_json, stacked_bars

SHOWN_MODULES = 8  # the report's top modules; --json carries every one
WHOLE = 0.95  # a module holding (nearly) all the time is a wrapper (ForCausalLM, DecoderLayer): not drawn


def _stored_hashes(store, run_id: int) -> list[str]:
    """The rules hashes a run has breakdowns under, newest first ([] on a store from before m011)."""
    try:
        rows = store.db.execute("SELECT rules_hash, max(created_at) FROM profiles WHERE run_id = ? "
                                "GROUP BY rules_hash ORDER BY 2 DESC", [run_id]).fetchall()
    except sqlite3.OperationalError:  # no profiles table: an older read-only store
        return []
    return [r[0] for r in rows]


def stored_profile(store, run) -> dict[str, Any] | None:
    """`profile RUN --json`'s figures of a run's stored profile (without each rank's), or None when none is."""
    hashes = _stored_hashes(store, run.id)
    if not hashes:
        return None
    current = load_rules().digest
    chosen = current if current in hashes else hashes[0]
    ranks = load_profiles(store, run.id, chosen)
    window = ranks[0].meta.get("window", "run")
    verdict, notes = judged(store, run)
    if chosen != current:
        notes.append(f"stored under other category rules ({chosen}; the current ones are {current}): "
                     f"`dsv4ctl profile {run.id} --again` reads its traces under the current ones")
    data = profile_json(Profiled(str(run.label or run.id), window,
                                 [b for b in ranks if b.meta.get("window") == window], run.id, verdict, notes))
    data.pop("per_rank")
    return data


def unread_traces(run_json: dict[str, Any]) -> str | None:
    """Where a run's traces are (a run as `show --json` has it) when it has some but no stored profile: the
    folder its probe printed in raw.log (the one run's log, read line by line), else `<run dir>/profile/`."""
    from types import SimpleNamespace

    run = SimpleNamespace(**{k: run_json.get(k) for k in ("id", "label", "log_path", "run_dir")})
    try:
        return str(from_run(run).files[0].parent)
    except (NoProfile, OSError):
        return None


def campaign_profiles(store, rows) -> list[dict[str, Any]]:
    """The report's profile section: one stacked bar per profiled run of the campaign (`rows`: its RunRows), its
    width the run's kernel time against the longest of the same device's, its top modules below the model's
    wrappers, and a run with traces on disk but none stored named with the command that reads them (found by its
    `profile/` folder, no log read)."""
    found: list[dict[str, Any]] = []
    for row in rows:
        data = stored_profile(store, row)
        if data is not None:
            bar = stacked_bars([data])[0]
            found.append({**bar, "run": row.id, "experiment": row.experiment, "device": data["device"],
                          "window": data["window"], "verdict": data["verdict"], "notes": data["notes"],
                          "modules": [m for m in data["modules"] if m["share"] < WHOLE][:SHOWN_MODULES],
                          "unread": None})
            continue
        folder = Path(row.run_dir) / "profile" if row.run_dir else None
        if folder is not None and _has_traces(folder):
            found.append({"label": str(row.label or row.id), "run": row.id, "experiment": row.experiment,
                          "kernel_us": None, "failed": False, "segments": [], "device": None, "window": None,
                          "verdict": None, "modules": [], "unread": str(folder),
                          "notes": [f"traces in {folder} not read yet: `dsv4ctl profile {row.id}` reads and "
                                    "stores them"]})
    longest: dict[str, float] = {}
    for bar in found:
        if bar["kernel_us"]:
            longest[bar["device"]] = max(longest.get(bar["device"], 0.0), bar["kernel_us"])
    for bar in found:
        bar["width"] = round(bar["kernel_us"] / longest[bar["device"]], 6) if bar["kernel_us"] else None
    return found


def _has_traces(folder: Path) -> bool:
    try:
        return folder.is_dir() and bool(trace_files(folder))
    except (NoProfile, OSError):  # more files than one run has, an unreadable folder: not drawn
        return False
