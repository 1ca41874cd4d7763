"""Time and peak memory of reading a big torch trace: dsv4ctl's streaming reader (and its standard-library
fallback), a plain json.load with a hand-written kernel sum, ijson (when a venv with it is given), HTA (when a venv
with holistictraceanalysis is given) and the JSON decoders dsv4ctl chose among (when a venv with msgspec, orjson
and pysimdjson is given: each decodes the same 1 MiB slices of traceEvents and reads the fields a breakdown
needs), each in its own process on the same file, best of --repeat; and each one's total kernel time against
the trace's own sum.

    python benchmarks/profile_parse.py --make /tmp/big.pt.trace.json.gz --events 800000
    python benchmarks/profile_parse.py /tmp/big.pt.trace.json.gz [--ijson-venv V] [--hta-venv V] [--decoders-venv V]

The made trace is GPU-shaped (Kineto's layout: python_function module frames, cpu_op, cuda_runtime launches with
`correlation`, kernels on two streams); its own kernel sum is written beside it (`.sum.json`)."""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = [("Cijk_Alik_Bljk_BBS_BH_MT128x128x64", 40.0), ("fused_moe_kernel", 90.0),
           ("_fwd_sparse_decode_kernel", 55.0), ("triton_poi_fused_add_mul_0", 4.0),
           ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", 3.0),
           ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", 20.0)]
FRAMES = ["DeepseekV4ForCausalLM", "DeepseekV4DecoderLayer", "DeepseekV4MoE", "DeepseekV4MLP",
          "MergedColumnParallelLinear"]


def make(path: Path, events: int) -> None:
    rng = random.Random(0)
    total, n, t, corr = 0.0, 0, 1000.0, 1
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "with_stack": 1, '
                '"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, "displayTimeUnit": "ms", '
                '"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [\n')
        first = True
        while n < events:
            name, dur = KERNELS[corr % len(KERNELS)]
            dur = round(dur * (0.8 + 0.4 * rng.random()), 3)
            batch = [{"ph": "X", "cat": "python_function", "name": f"nn.Module: {fr}_{corr % 61}", "pid": 7,
                      "tid": 7, "ts": round(t + i * 0.1, 3), "dur": round(20.0 - i * 0.3, 3),
                      "args": {"Python parent id": corr * 8 + i - 1, "Python id": corr * 8 + i,
                               "Python module id": i, "Ev Idx": n + i}} for i, fr in enumerate(FRAMES[:2])]
            batch.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": round(t + 2, 3),
                          "dur": 8.0, "args": {"External id": corr, "Record function id": 0, "Ev Idx": n + 5,
                                               "Sequence number": corr, "Fwd thread id": 0}})
            batch.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
                          "ts": round(t + 3, 3), "dur": 4.0, "args": {"External id": corr, "cbid": 211,
                                                                      "correlation": corr}})
            batch.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 13 if "nccl" in name else 7,
                          "ts": round(t + 10, 3), "dur": dur,
                          "args": {"External id": corr, "queued": 0, "device": 0, "context": 1, "stream": 7,
                                   "correlation": corr, "registers per thread": 128, "shared memory": 0,
                                   "blocks per SM": 1.2, "warps per SM": 9.5, "grid": [132, 1, 1],
                                   "block": [256, 1, 1], "est. achieved occupancy %": 12}})
            total += dur
            for e in batch:
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
            n += len(batch)
            corr += 1
            t += 30.0
        f.write('\n], "traceName": "big.pt.trace.json"}\n')
    path.with_suffix(".sum.json").write_text(json.dumps({"kernel_us": total, "events": n}))


DSV4 = ("import resource, sys, time\nt = time.perf_counter()\nfrom dsv4ctl.profile.breakdown import read_breakdown\n"
        "b = read_breakdown(sys.argv[1])\nprint(time.perf_counter() - t, b.kernel_us, "
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
DSV4_STDLIB = ("import resource, sys, time\nt = time.perf_counter()\nfrom dsv4ctl.profile import events\n"
               "events._TYPED = events._ANY = None\nfrom dsv4ctl.profile.breakdown import read_breakdown\n"
               "b = read_breakdown(sys.argv[1])\nprint(time.perf_counter() - t, b.kernel_us, "
               "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
# the decoders on dsv4ctl's slices: gunzip, cut at the last '},' of each 1 MiB, decode, read the fields
SLICES = ("import gzip, resource, sys, time\nt = time.perf_counter()\nf = gzip.open(sys.argv[1])\n"
          "buf = f.read(1 << 20); buf = buf[buf.index(b'[', buf.index(b'traceEvents')) + 1:]\nk = 0.0\n{setup}\n"
          "while True:\n    more = f.read(1 << 20)\n    buf += more\n    cut = buf.rfind(b'},')\n"
          "    if not more:\n        cut = buf.rindex(b'}', 0, buf.rindex(b']'))\n    if cut < 0:\n        continue\n"
          "    piece, buf = b'[' + buf[:cut + 1] + b']', buf[cut + 2:]\n{loop}\n    if not more:\n        break\n"
          "print(time.perf_counter() - t, k, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
FIELDS = "(e{g}'ph'{c}, e{g}'cat'{c}, e{g}'name'{c}, e{g}'ts'{c}, e{g}'pid'{c}, e{g}'tid'{c}, e{g}'args'{c})"
DECODERS = {
    "msgspec typed": ("import msgspec\nfrom dsv4ctl.profile.events import Event\n"
                      "d = msgspec.json.Decoder(list[Event])",
                      "    for e in d.decode(piece):\n        x = (e.ph, e.cat, e.name, e.ts, e.pid, e.tid, e.args)\n"
                      "        if e.cat == 'kernel': k += e.dur"),
    "msgspec untyped": ("import msgspec\nd = msgspec.json.Decoder()",
                        "    for e in d.decode(piece):\n        x = " + FIELDS.format(g=".get(", c=")") + "\n"
                        "        if e.get('cat') == 'kernel': k += e['dur']"),
    "orjson": ("import orjson", "    for e in orjson.loads(piece):\n        x = " + FIELDS.format(g=".get(", c=")")
               + "\n        if e.get('cat') == 'kernel': k += e['dur']"),
    "pysimdjson": ("import simdjson\np = simdjson.Parser()",
                   "    doc = p.parse(piece)\n    for e in doc:\n        x = " + FIELDS.format(g=".get(", c=")")
                   + "\n        if e.get('cat') == 'kernel': k += e['dur']\n    del doc, e, x"),
    "stdlib json.loads": ("import json", "    for e in json.loads(piece):\n        x = "
                          + FIELDS.format(g=".get(", c=")") + "\n        if e.get('cat') == 'kernel': k += e['dur']"),
}
JSON_LOAD = ("import gzip, json, resource, sys, time\nt = time.perf_counter()\nd = json.load(gzip.open(sys.argv[1]))\n"
             "k = sum(e.get('dur', 0) for e in d['traceEvents'] if e.get('cat') == 'kernel')\n"
             "print(time.perf_counter() - t, k, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
IJSON = ("import gzip, ijson, resource, sys, time\nt = time.perf_counter()\nk = 0.0\n"
         "for e in ijson.items(gzip.open(sys.argv[1]), 'traceEvents.item', use_float=True):\n"
         "    if e.get('cat') == 'kernel': k += e.get('dur', 0)\n"
         "print(time.perf_counter() - t, k, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, ijson.backend)")
HTA = ("import resource, sys, time, os, shutil, tempfile\nt = time.perf_counter()\n"
       "from hta.trace_analysis import TraceAnalysis\nd = tempfile.mkdtemp()\n"
       "shutil.copy(sys.argv[1], os.path.join(d, 'rank0.pt.trace.json.gz'))\n"
       "a = TraceAnalysis(trace_dir=d)\ndf = a.t.get_trace(0)\nsym = a.t.symbol_table.get_sym_id_map()\n"
       "k = df[df['cat'] == sym.get('kernel', -1)]['dur'].sum()\n"
       "print(time.perf_counter() - t, float(k), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")


def measure_once(label: str, python: str, code: str, path: Path) -> dict:
    """One run in a fresh process: its seconds, kernel sum and peak memory (or why it failed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        return {"reader": label, "error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    seconds, kernel, rss, *rest = done.stdout.split()
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime  # the whole process, start-up too
    return {"reader": label, "seconds": round(float(seconds), 2), "cpu_s": round(cpu, 2), "kernel_us": float(kernel),
            "peak_mib": round(int(rss) / 1024), **({"backend": rest[0]} if rest else {})}


def measure(readers: list[tuple[str, str, str]], path: Path, repeat: int) -> list[dict]:
    """Each reader `repeat` times, in rounds (every reader once a round, so a busy spell of the machine falls on
    all of them alike); per reader its best run, every run's seconds, and the median of those."""
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in readers}
    for _ in range(repeat):
        for label, python, code in readers:
            if not runs[label] or "error" not in runs[label][-1]:
                runs[label].append(measure_once(label, python, code, path))
    rows = []
    for label, got in runs.items():
        ok = [r for r in got if "error" not in r]
        if not ok:
            rows.append(got[-1])
            continue
        seconds = sorted(r["seconds"] for r in ok)
        best = min(ok, key=lambda r: r["seconds"])
        rows.append({**best, "of": len(ok), "runs_s": [r["seconds"] for r in ok],
                     "median_s": seconds[len(seconds) // 2], "best_cpu_s": min(r["cpu_s"] for r in ok)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, nargs="?")
    ap.add_argument("--make", type=Path)
    ap.add_argument("--events", type=int, default=800_000)
    ap.add_argument("--ijson-venv", type=Path)
    ap.add_argument("--hta-venv", type=Path)
    ap.add_argument("--decoders-venv", type=Path, help="a venv with msgspec, orjson and pysimdjson")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each reader; the best is shown")
    ap.add_argument("--skip-json-load", action="store_true")
    args = ap.parse_args()
    if args.make:
        t = time.perf_counter()
        make(args.make, args.events)
        raw = sum(len(c) for c in iter(lambda f=gzip.open(args.make): f.read(1 << 24), b""))
        print(json.dumps({"made": str(args.make), "seconds": round(time.perf_counter() - t, 1),
                          "gzip_mb": round(args.make.stat().st_size / 1e6, 1), "json_mb": round(raw / 1e6, 1),
                          **json.loads(args.make.with_suffix(".sum.json").read_text())}))
        return
    own = json.loads(args.trace.with_suffix(".sum.json").read_text())
    readers = [("dsv4ctl read_breakdown (msgspec slices)", sys.executable, DSV4),
               ("dsv4ctl read_breakdown, standard library only", sys.executable, DSV4_STDLIB)]
    if not args.skip_json_load:
        readers.append(("json.load + kernel sum", sys.executable, JSON_LOAD))
    if args.ijson_venv:
        readers.append(("ijson items + kernel sum", str(args.ijson_venv / "bin" / "python"), IJSON))
    if args.decoders_venv:
        python = str(args.decoders_venv / "bin" / "python")
        readers += [(f"slices: {label}", python, SLICES.replace("{setup}", setup).replace("{loop}", loop))
                    for label, (setup, loop) in DECODERS.items()]
    if args.hta_venv:
        readers.append(("HTA TraceAnalysis", str(args.hta_venv / "bin" / "python"), HTA))
    rows = measure(readers, args.trace, args.repeat)
    for row in rows:
        if "kernel_us" in row:
            row["kernel_sum_error"] = abs(row["kernel_us"] - own["kernel_us"]) / own["kernel_us"]
        print(json.dumps(row))
    by_label = {r["reader"]: r for r in rows}
    ours, hta = by_label.get(readers[0][0], {}), by_label.get("HTA TraceAnalysis", {})
    if "runs_s" in ours and "runs_s" in hta:  # the same round's runs saw the same machine
        rounds = [round(h / d, 2) for d, h in zip(ours["runs_s"], hta["runs_s"])]
        print(json.dumps({"hta_over_dsv4ctl": {"best": round(hta["seconds"] / ours["seconds"], 2),
                                               "median": round(hta["median_s"] / ours["median_s"], 2),
                                               "each_round": rounds,
                                               "best_cpu": round(hta["best_cpu_s"] / ours["best_cpu_s"], 2)},
                          "peak_memory_ratio": round(ours["peak_mib"] / hta["peak_mib"], 3)}))


if __name__ == "__main__":
    main()
