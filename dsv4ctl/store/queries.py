"""Reads that do not grow with history (issue 25): a page of runs found by keyset (newest first, `--before ID`),
every run streamed in pages, and the few columns a listing, a report or a comparison needs, for many runs in one
query per chunk. Each filter here has its index (m010_indexes; tests/test_db_indexes.py reads the query plans)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from .core import RunRow, Store
from .values import known_state, known_status

RUN_SELECT = ("SELECT runs.*, experiments.name AS experiment, campaigns.name AS campaign FROM runs "
              "JOIN experiments ON experiments.id = runs.experiment_id "
              "LEFT JOIN campaigns ON campaigns.id = runs.campaign_id")
RECORDED_AT = "coalesce(runs.submitted_at, runs.updated_at)"  # the expression idx_runs_recorded_at holds
CHUNK = 900  # ids per IN (...): under SQLite's oldest limit of 999 bound parameters
# A stamp may carry any UTC offset (+14:00 to -12:00) while the index compares text: the SQL bound is widened by
# this much and the exact comparison made on the parsed time.
_OFFSET_SLACK = timedelta(hours=15)


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing shows: any of experiment name, scheduler state, campaign name, verdict status, and
    recorded since (a UTC time)."""

    experiment: str | None = None
    state: str | None = None
    campaign: str | None = None
    status: str | None = None
    since: datetime | None = None


@dataclass(frozen=True)
class RunPage:
    """The newest runs that match, oldest first (as `tail -n`); `older` says whether more match before them
    (then `next_before` is the run id to page on with)."""

    rows: list[RunRow]
    older: bool

    @property
    def next_before(self) -> int | None:
        return self.rows[0].id if self.older and self.rows else None


def filter_sql(store: Store, wanted: RunFilter) -> tuple[list[str], list[Any]]:
    """WHERE clauses and their parameters. Names are resolved to ids first (a campaign's id, an experiment's ids),
    so each clause is one index lookup; an unknown campaign, state or status is refused with the known ones."""
    clauses: list[str] = []
    params: list[Any] = []
    if wanted.experiment:
        clauses.append("runs.experiment_id IN (SELECT id FROM experiments WHERE name = ?)")
        params.append(wanted.experiment)
    if wanted.state:
        clauses.append("runs.state = ?")
        params.append(known_state(wanted.state))
    if wanted.campaign:
        clauses.append("runs.campaign_id = ?")
        params.append(store.campaign(wanted.campaign)["id"])
    if wanted.status:
        clauses.append("runs.id IN (SELECT run_id FROM verdicts WHERE status = ?)")
        params.append(known_status(wanted.status))
    if wanted.since is not None:
        clauses.append(f"{RECORDED_AT} >= ?")
        params.append((wanted.since - _OFFSET_SLACK).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    return clauses, params


def recorded_at(data: dict[str, Any]) -> datetime:
    """When a run was recorded: submitted (or ingested), else last updated; a stamp without a zone is UTC."""
    stamp = data.get("submitted_at") or data.get("updated_at") or ""
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _rows(store: Store, clauses: list[str], params: list[Any], order: str, limit: int) -> list[RunRow]:
    where = " AND ".join(clauses) or "1"
    cursor = store.db.execute(f"{RUN_SELECT} WHERE {where} ORDER BY runs.id {order} LIMIT ?", [*params, limit])
    names = [d[0] for d in cursor.description]
    return [RunRow(dict(zip(names, row))) for row in cursor.fetchall()]


def _keep(row: RunRow, wanted: RunFilter) -> bool:
    return wanted.since is None or recorded_at(row.data) >= wanted.since


def newest_runs(store: Store, wanted: RunFilter, limit: int, before: int | None = None) -> RunPage:
    """The newest `limit` matching runs older than run id `before` (keyset paging: the cost is the page's, not
    the database's)."""
    clauses, params = filter_sql(store, wanted)
    found: list[RunRow] = []
    cursor_id = before
    while True:
        page = _rows(store, clauses + (["runs.id < ?"] if cursor_id is not None else []),
                     params + ([cursor_id] if cursor_id is not None else []), "DESC", limit + 1)
        found += [r for r in page if _keep(r, wanted)]
        if len(found) > limit or len(page) <= limit:
            break
        cursor_id = page[-1].id  # the SQL bound is wider than --since: look further back
    return RunPage(list(reversed(found[:limit])), len(found) > limit)


def iter_runs(store: Store, wanted: RunFilter, before: int | None = None, page: int = 500) -> Iterator[RunRow]:
    """Every matching run (older than `before` when given), oldest first, read `page` rows at a time: memory
    stays one page whatever the database holds."""
    clauses, params = filter_sql(store, wanted)
    if before is not None:
        clauses, params = clauses + ["runs.id < ?"], params + [before]
    last = 0
    while True:
        rows = _rows(store, clauses + ["runs.id > ?"], params + [last], "ASC", page)
        yield from (r for r in rows if _keep(r, wanted))
        if len(rows) < page:
            return
        last = rows[-1].id


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start:start + CHUNK]


def metrics_of(store: Store, run_ids: list[int]) -> dict[int, dict[str, float]]:
    """Each run's metrics (name -> value), for many runs at once."""
    out: dict[int, dict[str, float]] = {}
    for chunk in _chunks(run_ids):
        for run_id, name, value in store.db.execute(
                f"SELECT run_id, name, value FROM metrics WHERE run_id IN ({','.join('?' * len(chunk))})", chunk):
            out.setdefault(run_id, {})[name] = value
    return out


def metric_names(store: Store, run_ids: list[int]) -> list[str]:
    """The metric names any of these runs recorded, sorted."""
    names: set[str] = set()
    for chunk in _chunks(run_ids):
        names |= {row[0] for row in store.db.execute(
            f"SELECT DISTINCT name FROM metrics WHERE run_id IN ({','.join('?' * len(chunk))})", chunk)}
    return sorted(names)


def verdicts_of(store: Store, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Each judged run's whole verdict (the JSON contract), for many runs at once: for `--json`, which prints it."""
    out: dict[int, dict[str, Any]] = {}
    for chunk in _chunks(run_ids):
        out.update({run_id: json.loads(text) for run_id, text in store.db.execute(
            f"SELECT run_id, verdict_json FROM verdicts WHERE run_id IN ({','.join('?' * len(chunk))})", chunk)})
    return out


def verdict_columns(store: Store, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """What a table or a report shows of each verdict, from its columns (no verdict JSON decoded): status,
    passed, false_green and the first blocker (line, kind, message; None when there is none)."""
    out: dict[int, dict[str, Any]] = {}
    for run_id, summary in store.verdict_summaries(run_ids).items():
        blocker = {"line": summary["first_blocker_line"], "kind": summary["first_blocker_kind"],
                   "message": summary["first_blocker_message"]}
        out[run_id] = {"status": summary["status"], "passed": summary["passed"],
                       "false_green": summary["false_green"],
                       "first_blocker": blocker if any(v is not None for v in blocker.values()) else None}
    return out


def states_present(store: Store) -> list[str]:
    """The distinct states stored, by skipping through the state index (one seek per state, not one per run)."""
    return [row[0] for row in store.db.execute(
        "WITH RECURSIVE s(state) AS (SELECT min(state) FROM runs UNION ALL "
        "SELECT (SELECT min(state) FROM runs WHERE state > s.state) FROM s WHERE s.state IS NOT NULL) "
        "SELECT state FROM s WHERE state IS NOT NULL")]


def in_flight_ids(store: Store) -> list[int]:
    """What `Store.runs_in_flight()` finds, from indexes: runs still waiting on the scheduler (a state that is
    neither final nor idle), and finished jobs not judged yet (final, no verdict, no judge error); never ingested
    ones."""
    from .values import FINAL, NOT_WAITING

    waiting = [s for s in states_present(store) if s not in FINAL and s not in NOT_WAITING]
    ids: set[int] = set()
    if waiting:
        ids |= {row[0] for row in store.db.execute(
            f"SELECT id FROM runs WHERE state IN ({','.join('?' * len(waiting))}) AND ingested = 0", waiting)}
    finals = sorted(FINAL)
    # idx_runs_awaiting_verdict (m013) holds only the runs without a verdict: never the judged history (named, as
    # the planner would otherwise walk idx_runs_followed over every final run)
    ids |= {row[0] for row in store.db.execute(
        f"SELECT id FROM runs INDEXED BY idx_runs_awaiting_verdict WHERE state IN ({','.join('?' * len(finals))}) AND has_verdict = 0 AND ingested = 0 "
        "AND judge_error IS NULL AND NOT EXISTS (SELECT 1 FROM verdicts WHERE verdicts.run_id = runs.id)", finals)}
    return sorted(ids)


def ab_campaigns(store: Store, baseline: str, candidate: str) -> list[str]:
    """The `--ab` campaigns whose baseline is experiment `baseline` and candidate experiment `candidate`, and that
    hold nothing else, newest first: what `analysis.sides.ab_campaigns_of` answers, reading only the campaigns
    that have a baseline run of that experiment (idx_runs_experiment_id), not every run."""
    found = [row[0] for row in store.db.execute(
        "SELECT DISTINCT campaign_id FROM runs WHERE experiment_id IN (SELECT id FROM experiments WHERE name = ?) "
        "AND side = 'baseline' AND campaign_id IS NOT NULL", [baseline])]
    names: list[tuple[int, str]] = []
    for chunk in _chunks(found):
        names += store.db.execute(
            "SELECT c.id, c.name FROM campaigns c JOIN runs r ON r.campaign_id = c.id "
            f"JOIN experiments e ON e.id = r.experiment_id WHERE c.id IN ({','.join('?' * len(chunk))}) "
            "GROUP BY c.id HAVING sum(r.side = 'baseline' AND e.name = ?) > 0 "
            "AND sum(r.side = 'candidate' AND e.name = ?) > 0 "
            "AND sum(NOT ((r.side = 'baseline' AND e.name = ?) OR (r.side = 'candidate' AND e.name = ?))) = 0",
            [*chunk, baseline, candidate, baseline, candidate]).fetchall()
    return [name for _, name in sorted(names, reverse=True)]


def campaign_count(store: Store) -> int:
    return store.db.execute("SELECT count(*) FROM campaigns").fetchone()[0]


def newest_campaigns(store: Store, limit: int | None = None) -> list[dict[str, Any]]:
    """What `Store.campaigns()` answers (name, created_at, backend and the run counts), for the newest `limit`
    campaigns only (every one when None): each one's runs found by idx_runs_campaign, never a pass over all runs."""
    from .values import FINAL, NOT_WAITING

    idle = ",".join("?" * (len(NOT_WAITING) + len(FINAL)))
    running = f"(r.id IS NOT NULL AND r.ingested = 0 AND r.state NOT IN ({idle}))"  # as Store.campaigns counts
    newest = "SELECT id, name, created_at, backend FROM campaigns ORDER BY id DESC" + (
        " LIMIT ?" if limit is not None else "")
    cursor = store.db.execute(
        f"SELECT c.name, c.created_at, c.backend, count(r.id), "
        f"coalesce(sum(v.passed = 1 AND NOT {running}), 0), coalesce(sum(v.passed = 0 AND NOT {running}), 0), "
        f"coalesce(sum({running}), 0) "
        f"FROM ({newest}) c LEFT JOIN runs r ON r.campaign_id = c.id "
        f"LEFT JOIN verdicts v ON v.run_id = r.id GROUP BY c.id ORDER BY c.id DESC",
        [*NOT_WAITING, *sorted(FINAL)] * 3 + ([limit] if limit is not None else []))
    names = ("name", "created_at", "backend", "runs", "passed", "failed", "running")
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def experiment_ids(store: Store, name: str) -> list[int]:
    """The ids of the experiment rows of this name (one per spec hash) that some run belongs to."""
    return [row[0] for row in store.db.execute(
        "SELECT id FROM experiments WHERE name = ? AND EXISTS (SELECT 1 FROM runs WHERE runs.experiment_id = "
        "experiments.id) ORDER BY id", [name])]


def experiment_names(store: Store) -> list[str]:
    """The names of the experiments some run belongs to, sorted (one index seek per experiment row)."""
    return sorted({row[0] for row in store.db.execute(
        "SELECT name FROM experiments WHERE EXISTS (SELECT 1 FROM runs WHERE runs.experiment_id = experiments.id)")})


def metric_recorded(store: Store, experiment_ids: list[int], metric: str) -> bool:
    """Whether any run of these experiment rows recorded `metric` (stops at the first one found)."""
    return any(store.db.execute(
        "SELECT 1 FROM runs r WHERE r.experiment_id = ? AND EXISTS (SELECT 1 FROM metrics m WHERE m.run_id = r.id "
        "AND m.name = ?) LIMIT 1", [eid, metric]).fetchone() for eid in experiment_ids)


def newest_run_ids(store: Store, experiment_ids: list[int], limit: int) -> list[int]:
    """The ids of the newest `limit` runs of these experiment rows, newest first."""
    ids: list[int] = []
    for eid in experiment_ids:
        ids += [row[0] for row in store.db.execute(
            "SELECT id FROM runs WHERE experiment_id = ? ORDER BY id DESC LIMIT ?", [eid, limit])]
    return sorted(ids, reverse=True)[:limit]
