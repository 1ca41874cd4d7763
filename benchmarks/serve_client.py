"""Is our load driver the bottleneck? One `vllm serve` (the tiny model), two clients, the same load: our driver
(runtime/dsv4rt/loadgen.py, in this process) and `vllm bench serve` (its Python module, in a child process),
alternating, ROUNDS rounds each. Prints both output throughputs and median TTFTs, and our/vllm ratios.
Target (issue 14): ours >= 0.97x vllm bench serve's output throughput, the same median TTFT within noise.

    .venv-engine/bin/python benchmarks/serve_client.py [--rounds 3] [--num-prompts 200] [--max-concurrency 8]

Runs in the engine's venv (vLLM, aiohttp). The same load for both: the prompts of vLLM's own RandomDataset (same
seed, so the same text prompts vllm bench serve sends), request rate inf, greedy, ignore_eos (as vllm forces for
random), so both clients ask for exactly the same tokens. The rounds alternate and flip order each round, and the
summary takes medians: on a shared 2-core machine one run can be 2x off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "runtime"))

import dsv4rt  # noqa: E402,F401  (puts dsv4ctl on sys.path)
from dsv4rt import loadgen, loadplan, server as serverlib  # noqa: E402
from dsv4ctl.judge.serving import summarise  # noqa: E402

# vllm bench serve's own entry (vllm/entrypoints/cli/benchmark/serve.py does the same), with its benchmark()
# coroutine timed in CPU seconds: the client's own cost, which the shared machine's noise does not move much.
VLLM_BENCH = ("import sys, time\n"
              "import vllm.benchmarks.serve as serve\n"
              "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
              "inner = serve.benchmark\n"
              "async def timed(*args, **kwargs):\n"
              "    started = time.process_time()\n"
              "    try:\n"
              "        return await inner(*args, **kwargs)\n"
              "    finally:\n"
              "        print(f'CLIENT_CPU_S {time.process_time() - started}', flush=True)\n"
              "serve.benchmark = timed\n"
              "parser = FlexibleArgumentParser()\n"
              "serve.add_cli_args(parser)\n"
              "serve.main(parser.parse_args(sys.argv[1:]))\n")


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


def vllm_prompts(args) -> list[loadplan.Prompt]:
    """vllm bench serve's random prompts (text), exactly as it samples them with --seed 0."""
    from transformers import AutoTokenizer
    from vllm.benchmarks.datasets import RandomDataset

    tokenizer = AutoTokenizer.from_pretrained(str(args.model))
    samples = RandomDataset(random_seed=0).sample(tokenizer=tokenizer, num_requests=args.num_prompts,
                                                  input_len=args.input_len, output_len=args.output_len,
                                                  range_ratio=0.0)
    return [loadplan.Prompt(max_tokens=s.expected_output_len, text=s.prompt) for s in samples]


def ours(base_url: str, model: str, args, prompts: list[loadplan.Prompt]) -> dict:
    load = load_settings(args)
    started = time.process_time()
    result = loadgen.drive(base_url, model, prompts, load, {"temperature": 0.0, "top_p": 1.0}, ignore_eos=True)
    cpu_s = time.process_time() - started
    metrics = summarise(result.records, result.duration_s)
    metrics["client_cpu_s"] = cpu_s
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
    result["client_cpu_s"] = float(done.stdout.split("CLIENT_CPU_S ")[1].split()[0])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-qwen2")
    parser.add_argument("--rounds", type=int, default=5)
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
            prompts = vllm_prompts(args)
            ours(base_url, model, args, prompts)  # warm-up, not counted
            rows = run_rounds(base_url, model, args, out_dir, prompts)
        finally:
            server.stop(20)
            server.close()
    print_summary(rows)
    return 0


def serve_model(base_url: str) -> str:
    from dsv4rt.serve import served_model

    return served_model(base_url)


def run_rounds(base_url: str, model: str, args, out_dir: Path,
               prompts: list[loadplan.Prompt]) -> list[tuple[str, float, float, float]]:
    """Alternating, and the order flips each round, so a drift in the machine's speed hits both clients alike."""
    rows = []
    for round_ in range(args.rounds):
        order = ("ours", "vllm") if round_ % 2 == 0 else ("vllm", "ours")
        for client in order:
            m = ours(base_url, model, args, prompts) if client == "ours" else vllm_bench(base_url, model, args,
                                                                                         out_dir, round_)
            rows.append((client, m["output_throughput"], m["median_ttft_ms"], m["client_cpu_s"]))
            print(f"round {round_ + 1} {client:>4}: output_throughput {m['output_throughput']:8.1f} tok/s  "
                  f"median_ttft_ms {m['median_ttft_ms']:7.2f}  client CPU {m['client_cpu_s']:.2f} s", flush=True)
    return rows


def print_summary(rows: list[tuple[str, float, float, float]]) -> None:
    def med(client: str, column: int) -> float:
        return statistics.median(r[column] for r in rows if r[0] == client)

    # Each round's two runs sit side by side in time: their ratio cancels the machine's slow drifts.
    pairs = [(a, b) if a[0] == "ours" else (b, a) for a, b in zip(rows[::2], rows[1::2])]
    paired = statistics.median(o[1] / v[1] for o, v in pairs)

    ratio_tput = med("ours", 1) / med("vllm", 1)
    ratio_ttft = med("ours", 2) / med("vllm", 2)
    print(f"median output_throughput: ours {med('ours', 1):.1f}, vllm bench serve {med('vllm', 1):.1f} tok/s "
          f"-> ratio {ratio_tput:.3f} (target >= 0.97)")
    print(f"median of the rounds' paired output_throughput ratios (ours/vllm): {paired:.3f}")
    print(f"median of median_ttft_ms: ours {med('ours', 2):.2f}, vllm bench serve {med('vllm', 2):.2f} ms "
          f"-> ratio {ratio_ttft:.3f}")
    print(f"median client CPU per run: ours {med('ours', 3):.2f} s, vllm bench serve {med('vllm', 3):.2f} s "
          f"-> ratio {med('ours', 3) / med('vllm', 3):.3f}")


if __name__ == "__main__":
    sys.exit(main())
