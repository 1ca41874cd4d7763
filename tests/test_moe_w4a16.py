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

import pytest

if os.environ.get("DSV4CTL_REQUIRE_ENGINE"):  # under ./scripts/test a missing torch fails, never skips
    import torch
else:
    torch = pytest.importorskip("torch", reason="the kernel tests need torch (./scripts/setup installs it)")

from .conftest import ROOT  # noqa: E402
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
def test_decode_is_bit_exact_on_the_gpu():
    assert check_decode("cuda")


@gpu
@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_the_emulation_path_on_the_gpu(name):
    assert_within(check_case(name, "cuda"))
