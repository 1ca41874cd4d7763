"""mode: offline, the job side: env, config, registry, engine init (the real test), generate; then, per request,
REQUEST / TOKEN_IDS / FINISH_REASON / TOKEN_DECODE (special tokens kept) / OUTPUT_REPR / OUTPUT; one DSV4_METRICS
line; and DSV4_VERDICT from dsv4ctl's own verdict rules. Exit 0 only when coherent (2 otherwise)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from dsv4ctl.judge import markers  # dsv4rt's __init__ puts dsv4ctl on sys.path

from . import faults, profiling
from .stages import (EXIT_NOT_COHERENT, batch_requests, config_stage, engine_kwargs, env_stage, generate,
                     registry_stage, request_block, sampling_params, say, stage, ttft)


def main(spec: dict[str, Any]) -> int:
    from dsv4ctl.judge.scan import LogFacts, RequestBlock
    from dsv4ctl.judge.rules import judge, options_for_spec

    fault = faults.active()
    env_stage(spec)
    config_stage(spec)
    registry_stage(spec)
    stage("engine init (the real test)")
    from vllm import LLM

    started = time.perf_counter()
    llm = LLM(**engine_kwargs(spec), **profiling.engine_kwargs(spec))
    engine_ready_s = time.perf_counter() - started
    say(markers.engine_ready_line(engine_ready_s))
    requests = batch_requests(spec)
    expect = spec["expect"]
    say(markers.dsv4_line("DSV4_EXPECT", {"max_tokens": spec["sampling"]["max_tokens"],
                                          "ignore_eos": spec["sampling"]["ignore_eos"], "n_requests": len(requests),
                                          "bos_id": expect["bos_id"], "max_repeat_run": expect["max_repeat_run"]}))
    if fault == "nan-hidden":
        say(markers.dsv4_line("DSV4_FAULT", f"nan-hidden: {llm.apply_model(faults.nan_hook)}"))
    stage("generate")
    params = sampling_params(spec)
    throughput = spec.get("throughput") or {}
    for _ in range(throughput.get("warmup", 0) if throughput.get("iterations") else 0):
        generate(llm, requests, params)
    timings = []
    outputs: list[Any] = []
    profiling.start(llm, spec)  # issue 23: a window of engine steps, when the spec has `profile:`
    for _ in range(max(1, throughput.get("iterations") or 0)):
        if fault == "decode-exception":
            raise RuntimeError("DSV4_FAULT decode-exception: injected failure during decode")
        if fault == "hang":
            while True:
                time.sleep(3600)
        t0 = time.perf_counter()
        outputs = generate(llm, requests, params)
        timings.append(time.perf_counter() - t0)
    profiling.stop(llm, spec)
    tokenizer = llm.get_tokenizer()
    blocks = []
    for index, out in enumerate(outputs):
        ids, finish, top = request_block(index, out, tokenizer, expect["bos_id"], fault)
        blocks.append(RequestBlock(line=0, index=index, token_ids=ids, finish_reason=finish, logprobs=top))
    n_tokens = sum(len(b.token_ids) for b in blocks)
    gen_s = statistics.median(timings)
    metrics = {"gen_s": round(gen_s, 6), "output_tokens": n_tokens,
               "tokens_per_s": round(n_tokens / gen_s, 3) if gen_s > 0 else None, "ttft_s": ttft(outputs),
               "engine_ready_s": round(engine_ready_s, 3), "iterations": len(timings)}
    if len(timings) > 1:
        metrics["gen_s_all"] = [round(t, 6) for t in timings]
    say(markers.dsv4_line("DSV4_METRICS", metrics))
    options = options_for_spec(spec)
    verdict = judge(LogFacts(requests=blocks, metrics=metrics, py_exit=0), None, options)
    say(markers.dsv4_line("DSV4_VERDICT", verdict.status.upper()
                          + (f" ({'; '.join(verdict.reasons)})" if verdict.reasons else "")))
    if faults.force_exit0():
        return 0
    return 0 if verdict.status == "coherent" else EXIT_NOT_COHERENT
