"""Campaigns: regression suites (planning, skips with reasons, the pass/fail matrix), sweeps that find an injected
batch boundary with Wilson intervals (on the live cluster), and reports checked in a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from dsv4ctl.campaign.suite import plan_suite
from dsv4ctl.campaign.sweep import wilson

from .conftest import EXPERIMENTS, FIXTURES
from .test_slurm import cluster, dsv4ctl, spec_file  # noqa: F401  (the live-cluster fixture)

LOGS = FIXTURES / "logs"


def test_wilson_interval_by_hand():
    lo, hi = wilson(0, 6)
    assert lo == 0.0 and hi == pytest.approx(0.390, abs=0.001)  # 0/6: up to 39%
    lo, hi = wilson(3, 6)
    assert (lo, hi) == (pytest.approx(0.188, abs=0.001), pytest.approx(0.812, abs=0.001))
    assert wilson(6, 6)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)


def test_regression_suites_cover_the_report_and_say_what_needs_the_cluster():
    dcu = plan_suite(EXPERIMENTS / "regression", "cpu")
    assert dcu.runnable == [] and len(dcu.skipped) == 10
    assert all("needs the DCU cluster" in reason for _, reason in dcu.skipped)
    assert len(plan_suite(EXPERIMENTS / "regression", "gfx936").runnable) == 10
    cpu = plan_suite(EXPERIMENTS / "regression-cpu", "cpu")
    assert len(cpu.runnable) == 8 and cpu.skipped == []


def test_sweep_finds_an_injected_batch_boundary_on_the_cluster(cluster, tmp_path):  # noqa: F811
    spec = spec_file(tmp_path, "batch-sweep", {"REPLAY_SYNTH": "1", "REPLAY_FAULT_AT_BATCH": "8",
                                               "REPLAY_FAULT_RATE": "0.7"}, repeats=6,
                     extra="matrix:\n  batch: [1, 2, 4, 8]\n")
    db = str(tmp_path / "r.db")
    args = ["--backend", "slurm", "--db", db, "--runs-dir", str(tmp_path / "runs"), "--campaign", "boundary"]
    done = dsv4ctl("sweep", str(spec), *args, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    points = {p["point"]["batch"]: p for p in summary["points"]}
    assert [points[b]["failures"] for b in (1, 2, 4)] == [0, 0, 0]
    assert points[8]["failures"] >= 1 and points[8]["judged"] == 6
    assert summary["boundary"]["point"] == {"batch": 8}
    assert summary["clean_below"]["point"] == {"batch": 4} and summary["clean_below"]["interval"][1] < 0.4
    # resumable: running it again on the same campaign submits nothing new and gives the same summary
    again = dsv4ctl("sweep", *args, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["points"] == summary["points"]
    human = dsv4ctl("sweep", *args)
    assert "failures start at batch-sweep.batch=8" in human.stdout
    # the report of the campaign, as a page and as Markdown
    page = tmp_path / "report.html"
    assert dsv4ctl("report", "boundary", "--db", db, "-o", str(page)).returncode == 0
    text = page.read_text()
    assert "Failures start at <b>batch-sweep.batch=8</b>" in text and "<svg" in text
    md = dsv4ctl("report", "boundary", "--db", db, "--markdown").stdout
    assert "| batch-sweep.batch=8 |" in md and "Failures start at **batch-sweep.batch=8**" in md
    shoot(page, tmp_path / "report.png")


def shoot(page, png) -> None:
    """Render the page in a real headless Chromium and check that it drew something."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is missing: ./scripts/setup installs it (apt-get install chromium)")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                    f"--user-data-dir={png.parent / 'chrome-profile'}", f"--screenshot={png}",
                    "--window-size=1200,1400", f"file://{page}"], capture_output=True, timeout=120)
    assert png.exists() and png.stat().st_size > 20_000
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          f"--user-data-dir={png.parent / 'chrome-profile2'}", "--dump-dom", f"file://{page}"],
                         capture_output=True, text=True, timeout=120).stdout
    assert "failure rate per point" in dom and "Failure rate per point" in dom


def test_report_escapes_what_runs_printed(tmp_path, cli):
    db = str(tmp_path / "r.db")
    bad = tmp_path / "x.log"
    bad.write_text((LOGS / "J12.log").read_text().replace("got auto", "got <script>alert(1)</script>"))
    cli("ingest", "--log", bad, "--experiment", "escape-test", "--db", db)
    from dsv4ctl.report.campaign import render_html, report_data
    from dsv4ctl.store import open_store

    store = open_store(db)
    store.db.execute("INSERT INTO campaigns (name, backend, command, created_at) VALUES ('c', 'ingest', 'x', 'now')")
    store.db.execute("UPDATE runs SET campaign_id = (SELECT id FROM campaigns WHERE name = 'c')")
    page = render_html(report_data(store, "c"))
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_report_json_holds_what_the_page_shows(tmp_path, cli):
    from dsv4ctl.store import open_store

    db = str(tmp_path / "r.db")
    for job in ("J08", "J17"):
        cli("ingest", "--log", LOGS / f"{job}.log", "--sacct", LOGS / f"{job}.sacct", "--experiment", "report",
            "--db", db)
    store = open_store(db)
    store.db.execute("INSERT INTO campaigns (name, backend, command, created_at) VALUES ('c', 'ingest', 'x', 'now')")
    store.db.execute("UPDATE runs SET campaign_id = (SELECT id FROM campaigns WHERE name = 'c')")
    store.db.commit()
    done = cli("report", "c", "--json", "--db", db)
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["campaign"]["name"] == "c" and data["metric"] == "gen_s"
    assert data["summary"] == {"runs": 2, "passed": 1}
    j08, j17 = data["runs"]
    assert j08["label"] == "J08" and j08["state"] == "COMPLETED" and j08["exit_code"] == 0
    assert j08["verdict"]["status"] == "degenerate" and j08["verdict"]["false_green"] is True
    assert j08["verdict"]["first_blocker"]["kind"] and isinstance(j08["verdict"]["first_blocker"]["line"], int)
    assert j17["verdict"]["passed"] is True and j17["vllm_version"] == "0.27.2.dev0+g6e448d0ea.d20260819"
    assert j17["switches"] == {} and j17["tags"] == []  # the one run object: no JSON inside strings
    point = data["sweep"]["points"][0]
    assert (point["failures"], point["judged"]) == (1, 2) and len(point["interval"]) == 2
    assert data["distributions"] == [{"experiment": "report", "values": [21.7], "median": 21.7}]
    assert data["ab"] is None
    out = tmp_path / "report.json"
    assert cli("report", "c", "--json", "-o", out, "--db", db).exit_code == 0
    assert json.loads(out.read_text()) == data
    both = dsv4ctl("report", "c", "--json", "--markdown", "--db", db)
    assert both.returncode == 2 and "pick one" in both.stderr


def test_report_json_of_an_ab_campaign_has_the_decision_and_provenance(tmp_path, cli):
    import random

    from dsv4ctl.store import open_store

    from .test_compare import ab_campaign, sample

    db = tmp_path / "r.db"
    rng = random.Random(12)
    ab_campaign(open_store(db), sample(rng, 101.3, 1, 8), sample(rng, 67.9, 1, 8), vllm_version="0.11.1")
    data = json.loads(cli("report", "ab1", "--json", "--db", db).stdout)
    comparison = data["ab"]["comparison"]
    assert comparison["decision"] == "promote" and data["ab"]["error"] is None
    assert {"key": "switches.DSV4_MOE_ROUTING_Q1", "baseline": ["1"], "candidate": ["0"]} in comparison["differences"]
    base, cand = data["ab"]["provenance"]
    assert (base["side"], base["experiments"], cand["experiments"]) == ("baseline", "j17-baseline", "q1-off")
    assert base["vllm_version"] == ["0.11.1"] and base["git_sha"] == ["4be2c1d-dirty"] and base["triton_version"] == []
    assert cand["switches"][0]["DSV4_MOE_ROUTING_Q1"] == "0"
    assert {r["side"] for r in data["runs"]} == {"baseline", "candidate"} and data["summary"]["passed"] == 16


def test_suite_on_the_cluster_prints_the_matrix_with_failures_and_skips(cluster, tmp_path):  # noqa: F811
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    spec_file(suite_dir, "a-good", {"REPLAY_LOG": str(LOGS / "J17.log")})
    spec_file(suite_dir, "b-false-green", {"REPLAY_LOG": str(LOGS / "J08.log"), "REPLAY_EXIT": "0"})
    dcu = spec_file(suite_dir, "c-dcu-only", {"REPLAY_LOG": str(LOGS / "J17.log")})
    dcu.write_text(dcu.read_text().replace("platform: cpu", "platform: gfx936"))
    db = str(tmp_path / "r.db")
    done = dsv4ctl("suite", str(suite_dir), "--backend", "slurm", "--db", db, "--runs-dir", str(tmp_path / "runs"),
                   "--json")
    assert done.returncode == 1, done.stderr  # one case failed
    cases = {c["case"]: c for c in json.loads(done.stdout)["cases"]}
    assert cases["a-good"]["ok"] and not cases["b-false-green"]["ok"]
    assert cases["b-false-green"]["first_blocker"].startswith("degenerate_output")
    assert "needs the DCU cluster" in cases["c-dcu-only"]["skipped"]
    human = dsv4ctl("suite", str(suite_dir), "--backend", "slurm", "--db", db, "--runs-dir", str(tmp_path / "r2"))
    assert "FAIL" in human.stdout and "SKIPPED" in human.stdout and "PASS" in human.stdout


@pytest.mark.engine
def test_the_cpu_regression_suite_passes_on_the_real_engine(tmp_path):
    from .conftest import ENGINE_PYTHON
    from .test_engine import MODEL

    if not ENGINE_PYTHON.exists() or not (MODEL / "dsv4ctl-build.json").exists():
        pytest.fail("no CPU engine: ./scripts/test builds it")
    db = str(tmp_path / "r.db")
    # 11 engine runs one at a time (local engine jobs share the machine's CPUs, issue 29 S28): up to 15 minutes
    done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "suite", str(EXPERIMENTS / "regression-cpu"),
                           "--backend", "local", "--db", db, "--runs-dir", str(tmp_path / "runs"), "--json"],
                          capture_output=True, text=True, timeout=900)
    cases = json.loads(done.stdout)["cases"]
    assert done.returncode == 0, [c for c in cases if not c["ok"]]
    assert len(cases) == 9 and all(c["ok"] for c in cases)
    page = tmp_path / "suite.html"
    campaign = json.loads(done.stdout)["campaign"]
    assert dsv4ctl("report", campaign, "--db", db, "-o", str(page)).returncode == 0
    shoot(page, tmp_path / "suite.png")


# ---- issue 29 S21/S35, issue 26 m13/m14: the report's metric ----------------------------------------------------


def _campaign_of_ingested(cli, db, name: str = "c") -> None:
    from dsv4ctl.store import open_store

    for job in ("J08", "J17"):
        cli("ingest", "--log", LOGS / f"{job}.log", "--sacct", LOGS / f"{job}.sacct", "--experiment", "report",
            "--db", db)
    store = open_store(db)
    store.db.execute("INSERT INTO campaigns (name, backend, command, created_at) VALUES (?, 'ingest', 'x', 'now')",
                     [name])
    store.db.execute("UPDATE runs SET campaign_id = (SELECT id FROM campaigns WHERE name = ?)", [name])
    store.db.commit()


def test_report_of_an_unknown_metric_exits_2_with_the_metrics_present(tmp_path, cli):
    db = str(tmp_path / "r.db")
    _campaign_of_ingested(cli, db)
    out = tmp_path / "x.html"
    refused = dsv4ctl("report", "c", "--metric", "nosuch", "-o", str(out), "--db", db)
    assert refused.returncode == 2 and not out.exists()
    assert "no run of campaign 'c' has the metric 'nosuch'" in refused.stderr and "gen_s" in refused.stderr
    assert dsv4ctl("report", "c", "--metric", "tokens_per_s", "--markdown", "--db", db).returncode == 0


def test_a_serve_sweep_report_defaults_to_a_serve_metric_and_is_no_ab(tmp_path, cli):
    from dsv4ctl.store import open_store

    from .test_serving_sweep import add_serve_run, sweep_spec

    db = tmp_path / "r.db"
    store = open_store(db)
    campaign = store.create_campaign("ss1", "local", "dsv4ctl sweep h-servesweep.yaml")
    for point in sweep_spec(tmp_path, "h-servesweep", rates=(4, 8)):
        add_serve_run(store, tmp_path, point, ttft_scale=1.0, campaign_id=campaign)
    data = json.loads(cli("report", "ss1", "--json", "--db", db).stdout)
    assert data["metric"] == "output_throughput" and data["ab"] is None  # two points of a sweep, not an A/B
    assert len(data["distributions"]) == 2 and data["serving"]["axis"] == "load.request_rate"
    markdown = cli("report", "ss1", "--markdown", "--db", db).stdout
    assert "No comparison" not in markdown and "gen_s" not in markdown
    assert json.loads(cli("report", "ss1", "--json", "--metric", "p95_ttft_ms", "--db", db).stdout)["metric"] == \
        "p95_ttft_ms"


def test_markdown_holds_plain_comparison_signs_not_html_entities(tmp_path, cli):
    import random

    from dsv4ctl.store import open_store

    from .test_compare import add_side, sample

    db = tmp_path / "r.db"
    store = open_store(db)
    rng = random.Random(9)
    add_side(store, "j17-baseline.yaml", sample(rng, 100, 3, 6))
    add_side(store, "q1-off.yaml", sample(rng, 100, 3, 6))
    campaign = store.create_campaign("ab", "local", "dsv4ctl submit --ab")
    store.db.execute("UPDATE runs SET campaign_id = ?", [campaign])
    store.db.commit()
    for text in (cli("report", "ab", "--markdown", "--db", db).stdout,
                 dsv4ctl("compare", "j17-baseline", "q1-off", "--markdown", "--db", str(db)).stdout):
        assert ">= 0.05" in text and "&gt;" not in text and "&lt;" not in text and "&amp;" not in text, text


def test_a_suite_where_nothing_ran_gives_no_next_hint_to_a_campaign_that_does_not_exist(tmp_path):
    """Issue 29 S33: every case skipped, no campaign made: no `next: dsv4ctl report ...` naming one."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "a.yaml").write_text("name: only-dcu\nplatform: gfx936\nmodel: {path: /m}\nrequests:\n"
                                  "  - messages: [{role: user, content: hi}]\nslurm: {gres: \"dcu:8\"}\n"
                                  "parallel: {tp: 8}\n", encoding="utf-8")
    db = str(tmp_path / "r.db")
    done = dsv4ctl("suite", str(suite), "--platform", "cpu", "--campaign", "empty1", "--db", db)
    assert "SKIPPED" in done.stdout and "next:" not in done.stdout and "campaign empty1" not in done.stdout
    assert "nothing ran and no campaign was made" in done.stderr, done.stderr
    data = json.loads(dsv4ctl("suite", str(suite), "--platform", "cpu", "--campaign", "empty1", "--db", db,
                              "--json").stdout)
    assert data["campaign"] is None and data["cases"][0]["skipped"]
    assert dsv4ctl("report", "empty1", "--db", db).returncode == 2  # and indeed there is none
