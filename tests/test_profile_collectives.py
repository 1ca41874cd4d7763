"""Which collective a communication kernel ran (issue 23): from the kernel name when it says one (NCCL's older
`ncclKernel_AllReduce_RING_LL_Sum_bf16`), else from the kernel's `Collective name` arg, else from the innermost
enclosing comms op (`record_param_comms` and its `Collective name`, `nccl:reduce_scatter`, `c10d::allreduce_`),
joined by correlation or, without one, by External id. Traces are written here in Kineto's layout (see
tests/fixtures/profiles/manifest.json for the documents it follows)."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.profile.breakdown import read_breakdown
from dsv4ctl.profile.collectives import collective_of, op_collective
from dsv4ctl.profile.store import load_profiles, save_profile
from dsv4ctl.profile.targets import Profiled
from dsv4ctl.profile.view import profile_json
from dsv4ctl.store import open_store

GENERIC_NCCL = "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"
GENERIC_RCCL = "rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)"


def _trace(tmp_path, launches):
    """One comm kernel per launch: (kernel name, kernel args, enclosing cpu ops [(name, args)] outermost first,
    join: 'correlation' or 'external'). The ops nest around the cudaLaunchKernel on the host thread."""
    events, t = [], 1000.0
    for i, (kernel, kernel_args, ops, join) in enumerate(launches):
        corr, ext = 100 + i, 500 + i
        for depth, (name, args) in enumerate(ops):
            op_args = {"External id": ext if depth == len(ops) - 1 else 900 + 10 * i + depth, **args}
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t + depth,
                           "dur": 20.0 - 2 * depth, "args": op_args})
        if join == "correlation":
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t + 8, "dur": 2.0, "args": {"correlation": corr, "External id": ext}})
        args = {"External id": ext, **kernel_args, **({"correlation": corr} if join == "correlation" else {})}
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 13, "ts": t + 30,
                       "dur": 10.0 + i, "args": args})
        t += 100.0
    path = tmp_path / "comm.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


CASES = {  # what each launch is, and the collective it must be counted under
    "nccl kernel name": (("ncclKernel_AllReduce_RING_LL_Sum_bf16", {}, [], "correlation"), "all_reduce"),
    "nccl dev kernel name": (("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", {}, [], "correlation"),
                             "reduce_scatter"),
    "generic under record_param_comms": ((GENERIC_NCCL, {}, [("record_param_comms",
                                                              {"Collective name": "_allgather_base"})],
                                          "correlation"), "all_gather"),
    "generic under nccl op, innermost": ((GENERIC_NCCL, {}, [("c10d::allreduce_", {}),
                                                             ("nccl:reduce_scatter", {})], "correlation"),
                                         "reduce_scatter"),
    "rccl generic with its own Collective name": ((GENERIC_RCCL, {"Collective name": "allreduce"}, [],
                                                   "correlation"), "all_reduce"),
    "rccl generic by External id only": ((GENERIC_RCCL, {}, [("record_param_comms",
                                                              {"Collective name": "all_to_all"})], "external"),
                                         "all_to_all"),
    "generic under vllm's all_reduce": ((GENERIC_RCCL, {}, [("vllm::all_reduce", {})], "correlation"),
                                        "all_reduce"),
    "generic and nothing says": ((GENERIC_NCCL, {}, [("aten::empty", {})], "correlation"), "unknown"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_way_of_naming_the_collective(tmp_path, case):
    launch, collective = CASES[case]
    b = read_breakdown(_trace(tmp_path, [launch]))
    assert b.categories["communication_exposed"] == pytest.approx(10.0)  # a comm kernel whatever its collective
    assert b.collectives == {collective: [1, 10.0]}


def test_collectives_add_up_to_the_communication_time_and_are_stored(tmp_path):
    launches = [launch for launch, _ in CASES.values()]
    b = read_breakdown(_trace(tmp_path, launches))
    want: dict[str, list] = {}
    for i, (_, collective) in enumerate(CASES.values()):
        entry = want.setdefault(collective, [0, 0.0])
        entry[0] += 1
        entry[1] += 10.0 + i
    assert b.collectives == want
    comm = b.categories["communication_exposed"] + b.categories["communication_overlapped"]
    assert sum(us for _, us in b.collectives.values()) == pytest.approx(comm)
    store = open_store(tmp_path / "s.db")
    run_id = store.add_run(campaign_id=store.create_campaign("c", "local", "test"),
                           experiment_id=store.experiment_id("e", "h", "{}", "test"), token="t1", state="COMPLETED",
                           label="P1")
    save_profile(store, run_id, "run", b)
    (stored,) = load_profiles(store, run_id)
    assert stored.collectives == want
    data = profile_json(Profiled("t", "run", [b, stored], None, None, []))
    assert data["collectives"][0] == {"name": "all_reduce", "count": 3, "kernel_us": 10.0 + 14.0 + 16.0}
    assert data["per_rank"][0]["collectives"] == data["collectives"]


@pytest.mark.parametrize("text, collective", [
    ("allreduce", "all_reduce"), ("allreduce_coalesced", "all_reduce"), ("_allgather_base", "all_gather"),
    ("all_gather_into_tensor_coalesced", "all_gather"), ("reduce_scatter_tensor", "reduce_scatter"),
    ("_reduce_scatter_base", "reduce_scatter"), ("all_to_all", "all_to_all"), ("alltoall_base", "all_to_all"),
    ("broadcast", "broadcast"), ("send", "send_recv"), ("recv", "send_recv"), ("ncclDevKernel_SendRecv", "send_recv"),
    ("barrier", "barrier"), ("reduce", "reduce"), ("ncclDevKernel_Reduce_Sum_bf16_RING_LL", "reduce"),
    ("cross_device_reduce_1stage", "all_reduce"), (GENERIC_NCCL, None), (GENERIC_RCCL, None)])
def test_collective_words(text, collective):
    assert collective_of(text) == collective


def test_only_comms_ops_stand_for_a_collective():
    assert op_collective("record_param_comms", "allreduce") == "all_reduce"
    assert op_collective("record_param_comms", "something_new") == "unknown"
    assert op_collective("nccl:all_reduce", None) == "all_reduce"
    assert op_collective("aten::sum", None) is None and op_collective("my_reduce_kernel_launcher", None) is None
