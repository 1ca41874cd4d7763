"""Logs and sacct text as a hostile user (or a broken job) writes them: caps that must never change a verdict,
numbers too big to parse, garbled markers, random bytes. Each regression test names the bug it pins down.

The property behind all of them: judging never raises, memory stays bounded, and a log that holds a bad request
never passes."""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4ctl.judge.rules import VerdictOptions, judge
from dsv4ctl.judge.sacct import parse_elapsed, parse_sacct, summarise
from dsv4ctl.judge.scan import MAX_REQUESTS, MAX_STAGES, parse_bytes

GOOD_IDS = list(range(100, 132))
BAD_IDS = [0] * 32  # all BOS


def request(i: int, ids: list[int]) -> str:
    return f"REQUEST: {i}\nTOKEN_IDS: {json.dumps(ids)}\nFINISH_REASON: length\n"


def run_log(requests: list[list[int]], tail: str = "") -> bytes:
    expect = {"max_tokens": 32, "ignore_eos": True, "n_requests": len(requests), "bos_id": 0, "max_repeat_run": 8}
    body = "".join(request(i, ids) for i, ids in enumerate(requests))
    return (f"### STAGE: generate\nENGINE_READY in 1.0s\nDSV4_EXPECT: {json.dumps(expect)}\n{body}"
            f'DSV4_METRICS: {{"gen_s": 1.0}}\n{tail}PY_EXIT=0\n').encode()


def verdict_of(data: bytes, sacct: str | None = None):
    scheduler = summarise(parse_sacct(sacct)) if sacct else None
    return judge(parse_bytes(data), scheduler)


# ---- caps never change a verdict (issue 12, bug 2) ----------------------------------------------------------------


def test_a_bad_request_past_the_cap_still_fails_the_run():
    requests = [GOOD_IDS] * 5000
    requests[4500] = BAD_IDS
    v = verdict_of(run_log(requests))
    assert v.status == "degenerate" and not v.passed
    assert v.first_blocker.line > 0 and any("request 4500" in r for r in v.reasons)
    assert v.evidence["requests_past_cap"] == {"judged": 5000 - MAX_REQUESTS, "bad": 1}


def test_a_healthy_batch_bigger_than_the_cap_passes():
    v = verdict_of(run_log([GOOD_IDS] * 5000))
    assert v.status == "coherent" and v.passed and not v.false_green
    assert v.evidence["requests_judged"] == 5000


def test_a_token_list_of_600k_ids_on_one_line_is_counted_and_judged_whole():
    ids = [7, 8, 9, 10] * 150_000
    v = verdict_of(run_log([ids]), )
    assert v.requests[0].n_tokens == 600_000 and v.status == "coherent"
    ids[-20:] = [0] * 20  # a BOS run at the very end, far past what is kept in memory
    v = verdict_of(run_log([ids]))
    assert v.status == "degenerate" and v.requests[0].bos_run == 20


def test_stage_lines_are_capped_with_a_count_and_the_last_stage_kept():
    stages = "".join(f"### STAGE: step {i}\n" for i in range(20_000))
    v = verdict_of(stages.encode() + run_log([GOOD_IDS]))
    assert len(v.evidence["stages"]) == MAX_STAGES and v.evidence["dropped"]["stages"] > 0
    assert v.stage == "generate" and v.passed


# ---- numbers too big to parse (issue 12, bug 8) ------------------------------------------------------------------


def test_py_exit_with_5000_digits_is_unreadable_not_a_crash():
    v = verdict_of(run_log([GOOD_IDS]).replace(b"PY_EXIT=0", b"PY_EXIT=" + b"9" * 5000))
    assert not v.passed and v.py_exit is None and v.evidence["unreadable"][0]["kind"] == "py_exit"


def test_a_4301_digit_token_id_is_an_unreadable_id():
    v = verdict_of(run_log([GOOD_IDS[:-1] + [int("9" * 20)]]).replace(b"9" * 20, b"9" * 4301))
    assert v.status == "degenerate" and not v.passed
    assert "unreadable token ids" in v.first_blocker.message


def test_dsv4_expect_with_wrong_types_never_passes():
    data = run_log([GOOD_IDS]).replace(b'"max_tokens": 32', b'"max_tokens": "x"')
    v = verdict_of(data)
    assert not v.passed and v.evidence["unreadable"][0]["kind"] == "expect.max_tokens"


def test_a_truncated_metrics_line_is_unreadable():
    data = run_log([GOOD_IDS]).replace(b'DSV4_METRICS: {"gen_s": 1.0}', b'DSV4_METRICS: {"gen_s": 1.')
    v = verdict_of(data)
    assert not v.passed and v.evidence["unreadable"][0]["kind"] == "metrics"


def test_a_400_digit_metric_is_kept_as_data():
    data = run_log([GOOD_IDS]).replace(b'{"gen_s": 1.0}', b'{"gen_s": 1.0, "tokens": ' + b"7" * 400 + b"}")
    v = verdict_of(data)
    assert v.passed and v.metrics["tokens"] == int("7" * 400)


def test_sacct_elapsed_nan_and_huge_are_unreadable():
    assert parse_elapsed("nan") is None and parse_elapsed("1e999") is None and parse_elapsed("inf:00") is None
    text = "JobID|State|ExitCode|Elapsed|MaxRSS\n5|COMPLETED|0:0|nan|" + "9" * 400 + "K\n"
    summary = summarise(parse_sacct(text))
    assert summary.elapsed_s is None and summary.max_rss_kib is None and summary.completed_ok


def test_huge_exit_code_in_sacct_is_not_success():
    summary = summarise(parse_sacct("JobID|State|ExitCode\n5|COMPLETED|" + "0" * 5000 + ":0\n"))
    assert not summary.completed_ok
    assert not verdict_of(run_log([GOOD_IDS]), "JobID|State|ExitCode\n5|COMPLETED|" + "0" * 5000 + ":0\n").passed


# ---- the fuzz suite ---------------------------------------------------------------------------------------------

MARKERS = ["### STAGE: ", "TOKEN_IDS: ", "TOKEN_IDS[3]: ", "FINISH_REASON: ", "TOKEN_DECODE: ", "OUTPUT: ",
           "OUTPUT_REPR: ", "LOGPROBS: ", "DSV4_METRICS: ", "DSV4_EXPECT: ", "DSV4_VERDICT: ", "DSV4_JOB: ",
           "DSV4_SETUP_ERROR: ", "[DSV4_DIAG] ", "[DSV4_DIAG][TP1] x_finite = ", "PY_EXIT=", "ENGINE_READY in ",
           "Traceback (most recent call last):", "During handling of the above exception, another exception occurred:",
           "Generated text: ", "CompletionOutput(index=0, text=", "slurmstepd: error: ", "(EngineCore_DP0 pid=1) ",
           "(Worker_TP3 pid=9) ERROR 11-02 07:41:55 [core.py:1] ", "[rank0]: ", "svc-1  | ", "3: ", "│ "]
HOSTILE = st.one_of(
    st.text(max_size=80),
    st.integers(min_value=-(10**600), max_value=10**600).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e999", "[", "]", "[[[[", "{", '{"a":', "...", "\x00", "\ufffd",
                     "'", '"', "\\", "\r", "\x1b[31m", "True", "False", "null", "[0, 0, 0, 0]", "[1, ..., 2]"]),
    st.lists(st.integers(min_value=-(10**30), max_value=10**30), max_size=20).map(json.dumps),
)
LINE = st.one_of(st.tuples(st.sampled_from(MARKERS), HOSTILE).map("".join), st.text(max_size=120),
                 st.binary(max_size=120).map(lambda b: b.decode("latin-1")))
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.lists(LINE, max_size=40))
def test_any_log_is_judged_without_raising(lines):
    v = verdict_of("\n".join(lines).encode("utf-8", "surrogatepass"))
    json.dumps(v.to_json(), default=str)  # the verdict is always serialisable
    if v.passed:
        assert v.status == "coherent" and v.py_exit == 0


@FUZZ
@given(st.lists(LINE, max_size=12), st.lists(LINE, max_size=12), st.integers(0, 6), st.integers(1, 8))
def test_a_log_holding_a_bad_request_never_passes(before, after, bad_at, n):
    requests = [GOOD_IDS] * n
    requests.insert(min(bad_at, n), BAD_IDS)
    noise = "\n".join(before).encode("utf-8", "surrogatepass") + b"\n"
    tail = "\n".join(after) + "\n"
    v = verdict_of(noise + run_log(requests, tail=tail))
    assert not v.passed, v.reasons


@FUZZ
@given(st.binary(max_size=4000), st.sampled_from([1, 7, 64, 4096]))
def test_random_bytes_in_any_chunking(data, chunk):
    from dsv4ctl.judge.scan import LogParser

    parser = LogParser()
    for i in range(0, len(data), chunk):
        parser.feed(data[i:i + chunk])
    judge(parser.close())


SACCT_FIELD = st.one_of(st.text(max_size=20), st.sampled_from(["nan", "1e999", "-1", "9" * 500, "COMPLETED",
                                                                "CANCELLED by 0", "0:0", "1-00:00:00", "", "|"]))


@FUZZ
@given(st.lists(st.lists(SACCT_FIELD, min_size=3, max_size=5), max_size=6))
def test_any_sacct_text_parses_or_is_refused_cleanly(rows):
    from dsv4ctl.judge.sacct import SacctParseError

    text = "JobID|State|ExitCode|Elapsed|MaxRSS\n" + "\n".join("|".join(r) for r in rows)
    try:
        records = parse_sacct(text)
    except SacctParseError:
        return
    if records:
        summary = summarise(records, records[0].job_id)
        if summary is not None and summary.completed_ok:
            assert summary.state == "COMPLETED" and summary.exit_code == 0


# ---- through the real CLI: exit codes, no traceback, bounded memory -----------------------------------------------

CLI = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from dsv4ctl.cli import main
peak_file = sys.argv[2]
sys.argv = ["dsv4ctl", "verdict", "--log", sys.argv[1], "--json"]
try:
    main()
finally:  # this program's own peak (VmHWM starts afresh at exec; ru_maxrss keeps the forked parent's)
    hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")][0].split()[1]
    open(peak_file, "w").write(hwm)
"""


def test_the_cli_on_a_hostile_log_exits_cleanly_in_bounded_memory(tmp_path):
    requests = [GOOD_IDS] * 4500
    requests[4400] = BAD_IDS
    log = tmp_path / "hostile.log"
    log.write_bytes(b"### STAGE: x\n" * 200_000 + b"TOKEN_IDS: [" + b"1, " * 400_000 + b"\n"
                    + run_log(requests) + b"PY_EXIT=" + b"7" * 5000 + b"\n" + b"\xff\x00" * 1000)
    peak = tmp_path / "peak_kib"
    done = subprocess.run([sys.executable, "-c", CLI, str(log), str(peak)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["passed"] is False and verdict["status"] == "degenerate"
    assert int(peak.read_text()) < 300 * 1024  # KiB


def test_options_from_the_caller_reach_streamed_requests():
    requests = [GOOD_IDS] * (MAX_REQUESTS + 10)
    requests[-1] = [5] * 32  # id 5 is the BOS for this caller
    data = run_log(requests).replace(b'"bos_id": 0', b'"bos_id": 5')
    v = judge(parse_bytes(data), None, VerdictOptions(bos_id=5))
    assert v.status == "degenerate" and v.evidence["requests_past_cap"]["bad"] == 1


def test_bad_requests_past_the_reasons_are_counted_once():
    requests = [BAD_IDS] * 40 + [GOOD_IDS] * (MAX_REQUESTS - 40) + [BAD_IDS] * 3
    v = verdict_of(run_log(requests))
    assert v.status == "degenerate" and v.reasons[32] == "... and 11 more bad request(s)"
