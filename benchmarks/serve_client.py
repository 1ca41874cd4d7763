"""Is our load driver the bottleneck? One `vllm serve` (the tiny model), two clients, the same load: our driver
(runtime/dsv4rt/loadgen.py, in this process) and `vllm bench serve` (its Python module, in a child process),
alternating, ROUNDS rounds each. Prints both output throughputs and median TTFTs, and our/vllm ratios.
Target (issue 14): ours >= 0.97x vllm bench serve's output throughput, the same median TTFT within noise.

    .venv-engine/bin/python benchmarks/serve_client.py [--rounds 3] [--num-prompts 200] [--max-concurrency 8]

Runs in the engine's venv (vLLM, aiohttp). Random dataset, request rate inf, greedy, ignore_eos (as vllm forces for
random), so both clients ask for exactly the same number of tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "runtime"))

import dsv4rt  # noqa: E402,F401  (puts dsv4ctl on sys.path)
from dsv4rt import loadgen, loadplan, server as serverlib  # noqa: E402
from dsv4ctl.judge.serving import summarise  # noqa: E402

VLLM_BENCH = ("import sys\n"
              "from vllm.benchmarks.serve import add_cli_args, main\n"
              "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
              "parser = FlexibleArgumentParser()\n"
              "add_cli_args(parser)\n"
              "main(parser.parse_args(sys.argv[1:]))\n")


def server_spec(args) -> dict:
    return {"model": {"path": str(args.model), "max_model_len": 512, "gpu_memory_utilization": 0.9,
                      "dtype": "float32", "enforce_eager": True, "seed": 0, "trust_remote_code": False,
                      "kv_cache_dtype": "auto", "extra": {"kv_cache_memory_bytes": 64 * 2 ** 20}},
            "parallel": {"tp": 1}, "serve": {"args": []}, "platform": "cpu"}


def load_settings(args) -> dict:
    return {"dataset": "random", "random_input_len": args.input_len, "random_output_len": args.output_len,
            "random_range_ratio": 0.0, "seed": 0, "num_prompts": args.num_prompts, "request_rate": "inf",
            "burstiness": 1.0, "max_concurrency": args.max_concurrency, "warmup_requests": 0,
            "request_timeout_s": 600, "duration_s": None}


def ours(base_url: str, model: str, args) -> dict:
    load = load_settings(args)
    prompts = loadplan.random_prompts(load, json.loads((args.model / "config.json").read_text())["vocab_size"],
                                      loadplan.special_token_ids(args.model))
    result = loadgen.drive(base_url, model, prompts, load, {"temperature": 0.0, "top_p": 1.0}, ignore_eos=True)
    metrics = summarise(result.records, result.duration_s)
    assert metrics["failed"] == 0, [r["error"] for r in result.records if r["error"]][:3]
    return metrics


def vllm_bench(base_url: str, model: str, args, out_dir: Path, round_: int) -> dict:
    name = f"vllm-{round_}.json"
    command = [sys.executable, "-c", VLLM_BENCH, "--backend", "openai", "--base-url", base_url,
               "--endpoint", "/v1/completions", "--model", model, "--tokenizer", str(args.model),
               "--dataset-name", "random", "--random-input-len", str(args.input_len),
               "--random-output-len", str(args.output_len), "--random-range-ratio", "0",
               "--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.max_concurrency),
               "--request-rate", "inf", "--temperature", "0", "--seed", "0", "--disable-tqdm",
               "--save-result", "--result-dir", str(out_dir), "--result-filename", name]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads((out_dir / name).read_text())
    assert result["failed"] == 0 and result["completed"] == args.num_prompts, result["failed"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-qwen2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-prompts", type=int, default=200)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--max-concurrency", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    port = serverlib.free_port()
    base_url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)
        server = serverlib.start(server_spec(args), port, out_dir / "server.log", {})
        try:
            ready = server.wait_ready(base_url, 300)
            model = serve_model(base_url)
            print(f"server ready in {ready:.1f}s; load: {args.num_prompts} random prompts, {args.input_len} in / "
                  f"{args.output_len} out, rate inf, max concurrency {args.max_concurrency}", flush=True)
            ours(base_url, model, args)  # warm-up, not counted
            rows = run_rounds(base_url, model, args, out_dir)
        finally:
            server.stop(20)
            server.close()
    print_summary(rows)
    return 0


def serve_model(base_url: str) -> str:
    from dsv4rt.serve import served_model

    return served_model(base_url)


def run_rounds(base_url: str, model: str, args, out_dir: Path) -> list[tuple[str, float, float]]:
    """Alternating, and the order flips each round, so a drift in the machine's speed hits both clients alike."""
    rows = []
    for round_ in range(args.rounds):
        order = ("ours", "vllm") if round_ % 2 == 0 else ("vllm", "ours")
        for client in order:
            m = ours(base_url, model, args) if client == "ours" else vllm_bench(base_url, model, args, out_dir,
                                                                               round_)
            rows.append((client, m["output_throughput"], m["median_ttft_ms"]))
            print(f"round {round_ + 1} {client:>4}: output_throughput {m['output_throughput']:8.1f} tok/s  "
                  f"median_ttft_ms {m['median_ttft_ms']:7.2f}", flush=True)
    return rows


def print_summary(rows: list[tuple[str, float, float]]) -> None:
    def med(client: str, column: int) -> float:
        return statistics.median(r[column] for r in rows if r[0] == client)

    ratio_tput = med("ours", 1) / med("vllm", 1)
    ratio_ttft = med("ours", 2) / med("vllm", 2)
    print(f"median output_throughput: ours {med('ours', 1):.1f}, vllm bench serve {med('vllm', 1):.1f} tok/s "
          f"-> ratio {ratio_tput:.3f} (target >= 0.97)")
    print(f"median of median_ttft_ms: ours {med('ours', 2):.2f}, vllm bench serve {med('vllm', 2):.2f} ms "
          f"-> ratio {ratio_ttft:.3f}")


if __name__ == "__main__":
    sys.exit(main())
