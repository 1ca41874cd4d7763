"""Capture (GPU): a torch.profiler trace of a few decode steps of a small model shaped and named like vLLM's
DeepSeek V4 modules (issue 23: real GPU traces for the profile reader's tests), gzipped.

    python3 benchmarks/profile_model_trace.py OUT.pt.trace.json.gz [--layers 2] [--batch 4] [--steps 3]

The modules carry vLLM's class names (vllm/model_executor/models/deepseek_v4.py and the layers it uses):
DeepseekV4ForCausalLM > DeepseekV4Model > DeepseekV4DecoderLayer > {RMSNorm, DeepseekV4MLAAttention,
DeepseekV4MoE > {ReplicatedLinear (the router), FusedMoE (the routed experts), DeepseekV4MLP (the shared expert)}},
so the trace's `nn.Module: <Class>_<n>` frames (with_stack) are the ones a real vLLM run would have. The maths is
plain torch (a latent attention with a low-rank KV projection through SDPA, top-k routing over 16 experts with
SiLU-and-mul experts run expert by expert, one shared expert): the kernels are the GPU's own GEMM, attention and
elementwise kernels, as a real eager decode step launches them. Prints the trace's own kernel sum by category of
module so the test can check the reader against it.
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

HIDDEN, HEADS, HEAD_DIM, KV_RANK, EXPERTS, TOP_K, MOE_INTER = 1024, 8, 64, 256, 16, 4, 512


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class ReplicatedLinear(nn.Linear):
    pass


class DeepseekV4MLAAttention(nn.Module):
    """Queries from the hidden state, keys and values from a low-rank latent (MLA's compressed KV)."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.kv_a_proj = nn.Linear(HIDDEN, KV_RANK, bias=False)
        self.kv_b_proj = nn.Linear(KV_RANK, 2 * HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        q = self.q_proj(x).view(batch, 1, HEADS, HEAD_DIM).transpose(1, 2)
        latent = torch.cat([cache, self.kv_a_proj(x)[:, None]], dim=1)  # the compressed cache plus this token
        k, v = self.kv_b_proj(latent).view(batch, -1, 2, HEADS, HEAD_DIM).unbind(2)
        out = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2))
        return self.o_proj(out.transpose(1, 2).reshape(batch, HEADS * HEAD_DIM))


class DeepseekV4MLP(nn.Module):
    """SiLU-and-mul MLP: the shared expert."""

    def __init__(self, inter: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(HIDDEN, 2 * inter, bias=False)
        self.down_proj = nn.Linear(inter, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class FusedMoE(nn.Module):
    """The routed experts, run one expert at a time over the tokens routed to it."""

    def __init__(self) -> None:
        super().__init__()
        self.w13 = nn.Parameter(torch.randn(EXPERTS, 2 * MOE_INTER, HIDDEN) * 0.02)
        self.w2 = nn.Parameter(torch.randn(EXPERTS, HIDDEN, MOE_INTER) * 0.02)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for expert in ids.unique().tolist():
            rows, slot = (ids == expert).nonzero(as_tuple=True)
            gate, up = (x[rows] @ self.w13[expert].T).chunk(2, dim=-1)
            out.index_add_(0, rows, (F.silu(gate) * up) @ self.w2[expert].T * weights[rows, slot, None])
        return out


class DeepseekV4MoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = ReplicatedLinear(HIDDEN, EXPERTS, bias=False)
        self.experts = FusedMoE()
        self.shared_experts = DeepseekV4MLP(MOE_INTER)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = F.softplus(self.gate(x)).sqrt()  # sqrtsoftplus routing
        weights, ids = scores.topk(TOP_K, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        return self.experts(x, weights, ids) * 1.5 + self.shared_experts(x)


class DeepseekV4DecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = DeepseekV4MLAAttention()
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = DeepseekV4MoE()

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class DeepseekV4Model(nn.Module):
    def __init__(self, layers: int, vocab: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, HIDDEN)
        self.layers = nn.ModuleList(DeepseekV4DecoderLayer() for _ in range(layers))
        self.norm = RMSNorm(HIDDEN)

    def forward(self, ids: torch.Tensor, caches: list[torch.Tensor]) -> torch.Tensor:
        x = self.embed_tokens(ids)
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cache)
        return self.norm(x)


class DeepseekV4ForCausalLM(nn.Module):
    def __init__(self, layers: int, vocab: int = 4096) -> None:
        super().__init__()
        self.model = DeepseekV4Model(layers, vocab)
        self.lm_head = nn.Linear(HIDDEN, vocab, bias=False)

    def forward(self, ids: torch.Tensor, caches: list[torch.Tensor]) -> torch.Tensor:
        return self.lm_head(self.model(ids, caches))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke run of the script, not a fixture
    model = DeepseekV4ForCausalLM(args.layers).to(device, torch.bfloat16).eval()
    caches = [torch.randn(args.batch, args.context, KV_RANK, device=device, dtype=torch.bfloat16)
              for _ in range(args.layers)]
    ids = torch.randint(0, 4096, (args.batch,), device=device)
    with torch.inference_mode():
        for _ in range(3):  # warm-up: cuBLAS handles, kernels chosen, outside the trace
            ids = model(ids, caches).argmax(-1)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        sync()
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                                if device == "cuda" else [])
        with torch.profiler.profile(activities=activities, with_stack=True, with_modules=True) as prof:
            for step in range(args.steps):
                with torch.profiler.record_function(f"decode_step#{step}"):
                    ids = model(ids, caches).argmax(-1)
            sync()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(args.out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    print(prof.key_averages().table(sort_by="self_device_time_total" if device == "cuda" else "cpu_time_total",
                                    row_limit=15))
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes), torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
