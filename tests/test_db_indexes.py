"""Issue 25: every read command's queries use an index (EXPLAIN QUERY PLAN of the SQL each command really runs,
caught by SQLite's trace callback), and `runs` pages by keyset."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dsv4ctl.cli import app
from dsv4ctl.store import dbfile, open_store
from dsv4ctl.store.queries import RunFilter, ab_campaigns, in_flight_ids, newest_runs

# Tables that grow with every run: a full scan of one is what made `runs` take 54 s on 100k runs.
PER_RUN_TABLES = ("runs", "verdicts", "metrics", "perf_checks", "alignments", "align_rungs")
PAGE = re.compile(r"ORDER BY runs\.id (DESC|ASC) LIMIT \d+")  # a keyset page: walks the rowid, stops at LIMIT


def fill(path, campaigns=3, per_campaign=4):
    store = open_store(path)
    n = 0
    for c in range(campaigns):
        base = store.experiment_id(f"exp{c % 2}", f"h{c}", "{}", "test")
        cand = store.experiment_id("cand", f"h{c}", "{}", "test")
        campaign = store.create_campaign(f"camp{c}", "local", "dsv4ctl submit --ab")
        for i in range(per_campaign):
            n += 1
            run = store.add_run(campaign_id=campaign, experiment_id=base if i % 2 else cand, token=f"t{n}",
                                state="COMPLETED" if i else "RUNNING", backend="local", ingested=0,
                                point_json="{}", side="baseline" if i % 2 else "candidate", git_sha=f"g{c}",
                                submitted_at=f"2026-12-0{c + 1}T00:00:00+00:00")
            if i:
                store.save_verdict(run, {"status": "coherent", "passed": True, "false_green": False,
                                         "metrics": {"gen_s": 1.0 + i}})
    store.close()


@pytest.fixture
def traced(tmp_path, monkeypatch):
    """The database, and a function running a command and returning every SELECT it sent to SQLite."""
    db = tmp_path / "r.db"
    fill(db)
    sent: list[str] = []
    real_open = dbfile._open

    def tracing_open(target, path):
        conn = real_open(target, path)
        conn.set_trace_callback(sent.append)
        return conn

    monkeypatch.setattr(dbfile, "_open", tracing_open)

    def run(*args):
        sent.clear()
        result = CliRunner().invoke(app, [*args, "--db", str(db)])
        assert result.exit_code in (0, 1, 5), result.output
        return [q for q in sent if q.lstrip().upper().startswith(("SELECT", "WITH"))]

    return db, run


def plans(db, queries):
    conn = sqlite3.connect(db)
    return [(q, [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + q)]) for q in queries]


def full_scans(db, queries):
    """(query, plan step) for each full scan of a per-run table that is not a bounded keyset page."""
    out = []
    for query, plan in plans(db, queries):
        for step in plan:
            scanned = re.match(r"SCAN (\w+)", step)
            if not scanned:
                continue
            table = scanned.group(1)
            alias = re.search(rf"\b(\w+) (?:AS )?{table}\b", query)  # `runs r` scans as `SCAN r`
            name = table if table in PER_RUN_TABLES else (alias.group(1) if alias else table)
            if name in PER_RUN_TABLES and not (name == "runs" and PAGE.search(query) and "TEMP B-TREE" not in
                                               " ".join(plan)):
                out.append((query[:160], step))
    return out


READ_COMMANDS = [
    ("runs",), ("runs", "--json"), ("runs", "--campaign", "camp1"), ("runs", "--experiment", "exp1"),
    ("runs", "--status", "coherent"), ("runs", "--state", "COMPLETED"), ("runs", "--since", "2026-12-02"),
    ("runs", "--all", "--json"), ("runs", "--before", "5"), ("campaigns",), ("campaigns", "--json"),
    ("status",), ("status", "--campaign", "camp1"), ("show", "latest"), ("history", "exp0"),
    ("report", "camp1", "--json"), ("compare", "campaign:camp0", "campaign:camp1"),
]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_every_read_command_uses_indexes(traced, command):
    db, run = traced
    queries = run(*command)
    assert queries, "the trace caught nothing: the test would pass on anything"
    assert full_scans(db, queries) == []


def test_compare_by_experiment_names_uses_indexes(traced):
    db, run = traced
    assert full_scans(db, run("compare", "exp0", "cand")) == []


def test_filters_use_their_own_index(traced):
    db, _ = traced
    store = open_store(db)
    expected = {"campaign": "idx_runs_campaign", "experiment": "idx_runs_experiment_id",
                "status": "idx_verdicts_status", "state": "idx_runs_state"}
    values = {"campaign": "camp1", "experiment": "exp1", "status": "coherent", "state": "COMPLETED"}
    sent: list[str] = []
    store.db.conn.set_trace_callback(sent.append)
    for field, index in expected.items():
        sent.clear()
        newest_runs(store, RunFilter(**{field: values[field]}), 50)
        query = next(q for q in sent if q.startswith("SELECT runs.*"))
        assert index in " ".join(plans(db, [query])[0][1]), (field, plans(db, [query]))


def test_in_flight_reads_the_followed_index(traced):
    db, _ = traced
    store = open_store(db)
    assert in_flight_ids(store) == [r.id for r in store.runs_in_flight()] != []
    sent: list[str] = []
    store.db.conn.set_trace_callback(sent.append)
    in_flight_ids(store)
    steps = " ".join(s for _, plan in plans(db, [q for q in sent if q.startswith(("SELECT", "WITH"))])
                     for s in plan)
    assert "idx_runs_awaiting_verdict" in steps and "SCAN runs " not in steps + " "  # m013: not every final run


def ab_campaigns_of(store, baseline: str, candidate: str) -> list[str]:
    """The scan analysis/sides.py ran before it read the index (GROUP BY over every run): the oracle."""
    rows = store.db.execute(
        "SELECT c.name FROM campaigns c JOIN runs r ON r.campaign_id = c.id "
        "JOIN experiments e ON e.id = r.experiment_id GROUP BY c.id "
        "HAVING sum(r.side = 'baseline' AND e.name = ?) > 0 AND sum(r.side = 'candidate' AND e.name = ?) > 0 "
        "AND sum(NOT ((r.side = 'baseline' AND e.name = ?) OR (r.side = 'candidate' AND e.name = ?))) = 0 "
        "ORDER BY c.id DESC", [baseline, candidate, baseline, candidate]).fetchall()
    return [r[0] for r in rows]


def test_ab_campaigns_answers_as_the_scan_did(traced):
    db, _ = traced
    store = open_store(db)
    for pair in (("exp0", "cand"), ("exp1", "cand"), ("cand", "exp0"), ("nope", "cand")):
        assert ab_campaigns(store, *pair) == ab_campaigns_of(store, *pair)
    assert ab_campaigns(store, "exp0", "cand") == ["camp2", "camp0"]


def test_runs_pages_by_keyset(traced, tmp_path):
    db, run = traced
    out = CliRunner().invoke(app, ["runs", "-n", "5", "--json", "--db", str(db)])
    first = [r["id"] for r in json.loads(out.stdout)]
    assert first == [8, 9, 10, 11, 12]
    assert "--before 8" in out.stderr
    page2 = [r["id"] for r in json.loads(CliRunner().invoke(
        app, ["runs", "-n", "5", "--before", "8", "--json", "--db", str(db)]).stdout)]
    assert page2 == [3, 4, 5, 6, 7]
    every = [r["id"] for r in json.loads(CliRunner().invoke(app, ["runs", "--all", "--json", "--db",
                                                                  str(db)]).stdout)]
    assert every == list(range(1, 13))
    assert [r["id"] for r in json.loads(CliRunner().invoke(
        app, ["runs", "--since", "2026-12-03", "--json", "--db", str(db)]).stdout)] == [9, 10, 11, 12]
    both = subprocess.run([sys.executable, "-c", "from dsv4ctl.cli import main; main()", "runs", "--all", "-n", "3", "--db", str(db)],
                          capture_output=True, text=True)
    assert both.returncode == 2 and "--all and --limit" in both.stderr and "Traceback" not in both.stderr


def test_default_listing_is_the_newest_fifty(tmp_path):
    db = tmp_path / "r.db"
    fill(db, campaigns=2, per_campaign=30)
    rows = json.loads(CliRunner().invoke(app, ["runs", "--json", "--db", str(db)]).stdout)
    assert [r["id"] for r in rows] == list(range(11, 61))
