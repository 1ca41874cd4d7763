"""Serve runs stored and judged through the real path (store -> watch.judge_run on hand-made run directories):
`compare --metric p95_ttft_ms` with its correctness gate and bootstrap interval, and a request_rate sweep's
latency-throughput curve with the highest rate that meets the SLOs, in the report's HTML, Markdown and JSON."""

from __future__ import annotations

import json
import random

import pytest

from dsv4ctl.analysis.compare import compare
from dsv4ctl.report.campaign import render_html, render_markdown, report_data
from dsv4ctl.spec.load import load_spec
from dsv4ctl.store import open_store
from dsv4ctl.campaign.watch import judge_run

from .conftest import EXPERIMENTS
from .serving_runs import load_records, write_run


@pytest.fixture
def store(tmp_path):
    return open_store(tmp_path / "r.db")


def sweep_spec(tmp_path, name: str, rates=(1, 2, 4, 8)) -> list:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"extends: {EXPERIMENTS / 'cpu-serve.yaml'}\nname: {name}\n"
                    f"matrix:\n  load.request_rate: {list(rates)}\n", encoding="utf-8")
    return [p for p in load_spec(path)]


def add_serve_run(store, tmp_path, point, *, ttft_scale: float, campaign_id=None, broken: bool = False,
                  seed: int = 0) -> int:
    """One judged serve run of a spec point: 64 records whose TTFT is scaled by `ttft_scale`."""
    spec = point.spec
    snapshot = spec.snapshot()
    experiment = store.experiment_id(spec.name, spec.spec_hash(), json.dumps(snapshot), "sweep.yaml")
    records = load_records(64, seed=seed)
    for r in records:
        r["ttft_s"] *= ttft_scale
        r["e2el_s"] = r["ttft_s"] + sum(r["itl_s"])
    if broken:
        records[9]["token_ids"] = [1] * 8  # a BOS collapse: the run is degenerate
    run_dir = tmp_path / f"run-{random.random()}"
    raw = write_run(run_dir, records, spec=snapshot)
    if broken:  # the block in raw.log says so too, as the job prints it
        text = raw.read_text(encoding="utf-8").replace(
            "TOKEN_IDS: " + json.dumps(load_records(64, seed=seed)[9]["token_ids"]), "TOKEN_IDS: [1, 1, 1, 1, 1, 1, 1, 1]")
        raw.write_text(text, encoding="utf-8")
    run = store.add_run(experiment_id=experiment, backend="local", token=f"t-{random.random()}", state="COMPLETED",
                        exit_code=0, signal=0, campaign_id=campaign_id, point_json=json.dumps(point.point),
                        run_dir=str(run_dir), log_path=str(raw))
    judge_run(store, store.find_run(str(run)), None)
    return run


def test_stored_serve_run_has_its_metrics_under_vllms_names(store, tmp_path):
    point = sweep_spec(tmp_path, "serve-a")[2]
    run = add_serve_run(store, tmp_path, point, ttft_scale=1.0)
    verdict, metrics = store.verdict(run), store.metrics(run)
    assert verdict["passed"], verdict["reasons"]
    for name in ("p95_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "request_throughput",
                 "output_throughput", "total_token_throughput", "completed", "failed", "request_goodput"):
        assert name in metrics, name
    assert metrics["completed"] == 64 and metrics["failed"] == 0


def test_compare_on_p95_ttft_with_bootstrap_and_the_correctness_gate(store, tmp_path):
    a, b = sweep_spec(tmp_path, "serve-a")[2], sweep_spec(tmp_path, "serve-b")[2]
    for i in range(6):
        add_serve_run(store, tmp_path, a, ttft_scale=1.0 + 0.02 * i, seed=i)
        add_serve_run(store, tmp_path, b, ttft_scale=0.6 + 0.02 * i, seed=i)
    c = compare(store, a.spec.name, b.spec.name, "p95_ttft_ms")
    m = c.metric("p95_ttft_ms")
    assert m.direction == "lower" and c.decision == "promote", m.reasons
    low, high = m.bootstrap_ci
    assert low <= m.ratio <= high < 1
    add_serve_run(store, tmp_path, b, ttft_scale=0.5, broken=True)
    c = compare(store, a.spec.name, b.spec.name, ["p95_ttft_ms", "request_goodput"])
    assert c.decision == "blocked" and any("did not pass" in r for r in c.reasons)
    assert c.metric("request_goodput").direction == "higher"


def test_rate_sweep_curve_and_the_highest_rate_within_the_slos(store, tmp_path):
    campaign = store.create_campaign("sweep-1", "local", "dsv4ctl sweep")
    # TTFT grows with the rate; side b is slower and misses the 2000 ms TTFT SLO already at rate 4.
    for side, scales in (("serve-a", {1: 1, 2: 1.5, 4: 3, 8: 14}), ("serve-b", {1: 2, 2: 5, 4: 12, 8: 30})):
        for point in sweep_spec(tmp_path, side):
            rate = point.point["load.request_rate"]
            for repeat in range(2):
                add_serve_run(store, tmp_path, point, ttft_scale=scales[rate], campaign_id=campaign, seed=repeat)
    data = report_data(store, "sweep-1", "p95_ttft_ms")
    serving = data.serving
    assert serving["axis"] == "load.request_rate" and serving["slo_set"]
    best = {line["side"]: line["best_load"] for line in serving["sides"]}
    assert best == {"serve-a": 4, "serve-b": 2}
    a = next(line for line in serving["sides"] if line["side"] == "serve-a")
    assert [p["load"] for p in a["points"]] == [1, 2, 4, 8]
    assert all(p["passed"] == 2 and p["request_throughput"] > 0 for p in a["points"])
    assert a["points"][0]["p95_ttft_ms"] < a["points"][-1]["p95_ttft_ms"]
    page = render_html(data)
    assert "Serving: latency against throughput" in page and "<polyline" in page
    assert "the highest request_rate that meets the SLOs in every run is 4" in page
    assert "| serve-b | 8 | 2/2 |" in render_markdown(data)
    assert data.to_json()["serving"]["sides"][1]["best_load"] == 2
