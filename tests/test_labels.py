"""Run labels: --label and `label:` (J18, J18.1...), J<run id> otherwise, unique in a database, resolved by every
command that takes a run; re-judging a stored run keeps its recorded scheduler record."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.store import LabelTaken, MIGRATIONS, Store, migrate

from .conftest import FIXTURES
from .test_cli_errors import run_main
from .test_slurm import spec_file

LOGS = FIXTURES / "logs"


def test_submit_label_then_verdict_show_logs_by_label(cli, capsys, tmp_path):
    ok = spec_file(tmp_path, "ok", {"REPLAY_LOG": str(LOGS / "J17.log")})
    db = str(tmp_path / "r.db")
    done = cli("submit", ok, "--backend", "local", "--wait", "--db", db, "--runs-dir", tmp_path / "runs",
               "--label", "J18", "--json")
    assert done.exit_code == 0, done.output
    assert [r["label"] for r in json.loads(done.stdout)["runs"]] == ["J18"]
    verdict = cli("verdict", "J18", "--db", db, "--json")
    assert verdict.exit_code == 0 and json.loads(verdict.stdout)["status"] == "coherent"
    assert json.loads(cli("show", "J18", "--db", db, "--json").stdout)["label"] == "J18"
    assert json.loads(cli("show", "latest", "--db", db, "--json").stdout)["label"] == "J18"
    logs = cli("logs", "J18", "--db", db)
    assert logs.exit_code == 0 and "### STAGE: generate" in logs.stdout
    code, _, err = run_main(capsys, "submit", ok, "--backend", "local", "--db", db, "--runs-dir", tmp_path / "runs",
                            "--label", "J18")
    assert code == 2 and "taken by run 1" in err
    assert len(json.loads(cli("runs", "--db", db, "--json").stdout)) == 1  # nothing recorded


def test_repeats_get_suffixes_and_unlabelled_runs_get_their_id(cli, tmp_path):
    ok = spec_file(tmp_path, "ok", {"REPLAY_LOG": str(LOGS / "J17.log")}, repeats=3)
    plan = json.loads(cli("submit", ok, "--dry-run", "--backend", "local", "--label", "J18", "--json").stdout)
    assert [r["label"] for r in plan["runs"]] == ["J18.1", "J18.2", "J18.3"]
    ok.write_text(ok.read_text() + "label: K2\n")
    plan = json.loads(cli("submit", ok, "--dry-run", "--backend", "local", "--json").stdout)
    assert [r["label"] for r in plan["runs"]] == ["K2.1", "K2.2", "K2.3"]
    bad = cli("submit", ok, "--dry-run", "--backend", "local", "--label", "12")
    assert bad.exit_code == 2 and "is not a label" in bad.output


def test_labels_are_unique_and_default_to_the_run_id(tmp_path):
    store = Store(tmp_path / "r.db")
    experiment = store.experiment_id("e", "h", "{}", "src")
    first = store.add_run(experiment_id=experiment, token="a", state="PLANNED", ingested=0)
    assert store.find_run("r1").id == first  # issue 26 m1: automatic labels are r<run id>, their own namespace
    store.add_run(experiment_id=experiment, token="b", state="PLANNED", ingested=0, label="J3")
    third = store.add_run(experiment_id=experiment, token="c", state="PLANNED", ingested=0)
    assert store.find_run(str(third)).label == "r3"  # J3 chosen by hand never collides with it
    with pytest.raises(LabelTaken):
        store.add_run(experiment_id=experiment, token="d", state="PLANNED", ingested=0, label="J3")


def test_an_old_database_gets_labels_for_its_runs(tmp_path):
    import sqlite_utils

    db = sqlite_utils.Database(tmp_path / "old.db")
    for migration in MIGRATIONS[:3]:
        migration(db)
    db["_dsv4ctl_migrations"].insert_all([{"name": m.__name__, "applied_at": "x"} for m in MIGRATIONS[:3]],
                                         pk="name")
    db["experiments"].insert({"id": 1, "name": "e", "spec_hash": "h", "spec_json": "{}"})
    db["runs"].insert({"id": 7, "experiment_id": 1, "token": "t", "state": "COMPLETED", "ingested": 0})
    db.conn.commit()
    db.conn.close()
    store = Store(tmp_path / "old.db")
    assert "m004_labels" in store.applied and store.find_run("J7").id == 7
    assert migrate(store.db) == []


def test_ingest_labels_by_job_id_and_rejudging_keeps_the_recorded_sacct(cli, tmp_path):
    db = str(tmp_path / "r.db")
    cli("ingest", "--log", LOGS / "J08.log", "--sacct", LOGS / "J08.sacct", "--experiment", "report", "--db", db)
    first = json.loads(cli("verdict", "J08", "--db", db, "--json").stdout)
    # regression: re-judging an ingested run dropped its sacct record, and the false-green reason with it
    assert first["scheduler"]["state"] == "COMPLETED" and first["false_green"]
    assert any("COMPLETED 0:0" in reason for reason in first["reasons"])
    again = json.loads(cli("verdict", "J08", "--db", db, "--json").stdout)
    assert again["reasons"] == first["reasons"] and again["scheduler"] == first["scheduler"]
    # the same log again is refused since issue 29 (S11); --again records it, as this test did before
    second = cli("ingest", "--log", LOGS / "J08.log", "--experiment", "report", "--db", db, "--label", "mine",
                 "--again")
    assert "(mine)" in second.stdout
    third = json.loads(cli("ingest", "--log", LOGS / "J08.log", "--sacct", LOGS / "J08.sacct", "--experiment",
                           "report", "--db", db, "--json", "--again").stdout)
    assert third["label"] == "r3"  # J08 is taken: the automatic label, never a J08-2 suffix (issue 26 m1)


def test_compare_takes_labels(cli, tmp_path):
    db = str(tmp_path / "r.db")
    for job in ("J12", "J17"):
        cli("ingest", "--log", LOGS / f"{job}.log", "--sacct", LOGS / f"{job}.sacct", "--experiment", job.lower(),
            "--db", db)
    done = cli("compare", "J12", "J17", "--db", db, "--json")
    data = json.loads(done.stdout)
    assert data["baseline"]["name"] == "J12" and len(data["baseline"]["runs"]) == 1
