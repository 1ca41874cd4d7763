"""Serve runs: vllm bench serve's metrics (checked against vllm's own calculate_metrics and numpy), and the verdict
on hand-made run directories (passed, a failed request, a server that died, EOS mid-text, a leak, broken files)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dsv4ctl.judge.files import judge_files
from dsv4ctl.judge.serve_rules import judge_serve, memory_trend
from dsv4ctl.judge.serving import percentile, summarise

from .conftest import needs_engine_venv, vllm_anchor
from .serving_runs import EOS, flat_memory, growing_memory, load_records, record, serve_spec, write_run

PCTS = (50, 90, 95, 99)

# Runs in the engine's venv: vllm's own calculate_metrics on the same records, flattened to the save-result names.
VLLM_ANCHOR = r"""
import dataclasses, json, sys, warnings
from vllm.benchmarks.serve import calculate_metrics
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
from vllm.benchmarks.datasets.datasets import SampleRequest
data = json.load(sys.stdin)
outs = [RequestFuncOutput(success=r["error"] is None, latency=r["e2el_s"] or 0.0, ttft=r["ttft_s"] or 0.0,
                          itl=r["itl_s"], output_tokens=r["output_tokens"], prompt_len=r["prompt_tokens"] or 0,
                          start_time=1000.0 + r["send_s"], error=r["error"] or "", generated_text=r["text"])
        for r in data["records"]]
reqs = [SampleRequest(prompt="x", prompt_len=r["prompt_tokens"] or 0) for r in data["records"]]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    metrics, _ = calculate_metrics(reqs, outs, data["duration"], None, data["percentiles"], data["goodput"])
flat = {}
for key, value in dataclasses.asdict(metrics).items():
    if key.startswith("percentiles_"):
        flat.update({f"p{int(p) if int(p) == p else p}_{key[12:]}": float(x) for p, x in value})
    elif isinstance(value, (int, float)):
        flat[key] = value
print("ANCHOR " + json.dumps(flat))
"""
VLLM_NAMES = {"total_input": "total_input_tokens", "total_output": "total_output_tokens"}


def anchor_records(seed: int) -> list[dict]:
    """A load with failures, one-token outputs (no TPOT) and varied chunking."""
    rng = random.Random(seed)
    out = []
    for i in range(60):
        n = rng.choice([1, 2, 5, 17, 32])
        gaps = [rng.uniform(0.001, 0.05) for _ in range(n - 1)]
        if i % 13 == 5:
            out.append(record(i, send_s=rng.uniform(0, 4), error="HTTP 500: Internal Server Error"))
        else:
            out.append(record(i, send_s=rng.uniform(0, 4), ttft_s=rng.uniform(0.01, 0.5), ids=list(range(n)),
                              gaps=gaps, prompt_tokens=rng.randint(4, 64)))
    return out


@needs_engine_venv
def test_summarise_equals_vllm_calculate_metrics():
    records = anchor_records(3)
    payload = {"records": records, "duration": 5.25, "percentiles": list(PCTS), "goodput": {"ttft": 300, "tpot": 20}}
    theirs = {VLLM_NAMES.get(k, k): v for k, v in vllm_anchor(VLLM_ANCHOR, payload).items()}
    ours = summarise(records, 5.25, {"ttft_ms": 300, "tpot_ms": 20})
    theirs.pop("rtfx", None)  # speech-to-text only
    assert set(theirs) <= set(ours)
    assert {k: ours[k] for k in theirs} == theirs  # the same figures to the bit, names and all
    assert ours["failed"] == 5 and ours["completed"] == 55


def test_percentiles_and_moments_equal_numpy():
    np = pytest.importorskip("numpy")
    rng = random.Random(11)
    for n in (1, 2, 3, 7, 8, 9, 100, 129, 1000, 5000):
        values = [rng.lognormvariate(-3, 1) for _ in range(n)]
        stats = summarise([record(i, send_s=0.0, ttft_s=v, ids=[5], gaps=[]) for i, v in enumerate(values)], 1.0)
        assert stats["mean_ttft_ms"] == np.mean(values) * 1000
        assert stats["std_ttft_ms"] == np.std(values) * 1000
        assert stats["median_ttft_ms"] == np.median(values) * 1000
        for p in (*PCTS, 0, 100, 33.3):
            assert percentile(sorted(values), p) == np.percentile(values, p)


def test_tpot_goodput_and_warmup():
    records = [record(0, send_s=0.0, ttft_s=0.1, ids=[7], gaps=[]),  # one token: no TPOT, counted 0 for goodput
               record(1, send_s=0.0, ttft_s=0.1, ids=[7, 8, 9], gaps=[0.02, 0.04]),  # TPOT 30 ms
               record(2, send_s=0.0, ttft_s=0.9, ids=[7, 8], gaps=[0.01]),  # TTFT misses a 500 ms SLO
               record(3, send_s=0.0, ttft_s=5.0, ids=[7, 8], gaps=[9.0], warmup=True)]  # left out
    stats = summarise(records, 2.0, {"ttft_ms": 500, "tpot_ms": 35, "e2el_ms": None})
    assert stats["completed"] == 3 and stats["failed"] == 0
    assert stats["mean_tpot_ms"] == pytest.approx((30 + 10) / 2)
    assert stats["request_goodput"] == 2 / 2.0
    assert stats["total_output_tokens"] == 6 and stats["output_throughput"] == 3.0
    assert summarise(records, 2.0)["request_goodput"] is None  # no SLOs, no goodput
    assert summarise(records[:1], 2.0)["p99_tpot_ms"] is None  # no sample is not a 0 ms TPOT


def test_passed_serve_run(tmp_path):
    raw = write_run(tmp_path, load_records())
    v = judge_files(raw)
    assert v.status == "coherent" and v.passed, v.reasons
    assert v.metrics["completed"] == 12 and v.metrics["failed"] == 0
    assert v.metrics["p95_ttft_ms"] == summarise(load_records(), v.metrics["duration"])["p95_ttft_ms"]
    assert v.evidence["serve"]["duration_source"] == "DSV4_METRICS"
    assert v.evidence["serve"]["judgement"]["memory"]["suspected_leak"] is False


def test_failed_request_fails_the_run_naming_the_first(tmp_path):
    records = load_records()
    records[3] = record(3, send_s=records[3]["send_s"], error="ClientConnectorError: connection reset by peer")
    records[7] = record(7, send_s=records[7]["send_s"], error="TimeoutError: no chunk in 600 s")
    v = judge_files(write_run(tmp_path, records, verdict="INCOMPLETE", py_exit=2))
    assert not v.passed and v.status == "incomplete"
    assert any(r.startswith("request 3 failed: ClientConnectorError") for r in v.reasons), v.reasons
    assert v.metrics["failed"] == 2


def test_failed_request_with_exit_0_is_a_false_green(tmp_path):
    records = load_records()
    records[5] = record(5, send_s=records[5]["send_s"], error="HTTP 503: Service Unavailable")
    v = judge_files(write_run(tmp_path, records))  # the job said COHERENT and exited 0
    assert not v.passed and v.false_green
    assert v.first_blocker.kind == "request_error" and "request 5" in v.first_blocker.message


@pytest.mark.parametrize("log,cause", [("server-enginecore-fatal.log", "The size of tensor a (96) must match"),
                                       ("server-engine-process-died.log", "Engine process (pid 5188) died")])
def test_server_dying_mid_load_is_crashed_with_server_logs_root_cause(tmp_path, log, cause):
    records = load_records()
    for i in range(6, 12):
        records[i] = record(i, send_s=records[i]["send_s"], error="ServerDisconnectedError: Server disconnected")
    tail = ["DSV4ServerFailed: the vLLM server exited with code 1 during the load"]
    v = judge_files(write_run(tmp_path, records, server_log=log, verdict="INCOMPLETE", py_exit=1, raw_tail=tail))
    assert v.status == "crashed" and not v.passed
    assert cause in v.first_blocker.message
    assert v.first_blocker.evidence[0].startswith("server.log line ")
    assert v.reasons[0].startswith("server.log:")


def test_server_log_error_after_a_complete_load_is_said_not_judged(tmp_path):
    v = judge_files(write_run(tmp_path, load_records(), server_log="server-enginecore-fatal.log"))
    assert v.passed
    findings = v.evidence["serve"]["judgement"]["findings"]
    assert any("server.log has an error at line" in f and "although the load completed" in f for f in findings)


def test_an_error_while_the_server_shuts_down_is_said_as_such(tmp_path):
    # vllm#48745's shape, seen here too: the job's SIGINT, EngineCore force-killed, a spurious EngineDeadError
    v = judge_files(write_run(tmp_path, load_records(), server_log="server-shutdown-spurious-enginedead.log"))
    assert v.passed and v.status == "coherent", v.reasons
    finding = next(f for f in v.evidence["serve"]["judgement"]["findings"] if "server.log" in f)
    assert "line 20 during the server's shutdown (begun at line 10)" in finding and "EngineDeadError" in finding
    # the same error before any shutdown line is not excused
    log = (tmp_path / "server.log").read_text().splitlines()
    (tmp_path / "server.log").write_text("\n".join(log[:9] + log[13:20] + log[9:13] + log[20:]) + "\n")
    v = judge_files(tmp_path / "raw.log")
    assert any("although the load completed" in f for f in v.evidence["serve"]["judgement"]["findings"])


def test_eos_in_the_middle_and_a_stop_without_eos(tmp_path):
    spec = serve_spec(sampling={"ignore_eos": False})
    records = load_records()
    records[2] = record(2, send_s=records[2]["send_s"], ids=[11, 12, EOS, 14, EOS], finish="stop")
    records[4] = record(4, send_s=records[4]["send_s"], ids=[11, 12, 13], finish="stop")
    records[6] = record(6, send_s=records[6]["send_s"], ids=[11, 12, EOS], finish="stop")  # a proper stop
    records[8] = record(8, send_s=records[8]["send_s"], ids=[11, 12], finish="stop", stop="\n\n")  # stop string
    v = judge_files(write_run(tmp_path, records, spec=spec, extra_serve={"eos_token_ids": [EOS]}))
    assert v.status == "degenerate" and not v.passed and v.false_green
    assert any("request 2: EOS id 2 at token 2 of 5" in r for r in v.reasons), v.reasons
    assert any("request 4: finish_reason 'stop' but the last token 13 is not EOS" in r for r in v.reasons)
    assert not any(r.startswith(("request 6:", "request 8:")) for r in v.reasons)


def test_stop_with_ignore_eos_is_degenerate():
    records = [record(0, send_s=0.0, ids=[5, 6], finish="stop")]
    j = judge_serve(serve_spec(num_prompts=1), records, flat_memory(), eos_ids={EOS}, ready_s=0.0)
    assert j.status == "degenerate" and "although ignore_eos is on" in j.reasons[0]


def test_leak_is_a_finding_and_over_the_limit_a_blocker(tmp_path):
    grow = growing_memory()
    trend = memory_trend(grow, ready_s=4.0)
    assert trend.slope_low > 0 and trend.slope_mib_per_min == pytest.approx(90, rel=0.05)  # 1.5 MiB/s
    assert trend.suspected_leak
    v = judge_files(write_run(tmp_path / "a", load_records(), memory=grow))
    assert v.passed  # no limit: flagged, not failed
    assert any(f.startswith("suspected leak: server RSS +") for f in v.evidence["serve"]["judgement"]["findings"])
    limited = serve_spec(memory_limit_mib=40)
    v = judge_files(write_run(tmp_path / "b", load_records(), memory=grow, spec=limited))
    assert not v.passed and v.status == "coherent"
    assert any("over load.memory_limit_mib 40" in r for r in v.reasons)


def test_a_warming_server_is_no_leak():
    # Regression (seen on the real CPU server): ~80 MiB/min while the load ramps up, then flat, in a 30 s run; the
    # old 16 MiB floor called it a leak.
    warm = [{"t_s": 20.0 + 2 * i, "rss_mib": 900.0 + min(2 * i, 25) * 80 / 60, "device_mib": None} for i in range(16)]
    trend = memory_trend(warm, ready_s=20.0)
    assert trend.slope_low > 0 and not trend.suspected_leak


def test_flat_noisy_memory_is_no_leak_and_startup_growth_is_not_counted():
    startup = [{"t_s": float(t), "rss_mib": 100.0 + 200 * t} for t in range(5)]  # loading weights before ready
    trend = memory_trend(startup + flat_memory(), ready_s=4.5)
    assert not trend.suspected_leak and trend.growth_mib < 10
    assert trend.slope_low <= 0 <= trend.slope_high


def test_missing_or_broken_files_never_pass(tmp_path):
    raw = write_run(tmp_path / "a", load_records())
    (tmp_path / "a" / "serve-requests.jsonl").unlink()
    v = judge_files(raw)
    assert not v.passed and v.status == "incomplete"
    assert any("serve-requests.jsonl is missing" in r for r in v.reasons)

    raw = write_run(tmp_path / "b", load_records())
    with open(tmp_path / "b" / "serve-requests.jsonl", "a", encoding="utf-8") as out:
        out.write('{"index": "three"}\n')
    v = judge_files(raw)
    assert not v.passed and any("1 unreadable request record" in r for r in v.reasons)

    raw = write_run(tmp_path / "c", load_records(), memory=[*flat_memory(), {"t_s": "soon"}])
    v = judge_files(raw)
    assert not v.passed and any("unreadable memory sample" in r for r in v.reasons)


def test_fewer_records_than_num_prompts_is_incomplete(tmp_path):
    v = judge_files(write_run(tmp_path, load_records(10)))  # the spec asks for 12
    assert not v.passed and v.status == "incomplete"
    assert any("2 of 12 requests have no record" in r for r in v.reasons)


# ---- hostile input --------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                      max_size=4), max_leaves=12)
RECORD_KEYS = ("index", "warmup", "send_s", "ttft_s", "itl_s", "e2el_s", "prompt_tokens", "output_tokens",
               "token_ids", "finish_reason", "stop_reason", "text", "error")


@st.composite
def bent_records(draw):
    """A contract record with some fields replaced by anything JSON can hold."""
    base = record(draw(st.integers(0, 20)), send_s=draw(st.floats(0, 10)), ttft_s=draw(st.floats(0, 1)))
    for key in draw(st.lists(st.sampled_from(RECORD_KEYS), max_size=3)):
        base[key] = draw(JSON_VALUES)
    return base


@settings(max_examples=150, deadline=None)
@given(st.lists(bent_records(), max_size=12), st.one_of(st.none(), st.floats(allow_nan=True)),
       st.lists(st.dictionaries(st.sampled_from(["t_s", "rss_mib"]), JSON_VALUES), max_size=12))
def test_summarise_and_rules_never_crash_on_anything(records, duration, memory):
    stats = summarise(records, duration, {"ttft_ms": 100})
    assert stats["completed"] + stats["failed"] <= len(records)
    judgement = judge_serve(serve_spec(num_prompts=max(1, len(records))), records, memory, eos_ids={EOS})
    assert judgement.status in ("coherent", "incomplete", "degenerate")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=80) | st.builds(lambda v: json.dumps(v).encode(), JSON_VALUES), min_size=1,
                max_size=6))
def test_hostile_lines_in_the_requests_file_never_pass(tmp_path_factory, junk):
    run = tmp_path_factory.mktemp("hostile")
    raw = write_run(run, load_records())
    with open(run / "serve-requests.jsonl", "ab") as out:
        for line in junk:
            out.write(line.replace(b"\n", b" ") + b"\n")
    v = judge_files(raw)
    read = v.evidence["serve"]["files"]["requests"]
    if read["unreadable"]:
        assert not v.passed, v.reasons
    assert read["rows"] + read["unreadable"] >= 12
