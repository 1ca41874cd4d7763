"""`compare` decisions on seeded synthetic samples, the correctness gate, what differs, and the CLI contract."""

from __future__ import annotations

import json
import random

import pytest

from dsv4ctl.compare import compare
from dsv4ctl.specload import load_spec
from dsv4ctl.store import open_store

from .conftest import EXPERIMENTS, FIXTURES


def add_side(store, spec_file: str, values: list[float], metric: str = "gen_s", bad: int = 0,
             tokens: list[int] | None = None, pair_start: int | None = None) -> list[int]:
    spec = load_spec(EXPERIMENTS / spec_file)[0].spec
    experiment = store.experiment_id(spec.name, spec.spec_hash(), json.dumps(spec.snapshot()), spec_file)
    ids = []
    for i, value in enumerate(values):
        run = store.add_run(experiment_id=experiment, backend="slurm", token=f"{spec.name}-{random.random()}",
                            state="COMPLETED", job_id=str(1000 + len(store.runs())), ingested=0,
                            switches_json=json.dumps(spec.resolved_switches()), dsv4ctl_version="0.1.0",
                            pair_id=None if pair_start is None else pair_start + i, node="dcu-node07",
                            tags=",".join(spec.tags))
        passed = i >= bad
        store.save_verdict(run, {"status": "coherent" if passed else "degenerate", "passed": passed,
                                 "false_green": False, "bos_run": 0 if passed else 31, "py_exit": 0,
                                 "first_blocker": None if passed else {"line": 34, "kind": "degenerate_output"},
                                 "requests": [{"token_ids": tokens or [5, 6, 7, 8]}], "metrics": {metric: value}})
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
    assert c.decision == "promote" and c.exit_code == 0 and c.significant and c.ratio < 0.7
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
    assert c.decision == "inconclusive" and c.exit_code == 3 and c.runs_needed > 8
    assert any("runs per side" in r for r in c.reasons)


def test_a_failed_run_blocks_and_is_listed(store):
    rng = random.Random(4)
    add_side(store, "j17-baseline.yaml", sample(rng, 101, 1, 6))
    add_side(store, "q1-off.yaml", sample(rng, 68, 1, 6), bad=1)
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "blocked" and c.exit_code == 1
    assert c.candidate.failed_runs[0]["status"] == "degenerate"
    assert "did not pass: degenerate (degenerate_output)" in c.reasons[0]


def test_too_few_samples_warn_like_benchstat(store):
    add_side(store, "j17-baseline.yaml", [100.0, 101.0, 99.0])
    add_side(store, "q1-off.yaml", [70.0, 71.0, 69.0])
    c = compare(store, "j17-baseline", "q1-off")
    assert c.decision == "inconclusive"  # best possible exact p with 3 vs 3 is 0.1
    assert any("need >= 4 samples" in w for w in c.warnings)
    assert c.baseline.ci == (float("-inf"), float("inf"))


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
    assert c.direction == "higher" and c.decision == "promote"


def test_paired_analysis_and_token_differences(store):
    rng = random.Random(7)
    add_side(store, "j17-baseline.yaml", sample(rng, 100, 1, 8), pair_start=0)
    add_side(store, "q1-off.yaml", sample(rng, 80, 1, 8), pair_start=0, tokens=[5, 6, 9, 8])
    c = compare(store, "j17-baseline", "q1-off")
    assert c.paired["pairs"] == 8 and c.paired["wilcoxon_p"] < 0.05
    assert c.token_differences == [{"request": 0, "position": 2, "baseline": 7, "candidate": 9}]


def test_sides_by_ids_tags_and_spec_files(store):
    rng = random.Random(8)
    a = add_side(store, "j17-baseline.yaml", sample(rng, 100, 1, 5))
    add_side(store, "q1-off.yaml", sample(rng, 70, 1, 5))
    c = compare(store, ",".join(map(str, a)), str(EXPERIMENTS / "q1-off.yaml"))
    assert c.baseline.n == 5 and c.candidate.n == 5
    c = compare(store, "j17-baseline", "tag:ab")  # q1-off.yaml carries the tag `ab`
    assert c.candidate.n == 5
    from dsv4ctl.compare import CompareError

    with pytest.raises(CompareError, match="no stored runs"):
        compare(store, "nope", "q1-off")


def test_cli_json_contract_markdown_and_exit_codes(cli, tmp_path):
    store = open_store(tmp_path / "r.db")
    rng = random.Random(9)
    add_side(store, "j17-baseline.yaml", sample(rng, 100, 3, 6))
    add_side(store, "q1-off.yaml", sample(rng, 100, 3, 6))
    result = cli("compare", "j17-baseline", "q1-off", "--db", tmp_path / "r.db", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 3
    for key in ("metric", "baseline", "candidate", "ratio", "ratio_ci", "p_value", "significant", "decision",
                "differences"):
        assert key in data
    for key in ("name", "n", "median", "ci", "failed_runs"):
        assert key in data["baseline"]
    md = cli("compare", "j17-baseline", "q1-off", "--db", tmp_path / "r.db", "--markdown").stdout
    assert md.startswith("**inconclusive**") and "| median gen_s |" in md
    human = cli("compare", "j17-baseline", "q1-off", "--db", tmp_path / "r.db").stdout
    assert "INCONCLUSIVE" in human and "what differs" in human


def test_end_to_end_through_ingest_of_logs_with_metrics(cli, tmp_path):
    """Logs with DSV4_METRICS lines, ingested as two experiments, compared."""
    base_text = (FIXTURES / "logs" / "J17.log").read_text(encoding="utf-8")
    db = str(tmp_path / "r.db")
    rng = random.Random(10)
    for side, centre in (("q1-on", 67.9), ("q1-off", 101.3)):
        for i in range(6):
            gen_s = rng.gauss(centre, 1.5)
            log = tmp_path / f"{side}-{i}.log"
            log.write_text(base_text.replace('"gen_s": 21.7', f'"gen_s": {gen_s:.3f}'), encoding="utf-8")
            flag = "1" if side == "q1-on" else "0"
            assert cli("ingest", "--log", log, "--sacct", FIXTURES / "logs" / "J17.sacct", "--experiment", side,
                       "--switch", f"DSV4_MOE_ROUTING_Q1={flag}", "--db", db).exit_code == 0
    result = cli("compare", "q1-off", "q1-on", "--db", db, "--json", "--expect-diff", "switches.DSV4_MOE_ROUTING_Q1")
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["decision"] == "promote" and data["warnings"] == []
    assert data["ratio"] == pytest.approx(67.9 / 101.3, rel=0.05)
