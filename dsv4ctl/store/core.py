"""The results store: one SQLite file (default ./results.db) through sqlite-utils.

Schema changes are numbered migrations applied in one transaction when the store is opened, recorded in
`_dsv4ctl_migrations`. WAL and a busy timeout let several dsv4ctl processes write at once without "database is
locked". Plain tables and JSON text columns: the file opens as-is in Datasette.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlite_utils

from .dbfile import BUSY_TIMEOUT_S, StoreError, connect, set_wal, writable  # noqa: F401 - re-exported
from ..errors import Dsv4Error, UsageError

DEFAULT_DB = "results.db"
LATEST = "latest"  # accepted wherever a run or a campaign is named: the newest one

# Run states: the one list (judge/states.py); dsv4ctl's own words re-exported for the modules that set them.
from ..judge.states import FINAL, LOST, PLANNED, SUBMIT_FAILED, SUBMITTING, UNKNOWN  # noqa: F401, E402
# Not waiting on the scheduler: never submitted, refused, or lost. Every other non-final word is followed.
NOT_WAITING = (PLANNED, SUBMIT_FAILED, LOST)


class RunNotFound(Dsv4Error):
    """No run matches the given run id, label, job id or token: a usage error (exit 2), never a test result."""

    exit_code = 2


class CampaignNotFound(RunNotFound):
    """No campaign has the given name: a usage error, the message names the closest known ones."""

    exit_code = 2


class LabelTaken(UsageError):
    """A label is already used by another run of this database."""


AUTO_LABEL = re.compile(r"r[0-9]+")  # r<run id>: the labels dsv4ctl gives, never one a user chooses


def check_chosen_label(label: str) -> str:
    """A label a user (or a spec's `label:`) chose: refused when it has the automatic labels' shape."""
    if AUTO_LABEL.fullmatch(label):
        raise UsageError(f"label {label!r} has the shape of the automatic labels (r<run id>): choose another "
                         "(J18, baseline-1, ...)")
    return label


def closest(word: str, known: Iterable[str]) -> str:
    """`; did you mean X?` when one known word is close to `word`, else the known words (at most 10)."""
    import difflib

    known = list(known)
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6) or difflib.get_close_matches(
        word.lower(), [k.lower() for k in known], n=1, cutoff=0.6)
    if near:
        return f"; did you mean {near[0]!r}?"
    if not known:
        return ""
    shown = ", ".join(known[:10]) + (f" (+{len(known) - 10} more)" if len(known) > 10 else "")
    return f"; known: {shown}"


INT64_MAX = 2**63 - 1


def bindable(value: Any) -> Any:
    """A value SQLite can store: integers past int64, NaN and infinities become NULL (the verdict's JSON keeps them
    exactly). Not text: an INTEGER column would turn a 400-digit text back into the REAL infinity."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def finite_number(value: Any) -> float | None:
    """A metric as a finite float, or None (text, booleans, NaN, infinities, integers too big for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


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


def m002_campaign_plan(db: sqlite_utils.Database) -> None:
    # planned_runs: how many runs the plan recorded (in the same transaction as the runs); submitted_at: when the
    # submission loop finished. NULL there means a CLI stopped on the way: `resume` completes it.
    db["campaigns"].add_column("planned_runs", int)
    db["campaigns"].add_column("submitted_at", str)


def m003_judge_error(db: sqlite_utils.Database) -> None:
    # Judging that raised on one run is recorded there, so a watch can finish and the others are still judged.
    db["runs"].add_column("judge_error", str)


def m004_labels(db: sqlite_utils.Database) -> None:
    # A short name per run (J18), unique in the database; runs recorded before get J<run id>.
    db["runs"].add_column("label", str)
    db.execute("UPDATE runs SET label = 'J' || id WHERE label IS NULL")
    db["runs"].create_index(["label"], unique=True)


def m005_versions(db: sqlite_utils.Database) -> None:
    # What the job actually ran (read from raw.log when it is judged): compare lists a change of vLLM among the
    # differences. Runs recorded before stay NULL until judged again.
    for column in ("vllm_version", "torch_version", "triton_version"):
        db["runs"].add_column(column, str)


def m006_perf(db: sqlite_utils.Database) -> None:
    # Issue 17: each judged run's check against its performance reference (dsv4ctl/perf.py), and the references
    # set per experiment by `dsv4ctl reference set` (ingested runs have no spec to hold one).
    db["perf_checks"].create({"run_id": int, "within": int, "source": str, "reference_json": str,
                              "failures_json": str}, pk="run_id", foreign_keys=[("run_id", "runs", "id")])
    db["perf_references"].create({"experiment": str, "perf_json": str, "source": str, "set_at": str},
                                 pk="experiment")


def m007_align(db: sqlite_utils.Database) -> None:
    # Issue 15: an align run's result (dsv4ctl/align.py), recomputed from its capture files when it is judged,
    # and one row per rung (cache, attention, each layer, final norm, logits, greedy, perplexity) for show/report.
    db["alignments"].create({"run_id": int, "aligned": int, "verdict": str, "first_rung": str, "first_layer": int,
                             "reference": str, "result_json": str, "judged_at": str}, pk="run_id",
                            foreign_keys=[("run_id", "runs", "id")])
    db["align_rungs"].create({"run_id": int, "position": int, "name": str, "kind": str, "layer": int, "ok": int,
                              "cosine": float, "max_abs": float, "rel_l2": float}, pk=("run_id", "position"),
                             foreign_keys=[("run_id", "runs", "id")])


def m008_bisect(db: sqlite_utils.Database) -> None:
    # Issue 16: a bisection (dsv4ctl/bisect.py), its steps and its probes (a subset of changes or a numeric value,
    # with its runs' failure rate, Wilson interval and outcome). A probe's runs are the runs of its experiment
    # (each probe's spec has a name of its own); the campaigns are recorded before they are submitted.
    db["bisections"].create({"id": int, "kind": str, "inputs_key": str, "command": str, "backend": str,
                             "inputs_json": str, "changes_json": str, "settings_json": str, "state": str,
                             "result_json": str, "created_at": str, "updated_at": str}, pk="id")
    db["bisections"].create_index(["inputs_key"])
    db["bisect_steps"].create({"bisection_id": int, "step": int, "what": str, "probes_json": str,
                               "created_at": str}, pk=("bisection_id", "step"),
                              foreign_keys=[("bisection_id", "bisections", "id")])
    db["bisect_probes"].create({"id": int, "bisection_id": int, "key": str, "role": str, "subset_json": str,
                                "value": int, "spec_name": str, "step": int, "outcome": str, "runs": int,
                                "failures": int, "untestable": int, "rate": float, "lo": float, "hi": float,
                                "updated_at": str}, pk="id", foreign_keys=[("bisection_id", "bisections", "id")])
    db["bisect_probes"].create_index(["bisection_id", "key"], unique=True)
    db["bisect_campaigns"].create({"bisection_id": int, "campaign": str, "step": int}, pk="campaign",
                                  foreign_keys=[("bisection_id", "bisections", "id")])


def m009_ingest(db: sqlite_utils.Database) -> None:
    # Issue 29: an ingested log is copied into the runs directory (run_dir/log_path point at the copy, source_path
    # is where it came from, sacct_path the copied sacct text) and known by its content's SHA-256: the same log
    # ingested twice is refused (or, with --again, said to be a copy of that run).
    for column in ("content_sha256", "source_path", "sacct_path"):
        db["runs"].add_column(column, str)
    db["runs"].create_index(["content_sha256"])


MIGRATIONS: tuple[Callable[[sqlite_utils.Database], None], ...] = (m001_initial, m002_campaign_plan,
                                                                    m003_judge_error, m004_labels, m005_versions,
                                                                    m006_perf, m007_align, m008_bisect, m009_ingest)


def _recorded_migrations(db: sqlite_utils.Database) -> set[str]:
    if "_dsv4ctl_migrations" not in db.table_names():
        return set()
    return {row[0] for row in db.execute("SELECT name FROM _dsv4ctl_migrations")}


def check_version(db: sqlite_utils.Database, path: Path) -> list[str]:
    """Refuse a store written by a newer dsv4ctl; return the migrations this one still has to apply."""
    known = [m.__name__ for m in MIGRATIONS]
    done = _recorded_migrations(db)
    unknown = sorted(done - set(known))
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if unknown or version > len(known):
        what = f"migrations {', '.join(unknown)}" if unknown else f"schema version {version}"
        raise StoreError(f"{path}: written by a newer dsv4ctl ({what}; this one knows {len(known)} migrations): "
                         "upgrade dsv4ctl to use it")
    return [name for name in known if name not in done]


def migrate(db: sqlite_utils.Database, path: Path = Path("?")) -> list[str]:
    """Apply the migrations not yet recorded, all in one transaction; return the names applied."""
    conn = db.conn
    if not check_version(db, path):
        return []
    conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait on the busy timeout
    try:
        if "_dsv4ctl_migrations" not in db.table_names():
            db["_dsv4ctl_migrations"].create({"name": str, "applied_at": str}, pk="name")
        pending = check_version(db, path)  # again, under the lock: another process may have migrated
        applied = []
        for migration in MIGRATIONS:
            if migration.__name__ in pending:
                migration(db)
                db["_dsv4ctl_migrations"].insert({"name": migration.__name__, "applied_at": now()})
                applied.append(migration.__name__)
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS):d}")
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

    def to_json(self) -> dict[str, Any]:
        """The one JSON shape of a run (runs, show, status, submit): nested objects and arrays, never JSON inside a
        string, and null where the scheduler printed a placeholder ("Unknown", "None assigned")."""
        data = {k: (None if v in PLACEHOLDERS else v) for k, v in self.data.items()
                if k not in ("point_json", "switches_json", "tags")}
        data["point"] = json.loads(self.data.get("point_json") or "{}")
        data["switches"] = json.loads(self.data.get("switches_json") or "{}")
        data["tags"] = [t for t in (self.data.get("tags") or "").split(",") if t]
        data["ingested"] = bool(self.data.get("ingested"))
        return data


PLACEHOLDERS = ("Unknown", "None assigned", "None", "(null)", "")


class Store:
    """The results database. Opened read-only (`read_only`) when this process cannot write it: reading commands
    still work, and the first write is a StoreError naming the file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.read_only = not writable(self.path)
        conn = connect(self.path, self.read_only)
        if not self.read_only:
            try:
                set_wal(conn)
            except StoreError as exc:
                if not self.path.exists() or "read-only" not in str(exc):
                    raise
                conn.close()  # the file or its folder refuses writes after all (immutable, read-only mount)
                self.read_only = True
                conn = connect(self.path, True)
        self.db = sqlite_utils.Database(conn)
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

    def save_verdict(self, run_id: int, verdict: dict[str, Any], versions: dict[str, str] | None = None,
                     alignment: dict[str, Any] | None = None) -> None:
        """Store a verdict with its metrics, the software versions its log names (`versions`, by column: a version
        the log no longer names keeps what was recorded) and, for an align run, its alignment."""
        from ..modes.align.result import record_alignment
        from ..versions import VERSION_COLUMNS

        blocker = verdict.get("first_blocker") or {}
        with self.transaction():
            if alignment is not None:
                record_alignment(self, run_id, alignment)
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
            from ..analysis.perf import record_check

            record_check(self, run_id, bool(verdict["passed"]), {row["name"]: row["value"] for row in rows})

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


def known_state(state: str) -> str:
    """A scheduler state as stored (any case); UsageError listing the known ones otherwise."""
    from ..judge.states import ACTIVE, OWN

    known = sorted(FINAL | ACTIVE | OWN | {"INGESTED"})
    word = state.strip().upper()
    if word not in known:
        raise UsageError(f"unknown state {state!r}; known states: {', '.join(known)}")
    return word


def known_status(status: str) -> str:
    """A verdict status (any case); UsageError listing the known ones otherwise."""
    from ..judge.rules import STATUSES

    word = status.strip().lower()
    if word not in STATUSES:
        raise UsageError(f"unknown verdict status {status!r}; known statuses: {', '.join(STATUSES)}")
    return word


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


def open_store(path: str | os.PathLike[str] | None = None, announce: bool = True, must_exist: bool = False) -> Store:
    """The store at `path`, else $DSV4CTL_DB, else the project config's (dsv4ctl.toml), else ./results.db; created
    and migrated on first use. Unless it is ./results.db, which one is said on stderr (`announce`). Commands that
    only read pass `must_exist`: in a folder with no database they say so, instead of creating an empty one and
    showing nothing (`cd sub && dsv4ctl runs`)."""
    from ..config import database, database_note

    found = database(path)
    if must_exist and not Path(found.value).exists():
        error = StoreError(f"no results database at {found.value}")
        error.exit_code = 2  # something named that does not exist: a usage error (issue 26 M6)
        error.hint = ("run from the project's folder, give --db PATH, or write a dsv4ctl.toml there with "
                      "`dsv4ctl init` so every subfolder finds it")
        raise error
    note = database_note(found) if announce else None
    if note:
        from ..report import output

        output.info(note)
    return Store(found.value)
