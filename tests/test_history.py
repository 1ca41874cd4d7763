"""History and change points (issue 17): a known step found at its commit with its size, pure noise left alone at
the stated false-positive rate, failed runs kept out of the series, and a config change named at its step."""

from __future__ import annotations

import random

from dsv4ctl.history import (FALSE_POSITIVE_BOUND, Sample, build_history, change_points, confirmed_change_points,
                             sparkline)


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
