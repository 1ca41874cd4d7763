"""`dsv4ctl compare` on the command line: the JSON shape, errors as JSON, several metrics, 80 columns."""

from __future__ import annotations

import json
import random

import pytest

from dsv4ctl.report import output
from dsv4ctl.cli import main
from dsv4ctl.store import open_store

from .conftest import FIXTURES
from .test_compare import add_side, sample


def run_main(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


def strict(text: str):
    """JSON as other languages read it: Infinity and NaN are not JSON."""
    def refuse(name: str):
        raise ValueError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "r.db"
    store = open_store(path)
    rng = random.Random(9)
    add_side(store, "j17-baseline.yaml", sample(rng, 100, 3, 6), extra={"ttft_s": 0.5})
    add_side(store, "q1-off.yaml", sample(rng, 100, 3, 5), extra={"ttft_s": 0.5})
    return path


@pytest.fixture
def columns80():
    console = output._console()
    width = console.width
    console.width = 80
    yield
    console.width = width


def test_json_is_nested_with_stable_keys_and_nulls(capsys, db):
    code, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--json")
    data = strict(out)
    assert code == 5 and data["decision"] == "inconclusive" and data["exit_code"] == 5
    assert list(data) == ["alpha", "factor", "baseline", "candidate", "decision", "metrics", "reasons",
                          "differences", "token_differences", "warnings", "min_runs", "min_runs_bounded_ci",
                          "exit_code"]
    assert list(data["baseline"]) == ["name", "runs", "experiments", "failed_runs"]
    gen_s = data["metrics"][0]
    assert list(gen_s) == ["metric", "direction", "baseline", "candidate", "ratio", "ratio_ci", "p_value",
                           "significant", "decision", "reasons", "runs_needed", "paired", "bootstrap_ci"]
    assert list(gen_s["baseline"]) == ["n", "median", "ci", "ci_bounded", "by_experiment"]
    assert gen_s["baseline"]["ci_bounded"] and len(gen_s["baseline"]["ci"]) == 2
    assert gen_s["candidate"]["ci"] is None and not gen_s["candidate"]["ci_bounded"]  # 5 samples: unbounded
    assert gen_s["ratio_ci"] is None and gen_s["paired"] is None
    assert data["differences"] == [{"key": "switches.DSV4_MOE_ROUTING_Q1", "baseline": ["1"], "candidate": ["0"]}]


def test_errors_with_json_are_json_on_stderr(capsys, db):
    code, out, err = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--json", "--metric", "gen_S")
    assert code == 2 and out == ""
    error = strict(err)["error"]
    assert "metrics present: gen_s, ttft_s" in error["message"] and error["exit_code"] == 2
    code, out, err = run_main(capsys, "compare", "nope", "q1-off", "--db", db, "--json")
    assert code == 2 and strict(err)["error"]["message"].startswith("no stored runs match 'nope'")


def test_unknown_metric_is_a_usage_error(capsys, db):
    code, out, err = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--metric", "gen_S")
    assert code == 2 and "BLOCKED" not in out
    assert "metrics present: gen_s, ttft_s (did you mean gen_s?)" in err


def test_several_metrics_in_one_table_that_fits_80_columns(capsys, db, columns80):
    code, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--metric", "gen_s,ttft_s")
    assert code == 5
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80
    header = next(line for line in lines if "metric" in line and "decision" in line)
    for word in ("metric", "baseline", "candidate", "ratio", "p", "decision"):
        assert f" {word} " in header
    assert any("gen_s ↓" in line for line in lines) and any("ttft_s ↓" in line for line in lines)
    assert any("±∞" in line for line in lines)  # the candidate's 5 samples
    assert "PROMOTE" not in out


def test_unbounded_interval_says_what_is_missing(capsys, db):
    _, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db)
    assert "±∞: need >= 6 samples per side for a bounded 95% interval (have 6 and 5)" in " ".join(out.split())


def test_markdown_has_one_row_per_metric(capsys, db):
    _, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--markdown",
                         "--metric", "gen_s,ttft_s")
    assert out.startswith("**inconclusive**")
    assert "| metric | baseline | candidate | ratio | p | decision |" in out
    assert "| gen_s ↓ |" in out and "| ttft_s ↓ |" in out


def test_mixed_sides_are_grouped_in_the_output(capsys, tmp_path, columns80):
    store = open_store(tmp_path / "r.db")
    add_side(store, "j17-baseline.yaml", [100.0, 101.0, 99.0, 100.5, 100.2, 99.7], tags=["baseline"])
    add_side(store, "cpu-smoke.yaml", [10.0, 11.0, 9.0], tags=["baseline"])
    add_side(store, "q1-off.yaml", [70.0, 71.0, 69.0, 70.5, 70.2, 69.7], tags=["candidate"])
    code, out, err = run_main(capsys, "compare", "tag:baseline", "tag:candidate", "--db", tmp_path / "r.db")
    assert "Traceback" not in err and code in (0, 1, 5)
    assert "baseline  tag:baseline: 9 runs, 9 passed, 2 experiments" in out
    assert "runs per experiment" in out and "cpu-smoke" in out and "baseline mixes 2 experiments" in err
    assert max(map(len, out.splitlines())) <= 80
    code, out, _ = run_main(capsys, "compare", "tag:baseline", "tag:candidate", "--db", tmp_path / "r.db", "--json")
    groups = strict(out)["metrics"][0]["baseline"]["by_experiment"]
    assert [g["experiment"] for g in groups] == ["cpu-smoke", "j17-baseline"]


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
    data = strict(result.stdout)
    assert result.exit_code == 0 and data["decision"] == "promote" and data["warnings"] == []
    assert data["metrics"][0]["ratio"] == pytest.approx(67.9 / 101.3, rel=0.05)


# ---- issue 26 M3 and the exit-code table ---------------------------------------------------------------------


def test_compare_campaign_on_the_command_line_and_its_usage_errors(capsys, tmp_path):
    from .test_compare import ab_campaign

    db = tmp_path / "r.db"
    store = open_store(db)
    rng = random.Random(31)
    add_side(store, "j17-baseline.yaml", [150.0, 152.0])  # older runs that must not pool in
    ab_campaign(store, sample(rng, 101.3, 1, 8), sample(rng, 67.9, 1, 8))
    code, out, _ = run_main(capsys, "compare", "--campaign", "latest", "--db", db, "--json")
    by_campaign = strict(out)
    assert code == 0 and by_campaign["decision"] == "promote" and len(by_campaign["baseline"]["runs"]) == 8
    code, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--json")
    by_name = strict(out)
    assert by_name["metrics"] == by_campaign["metrics"] and by_name["baseline"]["runs"] == by_campaign["baseline"]["runs"]
    code, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db)
    assert code == 0 and "baseline  j17-baseline (campaign ab1 baseline): 8 runs, 8 passed" in out
    for args, said in ((("--campaign", "ab1", "j17-baseline", "q1-off"), "not both"),
                       (("j17-baseline",), "give BASELINE CANDIDATE, or --campaign C"),
                       (("--campaign", "nope"), "no campaign named 'nope'"),
                       (("nope", "q1-off"), "no stored runs match 'nope'")):
        code, out, err = run_main(capsys, "compare", *args, "--db", db)
        assert code == 2 and out == "" and said in err, (args, err)


def test_inconclusive_is_exit_5_never_the_timeout_s_3(capsys, db):
    from dsv4ctl.errors import ExitCode

    code, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--json")
    assert strict(out)["decision"] == "inconclusive" and code == ExitCode.INCONCLUSIVE == 5
    assert code != ExitCode.TIMEOUT


def test_cli_says_a_length_difference_and_qualifies_a_bootstrap_of_few_runs(capsys, tmp_path):
    db = tmp_path / "r.db"
    store = open_store(db)
    add_side(store, "j17-baseline.yaml", [100.0, 104.0, 97.0], tokens=[5, 6, 7, 8])
    add_side(store, "q1-off.yaml", [150.0, 160.0, 141.0], tokens=[5, 6, 7, 8, 9, 10])
    code, out, err = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db)
    said = " ".join((out + err).split())
    assert code == 5 and "None vs" not in said
    assert "the candidate is longer (6 vs 4 tokens); the first 4 tokens agree" in said
    assert "(from 3 and 3 runs: a bootstrap of so few is narrower than the truth" in said
    assert "the observed 1.50x would need about 6" in said
