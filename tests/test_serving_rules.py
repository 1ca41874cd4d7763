"""Domain rules for `mode: serve` specs: each one with the spec that trips it and one that does not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from dsv4ctl.spec.load import load_spec

from .conftest import BASE_SPEC, EXPERIMENTS

CPU_SERVE = """\
name: s
platform: cpu
mode: serve
model:
  path: /models/m
requests:
  - messages: [{role: user, content: hi}]
sampling:
  max_tokens: 32
load:
"""


def findings(write_spec, load_lines: str, extra: str = "") -> list[tuple[str, str, str]]:
    text = CPU_SERVE + "".join(f"  {line}\n" for line in load_lines.strip().splitlines()) + extra
    (point,) = load_spec(write_spec(text))
    return [(f.severity, f.path, f.message) for f in point.findings]


def paths(found, severity=None):
    return {p for s, p, _ in found if severity is None or s == severity}


def test_example_serve_spec_is_clean():
    (point,) = load_spec(EXPERIMENTS / "cpu-serve.yaml")
    assert point.errors == [] and [f for f in point.findings if f.path.startswith("load")] == []


def test_rate_without_a_cap_on_one_card_warns(write_spec):
    found = findings(write_spec, "request_rate: 4")
    assert ("warning", "load.max_concurrency") in {(s, p) for s, p, _ in found}
    assert any("4 req/s with no concurrency cap on a 1-card run" in m for _, _, m in found)
    assert "load.max_concurrency" not in paths(findings(write_spec, "request_rate: 4\nmax_concurrency: 4"))
    multi = findings(write_spec, "request_rate: 4", 'slurm:\n  gres: "dcu:8"\n')
    assert "load.max_concurrency" not in paths(multi)


@pytest.mark.parametrize("lines,said", [
    ("ramp_up_strategy: linear\nramp_up_start_rps: 1\nramp_up_end_rps: 8\nrequest_rate: 4", "leave request_rate out"),
    ("ramp_up_strategy: linear\nramp_up_start_rps: 1", "both ramp_up_start_rps and ramp_up_end_rps"),
    ("ramp_up_strategy: exponential\nramp_up_start_rps: 9\nramp_up_end_rps: 8", "is above ramp_up_end_rps"),
    ("ramp_up_strategy: linear\nramp_up_start_rps: 0\nramp_up_end_rps: 8", "greater than 0"),
    ("ramp_up_start_rps: 1\nramp_up_end_rps: 8", "need ramp_up_strategy"),
    ("ramp_up_strategy: linear\nramp_up_start_rps: 1\nramp_up_end_rps: 8\nduration_s: 30", "does not combine"),
    ("ramp_up_strategy: step\nramp_up_start_rps: 1\nramp_up_end_rps: 8", "linear"),
])
def test_ramp_up_is_checked_like_vllm_bench_serve(write_spec, lines, said):
    found = findings(write_spec, lines)
    assert any(s == "error" and p.startswith("load") and said in m for s, p, m in found), found


def test_a_ramp_up_is_named_in_the_concurrency_warning(write_spec):
    found = findings(write_spec, "ramp_up_strategy: exponential\nramp_up_start_rps: 1\nramp_up_end_rps: 16")
    assert any("exponential ramp-up to 16 req/s with no concurrency cap" in m for _, _, m in found), found


def test_missing_or_malformed_jsonl_dataset_is_an_error(write_spec, tmp_path):
    found = findings(write_spec, f"dataset: jsonl\npath: {tmp_path / 'none.jsonl'}\nmax_concurrency: 1")
    assert ("error", "load.path") in {(s, p) for s, p, _ in found}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"text": "b"}\n', encoding="utf-8")
    found = findings(write_spec, f"dataset: jsonl\npath: {bad}\nmax_concurrency: 1")
    assert any(p == "load.path" and "line 2" in m for _, p, m in found)
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "a", "max_tokens": 8}\n\n{"messages": [{"role": "user", "content": "b"}]}\n')
    assert "load.path" not in paths(findings(write_spec, f"dataset: jsonl\npath: {good}\nmax_concurrency: 1"))


def test_requests_dataset_shorter_than_the_requests_warns(write_spec):
    two = CPU_SERVE.replace("requests:\n", "requests:\n  - messages: [{role: user, content: two}]\n")
    (point,) = load_spec(write_spec(two + "  dataset: requests\n  num_prompts: 1\n  max_concurrency: 1\n"))
    assert any(f.path == "load.num_prompts" and "never sent" in f.message for f in point.findings)
    (point,) = load_spec(write_spec(two + "  dataset: requests\n  num_prompts: 2\n  max_concurrency: 1\n"))
    assert not [f for f in point.findings if f.path == "load.num_prompts"]


def test_tpot_slo_with_one_token_outputs_warns(write_spec):
    found = findings(write_spec, "random_output_len: 1\nmax_concurrency: 1\nslo: {tpot_ms: 50}")
    assert "load.slo.tpot_ms" in paths(found, "warning")
    assert "load.slo.tpot_ms" not in paths(findings(write_spec, "random_output_len: 8\nmax_concurrency: 1\n"
                                                                "slo: {tpot_ms: 50}"))


def test_soak_with_num_prompts_and_without_a_memory_limit_warns(write_spec):
    found = findings(write_spec, "duration_s: 600\nnum_prompts: 10\nmax_concurrency: 1")
    assert {"load.num_prompts", "load.memory_limit_mib"} <= paths(found, "warning")
    found = findings(write_spec, "duration_s: 600\nmax_concurrency: 1\nmemory_limit_mib: 256")
    assert not {"load.num_prompts", "load.memory_limit_mib"} & paths(found)


def test_golden_with_a_random_dataset_warns(write_spec):
    found = findings(write_spec, "max_concurrency: 1", "expect:\n  golden_token_ids: [1, 2, 3]\n")
    assert "expect.golden_token_ids" in paths(found, "warning")


def test_offline_specs_get_no_serve_findings(write_spec):
    (point,) = load_spec(write_spec(BASE_SPEC))
    assert not [f for f in point.findings if f.path.startswith("load")]


@settings(max_examples=60, deadline=None)
@given(rate=st.one_of(st.just("inf"), st.floats(0.01, 1e4)), cap=st.one_of(st.none(), st.integers(1, 64)),
       out=st.integers(1, 64), duration=st.one_of(st.none(), st.floats(1, 1e5)),
       tpot=st.one_of(st.none(), st.floats(0.1, 1e4)), limit=st.one_of(st.none(), st.floats(1, 1e5)))
def test_serve_rules_never_crash(tmp_path_factory, rate, cap, out, duration, tpot, limit):
    load = {"request_rate": rate, "max_concurrency": cap, "random_output_len": out, "duration_s": duration,
            "memory_limit_mib": limit, "slo": {"tpot_ms": tpot}}
    import json

    path = tmp_path_factory.mktemp("spec") / "s.yaml"
    path.write_text(CPU_SERVE.replace("load:\n", "load: " + json.dumps(load) + "\n"), encoding="utf-8")
    (point,) = load_spec(path)
    assert point.spec is not None
    assert all(f.severity in ("error", "warning") for f in point.findings)
    assert ("load.max_concurrency" in {f.path for f in point.findings}) == (cap is None)


# ---- issue 29 S14-S17: what validate could see and let through ---------------------------------------------------


def test_every_jsonl_line_gets_the_jobs_own_check(write_spec, tmp_path):
    # S14: only the first 1000 lines were read, and only for a prompt/messages key
    cases = {"broken1001": "".join(f'{{"prompt": "hi {i}"}}\n' for i in range(1000)) + "{not json\n",
             "promptnum": '{"prompt": 42}\n', "msgstr": '{"prompt": "ok", "messages": "oops"}\n',
             "blank": "\n\n   \n", "maxtok": '{"prompt": "hi", "max_tokens": 1000000000}\n'}
    said = {"broken1001": "line 1001: not JSON", "promptnum": "line 1: needs a prompt (text or token ids)",
            "msgstr": "line 1: messages must be a list of {role, content} strings",
            "blank": "has no prompts (blank lines only)",
            "maxtok": "line 1: max_tokens 1000000000 is more than model.max_model_len 512"}
    for name, text in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(text, encoding="utf-8")
        found = findings(write_spec, f"dataset: jsonl\npath: {path}\nmax_concurrency: 1")
        assert any(s == "error" and p == "load.path" and said[name] in m for s, p, m in found), (name, found)


def test_token_ids_outside_the_vocabulary_when_the_model_is_here(write_spec, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"vocab_size": 812}')
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"prompt": [811, 5]}\n{"prompt": [1000000000, 5, 6]}\n')
    text = CPU_SERVE.replace("/models/m", str(model)) + f"  dataset: jsonl\n  path: {ids}\n  max_concurrency: 1\n"
    (point,) = load_spec(write_spec(text))
    assert any("line 2: token id 1000000000 is outside the model's vocabulary (812 ids)" in f.message
               for f in point.findings if f.severity == "error"), point.findings


def test_outputs_longer_than_the_model_are_refused(write_spec):
    found = findings(write_spec, "random_input_len: 400\nrandom_output_len: 200\nmax_concurrency: 1")
    assert any(s == "error" and p == "load.random_output_len" and "exceed model.max_model_len 512" in m
               for s, p, m in found), found
    assert "sampling.max_tokens" not in paths(findings(write_spec, "dataset: requests\nmax_concurrency: 1"))
    text = CPU_SERVE.replace("max_tokens: 32", "max_tokens: 600") + "  dataset: requests\n  max_concurrency: 1\n"
    (point,) = load_spec(write_spec(text))
    assert any(f.path == "sampling.max_tokens" and f.severity == "error" for f in point.findings)


def test_yaml_infinity_is_the_rate_inf(write_spec):
    # S15: `.inf` got two errors ("expected a finite number", "Input should be 'inf'")
    text = CPU_SERVE + "  request_rate: .inf\n  max_concurrency: 4\n"
    (point,) = load_spec(write_spec(text))
    assert point.errors == [] and point.spec.load.request_rate == "inf"


def test_a_load_longer_than_the_time_limit_warns(write_spec):
    # S16: a week's soak and 8 prompts at 1e-9 req/s, both with minutes of slurm.time
    week = findings(write_spec, "duration_s: 604800\nmemory_limit_mib: 500\nmax_concurrency: 1",
                    'slurm:\n  time: "00:10:00"\n')
    assert any(p == "load.duration_s" and "longer than slurm.time 00:10:00 (600 s)" in m for _, p, m in week), week
    tiny = findings(write_spec, "request_rate: 1e-9\nnum_prompts: 8\nmax_concurrency: 1", 'slurm:\n  time: "1:30"\n')
    assert any(p == "load.request_rate" and "slurm.time 1:30 (90 s)" in m for _, p, m in tiny), tiny
    fits = findings(write_spec, "request_rate: 8\nnum_prompts: 64\nmax_concurrency: 1", 'slurm:\n  time: "10"\n')
    assert not any("slurm.time" in m for _, _, m in fits)


@pytest.mark.parametrize("args", [["--port", "38600"], ["--host=0.0.0.0"], ["--model", "/elsewhere"]])
def test_flags_the_job_sets_are_refused_in_serve_args(write_spec, args):
    # S17: the server listened on 38600 while the job polled its own port for the whole ready timeout
    found = findings(write_spec, "max_concurrency: 1", f"serve:\n  args: {args}\n")
    assert any(s == "error" and p == "serve.args" and args[0].split("=")[0] in m for s, p, m in found), found
    assert "serve.args" not in paths(findings(write_spec, "max_concurrency: 1", "serve:\n  args: [--max-num-seqs, '8']\n"))
