"""The fast path of the trace reader (issue 23's speed goal): slices of traceEvents decoded at once into the
breakdown's Event records, a slice that is not one JSON array (a `},` inside a string, an odd type, NaN) read
again event by event, and the module-stack sweep that the join spends its time in, each against a plain
json.load of the same text or a brute-force definition."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsv4ctl.profile import reader
from dsv4ctl.profile.breakdown import read_breakdown
from dsv4ctl.profile.events import Args, Event, record_of
from dsv4ctl.profile.modules import stacks_at
from dsv4ctl.profile.reader import TraceError, read_events, read_trace

scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=6)
odd_or_plain = st.one_of(scalars, st.lists(st.integers(), max_size=2))
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "i", "M"]) | odd_or_plain,
     "ts": st.floats(0, 1e9) | odd_or_plain},
    optional={"cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "python_function"]) | odd_or_plain,
              "name": st.sampled_from(["k", 'a"},{"b', "},", "nn.Module: X_1", "\u00e9\u4e2d"]) | st.text(max_size=8)
              | odd_or_plain,
              "dur": st.floats(0, 1e6) | odd_or_plain, "pid": odd_or_plain, "tid": odd_or_plain,
              "args": st.fixed_dictionaries({}, optional={"correlation": odd_or_plain, "External id": odd_or_plain,
                                                          "Collective name": odd_or_plain, "name": odd_or_plain})
              | odd_or_plain})
elements = st.lists(event | scalars, max_size=30)


def _write(tmp_path_factory, events, indent, gz, ascii_only=True):
    path = tmp_path_factory.mktemp("f") / ("t.json.gz" if gz else "t.json")
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "x"}, indent=indent,
                      ensure_ascii=ascii_only)
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path, text


def _read(path, chunk):
    old = reader.CHUNK_BYTES
    reader.CHUNK_BYTES = chunk
    try:
        batches: list = []
        header = read_events(path, batches.append)
    finally:
        reader.CHUNK_BYTES = old
    return [e for b in batches for e in b], batches, header


def _same(a, b):
    """Records equal, NaN equal to NaN (a float("nan") time written as the string "nan")."""
    def norm(r):
        return [x if not (isinstance(x, float) and math.isnan(x)) else "nan" for x in
                (r.ph, r.cat, r.name, r.pid, r.tid, r.ts, r.dur)] + [None if r.args is None else
                                                                    (r.args.correlation, r.args.external,
                                                                     r.args.collective, r.args.label)]
    return [norm(r) for r in a] == [norm(r) for r in b]


@settings(max_examples=120, deadline=None)
@given(events=elements, chunk=st.sampled_from([1, 7, 64, 512, 1 << 20]), indent=st.sampled_from([None, 0, 2]),
       gz=st.booleans(), ascii_only=st.booleans())
def test_fast_records_equal_the_lenient_reading_of_json_load(tmp_path_factory, events, chunk, indent, gz, ascii_only):
    path, text = _write(tmp_path_factory, events, indent, gz, ascii_only)
    got, _, header = _read(path, chunk)
    want = [r for r in map(record_of, json.loads(text)["traceEvents"]) if r is not None]
    assert _same(got, want)
    assert header == {"schemaVersion": 1, "traceName": "x"}


def test_a_well_formed_trace_is_decoded_a_slice_at_a_time(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7, "ts": i * 2.0, "dur": 1.5,
               "args": {"correlation": i, "External id": i + 1, "grid": [1, 2, 3]}} for i in range(20_000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got, batches, _ = _read(path, 64 << 10)
    assert len(got) == 20_000 and len(batches) < 100  # ~100 bytes an event: hundreds to a slice
    assert got[5] == Event(ph="X", cat="kernel", name="k5", pid=0, tid=7, ts=10.0, dur=1.5,
                           args=Args(correlation=5, external=6, collective=None, label=None))


def test_a_cut_inside_a_string_is_never_taken_for_an_event_boundary(tmp_path):
    """Names holding `},` (and `},{"ph": "X"`) at every place a slice could end: each event comes out whole."""
    tricky = 'x"}, {"ph": "X", "cat": "kernel", "ts": 1, "dur": 1000000}, {"a'
    events = [{"ph": "X", "cat": "kernel", "name": tricky if i % 3 else "k", "ts": float(i), "dur": 1.0,
               "pid": 0, "tid": 1, "args": {"correlation": i}} for i in range(3000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    for chunk in (97, 4096, 1 << 20):
        got, _, _ = _read(path, chunk)
        assert [e.name for e in got] == [e["name"] for e in events]
    b = read_breakdown(path)
    assert b.kernel_us == 3000.0 and b.launches == 3000


def test_invalid_utf8_is_replaced_on_both_paths(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "bad\xff\xfename", "ts": 1, "dur": 2},'
                     b'{"ph": "X", "cat": "kernel", "name": "ok", "ts": 5, "dur": 2}]}')
    got, _, _ = _read(path, 1 << 20)
    dicts: list = []
    read_trace(path, dicts.append)
    assert [e.name for e in got] == [d["name"] for d in dicts] == ["bad\ufffd\ufffdname", "ok"]


def test_nan_and_huge_integers_fall_back_to_the_standard_library(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": NaN, "dur": 1},'
                    '{"ph": "X", "cat": "kernel", "name": "b", "ts": 3, "dur": 2, "args": {"correlation": '
                    + str(2**80) + '}}, {"ph": "X", "cat": "kernel", "name": "c", "ts": 4, "dur": 3}]}')
    got, _, _ = _read(path, 1 << 20)
    assert [e.name for e in got] == ["a", "b", "c"] and math.isnan(got[0].ts)
    assert got[1].args.correlation == 2**80
    assert read_breakdown(path).launches == 3


def test_without_msgspec_the_standard_library_gives_the_same_breakdown(monkeypatch):
    from dsv4ctl.profile import events as ev

    from .conftest import FIXTURES

    for name in ("cuda_tp2_rank0.pt.trace.json.gz", "rocm_dcu.pt.trace.json.gz"):
        fast = read_breakdown(FIXTURES / "profiles" / name).to_json()
        with monkeypatch.context() as m:
            m.setattr(ev, "_TYPED", None)
            m.setattr(ev, "_ANY", None)
            assert ev.records_decoder() is ev._records
            assert read_breakdown(FIXTURES / "profiles" / name).to_json() == fast


@pytest.mark.parametrize("text, words", [
    ('{"traceEvents": [{"ph": "X"}, {"ph": "X", "name": "cut', "cut short"),
    ('{"traceEvents": [' + '{"ph": "X", "ts": 1},' * 5000 + '{"ph": }]}', "not JSON"),
    ('{"traceEvents": [' + '[' * 100_000 + ']' * 100_000 + ']}', "nested too deeply")])
def test_bad_json_after_good_slices_is_still_one_line(tmp_path, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=words) as caught:
        read_breakdown(path)
    assert "\n" not in str(caught.value)


intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30), st.integers(0, 5)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(frames=intervals, times=st.lists(st.integers(0, 100), max_size=25))
def test_module_stack_sweep_equals_brute_force(frames, times):
    """Starts, ends and launch times never equal (1, 2 and 3 mod 4): the frames the sweep gives for a launch are
    exactly those whose interval holds it, outermost (earliest start, then longest) first, nested or ragged."""
    modules = {"t": [(s * 4 + 1.0, s * 4 + 1.0 + d * 4 + 1.0, m) for s, d, m in frames]}
    queries = [("t", q * 4 + 3.0, i) for i, q in enumerate(times)]
    got = stacks_at(modules, queries)
    for _, ts, qid in queries:
        open_ = sorted((f for f in modules["t"] if f[0] <= ts <= f[1]), key=lambda f: (f[0], -f[1]))
        assert got[qid] == tuple(f[2] for f in open_)


def test_a_real_h200_trace_is_read_whole_and_every_kernel_joined_to_its_launch():
    """tests/fixtures/profiles/h200/ (another helper's capture, see its README): a real torch.profiler trace of
    three H200 decode calls, six Triton kernels launched by cuLaunchKernelEx (cat cuda_driver), no with_stack.
    The kernel sum is the trace's own (json.load's), each kernel's launch is found by correlation, and with no
    nn.Module frames the time is outside every module, not unattributed."""
    from .conftest import FIXTURES

    path = FIXTURES / "profiles" / "h200" / "sparse-decode.pt.trace.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    b = read_breakdown(path)
    assert b.device == "gpu" and b.launches == len(kernels) == 6
    assert b.kernel_us == pytest.approx(math.fsum(float(e["dur"]) for e in kernels), abs=1e-9)
    assert b.unattributed_us == 0.0 and b.modules == {"(no module)": pytest.approx(b.kernel_us)}
    assert {k["name"] for k in b.top_kernels} == {"_partial_kernel", "_combine_kernel"}


def test_a_real_h200_trace_of_a_deepseek_v4_shaped_model_tells_the_shared_expert_by_module():
    """tests/fixtures/profiles/h200/deepseek-v4-shaped.pt.trace.json.gz (benchmarks/profile_model_trace.py on the
    H200, see the README beside it): three eager decode steps of a small model with vLLM's DeepSeek V4 module
    names, with_stack. The shared expert's GEMMs are the same nvjet kernels as every other GEMM: only the
    nn.Module stack tells them apart, so moe_shared is exactly the time launched under DeepseekV4MLP, moe_routed
    is what was launched under FusedMoE but its copies and fills, and the kernel sum is the trace's own."""
    from .conftest import FIXTURES

    path = FIXTURES / "profiles" / "h200" / "deepseek-v4-shaped.pt.trace.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    work = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    b = read_breakdown(path)
    assert b.device == "gpu" and b.launches == len(work) > 500  # device work: kernels, copies and fills
    assert b.kernel_us == pytest.approx(math.fsum(float(e["dur"]) for e in work), abs=1e-6)  # torch: 2.648 ms
    assert b.unattributed_us == 0.0
    assert b.categories["moe_shared"] == pytest.approx(b.modules["DeepseekV4MLP"], abs=1e-6)
    assert b.modules["DeepseekV4MLP"] > 0
    # everything FusedMoE launched but its copies and fills (memcpy comes first in the rules)
    assert b.modules["FusedMoE"] - b.categories["memcpy"] <= b.categories["moe_routed"] <= b.modules["FusedMoE"]
    assert b.categories["moe_routed"] > 10 * b.categories["moe_shared"]
    assert b.categories["attention"] > 0 and b.categories["gemm"] > 0
    assert b.modules["DeepseekV4ForCausalLM"] <= b.kernel_us
    assert set(b.modules) >= {"DeepseekV4DecoderLayer", "DeepseekV4MLAAttention", "DeepseekV4MoE", "RMSNorm"}
