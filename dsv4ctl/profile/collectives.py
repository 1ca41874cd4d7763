"""Which collective a communication kernel ran: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,
reduce, send_recv, barrier, or `unknown`.

NCCL's older kernels say it in their name (`ncclKernel_AllReduce_RING_LL_Sum_bf16`, `ncclDevKernel_AllGather_…`),
but NCCL's and RCCL's generic kernels do not (`ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)`,
`rcclGenericKernel<…>`). So it is taken, in this order, from the kernel's own `Collective name` arg (Kineto
writes record_param_comms' args on the NCCL kernel on some builds), from the kernel name when it says one, else
from the innermost CPU op enclosing the launch that names one: `record_param_comms` (its `Collective name` arg,
e.g. `allreduce`, `_allgather_base`) or a communication op by name (`nccl:all_reduce`, `c10d::allreduce_`,
`vllm::all_reduce`, `_C_custom_ar::all_reduce`). A kernel none of these name is `unknown`."""

from __future__ import annotations

import re
from typing import Any

from .modules import stacks_at

UNKNOWN = "unknown"
_BY_WORD = [  # searched in a lowercased name without its underscores; the first that matches names the collective
    ("allreduce", "all_reduce"), ("crossdevicereduce", "all_reduce"), ("customar", "all_reduce"),
    ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"), ("bcast", "broadcast"), ("sendrecv", "send_recv"), ("barrier", "barrier"),
    ("reduce", "reduce"),  # after allreduce, crossdevicereduce and reducescatter
]
_SEND_RECV = re.compile(r"(?i)(^|[:_])(send|recv|isend|irecv)(_|$)")
# CPU ops that stand for a collective: the comms record, the process-group and backend ops, vLLM's own
COMM_OP = re.compile(r"(?i)^(record_param_comms$|nccl:|rccl:|gloo:|c10d::|_?c10d_functional::|vllm::[a-z_]*"
                     r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast)|_C_custom_ar::)")


def collective_of(text: str | None) -> str | None:
    """The collective a kernel name, an op name or a `Collective name` arg says, None when it says none."""
    if not text:
        return None
    if _SEND_RECV.search(text):
        return "send_recv"
    flat = text.lower().replace("_", "")
    for word, collective in _BY_WORD:
        if word in flat:
            return collective
    return None


def op_collective(name: str, collective_arg: str | None) -> str | None:
    """The collective a CPU op stands for (its `Collective name` arg first), None when it is no comms op."""
    if collective_arg:
        return collective_of(collective_arg) or UNKNOWN
    return collective_of(name) if COMM_OP.search(name) else None


def kernel_collectives(device: list[tuple[Any, ...]], comm: list[int], launches: list[tuple[Any, float, int]],
                       comm_ops: dict[Any, list[tuple[float, float, int]]], names: list[str]
                       ) -> dict[str, list[float]]:
    """[count, kernel time] per collective of the communication kernels (`comm`: their indices in `device`;
    `launches`: (thread, time, index) of each kernel whose launch was found)."""
    totals: dict[str, list[float]] = {}
    by_name: dict[int, str | None] = {}
    unnamed: list[int] = []

    def add(collective: str, dur: float) -> None:
        entry = totals.setdefault(collective, [0, 0.0])
        entry[0] += 1
        entry[1] += dur

    for i in comm:
        _, dur, name, _k, _c, _e, arg = device[i]
        found = collective_of(names[arg]) if arg is not None else None
        if found is None:
            if name not in by_name:
                by_name[name] = collective_of(names[name])
            found = by_name[name]
        if found is None:
            unnamed.append(i)
        else:
            add(found, dur)
    if unnamed and not comm_ops:
        for i in unnamed:
            add(UNKNOWN, device[i][1])
    elif unnamed:
        wanted = set(unnamed)
        enclosing = stacks_at(comm_ops, [q for q in launches if q[2] in wanted])
        for i in unnamed:
            ids = enclosing.get(i)
            add(names[ids[-1]] if ids else UNKNOWN, device[i][1])
    return totals
