"""The W4A16 MXFP4 MoE kernel (runtime/dsv4rt/moe_w4a16.py) against the emulation path (moe_reference: the
project's dequantize_mxfp4 + bf16 matmuls + swiglu_clamp): Triton's CPU interpreter here, the GPU where there is one.

Tolerance, held on every case: elementwise |y - ref| <= moe_reference's error bound (derived from the reference's
bf16 roundings, 2x slack), and ||y - ref|| / ||ref|| <= 2**-6 (independent bf16 roundings at four places give about
2**-8 in the norm; 2**-6 leaves 4x). The wrong-kernel stand-ins show both can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("DSV4CTL_REQUIRE_ENGINE"):  # under ./scripts/test a missing torch fails, never skips
    import torch
else:
    torch = pytest.importorskip("torch", reason="the kernel tests need torch (./scripts/setup installs it)")

from .conftest import ENGINE_PYTHON, ROOT, needs_engine_venv  # noqa: E402
from .moe_cases import CASES, WRONG, check_case, check_decode, make_case  # noqa: E402

sys.path.insert(0, str(ROOT / "runtime"))
REL_L2 = 2.0**-6


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """Every case once, in one interpreter process (Triton reads TRITON_INTERPRET at import)."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "moe_cases.py"), str(ROOT / "runtime"), "cpu",
                           *CASES], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["by_name"] = {c["name"]: c for c in out["cases"]}
    return out


def assert_within(result: dict) -> None:
    assert result["finite"] and result["ref_finite"], result
    assert result["excess"] <= 1.0, result  # the elementwise bound
    assert result["rel_l2"] <= REL_L2, result


def test_decode_is_bit_exact_for_every_code_and_scale_byte(interpreted):
    assert interpreted["decode"] is True


def test_routing_groups_every_kept_pick_once(interpreted):
    assert interpreted["route"] is True


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_the_emulation_path_in_the_interpreter(interpreted, name):
    assert_within(interpreted["by_name"][name])


@pytest.mark.parametrize("wrong", WRONG)
def test_the_tolerance_catches_a_wrong_kernel(interpreted, wrong):
    off = interpreted["by_name"]["random_k2"]["wrong"][wrong]
    assert off["excess"] > 1.0 or off["rel_l2"] > REL_L2, off


def test_dequantizing_only_the_routed_experts_changes_nothing():
    from dsv4rt.moe_reference import moe_reference

    c = make_case("empty_experts")
    args = (c["x"], c["w13"], c["s13"], c["w2"], c["s2"], c["ids"], c["weights"])
    assert torch.equal(moe_reference(*args), moe_reference(*args, dequantize="routed"))


@pytest.mark.parametrize("change, message", [
    (lambda a: a.update(x=a["x"].float()), "x must be bf16"),
    (lambda a: a.update(w13=a["w13"][..., :-2]), "w13 must be uint8"),
    (lambda a: a.update(s2=a["s2"].int()), "w2_scale must be uint8"),
    (lambda a: a.update(ids=a["ids"][:-1]), "topk_ids and topk_weights"),
    (lambda a: a.update(ids=a["ids"].float()), "topk_ids must be int32"),
])
def test_bad_inputs_get_a_clear_error(change, message):
    from dsv4rt.moe_w4a16 import mxfp4_moe

    c = make_case("random_k2")
    change(c)
    with pytest.raises(ValueError, match=message):
        mxfp4_moe(c["x"], c["w13"], c["s13"], c["w2"], c["s2"], c["ids"], c["weights"])


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: benchmarks/mxfp4_moe.py runs on one")


@gpu
@pytest.mark.parametrize("bf16", [False, True])
def test_decode_is_bit_exact_on_the_gpu(bf16):
    assert check_decode("cuda", bf16=bf16)


@gpu
@pytest.mark.parametrize("variant", [{}, {"SWAP": True, "DECODE": 1, "PREFETCH": True}],
                         ids=["as-in-ci", "swap-bf16decode-prefetch"])
@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_the_emulation_path_on_the_gpu(name, variant):
    assert_within(check_case(name, "cuda", override=variant))


# ---- DSV4_MOE_BACKEND=triton_w4a16: the shim's patch at vLLM's emulation entry point ---------------------------------

FAKE_EMULATION = '''\
import enum

class MoEActivation(enum.Enum):
    SILU = "silu"
    GELU = "gelu"

class OCP_MXQuantizationEmulationTritonExperts:
    """vLLM 0.32.0's signature; the original writes a sentinel so a test can see which path ran."""
    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts,
              expert_map, a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta,
              apply_router_weight_on_input):
        output.fill_(-7.0)
'''

PATCHED_CALL = '''
import json, sys, types, torch
from tests.moe_cases import make_case
from dsv4rt.moe_reference import moe_reference
from vllm.model_executor.layers.fused_moe.experts import ocp_mx_emulation_moe as m
c = make_case("remote_ids")
E = c["w13"].shape[0]
ref, bound = moe_reference(c["x"], c["w13"], c["s13"], c["w2"], c["s2"], c["ids"], c["weights"], with_bound=True)
# EP: global ids 0..2E-1, this rank owns the odd ones (local = global // 2)
expert_map = torch.tensor([i // 2 if i % 2 else -1 for i in range(2 * E)], dtype=torch.int32)
ids = torch.where(c["ids"] >= 0, 2 * c["ids"] + 1, 0).int()  # -1 picks become even: another rank's
results = []
for scheme, activation in json.loads(sys.argv[1]):
    experts = m.OCP_MXQuantizationEmulationTritonExperts()
    experts.ocp_mx_scheme, experts.quant_dtype = scheme, None
    experts.w1_scale_val, experts.w2_scale_val = c["s13"], c["s2"]
    experts.activation_config = types.SimpleNamespace(clamp_limit=10.0)
    out = torch.zeros(c["x"].shape, dtype=torch.bfloat16)
    experts.apply(out, c["x"], c["w13"], c["w2"], c["weights"], ids, getattr(m.MoEActivation, activation), 2 * E,
                  expert_map, None, None, None, None, None, apply_router_weight_on_input=False)
    results.append({"sentinel": bool((out == -7).all()),
                    "within": bool(((out.float() - ref.float()).abs() <= bound).all())})
print(json.dumps(results))
'''
CALLS = [("w_mxfp4", "SILU"), ("w_mxfp4_a_mxfp4", "SILU"), ("w_mxfp4", "GELU")]


@pytest.fixture
def fake_vllm_emulation(tmp_path):
    pkg = tmp_path / "fake" / "vllm" / "model_executor" / "layers" / "fused_moe" / "experts"
    pkg.mkdir(parents=True)
    for parent in (pkg, *list(pkg.parents)[:4]):
        (parent / "__init__.py").touch()
    (pkg / "ocp_mx_emulation_moe.py").write_text(FAKE_EMULATION)
    return tmp_path / "fake"


def run_patched(fake, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "VLLM_"))}
    path = ":".join([str(ROOT / "runtime"), str(fake), str(ROOT)])
    done = subprocess.run([sys.executable, "-c", PATCHED_CALL, json.dumps(CALLS)], capture_output=True, text=True,
                          timeout=300, env={**clean, "PYTHONPATH": path, "TRITON_INTERPRET": "1", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_switch_routes_the_emulation_experts_to_the_kernel_and_falls_back_where_it_must(fake_vllm_emulation):
    (kernel, quantized_acts, gelu), err = run_patched(fake_vllm_emulation, DSV4_MOE_BACKEND="triton_w4a16")
    # EP expert_map honoured (other ranks' picks skipped), output written in place, within the oracle's bound
    assert kernel == {"sentinel": False, "within": True}, err
    said = [ln for ln in err.splitlines() if ln.startswith("[dsv4 shim]")]
    assert "triton_w4a16" in said[0] and "mxfp4_moe" in said[0], err
    # calls the kernel does not cover run vLLM's emulation, each reason said once
    assert quantized_acts["sentinel"] and gelu["sentinel"], err
    assert len(said) == 3 and "emulation kept" in said[1] and "emulation kept" in said[2], err
    assert "w_mxfp4_a_mxfp4, not weight-only" in said[1] and "GELU, not SiLU" in said[2], err


@pytest.mark.parametrize("value", [None, "emulation"])
def test_emulation_stays_without_the_switch(fake_vllm_emulation, value):
    results, err = run_patched(fake_vllm_emulation, **({"DSV4_MOE_BACKEND": value} if value else {}))
    assert all(r["sentinel"] for r in results) and "[dsv4 shim]" not in err, err


@needs_engine_venv
def test_the_patched_signature_is_vllms_own():
    """Read from the pinned vLLM's source (no import): the class, apply's parameters, the scale attributes."""
    import ast

    from dsv4rt import moe_patch

    find = ("import importlib.util, pathlib; spec = importlib.util.find_spec('vllm'); "
            "print(pathlib.Path(spec.origin).parent)")
    root = subprocess.run([str(ENGINE_PYTHON), "-c", find], capture_output=True, text=True, timeout=60)
    path = Path(root.stdout.strip()).joinpath(*moe_patch.TARGET_MODULE.split(".")[1:]).with_suffix(".py")
    source = path.read_text()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == moe_patch.TARGET_CLASS)
    apply = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "apply")
    assert tuple(a.arg for a in apply.args.args[1:]) == moe_patch.APPLY_PARAMS
    for attribute in ("self.w1_scale_val =", "self.w2_scale_val =", "self.ocp_mx_scheme ="):
        assert attribute in source
