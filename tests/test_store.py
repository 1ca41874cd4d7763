"""The store: migrations from a blank database, atomicity, concurrent writers, lookups."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from dsv4ctl.store import migrations as store_module
from dsv4ctl.store import MIGRATIONS, RunNotFound, Store, StoreError, open_store


def test_blank_database_reaches_the_current_schema(tmp_path):
    s = open_store(tmp_path / "r.db")
    assert s.applied == [m.__name__ for m in MIGRATIONS]
    assert set(s.db.table_names()) >= {"_dsv4ctl_migrations", "experiments", "campaigns", "runs", "verdicts",
                                       "metrics"}
    assert {c.name for c in s.db["runs"].columns} >= {"job_id", "state", "token", "git_sha", "dsv4ctl_version",
                                                       "switches_json", "max_rss_kib", "node", "vllm_version",
                                                       "torch_version", "triton_version"}
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = open_store(tmp_path / "r.db")
    assert again.applied == []


def test_env_variable_chooses_the_database(tmp_path, monkeypatch):
    monkeypatch.setenv("DSV4CTL_DB", str(tmp_path / "env.db"))
    open_store()
    assert (tmp_path / "env.db").exists()


def test_a_failing_migration_leaves_nothing_half_written(tmp_path, monkeypatch):
    def m002_broken(db):
        db["half"].create({"id": int}, pk="id")
        raise RuntimeError("boom")

    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS + (m002_broken,))
    with pytest.raises(RuntimeError):
        open_store(tmp_path / "r.db")
    conn = sqlite3.connect(tmp_path / "r.db")
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "half" not in tables and "runs" not in tables  # the whole batch rolled back


def test_not_a_database_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(store_module.StoreError, match="not a usable SQLite database"):
        open_store(bad)


def test_runs_are_found_by_id_job_id_or_token(tmp_path):
    s = open_store(tmp_path / "r.db")
    experiment = s.experiment_id("e", "abc", "{}", "e.yaml")
    run_id = s.add_run(experiment_id=experiment, backend="slurm", token="tok1", state="PENDING", job_id="42_1",
                       ingested=0)
    assert s.find_run(str(run_id)).token == "tok1"
    assert s.find_run("42_1").id == run_id and s.find_run("tok1").id == run_id
    with pytest.raises(RunNotFound):
        s.find_run("nope")


def test_versions_are_stored_with_a_verdict_and_kept_when_a_log_no_longer_names_them(tmp_path):
    s = open_store(tmp_path / "r.db")
    run_id = s.add_run(experiment_id=s.experiment_id("e", "h", "{}", "x"), backend="local", token="t",
                       state="COMPLETED", ingested=0)
    verdict = {"status": "coherent", "passed": True, "false_green": False}
    s.save_verdict(run_id, verdict, {"vllm_version": "0.11.1", "torch_version": "2.6.0", "node": "not a version"})
    s.save_verdict(run_id, verdict, {"triton_version": "3.2.0"})  # raw.log rotated: vllm and torch lines gone
    row = s.find_run(str(run_id))
    assert (row.vllm_version, row.torch_version, row.triton_version, row.node) == ("0.11.1", "2.6.0", "3.2.0", None)


def test_verdict_and_metrics_are_stored_together(tmp_path):
    s = open_store(tmp_path / "r.db")
    run_id = s.add_run(experiment_id=s.experiment_id("e", "h", "{}", "x"), backend="local", token="t",
                       state="COMPLETED", ingested=0)
    verdict = {"status": "coherent", "passed": True, "false_green": False, "first_blocker": None, "bos_run": 0,
               "py_exit": 0, "probe_verdict": "COHERENT", "engine_ready_s": 3.5,
               "metrics": {"gen_s": 1.25, "output_tokens": 32, "note": "text is skipped"}}
    s.save_verdict(run_id, verdict)
    assert s.metrics(run_id) == {"gen_s": 1.25, "output_tokens": 32.0, "engine_ready_s": 3.5}
    assert s.verdict(run_id)["status"] == "coherent"
    assert [r.id for r in s.runs_in_flight()] == []


WRITER = """
import sys
from dsv4ctl.store import open_store
s = open_store(sys.argv[1])
e = s.experiment_id("e", "h", "{}", "x")
for i in range(150):
    s.add_run(experiment_id=e, backend="local", token=f"{sys.argv[2]}-{i}", state="PENDING", ingested=0)
"""


def test_concurrent_writers_never_see_database_is_locked(tmp_path):
    db = str(tmp_path / "r.db")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, db, f"w{n}"], stderr=subprocess.PIPE, text=True)
             for n in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert open_store(db).db["runs"].count == 600


def test_a_store_of_the_first_schema_reaches_the_current_one(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS[:1])
    old = open_store(tmp_path / "r.db")
    # written as the first dsv4ctl wrote it (today's add_run fills columns that schema lacks)
    run_id = old.db["runs"].insert({"experiment_id": old.experiment_id("e", "h", "{}", "x"), "backend": "local",
                                    "token": "t", "state": "COMPLETED", "ingested": 0}).last_pk
    old.close()
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS)
    s = open_store(tmp_path / "r.db")
    assert s.applied == [m.__name__ for m in MIGRATIONS[1:]]
    assert {"planned_runs", "submitted_at"} <= {c.name for c in s.db["campaigns"].columns}
    assert s.find_run(str(run_id)).judge_error is None
    assert s.find_run(f"J{run_id}").id == run_id  # m004: runs recorded before get J<run id>
    assert s.find_run(str(run_id)).vllm_version is None  # m005: versions unknown until judged again
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_values_sqlite_cannot_hold_are_stored_as_null(tmp_path):
    s = open_store(tmp_path / "r.db")
    big = 10**400
    run_id = s.add_run(experiment_id=s.experiment_id("e", "h", "{}", "x"), backend="ingest", token="t",
                       state="COMPLETED", exit_code=big, ingested=1)
    s.save_verdict(run_id, {"status": "coherent", "passed": True, "false_green": False, "bos_run": big,
                            "engine_ready_s": float("inf"), "metrics": {"gen_s": 2.0, "huge": big,
                                                                        "nan": float("nan")}})
    assert s.find_run(str(run_id)).exit_code is None
    assert s.verdict(run_id)["bos_run"] == big  # the JSON keeps it exactly
    assert s.metrics(run_id) == {"gen_s": 2.0}


def test_m009_gives_a_store_of_m008_the_ingest_columns_and_old_ingested_runs_stay_rejudgeable(tmp_path, monkeypatch,
                                                                                               cli):
    """Issue 29: content_sha256/source_path/sacct_path from m009_ingest; a run ingested before it (log_path at the
    original, no hash) is re-judged from that path as before, and never counts as a duplicate."""
    from .conftest import FIXTURES

    log = tmp_path / "J17.log"
    log.write_bytes((FIXTURES / "logs" / "J17.log").read_bytes())
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS[:8])
    old = open_store(tmp_path / "r.db")
    assert "content_sha256" not in {c.name for c in old.db["runs"].columns}
    run_id = old.add_run(experiment_id=old.experiment_id("e", "h", '{"name": "e", "ingested": true}', "x"),
                         backend="ingest", token="t", state="INGESTED", ingested=1, label="OLD",
                         run_dir=str(tmp_path), log_path=str(log), point_json="{}", repeat_index=0)
    old.close()
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS)
    s = open_store(tmp_path / "r.db")
    assert s.applied == [m.__name__ for m in MIGRATIONS[8:]]  # m009_ingest, then the ones added after it
    assert s.find_run(str(run_id)).content_sha256 is None and s.runs_with_content("x" * 64) == []
    s.close()
    assert cli("verdict", "OLD", "--db", tmp_path / "r.db").exit_code == 0
    done = cli("ingest", "--log", log, "--experiment", "e", "--db", tmp_path / "r.db", "--json")
    assert done.exit_code == 0  # the old run has no hash: not a duplicate of it


def _open_and_report(path: str, queue) -> None:
    try:
        queue.put(("opened", Store(path).read_only))
    except StoreError as exc:
        queue.put(("error", str(exc)))


def test_processes_creating_one_new_database_at_once_all_get_write_access(tmp_path):
    """Regression (CI of stop 30): a process whose `PRAGMA journal_mode = WAL` met another's lock on a new file fell
    back to read-only ("read-only and older than this dsv4ctl") though it could write. 3 processes x 40 new files;
    the old code failed about 4% of the opens."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    results = []
    for n in range(40):
        queue = context.Queue()
        procs = [context.Process(target=_open_and_report, args=(str(tmp_path / f"{n}.db"), queue)) for _ in range(3)]
        for proc in procs:
            proc.start()
        results += [queue.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join()
    assert [r for r in results if r != ("opened", False)] == []
