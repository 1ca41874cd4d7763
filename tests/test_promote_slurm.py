"""`dsv4ctl promote` on the live single-node Slurm cluster (issue 24). The gates' jobs are replay payloads
(tests/fixtures/promote/runtime: the shared payload, made slower or faster by a switch); e2e failures come from
REPLAY_FAIL_WHEN, seeded per spec name and repeat, so each scenario sees the same draws every time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import FIXTURES, ROOT
from .test_bisect_slurm import rendered
from .test_slurm import cluster  # noqa: F401 - the live-cluster fixture

pytestmark = pytest.mark.slurm

SWITCH = "DSV4_MOE_Q1_PREPARE"
RUNTIME = FIXTURES / "promote" / "runtime"
J17 = FIXTURES / "logs" / "J17.log"


def gate_spec(directory: Path, name: str, env: dict[str, str], slurm: str = 'time: "2"') -> str:
    env_lines = "".join(f"\n    {k}: {v!r}" for k, v in env.items())
    (directory / "gates").mkdir(parents=True, exist_ok=True)
    (directory / "gates" / f"{name}.yaml").write_text(textwrap.dedent(f"""\
        name: {name}
        platform: cpu
        model: {{path: /models/none}}
        requests:
          - messages: [{{role: user, content: hi}}]
        sampling: {{max_tokens: 16}}
        slurm: {{{slurm}}}
        environment:
          python: {sys.executable}
          runtime_dir: {RUNTIME}
          env:""") + env_lines + "\n", encoding="utf-8")
    return f"gates/{name}.yaml"


def project(directory: Path, *, numerics: dict | None = None, e2e_fail: float = 0.0, speed: float = 0.8,
            ab_slurm: str = 'time: "2"', e2e_repeats: int = 8, max_rate: float = 0.35) -> Path:
    """A stable file with its three gates. numerics: a command by default (exit 1 when SWITCH is on and
    `numerics_fail`), e2e: SWITCH fails at `e2e_fail`, throughput: SWITCH multiplies gen_s by `speed`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "check.py").write_text("import os, sys\nsys.exit(int(os.environ.get('CHECK_EXIT', '0')))\n")
    numerics = numerics or {"command": f"{sys.executable} check.py"}
    e2e = gate_spec(directory, "e2e", {"REPLAY_FAIL_WHEN": f"{SWITCH}:{e2e_fail}" if e2e_fail else "batch>=99:1",
                                       "REPLAY_SEED": "3"})
    ab = gate_spec(directory, "ab", {"REPLAY_LOG": str(J17), "REPLAY_GEN_S": "20",
                                     "PROMOTE_SPEED_WHEN": f"{SWITCH}:{speed}"}, slurm=ab_slurm)
    stable = directory / "stable.yaml"
    stable.write_text(textwrap.dedent(f"""\
        switches: {{DSV4_USE_TRITON_SPARSE: "1", DSV4_MOE_ROUTING_Q1: "1", {SWITCH}: "0"}}
        provenance:
          DSV4_MOE_ROUTING_Q1: {{note: "report 0.2: off took fixed generation from 67.9 s to 101.3 s"}}
        gates:
          numerics: {json.dumps(numerics)}
          e2e: {{spec: {e2e}, repeats: {e2e_repeats}, max_failure_rate: {max_rate}}}
          throughput: {{spec: {ab}, metric: gen_s, repeats: 6, factor: 1.03}}
        """), encoding="utf-8")
    return stable


def dsv4ctl(directory: Path, *args: str, env: dict | None = None, timeout: int = 400) -> subprocess.CompletedProcess:
    db = [] if args[:2] in (("stable", "--json"), ("stable", "diff")) else ["--db", str(directory / "r.db")]
    argv = [sys.executable, "-m", "dsv4ctl.cli", *args, "--stable", str(directory / "stable.yaml"), *db]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def promote(directory: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return dsv4ctl(directory, "promote", f"{SWITCH}=1", *args, "--backend", "slurm", "--runs-dir",
                   str(directory / "runs"), "--yes", "--json", env=env)


def result_of(done: subprocess.CompletedProcess) -> dict:
    assert done.stdout, done.stderr[-3000:]
    return json.loads(done.stdout)


def outcomes(result: dict) -> dict[str, str]:
    return {g["gate"]: g["outcome"] for g in result["gates"]}


def campaigns(directory: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(directory / "r.db") as db:
        return [r[0] for r in db.execute("SELECT name FROM campaigns ORDER BY id")]


def test_a_switch_passing_all_three_gates_is_promoted_and_the_file_says_why(cluster, tmp_path):  # noqa: F811
    stable = project(tmp_path)
    done = promote(tmp_path)
    result = result_of(done)
    assert done.returncode == 0, done.stderr[-3000:]
    assert result["decision"] == "promoted" and outcomes(result) == dict.fromkeys(("numerics", "e2e",
                                                                                   "throughput"), "passed")
    ab = result["gates"][2]["figures"]
    assert ab["candidate_median"] < ab["baseline_median"] / 1.03 and ab["pairs"] == 6
    text = stable.read_text()
    assert f"{SWITCH}: '1'" in text and "promotion: 1" in text
    [entry] = result_of(dsv4ctl(tmp_path, "stable", "history", SWITCH, "--json"))["promotions"]
    assert entry["decision"] == "promoted" and len(entry["gates"][1]["runs"]) == 8
    shown = result_of(dsv4ctl(tmp_path, "stable", "--json"))
    row = next(r for r in shown["switches"] if r["name"] == SWITCH)
    assert row["value"] == "1" and row["promotion"] == 1 and len(row["runs"]) == 8 + 12
    again = promote(tmp_path)  # the stable file now has it: nothing to promote, a usage error
    assert again.returncode == 2 and "has this already" in again.stderr
    promoted = stable.read_text()
    demoted = dsv4ctl(tmp_path, "promote", "--demote", SWITCH, "--backend", "slurm", "--runs-dir",
                      str(tmp_path / "runs"), "--yes", "--json")
    result = result_of(demoted)  # off, it is slower again: the throughput gate keeps it on
    assert demoted.returncode == 1 and result["kind"] == "demote" and result["promotion"] == 2
    assert result["diff"] == [{"name": SWITCH, "before": "1", "after": "0"}]
    assert outcomes(result)["throughput"] == "failed" and stable.read_text() == promoted


def test_failing_numerics_never_submits_an_e2e_job(cluster, tmp_path):  # noqa: F811
    numerics = gate_spec(tmp_path, "numerics", {"REPLAY_FAIL_WHEN": f"{SWITCH}:1.0"})
    stable = project(tmp_path, numerics={"spec": numerics})
    before = stable.read_text()
    done = promote(tmp_path)
    result = result_of(done)
    assert done.returncode == 1 and result["decision"] == "refused", done.stderr[-3000:]
    assert outcomes(result) == {"numerics": "failed"}
    assert campaigns(tmp_path) == ["promo1-numerics"] and stable.read_text() == before


def test_failing_end_to_end_at_25_percent_is_refused_at_gate_2(cluster, tmp_path):  # noqa: F811
    stable = project(tmp_path, e2e_fail=0.25)
    before = stable.read_text()
    done = promote(tmp_path)
    result = result_of(done)
    assert done.returncode == 1 and outcomes(result) == {"numerics": "passed", "e2e": "failed"}
    figures = result["gates"][1]["figures"]
    assert figures["failures"] >= 1 and figures["upper"] > 0.35 and "Wilson" in result["gates"][1]["reason"]
    assert "promo1-throughput" not in campaigns(tmp_path) and stable.read_text() == before
    history = result_of(dsv4ctl(tmp_path, "stable", "history", "--json"))
    assert history["promotions"][0]["decision"] == "refused" and "e2e" in history["promotions"][0]["reason"]


def test_correct_but_10_percent_slower_is_refused_at_gate_3(cluster, tmp_path):  # noqa: F811
    stable = project(tmp_path, speed=1.1)
    before = stable.read_text()
    done = promote(tmp_path)
    result = result_of(done)
    assert done.returncode == 1 and outcomes(result) == {"numerics": "passed", "e2e": "passed",
                                                         "throughput": "failed"}
    assert 1.05 < result["gates"][2]["figures"]["ratio"] < 1.15 and stable.read_text() == before


def test_throughput_jobs_refused_by_sbatch_could_not_decide(cluster, tmp_path):  # noqa: F811
    stable = project(tmp_path, ab_slurm='gres: "dcu:9"')
    before = stable.read_text()
    done = promote(tmp_path)
    result = result_of(done)
    assert done.returncode == 5 and result["decision"] == "could not decide", done.stderr[-3000:]
    assert outcomes(result)["throughput"] == "could not decide" and stable.read_text() == before
    assert "could not be tested" in result["reason"]
    again = promote(tmp_path)  # the same command takes it up at the gate that could not run, nothing before it
    assert again.returncode == 5 and result_of(again)["promotion"] == 1 and stable.read_text() == before
    assert "gate throughput: resumed campaign promo1-throughput" in again.stderr  # sbatch asked again
    assert "gate e2e" not in again.stderr
    assert campaigns(tmp_path) == ["promo1-e2e", "promo1-throughput"]
    import sqlite3

    with sqlite3.connect(tmp_path / "r.db") as db:
        counts = dict(db.execute("SELECT c.name, count(*) FROM runs r JOIN campaigns c ON c.id = r.campaign_id "
                                 "GROUP BY c.name"))
    assert counts == {"promo1-e2e": 8, "promo1-throughput": 12}


def test_a_promotion_killed_mid_way_resumes_without_resubmitting_finished_runs(cluster, tmp_path):  # noqa: F811
    import sqlite3

    project(tmp_path)
    killed = promote(tmp_path, env={"DSV4CTL_FAULT": "crash-after-submit:10"})  # e2e's 8, then 2 of the A/B
    assert killed.returncode == 70, killed.stderr[-3000:]
    with sqlite3.connect(tmp_path / "r.db") as db:
        jobs_before = {r[0]: r[1] for r in db.execute("SELECT id, job_id FROM runs WHERE job_id IS NOT NULL")}
    done = promote(tmp_path)
    result = result_of(done)
    assert done.returncode == 0 and result["decision"] == "promoted" and result["promotion"] == 1
    with sqlite3.connect(tmp_path / "r.db") as db:
        after = {r[0]: r[1] for r in db.execute("SELECT id, job_id FROM runs")}
        count = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert count == 8 + 12  # nothing planned twice
    assert all(after[i] == job for i, job in jobs_before.items())  # no finished run got a second job
    page = tmp_path / "promotion.html"
    report = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "promotion-report", "1", "--db",
                             str(tmp_path / "r.db"), "-o", str(page)], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert report.returncode == 0, report.stderr
    dom = rendered(page)
    assert "Promotion 1: promoted" in dom and "Gate throughput" in dom and SWITCH in dom
