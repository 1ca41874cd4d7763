"""The two unfused sparse-MLA decodes, with sparse_decode.sparse_mla_decode's arguments and semantics (issue 27).

  reference_sparse_decode  the oracle: kvcache.read_fp8_ds_mla (the report's corrected reader), then fp32 attention
                           over the bf16-rounded latent (torch only).
  gather_sparse_decode     the two-step path it replaces: the Triton gather kernel writes fp32 latents, torch runs
                           the attention in bf16 (584 + 2048 + 1024 bytes moved per selected token, not 584).

Both turn each segment into dense [B, K] rows first; a ragged row (indptr) costs one host sync for its widest row,
so neither is for a captured graph with ragged indices (the fused kernel is).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import kvcache

Reader = Callable[..., torch.Tensor]


def _dense(indices, lengths, indptr, batch: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(slots [B, K] int64, in_row [B, K] bool) from either index form."""
    if indptr is not None:
        indptr = indptr.to(device=device, dtype=torch.int64)
        counts = indptr[1:] - indptr[:-1]
        width = int(counts.max()) if batch else 0
        at = indptr[:-1, None] + torch.arange(width, device=device)[None, :]
        in_row = torch.arange(width, device=device)[None, :] < counts[:, None]
        flat = indices.reshape(-1).to(device=device, dtype=torch.int64)
        slots = flat[at.clamp(max=max(flat.numel() - 1, 0))] if flat.numel() else torch.full_like(at, -1)
        return torch.where(in_row, slots, -1), in_row
    slots = indices.to(device=device, dtype=torch.int64)
    in_row = torch.ones_like(slots, dtype=torch.bool)
    if lengths is not None:
        in_row = torch.arange(slots.shape[1], device=device)[None, :] < lengths.to(device)[:, None]
    return slots, in_row


def _latents(reader: Reader, cache, indices, lengths, indptr, batch, fnuz):
    """Latents [B, K, 512] fp32 (zero where not valid) and the valid mask [B, K]."""
    slots, in_row = _dense(indices, lengths, indptr, batch, cache.device)
    rows = cache.shape[0] * cache.shape[1]
    valid = in_row & (slots >= 0) & (slots < rows)
    safe = torch.where(valid, slots, 0).reshape(-1)
    latents = reader(cache, safe, cache.shape[1], fnuz).reshape(*slots.shape, 512)
    return torch.where(valid[..., None], latents, 0.0), valid


def _segments(reader, cache, indices, extra_cache, extra_indices, batch, fnuz, extra_fnuz, lengths, extra_lengths,
              indptr, extra_indptr):
    latents, valid = _latents(reader, cache, indices, lengths, indptr, batch, fnuz)
    if extra_cache is not None:
        more, more_valid = _latents(reader, extra_cache, extra_indices, extra_lengths, extra_indptr, batch,
                                    extra_fnuz)
        latents, valid = torch.cat([latents, more], 1), torch.cat([valid, more_valid], 1)
    return latents, valid


def _attention(q, latents, valid, softmax_scale, attn_sink, dtype: torch.dtype):
    """Softmax attention of q [B, H, 512] over latents [B, K, 512] (keys and values) in `dtype` products with an
    fp32 softmax; FlashMLA's sink, empty-row and lse rules."""
    scores = torch.einsum("bhd,bkd->bhk", q.to(dtype), latents.to(dtype)).float() * softmax_scale
    scores = torch.where(valid[:, None, :], scores, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # -inf for a row with no valid slot
    empty = ~valid.any(dim=1)[:, None].expand_as(lse)
    weights = torch.exp(scores - torch.where(empty, 0.0, lse)[..., None])
    out = torch.einsum("bhk,bkd->bhd", weights.to(dtype), latents.to(dtype)).float()
    lse = torch.where(empty, float("inf"), lse)
    if attn_sink is not None:
        out = out * torch.sigmoid(lse - attn_sink.float()[None, :])[..., None]  # exp(lse) / (exp(lse) + exp(sink))
    return torch.where(empty[..., None], 0.0, out), lse


def _decode(reader: Reader, dtype: torch.dtype, q, cache, indices, *, extra_cache=None, extra_indices=None,
            softmax_scale, attn_sink=None, block_size=None, fnuz=False, extra_fnuz=False, lengths=None,
            extra_lengths=None, indptr=None, extra_indptr=None, out=None, lse=None, **_tuning):
    if block_size is not None and block_size != cache.shape[1]:
        raise ValueError(f"block_size {block_size} disagrees with the cache view's {cache.shape[1]} tokens a block")
    latents, valid = _segments(reader, cache, indices, extra_cache, extra_indices, q.shape[0], fnuz, extra_fnuz,
                               lengths, extra_lengths, indptr, extra_indptr)
    got, got_lse = _attention(q, latents, valid, softmax_scale, attn_sink, dtype)
    if out is None:
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    if lse is None:
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    out.copy_(got)
    lse.copy_(got_lse)
    return out, lse


def _bf16_rounded(cache, slots, block_size, fnuz):
    return kvcache.read_fp8_ds_mla(cache, slots, block_size, fnuz).to(torch.bfloat16).float()


def reference_sparse_decode(q, cache, indices, **kwargs):
    """The oracle: the reference reader, latents rounded to bf16, attention in fp32."""
    return _decode(_bf16_rounded, torch.float32, q, cache, indices, **kwargs)


def _triton_gather(cache, slots, block_size, fnuz):
    from .kvcache_triton import read_fp8_ds_mla_triton

    return read_fp8_ds_mla_triton(cache, slots, block_size, fnuz)


def gather_sparse_decode(q, cache, indices, **kwargs):
    """The two-step path: the Triton gather kernel, then torch attention with bf16 products."""
    return _decode(_triton_gather, torch.bfloat16, q, cache, indices, **kwargs)
