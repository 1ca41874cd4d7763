"""One trace file's breakdown: kernel time, busy and idle time, time per category and per module, launches per
step, the top kernels. A CPU-only trace (the CPU engine) has no device events: its work items are the CPU ops'
self time on each thread, and the breakdown says so (`device: cpu`).

What is kept while streaming is a few numbers per kernel, launch, module and CPU op, at most MAX_KEPT of them:
a larger trace is refused in one line (profile fewer steps), so memory stays bounded whatever the file holds."""

from __future__ import annotations

import bisect
import gc
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .categories import RuleSet, load_rules, module_class
from .collectives import kernel_collectives, op_collective
from .modules import module_totals, stacks_at, stacks_by_thread
from .reader import TraceError, read_events

if TYPE_CHECKING:
    from .events import Event

MAX_KEPT = 4_000_000  # kernels + launches + module frames + CPU ops kept for the join (~100 bytes each)
MAX_FRAME_NAMES = 1_000_000  # module frame names remembered with their class (instances repeat every step)
TOP_KERNELS = 10
DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset",
               "Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "privateuse1_runtime"}
GPU_SECTION = re.compile(r"^GPU\d+$")
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
    collectives: dict[str, list[float]] = field(default_factory=dict)  # collective -> [kernels, kernel time]
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
            "top_kernels": self.top_kernels,
            "collectives": [{"name": n, "count": int(c), "kernel_us": round(us, 3)}
                            for n, (c, us) in sorted(self.collectives.items(), key=lambda kv: -kv[1][1])],
            "unattributed_us": round(self.unattributed_us, 3),
            "events": self.events, "rules_hash": self.rules_hash, "meta": self.meta,
        }


class _Collector:
    """What read_events hands each batch of events to: keeps the few numbers the join needs, nothing else."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.names: dict[str, int] = {}
        self.frames: dict[str, int] = {}  # an `nn.Module: <Class>_<n>` frame name -> its class name's id
        self.op_kinds: dict[int, int | None] = {}  # a CPU op name's id -> the id of the collective it stands for
        self.device: list[tuple[float, float, int, str, Any, Any, int | None]] = []
        # ts, dur, name id, kind, correlation, External id, the collective its args name (id)
        self.launches: dict[Any, tuple[Any, float]] = {}  # correlation -> (thread, ts)
        self.ext_ops: dict[Any, tuple[Any, float]] = {}  # External id of a cpu_op -> (thread, ts)
        self.modules: dict[Any, list[tuple[float, float, int]]] = defaultdict(list)
        self.comm_ops: dict[Any, list[tuple[float, float, int]]] = defaultdict(list)  # collective ops by thread
        self.ops: list[tuple[Any, float, float, int]] = []  # thread, ts, dur, name
        self.steps: list[tuple[float, float]] = []
        self.threads: dict[tuple[Any, Any], tuple[Any, Any]] = {}  # (pid, tid) -> the one tuple kept for it
        self.sections: dict[str, str] = {}  # pid -> the device kind of its events (rocprof v1 / hipprof JSON)
        self.kept = 0
        self.events = 0

    def name_id(self, name: str) -> int:
        found = self.names.get(name)
        if found is None:
            found = self.names[name] = len(self.names)
        return found

    def frame_id(self, name: str) -> int:
        found = self.frames.get(name)
        if found is None:
            found = self.name_id(module_class(name))
            if len(self.frames) < MAX_FRAME_NAMES:
                self.frames[name] = found
        return found

    def __call__(self, batch: list[Event]) -> None:
        self.events += len(batch)
        names, device, launches, frames, modules, threads, kept = (
            self.names, self.device, self.launches, self.frames, self.modules, self.threads, 0)
        for e in batch:
            if e.ph != "X":
                if e.ph == "M" and e.name == "process_name" and e.args is not None:
                    self._section(e.pid, e.args.label)
                continue
            if e.ts is None:
                continue
            ts, cat, a = e.ts, e.cat, e.args
            dur = e.dur if e.dur >= 0 else 0.0
            kind = DEVICE_CATS.get(cat)  # type: ignore[arg-type]
            if kind is None and cat is None and self.sections:
                kind = self.sections.get(str(e.pid))
            if kind is not None:
                nid = names.get(e.name)
                if nid is None:
                    nid = self.name_id(e.name)
                if a is None:
                    device.append((ts, dur, nid, kind, None, None, None))
                else:
                    device.append((ts, dur, nid, kind, a.correlation, a.external,
                                   None if a.collective is None else self.name_id(a.collective)))
            elif cat in LAUNCH_CATS:
                if a is None or a.correlation is None:
                    continue
                thread = (e.pid, e.tid)
                launches[a.correlation] = (threads.setdefault(thread, thread), ts)  # one tuple per thread kept
            elif cat == "python_function":
                name = e.name
                if not name.startswith("nn.Module: "):
                    continue
                fid = frames.get(name)
                if fid is None:
                    fid = self.frame_id(name)
                modules[(e.pid, e.tid)].append((ts, ts + dur, fid))
            elif cat == "cpu_op" or cat == "user_annotation":
                if e.name.startswith(STEP_PREFIXES):
                    self.steps.append((ts, ts + dur))
                    continue
                if cat == "user_annotation":
                    continue
                self._op(e, ts, dur, a)
            elif cat == "gpu_user_annotation" and e.name.startswith(STEP_PREFIXES):
                self.steps.append((ts, ts + dur))
                continue
            else:
                continue
            kept += 1
        self.kept += kept
        if self.kept > MAX_KEPT:
            raise TraceError(f"{self.path}: more than {MAX_KEPT:,} kernels, launches, modules and ops: profile "
                             "fewer steps (profile.steps) or split the trace")

    def _section(self, pid: Any, label: str | None) -> None:
        """rocprof v1's and hipprof's JSON give no `cat`: a GPU's kernels are the events of the process labelled
        `GPU<n>` (its barrier packets another, `GPU Barriers<n>`), the copies those of `COPY`."""
        kind = "kernel" if label and GPU_SECTION.match(label) else "gpu_memcpy" if label == "COPY" else None
        if kind is not None:
            self.sections[str(pid)] = kind

    def _op(self, e: Event, ts: float, dur: float, a: Any) -> None:
        thread = (e.pid, e.tid)
        thread = self.threads.setdefault(thread, thread)
        nid = self.name_id(e.name)
        if not self.device:  # the CPU ops' self times are the work items only of a trace without device events
            self.ops.append((thread, ts, dur, nid))
        if a is None:
            return
        if a.external is not None:
            self.ext_ops[a.external] = (thread, ts)
        kind = self.op_kinds.get(nid, -1) if a.collective is None else -1
        if kind == -1:
            found = op_collective(e.name, a.collective)
            kind = None if found is None else self.name_id(found)
            if a.collective is None:
                self.op_kinds[nid] = kind
        if kind is not None:
            self.comm_ops[thread].append((ts, ts + dur, kind))


def read_breakdown(path: str | Path, rules: RuleSet | None = None, rank: int | None = None) -> Breakdown:
    """Stream one trace file and break its time down under `rules` (the shipped ones by default)."""
    path = Path(path)
    rules = rules or load_rules()
    got = _Collector(path)
    from .rocprof import read_rocprof, sniff

    collecting = gc.isenabled()
    gc.disable()  # the join keeps ~1 M tuples and no cycles: the collector's passes over them cost ~20%
    try:
        header = read_rocprof(path, got) if sniff(path) else read_events(path, got)
        result = _device_breakdown(got, rules) if got.device else _cpu_breakdown(got, rules)
    finally:
        if collecting:
            gc.enable()
    info = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    if rank is None:
        rank = info.get("rank") if isinstance(info.get("rank"), int) else 0
    meta = {k: header[k] for k in ("vllm_version", "with_stack", "host_name", "tool") if k in header}
    if "world_size" in info:
        meta["world_size"] = info["world_size"]
    if got.sections and "tool" not in meta:
        meta["tool"] = "rocprof v1 / hipprof json"
    return Breakdown(path=str(path), rank=rank, rules_hash=rules.digest, events=got.events, meta=meta,
                     steps=len(got.steps), **result)


def _launch_points(got: _Collector) -> dict[Any, list[tuple[float, int]]]:
    """Where each kernel was launched, by host thread: [(launch time, kernel index)] (kernels whose launch is not
    found are left out: their correlation and External id match nothing)."""
    by_thread: dict[Any, list[tuple[float, int]]] = defaultdict(list)
    launches, ext_ops = got.launches, got.ext_ops
    for i, (_, _, _, _, corr, ext, _) in enumerate(got.device):
        where = launches.get(corr) if corr is not None else None
        if where is None and ext is not None:
            where = ext_ops.get(ext)
        if where is not None:
            by_thread[where[0]].append((where[1], i))
    return by_thread


def _device_breakdown(got: _Collector, rules: RuleSet) -> dict[str, Any]:
    names = list(got.names)
    points = _launch_points(got)
    queries = [(thread, ts, i) for thread, asked in points.items() for ts, i in asked] if got.comm_ops else []
    stacks_get = stacks_by_thread(got.modules, points).get
    # kernels of one name launched under one module stack: [count, kernel time, category], one category match each
    groups: dict[tuple[str, int, tuple[int, ...] | None], list[Any]] = {}
    comm: list[int] = []
    for i, (_, dur, name, kind, _c, _e, _a) in enumerate(got.device):
        key = (kind, name, stacks_get(i))
        group = groups.get(key)
        if group is None:
            ids = key[2]
            path = "/".join(names[m] for m in ids) if ids else ""
            group = groups[key] = [0, 0.0, rules.categorise(kind, names[name], path)]
        group[0] += 1
        group[1] += dur
        if group[2] == "communication":
            comm.append(i)
    categories = dict.fromkeys(rules.categories, 0.0)
    per_path: dict[tuple[int, ...] | None, float] = defaultdict(float)
    per_kernel: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])
    for (_, name, ids), (count, us, category) in groups.items():
        categories[category] += us
        per_path[ids] += us
        per_kernel[name][0] += count
        per_kernel[name][1] += us
    durations = [d for _, d, _n, _k, _c, _e, _a in got.device]
    intervals = [(ts, ts + d) for ts, d, _n, _k, _c, _e, _a in got.device]
    if comm:
        skip = set(comm)
        _split_communication(categories, [intervals[i] for i in comm],
                             [iv for i, iv in enumerate(intervals) if i not in skip])
    else:
        _split_communication(categories, [], [])
    merged = _merge(intervals)
    modules = module_totals((None if ids is None else tuple(names[m] for m in ids), us)
                            for ids, us in per_path.items())
    return {"device": "gpu", "kernel_us": math.fsum(durations),
            "busy_us": sum(e - s for s, e in merged), "span_us": merged[-1][1] - merged[0][0] if merged else 0.0,
            "categories": categories, "modules": modules, "launches": len(got.device),
            "top_kernels": _top(per_kernel, names), "unattributed_us": per_path.get(None, 0.0),
            "collectives": kernel_collectives(got.device, comm, queries, got.comm_ops, names)}


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
    merged: list[tuple[float, float]] = []
    if not intervals:
        return merged
    ordered = sorted(intervals)
    start, end = ordered[0]
    for s, e in ordered:
        if s <= end:
            if e > end:
                end = e
        else:
            merged.append((start, end))
            start, end = s, e
    merged.append((start, end))
    return merged


def _union_length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in _merge(intervals))


def _span(intervals: list[tuple[float, float]]) -> float:
    return max(e for _, e in intervals) - min(s for s, _ in intervals) if intervals else 0.0


def _top(per_name: dict[int, list[float]], names: list[str]) -> list[dict[str, Any]]:
    ranked = sorted(per_name.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
    return [{"name": names[n], "count": int(c), "kernel_us": round(us, 3)} for n, (c, us) in ranked]
