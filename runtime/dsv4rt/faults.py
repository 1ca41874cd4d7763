"""Fault injection for tests only: DSV4_FAULT=<name>, refused unless DSV4_TESTING=1 is set too.

  bos-after-first  every token after the first becomes BOS (J11: prefill right, decode collapsed)
  repeat-loop      from token 4 on, the same token forever
  nan-hidden       NaN written into the model's hidden state by a forward hook (real engine path)
  decode-exception an exception raised during generation
  hang             generation never returns (until the scheduler's time limit)
DSV4_FAULT_EXIT0=1 makes the probe exit 0 whatever it judged (a script that swallows failures: a false green).
"""

from __future__ import annotations

import os

FAULTS = ("bos-after-first", "repeat-loop", "nan-hidden", "decode-exception", "hang")


class FaultRefused(RuntimeError):
    pass


def active() -> str | None:
    fault = os.environ.get("DSV4_FAULT") or None
    if fault is None:
        return None
    if os.environ.get("DSV4_TESTING") != "1":
        raise FaultRefused(f"DSV4_FAULT={fault} is for tests only: refused without DSV4_TESTING=1")
    if fault not in FAULTS:
        raise FaultRefused(f"unknown DSV4_FAULT {fault!r}; known: {', '.join(FAULTS)}")
    return fault


def force_exit0() -> bool:
    return os.environ.get("DSV4_FAULT_EXIT0") == "1" and os.environ.get("DSV4_TESTING") == "1"


def corrupt_ids(fault: str | None, ids: list[int], bos_id: int) -> list[int]:
    """The output-side faults: what the verdict must catch in the probe's real output format."""
    if fault == "bos-after-first" and ids:
        return ids[:1] + [bos_id] * (len(ids) - 1)
    if fault == "repeat-loop" and len(ids) > 4:
        return ids[:4] + [ids[3]] * (len(ids) - 4)
    return ids


def nan_hook(model) -> str:
    """Make every decoder layer's output NaN (runs inside the engine's worker via LLM.apply_model)."""
    import torch

    def poison(module, inputs, output):
        if isinstance(output, tuple):
            return tuple(o * float("nan") if torch.is_tensor(o) and o.is_floating_point() else o for o in output)
        return output * float("nan")

    layers = [m for name, m in model.named_modules() if name.endswith("layers.0")]
    for layer in layers:
        layer.register_forward_hook(poison)
    return f"poisoned {len(layers)} layer(s)"
