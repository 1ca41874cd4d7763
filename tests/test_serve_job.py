"""Mode serve, the job side (issue 14): the load driver's parts on literal input (arrivals, datasets, the server's
streamed answer), and the real thing: `vllm serve` on the CPU engine with the tiny Qwen2, loaded, judged and stored,
with the three serve faults caught, locally and as a Slurm job.

The engine tests share one campaign (four serve runs submitted together) to stay within their CI budget.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .conftest import EXPERIMENTS, ROOT, needs_engine_venv, vllm_anchor

sys.path.insert(0, str(ROOT / "runtime"))

from dsv4rt import faults, loadplan  # noqa: E402
from dsv4rt.loadgen import NO_TOKENS, Stream, new_record, request_body  # noqa: E402
from dsv4rt.loadplan import LoadError, Prompt, StreamParser  # noqa: E402
from dsv4rt.server import extra_args, server_args  # noqa: E402

SERVE = EXPERIMENTS / "cpu-serve.yaml"
LOAD = {"dataset": "random", "random_input_len": 32, "random_output_len": 16, "random_range_ratio": 0.0, "seed": 0,
        "num_prompts": 64, "request_rate": 8.0, "burstiness": 1.0, "max_concurrency": 8, "warmup_requests": 0,
        "request_timeout_s": 60.0, "duration_s": None}


# ---- arrivals --------------------------------------------------------------------------------------------------------


def gaps_of(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times], times)]


def test_rate_inf_sends_everything_at_once():
    assert loadplan.arrival_times(5, "inf", 1.0, 0) == [0.0] * 5


def test_poisson_arrivals_end_at_n_over_rate_with_exponential_gaps():
    times = loadplan.arrival_times(4000, 8.0, 1.0, seed=3)
    assert times == sorted(times) and times[-1] == pytest.approx(4000 / 8.0)  # vllm rescales to N/rate
    gaps = gaps_of(times)
    assert statistics.fmean(gaps) == pytest.approx(1 / 8.0, rel=1e-9)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, abs=0.06)  # exponential: CV 1
    assert gaps[0] > 0  # the first request waits one gap too, as in vllm


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_gaps_have_the_shape_burstiness(burstiness):
    draw = loadplan.RandomGaps(10.0, burstiness, seed=1)
    gaps = [next(draw) for _ in range(20000)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 10.0, rel=0.05)
    # gamma(shape=b, scale=1/(rate*b)): variance b*scale^2, so the coefficient of variation is 1/sqrt(b)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)


def test_arrivals_are_seeded():
    assert loadplan.arrival_times(50, 4.0, 1.0, 7) == loadplan.arrival_times(50, 4.0, 1.0, 7)
    assert loadplan.arrival_times(50, 4.0, 1.0, 7) != loadplan.arrival_times(50, 4.0, 1.0, 8)


RAMP_ANCHOR = r"""
import json, sys
from vllm.benchmarks.serve import _get_current_request_rate
cases = json.load(sys.stdin)
print("ANCHOR " + json.dumps([_get_current_request_rate(s, a, b, i, n, float("inf")) for s, a, b, i, n in cases]))
"""


@needs_engine_venv
def test_ramp_up_rates_equal_vllm_bench_serves():
    cases = [(s, a, b, i, n) for s in loadplan.RAMP_UP_STRATEGIES for a, b in ((1, 10), (2, 2), (3, 100))
             for n in (1, 2, 7, 64) for i in range(n)]
    theirs = vllm_anchor(RAMP_ANCHOR, cases)
    assert [loadplan.ramp_rate(*case) for case in cases] == theirs  # to the bit


def test_a_ramp_up_draws_each_gap_at_its_requests_rate():
    # burstiness inf: the gaps are 1/rate exactly, the rate going 1, 2, ..., 10 req/s
    times = loadplan.arrival_times(10, "inf", math.inf, 0, ("linear", 1.0, 10.0))
    assert gaps_of(times) == pytest.approx([1 / r for r in range(1, 11)])
    times = loadplan.arrival_times(5, "inf", math.inf, 0, ("exponential", 1.0, 16.0))
    assert gaps_of(times) == pytest.approx([1, 1 / 2, 1 / 4, 1 / 8, 1 / 16])
    # Poisson: no rescaling (as vllm), the mean gap of each quarter follows the rate, and the draw is seeded
    times = loadplan.arrival_times(4000, "inf", 1.0, 5, ("linear", 2.0, 20.0))
    gaps = gaps_of(times)
    for quarter in range(4):
        part = range(1000 * quarter, 1000 * (quarter + 1))
        expected = statistics.fmean(1 / (2 + 18 * i / 3999) for i in part)
        assert statistics.fmean(gaps[i] for i in part) == pytest.approx(expected, rel=0.08)
    assert times == loadplan.arrival_times(4000, "inf", 1.0, 5, ("linear", 2.0, 20.0))
    assert loadplan.arrival_times(0, "inf", 1.0, 5, ("linear", 2.0, 20.0)) == []


# ---- datasets --------------------------------------------------------------------------------------------------------


def test_random_prompts_like_vllms_random_dataset():
    prompts = loadplan.random_prompts({**LOAD, "random_range_ratio": 0.5}, vocab_size=100, special_ids={0, 1, 2})
    assert len(prompts) == 64
    allowed = list(range(3, 100))
    for i, p in enumerate(prompts):
        assert 16 <= p.prompt_len <= 48 and 8 <= p.max_tokens <= 24
        assert not set(p.token_ids) & {0, 1, 2}
        start = allowed.index(p.token_ids[0])  # consecutive allowed ids from (offset + index)
        assert list(p.token_ids) == [allowed[(start + k) % len(allowed)] for k in range(p.prompt_len)]
    assert len({p.prompt_len for p in prompts}) > 5
    assert prompts == loadplan.random_prompts({**LOAD, "random_range_ratio": 0.5}, 100, {0, 1, 2})
    exact = loadplan.random_prompts(LOAD, 100, set())
    assert {p.prompt_len for p in exact} == {32} and {p.max_tokens for p in exact} == {16}


def test_random_prompts_refuse_an_impossible_vocabulary():
    with pytest.raises(LoadError, match="all special"):
        loadplan.random_prompts(LOAD, 3, {0, 1, 2})


def test_special_ids_come_from_the_tokenizer_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": [
        {"id": 0, "content": "<|endoftext|>", "special": True}, {"id": 5, "content": "x", "special": False}]}))
    assert loadplan.special_token_ids(tmp_path) == {0}
    assert loadplan.special_token_ids(tmp_path / "missing") == set()


def test_spec_requests_cycle_with_the_sampling_max_tokens():
    prompts = loadplan.spec_prompts([{"messages": [{"role": "user", "content": "hi"}]}, {"prompt": "Paris"}], 5, 9)
    assert [p.chat for p in prompts] == [True, False, True, False, True]
    assert prompts[1].text == "Paris" and {p.max_tokens for p in prompts} == {9}


def test_jsonl_prompts_and_their_errors(tmp_path):
    good = tmp_path / "p.jsonl"
    good.write_text('{"prompt": "a", "max_tokens": 4}\n\n{"prompt": [5, 6]}\n'
                    '{"messages": [{"role": "user", "content": "b"}]}\n')
    prompts = loadplan.jsonl_prompts(good, 4, 7)
    assert [p.max_tokens for p in prompts] == [4, 7, 7, 4] and prompts[1].token_ids == (5, 6)
    for text, message in [("not json\n", "not JSON"), ('{"max_tokens": 3}\n', "needs a prompt"),
                          ('{"prompt": "a", "max_tokens": 0}\n', "positive"), ("[1]\n", "an object"),
                          ('{"messages": [{"role": 1}]}\n', "messages must be"), ("\n", "no prompts")]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        with pytest.raises(LoadError, match=message):
            loadplan.jsonl_prompts(bad, 2, 5)
    with pytest.raises(LoadError, match="load.path"):
        loadplan.jsonl_prompts(tmp_path / "absent.jsonl", 2, 5)


def test_a_relative_load_path_is_relative_to_the_spec_file(tmp_path):
    from dsv4ctl.spec.load import load_spec

    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    spec = tmp_path / "s.yaml"
    spec.write_text(f"extends: {SERVE}\nname: s\nload:\n  dataset: jsonl\n  path: ./prompts.jsonl\n")
    (loaded,) = load_spec(spec)
    assert loaded.spec.snapshot()["load"]["path"] == str(tmp_path / "prompts.jsonl")


def test_request_bodies_ask_for_token_ids_and_usage():
    raw = request_body("m", Prompt(max_tokens=5, token_ids=(7, 8)), {"temperature": 0.0, "top_p": 1.0}, True)
    assert raw["prompt"] == [7, 8] and raw["max_tokens"] == 5 and raw["ignore_eos"] is True
    assert raw["return_token_ids"] is True and raw["stream_options"] == {"include_usage": True} and "seed" not in raw
    chat = request_body("m", Prompt(max_tokens=3, messages=({"role": "user", "content": "x"},)),
                        {"temperature": 1.0, "top_p": 0.9, "seed": 4}, False)
    assert chat["messages"][0]["content"] == "x" and chat["max_completion_tokens"] == 3 and chat["seed"] == 4


# ---- the streamed answer: vLLM's shapes, our values ------------------------------------------------------------------

COMPLETION_STREAM = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"",'
    b'"logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[11,12],"token_ids":[40]}]}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" Par",'
    b'"logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":[41]}]}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"is \xe5\xb7'
    b'\xb4","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,"token_ids":[42,43]}]}'
    b'\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":2,'
    b'"total_tokens":6,"completion_tokens":4}}\n\n'
    b"data: [DONE]\n\n")
CHAT_STREAM = (
    b'data: {"id":"chatcmpl-2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[1,9]}\n\n'
    b": ping\n\n"
    b'data: {"id":"chatcmpl-2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},'
    b'"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":[77,2]}]}\n\n'
    b'data: {"id":"chatcmpl-2","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":2,'
    b'"completion_tokens":2,"total_tokens":4}}\n\n'
    b"data: [DONE]\n\n")
ERROR_STREAM = (
    b'data: {"id":"cmpl-3","choices":[{"index":0,"text":"a","finish_reason":null,"token_ids":[5]}]}\n\n'
    b'data: {"error": {"object": "error", "message": "EngineCore died", "type": "InternalServerError", '
    b'"code": 500}}\n\n'
    b"data: [DONE]\n\n")


def parse_whole(stream: bytes) -> list:
    parser = StreamParser()
    return parser.feed(stream) + parser.close()


def test_completion_stream_ids_text_finish_and_usage():
    events = parse_whole(COMPLETION_STREAM)
    assert [e.kind for e in events] == ["tokens", "tokens", "tokens", "usage", "done"]
    assert sum((e.token_ids for e in events), []) == [40, 41, 42, 43]
    assert "".join(e.text for e in events) == " Paris 巴"
    assert events[2].finish_reason == "length" and events[3].completion_tokens == 4 and events[3].prompt_tokens == 2


def test_chat_stream_role_chunk_counts_as_a_chunk_and_pings_are_skipped():
    events = parse_whole(CHAT_STREAM)
    assert [e.kind for e in events] == ["tokens", "tokens", "usage", "done"]
    assert events[0].text == "" and events[1].token_ids == [77, 2] and events[1].finish_reason == "stop"


def test_error_event_mid_stream():
    events = parse_whole(ERROR_STREAM)
    assert [e.kind for e in events] == ["tokens", "error", "done"]
    assert events[1].error == "InternalServerError: 500: EngineCore died"


def test_any_split_of_the_bytes_gives_the_same_events():
    whole = parse_whole(COMPLETION_STREAM)
    for cut in range(1, len(COMPLETION_STREAM)):  # including inside the 3-byte character
        parser = StreamParser()
        events = parser.feed(COMPLETION_STREAM[:cut]) + parser.feed(COMPLETION_STREAM[cut:]) + parser.close()
        assert events == whole, cut


def test_crlf_line_endings_and_a_last_message_without_its_blank_line():
    events = parse_whole(CHAT_STREAM.replace(b"\n", b"\r\n").rstrip(b"\r\n"))
    assert [e.kind for e in events] == ["tokens", "tokens", "usage", "done"]


def fold(stream_bytes: bytes, times: list[float]) -> dict:
    """Feed messages one at a time at the given clock readings, as loadgen.send does per network read."""
    record = new_record(0, False, Prompt(max_tokens=4, token_ids=(11, 12)))
    stream = Stream(record, sent=10.0)
    parser = StreamParser()
    messages = [m + b"\n\n" for m in stream_bytes.split(b"\n\n") if m]
    for message, now in zip(messages, times):
        stream.take(parser.feed(message), now)
    stream.finish()
    return record


def test_timings_are_vllm_bench_serves():
    record = fold(COMPLETION_STREAM, [10.5, 10.75, 11.0, 11.25, 11.3])
    assert record["ttft_s"] == 0.5 and record["itl_s"] == [0.25, 0.25]
    assert record["e2el_s"] == 1.0  # the last choice message, not the usage one
    assert record["token_ids"] == [40, 41, 42, 43] and record["output_tokens"] == 4 and record["prompt_tokens"] == 2
    assert record["finish_reason"] == "length" and record["error"] is None


def test_an_error_event_fails_the_request_and_keeps_what_came():
    record = fold(ERROR_STREAM, [10.1, 10.2, 10.3])
    assert record["error"] == "error event in the stream: InternalServerError: 500: EngineCore died"
    assert record["token_ids"] == [5] and record["ttft_s"] == pytest.approx(0.1)


def test_a_stream_with_no_token_or_no_finish_is_an_error():
    assert fold(b"data: [DONE]\n\n", [10.1])["error"] == NO_TOKENS
    cut = b'data: {"choices":[{"index":0,"text":"a","finish_reason":null,"token_ids":[5]}]}\n\n'
    assert fold(cut, [10.1])["error"] == "the stream ended without a finish reason"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_fuzz_the_parser_never_raises_on_any_bytes(data, cuts):
    parser = StreamParser()
    events = []
    for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(data)]):
        events += parser.feed(data[a:b])
    events += parser.close()
    assert all(e.kind in ("tokens", "usage", "done", "error", "other") for e in events)
    record = new_record(0, False, Prompt(max_tokens=1, text="x"))
    stream = Stream(record, 0.0)
    stream.take(events, 1.0)
    stream.finish()
    assert record["error"] is not None or (record["ttft_s"] is not None and record["finish_reason"] is not None)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["choices", "usage", "error", "text", "delta", "content", "token_ids",
                                         "finish_reason", "stop_reason", "prompt_tokens", "completion_tokens",
                                         "object"]), inner, max_size=5), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(JSON, st.integers(min_value=1, max_value=50))
def test_fuzz_hostile_json_messages_and_splits(body, cut):
    stream = b"data: " + json.dumps(body).encode() + b"\n\ndata: [DONE]\n\n"
    whole = parse_whole(stream)
    parser = StreamParser()
    assert parser.feed(stream[:cut]) + parser.feed(stream[cut:]) + parser.close() == whole
    for event in whole:
        assert all(isinstance(t, int) and not isinstance(t, bool) for t in event.token_ids)
        assert event.completion_tokens is None or event.completion_tokens >= 0


# ---- faults and the server's command line ------------------------------------------------------------------------------


def test_serve_faults_parse_and_refuse(monkeypatch):
    monkeypatch.setenv("DSV4_TESTING", "1")
    for good in ("server-kill", "bos-under-concurrency:4", "server-leak:8", "server-leak:0.5"):
        monkeypatch.setenv("DSV4_FAULT", good)
        assert faults.active() == good
    for bad in ("server-kill:3", "bos-under-concurrency", "server-leak:-1", "server-leak:x", "server-leak:inf"):
        monkeypatch.setenv("DSV4_FAULT", bad)
        with pytest.raises(faults.FaultRefused):
            faults.active()
    assert faults.kill_point("server-kill", 64) == 32 and faults.kill_point("server-kill", 1) == 1
    assert faults.kill_point(None, 64) is None and faults.server_leak("server-leak:x", 1) is None


def test_bos_under_concurrency_takes_the_first_request_sent_at_n_in_flight():
    records = [{"index": i, "warmup": False, "token_ids": [5, 6, 7]} for i in range(4)]
    assert faults.bos_under_concurrency("bos-under-concurrency:3", records, {0: 1, 1: 2, 2: 3, 3: 4}, 0) == 2
    assert records[2]["token_ids"] == [5, 0, 0] and records[3]["token_ids"] == [5, 6, 7]
    assert faults.bos_under_concurrency("bos-under-concurrency:9", records, {0: 1, 1: 2, 2: 3, 3: 4}, 0) is None
    assert faults.bos_under_concurrency(None, records, {0: 9}, 0) is None


def test_server_command_carries_the_model_settings():
    spec = {"model": {"path": "/m", "max_model_len": 512, "gpu_memory_utilization": 0.5, "dtype": "float32",
                      "kv_cache_dtype": "fp8", "seed": 0, "enforce_eager": True, "trust_remote_code": False,
                      "tokenizer": None, "moe_backend": "aiter",
                      "extra": {"kv_cache_memory_bytes": 64, "enable_prefix_caching": False, "x": {"a": 1}}},
            "parallel": {"tp": 2}, "platform": "cpu", "serve": {"args": ["--max-num-seqs", "8"]}}
    args = server_args(spec, 8001)
    assert args[:4] == ["--host", "127.0.0.1", "--port", "8001"]
    for flag, value in (("--model", "/m"), ("--tensor-parallel-size", "2"), ("--max-model-len", "512"),
                        ("--dtype", "float32"), ("--kv-cache-dtype", "fp8"), ("--seed", "0"),
                        ("--kv-cache-memory-bytes", "64"), ("--x", '{"a": 1}'), ("--max-num-seqs", "8")):
        assert args[args.index(flag) + 1] == value
    assert "--enforce-eager" in args and "--no-enable-prefix-caching" in args and "--moe-backend" not in args
    assert "--trust-remote-code" not in args
    assert extra_args({"a_b": True, "c": None}) == ["--a-b"]


# ---- the job's own verdict --------------------------------------------------------------------------------------------


def records_of(ids: list[list[int] | None]) -> list[dict]:
    rows = []
    for i, token_ids in enumerate(ids):
        row = new_record(i, False, Prompt(max_tokens=4, token_ids=(9, 9)))
        if token_ids is None:
            row["error"] = "HTTP 500 Internal Server Error: boom"
        else:
            row.update(ttft_s=0.1, e2el_s=0.2, itl_s=[0.05] * 3, token_ids=token_ids, output_tokens=len(token_ids),
                       finish_reason="length", text="abcd")
        rows.append(row)
    return rows


SPEC = {"load": {**LOAD, "num_prompts": 3, "slo": {}}, "sampling": {"temperature": 1.0, "top_p": 1.0,
                                                                    "ignore_eos": True, "max_tokens": 4},
        "expect": {"bos_id": 0, "max_repeat_run": 8}, "model": {"path": "/nonexistent"}}


def test_the_job_judges_its_requests_with_the_serve_rules():
    from dsv4rt import serve

    status, notes, ok = serve.judgement(SPEC, records_of([[5, 6, 7, 8]] * 3), [], 1.0)
    assert (status, ok) == ("coherent", True), notes
    status, notes, ok = serve.judgement(SPEC, records_of([[5, 6, 7, 8], [5, 0, 0, 0], [5, 6, 7, 8]]), [], 1.0)
    assert status == "degenerate" and not ok and notes[0].startswith("request 1: a run of 3 BOS")
    status, notes, ok = serve.judgement(SPEC, records_of([[5, 6, 7, 8], None, [5, 6, 7, 8]]), [], 1.0)
    assert status == "incomplete" and not ok and "request 1 failed: HTTP 500" in notes[0]


# ---- the real engine ---------------------------------------------------------------------------------------------------

from .test_engine import engine  # noqa: E402,F401 - the fixture that skips without the CPU engine


def serve_variant(directory: Path, name: str, body: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(f"extends: {SERVE}\nname: {name}\n{body}", encoding="utf-8")
    return path


FAULT = "environment:\n  env:\n    DSV4_TESTING: '1'\n    DSV4_FAULT: '{fault}'\n"
# MiB kept per memory interval (0.5 s). The load lasts about 8 s after ready, so the fitted window can be as short as
# 6 s on a quiet machine: 4 MiB (48 MiB fitted) stayed under the rule's 64 MiB floor there and the test failed on CI;
# 16 MiB gives about 190 MiB fitted in 6 s, three times the floor, however fast the machine.
LEAK_MIB = 16


@pytest.fixture(scope="session")
def serve_campaign(engine, tmp_path_factory):
    from dsv4ctl.campaign.plan import submit
    from dsv4ctl.store import open_store
    from dsv4ctl.campaign.watch import watch

    d = tmp_path_factory.mktemp("serve")
    specs = {
        "serve": SERVE,
        "kill": serve_variant(d, "serve-kill", FAULT.format(fault="server-kill")),
        # every prompt at once behind a cap of 8: concurrency 4 is reached for sure
        "bos": serve_variant(d, "serve-bos", FAULT.format(fault="bos-under-concurrency:4")
                             + "load:\n  request_rate: inf\n"),
        "leak": serve_variant(d, "serve-leak", FAULT.format(fault=f"server-leak:{LEAK_MIB}")
                              + "serve:\n  memory_interval_s: 0.5\n"),
    }
    store = open_store(d / "r.db")
    outcome = submit(store, list(specs.values()), "local", runs_root=d / "runs", campaign="serve")
    watch(store, interval_s=2, max_interval_s=5, timeout_s=600)
    runs = dict(zip(specs, (store.find_run(str(i)) for i in outcome.run_ids)))
    return {"store": store, "runs": runs}


def stored(campaign, key: str) -> dict:
    return campaign["store"].verdict(campaign["runs"][key].id)


def run_file(campaign, key: str, name: str) -> Path:
    return Path(campaign["runs"][key].run_dir) / name


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.engine
def test_cpu_serve_passes_with_vllm_bench_serve_metrics(serve_campaign):
    v = stored(serve_campaign, "serve")
    assert v["status"] == "coherent" and v["passed"], v["reasons"]
    run = serve_campaign["runs"]["serve"]
    assert run.exit_code == 0
    metrics = serve_campaign["store"].metrics(run.id)
    assert metrics["completed"] == 64 and metrics["failed"] == 0 and metrics["total_output_tokens"] == 64 * 16
    for name in ("p95_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "request_throughput",
                 "output_throughput", "total_token_throughput", "request_goodput"):
        assert isinstance(metrics[name], (int, float)) and metrics[name] > 0, name
    # Poisson arrivals at 8/s over 64 requests: the load lasts about 8 s, whatever the machine
    assert 6.0 < metrics["duration"] < 40.0
    records = jsonl(run_file(serve_campaign, "serve", "serve-requests.jsonl"))
    measured = [r for r in records if not r["warmup"]]
    assert [r["index"] for r in measured] == list(range(64)) and sum(r["warmup"] for r in records) == 2
    assert all(len(r["token_ids"]) == 16 and r["output_tokens"] == 16 and r["prompt_tokens"] == 32 for r in measured)
    assert all(r["finish_reason"] == "length" and len(r["itl_s"]) >= 1 for r in measured)
    assert [v_r["token_ids"] for v_r in v["requests"]] == [r["token_ids"] for r in measured]
    memory = jsonl(run_file(serve_campaign, "serve", "serve-memory.jsonl"))
    assert len(memory) >= 10 and max(m["rss_mib"] for m in memory) > 200 and memory[0]["device_mib"] is None
    log = Path(run.log_path).read_text()
    for stage in ("serve start", "load", "serve stop"):
        assert f"### STAGE: {stage}\n" in log
    assert "SERVER_READY in " in log and "server stopped by SIGINT" in log
    expect = json.loads(next(line for line in log.splitlines() if line.startswith("DSV4_EXPECT:")).split(": ", 1)[1])
    assert expect["max_tokens"] == 16 and expect["n_requests"] == 64 and expect["ignore_eos"] is True
    assert run.vllm_version == "0.32.0"
    assert "Application startup complete" in run_file(serve_campaign, "serve", "server.log").read_text()


@pytest.mark.engine
def test_a_server_killed_mid_load_is_crashed_and_named(serve_campaign):
    v = stored(serve_campaign, "kill")
    assert v["status"] == "crashed" and not v["passed"], v["reasons"]
    assert v["stage"] == "load"
    message = v["first_blocker"]["message"]
    assert "the vLLM server" in message and "killed by signal SIGKILL during the load" in message
    log = Path(serve_campaign["runs"]["kill"].log_path).read_text()
    assert "DSV4_FAULT: server-kill: SIGKILL to the vLLM server" in log and "after 32 of 64 requests" in log
    records = jsonl(run_file(serve_campaign, "kill", "serve-requests.jsonl"))
    assert any(r["error"] for r in records if not r["warmup"])  # the requests in flight and after saw it


@pytest.mark.engine
def test_bos_under_concurrency_is_degenerate_naming_the_request(serve_campaign):
    v = stored(serve_campaign, "bos")
    assert v["status"] == "degenerate" and not v["passed"], v["reasons"]
    log = Path(serve_campaign["runs"]["bos"].log_path).read_text()
    fault_line = next(line for line in log.splitlines() if line.startswith("DSV4_FAULT: bos-under-concurrency"))
    index = int(fault_line.split("request ")[1].split()[0])
    bad = [r for r in v["requests"] if r["bos_run"] >= 2]
    assert [r["index"] for r in bad] == [index] and bad[0]["bos_run"] == 15
    assert any(reason.startswith(f"request {index}: a run of 15 BOS tokens") for reason in v["reasons"])


@pytest.mark.engine
def test_a_growing_server_is_flagged_as_a_leak(serve_campaign):
    memory = jsonl(run_file(serve_campaign, "leak", "serve-memory.jsonl"))
    # the sampler sees the server's real memory grow by about LEAK_MIB per sample
    later = memory[len(memory) // 2:]
    slope = (later[-1]["rss_mib"] - later[0]["rss_mib"]) / (len(later) - 1)
    assert slope > LEAK_MIB * 0.7
    log = Path(serve_campaign["runs"]["leak"].log_path).read_text()
    verdict_line = next(line for line in log.splitlines() if line.startswith("DSV4_VERDICT:"))
    # flagged with the fault's own rate (LEAK_MIB per 0.5 s = 1920 MiB/min), by the job and by the stored verdict
    findings = stored(serve_campaign, "leak")["evidence"]["serve"]["judgement"]["findings"]  # the stored verdict's
    for said in (verdict_line, next(f for f in findings if "suspected leak" in f)):
        flagged = re.search(r"suspected leak: server RSS \+([0-9.]+) MiB/min", said)
        assert flagged and float(flagged.group(1)) > 0.7 * LEAK_MIB / 0.5 * 60, said


@pytest.mark.engine
@pytest.mark.slurm
def test_cpu_serve_runs_as_a_real_slurm_job(engine, tmp_path):
    from .test_engine import passed_on_slurm

    # with vllm bench serve's linear ramp-up from 4 to 20 req/s (request_rate back to inf, as the ramp asks)
    ramp = "  request_rate: inf\n  ramp_up_strategy: linear\n  ramp_up_start_rps: 4\n  ramp_up_end_rps: 20\n"
    spec = serve_variant(tmp_path, "serve-slurm", "load:\n  num_prompts: 24\n" + ramp)
    store, run, v = passed_on_slurm(spec, tmp_path, timeout_s=500)
    assert store.metrics(run.id)["completed"] == 24
    records = jsonl(Path(run.run_dir) / "serve-requests.jsonl")
    assert len(records) == 24 + 2
    # each request went out no earlier than the ramp's schedule (rate inf alone would send all 24 at once)
    due = loadplan.arrival_times(24, "inf", 1.0, 0, ("linear", 4.0, 20.0))
    sent = {r["index"]: r["send_s"] for r in records if not r["warmup"]}
    assert due[-1] > 1.0 and all(sent[i] >= due[i] - 0.005 for i in range(24)), (due, sent)
