"""DeepSeek V4's MXFP4 MoE experts as a W4A16 Triton grouped GEMM (issue 28).

`mxfp4_moe(x, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights, alpha=1.0, limit=10.0) -> y` computes, per token
t, sum over its picks j of topk_weights[t, j] * W2[e] @ swiglu_clamp(W13[e] @ x[t]) with e = topk_ids[t, j], the
weights in the checkpoint's MXFP4 layout (`mxfp4.py`): w13 [E, 2I, H/2] uint8 (gate rows, then up rows), w2
[E, H, I/2], one UE8M0 byte per 32 values ([E, 2I, H/32], [E, H, I/32]). Ids outside [0, E) (vLLM's -1 for an expert
on another rank) contribute nothing; ids are not otherwise checked (that would need a device sync).

Four launches, no host sync (so it can be captured in a CUDA graph): one program groups the picks by expert (blocks
of BM picks of one expert); the first GEMM reads only the routed experts' packed gate/up rows, decodes them in
registers (`moe_w4a16_kernels`), accumulates in float32 and applies the clamped SwiGLU in its epilogue (h, bf16);
the second reads the routed experts' w2 rows, multiplies by the routing weight and writes float32 per pick; the
last sums each token's picks in pick order (deterministic) and rounds to bf16. x must be bf16; y is bf16.
"""

from __future__ import annotations

import torch
import triton

from .moe_w4a16_kernels import (_combine_kernel, _decode_kernel, _expert_gemm_kernel, _route_kernel)


def default_config(tokens: int, topk: int, experts: int) -> dict:
    """Tile sizes and launch settings for one call; `mxfp4_moe(config=...)` overrides any of them. Chosen from the
    H200 sweep of benchmarks/mxfp4_moe.py (docs/kernels.md). BM follows the picks an expert gets on average, so
    one block of rows usually holds all of them (each extra block decodes that expert's weights again); with
    BM 64, Triton 3.6 fails to compile BN >= 32 (TritonGPUOptimizeDotOperands), hence BN 16 there. DECODE 1 (bf16
    decode) is GPU only: the interpreter always decodes in float32."""
    per_expert = tokens * topk / max(experts, 1)
    bm = 16 if per_expert <= 16 else 32 if per_expert <= 32 else 64
    bn = 32 if per_expert <= 2 else 16 if bm == 64 else 64
    return {"BM": bm, "BN1": bn, "BN2": bn, "BK": 128, "JOIN": True, "SWAP": False, "DECODE": DEFAULT_DECODE,
            "PREFETCH": False, "warps": 4, "stages": 3}


DEFAULT_DECODE = 1  # DECODE 3 (float16 words, per-group scales after the dot) measured 4x slower on the H200
H_BOUNDED = 160.0  # |h| <= limit**2 < float16's 65504 with a clamp this tight: the second GEMM converts h as is


def _tile_flags(cfg: dict, interpret: bool, *weights: torch.Tensor) -> dict:
    """The kernel's constexpr flags. DECODE 3 reads the packed rows as 32-bit words and multiplies in float16 with
    the scales applied per group after the dot; it needs 4-byte aligned weights and takes no SWAP, PREFETCH or split
    K order (JOIN False): a config asking for those (or unaligned weights) gets the bf16 decode (DECODE 1) instead."""
    decode = cfg["DECODE"]
    if decode == 3 and (cfg["SWAP"] or cfg["PREFETCH"] or not cfg["JOIN"] or any(w.data_ptr() % 4 for w in weights)):
        decode = 1
    return {"JOIN": cfg["JOIN"], "SWAP": cfg["SWAP"] and decode != 3, "DECODE": decode, "PREFETCH": cfg["PREFETCH"],
            "DOT_F32": interpret}


def _check(x, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights) -> tuple[int, int, int, int, int]:
    if x.dim() != 2 or x.dtype != torch.bfloat16:
        raise ValueError(f"x must be bf16 [T, hidden], got {tuple(x.shape)} {x.dtype}")
    tokens, hidden = x.shape
    if w13.dim() != 3 or w2.dim() != 3:
        raise ValueError("w13 and w2 must be [E, rows, K/2]")
    experts, two_i, _ = w13.shape
    inter = two_i // 2
    want = {"w13": (experts, 2 * inter, hidden // 2), "w13_scale": (experts, 2 * inter, hidden // 32),
            "w2": (experts, hidden, inter // 2), "w2_scale": (experts, hidden, inter // 32)}
    for name, t in (("w13", w13), ("w13_scale", w13_scale), ("w2", w2), ("w2_scale", w2_scale)):
        if tuple(t.shape) != want[name] or t.dtype != torch.uint8:
            raise ValueError(f"{name} must be uint8 {want[name]}, got {tuple(t.shape)} {t.dtype}")
        if t.stride(-1) != 1 or t.stride(-2) != t.shape[-1]:
            raise ValueError(f"{name} must be contiguous along its rows")
        if t.device != x.device:
            raise ValueError(f"{name} is on {t.device}, x on {x.device}")
    if hidden % 32 or inter % 32 or two_i % 2:
        raise ValueError(f"hidden ({hidden}) and intermediate ({inter}) must be multiples of 32")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != tokens or tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError(f"topk_ids and topk_weights must both be [{tokens}, k]")
    if topk_ids.dtype not in (torch.int32, torch.int64) or topk_ids.device != x.device:
        raise ValueError("topk_ids must be int32/int64 on x's device")
    return tokens, hidden, inter, experts, topk_ids.shape[1]


def _block_k(k: int, wanted: int) -> int:
    bk = wanted
    while k % bk:
        bk //= 2
    return bk


def route(topk_ids: torch.Tensor, experts: int, bm: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group the picks (flattened topk_ids) by expert: (rows, block_expert, block_rows), see _route_kernel."""
    ids = topk_ids.reshape(-1).to(torch.int32)
    picks = ids.numel()
    n_blocks = triton.cdiv(picks, bm) + min(experts, picks)
    e_pad = triton.next_power_of_2(max(experts, 2))
    dev = ids.device
    scratch = torch.empty(2 * e_pad + picks, dtype=torch.int32, device=dev)
    rows = torch.empty(n_blocks * bm, dtype=torch.int32, device=dev)
    block_expert = torch.empty(n_blocks, dtype=torch.int32, device=dev)
    block_rows = torch.empty(n_blocks, dtype=torch.int32, device=dev)
    _route_kernel[(1,)](ids, picks, experts, scratch, rows, block_expert, block_rows, n_blocks, BM=bm, E_PAD=e_pad,
                        CHUNK=256, BCHUNK=max(16, min(256, 8192 // e_pad)), num_warps=4)
    return rows, block_expert, block_rows


def mxfp4_moe(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
              topk_ids: torch.Tensor, topk_weights: torch.Tensor, *, alpha: float = 1.0, limit: float | None = 10.0,
              config: dict | None = None) -> torch.Tensor:
    tokens, hidden, inter, experts, topk = _check(x, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights)
    y = torch.empty((tokens, hidden), dtype=torch.bfloat16, device=x.device)
    if tokens == 0 or topk == 0:
        return y.zero_()
    cfg = {**default_config(tokens, topk, experts), **(config or {})}
    interpret = x.device.type == "cpu"  # Triton runs CPU tensors only in its interpreter: float32 dots there
    bm = cfg["BM"]
    rows, block_expert, block_rows = route(topk_ids, experts, bm)
    picks = tokens * topk
    ids = topk_ids.reshape(-1).to(torch.int32)
    weights = topk_weights.reshape(-1).to(torch.float32).contiguous()
    x = x.contiguous()
    h = torch.empty((picks, inter), dtype=torch.bfloat16, device=x.device)
    part = torch.empty((picks, hidden), dtype=torch.float32, device=x.device)
    clamp = float("inf") if limit is None else float(limit)
    launch = {"num_warps": cfg["warps"], "num_stages": cfg["stages"]}
    tile = _tile_flags(cfg, interpret, w13, w2)
    n_blocks = block_expert.numel()
    bk1, bk2 = _block_k(hidden, cfg["BK"]), _block_k(inter, cfg["BK"])
    _expert_gemm_kernel[(n_blocks, triton.cdiv(inter, cfg["BN1"]))](
        x, w13, w13_scale, h.view(torch.int16), rows, block_expert, block_rows, weights,
        inter, hidden, x.stride(0), w13.stride(0), w13.stride(1), w13_scale.stride(0), w13_scale.stride(1),
        h.stride(0), inter, float(alpha), clamp,
        TOPK=topk, SWIGLU=True, BM=bm, BN=cfg["BN1"], BK=bk1, NORM_A=True, **tile, **launch)
    _expert_gemm_kernel[(n_blocks, triton.cdiv(hidden, cfg["BN2"]))](
        h, w2, w2_scale, part, rows, block_expert, block_rows, weights,
        hidden, inter, h.stride(0), w2.stride(0), w2.stride(1), w2_scale.stride(0), w2_scale.stride(1),
        part.stride(0), 0, 1.0, clamp,
        TOPK=topk, SWIGLU=False, BM=bm, BN=cfg["BN2"], BK=bk2, NORM_A=not clamp <= H_BOUNDED, **tile, **launch)
    _combine_kernel[(tokens, triton.cdiv(hidden, 1024))](part, ids, y.view(torch.int16), hidden, experts, TOPK=topk,
                                                         RB=1024, num_warps=4)
    return y


def dequantize_mxfp4_triton(packed: torch.Tensor, scales: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    """The kernels' E2M1/UE8M0 decode on its own (for tests): packed uint8 [..., K/2], scales [..., K/32] ->
    float32 [..., K], to equal mxfp4.dequantize_mxfp4 bit for bit. bf16=True: the GEMM's bf16 decode (DECODE=1,
    GPU only: the interpreter's bf16 arithmetic is not trustworthy)."""
    groups = scales.shape[-1]
    if packed.shape[-1] != groups * 16 or packed.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise ValueError("packed must be uint8 [..., 16 * G] and scales uint8 [..., G]")
    p2 = packed.reshape(-1, groups * 16).contiguous()
    s2 = scales.reshape(-1, groups).contiguous()
    out = torch.empty((p2.shape[0], groups * 32), dtype=torch.float32, device=packed.device)
    rb, gb = 16, 4
    _decode_kernel[(triton.cdiv(p2.shape[0], rb), triton.cdiv(groups, gb))](p2, s2, out, p2.shape[0], groups,
                                                                           RB=rb, GB=gb, BF16=bf16)
    return out.reshape(*packed.shape[:-1], groups * 32)
