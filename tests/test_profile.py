"""Profiles (issue 23): the streaming reader, the category rules, the module join, rocprofv3 input, the store,
the A/B and the command, on the GPU-shaped fixtures of tests/fixtures/profiles (made by make_traces.py from the
documented formats) and on hostile files."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsv4ctl.profile import reader
from dsv4ctl.profile.breakdown import read_breakdown
from dsv4ctl.profile.categories import load_rules, module_class
from dsv4ctl.profile.diff import Gate, MixedProfiles, diff_profiles
from dsv4ctl.profile.reader import TraceError, read_trace

from .conftest import FIXTURES, ROOT

PROFILES = FIXTURES / "profiles"
EXPECTED = json.loads((PROFILES / "expected.json").read_text())


def _brute_overlap(kernels):
    """Communication time covered by some compute kernel, by brute force (the check on the merged sweep)."""
    compute = [(k["start"], k["start"] + k["us"]) for k in kernels if k["category"] != "communication"]
    covered = 0.0
    for k in kernels:
        if k["category"] != "communication":
            continue
        s, e = k["start"], k["start"] + k["us"]
        points = sorted({s, e, *[x for c in compute for x in c if s < x < e]})
        for a, b in zip(points, points[1:]):
            if any(c0 <= a and b <= c1 for c0, c1 in compute):
                covered += b - a
    return covered


@pytest.mark.parametrize("name", ["cuda_tp2_rank0.pt.trace.json.gz", "cuda_tp2_rank1.pt.trace.json.gz",
                                  "rocm_dcu.pt.trace.json.gz"])
def test_gpu_shaped_trace_lands_in_the_categories_and_modules_it_was_built_with(name):
    expected = EXPECTED[name]
    b = read_breakdown(PROFILES / name)
    kernels = expected["kernels"]
    assert b.device == "gpu" and b.steps == expected["steps"]
    assert b.kernel_us == pytest.approx(sum(k["us"] for k in kernels))  # the trace's own sum
    per_category: dict[str, float] = {}
    for k in kernels:
        per_category[k["category"]] = per_category.get(k["category"], 0.0) + k["us"]
    overlapped = _brute_overlap(kernels)
    for category, us in per_category.items():
        if category == "communication":
            assert b.categories["communication_overlapped"] == pytest.approx(overlapped)
            assert b.categories["communication_exposed"] == pytest.approx(us - overlapped)
        else:
            assert b.categories[category] == pytest.approx(us), category
    assert sum(b.categories.values()) == pytest.approx(b.kernel_us)
    # the shared expert by module (an MLP inside the MoE block), not by kernel name
    shared = sum(k["us"] for k in kernels if "DeepseekV4MLP" in k["path"])
    assert b.modules["DeepseekV4MLP"] == pytest.approx(shared)
    assert b.modules["DeepseekV4DecoderLayer"] == pytest.approx(b.kernel_us)
    assert b.unattributed_us == 0.0
    assert b.launches == len(kernels)


def test_rocm_kernels_without_correlation_join_through_external_id():
    b = read_breakdown(PROFILES / "rocm_dcu.pt.trace.json.gz")
    routed = sum(k["us"] for k in EXPECTED["rocm_dcu.pt.trace.json.gz"]["kernels"] if k["category"] == "moe_routed")
    assert b.modules["FusedMoE"] == pytest.approx(routed)


@pytest.mark.parametrize("name", ["rocprofv3_kernel_trace.csv", "rocprofv3_results.json"])
def test_rocprofv3_kernel_traces_by_kernel_name(name):
    b = read_breakdown(PROFILES / name)
    rows = EXPECTED["rocprof"]
    assert b.kernel_us == pytest.approx(sum(r["us"] for r in rows))
    # no host events: the shared expert's GEMM (wvSplitK) can only be a GEMM here, and no module is guessed
    gemm = sum(r["us"] for r in rows if r["category"] in ("gemm", "moe_shared"))
    assert b.categories["gemm"] == pytest.approx(gemm)
    assert b.categories["moe_routed"] == pytest.approx(sum(r["us"] for r in rows if r["category"] == "moe_routed"))
    assert b.categories["communication_exposed"] > 0
    assert set(b.modules) == {"(unattributed)"}


@pytest.mark.parametrize("name, category", [
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("rcclGenericKernel<ReduceSum>", "communication"),  # 'reduce' in its name: still communication
    ("cross_device_reduce_2stage<bf16>", "communication"),
    ("Cijk_Ailk_Bljk_BBS_BH_Bias_HAS_SAV", "gemm"), ("wvSplitK_hf_sml_", "gemm"), ("nvjet_tst_128x64", "gemm"),
    ("fused_moe_kernel", "moe_routed"), ("MoeSorting_kernel", "moe_routed"), ("fmoe_bf16_g1u1_silu", "moe_routed"),
    ("_ZN5aiter15fmha_fwd_kernel", "attention"), ("flash_fwd_splitkv_kernel", "attention"),
    ("triton_poi_fused_add_0", "elementwise"), ("void at::native::reduce_kernel<512>", "elementwise"),
    ("__amd_rocclr_copyBuffer", "memcpy"), ("__amd_rocclr_fillBufferAligned", "memcpy"),
    ("mystery_kernel", "other")])
def test_kernel_names_of_cuda_rocm_and_dcu(name, category):
    assert load_rules().categorise("kernel", name, "") == category


def test_shared_expert_is_told_from_routed_by_module():
    rules = load_rules()
    gemm = "Cijk_Alik_Bljk_BBS"
    assert rules.categorise("kernel", gemm, "DeepseekV4ForCausalLM/DeepseekV4DecoderLayer/DeepseekV4MoE/"
                                             "DeepseekV4MLP/RowParallelLinear") == "moe_shared"
    assert rules.categorise("kernel", gemm, "Qwen2MoeSparseMoeBlock/Qwen2MoeMLP") == "moe_shared"
    assert rules.categorise("kernel", gemm, "DeepseekV4DecoderLayer/DeepseekV4MLP/RowParallelLinear") == "gemm"
    assert module_class("nn.Module: DeepseekV4MoE_12") == "DeepseekV4MoE"


def test_rules_hash_changes_with_the_rules_and_not_with_their_description(tmp_path):
    from dsv4ctl.profile.categories import RULES_FILE, parse_rules

    data = json.loads(RULES_FILE.read_text())
    same = parse_rules(json.dumps({**data, "about": "other words"}))
    data["rules"].insert(0, {"category": "other", "name": "fused_moe"})
    other = parse_rules(json.dumps(data))
    assert same.digest == load_rules().digest != other.digest
    assert other.categorise("kernel", "fused_moe_kernel") == "other"


# ---- the streaming reader --------------------------------------------------------------------------------------

events_strategy = st.lists(st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "i", "M"]), "name": st.text(max_size=20), "ts": st.floats(0, 1e9),
    "dur": st.floats(0, 1e6), "args": st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5),
                                                      max_size=3)}), max_size=40)


@settings(max_examples=60, deadline=None)
@given(events=events_strategy, chunk=st.integers(1, 64), indent=st.sampled_from([None, 0, 2]),
       gz=st.booleans())
def test_streamed_events_equal_json_load(tmp_path_factory, events, chunk, indent, gz):
    path = tmp_path_factory.mktemp("t") / ("t.json.gz" if gz else "t.json")
    text = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 3}, "traceEvents": events,
                       "traceName": "x"}, indent=indent)
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    old = reader.CHUNK_BYTES
    reader.CHUNK_BYTES = chunk  # chunk edges everywhere: inside strings, numbers, escapes
    try:
        got: list = []
        header = read_trace(path, got.append)
    finally:
        reader.CHUNK_BYTES = old
    assert got == json.loads(text)["traceEvents"]
    assert header["distributedInfo"] == {"rank": 3} and header["traceName"] == "x"


@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=300))
def test_any_bytes_give_a_trace_error_or_a_trace(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("h") / "h.json"
    path.write_bytes(data)
    try:
        read_trace(path, lambda e: None)
    except TraceError as exc:
        assert "\n" not in str(exc)


def test_cut_gzip_is_one_line(tmp_path):
    whole = (PROFILES / "cuda_tp2_rank0.pt.trace.json.gz").read_bytes()
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceError, match="gzip stream ends early"):
        read_breakdown(cut)


def test_a_gzip_of_several_members_is_read_whole_and_a_corrupt_one_is_one_line(tmp_path):
    """The reader gunzips with zlib itself (issue 23): members one after another (`cat a.gz b.gz`) and the
    zero padding some writers leave are read as gzip reads them; bytes that are not deflate are one line."""
    import gzip

    text = (PROFILES / "cuda_tp2_rank0.pt.trace.json.gz").read_bytes()
    whole = gzip.decompress(text)
    joined = tmp_path / "joined.pt.trace.json.gz"
    joined.write_bytes(gzip.compress(whole[:1000]) + gzip.compress(whole[1000:]) + b"\0" * 16)
    assert read_breakdown(joined).to_json() == {**read_breakdown(PROFILES / "cuda_tp2_rank0.pt.trace.json.gz")
                                                .to_json(), "path": str(joined)}
    corrupt = tmp_path / "corrupt.pt.trace.json.gz"
    corrupt.write_bytes(text[:20] + bytes(b ^ 0x5A for b in text[20:200]) + text[200:])
    with pytest.raises(TraceError, match="not a readable gzip file|ends early") as caught:
        read_breakdown(corrupt)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("text, words", [
    ("this is not json", "expected a JSON object"), ('{"traceEvents": [{"ph": "X"}, ', "cut short"),
    ('{"schemaVersion": 1}', "without traceEvents"), ('[1, 2', "found the end of the file"), ('{"traceEvents": []} x', "after")])
def test_not_a_trace_is_one_line(tmp_path, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=words):
        read_breakdown(path)


def test_kernels_without_correlation_are_counted_unattributed(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "fused_moe_kernel", "ts": i * 10.0, "dur": 5.0, "pid": 0,
               "tid": 7, "args": {}} for i in range(100)]
    path = tmp_path / "nocorr.json"
    path.write_text(json.dumps({"traceEvents": events}))
    b = read_breakdown(path)
    assert b.kernel_us == b.unattributed_us == 500.0 and b.modules == {"(unattributed)": 500.0}
    assert b.categories["moe_routed"] == 500.0 and b.busy_us == 500.0 and b.idle_us == pytest.approx(99 * 5.0)


def test_ten_million_events_are_refused_in_bounded_memory(tmp_path):
    """10 M kernel events (a 90 MB gzip): refused in one line once MAX_KEPT are held, peak RSS measured."""
    path = tmp_path / "huge.pt.trace.json.gz"
    event = b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"args":{"correlation":1}},'
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents":[')
        block = event * 100_000
        for _ in range(100):
            f.write(block)
        f.write(b'{}]}')
    code = ("import resource, sys\nfrom dsv4ctl.profile.breakdown import read_breakdown\nfrom dsv4ctl.profile.reader "
            "import TraceError\ntry:\n    read_breakdown(sys.argv[1])\nexcept TraceError as e:\n    print(e)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    message, rss_kib = done.stdout.strip().splitlines()
    assert "more than 4,000,000 kernels" in message
    assert int(rss_kib) < 1_200_000  # ~250 bytes per kept kernel, whatever the file's size


# ---- store, A/B, command ---------------------------------------------------------------------------------------


def test_ab_of_repeats_gates_on_relative_and_absolute_change():
    base = [[read_breakdown(PROFILES / "cuda_tp2_rank0.pt.trace.json.gz")] for _ in range(6)]
    cand = [[read_breakdown(PROFILES / "cuda_tp2_rank1.pt.trace.json.gz")] for _ in range(6)]
    for i, run in enumerate(base + cand):  # a little noise, so the test has ranks to work with
        run[0].categories = {k: v + 0.01 * i for k, v in run[0].categories.items()}
        run[0].kernel_us += 0.01 * i * len(run[0].categories)
    d = diff_profiles("A", base, "B", cand, Gate(0.05, 0.05, 10.0))
    rows = {(r.kind, r.name): r for r in d.rows}
    routed = rows[("category", "moe_routed")]
    assert routed.changed and routed.delta_us == pytest.approx(27.0, abs=0.2) and routed.p < 0.05
    small = rows[("category", "elementwise")]  # +10% but 1.8 us: under the absolute floor
    assert not small.changed and "under 10 us" in small.why
    assert d.explains[0] == "moe_routed" and d.explained_share >= 1.0 - 1e-9
    strict = diff_profiles("A", base, "B", cand, Gate(0.05, 0.5, 10.0))
    assert not any(r.changed for r in strict.rows)  # 10% everywhere: under a 50% relative floor


def test_ab_of_one_profile_a_side_calls_nothing_a_change():
    a = [[read_breakdown(PROFILES / "cuda_tp2_rank0.pt.trace.json.gz")]]
    b = [[read_breakdown(PROFILES / "cuda_tp2_rank1.pt.trace.json.gz")]]
    d = diff_profiles("A", a, "B", b)
    assert not any(r.changed for r in d.rows) and d.notes and d.rows[0].delta_us == pytest.approx(72.3)


def test_ab_refuses_profiles_of_other_rules_or_devices(tmp_path):
    a = read_breakdown(PROFILES / "cuda_tp2_rank0.pt.trace.json.gz")
    b = read_breakdown(PROFILES / "cuda_tp2_rank1.pt.trace.json.gz")
    b.rules_hash = "0" * 16
    with pytest.raises(MixedProfiles, match="different category rules"):
        diff_profiles("A", [[a]], "B", [[b]])


def test_store_keeps_a_runs_profile_by_rank_window_and_rules(tmp_path):
    from dsv4ctl.profile.store import load_profiles, save_profile
    from dsv4ctl.store import open_store

    store = open_store(tmp_path / "r.db")
    cid = store.create_campaign("c", "local", "test")
    eid = store.experiment_id("e", "h", "{}", "test")
    run_id = store.add_run(campaign_id=cid, experiment_id=eid, token="t1", state="COMPLETED", label="P1")
    b0 = read_breakdown(PROFILES / "cuda_tp2_rank0.pt.trace.json.gz")
    b1 = read_breakdown(PROFILES / "cuda_tp2_rank1.pt.trace.json.gz")
    save_profile(store, run_id, "skip2+3", b0)
    save_profile(store, run_id, "skip2+3", b1)
    save_profile(store, run_id, "skip2+3", b0)  # again: replaced, not doubled
    got = load_profiles(store, run_id, b0.rules_hash)
    assert [g.rank for g in got] == [0, 1]
    assert got[0].categories == pytest.approx(b0.categories) and got[1].modules == pytest.approx(b1.modules)
    assert load_profiles(store, run_id, "f" * 16) == []


def test_profile_command_json_and_ab_exit_codes(cli):
    r = cli("profile", str(PROFILES / "cuda_tp2_rank0.pt.trace.json.gz"), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert {"kernel_us", "gpu_busy_us", "categories", "modules", "steps"} <= set(data)
    assert data["kernel_us"] == pytest.approx(sum(k["us"] for k in
                                                  EXPECTED["cuda_tp2_rank0.pt.trace.json.gz"]["kernels"]))
    assert {"name", "kernel_us", "share"} <= set(data["categories"][0])
    assert {m["name"] for m in data["modules"]} >= {"DeepseekV4MLP", "FusedMoE"}
    r = cli("profile", str(PROFILES / "cuda_tp2_rank0.pt.trace.json.gz"),
            str(PROFILES / "cuda_tp2_rank1.pt.trace.json.gz"), "--json")
    assert r.exit_code == 0, r.output  # one profile a side: shown, not called a change
    rows = json.loads(r.output)["rows"]
    assert {"name", "base_us", "cand_us", "delta_us"} <= set(rows[0])


def test_profile_command_bad_file_is_one_line(tmp_path):
    bad = tmp_path / "x.pt.trace.json"
    bad.write_text("nope")
    done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "profile", str(bad)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2 and "not a torch profiler trace" in done.stderr
