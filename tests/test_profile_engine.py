"""Profiles captured in the job on the real vLLM CPU engine (issue 23): a `profile:` section turns on vLLM's torch
profiler for a window of engine steps, the probe says where the traces went, the run is still judged, and
`dsv4ctl profile` reads, stores and compares them. CPU ops only here (no device kernels on this machine)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dsv4ctl.campaign.plan import submit
from dsv4ctl.campaign.watch import watch
from dsv4ctl.store import open_store

from .conftest import ENGINE_PYTHON, EXPERIMENTS, ROOT

pytestmark = pytest.mark.engine
MODEL = ROOT / "models" / "tiny-qwen2"


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    if not ENGINE_PYTHON.exists() or not (MODEL / "dsv4ctl-build.json").exists():
        import os

        if os.environ.get("DSV4CTL_REQUIRE_ENGINE"):
            pytest.fail("no CPU engine: ./scripts/test runs scripts/setup-engine and dsv4ctl build-model")
        pytest.skip("no CPU engine")
    d = tmp_path_factory.mktemp("profiled")
    spec = d / "cpu-profile.yaml"
    spec.write_text(f"extends: {EXPERIMENTS / 'cpu-smoke.yaml'}\nname: cpu-profile\nrepeats: 2\n"
                    "profile:\n  skip_steps: 2\n  steps: 4\n", encoding="utf-8")
    store = open_store(d / "r.db")
    outcome = submit(store, [spec], "local", runs_root=d / "runs", campaign="prof")
    watch(store, interval_s=2, max_interval_s=5, timeout_s=600)
    return {"db": d / "r.db", "store": store, "runs": [store.find_run(str(i)) for i in outcome.run_ids]}


def test_a_profiled_run_is_judged_and_says_where_its_traces_went(profiled):
    run = profiled["runs"][0]
    v = profiled["store"].verdict(run.id)
    assert v["status"] == "coherent" and v["passed"], v.get("reasons")
    line = next(l for l in Path(run.log_path).read_text().splitlines() if l.startswith("DSV4_PROFILE: "))
    marker = json.loads(line[len("DSV4_PROFILE: "):])
    assert marker["window"] == "skip2+4" and marker["files"] and not marker["dropped"]
    trace = Path(marker["dir"]) / marker["files"][0]["file"]
    assert trace.parent == Path(run.run_dir) / "profile"
    data = json.loads(gzip.open(trace).read())
    steps = [e for e in data["traceEvents"] if e.get("name", "").startswith("execute_context_")]
    assert len(steps) == 4  # the window: 4 engine steps, not the whole run


def test_profile_of_a_run_reads_stores_and_agrees_with_the_trace(profiled, cli):
    run = profiled["runs"][0]
    r = cli("profile", str(run.id), "--db", str(profiled["db"]), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{"):])
    assert data["device"] == "cpu" and data["verdict"] == {"status": "coherent", "passed": True}
    assert data["steps"] == 4 and data["window"] == "skip2+4"
    # CPU ops' self time adds up to the time some op was running (nesting is not double counted)
    assert data["kernel_us"] == pytest.approx(data["gpu_busy_us"], rel=1e-3)
    names = {m["name"] for m in data["modules"]}
    assert {"Qwen2ForCausalLM", "Qwen2DecoderLayer", "Qwen2Attention", "Qwen2MLP"} <= names
    cats = {c["name"]: c["kernel_us"] for c in data["categories"]}
    assert cats["gemm"] > 0 and cats["attention"] > 0
    rows = profiled["store"].db.execute("SELECT count(*) FROM profiles WHERE run_id = ?", [run.id]).fetchone()[0]
    assert rows == 1
    r = cli("profile", str(profiled["runs"][0].id), str(profiled["runs"][1].id), "--db", str(profiled["db"]),
            "--json")
    assert r.exit_code == 0, r.output  # one run a side: differences shown, none called a change
    ab = json.loads(r.output[r.output.index("{"):])
    assert ab["rows"][0]["name"] == "(total)" and ab["notes"]
