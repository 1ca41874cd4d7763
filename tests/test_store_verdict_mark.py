"""Issue 25, m013: `runs.has_verdict` follows the verdicts table through every write (save_verdict, a REPLACE, a
delete, a moved verdict, db import), is filled for a database migrated from m012, and lets `status` find the
finished jobs not judged yet from a partial index that never holds the judged history; the store opens and reads
without importing sqlite-utils or numpy."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from dsv4ctl.store import migrations, open_store
from dsv4ctl.store.queries import in_flight_ids
from dsv4ctl.store.values import FINAL

VERDICT = {"status": "coherent", "passed": True, "false_green": False, "metrics": {"gen_s": 1.0}}


def mark_agrees(store) -> bool:
    """The mark of every run is whether a verdict row names it."""
    return store.db.execute("SELECT count(*) FROM runs WHERE has_verdict != "
                            "EXISTS (SELECT 1 FROM verdicts WHERE run_id = runs.id)").fetchone()[0] == 0


def old_in_flight(store) -> list[int]:
    """What in_flight_ids found before m013 (the walk over every final run): the oracle."""
    finals = sorted(FINAL)
    waiting = [s for (s,) in store.db.execute("SELECT DISTINCT state FROM runs")
               if s not in FINAL and s not in ("PLANNED", "SUBMIT_FAILED", "LOST")]
    ids = {r[0] for r in store.db.execute(
        f"SELECT id FROM runs WHERE state IN ({','.join('?' * len(waiting))}) AND ingested = 0", waiting)}
    ids |= {r[0] for r in store.db.execute(
        f"SELECT id FROM runs WHERE state IN ({','.join('?' * len(finals))}) AND ingested = 0 AND judge_error IS "
        "NULL AND NOT EXISTS (SELECT 1 FROM verdicts WHERE verdicts.run_id = runs.id)", finals)}
    return sorted(ids)


def fill(store, states):
    exp = store.experiment_id("e", "h", "{}", "test")
    return [store.add_run(experiment_id=exp, token=f"t{i}", state=state, backend="local", ingested=0,
                          point_json="{}") for i, state in enumerate(states)]


def test_the_mark_follows_every_write_of_a_verdict(tmp_path):
    store = open_store(tmp_path / "r.db")
    ids = fill(store, ["COMPLETED", "COMPLETED", "FAILED", "RUNNING", "COMPLETED", "PLANNED"])
    assert mark_agrees(store) and in_flight_ids(store) == old_in_flight(store) == ids[:5]
    store.save_verdict(ids[0], VERDICT)
    store.save_verdict(ids[0], {**VERDICT, "status": "degenerate", "passed": False})  # judged again: the upsert
    store.save_verdict(ids[1], VERDICT)
    assert [r[0] for r in store.db.execute("SELECT has_verdict FROM runs ORDER BY id")] == [1, 1, 0, 0, 0, 0]
    store.db.execute("INSERT OR REPLACE INTO verdicts (run_id, status, passed, false_green) "
                     "VALUES (?, 'coherent', 1, 0)", [ids[1]])
    store.db.execute("DELETE FROM verdicts WHERE run_id = ?", [ids[0]])
    store.db.execute("UPDATE verdicts SET run_id = ? WHERE run_id = ?", [ids[4], ids[1]])
    store.update_run(ids[2], judge_error="sacct said nothing")
    assert mark_agrees(store)
    assert in_flight_ids(store) == old_in_flight(store) == [ids[0], ids[1], ids[3]]
    assert "has_verdict" not in store.runs_by_ids([ids[4]])[0].to_json()  # the run's JSON shape is unchanged


def test_a_database_from_m012_is_marked_when_migrated(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:12])
        old = open_store(path)
        ids = fill(old, ["COMPLETED"] * 4)
        old.save_verdict(ids[1], VERDICT)
        old.save_verdict(ids[3], VERDICT)
        old.close()
    store = open_store(path)
    assert store.applied == ["m013_verdict_mark"]
    assert [r[0] for r in store.db.execute("SELECT has_verdict FROM runs ORDER BY id")] == [0, 1, 0, 1]
    assert in_flight_ids(store) == old_in_flight(store) == [ids[0], ids[2]]


def test_an_imported_run_is_marked_by_its_verdict(tmp_path):
    from dsv4ctl.store.merge import import_path

    source = open_store(tmp_path / "a.db")
    ids = fill(source, ["COMPLETED", "COMPLETED"])
    source.save_verdict(ids[0], VERDICT)
    source.close()
    target = open_store(tmp_path / "b.db")
    import_path(target, tmp_path / "a.db")
    assert mark_agrees(target)
    assert sorted(r[0] for r in target.db.execute("SELECT has_verdict FROM runs")) == [0, 1]


def test_status_reads_only_the_runs_awaiting_a_verdict(tmp_path):
    """The final-run query's plan is the partial index, and the index holds none of the judged runs."""
    store = open_store(tmp_path / "r.db")
    ids = fill(store, ["COMPLETED"] * 30 + ["RUNNING"])
    for run in ids[:29]:
        store.save_verdict(run, VERDICT)
    sent: list[str] = []
    store.db.conn.set_trace_callback(sent.append)
    assert in_flight_ids(store) == [ids[29], ids[30]]
    query = next(q for q in sent if "has_verdict = 0" in q)
    plan = " ".join(row[3] for row in sqlite3.connect(tmp_path / "r.db").execute("EXPLAIN QUERY PLAN " + query))
    assert "idx_runs_awaiting_verdict" in plan and "SCAN runs" not in plan
    held = store.db.execute("SELECT count(*) FROM runs INDEXED BY idx_runs_awaiting_verdict "
                            "WHERE has_verdict = 0 AND ingested = 0 AND judge_error IS NULL").fetchone()[0]
    assert held == 2


def test_opening_and_reading_the_store_imports_neither_sqlite_utils_nor_numpy(tmp_path):
    path = tmp_path / "r.db"
    store = open_store(path)
    fill(store, ["COMPLETED"])
    store.close()
    code = ("import sys\nfrom dsv4ctl.store import open_store\nfrom dsv4ctl.store.queries import in_flight_ids\n"
            f"s = open_store({str(path)!r}); in_flight_ids(s); s.runs_by_ids([1]); s.find_run('latest')\n"
            "print(','.join(m for m in ('sqlite_utils', 'numpy') if m in sys.modules) or 'none')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "none", done.stderr


def test_db_check_finds_a_wrong_mark(tmp_path):
    from dsv4ctl.store.check import check

    store = open_store(tmp_path / "r.db")
    ids = fill(store, ["COMPLETED", "COMPLETED"])
    store.save_verdict(ids[0], VERDICT)
    assert check(store).ok
    store.db.execute("UPDATE runs SET has_verdict = 1 WHERE id = ?", [ids[1]])  # by hand, past the triggers
    assert [p for p in check(store).problems if p.startswith("verdict marks: 1 run(s)")]
