"""The reference side of `reference: hf`: Hugging Face transformers on CPU in float32, the same checkpoint and
the same prompt token ids as the engine, captured through the same hooks (align_hooks.py)."""

from __future__ import annotations

from typing import Any

from . import align_hooks


def load(model_path: str, trust_remote_code: bool):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                 trust_remote_code=trust_remote_code, local_files_only=True)
    return model.to("cpu").eval()


def _top(logits, k: int) -> list[list[float]]:
    import torch

    logprobs = torch.log_softmax(logits.double(), dim=-1)
    values, ids = torch.topk(logprobs, k)
    return [[int(i), float(v)] for i, v in zip(ids, values)]


def capture_prompt(model, ids: list[int], max_tokens: int, topk: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One prompt: the prefill's hooked streams, then a greedy continuation of `max_tokens` (argmax of the raw
    logits, no EOS stop: vLLM's ignore_eos) with each step's top-k logprobs."""
    import torch

    align_hooks.arm(model)
    greedy_ids: list[int] = []
    greedy_top: list[list[list[float]]] = []
    captured: dict[str, Any] = {}
    with torch.no_grad():
        past, step_input = None, torch.tensor([list(ids)])
        for _ in range(max_tokens):
            out = model(input_ids=step_input, past_key_values=past, use_cache=True)
            if not captured:
                captured = align_hooks.take(model)  # the prefill only; decode steps run disarmed
            past = out.past_key_values
            logits = out.logits[0, -1]
            greedy_top.append(_top(logits, topk))
            greedy_ids.append(int(torch.argmax(logits)))
            step_input = torch.tensor([[greedy_ids[-1]]])
    return captured, {"greedy_ids": greedy_ids, "greedy_top": greedy_top}


def perplexity(model, ids: list[int]) -> dict[str, Any]:
    """exp(mean negative log-likelihood) of ids[1:] given the prefix: what vLLM's prompt_logprobs give."""
    import math

    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    logprobs = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    nll = -float(logprobs.mean())
    return {"tokens": len(ids), "mean_nll": nll, "ppl": math.exp(nll) if nll < 700 else float("inf")}
