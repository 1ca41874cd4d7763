"""The two lowest rungs of alignment (issue 15, report §15.3), usable from a job and from tests (torch only).

  cache round trip   k written into the block-packed fp8_ds_mla cache and read back must equal
                     dequantize(quantize(k)) bit for bit (kvcache.py's writer and the reader under test).
  one-token attention one decode query over the tokens read back from that cache, compared with the same attention
                     over the bf16 latent (no FP8): what FP8 costs is a cosine of about 0.9995; a reader that takes
                     the wrong bytes (kvcache.py's two test doubles) reads scales from data and garbage as RoPE.

The attention is MLA's absorbed decode form: every cached token's 512-value latent (448 NoPE + 64 RoPE) is both
the key and the value, a query per head has 512 values, softmax(q . k * scale) weights the latents.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from . import kvcache

Reader = Callable[..., torch.Tensor]
LATENT = kvcache.NOPE_DIM + kvcache.ROPE_DIM  # 512


def _latents(n_tokens: int, seed: int, device: str) -> torch.Tensor:
    """Latents shaped like a real model's: NoPE groups of different magnitudes (so the per-64 scales differ)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    k = torch.randn(n_tokens, LATENT, generator=generator)
    group_scale = torch.exp2(torch.randint(-6, 4, (n_tokens, LATENT // kvcache.GROUP), generator=generator).float())
    return (k * group_scale.repeat_interleave(kvcache.GROUP, dim=1)).to(device)


def _cache_with(k: torch.Tensor, block_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k written at scattered slots of a cache whose blocks are padded apart, as vLLM allocates them: a reader
    that ignores the stride or the packing reads the wrong bytes."""
    n = k.shape[0]
    num_blocks = -(-n // block_size) * 2 + 1
    generator = torch.Generator(device="cpu").manual_seed(seed + 1)
    slots = torch.randperm(num_blocks * block_size, generator=generator)[:n].to(k.device)
    cache = kvcache.make_cache(num_blocks, block_size, device=k.device, fill=None)
    kvcache.write_fp8_ds_mla(k, cache, slots, block_size)
    return cache, slots


def cache_round_trip(reader: Reader = kvcache.read_fp8_ds_mla, n_tokens: int = 192, block_size: int = 64,
                     seed: int = 0, device: str = "cpu") -> dict:
    """Write n tokens, read them back with `reader`: exact means equal to dequantize(quantize(k)) bit for bit."""
    k = _latents(n_tokens, seed, device)
    cache, slots = _cache_with(k, block_size, seed)
    expected = kvcache.dequantize(*kvcache.quantize(k))
    got = reader(cache, slots, block_size)
    finite = bool(torch.isfinite(got).all())
    diff = (got - expected).abs()
    max_abs = float(diff.max()) if finite else float("inf")
    return {"rung": "cache", "reader": getattr(reader, "__name__", str(reader)), "tokens": n_tokens,
            "exact": bool(finite and torch.equal(got, expected)), "max_abs": max_abs, "finite": finite}


def attention(q: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
    """One decode token's MLA attention: q [heads, 512] over latents [n, 512] (keys and values), float32 math."""
    scale = 1.0 / math.sqrt(LATENT)
    scores = (q.float() @ latents.float().T) * scale
    return torch.softmax(scores, dim=-1) @ latents.float()


def one_token_attention(reader: Reader = kvcache.read_fp8_ds_mla, n_tokens: int = 192, heads: int = 16,
                        block_size: int = 64, seed: int = 0, device: str = "cpu") -> dict:
    """The attention over what `reader` reads from the fp8_ds_mla cache vs the same attention over the bf16 latents:
    cosine (over every head's output), max abs and relative L2 difference."""
    k = _latents(n_tokens, seed, device)
    cache, slots = _cache_with(k, block_size, seed)
    generator = torch.Generator(device="cpu").manual_seed(seed + 2)
    q = (torch.randn(heads, LATENT, generator=generator) * 0.05).to(device).to(torch.bfloat16)
    reference = attention(q, k.to(torch.bfloat16))
    got = attention(q, reader(cache, slots, block_size))
    return {"rung": "attention", "reader": getattr(reader, "__name__", str(reader)), "tokens": n_tokens,
            "heads": heads, **difference(got, reference)}


def difference(got: torch.Tensor, reference: torch.Tensor) -> dict:
    """Cosine, max abs and relative L2 of two tensors, flattened; non-finite values give a cosine of -1."""
    a, b = got.double().flatten(), reference.double().flatten()
    finite = bool(torch.isfinite(a).all())
    if not finite:
        return {"cosine": -1.0, "max_abs": float("inf"), "rel_l2": float("inf"), "finite": False}
    cosine = float(a @ b / (a.norm() * b.norm()).clamp(min=1e-300))
    return {"cosine": cosine, "max_abs": float((a - b).abs().max()),
            "rel_l2": float((a - b).norm() / b.norm().clamp(min=1e-300)), "finite": True}


READERS: dict[str, Reader] = {"reference": kvcache.read_fp8_ds_mla,
                              "token-interleaved": kvcache.read_token_interleaved,
                              "contiguous-first": kvcache.read_contiguous_first}


def rungs(reader: str = "reference", device: str = "cpu") -> dict:
    """Both lower rungs with one of the readers (by name), as the align job records them."""
    chosen = READERS[reader]
    return {"cache": cache_round_trip(chosen, device=device), "attention": one_token_attention(chosen, device=device)}
