"""Hand-made serve run directories, shaped as the job writes them (runtime/dsv4rt/serve.py): raw.log with the
stages, SERVER_READY, DSV4_SERVE, one block per measured request (or DSV4_REQUEST_ERROR), DSV4_METRICS,
DSV4_VERDICT and PY_EXIT; serve-requests.jsonl, serve-memory.jsonl and server.log beside it."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from dsv4ctl.judge import markers
from dsv4ctl.judge.serving import is_completed, summarise

from .conftest import FIXTURES

SERVING = FIXTURES / "serving"
EOS = 2
BOS = 1


def record(index: int, *, send_s: float, ttft_s: float = 0.05, gaps: list[float] | None = None,
           ids: list[int] | None = None, finish: str | None = "length", stop: Any = None, error: str | None = None,
           warmup: bool = False, prompt_tokens: int = 16) -> dict[str, Any]:
    """One record of serve-requests.jsonl; a failed one when `error` is given."""
    if error is not None:
        return {"index": index, "warmup": warmup, "send_s": send_s, "ttft_s": None, "itl_s": [], "e2el_s": None,
                "prompt_tokens": prompt_tokens, "output_tokens": 0, "token_ids": None, "finish_reason": None,
                "stop_reason": None, "text": "", "error": error}
    ids = ids if ids is not None else [100 + (index * 7 + k * 3) % 50 for k in range(8)]
    gaps = gaps if gaps is not None else [0.01 + 0.001 * ((index + k) % 5) for k in range(len(ids) - 1)]
    return {"index": index, "warmup": warmup, "send_s": send_s, "ttft_s": ttft_s, "itl_s": gaps,
            "e2el_s": ttft_s + sum(gaps), "prompt_tokens": prompt_tokens, "output_tokens": len(ids),
            "token_ids": ids, "finish_reason": finish, "stop_reason": stop,
            "text": " ".join(f"w{t}" for t in ids if t != EOS), "error": None}


def load_records(n: int = 12, seed: int = 7) -> list[dict[str, Any]]:
    """A steady load: n requests, Poisson-ish sends, lengths that vary by request."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(8.0)
        ids = [100 + rng.randrange(200) for _ in range(4 + i % 5)]
        out.append(record(i, send_s=round(t, 6), ttft_s=round(rng.uniform(0.02, 0.2), 6), ids=ids,
                          gaps=[round(rng.uniform(0.005, 0.03), 6) for _ in ids[1:]]))
    return out


def flat_memory(n: int = 30, start_mib: float = 900.0, step_s: float = 2.0, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"t_s": 5.0 + i * step_s, "rss_mib": start_mib + rng.uniform(-3, 3), "device_mib": None}
            for i in range(n)]


def growing_memory(n: int = 30, mib_per_s: float = 1.5, step_s: float = 2.0, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"t_s": 5.0 + i * step_s, "rss_mib": 900.0 + mib_per_s * i * step_s + rng.uniform(-2, 2),
             "device_mib": None} for i in range(n)]


def serve_spec(**load: Any) -> dict[str, Any]:
    """The parts of a serve spec's snapshot the serve verdict reads."""
    sampling = load.pop("sampling", {})
    return {"mode": "serve", "load": {"dataset": "random", "num_prompts": 12, "duration_s": None,
                                      "memory_limit_mib": None, "slo": {"ttft_ms": None, "tpot_ms": None,
                                                                        "e2el_ms": None}, **load},
            "sampling": {"max_tokens": 8, "temperature": 0.0, "ignore_eos": True, **sampling},
            "expect": {"bos_id": BOS, "max_repeat_run": 8}, "requests": [{"prompt": "hi"}]}


def write_run(run_dir: Path, records: list[dict[str, Any]], *, memory: list[dict[str, Any]] | None = None,
              server_log: str | None = "server-clean.log", spec: dict[str, Any] | None = None,
              py_exit: int | None = 0, verdict: str | None = "COHERENT", ready_s: float | None = 4.0,
              raw_tail: list[str] = (), extra_serve: dict[str, Any] | None = None) -> Path:
    """Write a serve run's directory; returns raw.log's path. `memory=None` writes flat memory; `server_log` names a
    fixture in tests/fixtures/serving (None: no server.log). `ready_s=None`: the server never became ready (no
    SERVER_READY, no load); `py_exit=None` / `verdict=None`: the job was killed before printing them. Blocks are
    printed as the job prints them, the request's own index on TOKEN_IDS (`TOKEN_IDS[3]: [...]`)."""
    spec = spec or serve_spec()
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "serve-requests.jsonl", "w", encoding="utf-8") as out:
        for r in records:
            out.write(json.dumps(r) + "\n")
    with open(run_dir / "serve-memory.jsonl", "w", encoding="utf-8") as out:
        for m in flat_memory() if memory is None else memory:
            out.write(json.dumps(m) + "\n")
    if server_log is not None:
        (run_dir / "server.log").write_text((SERVING / server_log).read_text(encoding="utf-8"), encoding="utf-8")
    measured = [r for r in records if not r["warmup"]]
    lines = [markers.stage_line("env"), markers.stage_line("serve start"),
             markers.dsv4_line("DSV4_SERVE", {"load": spec["load"], "ignore_eos": spec["sampling"]["ignore_eos"],
                                              "expect": {"bos_id": BOS, "max_repeat_run": 8},
                                              "files": {"server_log": "server.log",
                                                        "requests": "serve-requests.jsonl",
                                                        "memory": "serve-memory.jsonl"}, **(extra_serve or {})})]
    if ready_s is not None:
        lines += [markers.server_ready_line(ready_s), markers.stage_line("load")]
    if verdict is not None:
        lines.append(markers.dsv4_line("DSV4_EXPECT", {"ignore_eos": spec["sampling"]["ignore_eos"],
                                                       "n_requests": len(measured), "bos_id": BOS,
                                                       "max_repeat_run": 8}))
        for r in measured:
            if not is_completed(r):
                lines.append(markers.dsv4_line("DSV4_REQUEST_ERROR", {"index": r["index"], "error": r["error"]}))
                continue
            lines += [markers.request_line(r["index"]), f"TOKEN_IDS[{r['index']}]: {json.dumps(r['token_ids'])}",
                      markers.field_line("FINISH_REASON", str(r["finish_reason"])),
                      markers.field_line("OUTPUT_REPR", repr(r["text"])), markers.field_line("OUTPUT", r["text"])]
        duration = max((r["send_s"] + (r["e2el_s"] or 0) for r in measured), default=1.0)
        lines.append(markers.dsv4_line("DSV4_METRICS", summarise(records, duration, spec["load"]["slo"])))
        lines += [markers.stage_line("serve stop"), markers.dsv4_line("DSV4_VERDICT", verdict)]
    lines += list(raw_tail)
    if py_exit is not None:
        lines.append(markers.py_exit_line(py_exit))
    raw = run_dir / "raw.log"
    raw.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return raw
