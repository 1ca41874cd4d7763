"""The typed experiment spec: what one experiment asks of the cluster, the engine and the verdict.

Structure only lives here (types, ranges, unknown keys refused). Rules that need the report's experience
(max_tokens >= 2, fp8 KV for DeepSeek V4, TP vs. accelerators...) live in `rules.py`, so each can cite its job.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from .. import limits
from . import switches as switch_registry
from ..profile.section import ProfileSpec  # issue 23: the profile capability owns its section

# Names become Slurm job names and directory names: keep them to characters that need no quoting anywhere.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+=,-]{0,127}$"
# Values that land on an `#SBATCH` line, which sbatch parses itself (no shell quoting applies there).
SBATCH_VALUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+=,/%-]*$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A run's short name (J18): starts with a letter, so it never reads as a run id; `latest` is a keyword.
LABEL_PATTERN = r"^[A-Za-z][A-Za-z0-9._-]{0,63}$"
GRES_PATTERN = r"^[A-Za-z0-9_]+(:[A-Za-z0-9_]+)?:[0-9]+$"
MEM_PATTERN = r"^[0-9]+([KMGT][Bb]?|[kmgt][Bb]?)?$"
TIME_PATTERN = r"^([0-9]+-)?([0-9]+:)?[0-9]+(:[0-9]+)?$"
ALIGN_REFERENCE_PATTERN = r"^(hf|run:[A-Za-z0-9][A-Za-z0-9._-]{0,127})$"
# What a value matching each pattern looks like, in words (spec_findings says this, never the regular expression).
PATTERN_WORDS = {
    NAME_PATTERN: "is not a valid name: letters, digits and . _ + = , - only, a letter or digit first, "
                  "at most 128 characters",
    SBATCH_VALUE_PATTERN: "cannot go on an #SBATCH line: letters, digits and . _ : @ + = , / % - only, "
                          "a letter or digit first",
    LABEL_PATTERN: "is not a valid label: a letter first, then letters, digits and . _ -, at most 64 characters",
    GRES_PATTERN: "is not a Slurm GRES; write TYPE:COUNT or NAME:TYPE:COUNT (dcu:8)",
    MEM_PATTERN: "is not a Slurm memory size; write a whole number with an optional K, M, G or T (64G)",
    TIME_PATTERN: "is not a Slurm time; write HH:MM:SS or D-HH:MM:SS (or minutes, MM:SS, D-HH)",
    ALIGN_REFERENCE_PATTERN: "is not a reference; write hf or run:ID (a label, run id or job id)",
}
RESERVED_LABELS = ("latest",)


def label_safe(value: str | None) -> str | None:
    if value in RESERVED_LABELS:
        raise ValueError(f"{value!r} is a keyword (the newest run), not a label")
    return value
# What no value written into the job script may hold: a NUL ends a C string, so bash, execve and the environment
# cannot carry it (bash drops it silently: the job would run with another value). Every other character travels
# byte-identical through shlex quoting (tests/test_render.py), so it is not refused.
SCRIPT_FORBIDDEN = "\x00"


def script_safe(value: str) -> str:
    """Refuse a string that cannot travel through a job script (see SCRIPT_FORBIDDEN)."""
    if SCRIPT_FORBIDDEN in value:
        raise ValueError("holds a NUL character, which bash, the environment and sbatch cannot carry")
    return value


# Whole numbers only: pydantic would otherwise take 1e12 (a float) or "32" (a string) for an int.
Int = Annotated[int, Strict()]
# A string that lands in the job script (paths, module names, env values).
ScriptStr = Annotated[str, AfterValidator(script_safe)]

DEEPSEEK_V4_ARCH = "DeepseekV4ForCausalLM"
Platform = Literal["gfx936", "rocm", "cuda", "cpu"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSpec(_Strict):
    path: ScriptStr = Field(min_length=1, description="Model directory on the compute node (config.json, weights).")
    arch: str = Field(DEEPSEEK_V4_ARCH, description="Architecture in config.json; DeepSeek V4 rules apply to it.")
    tokenizer: ScriptStr | None = Field(None, description="Tokenizer directory, when not the model directory.")
    max_model_len: Int = Field(512, ge=16, le=limits.MAX_MODEL_LEN)
    kv_cache_dtype: ScriptStr = Field("fp8", description="fp8 (fp8_ds_mla) is the only layout DeepSeek V4 accepts.")
    moe_backend: Literal["emulation", "native", "auto"] | None = "emulation"
    dtype: str | None = Field(None, description="Activation dtype passed to LLM(dtype=...), e.g. float32 on CPU.")
    enforce_eager: bool = True
    gpu_memory_utilization: float = Field(0.90, gt=0, le=1)
    trust_remote_code: bool = True
    seed: Int | None = Field(None, ge=0, le=limits.MAX_SEED)
    extra: dict[str, Any] = Field(default_factory=dict, description="Further LLM(...) keyword arguments.")


class ParallelSpec(_Strict):
    tp: Int = Field(1, ge=1, le=limits.MAX_TP)


class Message(_Strict):
    role: Literal["system", "user", "assistant"]
    content: str


class Request(_Strict):
    """One request: a chat conversation (the model's template applies) or a raw prompt (it does not)."""

    messages: list[Message] | None = Field(None, min_length=1)
    prompt: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> "Request":
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("give exactly one of `messages` (chat) or `prompt` (raw text)")
        return self

    @property
    def is_chat(self) -> bool:
        return self.messages is not None


class SamplingSpec(_Strict):
    max_tokens: Int = Field(32, ge=1, le=limits.MAX_TOKENS)
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    ignore_eos: bool = True
    seed: Int | None = Field(None, ge=0, le=limits.MAX_SEED)
    logprobs: Int | None = Field(None, ge=0, le=20)


class SlurmSpec(_Strict):
    partition: str | None = Field(None, pattern=SBATCH_VALUE_PATTERN)
    account: str | None = Field(None, pattern=SBATCH_VALUE_PATTERN)
    gres: str | None = Field(None, pattern=GRES_PATTERN)
    nodes: Int = Field(1, ge=1, le=limits.MAX_NODES)
    cpus_per_task: Int | None = Field(None, ge=1, le=limits.MAX_CPUS_PER_TASK)
    mem: str | None = Field(None, pattern=MEM_PATTERN)
    time: str | None = Field(None, pattern=TIME_PATTERN)
    extra: dict[str, str | int] = Field(default_factory=dict, description="More #SBATCH --key=value lines.")

    @model_validator(mode="after")
    def _safe_extra(self) -> "SlurmSpec":
        for key, value in self.extra.items():
            if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
                raise ValueError(f"slurm.extra key {key!r} must be a long sbatch option name like 'qos'")
            if not re.fullmatch(SBATCH_VALUE_PATTERN, str(value)):
                raise ValueError(f"slurm.extra.{key} value {value!r} has characters sbatch would misread")
        return self

    def accelerators(self) -> int | None:
        """The accelerator count asked for in `gres` (dcu:8 -> 8), or None without gres."""
        return int(self.gres.rsplit(":", 1)[1]) if self.gres else None


class EnvironmentSpec(_Strict):
    modules: list[ScriptStr] = Field(default_factory=list)
    venv: ScriptStr | None = None
    python: ScriptStr = "python3"
    ld_library_path: list[ScriptStr] = Field(default_factory=list)
    pythonpath: list[ScriptStr] = Field(default_factory=list)
    env: dict[str, ScriptStr | int | float | bool] = Field(default_factory=dict)
    runtime_dir: ScriptStr | None = Field(None, description="The runtime/ folder as seen from the compute node.")

    @model_validator(mode="after")
    def _env_names(self) -> "EnvironmentSpec":
        for key in self.env:
            if not re.fullmatch(ENV_NAME_PATTERN, key):
                raise ValueError(f"environment.env name {key!r} is not a valid shell variable name")
        return self


class PerfBound(_Strict):
    """A performance reference for one stored metric (issue 17): a bound, widened by a tolerance."""

    max: float | None = None
    min: float | None = None
    tolerance: str | int | float = Field(0.0, description="Slack on the bound: a percentage ('5%') or a fraction "
                                                          "below 1 (0.05); a bare 5 is refused (it would mean 500%).")

    @field_validator("tolerance", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would read `true` as 1, that is 100%
            raise ValueError(f"tolerance {str(value).lower()} is not a number: write 5% or 0.05")
        return value

    @model_validator(mode="after")
    def _one_bound(self) -> "PerfBound":
        from .tolerance import parse_tolerance

        if (self.max is None) == (self.min is None):
            raise ValueError("give exactly one of `max` or `min`")
        parse_tolerance(self.tolerance)
        return self


class ExpectSpec(_Strict):
    golden_token_ids: list[list[Int]] | list[Int] | None = None
    golden_from: str | None = Field(
        None, min_length=1, max_length=128,
        description="A stored run (label J17, run id or job id) whose verdict's token ids become golden_token_ids "
                    "when the spec is submitted.")
    golden_logprobs: list[Any] | None = Field(
        None, description="Per request, the golden's top-N [token_id, logprob] pairs per position (vLLM's rule).")
    max_repeat_run: Int = Field(8, ge=2, le=limits.MAX_REPEAT_RUN)
    bos_id: Int = Field(0, ge=0, le=limits.MAX_TOKEN_ID)
    perf: dict[str, PerfBound] | None = Field(
        None, description="Performance references by stored metric: {gen_s: {max: 70, tolerance: 5%}}.")


class ThroughputSpec(_Strict):
    iterations: Int = Field(0, ge=0, le=limits.MAX_ITERATIONS,
                            description="0: one judged generation. N: N timed repeats after warm-up.")
    warmup: Int = Field(1, ge=0, le=limits.MAX_WARMUP)


Mode = Literal["offline", "serve", "align"]
DEFAULT_MODE = "offline"


class ServeSpec(_Strict):
    """How the job starts `vllm serve` (mode: serve): its extra arguments, port and readiness wait."""

    args: list[ScriptStr] = Field(default_factory=list, max_length=limits.MAX_SERVE_ARGS,
                                  description="Extra `vllm serve` arguments, e.g. ['--max-num-seqs', '8'].")
    port: Int = Field(0, ge=0, le=65535, description="0: a free port chosen in the job.")
    ready_timeout_s: float = Field(600, gt=0, le=limits.MAX_SERVE_SECONDS,
                                   description="How long to wait for GET /health to answer 200.")
    stop_grace_s: float = Field(30, gt=0, le=3600, description="SIGINT, then SIGTERM after this many seconds.")
    memory_interval_s: float = Field(2.0, gt=0, le=3600, description="Server memory sampled this often.")


class SloSpec(_Strict):
    """Service-level objectives for goodput, in vllm bench serve's `--goodput` keys (milliseconds)."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2el_ms: float | None = Field(None, gt=0)


class LoadSpec(_Strict):
    """The load a serve run sends, with vllm bench serve's names. Sampling comes from the spec's `sampling`."""

    dataset: Literal["random", "requests", "jsonl"] = Field(
        "random", description="random: token ids; requests: the spec's requests cycled; jsonl: a file of prompts.")
    random_input_len: Int = Field(32, ge=1, le=limits.MAX_MODEL_LEN)
    random_output_len: Int = Field(32, ge=1, le=limits.MAX_TOKENS)
    random_range_ratio: float = Field(0.0, ge=0, lt=1)
    path: ScriptStr | None = Field(None, description="dataset: jsonl — one {prompt|messages, max_tokens} per line.")
    seed: Int = Field(0, ge=0, le=limits.MAX_SEED)
    num_prompts: Int = Field(64, ge=1, le=limits.MAX_PROMPTS)
    request_rate: float | Literal["inf"] = Field("inf", description="Requests per second, or inf (all at once).")
    burstiness: float = Field(1.0, gt=0, le=1000, description="1: Poisson arrivals; else gamma with this shape.")
    ramp_up_strategy: Literal["linear", "exponential"] | None = Field(
        None, description="Raise the rate from ramp_up_start_rps to ramp_up_end_rps over the prompts "
                          "(request_rate stays inf).")
    ramp_up_start_rps: float | None = Field(None, gt=0, le=1e6)
    ramp_up_end_rps: float | None = Field(None, gt=0, le=1e6)
    max_concurrency: Int | None = Field(None, ge=1, le=limits.MAX_PROMPTS)
    duration_s: float | None = Field(None, gt=0, le=limits.MAX_SERVE_SECONDS,
                                     description="Soak: keep sending (prompts cycled) for this long.")
    warmup_requests: Int = Field(0, ge=0, le=limits.MAX_PROMPTS)
    request_timeout_s: float = Field(600, gt=0, le=limits.MAX_SERVE_SECONDS)
    slo: SloSpec = SloSpec()
    memory_limit_mib: float | None = Field(None, gt=0, description="Server memory growth over a soak that fails "
                                                                  "the run (without it a leak is only flagged).")

    @field_validator("request_rate", mode="before")
    @classmethod
    def _yaml_infinity(cls, value: Any) -> Any:
        """YAML's own infinity (`.inf`) is the rate `inf`, not a second error beside the first (issue 29 S15)."""
        return "inf" if isinstance(value, float) and value == float("inf") else value

    @model_validator(mode="after")
    def _dataset_file(self) -> "LoadSpec":
        if (self.dataset == "jsonl") != (self.path is not None):
            raise ValueError("`path` is given exactly when dataset is jsonl")
        if isinstance(self.request_rate, float) and self.request_rate <= 0:
            raise ValueError("request_rate must be > 0 requests per second, or inf")
        ramp = (self.ramp_up_start_rps, self.ramp_up_end_rps)
        if self.ramp_up_strategy is None:
            if ramp != (None, None):
                raise ValueError("ramp_up_start_rps / ramp_up_end_rps need ramp_up_strategy (linear or exponential)")
            return self
        # vllm bench serve's own checks on --ramp-up-*, plus: a soak has no last prompt to ramp up to
        if self.request_rate != "inf":
            raise ValueError("with ramp_up_strategy the ramp sets the rate: leave request_rate out (inf)")
        if None in ramp:
            raise ValueError("ramp_up_strategy needs both ramp_up_start_rps and ramp_up_end_rps")
        if ramp[0] > ramp[1]:
            raise ValueError(f"ramp_up_start_rps {ramp[0]:g} is above ramp_up_end_rps {ramp[1]:g}")
        if self.duration_s is not None:
            raise ValueError("a ramp-up runs over num_prompts: it does not combine with duration_s (a soak)")
        return self


class AlignTolerances(_Strict):
    """What `aligned` means (issue 15): every bound can be overridden in the spec."""

    cosine: float = Field(0.999, ge=-1, le=1, description="Per layer: the worst kept position's cosine.")
    top1: bool = Field(True, description="The next token's top-1 equal, at every position compared.")
    topk: Int = Field(5, ge=1, le=20, description="How many logprobs are compared per position (vLLM max 20).")
    topk_overlap: Int = Field(4, ge=0, le=20, description="Ids shared by both sides' top-k, per position.")
    perplexity_ratio: float = Field(1.05, ge=1, description="max(a/b, b/a) of the two perplexities.")
    attention_cosine: float = Field(0.999, ge=-1, le=1,
                                    description="The one-token attention over the fp8_ds_mla cache vs bf16.")

    @model_validator(mode="after")
    def _overlap_fits(self) -> "AlignTolerances":
        if self.topk_overlap > self.topk:
            raise ValueError(f"topk_overlap {self.topk_overlap} cannot exceed topk {self.topk}")
        return self


class AlignSpec(_Strict):
    """Layer-by-layer alignment (mode: align) of the spec's requests against a reference."""

    reference: str = Field("hf", pattern=ALIGN_REFERENCE_PATTERN,
                           description="hf: transformers on CPU in float32, in the same job; run:ID: a stored "
                                       "align run of the same prompts (label, run id or job id).")
    perplexity_file: ScriptStr | None = Field(None, description="A UTF-8 text file on the node [default: the "
                                                                "one shipped in runtime/dsv4rt/data].")
    perplexity_tokens: Int = Field(256, ge=2, le=limits.MAX_MODEL_LEN,
                                   description="Tokens of the file scored (cut to max_model_len - 1).")
    layers: list[Annotated[int, Strict(), Field(ge=0, lt=limits.MAX_ALIGN_LAYERS)]] | None = Field(
        None, min_length=1, max_length=limits.MAX_ALIGN_LAYERS,
        description="Decoder layers compared [default: all; an empty list compares nothing and is refused].")
    keep_positions: Int = Field(16, ge=1, le=4096, description="Per prompt and layer, the first N and last N "
                                                               "positions of the prefill are kept.")
    rungs: bool = Field(True, description="Also run the cache round trip and the one-token attention rungs.")
    tolerances: AlignTolerances = AlignTolerances()


class ExperimentSpec(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    label: Annotated[str | None, AfterValidator(label_safe)] = Field(None, pattern=LABEL_PATTERN,
                              description="Short name of the run (J18); several runs get J18.1, J18.2, ...")
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    platform: Platform = "gfx936"
    mode: Mode = Field("offline", description="offline: one judged generation (the probe); serve: `vllm serve` "
                                              "under load; align: layer-by-layer against a reference.")
    model: ModelSpec
    parallel: ParallelSpec = ParallelSpec()
    switches: dict[str, bool | int | float | ScriptStr] = Field(default_factory=dict)
    requests: list[Request] = Field(min_length=1, max_length=limits.MAX_REQUESTS)
    batch: Int | None = Field(None, ge=1, le=limits.MAX_BATCH,
                              description="Submit this many requests together (requests cycled).")
    sampling: SamplingSpec = SamplingSpec()
    repeats: Int = Field(1, ge=1, le=limits.MAX_REPEATS)
    matrix: dict[str, list[Any]] = Field(default_factory=dict)
    slurm: SlurmSpec = SlurmSpec()
    environment: EnvironmentSpec = EnvironmentSpec()
    expect: ExpectSpec = ExpectSpec()
    throughput: ThroughputSpec = ThroughputSpec()
    serve: ServeSpec | None = None
    load: LoadSpec | None = None
    align: AlignSpec | None = None
    profile: ProfileSpec | None = Field(None, exclude_if=lambda v: v is None)  # absent: hash unchanged

    @model_validator(mode="after")
    def _mode_sections(self) -> "ExperimentSpec":
        for mode, sections in MODE_SECTIONS.items():
            given = [name for name, _ in sections if getattr(self, name) is not None]
            if mode != self.mode and given:
                names = " and ".join(f"`{name}`" for name, _ in sections)
                raise ValueError(f"{names} {'belong' if len(sections) > 1 else 'belongs'} to mode: {mode}")
        return self

    @property
    def is_deepseek_v4(self) -> bool:
        return self.model.arch == DEEPSEEK_V4_ARCH

    def batch_requests(self) -> list[Request]:
        """The requests submitted together: `requests`, cycled to `batch` when batch is set."""
        n = self.batch or len(self.requests)
        return [self.requests[i % len(self.requests)] for i in range(n)]

    def resolved_switches(self) -> dict[str, str]:
        """Every switch exported to the job: the stable defaults, overridden by the spec, then derived ones."""
        values = switch_registry.defaults()
        for name, value in self.switches.items():
            values[name] = switch_registry.BY_NAME[name].normalise(value)
        values["DSV4_TP"] = str(self.parallel.tp)
        values["DSV4_MAXLEN"] = str(self.model.max_model_len)
        values["DSV4_MEMUTIL"] = f"{self.model.gpu_memory_utilization:g}"
        values["DSV4_KV_CACHE_DTYPE"] = self.model.kv_cache_dtype
        if self.model.moe_backend:
            values["DSV4_MOE_BACKEND"] = self.model.moe_backend
        return dict(sorted(values.items()))

    def snapshot(self) -> dict[str, Any]:
        """The resolved spec as plain JSON data: what travels beside the job script."""
        # The label names runs, not the experiment: two labels of one spec are one experiment (same hash).
        data = self.model_dump(mode="json", exclude={"label"})
        # Offline specs keep the hash they had before serving and alignment existed (issues 14, 15).
        owned = [(name, None) for sections in MODE_SECTIONS.values() for name, _ in sections]
        for key, default in (("mode", DEFAULT_MODE), *owned):
            if key in data and data[key] == default:
                data.pop(key)
        # The job (and the judge) read every setting of the mode's own sections, defaults included.
        for name, section in MODE_SECTIONS.get(self.mode, ()):
            data[name] = data.get(name) or section().model_dump(mode="json")
        if data["expect"].get("perf") is None:
            data["expect"].pop("perf", None)  # specs without references keep the hash they had before issue 17
        return data

    def spec_hash(self) -> str:
        # A reference judges the experiment, it is not part of it: setting one keeps the experiment's hash.
        snapshot = self.snapshot()
        snapshot["expect"].pop("perf", None)
        canonical = json.dumps(snapshot, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# The spec sections each mode owns (a spec of another mode may not carry them; the resolved spec of a run of this
# mode carries them whole, defaults included). The mode's rules and metrics: spec/modes.py.
MODE_SECTIONS: dict[str, tuple[tuple[str, type[_Strict]], ...]] = {
    "offline": (),
    "serve": (("serve", ServeSpec), ("load", LoadSpec)),
    "align": (("align", AlignSpec),),
}
