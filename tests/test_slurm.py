"""Against a live single-node Slurm (started by ./scripts/test through scripts/slurm-cluster): submit, watch with
one sacct per poll, every final state, arrays, refusals, slurmdbd down, concurrent writers, a CLI killed between
sbatch and the database write, and resume. Payloads replay recorded logs (tests/fixtures/runtime/dsv4_probe.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dsv4ctl import external
from dsv4ctl.campaign.plan import resume, submit
from dsv4ctl.store import open_store
from dsv4ctl.campaign.watch import poll_once, watch

from .conftest import FIXTURES, ROOT

pytestmark = pytest.mark.slurm
CLUSTER = ROOT / "scripts" / "slurm-cluster"
LOGS = FIXTURES / "logs"


@pytest.fixture(scope="session")
def cluster():
    up = subprocess.run(["scontrol", "ping"], capture_output=True, text=True) if external.available("scontrol") \
        else None
    if up is None or "UP" not in up.stdout:
        message = "no live Slurm cluster: ./scripts/test starts one (scripts/slurm-cluster up)"
        if os.environ.get("DSV4CTL_REQUIRE_SLURM"):
            pytest.fail(message)
        pytest.skip(message)
    return True


def spec_file(directory: Path, name: str, env: dict[str, str], slurm: str = 'gres: "dcu:8"', repeats: int = 1,
              extra: str = "") -> Path:
    env_lines = "".join(f"\n    {k}: {v!r}" for k, v in env.items())
    path = directory / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        platform: cpu
        model: {{path: /models/none}}
        requests:
          - messages: [{{role: user, content: hi}}]
        sampling: {{max_tokens: 32}}
        repeats: {repeats}
        slurm: {{{slurm}}}
        environment:
          python: {sys.executable}
          runtime_dir: {FIXTURES / "runtime"}
          env:""") + (env_lines or " {}") + "\n" + extra, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def campaign(cluster, tmp_path_factory):
    """Every scenario in one campaign, watched to the end once; the tests below read what it recorded."""
    d = tmp_path_factory.mktemp("campaign")
    specs = [
        spec_file(d, "ok", {"REPLAY_LOG": str(LOGS / "J17.log")}),
        spec_file(d, "degenerate", {"REPLAY_LOG": str(LOGS / "J09.log"), "REPLAY_EXIT": "2"}),
        spec_file(d, "false-green", {"REPLAY_LOG": str(LOGS / "J08.log"), "REPLAY_EXIT": "0"}),
        spec_file(d, "refused", {"REPLAY_LOG": str(LOGS / "J17.log")}, slurm='gres: "dcu:9"'),
        spec_file(d, "timeout", {"REPLAY_SLEEP": "600"}, slurm='gres: "dcu:1", time: "1"'),
        spec_file(d, "cancelled", {"REPLAY_SLEEP": "600"}, slurm='gres: "dcu:1"'),
        spec_file(d, "oom", {"REPLAY_ALLOC_MB": "600", "REPLAY_LOG": str(LOGS / "J17.log")},
                  slurm='gres: "dcu:1", mem: "150M"'),
        spec_file(d, "array", {"REPLAY_LOG": str(LOGS / "J17.log")}, repeats=3),
    ]
    store = open_store(d / "results.db")
    outcome = submit(store, specs, "slurm", runs_root=d / "runs", campaign="scenarios")
    by_name = {store.find_run(str(i)).experiment: store.find_run(str(i)) for i in outcome.run_ids}
    # One poll with every job in flight: exactly one sacct call.
    before = external.CALLS["sacct"]
    poll_once(store)
    sacct_calls_per_poll = external.CALLS["sacct"] - before
    external.run(["scancel", by_name["cancelled"].job_id])
    watch(store, interval_s=2, max_interval_s=5, timeout_s=240)
    return {"store": store, "outcome": outcome, "dir": d, "sacct_calls": sacct_calls_per_poll,
            "runs": {r.id: r for r in store.runs(campaign="scenarios")}}


def run_of(campaign, name: str, index: int = 0):
    rows = [r for r in campaign["store"].runs(campaign="scenarios") if r.experiment == name]
    return rows[index]


def verdict_of(campaign, name: str, index: int = 0) -> dict:
    return campaign["store"].verdict(run_of(campaign, name, index).id)


def test_one_sacct_call_per_poll_for_all_jobs(campaign):
    assert len(campaign["outcome"].run_ids) == 10
    assert campaign["sacct_calls"] == 1


def test_completed_run_is_coherent_and_passed(campaign):
    run = run_of(campaign, "ok")
    assert (run.state, run.exit_code, run.signal) == ("COMPLETED", 0, 0)
    v = verdict_of(campaign, "ok")
    assert v["status"] == "coherent" and v["passed"] and v["scheduler"]["state"] == "COMPLETED"
    assert Path(run.log_path).read_text().splitlines()[-1] == "PY_EXIT=0"
    assert campaign["store"].metrics(run.id)["gen_s"] == 21.7


def test_nonzero_exit_is_failed(campaign):
    run = run_of(campaign, "degenerate")
    assert (run.state, run.exit_code) == ("FAILED", 2)
    v = verdict_of(campaign, "degenerate")
    assert v["status"] == "degenerate" and not v["passed"] and not v["false_green"]


def test_false_green_is_caught_through_the_real_scheduler(campaign):
    run = run_of(campaign, "false-green")
    assert (run.state, run.exit_code) == ("COMPLETED", 0)
    v = verdict_of(campaign, "false-green")
    assert v["status"] == "degenerate" and v["false_green"] and not v["passed"]


def test_sbatch_refusal_is_recorded_and_the_campaign_goes_on(campaign):
    run = run_of(campaign, "refused")
    assert run.state == "SUBMIT_FAILED" and "Requested node configuration is not available" in run.submit_message
    assert run_of(campaign, "ok").state == "COMPLETED"


def test_timeout(campaign):
    run = run_of(campaign, "timeout")
    assert run.state == "TIMEOUT"
    v = verdict_of(campaign, "timeout")
    assert v["status"] == "incomplete" and not v["false_green"]


def test_scancel(campaign):
    run = run_of(campaign, "cancelled")
    assert run.state == "CANCELLED" and run.state_detail and run.state_detail.startswith("by")
    assert verdict_of(campaign, "cancelled")["status"] == "incomplete"


def test_real_oom_kill(campaign):
    run = run_of(campaign, "oom")
    assert run.state == "OUT_OF_MEMORY", (run.state, Path(run.log_path).read_text()[-500:])
    v = verdict_of(campaign, "oom")
    assert not v["passed"]


def test_array_tasks_are_runs_of_their_own(campaign):
    tasks = [r for r in campaign["store"].runs(campaign="scenarios") if r.experiment == "array"]
    base = tasks[0].job_id.split("_")[0]
    assert [r.job_id for r in tasks] == [f"{base}_{i}" for i in range(3)]
    assert all(r.state == "COMPLETED" for r in tasks)
    assert all(campaign["store"].verdict(r.id)["passed"] for r in tasks)
    assert len({r.log_path for r in tasks}) == 3


def test_slurmdbd_down_falls_back_to_slurmctld_and_says_so(cluster, tmp_path):
    store = open_store(tmp_path / "r.db")
    spec = spec_file(tmp_path, "dbd-down", {"REPLAY_SLEEP": "4", "REPLAY_LOG": str(LOGS / "J17.log")})
    outcome = submit(store, [spec], "slurm", runs_root=tmp_path / "runs")
    subprocess.run([str(CLUSTER), "stop", "slurmdbd"], check=True)
    try:
        report = poll_once(store)
        assert any("sacct failed" in note and "scontrol" in note for note in report.notes)
        run = store.find_run(str(outcome.run_ids[0]))
        assert run.state in ("PENDING", "RUNNING", "COMPLETED") and run.state_source == "scontrol"
        deadline = time.monotonic() + 60
        while store.verdict(run.id) is None and time.monotonic() < deadline:
            time.sleep(2)
            poll_once(store)
        verdict = store.verdict(run.id)
        assert verdict is not None and verdict["passed"]
        assert store.find_run(str(run.id)).state_source == "scontrol"
    finally:
        subprocess.run([str(CLUSTER), "start", "slurmdbd"], check=True)


def dsv4ctl(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", "dsv4ctl.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)


def test_two_concurrent_submits_into_one_database(cluster, tmp_path):
    specs = [spec_file(tmp_path, f"conc{i}", {"REPLAY_LOG": str(LOGS / "J17.log")}, repeats=1) for i in range(4)]
    db = tmp_path / "shared.db"
    procs = [subprocess.Popen([sys.executable, "-m", "dsv4ctl.cli", "submit", *map(str, specs), "--backend",
                               "slurm", "--db", str(db), "--runs-dir", str(tmp_path / f"runs{n}"), "--no-array"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(2)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    for out, err, code in results:
        assert code == 0, err
        assert "database is locked" not in err
    store = open_store(db)
    assert len(store.runs()) == 8 and len({r.campaign for r in store.runs()}) == 2
    assert all(r.job_id for r in store.runs())


def test_cli_killed_between_sbatch_and_record_then_status_and_resume(cluster, tmp_path):
    specs = [spec_file(tmp_path, f"crash{i}", {"REPLAY_LOG": str(LOGS / "J17.log")}) for i in range(3)]
    db = str(tmp_path / "r.db")
    first = dsv4ctl("submit", *map(str, specs), "--backend", "slurm", "--db", db, "--campaign", "crashy",
                    "--runs-dir", str(tmp_path / "runs"), env={"DSV4CTL_FAULT": "crash-after-submit:2"})
    assert first.returncode == 70
    store = open_store(db)
    assert [r.state for r in store.runs(campaign="crashy")] == ["PENDING", "SUBMITTING", "PLANNED"]
    lost = store.runs(campaign="crashy")[1]
    assert lost.job_id is None
    # `status` finds the job the dead CLI submitted, by the token in its job name.
    assert dsv4ctl("status", "--db", db).returncode == 0
    found = store.find_run(str(lost.id))
    assert found.job_id and found.state != "SUBMITTING"
    # `resume` submits only the run that never reached sbatch.
    resumed = dsv4ctl("resume", "crashy", "--db", db, "--json")
    assert resumed.returncode == 0, resumed.stderr
    rows = store.runs(campaign="crashy")
    assert [r.state for r in rows][2] != "PLANNED" and rows[0].job_id != rows[1].job_id != rows[2].job_id
    watch(store, interval_s=2, timeout_s=120)
    assert all(store.verdict(r.id)["passed"] for r in store.runs(campaign="crashy"))
    # Nothing was submitted twice: one Slurm job per run.
    names = external.run(["sacct", "-X", "-n", "-P", "-S", "now-1hours", "-o", "JobName"]).stdout.split()
    for r in rows:
        assert sum(n.endswith(r.token.split("-")[0]) for n in names) == 1
    # A second resume has nothing left to do.
    assert resume(store, "crashy").run_ids == []


def test_ab_submission_is_interleaved_paired_and_compared(cluster, tmp_path):
    base = spec_file(tmp_path, "ab-base", {"REPLAY_LOG": str(LOGS / "J17.log"), "REPLAY_GEN_S": "101.3"},
                     extra="switches:\n  DSV4_MOE_ROUTING_Q1: 1\n")
    cand = spec_file(tmp_path, "ab-cand", {"REPLAY_LOG": str(LOGS / "J17.log"), "REPLAY_GEN_S": "67.9"},
                     extra="switches:\n  DSV4_MOE_ROUTING_Q1: 0\n")
    db = str(tmp_path / "r.db")
    done = dsv4ctl("submit", "--ab", str(base), str(cand), "--repeats", "6", "--backend", "slurm", "--db", db,
                   "--runs-dir", str(tmp_path / "runs"), "--wait", "--json")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert [r["experiment"] for r in runs] == ["ab-base", "ab-cand"] * 6  # A B A B, in submission order
    assert [int(r["job_id"]) for r in runs] == sorted(int(r["job_id"]) for r in runs)
    assert [(r["pair_id"], r["side"]) for r in runs[:2]] == [(0, "baseline"), (0, "candidate")]
    result = dsv4ctl("compare", "ab-base", "ab-cand", "--db", db, "--json", "--expect-diff",
                     "switches.DSV4_MOE_ROUTING_Q1", "--expect-diff", "environment.env.REPLAY_GEN_S")
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["decision"] == "promote", data["reasons"]
    assert data["metrics"][0]["paired"]["pairs"] == 6 and data["warnings"] == []
    assert {d["key"] for d in data["differences"]} == {"switches.DSV4_MOE_ROUTING_Q1", "environment.env.REPLAY_GEN_S"}
