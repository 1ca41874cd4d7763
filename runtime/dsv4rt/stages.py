"""The stages every job shares (offline probe, serve driver, align capture): printing evidence the verdict can
trust, one flushed line at a time (`### STAGE:` markers, DSV4_* lines), the env / config / registry stages, the
engine's arguments from the spec, and one request's block as the verdict reads it. Imported by offline.py,
serve.py and align.py; imports none of them."""

from __future__ import annotations

import json
import os
import platform
import statistics
from pathlib import Path
from typing import Any

from dsv4ctl.judge import markers  # dsv4rt's __init__ puts dsv4ctl on sys.path

from . import faults

EXIT_NOT_COHERENT = 2


def say(line: str = "") -> None:
    print(line, flush=True)


def stage(name: str) -> None:
    say(markers.stage_line(name))


def engine_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    model = spec["model"]
    kwargs: dict[str, Any] = {
        "model": model["path"],
        "tensor_parallel_size": spec["parallel"]["tp"],
        "max_model_len": model["max_model_len"],
        "enforce_eager": model["enforce_eager"],
        "gpu_memory_utilization": model["gpu_memory_utilization"],
        "trust_remote_code": model["trust_remote_code"],
        "disable_log_stats": False,  # request stats give the time to first token
    }
    if model.get("tokenizer"):
        kwargs["tokenizer"] = model["tokenizer"]
    if model.get("kv_cache_dtype") and model["kv_cache_dtype"] != "auto":
        kwargs["kv_cache_dtype"] = model["kv_cache_dtype"]
    if model.get("dtype"):
        kwargs["dtype"] = model["dtype"]
    if model.get("seed") is not None:
        kwargs["seed"] = model["seed"]
    if model.get("moe_backend") and spec.get("platform") in ("gfx936", "rocm"):
        kwargs["moe_backend"] = model["moe_backend"]  # the DCU build's argument
    kwargs.update(model.get("extra") or {})
    return kwargs


def batch_requests(spec: dict[str, Any]) -> list[dict[str, Any]]:
    from dsv4ctl.judge.rules import batch_size

    requests = spec["requests"]
    return [requests[i % len(requests)] for i in range(batch_size(spec))]


def sampling_params(spec: dict[str, Any]):
    from vllm import SamplingParams

    s = spec["sampling"]
    return SamplingParams(max_tokens=s["max_tokens"], temperature=s["temperature"], top_p=s["top_p"],
                          ignore_eos=s["ignore_eos"], seed=s.get("seed"), logprobs=s.get("logprobs"))


def generate(llm, requests: list[dict[str, Any]], params) -> list[Any]:
    """One batch, submitted together: chat conversations through llm.chat (the template applies, multi-turn
    kept), raw prompts through llm.generate; results back in request order."""
    chats = [(i, [dict(m) for m in r["messages"]]) for i, r in enumerate(requests) if r.get("messages")]
    raws = [(i, r["prompt"]) for i, r in enumerate(requests) if r.get("prompt") is not None]
    results: list[Any] = [None] * len(requests)
    if chats:
        for (i, _), out in zip(chats, llm.chat([c for _, c in chats], params, use_tqdm=False)):
            results[i] = out
    if raws:
        for (i, _), out in zip(raws, llm.generate([p for _, p in raws], params, use_tqdm=False)):
            results[i] = out
    return results


def env_stage(spec: dict[str, Any]) -> None:
    stage("env")
    say(f"python {platform.python_version()} on {platform.machine()} {platform.system()}")
    try:
        import torch

        say(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}, "
            f"devices: {torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    except ImportError as exc:
        say(f"torch not importable: {exc}")
    for name in sorted(os.environ):
        if name.startswith(("DSV4_", "VLLM_")) and name != "DSV4_FAULT":
            say(f"{name}={os.environ[name]}")


def config_stage(spec: dict[str, Any]) -> None:
    stage("config")
    config_path = Path(spec["model"]["path"]) / "config.json"
    config = json.loads(config_path.read_text())
    say(f"architectures: {config.get('architectures')}")
    if config.get("quantization_config"):
        say(f"quant_config: {config['quantization_config']}")
    say(f"vocab_size: {config.get('vocab_size')}, layers: {config.get('num_hidden_layers')}")
    if spec["model"]["arch"] not in (config.get("architectures") or []):
        say(f"WARNING: spec says {spec['model']['arch']}, config.json says {config.get('architectures')}")


def registry_stage(spec: dict[str, Any]) -> None:
    stage("vllm import + registry")
    import vllm
    from vllm import ModelRegistry

    say(f"vllm {vllm.__version__}")
    try:  # vLLM's kernels; dsv4ctl stores the version with the run (dsv4ctl/versions.py reads these lines)
        import triton

        say(f"triton {getattr(triton, '__version__', '(no __version__)')}")
    except ImportError as exc:
        say(f"triton not importable: {exc}")
    arch = spec["model"]["arch"]
    say(f"{arch} registered: {arch in ModelRegistry.get_supported_archs()}")


def print_request(index: int, ids: list[int], finish_reason: Any, decode: list[str], text: str) -> None:
    """One request's block, as the verdict reads it (the serve driver prints its requests with this too)."""
    say(markers.request_line(index))
    say(markers.field_line("TOKEN_IDS", json.dumps(ids)))
    say(markers.field_line("FINISH_REASON", str(finish_reason)))
    say(markers.field_line("TOKEN_DECODE", repr(decode)))
    say(markers.field_line("OUTPUT_REPR", repr(text)))
    say(markers.field_line("OUTPUT", text))


def request_block(index: int, out: Any, tokenizer, bos_id: int, fault: str | None):
    """Print one request's block; return its token ids, finish reason and top-N logprobs (when asked for)."""
    completion = out.outputs[0]
    ids = faults.corrupt_ids(fault, list(completion.token_ids), bos_id)
    decode = [tokenizer.decode([t], skip_special_tokens=False) for t in ids]
    text = completion.text if ids == list(completion.token_ids) else tokenizer.decode(ids, skip_special_tokens=True)
    print_request(index, ids, completion.finish_reason, decode, text)
    top: list[list[list[float]]] | None = None
    if completion.logprobs:
        top = [sorted(([int(t), float(lp.logprob)] for t, lp in step.items()), key=lambda p: -p[1])
               for step in completion.logprobs]
        say(markers.field_line("LOGPROBS", json.dumps(top)))
        finite = all(lp == lp and abs(lp) != float("inf") for step in top for _, lp in step)
        say(markers.diag_line("output_logprobs_finite", finite))
    return ids, completion.finish_reason, top


def ttft(outputs: list[Any]) -> float | None:
    values = []
    for out in outputs:
        metrics = getattr(out, "metrics", None)
        value = getattr(metrics, "first_token_latency", None) if metrics is not None else None
        if value:
            values.append(float(value))
    return statistics.median(values) if values else None
