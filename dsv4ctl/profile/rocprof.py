"""rocprofv3's kernel traces, read into the same events as a torch trace's kernels: `kernel_trace.csv`
(`Kernel_Name`, `Start_Timestamp`, `End_Timestamp` in ns; rocpd2csv's `out_kernel_trace.csv` too), with the memory
copies of `--memory-copy-trace` from its companion `<pid>_memory_copy_trace.csv` beside it (`Direction`, the same
timestamps: one process's kernels and copies are one profile), and the JSON
output (`{"rocprofiler-sdk-tool": [{"kernel_symbols", "buffer_records": {"kernel_dispatch", "memory_copy"}}]}`).
No host events: a rocprof profile has categories and kernels, no modules (say so rather than guess them).
The CSV streams row by row; the JSON is one nested object, so it is read whole and refused past MAX_JSON_BYTES."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .events import Event
from .reader import TraceError, open_chunks

MAX_JSON_BYTES = 256 << 20  # json.load holds ~8x the file in memory
BATCH = 4096
CSV_NEEDS = ("Kernel_Name", "Start_Timestamp", "End_Timestamp")


def sniff(path: Path) -> str | None:
    """'csv' or 'json' for a rocprofv3 file, None for anything else (a torch trace, most likely)."""
    try:
        head = open_chunks(path)()[:4096]
    except (OSError, TraceError):
        return None
    first = head.split("\n", 1)[0]
    if all(column in first for column in CSV_NEEDS):
        return "csv"
    if '"rocprofiler-sdk-tool"' in head:
        return "json"
    return None


def read_rocprof(path: Path, on_batch: Callable[[list[Event]], None]) -> dict[str, Any]:
    """Stream a rocprofv3 file's kernels (and copies) to `on_batch` as events.Event records, BATCH at a time."""
    pending: list[Event] = []

    def on_event(event: Event) -> None:
        pending.append(event)
        if len(pending) >= BATCH:
            on_batch(pending[:])
            pending.clear()

    kind = sniff(path)
    header = _read_csv(path, on_event) if kind == "csv" else _read_json(path, on_event)
    copies = copies_of(path) if kind == "csv" else None
    if copies is not None:
        header["memory_copies"] = _read_copies(copies, on_event)
    if pending:
        on_batch(pending)
    return header


def _kernel(name: str, start_ns: Any, end_ns: Any, where: str, cat: str = "kernel") -> Event:
    try:
        start, end = int(start_ns), int(end_ns)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: a timestamp that is not a whole number of ns ({start_ns!r}, {end_ns!r})") \
            from None
    if end < start:
        raise TraceError(f"{where}: a kernel that ends before it starts ({start} > {end} ns)")
    return Event(ph="X", cat=cat, name=name, ts=start / 1000.0, dur=(end - start) / 1000.0)


KERNEL_CSV = "kernel_trace.csv"
COPY_CSV = "memory_copy_trace.csv"
COPY_NEEDS = ("Direction", "Start_Timestamp", "End_Timestamp")


def copies_of(path: Path) -> Path | None:
    """The memory copy trace rocprofv3 wrote beside a kernel trace (`7_kernel_trace.csv` -> `7_memory_copy_trace.csv`),
    if there is one."""
    if not path.name.endswith(KERNEL_CSV):
        return None
    sibling = path.with_name(path.name[:-len(KERNEL_CSV)] + COPY_CSV)
    return sibling if sibling.is_file() else None


def _read_copies(path: Path, on_event: Callable[[Event], None]) -> int:
    """A memory copy trace's rows as gpu_memcpy events named by direction (`Memcpy HOST_TO_DEVICE`); how many."""
    rows = csv.DictReader(_lines(path))
    missing = [c for c in COPY_NEEDS if c not in (rows.fieldnames or [])]
    if missing:
        raise TraceError(f"{path}: not a rocprofv3 memory copy trace (no {', '.join(missing)} column)")
    n = 0
    for line, row in enumerate(rows, start=2):
        direction = (row.get("Direction") or "").removeprefix("MEMORY_COPY_") or "copy"
        on_event(_kernel("Memcpy " + direction, row.get("Start_Timestamp"), row.get("End_Timestamp"),
                         f"{path}:{line}", "gpu_memcpy"))
        n += 1
    return n


def _lines(path: Path):
    """A CSV file's lines, streamed in chunks (gunzipped when it is gzip)."""
    read, rest = open_chunks(path), ""
    while True:
        chunk = read()
        if not chunk:
            if rest:
                yield rest
            return
        lines = (rest + chunk).split("\n")
        rest = lines.pop()
        yield from (line + "\n" for line in lines)


def _read_csv(path: Path, on_event: Callable[[Event], None]) -> dict[str, Any]:

    rows = csv.DictReader(_lines(path))
    missing = [c for c in CSV_NEEDS if c not in (rows.fieldnames or [])]
    if missing:
        raise TraceError(f"{path}: not a rocprofv3 kernel trace (no {', '.join(missing)} column)")
    agents: set[str] = set()
    for line, row in enumerate(rows, start=2):
        name = row.get("Kernel_Name") or ""
        kind = "gpu_memcpy" if (row.get("Kind") or "").startswith("MEMORY_COPY") else "kernel"
        on_event(_kernel(name, row.get("Start_Timestamp"), row.get("End_Timestamp"), f"{path}:{line}", kind))
        agents.add(row.get("Agent_Id") or "")
    return {"tool": "rocprofv3 csv", "agents": sorted(a for a in agents if a)}


def _symbols(tool: dict[str, Any]) -> dict[Any, str]:
    raw = tool.get("kernel_symbols") or []
    items = raw.items() if isinstance(raw, dict) else enumerate(raw)
    names = {}
    for key, sym in items:
        if isinstance(sym, dict):
            kid = sym.get("kernel_id", key)
            names[kid] = sym.get("formatted_kernel_name") or sym.get("kernel_name") or f"kernel {kid}"
    return names


def _read_json(path: Path, on_event: Callable[[Event], None]) -> dict[str, Any]:
    if path.stat().st_size > MAX_JSON_BYTES:
        raise TraceError(f"{path}: a rocprofv3 JSON over {MAX_JSON_BYTES >> 20} MiB: use --output-format csv "
                         "(streamed) for long runs")
    try:
        data = json.loads(open_all(path))
        tools = data["rocprofiler-sdk-tool"]
        tools = tools if isinstance(tools, list) else [tools]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise TraceError(f"{path}: not a rocprofv3 JSON result ({type(exc).__name__})") from None
    for tool in tools:
        names = _symbols(tool)
        records = tool.get("buffer_records") or {}
        for d in records.get("kernel_dispatch") or []:
            info = d.get("dispatch_info") or {}
            name = names.get(info.get("kernel_id"), f"kernel {info.get('kernel_id')}")
            on_event(_kernel(name, d.get("start_timestamp"), d.get("end_timestamp"), str(path)))
        for c in records.get("memory_copy") or []:
            on_event(_kernel("Memcpy " + str(c.get("operation", "")), c.get("start_timestamp"),
                             c.get("end_timestamp"), str(path), "gpu_memcpy"))
    return {"tool": "rocprofv3 json"}


def open_all(path: Path) -> str:
    read, parts = open_chunks(path), []
    while chunk := read():
        parts.append(chunk)
    return "".join(parts)
