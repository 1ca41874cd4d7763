"""The spec half of mode: serve (issue 14): rules for loads that measure something other than what was meant, and
the metrics a serve job records. Read by spec/modes.py; imports only the spec's models and findings (and the
stdlib-only judge), so the spec layer can use it. Each rule yields findings with a dotted field path, a message and
a `why`, as spec/rules.py's do."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from ...spec.findings import Finding
from ...spec.models import ExperimentSpec

JSONL_BYTES_CHECKED = 256 << 20  # every line of a dataset file up to this size is checked (100k lines: ~0.3 s)
JOB_FLAGS = ("--port", "--host", "--model")  # the job sets these itself (runtime/dsv4rt/server.py)


def _serve(spec: ExperimentSpec):
    return spec.load  # these rules run for serve specs only (spec.modes)


def rate_has_a_cap(spec: ExperimentSpec) -> Iterator[Finding]:
    load = _serve(spec)
    if load is None or load.max_concurrency is not None:
        return
    cards = spec.slurm.accelerators() or 1
    if cards * spec.slurm.nodes <= 1:
        if load.ramp_up_strategy:
            rate = f"{load.ramp_up_strategy} ramp-up to {load.ramp_up_end_rps:g} req/s"
        elif load.request_rate == "inf":
            rate = "every request at once (rate inf)"
        else:
            rate = f"{load.request_rate:g} req/s"
        yield Finding("warning", "load.max_concurrency",
                      f"{rate} with no concurrency cap on a 1-card run: the queue, not the engine, sets the latency",
                      "vllm bench serve's --max-concurrency: without it TTFT grows with the backlog (issue 14)")


def jsonl_dataset_exists(spec: ExperimentSpec) -> Iterator[Finding]:
    """The job's own line check (judge/serve_rows.py) on every line, and max_tokens against max_model_len."""
    load = _serve(spec)
    if load is None or load.dataset != "jsonl" or load.path is None:
        return
    path = Path(load.path).expanduser()
    if not path.is_file():
        yield Finding("error", "load.path", f"dataset file {load.path} does not exist here",
                      "the job would fail at its first request, after the server started")
        return
    limit, vocab = spec.model.max_model_len, _vocab_size(spec)
    prompts, read = 0, 0
    try:
        with open(path, encoding="utf-8") as stream:
            for number, line in enumerate(stream, 1):
                read += len(line)
                if read > JSONL_BYTES_CHECKED:
                    yield Finding("warning", "load.path", f"{load.path}: checked up to line {number - 1} only "
                                  f"(the first {JSONL_BYTES_CHECKED >> 20} MiB)", "the job checks the rest")
                    break
                if not line.strip():
                    continue
                problem = _line_problem(line, spec.sampling.max_tokens, limit, vocab)
                if problem is not None:
                    yield Finding("error", "load.path", f"{load.path} line {number}: {problem}",
                                  "caught here, not after a server start-up (minutes on DeepSeek V4)")
                    return
                prompts += 1
    except (OSError, UnicodeDecodeError) as exc:
        yield Finding("error", "load.path", f"{load.path} cannot be read as JSONL: {str(exc)[:200]}")
        return
    if not prompts:
        yield Finding("error", "load.path", f"{load.path} has no prompts (blank lines only)",
                      "dataset: jsonl takes one prompt or chat per line")


def _vocab_size(spec: ExperimentSpec) -> int | None:
    """The model's vocabulary from its config.json, when the model is on this machine (else ids go unchecked)."""
    try:
        vocab = json.loads((Path(spec.model.path).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    size = vocab.get("vocab_size") if isinstance(vocab, dict) else None
    return size if isinstance(size, int) and size > 0 else None


def _line_problem(line: str, default_max_tokens: int, max_model_len: int, vocab: int | None) -> str | None:
    from ...judge.serve_rows import row_max_tokens, row_problem

    try:
        row = json.loads(line)
    except ValueError as exc:
        return f"not JSON ({str(exc)[:120]})"
    problem = row_problem(row, default_max_tokens)
    if problem is not None:
        return problem
    ids = row.get("prompt") if isinstance(row.get("prompt"), list) else []
    outside = next((t for t in ids if vocab is not None and t >= vocab), None)
    if outside is not None:
        return f"token id {outside} is outside the model's vocabulary ({vocab} ids): the server refuses the request"
    wanted = row_max_tokens(row, default_max_tokens)
    if wanted > max_model_len:
        return (f"max_tokens {wanted} is more than model.max_model_len {max_model_len}: the server refuses the "
                "request (HTTP 400)")
    return None


def max_tokens_fit_the_model(spec: ExperimentSpec) -> Iterator[Finding]:
    """An output longer than the model's context is refused by the server, every request of it."""
    load = _serve(spec)
    if load is None:
        return
    limit = spec.model.max_model_len
    if load.dataset == "random":
        high_in = math.ceil(load.random_input_len * (1 + load.random_range_ratio))
        high_out = math.ceil(load.random_output_len * (1 + load.random_range_ratio))
        if high_in + high_out > limit:
            yield Finding("error", "load.random_output_len", f"prompts of up to {high_in} tokens and outputs of up "
                          f"to {high_out} exceed model.max_model_len {limit}", "the server refuses them (HTTP 400)")
    elif spec.sampling.max_tokens > limit:
        yield Finding("error", "sampling.max_tokens", f"max_tokens {spec.sampling.max_tokens} is more than "
                      f"model.max_model_len {limit}", "the server refuses every request (HTTP 400)")


def job_flags_not_in_args(spec: ExperimentSpec) -> Iterator[Finding]:
    if spec.serve is None:
        return
    for arg in spec.serve.args:
        flag = arg.split("=", 1)[0]
        if flag in JOB_FLAGS:
            yield Finding("error", "serve.args", f"{flag} in serve.args: the job sets {', '.join(JOB_FLAGS)} itself "
                          f"({'serve.port' if flag == '--port' else 'model.path' if flag == '--model' else '127.0.0.1'})",
                          "a second value makes the server listen or load elsewhere than the job looks")


def load_fits_the_time_limit(spec: ExperimentSpec) -> Iterator[Finding]:
    """A load that cannot end before slurm.time: the job is killed in its load, every time."""
    from ...units import slurm_time_s

    load = _serve(spec)
    limit = slurm_time_s(spec.slurm.time)
    if load is None or limit is None:
        return
    if load.duration_s is not None:
        need, what = load.duration_s, f"duration_s {load.duration_s:g} s"
        field = "load.duration_s"
    elif load.request_rate != "inf" and not load.ramp_up_strategy:
        need, what = load.num_prompts / load.request_rate, (f"num_prompts {load.num_prompts} at request_rate "
                                                           f"{load.request_rate:g}/s ({load.num_prompts / load.request_rate:g} s)")
        field = "load.request_rate"
    else:
        return
    if need >= limit:
        yield Finding("warning", field, f"{what} is longer than slurm.time {spec.slurm.time} ({limit:g} s), before "
                      "the server's start-up is even counted: the job is killed in its load",
                      "the load must end before the scheduler's time limit")


def no_cap_within_open_files(spec: ExperimentSpec) -> Iterator[Finding]:
    """Every request at once and no concurrency cap past this machine's open-file limit: the job caps requests in
    flight below it (runtime/dsv4rt/serve.py) and says so; say it here first."""
    import resource

    load = _serve(spec)
    if load is None or load.max_concurrency is not None or load.request_rate != "inf" or load.duration_s:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = hard if hard != resource.RLIM_INFINITY else soft
    if nofile != resource.RLIM_INFINITY and load.num_prompts > nofile - 256:
        yield Finding("warning", "load.max_concurrency", f"{load.num_prompts} requests at once and no max_concurrency"
                      f": more than the open-file limit here ({nofile}); the job caps requests in flight below its own "
                      "limit and says so in raw.log", "a socket per request: 20,000 at once ran out of descriptors")


def requests_dataset_sends_them_all(spec: ExperimentSpec) -> Iterator[Finding]:
    load = _serve(spec)
    if load is not None and load.dataset == "requests" and load.duration_s is None \
            and load.num_prompts < len(spec.requests):
        yield Finding("warning", "load.num_prompts", f"{load.num_prompts} prompts sent of {len(spec.requests)} "
                      "requests: the last ones are never sent", "dataset: requests cycles the spec's requests")


def slo_can_be_measured(spec: ExperimentSpec) -> Iterator[Finding]:
    load = _serve(spec)
    if load is None or load.slo.tpot_ms is None:
        return
    out = load.random_output_len if load.dataset == "random" else spec.sampling.max_tokens
    if out <= 1:
        yield Finding("warning", "load.slo.tpot_ms", f"a TPOT SLO with {out} output token(s): TPOT is counted 0, "
                      "every request meets it", "vllm bench serve: TPOT exists only for outputs > 1 token")


def soak_is_bounded_by_time(spec: ExperimentSpec) -> Iterator[Finding]:
    load = _serve(spec)
    if load is None or load.duration_s is None:
        return
    if "num_prompts" in load.model_fields_set:
        yield Finding("warning", "load.num_prompts", f"duration_s {load.duration_s:g} s and num_prompts "
                      f"{load.num_prompts}: a soak runs for its duration; num_prompts is only the pool it cycles",
                      "one of the two decides when the load ends (issue 14)")
    if load.memory_limit_mib is None:
        yield Finding("warning", "load.memory_limit_mib", "a soak with no memory limit: a leak is flagged but "
                      "never fails the run", "issue 14: server memory over a soak is judged against this limit")


def golden_needs_the_spec_requests(spec: ExperimentSpec) -> Iterator[Finding]:
    load = _serve(spec)
    if load is not None and load.dataset != "requests" and (spec.expect.golden_token_ids or spec.expect.golden_from):
        yield Finding("warning", "expect.golden_token_ids", f"a golden sequence with dataset {load.dataset}: "
                      "goldens belong to the spec's requests, so they are not compared",
                      "only dataset: requests sends the prompts the golden was taken from")


SERVE_RULES = (rate_has_a_cap, jsonl_dataset_exists, requests_dataset_sends_them_all, slo_can_be_measured,
               soak_is_bounded_by_time, golden_needs_the_spec_requests, max_tokens_fit_the_model,
               job_flags_not_in_args, load_fits_the_time_limit, no_cap_within_open_files)


def metrics() -> frozenset[str]:
    """What a serve job records: the serving summary's figures (judge/serving.py), plus engine_ready_s."""
    from ...judge.serving import summary_names

    return frozenset(summary_names()) | {"engine_ready_s"}
