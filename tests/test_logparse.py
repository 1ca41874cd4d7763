"""The streaming log parser on literal text: formats, awkward bytes, and chunking that must not matter."""

from __future__ import annotations

from dataclasses import asdict

from hypothesis import given, settings
from hypothesis import strategies as st

from dsv4ctl.judge.scan import LogParser, parse_bytes, parse_decode_list, parse_token_ids

from .conftest import FIXTURES

LOGS = FIXTURES / "logs"


def test_stages_engine_and_results():
    facts = parse_bytes((LOGS / "J17.log").read_bytes())
    assert [name for _, name in facts.stages] == ["job", "env", "config", "vllm import + registry",
                                                  "engine init (the real test)", "generate"]
    assert facts.engine_ready_s == 228.9 and facts.init_engine_s == 216.9
    assert (facts.model_load_gib, facts.model_load_s) == (19.99, 205.150379)
    assert facts.kv_cache_tokens == 85259
    assert (facts.expert_dtype, facts.moe_backend, facts.kv_format, facts.indexer_cache) == \
        ("fp4", "EMULATION", "DeepSeek's fp8_ds_mla", "FP8")
    [request] = facts.requests
    assert len(request.token_ids) == 32 and request.token_ids[:3] == [223, 30594, 9790]  # wrapped over 4 lines
    assert request.finish_reason == "length" and request.token_decode[1] == "你好"
    assert facts.metrics["gen_s"] == 21.7 and facts.probe_verdict == "COHERENT" and facts.py_exit == 0
    assert facts.diag_counts["nope_finite"] == 3 and facts.nonfinite == []


def test_worker_prefix_and_traceback_message_with_triton_source():
    facts = parse_bytes((LOGS / "J02.log").read_bytes())
    first = facts.tracebacks[0]
    assert first.process == "Worker_TP0" and first.exc_type == "triton.compiler.errors.CompilationError"
    assert first.message.startswith("at 12:12:\n")
    assert first.message.splitlines()[-1] == "TypeError(\"softmax() got an unexpected keyword argument 'dim'\")"
    assert first.frames == 3


def test_colour_codes_crlf_and_carriage_return_progress_bars():
    plain = parse_bytes((LOGS / "J02.log").read_bytes())
    crlf = parse_bytes((LOGS / "J04.log").read_bytes())
    assert crlf.tracebacks[0].message == plain.tracebacks[0].message
    colour = parse_bytes((LOGS / "J03.log").read_bytes())
    assert colour.tracebacks[1].process == "Worker_TP0" and colour.tracebacks[1].message == plain.tracebacks[0].message
    text = b"Loading: 10%\rLoading: 90%\r### STAGE: generate\nENGINE_READY in 3.5s\n"
    facts = parse_bytes(text)
    assert facts.stages == [(1, "generate")] and facts.engine_ready_s == 3.5


def test_invalid_utf8_does_not_stop_the_parser():
    facts = parse_bytes(b"\xff\xfe garbage \x80\n### STAGE: env\nTOKEN_IDS: [1, 2]\n\xc3\x28\nPY_EXIT=0\n")
    assert facts.stages == [(2, "env")] and facts.requests[0].token_ids == [1, 2] and facts.py_exit == 0


def test_interleaved_rank_tracebacks_stay_apart():
    facts = parse_bytes((LOGS / "J05.log").read_bytes())
    worker = [tb for tb in facts.tracebacks if tb.process and tb.process.startswith("Worker")]
    assert [tb.process for tb in worker] == ["Worker_TP2", "Worker_TP5"]
    assert all("softmax()" in tb.message for tb in worker)


def test_usage_thread_and_libcudart_are_noise():
    facts = parse_bytes((LOGS / "J01.log").read_bytes())
    kinds = {tb.exc_type: tb.noise for tb in facts.tracebacks}
    assert kinds["json.decoder.JSONDecodeError"] == "usage_thread"
    assert kinds["AssertionError"] == "shutdown"
    assert kinds["RuntimeError"] is None


def test_chained_traceback_is_one_error_root_cause_first():
    text = (b"Traceback (most recent call last):\n  File \"a.py\", line 1, in f\nKeyError: 'x'\n\n"
            b"During handling of the above exception, another exception occurred:\n\n"
            b"Traceback (most recent call last):\n  File \"a.py\", line 3, in f\nRuntimeError: wrapped\nPY_EXIT=1\n")
    facts = parse_bytes(text)
    [tb] = facts.tracebacks
    assert tb.text == "KeyError: 'x'" and tb.chain[-1] == "RuntimeError: wrapped" and tb.exc_line == 3


def test_diagnostics_per_rank_and_nonfinite_values():
    facts = parse_bytes(b"(Worker_TP2 pid=9) [DSV4_DIAG] logits_finite = True\n"
                        b"(Worker_TP2 pid=9) [DSV4_DIAG] probs_max = nan\n"
                        b"[DSV4_DIAG][TP7] rope_max = inf\n[DSV4_DIAG] main_cache_shape = (1, nan)\n")
    assert [(e.line, e.kind, e.process) for e in facts.nonfinite] == [(2, "probs_max", "Worker_TP2"),
                                                                      (3, "rope_max", "TP7")]
    assert facts.diag_last["Worker_TP2:logits_finite"] == "True"


def test_device_errors_and_slurmstepd_messages():
    facts = parse_bytes((LOGS / "J06.log").read_bytes())
    assert [e.kind for e in facts.device_errors] == ["device_assert", "hsa_error", "gpu_memory_fault"]
    facts = parse_bytes((LOGS / "timeout.log").read_bytes())
    assert [e.kind for e in facts.scheduler_events] == ["time_limit"]
    facts = parse_bytes((LOGS / "oom.log").read_bytes())
    assert [e.kind for e in facts.scheduler_events] == ["oom_kill"]
    assert facts.worker_deaths[0].line == 16


def test_token_id_lists_tolerate_elision_and_garbling():
    assert parse_token_ids("[32, 0, 0, ..., 0]") == ([32, 0, 0, 0], [3], [])
    assert parse_token_ids("[621, 666, phase, 53091]") == ([621, 666, 53091], [], ["phase"])
    assert parse_decode_list("[' Modified', BOS, BOS, ...]")[:3] == [" Modified", "BOS", "BOS"]


def test_log_cut_mid_line():
    facts = parse_bytes((LOGS / "cut-mid-load.log").read_bytes())
    assert facts.ends_mid_line and facts.py_exit is None and facts.stages[-1][1] == "engine init (the real test)"


def test_request_blocks_with_indices_and_multiline_output():
    text = (b"REQUEST: 0\nTOKEN_IDS: [5, 6]\nFINISH_REASON: length\nOUTPUT: line one\nline two\n"
            b"REQUEST: 1\nTOKEN_IDS[1]: [7]\nFINISH_REASON: stop\nDSV4_VERDICT: COHERENT\n")
    facts = parse_bytes(text)
    assert [(r.index, r.token_ids, r.finish_reason) for r in facts.requests] == [(0, [5, 6], "length"),
                                                                                 (1, [7], "stop")]
    assert facts.requests[0].output == "line one\nline two"


def _facts_dict(data: bytes, cuts: list[int]) -> dict:
    parser = LogParser()
    last = 0
    for cut in sorted(set(cuts)):
        parser.feed(data[last:cut])
        last = cut
    parser.feed(data[last:])
    return asdict(parser.close())


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["J01", "J03", "J05", "J06", "J15", "J17", "batch8-one-bad", "cut-mid-load"]),
       fractions=st.lists(st.floats(0, 1), max_size=12))
def test_any_chunking_gives_the_same_facts(name, fractions):
    data = (LOGS / f"{name}.log").read_bytes()
    whole = asdict(parse_bytes(data))
    assert _facts_dict(data, [int(f * len(data)) for f in fractions]) == whole


def test_constant_memory_caps_are_counted():
    block = b"Traceback (most recent call last):\n  File \"x\", line 1\nValueError: boom\n"
    facts = parse_bytes(block * 100)
    assert len(facts.tracebacks) == 64 and facts.dropped["tracebacks"] == 36


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(p.stem for p in LOGS.glob("*.log"))),
       fractions=st.lists(st.floats(0, 1), max_size=6))
def test_stdlib_finder_and_accelerated_finder_agree(name, fractions):
    """The job venv parses with bytes.find alone; the CLI with ahocorasick-rs. Same log, same facts."""
    from dsv4ctl.judge import anchors as logparse

    data = (LOGS / f"{name}.log").read_bytes()
    cuts = [int(f * len(data)) for f in fractions]
    assert isinstance(logparse.finder(False), logparse._AhoCorasickFinder)
    accelerated = _facts_dict(data, cuts)
    logparse.USE_ACCELERATOR = False
    try:
        assert isinstance(logparse.finder(False), logparse._PythonFinder)
        assert _facts_dict(data, cuts) == accelerated
    finally:
        logparse.USE_ACCELERATOR = True


def test_parse_stream_with_a_small_buffer_matches_parse_bytes():
    import io

    from dsv4ctl.judge.scan import parse_stream

    for name in ("J01", "J05", "J17", "cut-mid-load"):
        data = (LOGS / f"{name}.log").read_bytes()
        assert asdict(parse_stream(io.BytesIO(data), chunk_size=97)) == asdict(parse_bytes(data))


def test_torch_distributed_rank_prefix():
    text = (b"### STAGE: generate\n[rank0]: Traceback (most recent call last):\n"
            b"[rank0]:   File \"probe.py\", line 184, in main\n"
            b"[rank0]:     raise RuntimeError(\"boom\")\n[rank0]: RuntimeError: boom\nPY_EXIT=1\n")
    [tb] = parse_bytes(text).tracebacks
    assert (tb.process, tb.text, tb.exc_line) == ("rank0", "RuntimeError: boom", 5)
