"""Verdicts: every reconstructed job of the report, and the rules one by one."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.judge.files import judge_files
from dsv4ctl.judge.scan import LogFacts, RequestBlock
from dsv4ctl.judge.sacct import parse_sacct, summarise
from dsv4ctl.judge.rules import VerdictOptions, judge

from .conftest import FIXTURES

LOGS = FIXTURES / "logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_verdict(name):
    expected = EXPECTED[name]
    log = LOGS / f"{name}.log"
    sacct = LOGS / f"{name}.sacct"
    v = judge_files(log, sacct if sacct.exists() else None)
    assert v.status == expected["status"], v.reasons
    for key in ("passed", "false_green", "stage", "engine_ready_s", "bos_run"):
        if key in expected:
            assert getattr(v, key) == expected[key], key
    if "first_blocker_kind" in expected:
        if expected["first_blocker_kind"] is None:
            assert v.first_blocker is None
        else:
            assert v.first_blocker.kind == expected["first_blocker_kind"]
    if "first_blocker_text" in expected:
        # The reported line number must point at the line that holds the error.
        lines = log.read_bytes().decode("utf-8", "replace").split("\n")
        assert expected["first_blocker_text"] in lines[v.first_blocker.line - 1]
    if "first_blocker_message" in expected:
        assert expected["first_blocker_message"] in v.first_blocker.message
    if "first_blocker_process" in expected:
        assert v.first_blocker.process == expected["first_blocker_process"]
    if "noise_kinds" in expected:
        assert [n["kind"] for n in v.noise] == expected["noise_kinds"]
    if "bad_requests" in expected:
        assert [r.index for r in v.requests if r.problems] == expected["bad_requests"]
    if "n_tokens" in expected:
        assert [r.n_tokens for r in v.requests] == expected["n_tokens"]


def test_no_fixture_is_a_false_pass():
    for name in EXPECTED:
        sacct = LOGS / f"{name}.sacct"
        v = judge_files(LOGS / f"{name}.log", sacct if sacct.exists() else None)
        assert v.passed == (name == "J17"), name


def test_noise_is_never_the_first_blocker():
    for name in EXPECTED:
        v = judge_files(LOGS / f"{name}.log")
        if v.first_blocker:
            assert "_report_usage_worker" not in v.first_blocker.message
            assert "libcudart is not loaded" not in v.first_blocker.message
            assert "JSONDecodeError" not in (v.first_blocker.exc_type or "")


def facts_with(*ids_lists, **kw) -> LogFacts:
    facts = LogFacts(requests=[RequestBlock(line=i + 1, index=i, token_ids=list(ids))
                               for i, ids in enumerate(ids_lists)])
    facts.py_exit = kw.pop("py_exit", 0)
    for key, value in kw.items():
        setattr(facts, key, value)
    return facts


GOOD = [5, 6, 7, 8] * 8


def test_coherent_run_passes():
    v = judge(facts_with(GOOD), summarise(parse_sacct("JobID|State|ExitCode\n1|COMPLETED|0:0\n")))
    assert (v.status, v.passed, v.false_green, v.first_blocker) == ("coherent", True, False, None)


def test_two_bos_in_a_row_is_degenerate_one_is_not():
    assert judge(facts_with([5, 0, 0, 6] + GOOD)).status == "degenerate"
    assert judge(facts_with([5, 0, 6] + GOOD)).status == "coherent"
    assert judge(facts_with([5, 2, 2, 6] + GOOD), options=VerdictOptions(bos_id=2)).status == "degenerate"


def test_repetition_limit():
    assert judge(facts_with([9] * 7 + GOOD)).status == "coherent"
    v = judge(facts_with([9] * 8 + GOOD))
    assert v.status == "degenerate" and v.max_repeat_run == 8
    assert judge(facts_with([9] * 8 + GOOD), options=VerdictOptions(max_repeat_run=9)).status == "coherent"


def test_short_output_with_ignore_eos_and_empty_output():
    opts = VerdictOptions(expected_tokens=32, ignore_eos=True)
    assert judge(facts_with(GOOD[:10]), options=opts).status == "degenerate"
    assert judge(facts_with(GOOD[:10]), options=VerdictOptions(expected_tokens=32, ignore_eos=False)).passed
    assert judge(facts_with([])).status == "degenerate"


def test_probe_verdict_is_evidence_never_trusted_alone():
    v = judge(facts_with([32] + [0] * 31, probe_verdict="COHERENT", probe_verdict_line=40))
    assert v.status == "degenerate" and v.false_green
    v = judge(facts_with(GOOD, probe_verdict="DEGENERATE", probe_verdict_line=40))
    assert v.status == "degenerate" and not v.passed


def test_coherent_tokens_but_python_failed_or_scheduler_failed():
    assert not judge(facts_with(GOOD, py_exit=1)).passed
    assert not judge(facts_with(GOOD, py_exit=None)).passed
    failed = summarise(parse_sacct("JobID|State|ExitCode\n1|FAILED|1:0\n"))
    v = judge(facts_with(GOOD), failed)
    assert v.status == "coherent" and not v.passed and not v.false_green


def test_missing_requests_of_a_batch_are_incomplete():
    facts = facts_with(GOOD, GOOD, expect={"n_requests": 8})
    v = judge(facts)
    assert v.status == "incomplete" and "6 of 8" in " ".join(v.reasons)


def test_killed_without_results_is_incomplete_not_crashed():
    timeout = summarise(parse_sacct("JobID|State|ExitCode\n1|TIMEOUT|0:0\n"))
    v = judge(LogFacts(py_exit=None), timeout)
    assert v.status == "incomplete" and v.first_blocker.kind == "killed"


def test_verdict_json_contract_keys():
    v = judge_files(LOGS / "J17.log", LOGS / "J17.sacct").to_json()
    for key in ("status", "passed", "false_green", "stage", "first_blocker", "requests", "bos_run", "py_exit",
                "probe_verdict", "scheduler", "engine_ready_s", "metrics", "nonfinite", "noise"):
        assert key in v
    assert set(v["requests"][0]) >= {"token_ids", "finish_reason", "bos_run", "max_repeat_run"}
    assert set(v["scheduler"]) >= {"job_id", "state", "exit_code", "signal", "elapsed_s", "max_rss_kib"}
    json.dumps(v)


def test_golden_divergence_names_the_first_position():
    opts = VerdictOptions(golden=(tuple(GOOD),))
    assert judge(facts_with(GOOD), options=opts).passed
    changed = GOOD[:5] + [99] + GOOD[6:]
    v = judge(facts_with(changed), options=opts)
    assert v.status == "degenerate" and "token 5: expected 6, got 99" in v.reasons[0]


def test_vllms_logprob_rule_accepts_a_close_first_difference():
    golden = tuple(GOOD)
    changed = GOOD[:5] + [99] + GOOD[6:]
    facts = facts_with(changed)
    top = [[[t, -0.1], [t + 1000, -2.0]] for t in changed]  # the run's top-2 at each position
    top[5] = [[99, -0.6], [GOOD[5], -0.8]]  # the golden token was the runner-up: close
    facts.requests[0].logprobs = top
    assert judge(facts, options=VerdictOptions(golden=(golden,))).status == "coherent"
    top[5] = [[99, -0.6], [1234, -0.8]]  # the golden token is not in the run's top-N: a real difference
    assert judge(facts, options=VerdictOptions(golden=(golden,))).status == "degenerate"
    # with the golden's own logprobs, the run's token must be in the golden's top-N too
    top[5] = [[99, -0.6], [GOOD[5], -0.8]]
    golden_top = [[[t, -0.1]] for t in GOOD]
    opts = VerdictOptions(golden=(golden,), golden_logprobs=(golden_top,))
    assert judge(facts, options=opts).status == "degenerate"
    golden_top[5] = [[GOOD[5], -0.5], [99, -0.9]]
    assert judge(facts, options=VerdictOptions(golden=(golden,), golden_logprobs=(golden_top,))).status == \
        "coherent"


def test_logprobs_lines_are_parsed():
    from dsv4ctl.judge.scan import parse_bytes

    facts = parse_bytes(b"TOKEN_IDS: [5, 6]\nFINISH_REASON: length\nLOGPROBS: [[[5, -0.1], [7, -2.5]], [[6, -0.2]]]\n")
    assert facts.requests[0].logprobs == [[[5, -0.1], [7, -2.5]], [[6, -0.2]]]


def test_options_for_spec_are_shared_by_cli_and_probe():
    from dsv4ctl.spec.load import load_spec
    from dsv4ctl.judge.rules import options_for_spec

    from .conftest import EXPERIMENTS

    snapshot = load_spec(EXPERIMENTS / "cpu-smoke.yaml")[0].spec.snapshot()
    opts = options_for_spec(snapshot)
    assert (opts.expected_requests, opts.expected_tokens, opts.ignore_eos, opts.golden) == (3, 32, True, ())
    snapshot["batch"], snapshot["expect"]["golden_token_ids"] = 5, [1, 2, 3]  # a flat list: request 0's golden
    assert options_for_spec(snapshot).golden == ((1, 2, 3), None, None, None, None)
    snapshot["expect"]["golden_token_ids"] = [[1], [2]]
    assert options_for_spec(snapshot).golden == ((1,), (2,), None, None, None)
