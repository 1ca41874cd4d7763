"""mode: align — the job side of layered alignment (issue 15): capture, reference, compare, verdict.

Stages: env, config, vllm import + registry (as the probe), `align rungs` (cache round trip and one-token
attention over fp8_ds_mla, attention.py), engine init, `align capture` (per prompt, one at a time: the prefill's
residual stream after every decoder layer and the final norm through forward hooks installed with
`LLM.apply_model`, enforce_eager; the greedy continuation with top-k logprobs; the perplexity of a text through
prompt_logprobs), then for `reference: hf` the same capture from transformers in float32 on CPU, and the compare
(dsv4ctl/modes/align/compare.py, the code `dsv4ctl` itself runs when it judges the run).

Files, in the run directory: align/engine.safetensors + engine.json, align/reference.* (reference: hf), and
align/align.json (the compare). Each prompt keeps its first and last `keep_positions` positions per layer.
The log gets a REQUEST block per prompt (the greedy continuation, judged like any run) and
`DSV4_VERDICT: COHERENT` when aligned, `DIVERGED (...)` (exit 2) when not.
"""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path
from typing import Any

from dsv4ctl.judge import markers

from . import align_hooks, faults, stages

ALIGN_DIR = "align"
DEFAULT_TEXT = Path(__file__).resolve().parent / "data" / "perplexity.txt"


def prompt_ids(tokenizer, request: dict[str, Any]) -> list[int]:
    """The prompt's token ids, fed as ids to both sides: a chat through the model's template (as llm.chat), a raw
    prompt through the tokenizer with its special tokens (as llm.generate)."""
    if request.get("messages"):
        text = tokenizer.apply_chat_template([dict(m) for m in request["messages"]], add_generation_prompt=True,
                                             tokenize=False)
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(request["prompt"]))


def perplexity_ids(tokenizer, align: dict[str, Any], max_model_len: int) -> list[int]:
    path = Path(align.get("perplexity_file") or DEFAULT_TEXT)
    ids = list(tokenizer.encode(path.read_text(encoding="utf-8")))
    return ids[:min(align["perplexity_tokens"], max_model_len - 1)]


def top_of(step: dict, k: int) -> list[list[float]]:
    """vLLM's logprobs of one position (the top-k, plus the sampled token when outside them) as the top k pairs."""
    pairs = sorted(([int(t), float(lp.logprob)] for t, lp in step.items()), key=lambda p: -p[1])
    return pairs[:k]


def engine_capture(llm, prompts: list[list[int]], params, topk: int):
    """Each prompt alone (its prefill is then the first forward, its rows the prompt's positions): the hooked
    streams, the greedy continuation and its top-k. Returns (per-prompt metadata, tensors, request outputs)."""
    metas, tensors, outputs = [], {}, []
    applied = 0
    for i, ids in enumerate(prompts):
        llm.apply_model(align_hooks.arm)
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
        taken = llm.apply_model(align_hooks.take)[0]  # rank 0: the full hidden state after the all-reduce
        completion = out.outputs[0]
        top = [top_of(step, topk) for step in completion.logprobs or []]
        metas.append(prompt_meta(ids, taken, list(completion.token_ids), top))
        tensors.update({f"p{i}.{key}": value for key, value in taken["captured"].items()})
        outputs.append(out)
        applied = taken.get("perturbed", 0)  # counted since install: the last take holds the total
    return metas, tensors, outputs, applied


def check_layers(align: dict[str, Any], layers: list[int], perturb: tuple[int, float] | None,
                 fault: str | None) -> None:
    """Refuse, before anything is captured, align.layers or a perturb-layer fault that name no decoder layer of the
    model (issue 29 S22/S23: `perturb-layer:99` on a 2-layer model did nothing and the run passed)."""
    span = f"{layers[0]}..{layers[-1]}" if layers else "none"
    wanted = align.get("layers")
    if wanted is not None:
        outside = sorted(set(wanted) - set(layers))
        if outside or not wanted:
            raise ValueError(f"align.layers {outside or wanted}: not decoder layers of this model (it has layers "
                             f"{span})")
    if perturb is not None and perturb[0] not in layers:
        raise faults.FaultRefused(f"DSV4_FAULT={fault}: layer {perturb[0]} is not a decoder layer of this model "
                                  f"(it has layers {span}): the fault would do nothing")


def prompt_meta(ids: list[int], taken: dict[str, Any], greedy_ids: list[int], greedy_top: list) -> dict[str, Any]:
    n_tokens = taken["n_tokens"]
    if any(n != len(ids) for n in n_tokens.values()):
        raise RuntimeError(f"the first forward after arming saw {sorted(set(n_tokens.values()))} tokens, not the "
                           f"prompt's {len(ids)}: a chunked or cached prefill cannot be captured")
    keep = taken["keep"]
    return {"token_ids": ids, "n_tokens": len(ids), "positions": align_hooks.kept_positions(len(ids), keep),
            "next_top": greedy_top[0] if greedy_top else [], "greedy_ids": greedy_ids, "greedy_top": greedy_top}


def engine_perplexity(llm, ids: list[int]) -> dict[str, Any]:
    """exp(-mean logprob of each actual token given its prefix), from prompt_logprobs (position 0 has none)."""
    from vllm import SamplingParams

    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=1),
                       use_tqdm=False)[0]
    values = [float(step[ids[i]].logprob) for i, step in enumerate(out.prompt_logprobs) if i > 0 and step]
    nll = -sum(values) / len(values)
    return {"tokens": len(ids), "mean_nll": nll, "ppl": math.exp(nll) if nll < 700 else float("inf")}


def save_capture(directory: Path, side: str, meta: dict[str, Any], tensors: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / f"{side}.safetensors"))
    (directory / f"{side}.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")


def _capture_meta(side: str, source: str, spec: dict[str, Any], layers: list[int], prompts: list[dict],
                  ppl: dict[str, Any], **extra: Any) -> dict[str, Any]:
    align = spec["align"]
    return {"side": side, "source": source, "model": spec["model"]["path"], "tp": spec["parallel"]["tp"],
            "layers": [l for l in layers if align["layers"] is None or l in align["layers"]],
            "keep_positions": align["keep_positions"], "topk": align["tolerances"]["topk"], "prompts": prompts,
            "perplexity": ppl, **extra}


def hf_reference(spec: dict[str, Any], prompts: list[list[int]], ppl_ids: list[int], directory: Path) -> None:
    from . import align_reference

    align = spec["align"]
    model = align_reference.load(spec["model"]["path"], spec["model"]["trust_remote_code"])
    layers = align_hooks.install(model, align["keep_positions"])
    metas, tensors = [], {}
    for i, ids in enumerate(prompts):
        taken, greedy = align_reference.capture_prompt(model, ids, spec["sampling"]["max_tokens"],
                                                       align["tolerances"]["topk"])
        metas.append(prompt_meta(ids, taken, greedy["greedy_ids"], greedy["greedy_top"]))
        tensors.update({f"p{i}.{key}": value for key, value in taken["captured"].items()})
    import transformers

    meta = _capture_meta("reference", f"transformers {transformers.__version__} float32 cpu", spec, layers, metas,
                         align_reference.perplexity(model, ppl_ids))
    save_capture(directory, "reference", meta, tensors)


def run_rungs(fault: str | None) -> dict[str, Any]:
    from . import attention

    found = attention.rungs(faults.mla_reader(fault) or "reference")
    for name, rung in found.items():
        stages.say(f"align rung {name}: " + ", ".join(f"{k}={_shown(v)}" for k, v in rung.items()))
    return found


def _shown(value: Any) -> str:
    """Numbers for the log without the words nan/inf (the scanner reads those as a non-finite diagnostic)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "non-finite"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def compare_here(spec: dict[str, Any], directory: Path) -> dict[str, Any]:
    from dsv4ctl.modes.align.compare import compare_dirs

    result = compare_dirs(directory, "engine", directory, "reference", spec["align"])
    (directory / "align.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    for row in result["rungs"]:
        stages.say(f"align {row['name']}: {'ok' if row['ok'] else 'BELOW TOLERANCE'} "
                  + ", ".join(f"{k}={_shown(v)}" for k, v in row.items() if k not in ("name", "ok", "kind")))
    stages.say(f"align verdict: {result['verdict']}")
    return result


def main(spec: dict[str, Any]) -> int:
    fault = faults.active()
    align = spec["align"]
    stages.env_stage(spec)
    stages.config_stage(spec)
    stages.registry_stage(spec)
    directory = Path(ALIGN_DIR)
    directory.mkdir(exist_ok=True)
    rungs = {}
    if align["rungs"]:
        stages.stage("align rungs")
        rungs = run_rungs(fault)
    stages.stage("engine init (the real test)")
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    # Hooks need eager mode (torch.compile graphs skip them); a cached prefix would shorten a prompt's prefill.
    llm = LLM(**{**stages.engine_kwargs(spec), "enforce_eager": True, "enable_prefix_caching": False})
    engine_ready_s = time.perf_counter() - started
    stages.say(markers.engine_ready_line(engine_ready_s))
    tokenizer = llm.get_tokenizer()
    prompts = [prompt_ids(tokenizer, r) for r in spec["requests"]]
    sampling, expect = spec["sampling"], spec["expect"]
    stages.say(markers.dsv4_line("DSV4_EXPECT", {"max_tokens": sampling["max_tokens"], "ignore_eos":
                                                sampling["ignore_eos"], "n_requests": len(prompts), "bos_id":
                                                expect["bos_id"], "max_repeat_run": expect["max_repeat_run"]}))
    stages.stage("align capture")
    perturb = faults.perturb_layer(fault)
    layers = llm.apply_model(functools.partial(align_hooks.install, keep=align["keep_positions"], perturb=perturb))[0]
    check_layers(align, layers, perturb, fault)
    params = SamplingParams(temperature=0.0, max_tokens=sampling["max_tokens"], ignore_eos=sampling["ignore_eos"],
                            logprobs=align["tolerances"]["topk"])
    t0 = time.perf_counter()
    metas, tensors, outputs, applied = engine_capture(llm, prompts, params, align["tolerances"]["topk"])
    gen_s = time.perf_counter() - t0
    if perturb is not None:
        if not applied:
            raise faults.FaultRefused(f"DSV4_FAULT={fault}: layer {perturb[0]}'s hook never ran: nothing perturbed")
        stages.say(markers.dsv4_line("DSV4_FAULT", f"{fault}: applied to decoder layer {perturb[0]} in {applied} "
                                                  f"forward(s), noise {perturb[1]:g} of the stream's norm, "
                                                  "engine only"))
    ppl_ids = perplexity_ids(tokenizer, align, spec["model"]["max_model_len"])
    import vllm

    save_capture(directory, "engine", _capture_meta("engine", f"vllm {vllm.__version__}", spec, layers, metas,
                                                    engine_perplexity(llm, ppl_ids), rungs=rungs), tensors)
    for index, out in enumerate(outputs):
        stages.request_block(index, out, tokenizer, expect["bos_id"], None)
    result = None
    if align["reference"] == "hf":
        stages.stage("align reference (transformers, float32, cpu)")
        hf_reference(spec, prompts, ppl_ids, directory)
        stages.stage("align compare")
        result = compare_here(spec, directory)
    else:
        stages.say(f"align reference {align['reference']}: compared when dsv4ctl judges the run")
    metrics = {"gen_s": round(gen_s, 6), "engine_ready_s": round(engine_ready_s, 3),
               "output_tokens": sum(len(m["greedy_ids"]) for m in metas)}
    metrics.update((result or {}).get("metrics") or {})
    stages.say(markers.dsv4_line("DSV4_METRICS", metrics))
    aligned = result is None or result["aligned"]
    stages.say(markers.dsv4_line("DSV4_VERDICT", "COHERENT" if aligned else f"DIVERGED ({result['verdict']})"))
    return 0 if aligned or faults.force_exit0() else stages.EXIT_NOT_COHERENT
