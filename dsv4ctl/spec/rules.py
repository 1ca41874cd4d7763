"""Domain rules for experiment specs: each one is a mistake the port team already paid for.

A rule returns findings with a dotted field path, a message saying what is wrong and a `why` citing the job or
report section that taught it. `specload` attaches file/line/column. Errors stop `render`/`submit`; warnings do not
(unless `validate --strict`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from . import switches as registry
from .findings import Finding
from .models import ExperimentSpec
from .modes import SPEC_MODES
from .tolerance import is_duration

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
)


def perf_is_measured(spec: ExperimentSpec) -> Iterator[Finding]:
    """validate's findings on `expect.perf` (issue 29 S32): a metric the mode's job never records is a reference
    every run fails ("not measured"), warned; a negative `max` for a duration is one no run can meet, refused."""
    produced = SPEC_MODES[spec.mode].metrics()
    for metric, bound in sorted(((spec.expect.perf or {}).items())):
        path = f"expect.perf.{metric}"
        if metric not in produced:
            import difflib

            near = difflib.get_close_matches(metric, sorted(produced), n=1)
            article = "an" if spec.mode[0] in "aeiou" else "a"
            yield Finding("warning", path, f"{article} {spec.mode} run records no metric {metric!r}"
                                    + (f" (did you mean {near[0]!r}?)" if near else "")
                                    + ": every run would be outside its reference, 'not measured'",
                                    why=f"{spec.mode} runs record: {', '.join(sorted(produced))}")
        if bound.max is not None and bound.max < 0 and is_duration(metric):
            yield Finding("error", f"{path}.max", f"{bound.max:g} is negative: {metric} is a duration, "
                                    "no run can take less than 0")


def check_spec(spec: ExperimentSpec) -> list[Finding]:
    """The domain rules every spec meets, then its mode's own (spec.modes), then whether its performance
    references can be measured at all."""
    rules = (*RULES, *SPEC_MODES[spec.mode].rules, perf_is_measured)
    return [finding for rule in rules for finding in rule(spec)]
