"""Forward hooks that capture the residual stream after every decoder layer, in vLLM's workers and in HF.

What is compared is the same quantity on both sides: the residual stream after decoder layer i (HF's layer output;
in vLLM the pair a layer returns, `hidden + residual`, because vLLM defers the residual add into the next layer's
fused RMSNorm) and the final norm's output. HF's `output_hidden_states` tuple holds the same numbers shifted by one:
index 0 is the embeddings, index i (1 <= i < L) the output of layer i-1, and index L the final norm's output
(not layer L-1's raw stream), which is why both sides are read through hooks here instead.

vLLM flattens the tokens of a batch into one [num_tokens, hidden] tensor; the capture is taken one prompt at a
time, so the first forward after arming is that prompt's prefill and its rows are the prompt's positions. Under
tensor parallelism every rank holds the full hidden state after the row-parallel all-reduce inside the layer:
each rank returns its own capture and rank 0's is the one kept.
"""

from __future__ import annotations

import functools
from typing import Any

NORM = "norm"


def kept_positions(n_tokens: int, keep: int) -> list[int]:
    """The first `keep` and last `keep` positions of a prefill (all of them when it is short): bounded capture."""
    if n_tokens <= 2 * keep:
        return list(range(n_tokens))
    return list(range(keep)) + list(range(n_tokens - keep, n_tokens))


def decoder_layers(model) -> list[tuple[int, Any]]:
    """(layer index, module) of the model's decoder layers: the first ModuleList named `layers`, without the
    placeholders pipeline parallelism leaves for other ranks' layers."""
    import torch

    for name, module in model.named_modules():
        if name.split(".")[-1] == "layers" and isinstance(module, torch.nn.ModuleList):
            return [(i, layer) for i, layer in enumerate(module) if type(layer).__name__ != "PPMissingLayer"]
    raise RuntimeError("no decoder `layers` ModuleList found in the model")


def final_norm(model):
    """The final norm after the decoder layers (`model.norm` in vLLM and HF), or None."""
    for name, module in model.named_modules():
        if name.endswith("model.norm") or name == "norm":
            return module
    return None


def stream_of(output) -> Any:
    """The residual stream a layer's output stands for: vLLM's (hidden, residual) pair summed, HF's tensor (or the
    first element of its tuple)."""
    import torch

    if torch.is_tensor(output):
        return output
    if isinstance(output, tuple) and len(output) == 2 and all(torch.is_tensor(o) for o in output):
        return output[0] + output[1]
    return output[0]


def perturbed(output, index: int, scale: float):
    """The layer's output with noise of relative size `scale` added to its residual stream, per token (fault
    injection): a cosine of about 1/sqrt(1 + scale^2) at this layer. Not a plain scaling: RMSNorm would undo it."""
    import torch

    hidden = output[0] if isinstance(output, tuple) else output
    stream = stream_of(output)
    generator = torch.Generator(device="cpu").manual_seed(1000 + index)
    noise = torch.randn(hidden.shape, generator=generator, dtype=torch.float32).to(hidden.device)
    noise = noise / noise.norm(dim=-1, keepdim=True).clamp(min=1e-30)
    noise = noise * stream.float().norm(dim=-1, keepdim=True) * scale
    changed = hidden + noise.to(hidden.dtype)
    return (changed, *output[1:]) if isinstance(output, tuple) else changed


def _record(state: dict, key: str, output) -> None:
    if not state["armed"] or key in state["captured"]:
        return  # decode steps after the prefill, and anything outside a capture window
    stream = stream_of(output)
    if isinstance(output, tuple) and key == NORM:
        stream = output[0]  # vLLM's fused norm returns (normed, residual): the normed output is the norm's
    stream = stream.reshape(-1, stream.shape[-1])
    state["n_tokens"].setdefault(key, int(stream.shape[0]))
    rows = kept_positions(int(stream.shape[0]), state["keep"])
    state["captured"][key] = stream[rows].detach().float().cpu().clone()


def _layer_hook(state: dict, index: int, module, inputs, output):
    perturb = state.get("perturb")
    if perturb is not None and perturb[0] == index:
        output = perturbed(output, index, perturb[1])
        state["perturbed"] = state.get("perturbed", 0) + 1  # the job logs the fault once it was applied
    _record(state, f"layer.{index}", output)
    return output


def _norm_hook(state: dict, module, inputs, output):
    _record(state, NORM, output)
    return output


def install(model, keep: int, perturb: tuple[int, float] | None = None, attr: str = "_dsv4_align") -> list[int]:
    """Hook every decoder layer and the final norm of `model`; the state lives on the model (a worker keeps it
    between `apply_model` calls). Returns the layer indices hooked."""
    state = {"armed": False, "captured": {}, "n_tokens": {}, "keep": keep, "perturb": perturb}
    setattr(model, attr, state)
    layers = decoder_layers(model)
    for index, layer in layers:
        layer.register_forward_hook(functools.partial(_layer_hook, state, index))
    norm = final_norm(model)
    if norm is not None:
        norm.register_forward_hook(functools.partial(_norm_hook, state))
    return [index for index, _ in layers]


def arm(model, attr: str = "_dsv4_align") -> bool:
    state = getattr(model, attr)
    state.update(armed=True, captured={}, n_tokens={})
    return True


def take(model, attr: str = "_dsv4_align") -> dict[str, Any]:
    """Disarm and return what the last armed forward captured: {key: float32 CPU tensor}, and the token counts."""
    state = getattr(model, attr)
    state["armed"] = False
    return {"captured": dict(state["captured"]), "n_tokens": dict(state["n_tokens"]), "keep": state["keep"],
            "perturbed": state.get("perturbed", 0)}
