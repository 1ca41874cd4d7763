"""MoE inputs for the W4A16 kernel's oracle tests (torch + runtime/dsv4rt only; run in Triton's CPU interpreter by
tests/test_moe_w4a16.py and on a GPU where there is one). Each case is small enough for the interpreter."""

from __future__ import annotations

import json
import sys

import torch


def _routing(tokens: int, topk: int, experts: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(tokens)]).int()
    weights = torch.rand(tokens, topk, generator=gen) + 0.05
    return ids, weights / weights.sum(1, keepdim=True)


def make_case(name: str, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    spec = {"experts": 8, "hidden": 128, "inter": 64, "tokens": 7, "topk": 2, "config": {"BK": 64, "BN1": 32,
                                                                                          "BN2": 32}}
    spec.update(CASES[name])
    e, hd, it, t, k = (spec[key] for key in ("experts", "hidden", "inter", "tokens", "topk"))
    w13 = torch.randint(0, 256, (e, 2 * it, hd // 2), dtype=torch.uint8, generator=gen)
    w2 = torch.randint(0, 256, (e, hd, it // 2), dtype=torch.uint8, generator=gen)
    # Scales near a real checkpoint's (2**-7 .. 2**-4): activations stay in the SwiGLU's interesting range.
    s13 = torch.randint(120, 124, (e, 2 * it, hd // 32), dtype=torch.uint8, generator=gen)
    s2 = torch.randint(120, 124, (e, hd, it // 32), dtype=torch.uint8, generator=gen)
    x = (torch.randn(t, hd, generator=gen) * 2).bfloat16()
    ids, weights = _routing(t, k, e, gen)
    kind = spec.get("kind")
    if kind == "all_codes":  # every byte value (so every pair of E2M1 codes) in every row
        w13 = (torch.arange(w13.numel()) * 7 % 256).to(torch.uint8).reshape(w13.shape)
        w2 = (torch.arange(w2.numel()) * 11 % 256).to(torch.uint8).reshape(w2.shape)
    elif kind == "extreme_scales":
        # Scale 254 (2**127) on expert 1's gate/up for K block 0, with codes of magnitude <= 1.5 there so the
        # values stay finite in bf16, and x tiny but normal in that block (a CPU BLAS may flush subnormal operands,
        # which times 2**127 would matter); scale 0 (the subnormal 2**-127) here and there.
        w13[1, :, :16] &= 0x33
        s13[1, :, 0] = 254
        sign = torch.randint(0, 2, (t, 32), generator=gen) * 2 - 1
        x[:, :32] = (sign * (1 + torch.rand(t, 32, generator=gen)) * 2.0**-122).bfloat16()
        s13[2, ::3, 1] = 0
        s2[:, ::5, 0] = 0
        ids[:, 0] = 1
    elif kind == "empty_experts":
        ids = torch.tensor([[1, 6]] * t, dtype=torch.int32)
    elif kind == "one_expert":
        ids[:, 0] = 3
    elif kind == "remote":  # vLLM marks picks of another rank's experts -1
        ids[::2, 0] = -1
        ids[1, 1] = -1
    return {"x": x, "w13": w13, "s13": s13, "w2": w2, "s2": s2, "ids": ids, "weights": weights,
            "config": spec["config"]}


CASES: dict[str, dict] = {
    "random_k2": {},
    "random_k2_split": {"config": {"BK": 64, "BN1": 32, "BN2": 32, "JOIN": False}},
    "random_k2_swap": {"config": {"BK": 64, "BN1": 32, "BN2": 32, "SWAP": True}},
    "random_k2_prefetch": {"config": {"BK": 32, "BN1": 32, "BN2": 32, "PREFETCH": True}},
    "k1": {"topk": 1, "tokens": 9},
    "k8": {"topk": 8, "tokens": 5},
    "t1_top6": {"tokens": 1, "topk": 6},
    "t512": {"experts": 4, "hidden": 64, "inter": 32, "tokens": 512, "topk": 2,
             "config": {"BK": 32, "BN1": 32, "BN2": 64}},
    "all_codes": {"kind": "all_codes", "tokens": 5},
    "extreme_scales": {"kind": "extreme_scales", "tokens": 6},
    "empty_experts": {"kind": "empty_experts", "tokens": 11},
    "one_expert": {"kind": "one_expert", "tokens": 40, "topk": 1, "config": {"BK": 128, "BN1": 64, "BN2": 64,
                                                                              "BM": 16}},
    "remote_ids": {"kind": "remote", "tokens": 6},
    "decode3_random": {"tokens": 9, "topk": 3, "config": {"BK": 64, "BN1": 32, "BN2": 32, "DECODE": 3}},
    "decode3_all_codes": {"kind": "all_codes", "tokens": 5, "config": {"BK": 128, "BN1": 16, "BN2": 32,
                                                                        "DECODE": 3}},
    "decode3_extreme_scales": {"kind": "extreme_scales", "tokens": 6, "config": {"BK": 64, "BN1": 32, "BN2": 32,
                                                                                  "DECODE": 3}},
    "wide_blocks_split_swap": {"tokens": 24, "topk": 4, "config": {"BK": 32, "BN1": 16, "BN2": 32, "BM": 64,
                                                                    "JOIN": False, "SWAP": True,
                                                                    "PREFETCH": True}},
}

# Stand-ins for a wrong kernel: the reference run on altered inputs must break the tolerance against the kernel.
WRONG = ("swapped_nibbles", "gpt_oss_alpha", "scale_off_by_one", "no_routing_weights")


def _wrong_reference(name: str, c: dict):
    from dsv4rt.moe_reference import moe_reference

    args = dict(c)
    alpha = 1.0
    if name == "swapped_nibbles":
        args["w13"] = (c["w13"] >> 4) | (c["w13"] << 4)
    elif name == "gpt_oss_alpha":
        alpha = 1.702
    elif name == "scale_off_by_one":
        args["s2"] = c["s2"] + 1
    elif name == "no_routing_weights":
        args["weights"] = torch.ones_like(c["weights"])
    return moe_reference(args["x"], args["w13"], args["s13"], args["w2"], args["s2"], args["ids"], args["weights"],
                         alpha=alpha)


def check_case(name: str, device: str = "cpu", seed: int = 0, override: dict | None = None) -> dict:
    """The kernel on `device` against the reference on the CPU: worst |diff| / bound, finiteness, and (for
    random_k2) how far each wrong-kernel stand-in lands outside the bound."""
    from dsv4rt.moe_reference import moe_reference
    from dsv4rt.moe_w4a16 import mxfp4_moe

    c = make_case(name, seed)
    on = {key: (v.to(device) if isinstance(v, torch.Tensor) else v) for key, v in c.items()}
    y = mxfp4_moe(on["x"], on["w13"], on["s13"], on["w2"], on["s2"], on["ids"], on["weights"],
                  config={**c["config"], **(override or {})}).float().cpu()
    ref, bound = moe_reference(c["x"], c["w13"], c["s13"], c["w2"], c["s2"], c["ids"], c["weights"],
                               with_bound=True)
    ref = ref.float()
    excess = ((y - ref).abs() / (bound + 1e-30)).max().item()
    result = {"name": name, "excess": excess, "finite": bool(torch.isfinite(y).all()),
              "ref_finite": bool(torch.isfinite(ref).all()), "max_abs": ref.abs().max().item(),
              "rel_l2": ((y - ref).norm() / ref.norm().clamp(min=1e-30)).item()}
    if name == "random_k2":
        result["wrong"] = {}
        for w in WRONG:
            other = _wrong_reference(w, c).float()
            result["wrong"][w] = {"excess": ((y - other).abs() / bound).max().item(),
                                  "rel_l2": ((y - other).norm() / other.norm()).item()}
    return result


def check_decode(device: str = "cpu", bf16: bool = False) -> bool:
    """Every E2M1 code under every UE8M0 byte, bit for bit (NaN where 0 meets 2**128, signs of zeros included)."""
    from dsv4rt.moe_w4a16 import dequantize_mxfp4_triton
    from dsv4rt.mxfp4 import dequantize_mxfp4

    codes = torch.arange(256, dtype=torch.uint8).reshape(1, 256).repeat(256, 1)  # byte = (hi code, lo code)
    packed = codes.reshape(256, 16, 16).reshape(256, 256)  # 16 groups of 16 bytes per row
    scales = torch.arange(256, dtype=torch.uint8)[:, None].repeat(1, 16)  # row r: every group at scale byte r
    want = dequantize_mxfp4(packed, scales)
    got = dequantize_mxfp4_triton(packed.to(device), scales.to(device), bf16=bf16).cpu()
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    signs = torch.signbit(got) == torch.signbit(want)
    return bool(same.all() and signs[~torch.isnan(want)].all())


def check_route(device: str = "cpu") -> bool:
    """Every kept pick sits exactly once in a block of its own expert; -1 and out-of-range ids sit nowhere."""
    from dsv4rt.moe_w4a16 import route

    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(-1, 7, (300, 3), generator=gen).int()
    ids[5, 1] = 9  # out of range for 7 experts: skipped too
    bm = 16
    rows, owner, nrows = (t.cpu() for t in route(ids.to(device), 7, bm))
    flat = ids.reshape(-1)
    seen = []
    for b in range(owner.numel()):
        if owner[b] < 0:
            if nrows[b] != 0:
                return False
            continue
        picks = rows[b * bm: b * bm + int(nrows[b])].tolist()
        if not picks or any(int(flat[p]) != int(owner[b]) for p in picks):
            return False
        seen += picks
    kept = [p for p in range(flat.numel()) if 0 <= int(flat[p]) < 7]
    return sorted(seen) == kept


if __name__ == "__main__":  # python tests/moe_cases.py DEVICE NAME... -> one JSON line
    sys.path.insert(0, sys.argv[1])
    device, names = sys.argv[2], sys.argv[3:]
    cases = [check_case(n, device) for n in names]
    print(json.dumps({"decode": check_decode(device), "route": check_route(device), "cases": cases}))
