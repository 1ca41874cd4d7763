"""Fault injection for tests only: DSV4_FAULT=<name>, refused unless DSV4_TESTING=1 is set too.

  bos-after-first  every token after the first becomes BOS (J11: prefill right, decode collapsed)
  repeat-loop      from token 4 on, the same token forever
  nan-hidden       NaN written into the model's hidden state by a forward hook (real engine path)
  decode-exception an exception raised during generation
  hang             generation never returns (until the scheduler's time limit)
Serve runs (mode: serve):
  server-kill               the vLLM server is SIGKILLed once half the requests were sent (a server dying mid-load)
  bos-under-concurrency:N   the first request sent while N or more were streaming has its ids collapse to BOS after
                            the first token (the report's batch=8 failures: only under concurrency)
  server-leak:MIB           the server process allocates MIB more every memory interval (real, resident memory)
Align runs (mode: align):
  perturb-layer:K:SCALE     noise of relative size SCALE added to decoder layer K's residual stream in the engine
                            (the reference untouched): alignment must name layer K, exactly
  mla-reader:NAME           the lower rungs read the fp8_ds_mla cache with a wrong reader (token-interleaved,
                            contiguous-first: kvcache.py's test doubles)
DSV4_FAULT_EXIT0=1 makes the probe exit 0 whatever it judged (a script that swallows failures: a false green).
"""

from __future__ import annotations

import os

FAULTS = ("bos-after-first", "repeat-loop", "nan-hidden", "decode-exception", "hang")
SERVE_FAULTS = ("server-kill", "bos-under-concurrency", "server-leak")  # the last two take :<number>
ALIGN_FAULTS = ("perturb-layer", "mla-reader")  # perturb-layer:K:SCALE, mla-reader:NAME


class FaultRefused(RuntimeError):
    pass


def active() -> str | None:
    fault = os.environ.get("DSV4_FAULT") or None
    if fault is None:
        return None
    if os.environ.get("DSV4_TESTING") != "1":
        raise FaultRefused(f"DSV4_FAULT={fault} is for tests only: refused without DSV4_TESTING=1")
    if fault not in FAULTS and not serve_fault_ok(fault) and not align_fault_ok(fault):
        raise FaultRefused(f"unknown DSV4_FAULT {fault!r}; known: {', '.join(FAULTS + SERVE_FAULTS + ALIGN_FAULTS)}")
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


# ---- serve runs --------------------------------------------------------------------------------------------------


def serve_fault_ok(fault: str) -> bool:
    name, _, value = fault.partition(":")
    if name == "server-kill":
        return not value
    return name in SERVE_FAULTS and fault_number(fault) is not None


def fault_number(fault: str | None) -> float | None:
    """The N of `name:N` (a positive number), else None."""
    if not fault or ":" not in fault:
        return None
    try:
        value = float(fault.partition(":")[2])
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None


def kill_point(fault: str | None, n_prompts: int) -> int | None:
    """server-kill: after how many sent requests the server dies (half of them, at least one)."""
    return max(1, n_prompts // 2) if fault == "server-kill" else None


def bos_under_concurrency(fault: str | None, records: list[dict], in_flight: dict[int, int], bos_id: int) -> int | None:
    """Collapse the ids of the first measured request sent while N or more were streaming, as the probe's
    bos-after-first does; return its index (None when the fault is off or concurrency never reached N)."""
    if not fault or not fault.startswith("bos-under-concurrency:"):
        return None
    threshold = fault_number(fault) or float("inf")
    for record in records:
        ids = record.get("token_ids")
        if record.get("warmup") or not ids or len(ids) < 2 or in_flight.get(record["index"], 0) < threshold:
            continue
        record["token_ids"] = corrupt_ids("bos-after-first", ids, bos_id)
        return record["index"]
    return None


def server_leak(fault: str | None, interval_s: float) -> str | None:
    """server-leak:MIB, run inside the server process: a thread that keeps MIB more resident every interval."""
    mib = fault_number(fault) if fault and fault.startswith("server-leak:") else None
    if mib is None:
        return None
    import threading
    import time

    kept = []

    def grow() -> None:
        while True:
            kept.append(bytearray(b"\x01") * int(mib * 2 ** 20))  # written, so resident: not lazily zero pages
            time.sleep(interval_s)

    threading.Thread(target=grow, name="dsv4-leak", daemon=True).start()
    return f"server-leak: +{mib:g} MiB every {interval_s:g}s"


# ---- align runs --------------------------------------------------------------------------------------------------

MLA_READERS = ("reference", "token-interleaved", "contiguous-first")


def align_fault_ok(fault: str) -> bool:
    name, _, value = fault.partition(":")
    if name == "mla-reader":
        return value in MLA_READERS
    return name == "perturb-layer" and perturb_layer(fault) is not None


def perturb_layer(fault: str | None) -> tuple[int, float] | None:
    """perturb-layer:K:SCALE -> (K, SCALE): a layer index and a positive, finite relative size; else None."""
    if not fault or not fault.startswith("perturb-layer:"):
        return None
    parts = fault.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or len(parts[1]) > 6:
        return None
    try:
        scale = float(parts[2])
    except ValueError:
        return None
    return (int(parts[1]), scale) if 0 < scale < float("inf") else None


def mla_reader(fault: str | None) -> str | None:
    """mla-reader:NAME -> NAME (which fp8_ds_mla reader the align rungs use), else None."""
    if fault and fault.startswith("mla-reader:") and fault.partition(":")[2] in MLA_READERS:
        return fault.partition(":")[2]
    return None
