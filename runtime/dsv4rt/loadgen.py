"""The load driver of a serve run: asyncio + aiohttp (both already in the engine's venv), streaming through vLLM's
OpenAI-compatible API, timed the way `vllm bench serve` times (lib/endpoint_request_func.py at 0.32.0):

  send    the clock starts just before the POST, after the concurrency semaphore (queueing is not latency)
  TTFT    the first message that carries a choice (text may be empty); the trailing usage message is no token
  ITL     the gap before every later choice message (a message may carry several tokens: ITL is not TPOT)
  E2EL    send -> the last choice message
One record per request, in serve-requests.jsonl's keys (the contract with dsv4ctl/judge/serving.py):
  index, warmup, send_s (since the load's start), ttft_s, itl_s, e2el_s, prompt_tokens, output_tokens,
  token_ids, finish_reason, stop_reason, text, error
Token ids come back because every request asks for them (`return_token_ids`, vLLM >= 0.10); output_tokens is the
server's usage count (`stream_options.include_usage`), else the number of ids. Each record is handed to `on_done` the
moment its request ends (serve.py appends it to serve-requests.jsonl then: a job killed later keeps it).
`connection_cap` bounds the requests in flight when max_concurrency does not (the job's open-file limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .loadplan import Prompt, RandomGaps, StreamParser, arrival_times

NO_TOKENS = "no token chunk received: the stream ended before the first token"


@dataclass
class LoadResult:
    records: list[dict[str, Any]]  # warm-ups first, then the measured requests in index order
    duration_s: float  # the load's start (after warm-up) -> the last completion, as vllm's benchmark_duration
    in_flight: dict[int, int] = field(default_factory=dict)  # measured index -> requests streaming when it was sent
    collapsed: int | None = None  # the request a bos-under-concurrency fault changed (tests only)
    fewest_asked: int | None = None  # the smallest max_tokens among the prompts


def request_body(model: str, prompt: Prompt, sampling: dict[str, Any], ignore_eos: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                            "return_token_ids": True, "temperature": sampling["temperature"],
                            "top_p": sampling["top_p"], "ignore_eos": ignore_eos}
    if sampling.get("seed") is not None:
        body["seed"] = sampling["seed"]
    if prompt.chat:
        body["messages"] = list(prompt.messages or ())
        body["max_completion_tokens"] = prompt.max_tokens
    else:
        body["prompt"] = list(prompt.token_ids) if prompt.token_ids is not None else prompt.text
        body["max_tokens"] = prompt.max_tokens
    return body


def new_record(index: int, warmup: bool, prompt: Prompt) -> dict[str, Any]:
    return {"index": index, "warmup": warmup, "send_s": 0.0, "ttft_s": None, "itl_s": [], "e2el_s": None,
            "prompt_tokens": prompt.prompt_len, "output_tokens": 0, "token_ids": None, "finish_reason": None,
            "stop_reason": None, "text": "", "error": None}


class Stream:
    """One request's streamed answer, folded into its record as messages arrive."""

    def __init__(self, record: dict[str, Any], sent: float) -> None:
        self.record, self.sent, self.last = record, sent, sent
        self.ids: list[int] = []
        self.text: list[str] = []
        self.completion_tokens: int | None = None

    def take(self, events, now: float) -> None:
        record = self.record
        for event in events:
            if event.kind == "tokens":
                if record["ttft_s"] is None:
                    record["ttft_s"] = now - self.sent
                else:
                    record["itl_s"].append(now - self.last)
                self.last = now
                self.text.append(event.text)
                self.ids += event.token_ids
                if event.finish_reason is not None:
                    record["finish_reason"], record["stop_reason"] = event.finish_reason, event.stop_reason
            elif event.kind == "usage":
                self.completion_tokens = event.completion_tokens
                if event.prompt_tokens is not None:
                    record["prompt_tokens"] = event.prompt_tokens
            elif event.kind == "error" and record["error"] is None:
                record["error"] = f"error event in the stream: {event.error}"

    def finish(self) -> None:
        record = self.record
        record["text"] = "".join(self.text)
        record["token_ids"] = self.ids if self.ids else None
        record["output_tokens"] = self.completion_tokens if self.completion_tokens is not None else len(self.ids)
        if record["ttft_s"] is None:
            record["error"] = record["error"] or NO_TOKENS
        else:
            record["e2el_s"] = self.last - self.sent
            if record["finish_reason"] is None and record["error"] is None:
                record["error"] = "the stream ended without a finish reason"


async def send(session, url: str, body: dict[str, Any], record: dict[str, Any], t0: float,
               timeout_s: float) -> None:
    import aiohttp

    sent = time.perf_counter()
    record["send_s"] = sent - t0
    stream = Stream(record, sent)
    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if response.status != 200:
                detail = (await response.text())[:500]
                record["error"] = f"HTTP {response.status} {response.reason or ''}: {detail}".strip()
                return
            parser = StreamParser()
            async for chunk in response.content.iter_any():
                stream.take(parser.feed(chunk), time.perf_counter())
            stream.take(parser.close(), time.perf_counter())
    except asyncio.TimeoutError:
        record["error"] = f"timeout: no complete answer within request_timeout_s={timeout_s:g}"
    except (aiohttp.ClientError, OSError) as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"[:1000]
    finally:
        stream.finish()


class Driver:
    """Sends prompts to one server with vllm bench serve's arrival process and concurrency cap."""

    def __init__(self, base_url: str, model: str, load: dict[str, Any], sampling: dict[str, Any],
                 ignore_eos: bool, on_sent: Callable[[int], None] | None = None,
                 on_done: Callable[[dict[str, Any]], None] | None = None, connection_cap: int | None = None) -> None:
        self.base_url, self.model, self.load, self.sampling = base_url.rstrip("/"), model, load, sampling
        self.ignore_eos, self.on_sent, self.on_done = ignore_eos, on_sent, on_done
        caps = [c for c in (load.get("max_concurrency"), connection_cap) if c]
        self.cap = min(caps) if caps else None
        self.streaming = 0
        self.in_flight: dict[int, int] = {}

    def url(self, prompt: Prompt) -> str:
        return self.base_url + ("/v1/chat/completions" if prompt.chat else "/v1/completions")

    async def one(self, session, gate, prompt: Prompt, record: dict[str, Any], t0: float) -> None:
        async with gate:
            self.streaming += 1
            if not record["warmup"]:
                self.in_flight[record["index"]] = self.streaming
            try:
                await send(session, self.url(prompt), request_body(self.model, prompt, self.sampling,
                                                                   self.ignore_eos),
                           record, t0, self.load["request_timeout_s"])
            finally:
                self.streaming -= 1
                if self.on_done is not None:
                    self.on_done(record)

    async def run(self, prompts: list[Prompt]) -> LoadResult:
        import aiohttp

        cap = self.cap
        connector = aiohttp.TCPConnector(limit=cap or 0, limit_per_host=cap or 0, keepalive_timeout=60,
                                         enable_cleanup_closed=True, force_close=False)
        gate = asyncio.Semaphore(cap) if cap else contextlib.nullcontext()
        async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                         timeout=aiohttp.ClientTimeout(total=None)) as session:
            warm = [new_record(i, True, prompts[i % len(prompts)]) for i in range(self.load["warmup_requests"])]
            t_warm = time.perf_counter()
            await asyncio.gather(*(self.one(session, gate, prompts[i % len(prompts)], r, t_warm)
                                   for i, r in enumerate(warm)))
            t0 = time.perf_counter()
            for r in warm:
                r["send_s"] -= t0 - t_warm  # warm-ups happened before the load's start
            measured = await (self.soak(session, gate, prompts, t0) if self.load.get("duration_s")
                              else self.fixed(session, gate, prompts, t0))
            duration = time.perf_counter() - t0
        return LoadResult(records=warm + measured, duration_s=duration, in_flight=dict(self.in_flight))

    async def fixed(self, session, gate, prompts: list[Prompt], t0: float) -> list[dict[str, Any]]:
        """num_prompts requests at vllm's arrival times."""
        ramp = ((self.load["ramp_up_strategy"], self.load["ramp_up_start_rps"], self.load["ramp_up_end_rps"])
                if self.load.get("ramp_up_strategy") else None)
        due = arrival_times(len(prompts), self.load["request_rate"], self.load["burstiness"], self.load["seed"],
                            ramp)
        records = [new_record(i, False, p) for i, p in enumerate(prompts)]
        tasks = []
        for i, (prompt, at) in enumerate(zip(prompts, due)):
            await _sleep_until(t0 + at)
            tasks.append(asyncio.create_task(self.one(session, gate, prompt, records[i], t0)))
            if self.on_sent:
                self.on_sent(i + 1)
        await asyncio.gather(*tasks)
        return records

    async def soak(self, session, gate, prompts: list[Prompt], t0: float) -> list[dict[str, Any]]:
        """Prompts cycled until duration_s has passed, then the ones in flight finish. Without a rate, only
        max_concurrency (else num_prompts) requests are queued at a time: an unbounded queue is no load."""
        rate = math.inf if self.load["request_rate"] == "inf" else float(self.load["request_rate"])
        gaps = RandomGaps(rate, self.load["burstiness"], self.load["seed"])
        queue = asyncio.Semaphore(self.cap or len(prompts)) if rate == math.inf else None
        end = t0 + self.load["duration_s"]
        records: list[dict[str, Any]] = []
        tasks = []
        at = t0
        for i in itertools.count():
            at += next(gaps)
            if at >= end:
                break
            await _sleep_until(at)
            if queue is not None:
                await queue.acquire()
                if time.perf_counter() >= end:
                    break
            prompt = prompts[i % len(prompts)]
            records.append(new_record(i, False, prompt))
            task = asyncio.create_task(self.one(session, gate, prompt, records[-1], t0))
            if queue is not None:
                task.add_done_callback(lambda _t: queue.release())
            tasks.append(task)
            if self.on_sent:
                self.on_sent(i + 1)
        await asyncio.gather(*tasks)
        return records


async def _sleep_until(when: float) -> None:
    delay = when - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


def drive(base_url: str, model: str, prompts: list[Prompt], load: dict[str, Any], sampling: dict[str, Any],
          ignore_eos: bool, on_sent: Callable[[int], None] | None = None,
          on_done: Callable[[dict[str, Any]], None] | None = None, connection_cap: int | None = None) -> LoadResult:
    return asyncio.run(Driver(base_url, model, load, sampling, ignore_eos, on_sent, on_done,
                              connection_cap).run(prompts))
