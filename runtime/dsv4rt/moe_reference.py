"""The emulation path the W4A16 kernel is held against (torch only), and the tolerance the tests hold.

`moe_reference` does what vLLM's MXFP4 emulation backend does (OCP_MXQuantizationEmulationTritonExperts:
dequantize, then a bf16 fused MoE): experts dequantized by `mxfp4.dequantize_mxfp4` to bf16 (all local experts, as
vLLM does, or only the routed ones), bf16 operands with float32 accumulation, and bf16 results where vLLM's path keeps
bf16: gate/up, the SwiGLU output, each pick's weighted product; the picks summed in float32, then bf16.

`error_bound` is the elementwise tolerance |kernel - reference| <= bound, derived, not fitted. The kernel keeps gate
and up in float32 where the reference rounds them to bf16 (2**-9 relative each). For the clamped g <= limit that
moves silu(g) * u by at most 2**-9 |u| (|g| |silu'(g)| + |silu(g)|) <= 2**-9 |u| (2.1 |g| + 0.6) (|silu'| <= 1.1,
|silu(g)| <= max(|g|, 0.28)); both sides round h (2**-9 |h| each, |h| <= |u| (|g| + 0.28)); so h moves by at most
2**-7 |u| (|g| + 1). Each pick's product and y are rounded on both sides (2**-9 each). Through the second GEMM's
absolute weights that totals about 2**-6 * M, M = sum_j |w_j| (|W2_e| @ (|u_j| (|g_j| + 1))); the bound is 2**-5 * M
(2x slack, which also covers float32 accumulation order). The tests show it is tight enough to catch a wrong kernel:
nibbles swapped, GPT-OSS's alpha, a scale byte off by one, routing weights dropped all break it.
"""

from __future__ import annotations

import torch

from .mxfp4 import dequantize_mxfp4, swiglu_clamp


def _bf16_matmul(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """a @ w.T with bf16 operands, float32 accumulation, a bf16 result (the CPU computes it in float32, exactly
    the products bf16 operands make)."""
    if a.device.type == "cpu":
        return (a.float() @ w.float().T).bfloat16()
    return a.bfloat16() @ w.bfloat16().T


def _kept_experts(topk_ids: torch.Tensor, experts: int) -> list[int]:
    ids = topk_ids[(topk_ids >= 0) & (topk_ids < experts)]
    return sorted(int(e) for e in torch.unique(ids).tolist())


def moe_reference(x, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights, *, alpha: float = 1.0,
                  limit: float | None = 10.0, dequantize: str = "all", with_bound: bool = False):
    """y (bf16) as vLLM's emulation computes it; dequantize="routed" dequantizes only the experts that have picks.
    with_bound=True returns (y, error_bound) (float32 bound, see the module docstring)."""
    experts, two_i, _ = w13.shape
    inter = two_i // 2
    kept = _kept_experts(topk_ids, experts)
    if dequantize == "all":
        w13b = dequantize_mxfp4(w13, w13_scale).bfloat16()
        w2b = dequantize_mxfp4(w2, w2_scale).bfloat16()
        slot = {e: e for e in kept}
    elif dequantize == "routed":
        index = torch.tensor(kept, dtype=torch.long, device=w13.device)
        w13b = dequantize_mxfp4(w13[index], w13_scale[index]).bfloat16()
        w2b = dequantize_mxfp4(w2[index], w2_scale[index]).bfloat16()
        slot = {e: i for i, e in enumerate(kept)}
    else:
        raise ValueError(f"dequantize must be 'all' or 'routed', not {dequantize!r}")
    clamp = float("inf") if limit is None else float(limit)
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    bound = torch.zeros_like(y) if with_bound else None
    for e in kept:
        tok, j = torch.nonzero(topk_ids == e, as_tuple=True)
        gate_up = _bf16_matmul(x[tok], w13b[slot[e]])
        gate, up = gate_up[:, :inter].float(), gate_up[:, inter:].float()
        h = swiglu_clamp(gate, up, alpha, clamp).bfloat16()
        weight = topk_weights[tok, j].float()[:, None]
        y.index_add_(0, tok, (_bf16_matmul(h, w2b[slot[e]]).float() * weight).bfloat16().float())
        if bound is not None:
            g, u = gate.clamp(max=clamp), up.clamp(-clamp, clamp)
            reach = (u.abs() * (g.abs() + 1.0)) @ w2b[slot[e]].float().abs().T
            bound.index_add_(0, tok, 2.0**-5 * weight.abs() * reach)
    y = y.bfloat16()
    return (y, bound) if with_bound else y
