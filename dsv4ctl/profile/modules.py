"""Which nn.Modules were on the stack when a kernel was launched: the launch is found by correlation id (the
kernel's `correlation` = the runtime call's `correlation`; on ROCm, or for a kernel without one, the launching
cpu_op through `External id`), and the module stack by time: the `python_function` events named
`nn.Module: <Class>_<n>` that enclose the launch on the same host thread (with_stack). The shared expert is told
from the routed experts this way, not by kernel name."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

NO_MODULE = "(no module)"  # launched outside every nn.Module (sampling, the engine's own ops)
UNATTRIBUTED = "(unattributed)"  # no launch found: no correlation and no External id, or their launch is missing

Interval = tuple[float, float, int]  # start, end, the module's class-name id


def stacks_at(modules: dict[object, list[Interval]], queries: Iterable[tuple[object, float, int]]
              ) -> dict[int, tuple[int, ...]]:
    """For each query (thread, time, query id): the ids of the modules open at that time on that thread,
    outermost first. One sweep per thread over intervals sorted by start (longest first at equal starts)."""
    by_thread: dict[object, list[tuple[float, int]]] = defaultdict(list)
    for thread, ts, qid in queries:
        by_thread[thread].append((ts, qid))
    found: dict[int, tuple[int, ...]] = {}
    for thread, asked in by_thread.items():
        intervals = sorted(modules.get(thread, ()), key=lambda m: (m[0], -m[1]))
        asked.sort()
        stack: list[Interval] = []
        i = 0
        for ts, qid in asked:
            while i < len(intervals) and intervals[i][0] <= ts:
                while stack and stack[-1][1] <= intervals[i][0]:
                    stack.pop()
                stack.append(intervals[i])
                i += 1
            while stack and stack[-1][1] < ts:
                stack.pop()
            # an interval below the top may have ended (a trace with ragged nesting): keep only those still open
            found[qid] = tuple(m[2] for m in stack if m[1] >= ts)
    return found


def module_totals(paths: Iterable[tuple[tuple[str, ...] | None, float]]) -> dict[str, float]:
    """Kernel time per module class, counting a kernel once for every class on its stack (inclusive time:
    `DecoderLayer` holds its `MoE`, which holds the shared expert's `MLP`)."""
    totals: dict[str, float] = defaultdict(float)
    for path, us in paths:
        if path is None:
            totals[UNATTRIBUTED] += us
        elif not path:
            totals[NO_MODULE] += us
        else:
            for name in dict.fromkeys(path):
                totals[name] += us
    return dict(totals)
