"""The results store: one SQLite file (default ./results.db) through sqlite-utils.

Schema changes are numbered migrations applied in one transaction when the store is opened, recorded in
`_dsv4ctl_migrations`. WAL and a busy timeout let several dsv4ctl processes write at once without "database is
locked". Plain tables and JSON text columns: the file opens as-is in Datasette.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlite_utils

from .errors import Dsv4Error

DEFAULT_DB = "results.db"
BUSY_TIMEOUT_S = 60

# Run states: the one list (judge/states.py); dsv4ctl's own words re-exported for the modules that set them.
from .judge.states import FINAL, LOST, PLANNED, SUBMIT_FAILED, SUBMITTING, UNKNOWN  # noqa: F401, E402
# Not waiting on the scheduler: never submitted, refused, or lost. Every other non-final word is followed.
NOT_WAITING = (PLANNED, SUBMIT_FAILED, LOST)


class StoreError(Dsv4Error):
    """The results database cannot be opened or is not a dsv4ctl store."""


class RunNotFound(Dsv4Error):
    """No run matches the given run id, job id or token."""


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---- migrations -------------------------------------------------------------------------------------------------


def m001_initial(db: sqlite_utils.Database) -> None:
    db["experiments"].create({"id": int, "name": str, "spec_hash": str, "spec_json": str, "source": str,
                              "created_at": str}, pk="id")
    db["experiments"].create_index(["name", "spec_hash"], unique=True)
    db["campaigns"].create({"id": int, "name": str, "backend": str, "command": str, "created_at": str}, pk="id")
    db["campaigns"].create_index(["name"], unique=True)
    db["runs"].create({
        "id": int, "campaign_id": int, "experiment_id": int, "point_json": str, "point_label": str,
        "repeat_index": int, "pair_id": int, "side": str, "backend": str, "token": str, "state": str,
        "state_detail": str, "state_source": str, "job_id": str, "array_task": str, "submit_message": str,
        "run_dir": str, "script_path": str, "log_path": str, "node": str, "exit_code": int, "signal": int,
        "elapsed_s": int, "max_rss_kib": int, "submitted_at": str, "started_at": str, "ended_at": str,
        "updated_at": str, "git_sha": str, "dsv4ctl_version": str, "switches_json": str, "tags": str,
        "ingested": int,
    }, pk="id", foreign_keys=[("campaign_id", "campaigns", "id"), ("experiment_id", "experiments", "id")])
    db["runs"].create_index(["token"], unique=True)
    db["runs"].create_index(["job_id"])
    db["runs"].create_index(["state"])
    db["verdicts"].create({
        "run_id": int, "status": str, "passed": int, "false_green": int, "first_blocker_line": int,
        "first_blocker_kind": str, "first_blocker_message": str, "bos_run": int, "py_exit": int,
        "probe_verdict": str, "engine_ready_s": float, "judged_at": str, "verdict_json": str,
    }, pk="run_id", foreign_keys=[("run_id", "runs", "id")])
    db["metrics"].create({"run_id": int, "name": str, "value": float}, pk=("run_id", "name"),
                         foreign_keys=[("run_id", "runs", "id")])


MIGRATIONS: tuple[Callable[[sqlite_utils.Database], None], ...] = (m001_initial,)


def migrate(db: sqlite_utils.Database) -> list[str]:
    """Apply the migrations not yet recorded, all in one transaction; return the names applied."""
    conn = db.conn
    conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait on the busy timeout
    try:
        if "_dsv4ctl_migrations" not in db.table_names():
            db["_dsv4ctl_migrations"].create({"name": str, "applied_at": str}, pk="name")
        done = {row["name"] for row in db["_dsv4ctl_migrations"].rows}
        applied = []
        for migration in MIGRATIONS:
            if migration.__name__ not in done:
                migration(db)
                db["_dsv4ctl_migrations"].insert({"name": migration.__name__, "applied_at": now()})
                applied.append(migration.__name__)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return applied


# ---- the store --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRow:
    """A run as stored (the columns of `runs`, plus its experiment's name)."""

    data: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.data[name]
        except KeyError:
            raise AttributeError(name) from None


class Store:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a usable SQLite database ({exc})") from None
        self.db = sqlite_utils.Database(conn)
        self.applied = migrate(self.db)

    def close(self) -> None:
        self.db.conn.close()

    def transaction(self):
        """`with store.transaction():` — one atomic write (BEGIN IMMEDIATE ... COMMIT/ROLLBACK)."""
        return _Transaction(self.db.conn)

    # -- experiments and campaigns --

    def experiment_id(self, name: str, spec_hash: str, spec_json: str, source: str) -> int:
        with self.transaction():
            row = self.db.execute("SELECT id FROM experiments WHERE name = ? AND spec_hash = ?",
                                  [name, spec_hash]).fetchone()
            if row:
                return row[0]
            return self.db["experiments"].insert({"name": name, "spec_hash": spec_hash, "spec_json": spec_json,
                                                  "source": source, "created_at": now()}).last_pk

    def create_campaign(self, name: str, backend: str, command: str) -> int:
        with self.transaction():
            if self.db.execute("SELECT 1 FROM campaigns WHERE name = ?", [name]).fetchone():
                raise StoreError(f"campaign {name!r} exists already: pick another --campaign name")
            return self.db["campaigns"].insert({"name": name, "backend": backend, "command": command,
                                                "created_at": now()}).last_pk

    def spec_json(self, experiment_id: int) -> str:
        """The resolved spec (JSON text) an experiment row was recorded with."""
        row = self.db.execute("SELECT spec_json FROM experiments WHERE id = ?", [experiment_id]).fetchone()
        if row is None:
            raise RunNotFound(f"no experiment with id {experiment_id}")
        return row[0]

    def campaign(self, name: str) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM campaigns WHERE name = ?", [name]).fetchone()
        if row is None:
            raise RunNotFound(f"no campaign named {name!r} (see `dsv4ctl runs`)")
        return dict(zip([d[0] for d in self.db.execute("SELECT * FROM campaigns LIMIT 0").description], row))

    # -- runs --

    def add_run(self, **fields: Any) -> int:
        fields.setdefault("updated_at", now())
        with self.transaction():
            return self.db["runs"].insert(fields).last_pk

    def update_run(self, run_id: int, **fields: Any) -> None:
        fields["updated_at"] = now()
        with self.transaction():
            self.db["runs"].update(run_id, fields)

    def _select(self, where: str = "1", params: Iterable[Any] = ()) -> list[RunRow]:
        sql = (f"SELECT runs.*, experiments.name AS experiment, campaigns.name AS campaign FROM runs "
               f"JOIN experiments ON experiments.id = runs.experiment_id "
               f"LEFT JOIN campaigns ON campaigns.id = runs.campaign_id WHERE {where} ORDER BY runs.id")
        cursor = self.db.execute(sql, list(params))
        names = [d[0] for d in cursor.description]
        return [RunRow(dict(zip(names, row))) for row in cursor.fetchall()]

    def runs(self, experiment: str | None = None, state: str | None = None, campaign: str | None = None,
             status: str | None = None) -> list[RunRow]:
        clauses, params = [], []
        if experiment:
            clauses.append("experiments.name = ?")
            params.append(experiment)
        if state:
            clauses.append("runs.state = ?")
            params.append(state.upper())
        if campaign:
            clauses.append("campaigns.name = ?")
            params.append(campaign)
        if status:
            clauses.append("runs.id IN (SELECT run_id FROM verdicts WHERE status = ?)")
            params.append(status)
        return self._select(" AND ".join(clauses) or "1", params)

    def runs_by_ids(self, run_ids: list[int]) -> list[RunRow]:
        """These runs, in id order, in one query per chunk."""
        rows: list[RunRow] = []
        for start in range(0, len(run_ids), 900):
            chunk = run_ids[start:start + 900]
            rows += self._select(f"runs.id IN ({','.join('?' * len(chunk))})", chunk)
        return sorted(rows, key=lambda r: r.id)

    def runs_in_flight(self) -> list[RunRow]:
        """Runs still waiting on the scheduler, and finished jobs not judged yet (sacct still settling)."""
        idle = ",".join("?" * (len(NOT_WAITING) + len(FINAL)))
        finals = ",".join("?" * len(FINAL))
        return self._select(f"runs.state NOT IN ({idle}) OR (runs.state IN ({finals}) AND runs.ingested = 0 "
                            f"AND runs.id NOT IN (SELECT run_id FROM verdicts))",
                            [*NOT_WAITING, *sorted(FINAL), *sorted(FINAL)])

    def find_run(self, ref: str) -> RunRow:
        """A run by run id (`12`), job id (`4711`, `4711_3`, `local:123`) or token."""
        rows = []
        if ref.isdigit():
            rows = self._select("runs.id = ?", [int(ref)])
        rows = rows or self._select("runs.job_id = ? OR runs.token = ?", [ref, ref])
        if not rows:
            raise RunNotFound(f"no run with id, job id or token {ref!r} (see `dsv4ctl runs`)")
        return rows[-1]

    # -- verdicts and metrics --

    def save_verdict(self, run_id: int, verdict: dict[str, Any]) -> None:
        blocker = verdict.get("first_blocker") or {}
        with self.transaction():
            self.db["verdicts"].upsert({
                "run_id": run_id, "status": verdict["status"], "passed": int(verdict["passed"]),
                "false_green": int(verdict["false_green"]), "first_blocker_line": blocker.get("line"),
                "first_blocker_kind": blocker.get("kind"), "first_blocker_message": blocker.get("message"),
                "bos_run": verdict.get("bos_run"), "py_exit": verdict.get("py_exit"),
                "probe_verdict": verdict.get("probe_verdict"), "engine_ready_s": verdict.get("engine_ready_s"),
                "judged_at": now(), "verdict_json": json.dumps(verdict, ensure_ascii=False),
            }, pk="run_id")
            self.db.execute("DELETE FROM metrics WHERE run_id = ?", [run_id])
            rows = [{"run_id": run_id, "name": name, "value": float(value)}
                    for name, value in (verdict.get("metrics") or {}).items()
                    if isinstance(value, (int, float)) and not isinstance(value, bool)]
            if verdict.get("engine_ready_s") is not None and "engine_ready_s" not in (verdict.get("metrics") or {}):
                rows.append({"run_id": run_id, "name": "engine_ready_s", "value": float(verdict["engine_ready_s"])})
            if rows:
                self.db["metrics"].insert_all(rows, pk=("run_id", "name"), replace=True)

    def verdict(self, run_id: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT verdict_json FROM verdicts WHERE run_id = ?", [run_id]).fetchone()
        return json.loads(row[0]) if row else None

    def verdict_summaries(self, run_ids: list[int]) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for start in range(0, len(run_ids), 900):
            chunk = run_ids[start:start + 900]
            marks = ",".join("?" * len(chunk))
            cursor = self.db.execute(f"SELECT run_id, status, passed, false_green, first_blocker_kind, "
                                     f"first_blocker_line FROM verdicts WHERE run_id IN ({marks})", chunk)
            out.update({row[0]: {"status": row[1], "passed": bool(row[2]), "false_green": bool(row[3]),
                                 "first_blocker_kind": row[4], "first_blocker_line": row[5]} for row in cursor})
        return out

    def metrics(self, run_id: int) -> dict[str, float]:
        return {name: value for name, value in
                self.db.execute("SELECT name, value FROM metrics WHERE run_id = ?", [run_id])}


class _Transaction:
    """BEGIN IMMEDIATE takes the write lock up front, so the busy timeout applies; a deferred BEGIN that reads
    first can fail at once with SQLITE_BUSY when another process wrote meanwhile. Re-entrant: inner blocks join."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.outer = False

    def __enter__(self) -> None:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
            self.outer = True

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.outer:
            self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def open_store(path: str | os.PathLike[str] | None = None) -> Store:
    """The store at `path`, else $DSV4CTL_DB, else ./results.db; created and migrated on first use."""
    return Store(path or os.environ.get("DSV4CTL_DB") or DEFAULT_DB)
