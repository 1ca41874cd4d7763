"""Domain rules for `mode: serve` specs (issue 14): loads that measure something other than what was meant.

Same shape as rules.py (which runs these with the others): each rule yields findings with a dotted field path,
a message and a `why`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from .findings import Finding
from .spec import ExperimentSpec

JSONL_LINES_CHECKED = 1000  # a dataset file is checked on its first lines only: validate must stay instant


def _serve(spec: ExperimentSpec):
    return spec.load if spec.mode == "serve" and spec.load is not None else None


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
    load = _serve(spec)
    if load is None or load.dataset != "jsonl" or load.path is None:
        return
    path = Path(load.path).expanduser()
    if not path.is_file():
        yield Finding("error", "load.path", f"dataset file {load.path} does not exist here",
                      "the job would fail at its first request, after the server started")
        return
    try:
        with open(path, encoding="utf-8") as stream:
            for number, line in enumerate(stream, 1):
                if number > JSONL_LINES_CHECKED:
                    break
                if not line.strip():
                    continue
                row = json.loads(line)
                if not isinstance(row, dict) or not ({"prompt", "messages"} & set(row)):
                    yield Finding("error", "load.path", f"{load.path} line {number}: not a {{prompt|messages, "
                                  "max_tokens}} object", "dataset: jsonl takes one prompt or chat per line")
                    return
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        yield Finding("error", "load.path", f"{load.path} cannot be read as JSONL: {str(exc)[:200]}")


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
               soak_is_bounded_by_time, golden_needs_the_spec_requests)
