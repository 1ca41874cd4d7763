"""What a serve run sends, and how to read what comes back: the prompts, their arrival times, and the server's
streamed answer. Stdlib only, so it is tested without the engine's venv; loadgen.py does the sending.

Everything copies `vllm bench serve` (vllm/benchmarks/serve.py, datasets/, lib/endpoint_request_func.py at 0.32.0)
so our figures mean what its figures mean:
  arrivals  request_rate inf: every request at t=0; else gaps drawn from gamma(shape=burstiness,
            scale=1/(rate*burstiness)) (burstiness 1 = Poisson), cumulated, then rescaled so the last arrival is
            at num_prompts/rate ("to stabilize throughput across seeds"). The first request waits one gap too.
            A ramp-up (linear | exponential from ramp_up_start_rps to ramp_up_end_rps) draws request i's gap at
            the rate reached at progress i/(n-1), with no rescaling.
  random    per request, input and output lengths uniform in [floor(L*(1-r)), ceil(L*(1+r))] (output at least 1),
            an offset in [0, vocab); the prompt is the ids allowed[(offset + index + k) % len(allowed)], where
            allowed is the vocabulary minus the special tokens. vLLM decodes and re-encodes that into text; we send
            the ids themselves (the completions API takes a token-id prompt), so the prompt length is exact.
The draws use Python's `random` seeded with load.seed, not numpy's: the same process, not the same numbers.
"""

from __future__ import annotations

import codecs
import itertools
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator


class LoadError(ValueError):
    """A load that cannot be built (a missing or malformed dataset file)."""


@dataclass(frozen=True)
class Prompt:
    """One request's input: token ids or text for /v1/completions, or chat messages for /v1/chat/completions."""

    max_tokens: int
    token_ids: tuple[int, ...] | None = None
    text: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None

    @property
    def chat(self) -> bool:
        return self.messages is not None

    @property
    def prompt_len(self) -> int | None:
        return len(self.token_ids) if self.token_ids is not None else None


# ---- datasets -------------------------------------------------------------------------------------------------------


def length_range(length: int, ratio: float, floor_one: bool = False) -> tuple[int, int]:
    low, high = math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))
    return (max(low, 1), max(high, 1)) if floor_one else (low, high)


def random_prompts(load: dict[str, Any], vocab_size: int, special_ids: set[int]) -> list[Prompt]:
    """vllm's RandomDataset, without the decode/re-encode round trip (see the module's docstring)."""
    rng = random.Random(load["seed"])
    allowed = [t for t in range(vocab_size) if t not in special_ids]
    if not allowed:
        raise LoadError(f"no token ids to draw prompts from: vocabulary {vocab_size}, all special")
    in_low, in_high = length_range(load["random_input_len"], load["random_range_ratio"])
    out_low, out_high = length_range(load["random_output_len"], load["random_range_ratio"], floor_one=True)
    if in_low < 1:
        raise LoadError(f"random_input_len {load['random_input_len']} with range ratio "
                        f"{load['random_range_ratio']} can draw an empty prompt")
    n = load["num_prompts"]
    # Drawn in vllm's order: all input lengths, then all output lengths, then all offsets.
    input_lens = [rng.randint(in_low, in_high) for _ in range(n)]
    output_lens = [rng.randint(out_low, out_high) for _ in range(n)]
    offsets = [rng.randrange(vocab_size) for _ in range(n)]
    return [Prompt(max_tokens=output_lens[i],
                   token_ids=tuple(allowed[(offsets[i] + i + k) % len(allowed)] for k in range(input_lens[i])))
            for i in range(n)]


def spec_prompts(requests: list[dict[str, Any]], n: int, max_tokens: int) -> list[Prompt]:
    """The spec's own requests, cycled to n."""
    if not requests:
        raise LoadError("dataset: requests, but the spec has no requests")
    return [_prompt(requests[i % len(requests)], max_tokens, f"request {i % len(requests)}") for i in range(n)]


def jsonl_prompts(path: Path, n: int, max_tokens: int) -> list[Prompt]:
    """A file of {"prompt": str | [ids]} or {"messages": [...]} lines, each with an optional max_tokens; cycled to n."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadError(f"load.path {path}: {exc}") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadError(f"{path}:{number}: not JSON ({exc.msg})") from None
        rows.append(_prompt(row, max_tokens, f"{path}:{number}"))
    if not rows:
        raise LoadError(f"{path}: no prompts")
    return [rows[i % len(rows)] for i in range(n)]


def _prompt(row: Any, max_tokens: int, where: str) -> Prompt:
    """One dataset line as a prompt; the check is the one `dsv4ctl validate` applies to every line (serve_rows)."""
    from dsv4ctl.judge.serve_rows import row_problem

    problem = row_problem(row, max_tokens)
    if problem is not None:
        raise LoadError(f"{where}: {problem}")
    wanted = row.get("max_tokens", max_tokens)
    if row.get("messages") is not None:
        return Prompt(max_tokens=wanted, messages=tuple(dict(m) for m in row["messages"]))
    if isinstance(row["prompt"], str):
        return Prompt(max_tokens=wanted, text=row["prompt"])
    return Prompt(max_tokens=wanted, token_ids=tuple(row["prompt"]))


def special_token_ids(model_dir: Path) -> set[int]:
    """The ids a random prompt must not contain: tokenizer.json's special added tokens (vllm: all_special_ids)."""
    try:
        data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {t["id"] for t in data.get("added_tokens", []) if t.get("special") and isinstance(t.get("id"), int)}


# ---- arrivals --------------------------------------------------------------------------------------------------------


RAMP_UP_STRATEGIES = ("linear", "exponential")


def ramp_rate(strategy: str, start_rps: float, end_rps: float, index: int, n: int) -> float:
    """Request `index`'s rate under a ramp-up (vllm's _get_current_request_rate): progress = index / (n - 1), the
    rate goes from start to end linearly or geometrically."""
    progress = index / max(n - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    if strategy == "exponential":
        return start_rps * (end_rps / start_rps) ** progress
    raise ValueError(f"unknown ramp-up strategy {strategy!r}; known: {', '.join(RAMP_UP_STRATEGIES)}")


def arrival_times(n: int, request_rate: float | str, burstiness: float, seed: int,
                  ramp_up: tuple[str, float, float] | None = None) -> list[float]:
    """Seconds from the load's start at which each of n requests is due (vllm's get_request). With a ramp-up
    (strategy, start_rps, end_rps) each gap is drawn at its request's own rate, and nothing is rescaled (as vllm)."""
    if ramp_up is not None:
        strategy, start, end = ramp_up
        draw = random.Random(seed)
        return list(itertools.accumulate(
            gap(draw, ramp_rate(strategy, start, end, i, n), burstiness) for i in range(max(n, 0))))
    rate = math.inf if request_rate == "inf" else float(request_rate)
    if n <= 0 or rate == math.inf:
        return [0.0] * max(n, 0)
    gaps = RandomGaps(rate, burstiness, seed)
    times = list(itertools.accumulate(next(gaps) for _ in range(n)))
    if times[-1] > 0:
        scale = (n / rate) / times[-1]
        times = [t * scale for t in times]
    return times


def gap(draw: random.Random, rate: float, burstiness: float) -> float:
    """One inter-arrival gap at `rate`: 0 at inf, 1/rate at infinite burstiness, else gamma(b, 1/(rate*b))."""
    if rate == math.inf:
        return 0.0
    if burstiness == math.inf:
        return 1.0 / rate
    return draw.gammavariate(burstiness, 1.0 / (rate * burstiness))


class RandomGaps:
    """An endless stream of inter-arrival gaps (a soak run cannot know how many it needs, so no rescaling)."""

    def __init__(self, rate: float, burstiness: float, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rate, self.burstiness = rate, burstiness

    def __iter__(self) -> Iterator[float]:
        return self

    def __next__(self) -> float:
        return gap(self.rng, self.rate, self.burstiness)


# ---- the server's streamed answer ---------------------------------------------------------------------------------


@dataclass
class StreamEvent:
    """One server-sent message: a chunk of generated tokens, the final usage, the end, or an error."""

    kind: str  # "tokens" | "usage" | "done" | "error" | "other"
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


class StreamParser:
    """Server-sent events from byte chunks of any size: messages end at a blank line; `data: ` lines carry JSON
    (or `[DONE]`); lines starting with `:` are comments (pings). Bytes may split a UTF-8 character or a message
    anywhere. Never raises on what the server sends: anything unreadable becomes an error event."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        self._buffer += self._decoder.decode(chunk)
        if "\r" in self._buffer:
            self._buffer = self._buffer.replace("\r\n", "\n")
        events = []
        while "\n\n" in self._buffer:
            message, self._buffer = self._buffer.split("\n\n", 1)
            events += message_events(message)
        return events

    def close(self) -> list[StreamEvent]:
        """What is left when the stream ends: a last message without its blank line still counts."""
        rest, self._buffer = self._buffer + self._decoder.decode(b"", final=True), ""
        return message_events(rest)


def message_events(message: str) -> list[StreamEvent]:
    data = [line[5:].removeprefix(" ") for line in message.split("\n") if line.startswith("data:")]
    if not data:
        return []  # a comment, an `event:` line alone, or blank
    payload = "\n".join(data).strip()  # SSE joins multi-line data with newlines
    if payload == "[DONE]":
        return [StreamEvent("done")]
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        return [StreamEvent("error", error=f"unreadable stream message: {payload[:200]!r}")]
    return [chunk_event(body)]


def chunk_event(body: Any) -> StreamEvent:
    """One JSON message of vLLM's stream (completions or chat) -> an event."""
    if not isinstance(body, dict):
        return StreamEvent("error", error=f"stream message is not an object: {str(body)[:200]}")
    if body.get("error") is not None or body.get("object") == "error":
        return StreamEvent("error", error=_error_text(body.get("error", body)))
    choices = body.get("choices")
    if isinstance(choices, list) and choices:
        choice = choices[0] if isinstance(choices[0], dict) else {}
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        ids = choice.get("token_ids")
        return StreamEvent("tokens", text=text if isinstance(text, str) else "",
                           token_ids=[t for t in ids if isinstance(t, int) and not isinstance(t, bool)]
                           if isinstance(ids, list) else [],
                           finish_reason=_str_or_none(choice.get("finish_reason")),
                           stop_reason=_stop_reason(choice.get("stop_reason")))
    usage = body.get("usage")
    if isinstance(usage, dict):
        return StreamEvent("usage", prompt_tokens=_count(usage.get("prompt_tokens")),
                           completion_tokens=_count(usage.get("completion_tokens")))
    return StreamEvent("other")


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        parts = [str(error[k]) for k in ("type", "code", "message") if error.get(k) not in (None, "")]
        return ": ".join(parts)[:1000] or "error event"
    return str(error)[:1000]


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _stop_reason(value: Any) -> str | int | None:
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
