"""Spec loading: structure, locations, extends, matrix points, and each domain rule with its citation."""

from __future__ import annotations

import pytest

from dsv4ctl.errors import SpecError
from dsv4ctl.spec.load import load_spec
from dsv4ctl.spec.switches import SWITCHES, closest, defaults

from .conftest import BASE_SPEC, EXPERIMENTS


def only(points):
    assert len(points) == 1
    return points[0]


def messages(point):
    return [(f.severity, f.path, f.message) for f in point.findings]


def test_base_spec_is_clean(write_spec):
    point = only(load_spec(write_spec(BASE_SPEC)))
    assert point.spec is not None and point.findings == []


def test_examples_validate_and_stable_set_is_exported():
    for name in ("j17-baseline.yaml", "tp4.yaml", "q1-off.yaml"):
        point = only(load_spec(EXPERIMENTS / name))
        assert point.errors == [], messages(point)
    j17 = only(load_spec(EXPERIMENTS / "j17-baseline.yaml")).spec
    switches = j17.resolved_switches()
    # The report's §0.4 stable set, exactly.
    for key, value in {"DSV4_USE_TRITON_SPARSE": "1", "DSV4_MOE_ROUTING_Q1": "1", "DSV4_FP8_WEIGHT_CACHE": "0",
                       "DSV4_FP8_TRITON_GEMM": "0", "DSV4_ROCM_SHARED_EXPERTS_STREAM": "0",
                       "DSV4_GREEDY_LOCAL_ARGMAX": "0", "DSV4_MOE_Q1_PREPARE": "0",
                       "VLLM_ROCM_USE_SKINNY_GEMM": "0", "DSV4_MOE_BACKEND": "emulation"}.items():
        assert switches[key] == value, key
    assert switches["DSV4_TP"] == "8" and switches["DSV4_KV_CACHE_DTYPE"] == "fp8"


def test_extends_deep_merges_and_overrides():
    tp4 = only(load_spec(EXPERIMENTS / "tp4.yaml")).spec
    assert tp4.parallel.tp == 4 and tp4.slurm.gres == "dcu:4"
    assert tp4.model.max_model_len == 512  # inherited
    q1 = only(load_spec(EXPERIMENTS / "q1-off.yaml")).spec
    assert q1.resolved_switches()["DSV4_MOE_ROUTING_Q1"] == "0"
    assert q1.resolved_switches()["DSV4_USE_TRITON_SPARSE"] == "1"


def test_extends_cycle_is_refused(write_spec):
    write_spec("extends: b.yaml\nname: a\n", "a.yaml")
    b = write_spec("extends: a.yaml\nname: b\n", "b.yaml")
    with pytest.raises(SpecError, match="cycle"):
        load_spec(b)


def test_unknown_key_is_named_with_its_line(write_spec):
    path = write_spec(BASE_SPEC.replace("  max_tokens: 32", "  max_tokens: 32\n  temprature: 0"))
    point = only(load_spec(path))
    [finding] = point.errors
    assert finding.path == "sampling.temprature"
    assert "unknown key" in finding.message
    assert finding.location.line == 11 and finding.location.column == 3
    assert str(finding).startswith(f"{path}:11:3: error: sampling.temprature")


def test_location_of_inherited_field_points_into_the_base_file(write_spec):
    write_spec(BASE_SPEC.replace("max_tokens: 32", "max_tokens: 1"), "base.yaml")
    child = write_spec("extends: base.yaml\nname: child\n", "child.yaml")
    [finding] = only(load_spec(child)).errors
    assert finding.path == "sampling.max_tokens"
    assert finding.location.file.endswith("base.yaml") and finding.location.line == 10


def test_yaml_syntax_error_reports_line_and_column(write_spec):
    path = write_spec("name: x\nmodel: {path: /m\nrequests: []\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert f"{path}:" in str(err.value) and "YAML syntax error" in str(err.value)
    assert ":3:" in str(err.value) or ":2:" in str(err.value)


def test_duplicate_key_is_refused(write_spec):
    with pytest.raises(SpecError, match="duplicate key 'name'"):
        load_spec(write_spec(BASE_SPEC + "name: again\n"))


def test_unsafe_name_is_refused(write_spec):
    point = only(load_spec(write_spec(BASE_SPEC.replace("name: t", "name: 'x; rm -rf /'"))))
    assert [f.path for f in point.errors] == ["name"]


# ---- one test per domain rule -------------------------------------------------------------------------------------


def test_max_tokens_below_two_is_refused_citing_decode(write_spec):
    point = only(load_spec(write_spec(BASE_SPEC.replace("max_tokens: 32", "max_tokens: 1"))))
    [finding] = point.errors
    assert finding.path == "sampling.max_tokens" and "decode" in finding.message and "J11" in finding.why
    assert finding.location.line == 10


def test_short_decode_is_warned(write_spec):
    point = only(load_spec(write_spec(BASE_SPEC.replace("max_tokens: 32", "max_tokens: 8"))))
    assert point.errors == [] and [f.path for f in point.warnings] == ["sampling.max_tokens"]


def test_kv_cache_auto_is_refused_for_deepseek_v4(write_spec):
    text = BASE_SPEC.replace("  path: /models/m", "  path: /models/m\n  kv_cache_dtype: auto")
    [finding] = only(load_spec(write_spec(text))).errors
    assert finding.path == "model.kv_cache_dtype" and "J12" in finding.why and finding.location.line == 5


def test_kv_cache_auto_is_fine_for_other_architectures(write_spec):
    text = BASE_SPEC.replace("  path: /models/m", "  path: /models/m\n  arch: Qwen2ForCausalLM\n  kv_cache_dtype: auto")
    assert only(load_spec(write_spec(text))).errors == []


@pytest.mark.parametrize("tp, gres, problem", [(16, "dcu:8", "exceeds"), (3, "dcu:8", "does not divide"),
                                               (4, "dcu:8", None), (8, "dcu:8", None)])
def test_tp_must_fit_the_accelerators(write_spec, tp, gres, problem):
    point = only(load_spec(write_spec(BASE_SPEC.replace("tp: 8", f"tp: {tp}").replace("dcu:8", gres))))
    if problem is None:
        assert point.errors == []
    else:
        [finding] = point.errors
        assert finding.path == "parallel.tp" and problem in finding.message


def test_raw_prompt_warns_about_chat_template(write_spec):
    text = BASE_SPEC.replace("  - messages: [{role: user, content: hi}]", "  - prompt: 你好，请介绍一下你自己。")
    point = only(load_spec(write_spec(text)))
    assert point.errors == []
    [warning] = point.warnings
    assert warning.path == "requests.0.prompt" and "J11" in warning.why and warning.location.line == 8


def test_skinny_gemm_on_gfx936_warns(write_spec):
    point = only(load_spec(write_spec(BASE_SPEC + "switches:\n  VLLM_ROCM_USE_SKINNY_GEMM: 1\n")))
    [warning] = point.warnings
    assert warning.path == "switches.VLLM_ROCM_USE_SKINNY_GEMM" and "J06" in warning.why
    assert warning.location.line == 14


def test_temperature_with_golden_warns(write_spec):
    text = BASE_SPEC.replace("max_tokens: 32", "max_tokens: 32\n  temperature: 0.7") + \
        "expect:\n  golden_token_ids: [1, 2, 3]\n"
    [warning] = only(load_spec(write_spec(text))).warnings
    assert warning.path == "sampling.temperature"


def test_unknown_switch_lists_the_closest_names(write_spec):
    point = only(load_spec(write_spec(BASE_SPEC + "switches:\n  DSV4_MOE_ROUTING_QI: 1\n")))
    [finding] = point.errors
    assert "DSV4_MOE_ROUTING_Q1" in finding.message and finding.location.line == 14


def test_derived_switch_points_to_its_field(write_spec):
    [finding] = only(load_spec(write_spec(BASE_SPEC + "switches:\n  DSV4_TP: 4\n"))).errors
    assert "parallel.tp" in finding.message


def test_flag_switch_rejects_other_values(write_spec):
    [finding] = only(load_spec(write_spec(BASE_SPEC + "switches:\n  DSV4_MOE_ROUTING_Q1: 2\n"))).errors
    assert "use 0 or 1" in finding.message


def test_env_escape_hatch_cannot_shadow_a_switch(write_spec):
    text = BASE_SPEC + "environment:\n  env:\n    DSV4_MOE_ROUTING_Q1: '0'\n"
    [finding] = only(load_spec(write_spec(text))).errors
    assert finding.path == "environment.env.DSV4_MOE_ROUTING_Q1"


def test_matrix_expands_in_order_and_checks_each_point(write_spec):
    text = BASE_SPEC + "matrix:\n  batch: [1, 8]\n  switches.DSV4_MOE_ROUTING_Q1: [0, 1]\n"
    points = load_spec(write_spec(text))
    assert [p.point for p in points] == [
        {"batch": 1, "switches.DSV4_MOE_ROUTING_Q1": 0}, {"batch": 1, "switches.DSV4_MOE_ROUTING_Q1": 1},
        {"batch": 8, "switches.DSV4_MOE_ROUTING_Q1": 0}, {"batch": 8, "switches.DSV4_MOE_ROUTING_Q1": 1}]
    assert points[2].spec.name == "t.batch=8.DSV4_MOE_ROUTING_Q1=0"
    assert len(points[2].spec.batch_requests()) == 8
    assert len({p.spec.spec_hash() for p in points}) == 4


def test_matrix_point_that_breaks_a_rule_is_reported(write_spec):
    points = load_spec(write_spec(BASE_SPEC + "matrix:\n  sampling.max_tokens: [1, 32]\n"))
    assert [bool(p.errors) for p in points] == [True, False]


def test_registry_defaults_are_the_stable_set_and_typos_are_caught():
    assert defaults()["DSV4_MOE_ROUTING_Q1"] == "1"
    assert all(s.meaning and s.source for s in SWITCHES)
    assert closest("DSV4_USE_TRITON_SPARS")[0] == "DSV4_USE_TRITON_SPARSE"


def test_dot_relative_paths_resolve_against_the_file_that_wrote_them(write_spec, tmp_path):
    (tmp_path / "sub").mkdir()
    write_spec(BASE_SPEC.replace("path: /models/m", "path: ../models/m") + "environment:\n  venv: ./venv\n",
               "sub/base.yaml")
    child = write_spec("extends: sub/base.yaml\nname: c\nenvironment:\n  pythonpath: [./lib, /abs]\n", "c.yaml")
    spec = only(load_spec(child)).spec
    assert spec.model.path == str((tmp_path / "models" / "m").resolve())
    assert spec.environment.venv == str((tmp_path / "sub" / "venv").resolve())
    assert spec.environment.pythonpath == [str((tmp_path / "lib").resolve()), "/abs"]


def test_a_missing_base_is_named_where_extends_names_it(tmp_path):
    """issue 26 m5: `extends: nope.yaml` said the extending file was unreadable; the base is what is missing."""
    spec = tmp_path / "ext.yaml"
    spec.write_text("name: x\nextends: nope.yaml\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"ext\.yaml:2:\d+: base nope\.yaml not found"):
        load_spec(spec)
