"""The schema: numbered migrations applied in one transaction when a store is opened, recorded in
`_dsv4ctl_migrations` (and `PRAGMA user_version`), and the refusal of a file a newer dsv4ctl wrote. A migration is a
function `mNNN_name(db)`; add it at the end of MIGRATIONS, never edit one that has shipped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .dbfile import StoreError
from .values import now

if TYPE_CHECKING:  # the store's Database (store/dbfile.py) hands a migration sqlite-utils' whole API
    import sqlite_utils


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
    # Issue 17: each judged run's check against its performance reference (dsv4ctl/analysis/perf.py), and the references
    # set per experiment by `dsv4ctl reference set` (ingested runs have no spec to hold one).
    db["perf_checks"].create({"run_id": int, "within": int, "source": str, "reference_json": str,
                              "failures_json": str}, pk="run_id", foreign_keys=[("run_id", "runs", "id")])
    db["perf_references"].create({"experiment": str, "perf_json": str, "source": str, "set_at": str},
                                 pk="experiment")


def m007_align(db: sqlite_utils.Database) -> None:
    # Issue 15: an align run's result (dsv4ctl/modes/align/result.py), recomputed from its capture files when it is judged,
    # and one row per rung (cache, attention, each layer, final norm, logits, greedy, perplexity) for show/report.
    db["alignments"].create({"run_id": int, "aligned": int, "verdict": str, "first_rung": str, "first_layer": int,
                             "reference": str, "result_json": str, "judged_at": str}, pk="run_id",
                            foreign_keys=[("run_id", "runs", "id")])
    db["align_rungs"].create({"run_id": int, "position": int, "name": str, "kind": str, "layer": int, "ok": int,
                              "cosine": float, "max_abs": float, "rel_l2": float}, pk=("run_id", "position"),
                             foreign_keys=[("run_id", "runs", "id")])


def m008_bisect(db: sqlite_utils.Database) -> None:
    # Issue 16: a bisection (dsv4ctl/bisect/run.py), its steps and its probes (a subset of changes or a numeric value,
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


def m010_indexes(db: sqlite_utils.Database) -> None:
    # Issue 25: a database a team fills for a year (100k runs and more). An index for every filter and join the
    # commands use (tests/test_db_indexes.py reads EXPLAIN QUERY PLAN for each), and the provenance of runs
    # brought in by `dsv4ctl db import`: `runs.origin_json` (who, which host, which database first recorded the
    # run; NULL for a run recorded here) and one `imports` row per import.
    db.execute("CREATE INDEX IF NOT EXISTS idx_runs_campaign ON runs (campaign_id, state, ingested)")
    db.execute("CREATE INDEX IF NOT EXISTS idx_runs_experiment_id ON runs (experiment_id)")
    db.execute("CREATE INDEX IF NOT EXISTS idx_runs_recorded_at ON runs (coalesce(submitted_at, updated_at))")
    # runs_in_flight: the runs a poll follows, from an index that skips the judged-with-an-error ones
    db.execute("CREATE INDEX IF NOT EXISTS idx_runs_followed ON runs (state, ingested) WHERE judge_error IS NULL")
    db.execute("CREATE INDEX IF NOT EXISTS idx_verdicts_status ON verdicts (status)")
    db.execute("CREATE INDEX IF NOT EXISTS idx_bisect_campaigns_bisection ON bisect_campaigns (bisection_id)")
    db["runs"].add_column("origin_json", str)
    db["imports"].create({"id": int, "bundle_sha256": str, "source_json": str, "runs_added": int,
                          "runs_present": int, "notes_json": str, "imported_at": str}, pk="id")


def m011_profiles(db: sqlite_utils.Database) -> None:
    # Issue 23: where the time went in a profiled run (dsv4ctl/profile/store.py), one row per run, rank, window and
    # hash of the category rules used (a breakdown under other rules is another row, never an equal), and its
    # category, module and top-kernel figures.
    key = {"run_id": int, "rank": int, "window": str, "rules_hash": str}
    db["profiles"].create({**key, "trace_path": str, "device": str, "kernel_us": float, "busy_us": float,
                           "idle_us": float, "span_us": float, "steps": int, "launches": int,
                           "unattributed_us": float, "events": int, "meta_json": str, "created_at": str},
                          pk=tuple(key), foreign_keys=[("run_id", "runs", "id")])
    db["profile_rows"].create({**key, "kind": str, "name": str, "kernel_us": float, "count": int},
                              foreign_keys=[("run_id", "runs", "id")])
    db.execute("CREATE INDEX IF NOT EXISTS idx_profile_rows_key ON profile_rows (run_id, rank, window, rules_hash)")


def m012_promotions(db: sqlite_utils.Database) -> None:
    # Issue 24: a promotion (dsv4ctl/promote/store.py): the change to the stable set, the stable file it started
    # from (its sha and switches), each gate's outcome with its reason, figures and runs, and the campaigns each
    # gate submitted (recorded before they are submitted, so a promotion killed anywhere resumes).
    db["promotions"].create({"id": int, "inputs_key": str, "kind": str, "command": str, "backend": str,
                             "stable_path": str, "stable_sha": str, "changes_json": str, "baseline_json": str,
                             "settings_json": str, "state": str, "decision": str, "reason": str,
                             "diff_json": str, "commit_sha": str, "created_at": str, "updated_at": str}, pk="id")
    db["promotions"].create_index(["inputs_key"])
    db["promotion_gates"].create({"promotion_id": int, "gate": str, "position": int, "outcome": str,
                                  "reason": str, "figures_json": str, "runs_json": str, "updated_at": str},
                                 pk=("promotion_id", "gate"), foreign_keys=[("promotion_id", "promotions", "id")])
    db["promotion_campaigns"].create({"promotion_id": int, "gate": str, "campaign": str}, pk="campaign",
                                     foreign_keys=[("promotion_id", "promotions", "id")])
    db.execute("CREATE INDEX IF NOT EXISTS idx_promotion_campaigns ON promotion_campaigns (promotion_id, gate)")


def m013_verdict_mark(db: sqlite_utils.Database) -> None:
    # Issue 25: `status` finds the finished jobs not judged yet. Walking every final run for its verdict grows
    # with the database (1.6 s at 1M runs); `runs.has_verdict` marks a run that has one, kept in step by triggers
    # on verdicts (every write: save_verdict's upsert, db import, a REPLACE, a delete), and a partial index holds
    # only the runs that may still await one (store/queries.py in_flight_ids). Filling the mark reads every
    # verdict once (about a minute at 1M runs).
    db.execute("ALTER TABLE runs ADD COLUMN has_verdict INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE runs SET has_verdict = 1 WHERE id IN (SELECT run_id FROM verdicts)")
    db.execute("CREATE TRIGGER verdict_marks_run AFTER INSERT ON verdicts BEGIN "
               "UPDATE runs SET has_verdict = 1 WHERE id = NEW.run_id; END")
    db.execute("CREATE TRIGGER verdict_unmarks_run AFTER DELETE ON verdicts BEGIN "
               "UPDATE runs SET has_verdict = EXISTS (SELECT 1 FROM verdicts WHERE run_id = OLD.run_id) "
               "WHERE id = OLD.run_id; END")
    db.execute("CREATE TRIGGER verdict_moves_run AFTER UPDATE OF run_id ON verdicts BEGIN "
               "UPDATE runs SET has_verdict = EXISTS (SELECT 1 FROM verdicts WHERE run_id = OLD.run_id) "
               "WHERE id = OLD.run_id; UPDATE runs SET has_verdict = 1 WHERE id = NEW.run_id; END")
    db.execute("CREATE INDEX IF NOT EXISTS idx_runs_awaiting_verdict ON runs (state) "
               "WHERE has_verdict = 0 AND ingested = 0 AND judge_error IS NULL")


MIGRATIONS: tuple[Callable[[sqlite_utils.Database], None], ...] = (m001_initial, m002_campaign_plan,
                                                                    m003_judge_error, m004_labels, m005_versions,
                                                                    m006_perf, m007_align, m008_bisect, m009_ingest,
                                                                    m010_indexes, m011_profiles, m012_promotions,
                                                                    m013_verdict_mark)


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
