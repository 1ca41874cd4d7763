"""Which nn.Modules were on the stack when a kernel was launched: the launch is found by correlation id (the
kernel's `correlation` = the runtime call's `correlation`; on ROCm, or for a kernel without one, the launching
cpu_op through `External id`), and the module stack by time: the `python_function` events named
`nn.Module: <Class>_<n>` that enclose the launch on the same host thread (with_stack). The shared expert is told
from the routed experts this way, not by kernel name."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from operator import itemgetter

NO_MODULE = "(no module)"  # launched outside every nn.Module (sampling, the engine's own ops)
UNATTRIBUTED = "(unattributed)"  # no launch found: no correlation and no External id, or their launch is missing

Interval = tuple[float, float, int]  # start, end, the module's class-name id


def stacks_at(modules: dict[object, list[Interval]], queries: Iterable[tuple[object, float, int]]
              ) -> dict[int, tuple[int, ...]]:
    """For each query (thread, time, query id): the ids of the modules open at that time on that thread,
    outermost first."""
    by_thread: dict[object, list[tuple[float, int]]] = defaultdict(list)
    for thread, ts, qid in queries:
        by_thread[thread].append((ts, qid))
    return stacks_by_thread(modules, by_thread)


def stacks_by_thread(modules: dict[object, list[Interval]], by_thread: dict[object, list[tuple[float, int]]]
                     ) -> dict[int, tuple[int, ...]]:
    """stacks_at with the queries already grouped by thread, [(time, query id)] each. One sweep per thread over
    intervals sorted by start (longest first at equal starts); the stack's ids are reused from one query to the
    next while no frame opened or closed in between."""
    found: dict[int, tuple[int, ...]] = {}
    for thread, asked in by_thread.items():
        intervals = sorted(modules.get(thread, ()), key=itemgetter(0))
        if len(set(map(itemgetter(0), intervals))) != len(intervals):  # equal starts: the longest first
            intervals.sort(key=itemgetter(1), reverse=True)  # two stable C sorts: by start, longest first
            intervals.sort(key=itemgetter(0))
        asked.sort()
        # the open frames, innermost last: (end, class id, the least end at or below it)
        stack: list[tuple[float, int, float]] = []
        i, n = 0, len(intervals)
        current: tuple[int, ...] | None = ()
        for ts, qid in asked:
            if i < n and intervals[i][0] <= ts:
                current = None
                while i < n:
                    start, end, mid = intervals[i]
                    if start > ts:
                        break
                    while stack and stack[-1][0] <= start:
                        stack.pop()
                    stack.append((end, mid, end if not stack or end < stack[-1][2] else stack[-1][2]))
                    i += 1
            if stack and stack[-1][0] < ts:
                current = None
                while stack and stack[-1][0] < ts:
                    stack.pop()
            if not stack or stack[-1][2] >= ts:
                if current is None:
                    current = tuple([f[1] for f in stack])
                found[qid] = current
            else:  # an interval below the top has ended (a trace with ragged nesting): only those still open
                found[qid] = tuple([f[1] for f in stack if f[0] >= ts])
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
