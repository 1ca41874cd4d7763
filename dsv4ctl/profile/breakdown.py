"""One trace file's breakdown: kernel time, busy and idle time, time per category and per module, launches per
step, the top kernels. A CPU-only trace (the CPU engine) has no device events: its work items are the CPU ops'
self time on each thread, and the breakdown says so (`device: cpu`).

What is kept while streaming is a few numbers per kernel, launch, module and CPU op, at most MAX_KEPT of them:
a larger trace is refused in one line (profile fewer steps), so memory stays bounded whatever the file holds."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .categories import RuleSet, load_rules, module_class
from .modules import module_totals, stacks_at
from .reader import TraceError, read_trace

MAX_KEPT = 4_000_000  # kernels + launches + module frames + CPU ops kept for the join (~100 bytes each)
TOP_KERNELS = 10
DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset",
               "Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "privateuse1_runtime"}
STEP_PREFIXES = ("ProfilerStep#", "execute_context_")  # torch's schedule; vLLM's per-step annotation


@dataclass
class Breakdown:
    path: str
    rank: int
    device: str  # "gpu" (device kernels) or "cpu" (CPU ops' self time)
    kernel_us: float
    busy_us: float
    span_us: float
    categories: dict[str, float]
    modules: dict[str, float]
    steps: int
    launches: int
    top_kernels: list[dict[str, Any]]
    rules_hash: str
    unattributed_us: float = 0.0
    events: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def idle_us(self) -> float:
        return max(0.0, self.span_us - self.busy_us)

    def to_json(self) -> dict[str, Any]:
        total = self.kernel_us or 1.0
        return {
            "path": self.path, "rank": self.rank, "device": self.device,
            "time_source": "device kernels" if self.device == "gpu" else "CPU ops' self time (no device events)",
            "kernel_us": round(self.kernel_us, 3), "gpu_busy_us": round(self.busy_us, 3),
            "gpu_idle_us": round(self.idle_us, 3), "span_us": round(self.span_us, 3),
            "categories": [{"name": n, "kernel_us": round(us, 3), "share": round(us / total, 6)}
                           for n, us in self.categories.items()],
            "modules": [{"name": n, "kernel_us": round(us, 3), "share": round(us / total, 6)}
                        for n, us in sorted(self.modules.items(), key=lambda kv: -kv[1])],
            "steps": self.steps, "launches": self.launches,
            "launches_per_step": round(self.launches / self.steps, 3) if self.steps else None,
            "top_kernels": self.top_kernels, "unattributed_us": round(self.unattributed_us, 3),
            "events": self.events, "rules_hash": self.rules_hash, "meta": self.meta,
        }


class _Collector:
    """What read_trace hands each event to: keeps the few numbers the join needs, nothing else."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.names: dict[str, int] = {}
        self.device: list[tuple[float, float, int, str, Any, Any]] = []  # ts, dur, name, kind, correlation, ext
        self.launches: dict[Any, tuple[Any, float]] = {}  # correlation -> (thread, ts)
        self.ext_ops: dict[Any, tuple[Any, float]] = {}  # External id of a cpu_op -> (thread, ts)
        self.modules: dict[Any, list[tuple[float, float, int]]] = defaultdict(list)
        self.ops: list[tuple[Any, float, float, int]] = []  # thread, ts, dur, name
        self.steps: list[tuple[float, float]] = []
        self.kept = 0
        self.events = 0

    def name_id(self, name: str) -> int:
        found = self.names.get(name)
        if found is None:
            found = self.names[name] = len(self.names)
        return found

    def __call__(self, e: dict[str, Any]) -> None:
        self.events += 1
        if e.get("ph") != "X":
            return
        cat = e.get("cat")
        try:
            ts = float(e["ts"])
            dur = float(e.get("dur") or 0.0)
        except (KeyError, TypeError, ValueError):
            return  # an X event without a time: nothing to add up
        if dur < 0:
            dur = 0.0
        args = e.get("args") or {}
        if not isinstance(args, dict):
            args = {}
        name = e.get("name")
        name = name if isinstance(name, str) else str(name)
        kind = DEVICE_CATS.get(cat)
        if kind is not None:
            self.device.append((ts, dur, self.name_id(name), kind, args.get("correlation"), args.get("External id")))
        elif cat in LAUNCH_CATS:
            corr = args.get("correlation")
            if corr is None:
                return
            self.launches[corr] = ((e.get("pid"), e.get("tid")), ts)
        elif cat == "python_function":
            if name.startswith("nn.Module: "):
                self.modules[(e.get("pid"), e.get("tid"))].append((ts, ts + dur, self.name_id(module_class(name))))
            else:
                return
        elif cat in ("cpu_op", "user_annotation"):
            if name.startswith(STEP_PREFIXES):
                self.steps.append((ts, ts + dur))
                return
            if cat == "user_annotation":
                return
            thread = (e.get("pid"), e.get("tid"))
            self.ops.append((thread, ts, dur, self.name_id(name)))
            ext = args.get("External id")
            if ext is not None:
                self.ext_ops[ext] = (thread, ts)
        elif cat == "gpu_user_annotation" and name.startswith(STEP_PREFIXES):
            self.steps.append((ts, ts + dur))
            return
        else:
            return
        self.kept += 1
        if self.kept > MAX_KEPT:
            raise TraceError(f"{self.path}: more than {MAX_KEPT:,} kernels, launches, modules and ops: profile "
                             "fewer steps (profile.steps) or split the trace")


def read_breakdown(path: str | Path, rules: RuleSet | None = None, rank: int | None = None) -> Breakdown:
    """Stream one trace file and break its time down under `rules` (the shipped ones by default)."""
    path = Path(path)
    rules = rules or load_rules()
    got = _Collector(path)
    from .rocprof import read_rocprof, sniff

    header = read_rocprof(path, got) if sniff(path) else read_trace(path, got)
    info = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    if rank is None:
        rank = info.get("rank") if isinstance(info.get("rank"), int) else 0
    meta = {k: header[k] for k in ("vllm_version", "with_stack", "host_name", "tool") if k in header}
    if "world_size" in info:
        meta["world_size"] = info["world_size"]
    if got.device:
        result = _device_breakdown(got, rules)
    else:
        result = _cpu_breakdown(got, rules)
    return Breakdown(path=str(path), rank=rank, rules_hash=rules.digest, events=got.events, meta=meta,
                     steps=len(got.steps), **result)


def _launch_queries(got: _Collector) -> tuple[list[tuple[Any, float, int]], list[bool]]:
    queries, found = [], []
    for i, (_, _, _, _, corr, ext) in enumerate(got.device):
        where = got.launches.get(corr) if corr is not None else None
        if where is None and ext is not None:
            where = got.ext_ops.get(ext)
        found.append(where is not None)
        if where is not None:
            queries.append((where[0], where[1], i))
    return queries, found


def _device_breakdown(got: _Collector, rules: RuleSet) -> dict[str, Any]:
    names = list(got.names)
    queries, found = _launch_queries(got)
    stacks = stacks_at(got.modules, queries)
    categories = dict.fromkeys(rules.categories, 0.0)
    paths: list[tuple[tuple[str, ...] | None, float]] = []
    per_kernel: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])
    comm: list[tuple[float, float]] = []
    compute: list[tuple[float, float]] = []
    unattributed = 0.0
    for i, (ts, dur, name, kind, _, _) in enumerate(got.device):
        ids = stacks.get(i)
        path = tuple(names[m] for m in ids) if ids is not None else None
        category = rules.categorise(kind, names[name], "/".join(path or ()))
        categories[category] = categories.get(category, 0.0) + dur
        paths.append((path, dur))
        unattributed += dur if path is None else 0.0
        entry = per_kernel[name]
        entry[0] += 1
        entry[1] += dur
        (comm if category == "communication" else compute).append((ts, ts + dur))
    _split_communication(categories, comm, compute)
    return {"device": "gpu", "kernel_us": sum(d for _, d, *_ in got.device),
            "busy_us": _union_length([(ts, ts + d) for ts, d, *_ in got.device]),
            "span_us": _span([(ts, ts + d) for ts, d, *_ in got.device]), "categories": categories,
            "modules": module_totals(paths), "launches": len(got.device),
            "top_kernels": _top(per_kernel, names), "unattributed_us": unattributed}


def _cpu_breakdown(got: _Collector, rules: RuleSet) -> dict[str, Any]:
    """CPU ops' self time (duration less their children's) on each thread, as the work items of a CPU run."""
    names = list(got.names)
    selves = _self_times(got.ops)
    stacks = stacks_at(got.modules, [(got.ops[i][0], got.ops[i][1], i) for i in range(len(got.ops))])
    categories = dict.fromkeys(rules.categories, 0.0)
    paths, per_op = [], defaultdict(lambda: [0, 0.0])
    for i, (_, _, _, name) in enumerate(got.ops):
        path = tuple(names[m] for m in stacks.get(i, ()))
        category = rules.categorise("cpu_op", names[name], "/".join(path))
        categories[category] = categories.get(category, 0.0) + selves[i]
        paths.append((path, selves[i]))
        per_op[name][0] += 1
        per_op[name][1] += selves[i]
    intervals = [(ts, ts + dur) for _, ts, dur, _ in got.ops]
    categories["communication_exposed"] = categories.pop("communication", 0.0)
    categories["communication_overlapped"] = 0.0
    return {"device": "cpu", "kernel_us": sum(selves), "busy_us": _union_length(intervals),
            "span_us": _span(intervals), "categories": categories, "modules": module_totals(paths),
            "launches": len(got.ops), "top_kernels": _top(per_op, names)}


def _self_times(ops: list[tuple[Any, float, float, int]]) -> list[float]:
    selves = [dur for _, _, dur, _ in ops]
    by_thread: dict[Any, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        by_thread[op[0]].append(i)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (ops[i][1], -ops[i][2]))
        stack: list[int] = []
        for i in indices:
            ts = ops[i][1]
            while stack and ops[stack[-1]][1] + ops[stack[-1]][2] <= ts:
                stack.pop()
            if stack:  # a child: its time is not its parent's own
                parent = stack[-1]
                selves[parent] -= min(ops[i][2], ops[parent][1] + ops[parent][2] - ts)
            stack.append(i)
    return [max(0.0, s) for s in selves]


def _split_communication(categories: dict[str, float], comm: list[tuple[float, float]],
                         compute: list[tuple[float, float]]) -> None:
    """Communication kernel time split into the part no compute kernel overlaps (exposed) and the rest."""
    merged = _merge(compute)
    starts = [s for s, _ in merged]
    overlapped = 0.0
    for s, e in comm:
        i = max(0, bisect.bisect_right(starts, s) - 1)
        while i < len(merged) and merged[i][0] < e:
            overlapped += max(0.0, min(e, merged[i][1]) - max(s, merged[i][0]))
            i += 1
    total = categories.pop("communication", 0.0)
    categories["communication_exposed"] = total - overlapped
    categories["communication_overlapped"] = overlapped


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def _union_length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in _merge(intervals))


def _span(intervals: list[tuple[float, float]]) -> float:
    return max(e for _, e in intervals) - min(s for s, _ in intervals) if intervals else 0.0


def _top(per_name: dict[int, list[float]], names: list[str]) -> list[dict[str, Any]]:
    ranked = sorted(per_name.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
    return [{"name": names[n], "count": int(c), "kernel_us": round(us, 3)} for n, (c, us) in ranked]
