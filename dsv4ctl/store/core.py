"""The results store: one SQLite file (default ./results.db), read through sqlite3 and written through sqlite-utils.

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
from pathlib import Path
from typing import Any

from .dbfile import Database, StoreError, connect, set_journal, writable
from .filesystem import journal_for
from .migrations import check_version, migrate
from .values import (FINAL, INT64_MAX, LATEST, NOT_WAITING, SUBMITTING, CampaignNotFound, LabelTaken, RunNotFound,
                     bindable, check_chosen_label, closest, finite_number, known_state, known_status, now)


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

    def to_json(self) -> dict[str, Any]:
        """The one JSON shape of a run (runs, show, status, submit): nested objects and arrays, never JSON inside a
        string, and null where the scheduler printed a placeholder ("Unknown", "None assigned")."""
        data = {k: (None if v in PLACEHOLDERS else v) for k, v in self.data.items()
                if k not in ("point_json", "switches_json", "tags", "origin_json", "has_verdict")}
        data["point"] = json.loads(self.data.get("point_json") or "{}")
        data["switches"] = json.loads(self.data.get("switches_json") or "{}")
        data["tags"] = [t for t in (self.data.get("tags") or "").split(",") if t]
        data["ingested"] = bool(self.data.get("ingested"))
        if "origin_json" in self.data:  # brought in by `db import`: where the run was first recorded
            data["origin"] = json.loads(self.data["origin_json"]) if self.data["origin_json"] else None
        return data


PLACEHOLDERS = ("Unknown", "None assigned", "None", "(null)", "")


class Store:
    """The results database. Opened read-only (`read_only`) when this process cannot write it: reading commands
    still work, and the first write is a StoreError naming the file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.read_only = not writable(self.path)
        self.journal = journal_for(self.path)  # WAL, or a rollback journal on a shared filesystem
        conn = connect(self.path, self.read_only, self.journal.shared)
        if not self.read_only:
            try:
                set_journal(conn, self.journal.shared)
            except StoreError as exc:
                if not self.path.exists() or "read-only" not in str(exc):
                    raise
                conn.close()  # the file or its folder refuses writes after all (immutable, read-only mount)
                self.read_only = True
                conn = connect(self.path, True)
        self.db = Database(conn)
        if self.read_only:
            pending = check_version(self.db, self.path)
            if pending:
                raise StoreError(f"{self.path}: read-only and older than this dsv4ctl (needs {', '.join(pending)}): "
                                 "open it once with write access")
            self.applied: list[str] = []
        else:
            self.applied = migrate(self.db, self.path)

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

    def create_campaign(self, name: str, backend: str, command: str, planned_runs: int | None = None) -> int:
        with self.transaction():
            if self.db.execute("SELECT 1 FROM campaigns WHERE name = ?", [name]).fetchone():
                raise StoreError(f"campaign {name!r} exists already: pick another --campaign name")
            return self.db["campaigns"].insert({"name": name, "backend": backend, "command": command,
                                                "created_at": now(), "planned_runs": planned_runs}).last_pk

    def mark_submitted(self, campaign_id: int) -> None:
        """The submission loop of a campaign reached its end (every run got a job or a refusal)."""
        with self.transaction():
            self.db.execute("UPDATE campaigns SET submitted_at = ? WHERE id = ?", [now(), campaign_id])

    def spec_json(self, experiment_id: int) -> str:
        """The resolved spec (JSON text) an experiment row was recorded with."""
        row = self.db.execute("SELECT spec_json FROM experiments WHERE id = ?", [experiment_id]).fetchone()
        if row is None:
            raise RunNotFound(f"no experiment with id {experiment_id}")
        return row[0]

    def campaign(self, name: str) -> dict[str, Any]:
        """A campaign by name, or the newest for `latest`; RunNotFound naming the closest known ones."""
        if name == LATEST:
            cursor = self.db.execute("SELECT * FROM campaigns ORDER BY id DESC LIMIT 1")
        else:
            cursor = self.db.execute("SELECT * FROM campaigns WHERE name = ?", [name])
        row = cursor.fetchone()
        if row is None:
            if name == LATEST:
                raise CampaignNotFound("no campaign recorded yet (submit one: `dsv4ctl submit SPEC`)")
            known = [r[0] for r in self.db.execute("SELECT name FROM campaigns ORDER BY id DESC")]
            raise CampaignNotFound(f"no campaign named {name!r}{closest(name, known)} (see `dsv4ctl campaigns`)")
        return dict(zip([d[0] for d in cursor.description], row))

    def campaign_name(self, name: str | None) -> str | None:
        """The stored name of a campaign given by name or `latest` (None stays None); unknown names refused."""
        return None if name is None else self.campaign(name)["name"]

    def campaigns(self) -> list[dict[str, Any]]:
        """Every campaign, newest first, with its run counts: runs, passed, failed (judged, not passed), running
        (still followed)."""
        idle = ",".join("?" * (len(NOT_WAITING) + len(FINAL)))
        # One count per run (issue 26 M2): a run still followed is running, whatever verdict an older dsv4ctl
        # stored for it while it was in flight; only a run that is no longer followed counts as passed or failed.
        running = f"(r.id IS NOT NULL AND r.ingested = 0 AND r.state NOT IN ({idle}))"
        cursor = self.db.execute(
            f"SELECT c.name, c.created_at, c.backend, count(r.id), "
            f"coalesce(sum(v.passed = 1 AND NOT {running}), 0), coalesce(sum(v.passed = 0 AND NOT {running}), 0), "
            f"coalesce(sum({running}), 0) "
            f"FROM campaigns c LEFT JOIN runs r ON r.campaign_id = c.id "
            f"LEFT JOIN verdicts v ON v.run_id = r.id GROUP BY c.id ORDER BY c.id DESC",
            [*NOT_WAITING, *sorted(FINAL)] * 3)
        names = ("name", "created_at", "backend", "runs", "passed", "failed", "running")
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    # -- runs --

    def add_run(self, **fields: Any) -> int:
        """Record a run; with no `label`, it gets the automatic r<run id>. Automatic labels have a namespace of
        their own (issue 26 m1): a chosen label of that shape is refused, and a chosen label already taken is
        refused (LabelTaken), never suffixed."""
        fields.setdefault("updated_at", now())
        label = fields.pop("label", None)
        with self.transaction():
            if label is not None:
                check_chosen_label(label)
                self._check_label_free(label)
            run_id = self.db["runs"].insert({k: bindable(v) for k, v in fields.items()}).last_pk
            # free_label only for a database from before this rule, where someone may have chosen r<id>
            self.db.execute("UPDATE runs SET label = ? WHERE id = ?", [label or self.free_label(f"r{run_id}"),
                                                                       run_id])
            return run_id

    def label_free(self, label: str) -> bool:
        return self.db.execute("SELECT 1 FROM runs WHERE label = ?", [label]).fetchone() is None

    def _check_label_free(self, label: str) -> None:
        taken = self.db.execute("SELECT id FROM runs WHERE label = ?", [label]).fetchone()
        if taken:
            raise LabelTaken(f"label {label!r} is taken by run {taken[0]}: choose another --label")

    def free_label(self, wanted: str) -> str:
        """`wanted`, or `wanted-2`, `wanted-3`... whichever is not used yet."""
        label, n = wanted, 1
        while self.db.execute("SELECT 1 FROM runs WHERE label = ?", [label]).fetchone():
            n += 1
            label = f"{wanted}-{n}"
        return label

    def update_run(self, run_id: int, **fields: Any) -> None:
        fields["updated_at"] = now()
        with self.transaction():
            self.db["runs"].update(run_id, {k: bindable(v) for k, v in fields.items()})

    def update_run_if(self, run_id: int, seen_state: str, seen_token: str, /, **fields: Any) -> bool:
        """Update a run only if it is still in the state with the token it was seen in (nobody moved it
        meanwhile); say if it was."""
        fields["updated_at"] = now()
        names = sorted(fields)
        sets = ", ".join(f"{name} = ?" for name in names)  # column names from the code, never from users
        with self.transaction():
            cursor = self.db.execute(f"UPDATE runs SET {sets} WHERE id = ? AND state = ? AND token = ?",
                                     [*(bindable(fields[n]) for n in names), run_id, seen_state, seen_token])
            return cursor.rowcount == 1

    def claim_runs(self, claims: list[tuple[int, str, str, str]]) -> bool:
        """Take runs for submission, all or none: each (run id, state seen, token seen, new token) becomes
        SUBMITTING with its new token only if nobody changed it since it was read. Two processes that read the
        same runs (two `resume`s, a `resume` beside a `submit`) never both submit one."""
        assert not self.db.conn.in_transaction, "a claim is its own transaction"
        try:
            with self.transaction():
                for run_id, state, token, new_token in claims:
                    cursor = self.db.execute(
                        "UPDATE runs SET state = ?, token = ?, submitted_at = ?, updated_at = ?, job_id = NULL, "
                        "array_task = NULL WHERE id = ? AND state = ? AND token = ?",
                        [SUBMITTING, new_token, now(), now(), run_id, state, token])
                    if cursor.rowcount != 1:
                        raise _ClaimLost(run_id)  # rolls the whole claim back
        except _ClaimLost:
            return False
        return True

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
            params.append(known_state(state))
        if campaign:
            clauses.append("campaigns.name = ?")
            params.append(self.campaign_name(campaign))
        if status:
            clauses.append("runs.id IN (SELECT run_id FROM verdicts WHERE status = ?)")
            params.append(known_status(status))
        return self._select(" AND ".join(clauses) or "1", params)

    def runs_by_ids(self, run_ids: list[int]) -> list[RunRow]:
        """These runs, in id order, in one query per chunk."""
        rows: list[RunRow] = []
        for start in range(0, len(run_ids), 900):
            chunk = run_ids[start:start + 900]
            rows += self._select(f"runs.id IN ({','.join('?' * len(chunk))})", chunk)
        return sorted(rows, key=lambda r: r.id)

    def runs_in_flight(self, run_ids: Iterable[int] | None = None) -> list[RunRow]:
        """Runs still waiting on the scheduler, and finished jobs not judged yet (sacct still settling); only
        among `run_ids` when given (a wait follows its own runs, never the whole database)."""
        idle = ",".join("?" * (len(NOT_WAITING) + len(FINAL)))
        finals = ",".join("?" * len(FINAL))
        # An ingested run is final as recorded, whatever its state word (INGESTED, or its sacct record's RUNNING):
        # it never reaches a backend's poller (issue 26 B1).
        where = (f"runs.ingested = 0 AND (runs.state NOT IN ({idle}) OR (runs.state IN ({finals}) "
                 f"AND runs.judge_error IS NULL AND runs.id NOT IN (SELECT run_id FROM verdicts)))")
        params: list[Any] = [*NOT_WAITING, *sorted(FINAL), *sorted(FINAL)]
        if run_ids is None:
            return self._select(where, params)
        wanted = sorted(set(run_ids))
        rows: list[RunRow] = []
        for start in range(0, len(wanted), 900):
            chunk = wanted[start:start + 900]
            rows += self._select(f"{where} AND runs.id IN ({','.join('?' * len(chunk))})", [*params, *chunk])
        return sorted(rows, key=lambda r: r.id)

    def find_run(self, ref: str) -> RunRow:
        """A run by run id (`12`), label (`J17`), job id (`4711`, `4711_3`, `local-123`) or token; `latest` is the
        newest run."""
        rows = []
        if ref == LATEST:
            rows = self._select("runs.id = (SELECT max(id) FROM runs)")
        elif ref.isdigit() and int(ref) <= INT64_MAX:  # beyond SQLite's integers: a label, job id or token
            rows = self._select("runs.id = ?", [int(ref)])
        rows = rows or self._select("runs.label = ?", [ref])
        rows = rows or self._select("runs.job_id = ? OR runs.token = ?", [ref, ref])
        if not rows:
            raise RunNotFound(f"no run with id, label, job id or token {ref!r} (see `dsv4ctl runs`)")
        return rows[-1]

    def runs_with_content(self, sha256: str) -> list[RunRow]:
        """The ingested runs whose log had this content (SHA-256 of its bytes), oldest first."""
        return self._select("runs.content_sha256 = ?", [sha256])

    # -- verdicts and metrics --

    def save_verdict(self, run_id: int, verdict: dict[str, Any], versions: dict[str, str] | None = None) -> None:
        """Store a verdict with its metrics and the software versions its log names (`versions`, by column: a
        version the log no longer names keeps what was recorded). What a mode or a reference adds to a judgement
        (an alignment, a performance check) is written by the caller in the same transaction
        (campaign.verdicts.record_verdict)."""
        from ..versions import VERSION_COLUMNS

        blocker = verdict.get("first_blocker") or {}
        with self.transaction():
            # Numbers from a log can be anything (a 400-digit count, NaN): the columns get what SQLite can hold,
            # verdict_json keeps them exactly, and the metrics table only finite numbers.
            self.db["verdicts"].upsert({key: bindable(value) for key, value in {
                "run_id": run_id, "status": verdict["status"], "passed": int(verdict["passed"]),
                "false_green": int(verdict["false_green"]), "first_blocker_line": blocker.get("line"),
                "first_blocker_kind": blocker.get("kind"), "first_blocker_message": blocker.get("message"),
                "bos_run": verdict.get("bos_run"), "py_exit": verdict.get("py_exit"),
                "probe_verdict": verdict.get("probe_verdict"), "engine_ready_s": verdict.get("engine_ready_s"),
                "judged_at": now(), "verdict_json": json.dumps(verdict, ensure_ascii=False),
            }.items()}, pk="run_id")
            self.db.execute("UPDATE runs SET judge_error = NULL WHERE id = ? AND judge_error IS NOT NULL", [run_id])
            found = {k: v for k, v in (versions or {}).items() if k in VERSION_COLUMNS and v}
            if found:
                self.db["runs"].update(run_id, found)
            self.db.execute("DELETE FROM metrics WHERE run_id = ?", [run_id])
            numbers = dict(verdict.get("metrics") or {})
            numbers.setdefault("engine_ready_s", verdict.get("engine_ready_s"))
            rows = [{"run_id": run_id, "name": name, "value": finite_number(value)} for name, value in numbers.items()]
            rows = [row for row in rows if row["value"] is not None]
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
                                     f"first_blocker_line, first_blocker_message FROM verdicts "
                                     f"WHERE run_id IN ({marks})", chunk)
            out.update({row[0]: {"status": row[1], "passed": bool(row[2]), "false_green": bool(row[3]),
                                 "first_blocker_kind": row[4], "first_blocker_line": row[5],
                                 "first_blocker_message": row[6]} for row in cursor})
        return out

    def metrics(self, run_id: int) -> dict[str, float]:
        return {name: value for name, value in
                self.db.execute("SELECT name, value FROM metrics WHERE run_id = ?", [run_id])}


class _ClaimLost(Exception):
    """Another process took one of the runs first."""


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


def open_store(path: str | os.PathLike[str] | None = None, announce: Callable[[str], None] | None = None,
               must_exist: bool = False) -> Store:
    """The store at `path`, else $DSV4CTL_DB, else the project config's (dsv4ctl.toml), else ./results.db; created
    and migrated on first use. Unless it is ./results.db, which one is said through `announce` (the commands pass
    their stderr note; the store itself never prints). Commands that only read pass `must_exist`: in a folder with
    no database they say so, instead of creating an empty one and showing nothing (`cd sub && dsv4ctl runs`)."""
    from ..config import database, database_note

    found = database(path)
    if must_exist and not Path(found.value).exists():
        error = StoreError(f"no results database at {found.value}")
        error.exit_code = 2  # something named that does not exist: a usage error (issue 26 M6)
        error.hint = ("run from the project's folder, give --db PATH, or write a dsv4ctl.toml there with "
                      "`dsv4ctl init` so every subfolder finds it")
        raise error
    journal = journal_for(Path(found.value))
    note = database_note(found, journal.describe(Path(found.value)) if journal.shared else None) if announce else None
    if note:
        announce(note)
    return Store(found.value)
