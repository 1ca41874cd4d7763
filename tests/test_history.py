"""History and change points (issue 17): a known step found at its commit with its size, pure noise left alone at
the stated false-positive rate, failed runs kept out of the series, and a config change named at its step."""

from __future__ import annotations

import random

from dsv4ctl.campaign.verdicts import record_verdict
from dsv4ctl.analysis.history import (
    FALSE_POSITIVE_BOUND,
    Sample,
    build_history,
    change_points,
    confirmed_change_points,
    sparkline,
)


def _noisy(seed: int, means: list[float], runs: int = 3, spread: float = 0.02) -> list[list[float]]:
    r = random.Random(seed)
    return [[r.gauss(mean, mean * spread) for _ in range(runs)] for mean in means]


def test_a_known_step_is_found_at_its_commit_with_its_size():
    # 67.9 s -> 101.3 s (the Q1 switch, section 0.2) at commit 12 of 20, 2% noise, 3 runs per commit
    for seed in range(20):
        groups = _noisy(seed, [67.9] * 12 + [101.3] * 8)
        assert confirmed_change_points(groups) == [12], seed
    runs = [Sample(i * 10 + k, None, f"{i:040x}", v) for i, g in enumerate(_noisy(1, [67.9] * 12 + [101.3] * 8))
            for k, v in enumerate(g)]
    history = build_history("j", "gen_s", "commit", runs)
    [step] = history.steps
    assert (step.before, step.after, step.index) == (f"{11:040x}", f"{12:040x}", 12)
    assert abs(step.ratio - 101.3 / 67.9) < 0.02
    assert step.p_value < 1e-6
    assert not step.config_changed


def test_a_small_step_and_two_steps_are_found_where_they_are():
    assert confirmed_change_points(_noisy(3, [68.0] * 10 + [73.0] * 10)) == [10]  # +7% against 2% noise
    assert confirmed_change_points(_noisy(4, [68.0] * 6 + [100.0] * 6 + [80.0] * 6)) == [6, 12]


def test_pure_noise_shows_no_step_at_the_stated_false_positive_rate():
    """200 seeded noise series per shape; the share with any step must stay below FALSE_POSITIVE_BOUND (5%)."""
    for runs, commits in ((3, 20), (1, 30), (2, 8)):
        flagged = sum(bool(confirmed_change_points(_noisy(seed, [68.0] * commits, runs=runs)))
                      for seed in range(200))
        assert flagged / 200 < FALSE_POSITIVE_BOUND, (runs, commits, flagged)


def test_pelt_alone_with_a_zero_penalty_cuts_everywhere_and_constant_series_never():
    groups = [[1.0], [2.0], [3.0]]
    assert change_points(groups, penalty=0.0) == [1, 2]
    assert change_points([[5.0, 5.0]] * 10) == []


def test_a_step_at_a_spec_change_says_so():
    runs = [Sample(i * 10 + k, None, f"c{i}", v, spec_hash="aaa" if i < 6 else "bbb")
            for i, g in enumerate(_noisy(5, [68.0] * 6 + [100.0] * 6)) for k, v in enumerate(g)]
    [step] = build_history("j", "gen_s", "commit", runs).steps
    assert step.config_changed and "spec changed (aaa -> bbb)" in step.notes


def test_dates_group_in_date_order_and_the_sparkline_follows_the_medians():
    runs = [Sample(1, None, "2026-11-02", 5.0), Sample(2, None, "2026-11-01", 1.0), Sample(3, None, "2026-11-02", 7.0)]
    history = build_history("j", "gen_s", "date", runs)
    assert [p.group for p in history.points] == ["2026-11-01", "2026-11-02"]
    assert [p.median for p in history.points] == [1.0, 6.0]
    assert sparkline([1.0, 6.0, 3.5]) == "▁█▅"
    assert history.to_json()["points"][0]["ci"] is None  # one run: the interval is unbounded, JSON says null


def test_a_campaign_report_shows_each_experiment_history_up_to_that_campaign(tmp_path):
    import hashlib
    import json

    from dsv4ctl.judge.files import judge_files
    from dsv4ctl.report.campaign import render_html, render_markdown, report_data
    from dsv4ctl.store import open_store

    from .conftest import FIXTURES

    text = (FIXTURES / "logs" / "J17.log").read_text(encoding="utf-8")
    store = open_store(tmp_path / "r.db")
    experiment = store.experiment_id("j17", "h", json.dumps({"expect": {}}), "s.yaml")
    shas = [hashlib.sha1(f"c{i}".encode()).hexdigest() for i in range(5)]

    def run(campaign, sha, gen_s, n):
        log = tmp_path / f"{n}.log"
        log.write_text(text.replace('"gen_s": 21.7', f'"gen_s": {gen_s}'), encoding="utf-8")
        run_id = store.add_run(experiment_id=experiment, campaign_id=campaign, backend="local", token=f"t{n}",
                               state="COMPLETED", ingested=0, point_json="{}", repeat_index=0, git_sha=sha)
        record_verdict(store, run_id, judge_files(log, FIXTURES / "logs" / "J17.sacct").to_json())

    values = [[67.5, 68.1, 67.9], [68.3, 67.7, 68.0], [101.0, 101.5, 100.9], [101.3, 101.8, 100.7]]
    n = 0
    for i, group in enumerate(values):
        campaign = store.create_campaign(f"c{i}", "local", "dsv4ctl submit")
        for gen_s in group:
            n += 1
            run(campaign, shas[i], gen_s, n)
    later = store.create_campaign("later", "local", "dsv4ctl submit")
    run(later, shas[4], 50.0, 99)
    data = report_data(store, "c3")
    [history] = data.histories
    assert [p.median for p in history.points] == [67.9, 68.0, 101.0, 101.3]  # the later campaign is not in it
    [step] = history.steps
    assert (step.before, step.after) == (shas[1], shas[2])
    assert f"step {shas[1][:12]} → {shas[2][:12]}: x1.489" in render_markdown(data)
    assert "History of gen_s: j17" in render_html(data)
    assert data.to_json()["histories"][0]["steps"][0]["after"] == shas[2]


# ---- issue 29 S20: any range of values, JSON without Infinity --------------------------------------------------


def _strict_json(text: str):
    import json

    def refuse(name: str):
        raise ValueError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def test_medians_of_values_near_the_float_limit_do_not_overflow():
    runs = [Sample(i, None, f"{i // 4:040x}", v) for i, v in enumerate([1e308] * 4 + [1e-308] * 4 + [0.0] * 4)]
    history = build_history("extreme", "gen_s", "commit", runs)
    assert [p.median for p in history.points] == [1e308, 1e-308, 0.0]
    import json

    data = _strict_json(json.dumps(history.to_json()))
    assert [p["median"] for p in data["points"]] == [1e308, 1e-308, 0.0]


def test_a_sparkline_draws_any_finite_range():
    assert sparkline([1e308, 1e-308, 0.0]) == "█▁▁"
    assert sparkline([-1e308, 1e308]) == "▁█"  # hi - lo overflows
    assert sparkline([1e308, 1e308]) == "▅▅"
    assert sparkline([1.0, float("nan"), 2.0]) == "▁ █"


def test_a_step_from_zero_is_said_so_and_its_ratio_is_null_in_json():
    import json

    values = [0.0] * 6 + [5.0, 5.1, 4.9, 5.05, 5.02, 4.97]
    runs = [Sample(i, None, f"{i // 6:040x}", v) for i, v in enumerate(values)]
    history = build_history("zero", "gen_s", "commit", runs)
    [step] = history.steps
    assert step.size == "from 0"
    assert _strict_json(json.dumps(history.to_json()))["steps"][0]["ratio"] is None


def test_history_cli_on_extreme_values_prints_a_table_and_strict_json(cli, tmp_path):
    from .conftest import FIXTURES

    text = (FIXTURES / "logs" / "J17.log").read_text(encoding="utf-8")
    db = tmp_path / "r.db"
    for i, value in enumerate(["1e308"] * 4 + ["1e-308"] * 4 + ["0"] * 4):
        log = tmp_path / f"x{i}.log"
        log.write_text(text.replace('"gen_s": 21.7', f'"gen_s": {value}'), encoding="utf-8")
        # four logs of one content per commit: --again since issue 29 S11 refuses the same log twice
        done = cli("ingest", "--log", log, "--experiment", "extreme", "--git-sha", f"{i // 4:012d}aaaa", "--db", db,
                   "--again")
        assert done.exit_code == 0, done.output
    shown = cli("history", "extreme", "--db", db)
    assert shown.exit_code == 0 and "1e+308" in shown.output and "█" in shown.output, shown.output
    data = _strict_json(cli("history", "extreme", "--db", db, "--json").output)
    assert [p["median"] for p in data["points"]] == [1e308, 1e-308, 0.0]


# ---- issue 29 S21 / issue 26 m14: an unknown experiment or metric is a usage error -------------------------------


def _run_main(capsys, *args):
    import pytest

    from dsv4ctl.cli import main

    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


def test_history_of_an_unknown_experiment_or_metric_exits_2_with_the_known_ones(cli, tmp_path, capsys):
    from .conftest import FIXTURES

    db = tmp_path / "r.db"
    done = cli("ingest", "--log", FIXTURES / "logs" / "J17.log", "--experiment", "perf1", "--db", db)
    assert done.exit_code == 0, done.output
    code, out, err = _run_main(capsys, "history", "nosuch", "--db", db)
    assert code == 2 and out == "" and "no run of an experiment named 'nosuch'; experiments: perf1" in err, err
    code, _, err = _run_main(capsys, "history", "perf1", "--metric", "nosuch", "--db", db)
    assert code == 2 and "no run of 'perf1' has the metric 'nosuch'" in err and "gen_s" in err, err
    code, _, err = _run_main(capsys, "history", "perf1", "--metric", "gen_S", "--db", db)
    assert code == 2 and "did you mean 'gen_s'?" in err, err
    code, _, err = _run_main(capsys, "history", "perf1", "--metric", "tokens_per_s", "--db", db, "--json")
    assert code == 0 and _strict_json(_)["points"], err
