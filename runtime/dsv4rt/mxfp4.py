"""MXFP4 expert weights and DeepSeek V4's clamped SwiGLU: small references for the emulation path (torch only).

MXFP4: E2M1 codes, two per byte (low nibble = even element, high nibble = odd element), one UE8M0 scale byte per
32 elements (value = 2^(byte - 127)). Expert weights: `w13_weight [E, 2I, H/2] uint8`, `w13_weight_scale [E, 2I,
H/32] uint8`.
"""

from __future__ import annotations

import torch

# E2M1 code -> value; codes 8-15 are the negatives of 0-7.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
MX_BLOCK = 32


def e2m1_table(device: torch.device | str = "cpu") -> torch.Tensor:
    values = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    return torch.cat([values, -values])


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """packed uint8 [..., K/2], scales uint8 [..., K/32] -> float32 [..., K]."""
    if packed.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise TypeError("packed codes and scales must be uint8")
    k = packed.shape[-1] * 2
    if scales.shape[-1] * MX_BLOCK != k:
        raise ValueError(f"{scales.shape[-1]} scales cannot cover {k} values (one per {MX_BLOCK})")
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(*packed.shape[:-1], k)
    values = e2m1_table(packed.device)[codes.long()]
    return values * torch.exp2(scales.float() - 127.0).repeat_interleave(MX_BLOCK, dim=-1)


def quantize_mxfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A round-to-nearest MXFP4 encoder for tests: scale = 2^ceil(log2(absmax / 6)) per 32 values."""
    k = x.shape[-1]
    blocks = x.float().reshape(*x.shape[:-1], k // MX_BLOCK, MX_BLOCK)
    absmax = blocks.abs().amax(-1).clamp(min=2.0**-126)
    exponent = torch.ceil(torch.log2(absmax / 6.0)).clamp(-127, 127)
    scaled = blocks / torch.exp2(exponent)[..., None]
    table = e2m1_table(x.device)[:8]
    nearest = (scaled.abs()[..., None] - table).abs().argmin(-1)
    codes = (nearest + 8 * (scaled < 0)).to(torch.uint8).reshape(*x.shape[:-1], k)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed, (exponent + 127).to(torch.uint8)


def swiglu_clamp(gate: torch.Tensor, up: torch.Tensor, alpha: float = 1.0, limit: float = 10.0) -> torch.Tensor:
    """DeepSeek V4's expert activation (model config: alpha 1.0, limit 10.0), as vLLM's reference computes it:
    gate = clamp(gate, max=limit); up = clamp(up, -limit, limit); out = gate * sigmoid(alpha * gate) * up.
    The report's first gfx936 fallback used GPT-OSS's alpha 1.702 (§6.6): a different function."""
    gate = gate.clamp(max=limit)
    up = up.clamp(-limit, limit)
    return gate * torch.sigmoid(alpha * gate) * up
