"""A DCU trace (issue 23): the kernel families a Hygon DCU (gfx936, DTK) run launches, from the notes' table
(hipBLASLt/Tensile `Cijk_`, CK, vLLM ROCm `wvSplitK` and its custom all-reduce, aiter, Triton, RCCL, PyTorch
native, the runtime's copy and fill kernels), land in the categories make_traces.py built them with, read from
hipprof's JSON (rocprof v1's layout: no `cat`, every value a quoted string, the GPU known by its process label)
and from a torch trace of the same names."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.profile.breakdown import read_breakdown
from dsv4ctl.profile.categories import load_rules

from .conftest import FIXTURES

PROFILES = FIXTURES / "profiles"
EXPECTED = json.loads((PROFILES / "expected.json").read_text())["hipprof_dcu.json"]
COMM = ("communication_exposed", "communication_overlapped")


def _by_category(rows) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        out[r["category"]] = out.get(r["category"], 0.0) + r["us"]
    return out


def test_hipprof_json_kernels_land_in_their_categories():
    b = read_breakdown(PROFILES / "hipprof_dcu.json")
    want = _by_category(EXPECTED)
    assert b.device == "gpu" and b.meta["tool"] == "rocprof v1 / hipprof json"
    assert b.kernel_us == pytest.approx(sum(r["us"] for r in EXPECTED))  # barrier packets and API calls left out
    assert b.launches == len(EXPECTED)
    for category, us in want.items():
        got = sum(b.categories[c] for c in COMM) if category == "communication" else b.categories[category]
        assert got == pytest.approx(us), category
    assert b.categories["other"] == 0.0
    assert set(b.modules) == {"(unattributed)"}  # no host frames in hipprof's JSON: no module is guessed


FAMILIES = list({r["name"]: r for r in EXPECTED if r["name"] != "CopyDeviceToHost"}.values())


@pytest.mark.parametrize("row", FAMILIES, ids=lambda r: r["name"][:40])
def test_each_dcu_kernel_family_by_name(row):
    assert load_rules().categorise("kernel", row["name"], "") == row["category"]


def test_the_same_names_in_a_torch_trace(tmp_path):
    """The DCU names as a torch profiler trace on DTK would hold them (cat kernel, hipLaunchKernel as
    cuda_runtime): the same categories, now with their modules."""
    kernels = [r for r in EXPECTED if r["name"] != "CopyDeviceToHost"]
    events, t = [], 0.0
    for i, r in enumerate(kernels):
        events += [{"ph": "X", "cat": "python_function", "name": "nn.Module: DeepseekV4DecoderLayer_0", "pid": 9,
                    "tid": 9, "ts": t, "dur": 20.0, "args": {}},
                   {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 9, "tid": 9, "ts": t + 1,
                    "dur": 2.0, "args": {"correlation": i}},
                   {"ph": "X", "cat": "kernel", "name": r["name"], "pid": 0, "tid": 1, "ts": t + 5, "dur": r["us"],
                    "args": {"correlation": i}}]
        t += 200.0
    path = tmp_path / "dcu.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    b = read_breakdown(path)
    for category, us in _by_category(kernels).items():
        got = sum(b.categories[c] for c in COMM) if category == "communication" else b.categories[category]
        assert got == pytest.approx(us), category
    assert b.modules["DeepseekV4DecoderLayer"] == pytest.approx(b.kernel_us)
