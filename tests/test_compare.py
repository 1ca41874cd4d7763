"""`compare` decisions on seeded synthetic samples, the correctness gate and what differs (the CLI: test_compare_cli)."""

from __future__ import annotations

import json
import random

import pytest

from dsv4ctl.analysis.compare import compare
from dsv4ctl.spec.load import load_spec
from dsv4ctl.store import open_store

from .conftest import EXPERIMENTS


def add_side(store, spec_file, values: list[float], metric: str = "gen_s", bad: int = 0,
             tokens: list[int] | None = None, pair_start: int | None = None, tags: list[str] | None = None,
             false_green: bool = False, extra: dict[str, float] | None = None) -> list[int]:
    spec = load_spec(EXPERIMENTS / spec_file)[0].spec
    experiment = store.experiment_id(spec.name, spec.spec_hash(), json.dumps(spec.snapshot()), str(spec_file))
    ids = []
    for i, value in enumerate(values):
        run = store.add_run(experiment_id=experiment, backend="slurm", token=f"{spec.name}-{random.random()}",
                            state="COMPLETED", job_id=str(1000 + len(store.runs())), ingested=0,
                            switches_json=json.dumps(spec.resolved_switches()), dsv4ctl_version="0.1.0",
                            pair_id=None if pair_start is None else pair_start + i, node="dcu-node07",
                            tags=",".join(spec.tags if tags is None else tags))
        passed = i >= bad
        store.save_verdict(run, {"status": "coherent" if passed else "degenerate", "passed": passed,
                                 "false_green": false_green and not passed, "bos_run": 0 if passed else 31, "py_exit": 0,
                                 "first_blocker": None if passed else {"line": 34, "kind": "degenerate_output"},
                                 "requests": [{"token_ids": tokens or [5, 6, 7, 8]}], "metrics": {metric: value, **(extra or {})}})
        ids.append(run)
    return ids


def sample(rng: random.Random, centre: float, spread: float, n: int) -> list[float]:
    return [rng.gauss(centre, spread) for _ in range(n)]


@pytest.fixture
def store(tmp_path):
    return open_store(tmp_path / "r.db")


def test_clear_win_is_promoted(store):
    rng = random.Random(1)
    add_side(store, "j17-baseline.yaml", sample(rng, 101.3, 2, 10))
    add_side(store, "q1-off.yaml", sample(rng, 67.9, 2, 10))
    c = compare(store, "j17-baseline", "q1-off", "gen_s", expect_diff=["switches.DSV4_MOE_ROUTING_Q1"])
    gen_s = c.metric("gen_s")
    assert c.decision == "promote" and c.exit_code == 0 and gen_s.significant and gen_s.ratio < 0.7
    assert gen_s.baseline.ci_bounded and gen_s.ratio_ci[0] < gen_s.ratio < gen_s.ratio_ci[1]
    assert c.warnings == []
    assert [d["key"] for d in c.differences] == ["switches.DSV4_MOE_ROUTING_Q1"]


def test_clear_loss_is_rejected(store):
    rng = random.Random(2)
    add_side(store, "j17-baseline.yaml", sample(rng, 67.9, 2, 10))
    add_side(store, "q1-off.yaml", sample(rng, 101.3, 2, 10))
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "reject" and c.exit_code == 1


def test_overlap_is_inconclusive_with_runs_needed(store):
    rng = random.Random(3)
    add_side(store, "j17-baseline.yaml", sample(rng, 100, 8, 8))
    add_side(store, "q1-off.yaml", sample(rng, 99, 8, 8))
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "inconclusive" and c.exit_code == 5 and c.metrics[0].runs_needed > 8
    assert any("runs per side" in r for r in c.metrics[0].reasons)


def test_a_failed_run_blocks_and_is_listed(store):
    rng = random.Random(4)
    add_side(store, "j17-baseline.yaml", sample(rng, 101, 1, 6))
    add_side(store, "q1-off.yaml", sample(rng, 68, 1, 6), bad=1)
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "blocked" and c.exit_code == 1
    assert c.candidate.failed_runs[0]["status"] == "degenerate" and c.metrics[0].decision == "blocked"
    assert "did not pass: degenerate (degenerate_output)" in c.reasons[0]


def test_too_few_samples_warn_like_benchstat(store):
    add_side(store, "j17-baseline.yaml", [100.0, 101.0, 99.0])
    add_side(store, "q1-off.yaml", [70.0, 71.0, 69.0])
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "inconclusive"  # best possible exact p with 3 vs 3 is 0.1
    assert any("need >= 4 samples" in w for w in c.warnings)
    assert c.metrics[0].baseline.ci is None and not c.metrics[0].baseline.ci_bounded


def test_unexpected_differences_are_warned(store):
    rng = random.Random(5)
    add_side(store, "j17-baseline.yaml", sample(rng, 101, 1, 6))
    add_side(store, "tp4.yaml", sample(rng, 90, 1, 6))
    c = compare(store, "j17-baseline", "j17-tp4", expect_diff=["switches.DSV4_MOE_ROUTING_Q1"])
    keys = [d["key"] for d in c.differences]
    assert "parallel.tp" in keys and "slurm.gres" in keys
    assert any("also differ in" in w for w in c.warnings) and any("does not differ" in w for w in c.warnings)


def test_higher_is_better_metrics(store):
    rng = random.Random(6)
    add_side(store, "j17-baseline.yaml", sample(rng, 1.0, 0.02, 8), metric="tokens_per_s")
    add_side(store, "q1-off.yaml", sample(rng, 1.5, 0.02, 8), metric="tokens_per_s")
    c = compare(store, "j17-baseline", "q1-off", metric="tokens_per_s")
    assert c.metrics[0].direction == "higher" and c.decision == "promote"


def test_paired_analysis_and_token_differences(store):
    rng = random.Random(7)
    add_side(store, "j17-baseline.yaml", sample(rng, 100, 1, 8), pair_start=0)
    add_side(store, "q1-off.yaml", sample(rng, 80, 1, 8), pair_start=0, tokens=[5, 6, 9, 8])
    c = compare(store, "j17-baseline", "q1-off")
    assert c.metrics[0].paired["pairs"] == 8 and c.metrics[0].paired["wilcoxon_p"] < 0.05
    assert c.token_differences == [{"request": 0, "position": 2, "baseline": 7, "candidate": 9}]


def test_sides_by_ids_tags_and_spec_files(store):
    rng = random.Random(8)
    a = add_side(store, "j17-baseline.yaml", sample(rng, 100, 1, 5))
    add_side(store, "q1-off.yaml", sample(rng, 70, 1, 5))
    c = compare(store, ",".join(map(str, a)), str(EXPERIMENTS / "q1-off.yaml"))
    assert c.metrics[0].baseline.n == 5 and c.metrics[0].candidate.n == 5
    c = compare(store, "j17-baseline", "tag:ab")  # q1-off.yaml carries the tag `ab`
    assert c.metrics[0].candidate.n == 5
    from dsv4ctl.analysis.compare import CompareError

    with pytest.raises(CompareError, match="no stored runs"):
        compare(store, "nope", "q1-off")


def test_sides_that_mix_specs_are_grouped_by_experiment(store):
    """tag:baseline may hold several experiments: no traceback, the groups are listed and the pooling is said."""
    add_side(store, "j17-baseline.yaml", [100.0, 101.0, 99.0, 100.5, 100.2, 99.7], tags=["baseline"])
    add_side(store, "cpu-smoke.yaml", [10.0, 11.0, 9.0], tags=["baseline"])
    add_side(store, "q1-off.yaml", [70.0, 71.0, 69.0, 70.5, 70.2, 69.7], tags=["candidate"])
    c = compare(store, "tag:baseline", "tag:candidate")
    assert c.mixed and [g["experiment"] for g in c.baseline.experiments] == ["cpu-smoke", "j17-baseline"]
    assert c.baseline.experiments[0] == {"experiment": "cpu-smoke", "runs": 3, "passed": 3}
    groups = {g["experiment"]: g for g in c.metrics[0].baseline.by_experiment}
    assert groups["cpu-smoke"]["median"] == 10.0 and groups["j17-baseline"]["n"] == 6
    assert any("baseline mixes 2 experiments (cpu-smoke, j17-baseline)" in w for w in c.warnings)
    platform = next(d for d in c.differences if d["key"] == "platform")
    assert platform["baseline"] == ["cpu", "gfx936"] and platform["candidate"] == ["gfx936"]
    # a key one spec of a side lacks is null on that side, and values of mixed types are listed without error
    dtype = next(d for d in c.differences if d["key"] == "model.dtype")
    assert dtype["baseline"] == ["float32", None] and dtype["candidate"] == [None]


def test_throughput_settings_are_listed_and_explained(store, tmp_path):
    warmed = tmp_path / "warmed.yaml"
    warmed.write_text(f"extends: {EXPERIMENTS / 'j17-baseline.yaml'}\nname: warmed\n"
                      "throughput: {iterations: 5, warmup: 2}\n", encoding="utf-8")
    add_side(store, "j17-baseline.yaml", [100.0] * 6)
    add_side(store, warmed, [90.0] * 6)
    c = compare(store, "j17-baseline", "warmed", expect_diff=["switches.DSV4_MOE_ROUTING_Q1"])
    diffs = {d["key"]: (d["baseline"], d["candidate"]) for d in c.differences}
    assert diffs["throughput.iterations"] == ([0], [5]) and diffs["throughput.warmup"] == ([1], [2])
    assert any("one cold generation per run" in w and "the median of 5 generations after 2 warm-up" in w
               for w in c.warnings)
    assert any("also differ in: throughput.iterations, throughput.warmup" in w for w in c.warnings)


def test_the_readme_ab_example_differs_only_in_its_switch(store):
    """README: `compare j17-baseline q1-off --expect-diff switches.DSV4_MOE_ROUTING_Q1` measures like with like."""
    add_side(store, "j17-baseline.yaml", [100.0] * 6)
    add_side(store, "q1-off.yaml", [70.0] * 6)
    c = compare(store, "j17-baseline", "q1-off", expect_diff=["switches.DSV4_MOE_ROUTING_Q1"])
    assert [d["key"] for d in c.differences] == ["switches.DSV4_MOE_ROUTING_Q1"] and c.warnings == []


def test_an_unbounded_interval_is_never_promoted(store):
    """5 against 5 fully separated: p = 0.008 < 0.05, but the medians' 95% intervals are unbounded (n < 6)."""
    add_side(store, "j17-baseline.yaml", [100.0, 101.0, 99.0, 100.5, 99.5])
    add_side(store, "q1-off.yaml", [70.0, 71.0, 69.0, 70.5, 69.5])
    c = compare(store, "j17-baseline", "q1-off")
    gen_s = c.metrics[0]
    assert gen_s.significant and gen_s.baseline.ci is None and gen_s.ratio_ci is None
    assert c.decision == "inconclusive" and c.exit_code == 5
    assert any("need >= 6 samples per side for a bounded 95% interval" in r and "not promoted" in r
               for r in gen_s.reasons)
    assert gen_s.runs_needed >= 6 and c.min_runs_bounded_ci == 6
    add_side(store, "j17-baseline.yaml", [100.2])
    add_side(store, "q1-off.yaml", [70.2])
    assert compare(store, "j17-baseline", "q1-off").decision == "promote"  # 6 a side: bounded


def test_several_metrics_one_decision(store):
    rng = random.Random(11)
    base = [{"ttft_s": v} for v in sample(rng, 0.5, 0.01, 8)]
    cand = [{"ttft_s": v} for v in sample(rng, 0.8, 0.01, 8)]
    for spec, centre, extra in (("j17-baseline.yaml", 100, base), ("q1-off.yaml", 70, cand)):
        for value, more in zip(sample(rng, centre, 1, 8), extra):
            add_side(store, spec, [value], extra=more)
    c = compare(store, "j17-baseline", "q1-off", ["gen_s", "ttft_s"])
    assert [(m.metric, m.decision) for m in c.metrics] == [("gen_s", "promote"), ("ttft_s", "reject")]
    assert c.decision == "reject" and c.exit_code == 1  # the worst metric decides


def test_an_unknown_metric_is_a_usage_error_naming_the_present_ones(store):
    from dsv4ctl.analysis.compare import UnknownMetric

    add_side(store, "j17-baseline.yaml", [100.0] * 3, extra={"ttft_s": 0.5})
    add_side(store, "q1-off.yaml", [70.0] * 3)
    with pytest.raises(UnknownMetric, match=r"'gen_S'; metrics present: gen_s, ttft_s \(did you mean gen_s\?\)"):
        compare(store, "j17-baseline", "q1-off", "gen_S")
    assert UnknownMetric.exit_code == 2


def test_a_false_green_run_is_named_so(store):
    add_side(store, "j17-baseline.yaml", [100.0] * 6)
    add_side(store, "q1-off.yaml", [70.0] * 6, bad=1, false_green=True)
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "blocked" and "did not pass: degenerate FALSE GREEN (degenerate_output)" in c.reasons[0]
    assert c.candidate.failed_runs[0]["false_green"] is True


def test_versions_are_compared(store):
    """The versions a run's log names (vllm_version, torch_version, triton_version) are listed when they differ."""
    a = add_side(store, "j17-baseline.yaml", [100.0] * 6)
    b = add_side(store, "q1-off.yaml", [70.0] * 6)
    for ids, version in ((a, "0.11.0"), (b, "0.11.1")):
        for run in ids:
            store.update_run(run, vllm_version=version, torch_version="2.6.0")
    c = compare(store, "j17-baseline", "q1-off")
    assert {"key": "provenance.vllm_version", "baseline": ["0.11.0"], "candidate": ["0.11.1"]} in c.differences
    assert not any(d["key"] == "provenance.torch_version" for d in c.differences)


def ab_campaign(store, base: list[float], cand: list[float], **facts) -> None:
    """An A/B campaign as `submit --ab` records it: runs paired, with their side and provenance."""
    campaign = store.create_campaign("ab1", "slurm", "dsv4ctl submit --ab j17-baseline.yaml q1-off.yaml")
    for spec, values, side in (("j17-baseline.yaml", base, "baseline"), ("q1-off.yaml", cand, "candidate")):
        for run in add_side(store, spec, values, pair_start=0):
            store.update_run(run, campaign_id=campaign, side=side, git_sha="4be2c1d-dirty", **facts)


def test_the_report_of_an_ab_campaign_shows_the_decision_and_provenance(store, tmp_path):
    import shutil
    import subprocess

    from dsv4ctl.report.campaign import render_html, render_markdown, report_data

    rng = random.Random(12)
    ab_campaign(store, sample(rng, 101.3, 1, 8), sample(rng, 67.9, 1, 8), vllm_version="0.11.1",
                torch_version="2.6.0+cpu")
    data = report_data(store, "ab1")
    assert data.ab.decision == "promote"
    page = render_html(data)
    for text in ('<span class="decision promote">promote</span>', "j17-baseline (baseline)", "q1-off (candidate)",
                 "<code>switches.DSV4_MOE_ROUTING_Q1</code>", "<td>1</td><td>0</td>", "4be2c1d-dirty",
                 "DSV4_MOE_ROUTING_Q1=0", "0.11.1", "2.6.0+cpu", f"{data.ab.metrics[0].ratio:.4g}",
                 f"{data.ab.metrics[0].p_value:.2g}"):
        assert text in page, text
    assert "not recorded by this store" not in page
    md = render_markdown(data)
    assert "## A/B comparison" in md and "**promote**" in md and "| switches.DSV4_MOE_ROUTING_Q1 | 1 | 0 |" in md
    assert "| git sha | 4be2c1d-dirty | 4be2c1d-dirty |" in md and "| vLLM | 0.11.1 | 0.11.1 |" in md
    assert "| Triton | not recorded | not recorded |" in md
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is missing: ./scripts/setup installs it")
    (tmp_path / "ab.html").write_text(page, encoding="utf-8")
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", f"file://{tmp_path / 'ab.html'}"],
                         capture_output=True, text=True, timeout=120).stdout
    assert "A/B comparison" in dom and "what differs" in dom and "4be2c1d-dirty" in dom


def test_the_report_says_why_an_ab_campaign_has_no_comparison(store):
    from dsv4ctl.report.campaign import render_html, report_data

    ab_campaign(store, [100.0] * 6, [70.0] * 6)
    data = report_data(store, "ab1", metric="gen_S")
    assert data.ab is None and "metrics present: gen_s" in data.ab_error
    assert "No comparison: no run of either side has the metric" in render_html(data)


def test_the_markdown_report_spells_false_green_one_way(store):
    from dsv4ctl.report.campaign import render_markdown, report_data

    ab_campaign(store, [100.0] * 6, [70.0] * 6)
    store.db.execute("UPDATE verdicts SET passed = 0, status = 'degenerate', false_green = 1, verdict_json = "
                     "json_set(verdict_json, '$.passed', json('false'), '$.false_green', json('true'), "
                     "'$.status', 'degenerate') WHERE run_id = 1")
    store.db.commit()
    md = render_markdown(report_data(store, "ab1"))
    assert "degenerate FALSE GREEN" in md and "false green" not in md


# ---- issue 26 M3: sides are chosen, not guessed ----------------------------------------------------------------


def _numbers(c):
    return [(m.metric, m.baseline.n, m.candidate.n, m.ratio, m.p_value, m.decision, m.bootstrap_ci)
            for m in c.metrics] + [c.decision]


def test_two_names_that_are_an_ab_campaign_s_sides_compare_that_campaign_only(store):
    from dsv4ctl.report.campaign import report_data

    rng = random.Random(26)
    older = add_side(store, "j17-baseline.yaml", [150.0, 151.0])  # an earlier, unrelated run of the baseline
    ab_campaign(store, sample(rng, 101.3, 1, 6), sample(rng, 67.9, 1, 6))
    c = compare(store, "j17-baseline", "q1-off")
    assert not set(older) & set(c.baseline.runs) and len(c.baseline.runs) == 6 and len(c.candidate.runs) == 6
    assert c.baseline.name == "j17-baseline (campaign ab1 baseline)"
    assert any(w.startswith("2 other run(s) of j17-baseline and q1-off are outside it and left out") for w in c.warnings)
    assert _numbers(c) == _numbers(report_data(store, "ab1").ab)  # the campaign's report says the same
    assert _numbers(compare(store, None, None, campaign="ab1")) == _numbers(c)
    assert _numbers(compare(store, None, None, campaign="latest")) == _numbers(c)
    pooled = compare(store, "experiment:j17-baseline", "experiment:q1-off")  # every run, when asked for
    assert set(older) <= set(pooled.baseline.runs) and len(pooled.baseline.runs) == 8


def test_a_cancelled_run_is_left_out_and_said_not_a_block(store):
    from dsv4ctl.report.campaign import report_data

    rng = random.Random(27)
    ab_campaign(store, sample(rng, 101.3, 1, 7), sample(rng, 67.9, 1, 7))
    [cancelled] = [r.id for r in store.runs(campaign="ab1") if r.side == "baseline"][-1:]
    store.update_run(cancelled, state="CANCELLED")
    store.save_verdict(cancelled, {"status": "incomplete", "passed": False, "false_green": False, "bos_run": 0,
                                   "first_blocker": {"line": 0, "kind": "killed"}, "requests": [], "metrics": {}})
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision != "blocked" and not c.reasons and cancelled not in c.baseline.runs
    assert f"left out of the baseline: 1 cancelled run(s) ({cancelled}): a cancelled run is no result" in \
        " ".join(c.warnings)
    assert c.metrics[0].baseline.n == 6 and c.metrics[0].candidate.n == 7
    assert _numbers(report_data(store, "ab1").ab) == _numbers(c)


def test_an_in_flight_run_blocks_saying_it_is_not_judged_yet(store):
    add_side(store, "j17-baseline.yaml", [100.0] * 6)
    add_side(store, "q1-off.yaml", [70.0] * 6)
    spec = load_spec(EXPERIMENTS / "q1-off.yaml")[0].spec
    experiment = store.experiment_id(spec.name, spec.spec_hash(), json.dumps(spec.snapshot()), "q1-off.yaml")
    running = store.add_run(experiment_id=experiment, backend="slurm", token="t-running", state="RUNNING",
                            job_id="4242", ingested=0)
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "blocked"
    assert f"candidate run {running} (q1-off) is still RUNNING: not judged yet" in c.reasons[0]


def test_two_ab_campaigns_of_the_same_sides_are_not_guessed_between(store):
    from dsv4ctl.errors import UsageError

    rng = random.Random(28)
    ab_campaign(store, sample(rng, 101.3, 1, 3), sample(rng, 67.9, 1, 3))
    second = store.create_campaign("ab2", "slurm", "dsv4ctl submit --ab j17-baseline.yaml q1-off.yaml")
    for spec, side in (("j17-baseline.yaml", "baseline"), ("q1-off.yaml", "candidate")):
        for run in add_side(store, spec, sample(rng, 90, 1, 3), pair_start=0):
            store.update_run(run, campaign_id=second, side=side)
    with pytest.raises(UsageError, match=r"are the sides of 2 A/B campaigns \(ab2, ab1\): pick one with --campaign"):
        compare(store, "j17-baseline", "q1-off")
    assert len(compare(store, None, None, campaign="ab2").baseline.runs) == 3
    with pytest.raises(UsageError, match="not both"):
        compare(store, "j17-baseline", "q1-off", campaign="ab1")


def test_a_campaign_that_is_not_an_ab_is_refused_by_campaign_but_usable_as_a_side(store):
    from dsv4ctl.errors import UsageError

    suite = store.create_campaign("nightly", "slurm", "dsv4ctl suite x")
    for run in add_side(store, "j17-baseline.yaml", [100.0, 101.0, 99.0]):
        store.update_run(run, campaign_id=suite)
    add_side(store, "j17-baseline.yaml", [80.0, 81.0, 79.0])
    with pytest.raises(UsageError, match="campaign 'nightly' is not an A/B campaign"):
        compare(store, None, None, campaign="nightly")
    c = compare(store, "campaign:nightly", "runs:4,5,6")
    assert c.baseline.runs == [1, 2, 3] and c.candidate.runs == [4, 5, 6]


# ---- issue 26 m10: a length difference said as such; runs needed for the observed effect too ---------------------


def test_a_longer_greedy_output_is_a_length_difference_not_a_token_none(store):
    add_side(store, "j17-baseline.yaml", [100.0] * 6, tokens=[5, 6, 7, 8])
    add_side(store, "q1-off.yaml", [100.0] * 6, tokens=[5, 6, 7, 8, 9, 10])
    c = compare(store, "j17-baseline", "q1-off")
    assert c.token_differences == [{"request": 0, "position": 4, "baseline": None, "candidate": 9}]
    assert "greedy outputs differ in length: request 0: the candidate is longer (6 vs 4 tokens); the first 4 " \
           "tokens agree" in c.warnings


def test_inconclusive_with_a_large_observed_effect_says_the_runs_it_would_need(store):
    add_side(store, "j17-baseline.yaml", [100.0, 104.0, 97.0])
    add_side(store, "q1-off.yaml", [150.0, 160.0, 141.0])
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "inconclusive"
    [needs] = [r for r in c.metrics[0].reasons if r.startswith("about ")]
    assert "would see a 1.05x change with 80% power; the observed 1.50x would need about 6" in needs, needs


def test_a_wide_interval_is_written_in_plain_percent():
    from dsv4ctl.analysis.compare import SideStats
    from dsv4ctl.report.campaign import centre

    assert centre(SideStats(6, 1.0, (0.1, 30.0), True, [])) == "1 ±2900%"
    assert centre(SideStats(6, 100.0, (99.0, 101.5), True, [])) == "100 ±1.5%"
