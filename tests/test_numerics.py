"""Runtime numerics (runtime/dsv4rt): the block-packed fp8_ds_mla writer and reader, the report's wrong readers,
MXFP4 and SwiGLU references, the validate mode, and the Triton gather kernel (CPU interpreter here; GPU if any)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

if os.environ.get("DSV4CTL_REQUIRE_ENGINE"):  # under ./scripts/test a missing torch fails, never skips
    import torch
else:
    torch = pytest.importorskip("torch", reason="the numerics tests need torch (./scripts/setup installs it)")

from .conftest import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "runtime"))
from dsv4rt import kvcache, mxfp4, validate  # noqa: E402

BS = 64


def representable_k(n: int, fnuz: bool = False, seed: int = 0) -> torch.Tensor:
    """K whose NoPE groups are E4M3 values times 2^E with one element at the format's max (so the writer picks
    exactly E), and whose RoPE is bf16: the format stores it without loss."""
    g = torch.Generator().manual_seed(seed)
    fp8 = kvcache.fp8_dtype(fnuz)
    codes = torch.randint(0, 256, (n, 7, 64), generator=g, dtype=torch.uint8)
    values = codes.view(fp8).float()
    values = torch.where(torch.isfinite(values), values, torch.zeros_like(values))
    values[..., 0] = kvcache.fp8_max(fnuz) * torch.where(torch.rand(n, 7, generator=g) < 0.5, -1.0, 1.0)
    exponent = torch.randint(-12, 6, (n, 7, 1), generator=g).float()
    nope = (values * torch.exp2(exponent)).reshape(n, 448)
    rope = torch.randn(n, 64, generator=g).to(torch.bfloat16).float()
    return torch.cat([nope, rope], 1)


def random_slots(num_blocks: int, n: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(num_blocks * BS, generator=g)[:n]


@pytest.mark.parametrize("fnuz", [False, True])
@pytest.mark.parametrize("stride", [None, 64 * 584, 37440 + 13, 1002240])
def test_round_trip_is_exact_where_the_format_allows(fnuz, stride):
    cache = kvcache.make_cache(5, BS, block_stride=stride)
    slots = random_slots(5, 200)
    k = representable_k(200, fnuz)
    kvcache.write_fp8_ds_mla(k, cache, slots, BS, fnuz)
    assert torch.equal(kvcache.read_fp8_ds_mla(cache, slots, BS, fnuz), k)


@pytest.mark.parametrize("fnuz", [False, True])
def test_round_trip_error_is_bounded_where_it_quantises(fnuz):
    """Bound: |k' - bf16(k)| <= max(2^-4 |bf16(k)|, s * 2^-(bias+3)) per NoPE value (3 mantissa bits, round to
    nearest; the second term is half the smallest subnormal step), RoPE exact after bf16 rounding."""
    cache = kvcache.make_cache(4, BS)
    slots = random_slots(4, 256)
    k = torch.randn(256, 512) * torch.exp2(torch.randint(-8, 8, (256, 1)).float())
    kvcache.write_fp8_ds_mla(k, cache, slots, BS, fnuz)
    got = kvcache.read_fp8_ds_mla(cache, slots, BS, fnuz)
    kb = k.to(torch.bfloat16).float()
    assert torch.equal(got[:, 448:], kb[:, 448:])
    _, scale_bytes = kvcache.quantize(k, fnuz)
    scale = torch.exp2(scale_bytes[:, :7].float() - 127).repeat_interleave(64, 1)
    bias = 8 if fnuz else 7
    bound = torch.maximum(kb[:, :448].abs() * 2.0**-4, scale * 2.0 ** -(bias + 3))
    assert bool(((got[:, :448] - kb[:, :448]).abs() <= bound).all())
    assert torch.isfinite(got).all()


def test_writer_uses_the_block_packed_addresses_and_leaves_padding_alone():
    cache = kvcache.make_cache(3, BS, block_stride=40000, fill=0xAB)
    k = representable_k(1)
    kvcache.write_fp8_ds_mla(k, cache, torch.tensor([2 * BS + 5]), BS)
    storage = cache.as_strided((3 * 40000,), (1,))
    data, scale = kvcache.quantize(k)
    base = 2 * 40000
    assert torch.equal(storage[base + 5 * 576: base + 6 * 576], data[0])
    assert torch.equal(storage[base + BS * 576 + 5 * 8: base + BS * 576 + 6 * 8], scale[0])
    assert int(scale[0, 7]) == 0  # the pad byte
    written = torch.zeros(3 * 40000, dtype=torch.bool)
    written[base + 5 * 576: base + 6 * 576] = True
    written[base + BS * 576 + 40: base + BS * 576 + 48] = True
    assert bool((storage[~written] == 0xAB).all())


def test_the_reports_scale_bytes():
    # J17's decoded scale bytes [118, 119, ...]: 2^(118-127) = 2^-9 and 2^-8.
    data = torch.zeros(1, 576, dtype=torch.uint8)
    data[0, 0] = 0x38  # E4M3 1.0
    data[0, 64] = 0x38
    scale = torch.tensor([[118, 119, 119, 119, 118, 119, 118, 0]], dtype=torch.uint8)
    out = kvcache.dequantize(data, scale)
    assert out[0, 0].item() == 2.0**-9 and out[0, 64].item() == 2.0**-8


@pytest.mark.parametrize("reader", [kvcache.read_token_interleaved, kvcache.read_contiguous_first])
def test_the_reports_wrong_readers_are_caught(reader):
    cache = kvcache.make_cache(4, BS, block_stride=37440)
    slots = random_slots(4, 256)
    k = representable_k(256)
    kvcache.write_fp8_ds_mla(k, cache, slots, BS)
    assert torch.equal(kvcache.read_fp8_ds_mla(cache, slots, BS), k)  # the right reader is exact...
    wrong = reader(cache, slots, BS)
    assert not torch.equal(wrong, k)  # ...and each wrong one is not
    mismatched = (wrong != k) & ~(torch.isnan(wrong) & torch.isnan(k))
    assert mismatched.float().mean() > 0.3


def test_cache_views_are_checked():
    with pytest.raises(TypeError):
        kvcache.block_bytes(torch.zeros(2, BS, 584), BS)
    with pytest.raises(ValueError):
        kvcache.block_bytes(torch.zeros(2, BS, 576, dtype=torch.uint8), BS)


# ---- MXFP4 and SwiGLU ---------------------------------------------------------------------------------------------


def test_mxfp4_by_hand():
    packed = torch.tensor([[0x21, 0xF7, 0x80, 0x5C]], dtype=torch.uint8)  # low nibble first
    scales = torch.tensor([[128]], dtype=torch.uint8)  # 2^(128-127) = 2
    packed = torch.cat([packed, torch.zeros(1, 12, dtype=torch.uint8)], 1)
    out = mxfp4.dequantize_mxfp4(packed, scales)
    assert out[0, :8].tolist() == [1.0, 2.0, 12.0, -12.0, 0.0, -0.0, -4.0, 6.0]
    assert out.shape == (1, 32)


def test_mxfp4_round_trip_of_representable_values():
    g = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 16, (4, 64), generator=g, dtype=torch.uint8)
    codes[:, ::32] = 7  # a 6.0 in each block pins the scale
    scales = torch.randint(120, 134, (4, 2), generator=g, dtype=torch.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    x = mxfp4.dequantize_mxfp4(packed, scales)
    packed2, scales2 = mxfp4.quantize_mxfp4(x)
    assert torch.equal(mxfp4.dequantize_mxfp4(packed2, scales2), x)


def test_swiglu_clamp_by_hand():
    gate = torch.tensor([1.0, 20.0, -3.0])
    up = torch.tensor([2.0, 15.0, 1.0])
    out = mxfp4.swiglu_clamp(gate, up)
    sig = lambda v: 1 / (1 + torch.exp(torch.tensor(-v)))  # noqa: E731
    expected = torch.tensor([1 * sig(1.0) * 2, 10 * sig(10.0) * 10, -3 * sig(-3.0) * 1])
    torch.testing.assert_close(out, expected)


def test_gpt_oss_constant_is_a_different_function():
    g = torch.Generator().manual_seed(5)
    gate, up = torch.randn(1000, generator=g) * 3, torch.randn(1000, generator=g) * 3
    right = mxfp4.swiglu_clamp(gate, up)
    gpt_oss = mxfp4.swiglu_clamp(gate, up, alpha=1.702, limit=7.0)
    report_bug = torch.nn.functional.silu(gate * 1.702) * up  # §6.6's first fallback
    assert (right - gpt_oss).abs().max() > 0.5 and (right - report_bug).abs().max() > 0.5


# ---- validate mode --------------------------------------------------------------------------------------------------


def test_validate_is_silent_and_free_by_default(monkeypatch):
    monkeypatch.delenv("DSV4_SPARSE_DEBUG", raising=False)
    monkeypatch.delenv("DSV4_SPARSE_VALIDATE", raising=False)
    out = io.StringIO()
    assert validate.check("nope", torch.tensor([float("nan")]), out=out) is True and out.getvalue() == ""


def test_debug_lines_are_what_the_verdict_parser_reads(monkeypatch):
    from dsv4ctl.judge.scan import parse_bytes

    monkeypatch.setenv("DSV4_SPARSE_DEBUG", "1")
    out = io.StringIO()
    validate.check("rope", torch.tensor([1.0, -5.75]), rank=7, out=out)
    validate.check("nope", torch.tensor([1.0, float("nan")]), rank=0, out=out)
    facts = parse_bytes(out.getvalue().encode())
    assert out.getvalue().splitlines()[1] == "[DSV4_DIAG][TP7] rope_max = 5.75"
    assert [(e.kind, e.process) for e in facts.nonfinite] == [("nope_finite", "TP0"), ("nope_max", "TP0")]


def test_validate_raises(monkeypatch):
    monkeypatch.setenv("DSV4_SPARSE_VALIDATE", "1")
    with pytest.raises(validate.NonFiniteError):
        validate.check("logits", torch.tensor([float("inf")]), out=io.StringIO())


def test_diag_once_skips_the_warmup(monkeypatch):
    monkeypatch.setenv("DSV4_SPARSE_DEBUG", "1")
    once = validate.DiagOnce()
    assert [once(8), once(1), once(1)] == [False, True, False]  # J14: warm-up 8 queries, real decode 1


# ---- the Triton kernel ----------------------------------------------------------------------------------------------

INTERPRET = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from dsv4rt import kvcache
from dsv4rt.kvcache_triton import read_fp8_ds_mla_triton
results = []
for fnuz in (False, True):
    for stride, garbage in ((None, False), (37440 + 13, False), (1002240, False), (40000, True)):
        cache = kvcache.make_cache(6, 64, block_stride=stride)
        slots = torch.randperm(6 * 64)[:97]
        if not garbage:  # garbage: raw random bytes, NaN codes and odd scales included
            kvcache.write_fp8_ds_mla(torch.randn(97, 512) * 4, cache, slots, 64, fnuz)
        want = kvcache.read_fp8_ds_mla(cache, slots, 64, fnuz)
        got = read_fp8_ds_mla_triton(cache, slots, 64, fnuz, tokens_per_program=3)
        same = bool(((got == want) | (torch.isnan(got) & torch.isnan(want))).all())
        sign_same = bool((torch.signbit(got) == torch.signbit(want))[~torch.isnan(want)].all())
        results.append([fnuz, stride, garbage, same and sign_same])
print(json.dumps(results))
"""


def test_triton_kernel_equals_the_reference_in_the_interpreter():
    done = subprocess.run([sys.executable, "-c", INTERPRET, str(ROOT / "runtime")], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == 8 and all(ok for *_, ok in results), results


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: benchmarks/kvcache_gather.py runs on one")
def test_triton_kernel_equals_the_reference_on_the_gpu():
    from dsv4rt.kvcache_triton import read_fp8_ds_mla_triton

    cache = kvcache.make_cache(64, BS, block_stride=1002240, device="cuda")
    slots = torch.randperm(64 * BS, device="cuda")[:4000]
    kvcache.write_fp8_ds_mla(torch.randn(4000, 512, device="cuda"), cache, slots, BS)
    assert torch.equal(read_fp8_ds_mla_triton(cache, slots, BS), kvcache.read_fp8_ds_mla(cache, slots, BS))
