"""How runs read in a table and in `show` (issue 26 M5, m11): the verdict and its first blocker's message first,
human units (HH:MM:SS, GiB), UTC timestamps, and the database's fields after. Data in, text out."""

from __future__ import annotations

from typing import Any

from ..report import output
from ..units import clock, kib, utc

FALSE_GREEN_STYLE = "bold red on white"  # as `verdict` shows its FALSE GREEN banner (issue 26 m25)
TIME_FIELDS = ("submitted_at", "started_at", "ended_at", "updated_at")


def blocker_text(verdict: dict | None, limit: int = 60) -> str:
    """`line 40: FileNotFoundError: …/config.json`: the first blocker's message (its kind where it has none)."""
    if not verdict:
        return ""
    message = verdict.get("first_blocker_message") or verdict.get("first_blocker_kind") or ""
    if not message:
        return ""
    line = verdict.get("first_blocker_line")
    text = (f"line {line}: " if line else "") + " ".join(str(message).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def runs_table(store, rows, title: str) -> None:
    from ..analysis.perf import outside_reference
    from ..campaign.progress import stuck_reason

    verdicts = store.verdict_summaries([r.id for r in rows])
    outside = outside_reference(store, [r.id for r in rows])
    output.table(title, ["run", "label", "campaign", "experiment", "job", "state", "exit", "elapsed", "verdict",
                         "first blocker"],
                 [(r.id, r.data.get("label") or "-", r.campaign or "-", r.experiment, r.job_id or "-",
                   state_cell(r, stuck_reason(r.state, r.data.get("state_detail"))),
                   f"{r.exit_code}:{r.signal}" if r.exit_code is not None else "-",
                   clock(r.elapsed_s),
                   verdict_cell(verdicts.get(r.id)) + (" OUTSIDE REFERENCE" if r.id in outside else ""),
                   blocker_text(verdicts.get(r.id))
                   or (f"judge error: {r.judge_error}" if r.data.get("judge_error") else "")[:60]
                   or (r.submit_message or "")[:60] or "")
                  for r in rows],
                 row_styles=[FALSE_GREEN_STYLE if (verdicts.get(r.id) or {}).get("false_green") else None
                             for r in rows])


def state_cell(row, stuck: str | None) -> str:
    if stuck:
        return f"PENDING ({stuck}: can never start)"
    return row.state + (f" ({row.state_detail})" if row.state_detail and row.state == "PENDING" else "")


def verdict_cell(v: dict | None) -> str:
    if not v:
        return "-"
    return f"{v['status']}{' PASSED' if v['passed'] else ''}{' FALSE GREEN' if v['false_green'] else ''}"


def show_run(data: dict[str, Any]) -> None:
    """`dsv4ctl show`: the verdict and its first blocker's message, its reasons, metrics, performance and alignment;
    then the database's fields, in human units."""
    verdict = data.pop("verdict") or {}
    metrics = data.pop("metrics")
    perf = data.pop("perf")
    profile = data.pop("profile", None)
    output.text(f"run {data['id']} ({data['label']}): {data.get('state')}"
                + (f", job {data['job_id']}" if data.get("job_id") else "")
                + (f", elapsed {clock(data['elapsed_s'])}" if data.get("elapsed_s") is not None else ""))
    if verdict:
        blocker = verdict.get("first_blocker") or {}
        output.text(f"verdict: {verdict['status']}" + (" PASSED" if verdict["passed"] else " — NOT PASSED")
                    + (" FALSE GREEN" if verdict["false_green"] else ""),
                    style="bold green" if verdict["passed"] and not verdict["false_green"] else "bold red")
        if blocker:
            output.text("first blocker: " + blocker_text({"first_blocker_message": blocker.get("message"),
                                                          "first_blocker_kind": blocker.get("kind"),
                                                          "first_blocker_line": blocker.get("line")}, 200)
                        + (f" ({blocker['kind']})" if blocker.get("kind") and blocker.get("message") else ""))
        for reason in verdict.get("reasons", []):
            output.text(f"  • {reason}")
    else:
        output.text("verdict: none yet" + (f" (judging failed: {data['judge_error']})"
                                           if data.get("judge_error") else ""))
    if metrics:
        from ..report.verdict_view import show_metrics

        show_metrics(metrics)
    if perf:
        output.text(f"performance ({perf['source']}): " + ("within its reference" if perf["within"] else
                    "; ".join(f["message"] for f in perf["failures"])))
    from ..modes.registry import show_records

    show_records(data)  # each mode's record (an align run's alignment), drawn by its mode
    from ..profile.stored import unread_traces
    from .profile_cmd import show_stored_profile

    show_stored_profile(profile, None if profile else unread_traces(data), data["id"])  # issue 23
    output.table("recorded fields", ["field", "value"],
                 [(k, human_field(k, v)) for k, v in data.items() if v not in (None, "", [], {})])


def human_field(key: str, value: Any) -> str:
    if isinstance(value, (dict, list)):
        return compact(value)
    if key == "elapsed_s":
        return f"{clock(value)} ({value} s)"
    if key == "max_rss_kib":
        return f"{kib(value)} ({value} KiB)"
    if key in TIME_FIELDS:
        return str(utc(value))
    return str(value)


def compact(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return ", ".join(map(str, value))


def stream_json(items) -> None:
    """A JSON array written item by item (`runs --all --json` on a year of runs holds one page in memory, and a
    reader sees the first runs at once); the same text `json.loads` reads as a list."""
    import json
    import sys

    written = 0
    sys.stdout.write("[")
    for item in items:
        text = json.dumps(item, indent=2, ensure_ascii=False, default=str).replace("\n", "\n  ")
        sys.stdout.write(("," if written else "") + "\n  " + text)
        written += 1
    sys.stdout.write("\n]\n" if written else "]\n")
