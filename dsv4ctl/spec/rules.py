"""Domain rules for experiment specs: each one is a mistake the port team already paid for.

A rule returns findings with a dotted field path, a message saying what is wrong and a `why` citing the job or
report section that taught it. `specload` attaches file/line/column. Errors stop `render`/`submit`; warnings do not
(unless `validate --strict`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from . import switches as registry
from .findings import Finding
from ..modes.serve.rules import SERVE_RULES
from .models import ExperimentSpec

Rule = Callable[[ExperimentSpec], Iterator[Finding]]


def _error(path: str, message: str, why: str = "") -> Finding:
    return Finding("error", path, message, why)


def _warning(path: str, message: str, why: str = "") -> Finding:
    return Finding("warning", path, message, why)


def decode_is_exercised(spec: ExperimentSpec) -> Iterator[Finding]:
    n = spec.sampling.max_tokens
    if n < 2:
        yield _error("sampling.max_tokens", f"{n} token(s) never runs a decode step; ask for at least 2",
                     "J11/J13: the first token comes from prefill, the bug lived in decode (report §8)")
    elif n < 16:
        yield _warning("sampling.max_tokens", f"{n} tokens is a short decode; 16 or 32 is the report's advice",
                       "report §8: max_tokens >= 2 is the minimum, 16 or 32 is safer")


def kv_cache_is_fp8_for_v4(spec: ExperimentSpec) -> Iterator[Finding]:
    if spec.is_deepseek_v4 and spec.model.kv_cache_dtype != "fp8":
        yield _error("model.kv_cache_dtype",
                     f"{spec.model.kv_cache_dtype!r} is refused: DeepSeek V4 sparse MLA only supports fp8 (fp8_ds_mla)",
                     "J12: engine start refused kv_cache_dtype=auto; caught here before a node is booked")


def tp_fits_accelerators(spec: ExperimentSpec) -> Iterator[Finding]:
    tp = spec.parallel.tp
    count = spec.slurm.accelerators()
    if count is None:
        if tp > 1 and spec.platform != "cpu":
            yield _warning("slurm.gres", f"parallel.tp is {tp} but no accelerators are requested",
                           "without --gres the job may land on a node with no visible DCU")
        return
    total = count * spec.slurm.nodes
    if tp > total:
        yield _error("parallel.tp", f"tp={tp} exceeds the {total} accelerator(s) requested in slurm.gres",
                     "each TP rank needs its own device (report §2.3: all 8 gfx936 visible for TP=8)")
    elif total % tp:
        yield _error("parallel.tp", f"tp={tp} does not divide the {total} accelerator(s) requested in slurm.gres",
                     "an uneven split leaves devices idle or ranks without a device")


def chat_template_is_used(spec: ExperimentSpec) -> Iterator[Finding]:
    for i, request in enumerate(spec.requests):
        if not request.is_chat:
            yield _warning(f"requests.{i}.prompt", "a raw prompt bypasses the model's chat template",
                           "J11: the bare prompt mis-formatted the input; use `messages:` so llm.chat applies it")


def skinny_gemm_off_on_gfx936(spec: ExperimentSpec) -> Iterator[Finding]:
    value = spec.switches.get("VLLM_ROCM_USE_SKINNY_GEMM")
    if spec.platform == "gfx936" and value in (1, "1", True):
        yield _warning("switches.VLLM_ROCM_USE_SKINNY_GEMM", "skinny GEMM is on for gfx936",
                       "J06: wvSplitK_hf_sml_ hit a device-side assertion and a VMFault")


def greedy_when_golden(spec: ExperimentSpec) -> Iterator[Finding]:
    if (spec.expect.golden_token_ids or spec.expect.golden_from) and spec.sampling.temperature > 0:
        yield _warning("sampling.temperature",
                       f"temperature {spec.sampling.temperature:g} with a golden sequence: tokens will differ by chance",
                       "golden comparison needs greedy decoding (temperature 0), as in J17")


def switches_are_known(spec: ExperimentSpec) -> Iterator[Finding]:
    for name, value in spec.switches.items():
        switch = registry.BY_NAME.get(name)
        if switch is None:
            near = registry.closest(name)
            hint = f"did you mean {', '.join(near)}?" if near else "see `dsv4ctl switches`"
            yield _error(f"switches.{name}", f"unknown switch; {hint}",
                         "anything outside the registry goes under environment.env")
        elif switch.role == "derived":
            yield _error(f"switches.{name}", f"{name} is set from {switch.derived_from}; set that field instead",
                         "one source of truth for each engine setting")
        else:
            try:
                switch.normalise(value)
            except ValueError as exc:
                yield _error(f"switches.{name}", str(exc))


def env_does_not_shadow_switches(spec: ExperimentSpec) -> Iterator[Finding]:
    for name in spec.environment.env:
        if name in registry.BY_NAME:
            yield _error(f"environment.env.{name}", f"{name} is a known switch; set it under `switches:`",
                         "switches are typed and recorded with every run; env is only the escape hatch")


def batch_is_positive_sweep(spec: ExperimentSpec) -> Iterator[Finding]:
    if spec.batch and spec.batch > 1 and spec.sampling.max_tokens < 32:
        yield _warning("sampling.max_tokens", f"batch {spec.batch} with only {spec.sampling.max_tokens} tokens",
                       "§0.3: the batch=8 fault only showed after longer decodes")


def align_is_comparable(spec: ExperimentSpec) -> Iterator[Finding]:
    """mode: align compares greedy tokens and one prompt's prefill at a time (issue 15)."""
    if spec.mode != "align":
        return
    if spec.sampling.temperature > 0:
        yield _error("sampling.temperature", f"temperature {spec.sampling.temperature:g}: alignment compares greedy "
                     "continuations; use 0", "vLLM's check_logprobs_close compares greedy runs (issue 15)")
    if spec.batch:
        yield _error("batch", "mode: align captures each prompt alone (its prefill is then the first forward); "
                     "drop `batch`", "vLLM flattens a batch's tokens into one tensor (issue 15)")
    if spec.parallel.tp > 1:
        yield _warning("parallel.tp", f"tp={spec.parallel.tp}: rank 0's hidden state is compared, the full one "
                       "after the row-parallel all-reduce inside each layer", "docs/alignment.md")
    if (spec.align.reference if spec.align else "hf") == "hf" and spec.platform != "cpu":
        yield _warning("align.reference", "reference: hf runs transformers in float32 on the node's CPU: only for a "
                       "model that fits in host memory; take a stored run (run:ID) for a full-size one",
                       "issue 15: a BF16 or CPU reference per platform")


RULES: tuple[Rule, ...] = (
    decode_is_exercised,
    kv_cache_is_fp8_for_v4,
    tp_fits_accelerators,
    chat_template_is_used,
    skinny_gemm_off_on_gfx936,
    greedy_when_golden,
    switches_are_known,
    env_does_not_shadow_switches,
    batch_is_positive_sweep,
    align_is_comparable,
    *SERVE_RULES,  # mode: serve (issue 14)
)


def check_spec(spec: ExperimentSpec) -> list[Finding]:
    return [finding for rule in RULES for finding in rule(spec)]
