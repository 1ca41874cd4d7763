"""The spec half of mode: align (issue 15): the rules a spec of this mode also meets, and the metrics its job
records (runtime/dsv4rt/align.py, with the compare's figures). Read by spec.modes; imports only the spec's models
and findings, so the spec layer can use it."""

from __future__ import annotations

from collections.abc import Iterator

from ...spec.findings import Finding
from ...spec.models import ExperimentSpec

METRICS = frozenset({"gen_s", "engine_ready_s", "output_tokens", "align_min_cosine", "ppl_engine", "ppl_reference",
                     "ppl_ratio"})


def _error(path: str, message: str, why: str = "") -> Finding:
    return Finding("error", path, message, why)


def _warning(path: str, message: str, why: str = "") -> Finding:
    return Finding("warning", path, message, why)


def align_is_comparable(spec: ExperimentSpec) -> Iterator[Finding]:
    """mode: align compares greedy tokens and one prompt's prefill at a time (issue 15)."""
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


RULES = (align_is_comparable,)
