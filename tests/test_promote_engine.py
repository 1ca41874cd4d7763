"""One real promotion (issue 24): the real vLLM CPU engine with the tiny Qwen2, as Slurm jobs on the live cluster,
through the three gates, and the stable file committed. Kept as small as a real one can be (1 e2e run, 4 A/B pairs:
the fewest with which a slowdown can be significant at alpha 0.05), as it costs CI minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .conftest import EXPERIMENTS, ROOT
from .test_engine import engine  # noqa: F401 - the CPU-engine fixture
from .test_slurm import cluster  # noqa: F401 - the live-cluster fixture

pytestmark = [pytest.mark.engine, pytest.mark.slurm]
SWITCH = "DSV4_GREEDY_LOCAL_ARGMAX"


def git(cwd, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"})
    return done.stdout


def test_a_real_promotion_on_the_cpu_engine_is_written_and_committed(engine, cluster, tmp_path):  # noqa: F811
    gate = tmp_path / "gates" / "smoke.yaml"
    gate.parent.mkdir()
    gate.write_text(f"extends: {EXPERIMENTS / 'cpu-smoke.yaml'}\nname: promo-engine\nsampling: {{max_tokens: 8}}\n")
    # The numerics command sees the candidate's switches: it checks the one being promoted reached it.
    check = f"import os, sys; sys.exit(0 if os.environ.get('{SWITCH}') == '1' else 1)"
    stable = tmp_path / "stable.yaml"
    stable.write_text(textwrap.dedent(f"""\
        switches: {{DSV4_USE_TRITON_SPARSE: "1", DSV4_MOE_ROUTING_Q1: "1"}}
        gates:
          numerics: {{command: {json.dumps(f'{sys.executable} -c "{check}"')}}}
          e2e: {{spec: gates/smoke.yaml, repeats: 1, max_failure_rate: 0.8}}
          throughput: {{spec: gates/smoke.yaml, metric: gen_s, repeats: 4, require: not_slower, factor: 1.5}}
        """), encoding="utf-8")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "stable.yaml")
    git(tmp_path, "commit", "-q", "-m", "stable set")
    done = subprocess.run(
        [sys.executable, "-m", "dsv4ctl.cli", "promote", f"{SWITCH}=1", "--stable", str(stable), "--backend",
         "slurm", "--db", str(tmp_path / "r.db"), "--runs-dir", str(tmp_path / "runs"), "--yes", "--commit",
         "--json"], capture_output=True, text=True, timeout=580, cwd=ROOT, stdin=subprocess.DEVNULL,
        env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
             "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"})
    assert done.stdout, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["decision"] == "promoted", result["reason"]
    ab = result["gates"][2]["figures"]
    assert ab["pairs"] == 4 and ab["baseline_median"] > 0 and ab["candidate_median"] > 0
    assert f"{SWITCH}: '1'" in stable.read_text()
    log = git(tmp_path, "log", "--format=%s")
    assert log.splitlines()[0] == f"stable: promote {SWITCH}=1 (promotion 1)" and result["commit"]
    report = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "promotion-report", "1", "--db",
                             str(tmp_path / "r.db"), "--markdown"], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert report.returncode == 0 and "## Gate throughput: passed" in report.stdout
    assert "| coherent |" in report.stdout  # the e2e run's real verdict
