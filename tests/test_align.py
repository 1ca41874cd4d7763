"""Layered alignment (issue 15): the compare on a real capture (tiny Qwen2, vLLM CPU engine vs transformers
float32, tests/fixtures/align), every layer perturbed in turn is named exactly, hostile capture files never give
`aligned` and never raise, the lower rungs catch kvcache.py's wrong readers, the verdict mapping, the spec and its
rules. test_align_engine.py runs the same end to end on the real engine."""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4ctl.modes.align.result import apply_alignment, describe
from dsv4ctl.modes.align.compare import Capture, compare_captures, compare_dirs, read_capture, read_safetensors
from dsv4ctl.spec.models import AlignSpec, ExperimentSpec

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "runtime"))

CAPTURE = ROOT / "tests" / "fixtures" / "align" / "tiny-qwen2"
ALIGN = AlignSpec().model_dump(mode="json")
FILES = ("engine.json", "engine.safetensors", "reference.json", "reference.safetensors")


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors layout (8-byte header length, JSON header, data), float32, written with numpy."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def captures() -> tuple[Capture, Capture]:
    return read_capture(CAPTURE, "engine"), read_capture(CAPTURE, "reference")


def perturb_from(capture: Capture, layer: int | None, scale: float = 0.2) -> Capture:
    """The capture with noise of relative size `scale` from `layer` on (None: the final norm only), as a broken
    layer spreads to every later one."""
    rng = np.random.default_rng(layer or 0)
    tensors = dict(capture.tensors)
    for name, value in capture.tensors.items():
        key = name.split(".", 1)[1]
        later = key == "norm" or (layer is not None and int(key.split(".")[1]) >= layer)
        if later:
            noise = rng.standard_normal(value.shape)
            noise *= scale * np.linalg.norm(value, axis=1, keepdims=True) / np.linalg.norm(noise, axis=1, keepdims=True)
            tensors[name] = value + noise
    return Capture(capture.meta, tensors, capture.where)


def test_the_real_capture_is_aligned_on_every_rung():
    result = compare_dirs(CAPTURE, "engine", CAPTURE, "reference", ALIGN)
    assert result["verdict"] == "aligned" and result["aligned"]
    assert [r["name"] for r in result["rungs"]] == ["cache round trip", "attention", "layer 0", "layer 1",
                                                    "final norm", "next-token logits", "greedy tokens", "perplexity"]
    assert all(r["ok"] for r in result["rungs"])
    assert result["metrics"]["align_min_cosine"] > 0.99999 and result["metrics"]["ppl_ratio"] < 1.0001


@pytest.mark.parametrize("layer", [0, 1])
def test_every_layer_perturbed_is_named_exactly(layer):
    engine, reference = captures()
    assert engine.meta["layers"] == [0, 1]
    result = compare_captures(perturb_from(engine, layer), reference, ALIGN)
    assert result["verdict"] == f"diverged at layer {layer}"
    assert result["first"]["layer"] == layer
    assert all(r["ok"] for r in result["rungs"] if r["kind"] == "layer" and r["layer"] < layer)
    assert 0.97 < result["first"]["cosine"] < 0.99  # 1/sqrt(1 + 0.2^2) = 0.981 at the worst position
    assert describe(result).startswith(f"diverged at layer {layer}: cosine 0.9")


def test_a_perturbed_final_norm_names_the_norm_and_a_chosen_layer_set_is_respected():
    engine, reference = captures()
    assert compare_captures(perturb_from(engine, None), reference, ALIGN)["verdict"] == "diverged at final norm"
    only_1 = {**ALIGN, "layers": [1]}
    result = compare_captures(perturb_from(engine, 1), reference, only_1)
    assert [r["name"] for r in result["rungs"] if r["kind"] == "layer"] == ["layer 1"]
    assert result["verdict"] == "diverged at layer 1"
    missing = compare_dirs(CAPTURE, "engine", CAPTURE, "reference", {**ALIGN, "layers": [7]})
    assert not missing["aligned"] and missing["verdict"].startswith("not compared: layers [7]")


def test_a_small_perturbation_stays_within_a_looser_tolerance():
    engine, reference = captures()
    loose = {**ALIGN, "tolerances": {**ALIGN["tolerances"], "cosine": 0.99, "perplexity_ratio": 2.0,
                                     "topk_overlap": 3}}
    assert compare_captures(perturb_from(engine, 0, scale=0.01), reference, loose)["aligned"]


def test_greedy_and_logits_rungs_use_vllms_rule():
    engine, reference = captures()
    prompts = json.loads(json.dumps(engine.meta["prompts"]))
    top = prompts[0]["greedy_top"][3]
    # A near tie: the engine took its second choice, which the reference also has in its top-k: accepted.
    prompts[0]["greedy_ids"][3] = top[1][0]
    accepted = compare_captures(Capture({**engine.meta, "prompts": prompts}, engine.tensors, "e"), reference, ALIGN)
    greedy = next(r for r in accepted["rungs"] if r["kind"] == "greedy")
    assert greedy["ok"] and greedy["divergences"][0] == {"prompt": 0, "position": 3, "expected": top[0][0],
                                                         "got": top[1][0], "accepted": True}
    prompts[0]["greedy_ids"][3] = 811  # a token in neither top-k: refused
    refused = compare_captures(Capture({**engine.meta, "prompts": prompts}, engine.tensors, "e"), reference, ALIGN)
    assert refused["verdict"] == "diverged at greedy tokens"
    prompts = json.loads(json.dumps(engine.meta["prompts"]))
    prompts[1]["next_top"] = [[p[0] + 1, p[1]] for p in prompts[1]["next_top"]]
    shifted = compare_captures(Capture({**engine.meta, "prompts": prompts}, engine.tensors, "e"), reference, ALIGN)
    assert shifted["verdict"] == "diverged at next-token logits"


def test_the_lower_rungs_catch_both_wrong_readers():
    from dsv4rt import attention
    from dsv4ctl.modes.align.rungs import lower_rungs

    right = attention.rungs("reference")
    assert right["cache"]["exact"] and 0.999 < right["attention"]["cosine"] < 1.0
    assert all(r["ok"] for r in lower_rungs(right, ALIGN["tolerances"]))
    for reader in ("token-interleaved", "contiguous-first"):
        wrong = attention.rungs(reader)
        rows = {r["name"]: r for r in lower_rungs(wrong, ALIGN["tolerances"])}
        assert not rows["cache round trip"]["ok"] and not rows["attention"]["ok"], reader
        assert rows["attention"]["reader"] == attention.READERS[reader].__name__


def test_a_wrong_reader_recorded_by_the_job_is_the_first_blocker():
    from dsv4rt import attention

    engine, reference = captures()
    meta = {**engine.meta, "rungs": attention.rungs("contiguous-first")}
    result = compare_captures(Capture(meta, engine.tensors, "e"), reference, ALIGN)
    assert result["verdict"] == "diverged at cache round trip"
    without = compare_captures(Capture(meta, engine.tensors, "e"), reference, {**ALIGN, "rungs": False})
    assert without["aligned"]


def test_perturb_layer_fault_parsing():
    from dsv4rt import faults

    assert faults.perturb_layer("perturb-layer:3:0.5") == (3, 0.5)
    for bad in ("perturb-layer:x:1", "perturb-layer:1", "perturb-layer:1:0", "perturb-layer:1:inf",
                "perturb-layer:-1:1", "perturb-layer:1:nan", "perturb-layer:1:2:3"):
        assert faults.perturb_layer(bad) is None and not faults.align_fault_ok(bad), bad
    assert faults.mla_reader("mla-reader:contiguous-first") == "contiguous-first"
    assert not faults.align_fault_ok("mla-reader:other")


# ---- the verdict --------------------------------------------------------------------------------------------------

COHERENT = {"status": "coherent", "passed": True, "false_green": False, "reasons": [], "first_blocker": None,
            "evidence": {"lines": 10}}


def test_a_diverged_alignment_fails_the_verdict_and_names_the_layer(tmp_path):
    engine, reference = captures()
    result = compare_captures(perturb_from(engine, 1), reference, ALIGN)
    result["tolerances"] = ALIGN["tolerances"]
    log = tmp_path / "raw.log"
    log.write_text("x\nalign layer 0: ok\nalign layer 1: BELOW TOLERANCE\nDSV4_VERDICT: DIVERGED\n")
    verdict = apply_alignment(COHERENT, result, str(log))
    assert verdict["status"] == "degenerate" and not verdict["passed"]
    blocker = verdict["first_blocker"]
    assert blocker["kind"] == "align_diverged" and blocker["line"] == 3
    assert blocker["message"].startswith("diverged at layer 1: cosine")
    assert verdict["reasons"][-1].startswith("alignment: diverged at layer 1")
    assert apply_alignment(COHERENT, {**result, "aligned": True}, str(log)) is COHERENT
    crashed = {**COHERENT, "status": "crashed", "passed": False, "first_blocker": {"kind": "exception", "line": 5}}
    assert apply_alignment(crashed, result, str(log))["first_blocker"]["kind"] == "exception"


def test_a_missing_capture_is_not_compared_and_not_passed(tmp_path):
    result = compare_dirs(tmp_path, "engine", tmp_path, "reference", ALIGN)
    assert not result["aligned"] and result["verdict"].startswith("not compared: cannot read")
    verdict = apply_alignment(COHERENT, result, None)
    assert not verdict["passed"] and verdict["first_blocker"]["line"] == 10


# ---- hostile capture files ----------------------------------------------------------------------------------------


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "capture"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir()
    for name in FILES:
        shutil.copy(CAPTURE / name, target / name)
        (target / name).chmod(0o644)
    return target


HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYPOTHESIS
@given(cut=st.integers(min_value=0, max_value=91295), side=st.sampled_from(["engine", "reference"]))
def test_a_truncated_capture_is_never_aligned(tmp_path, cut, side):
    where = _copy(tmp_path)
    path = where / f"{side}.safetensors"
    path.write_bytes(path.read_bytes()[:cut])
    result = compare_dirs(where, "engine", where, "reference", ALIGN)
    assert not result["aligned"] and result["verdict"].startswith("not compared")


@HYPOTHESIS
@given(data=st.binary(max_size=400), header=st.booleans())
def test_garbage_capture_bytes_are_never_aligned(tmp_path, data, header):
    where = _copy(tmp_path)
    blob = (struct.pack("<Q", len(data)) + data) if header else data
    (where / "engine.safetensors").write_bytes(blob)
    result = compare_dirs(where, "engine", where, "reference", ALIGN)
    assert not result["aligned"]


JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=20)


@HYPOTHESIS
@given(key=st.sampled_from(["prompts", "layers", "perplexity", "rungs", "token_ids", "positions", "next_top",
                            "greedy_ids", "greedy_top", "ppl"]), value=JSONS)
def test_hostile_metadata_never_crashes_and_never_passes_a_broken_field(tmp_path, key, value):
    where = _copy(tmp_path)
    meta = json.loads((where / "engine.json").read_text())
    if key in ("token_ids", "positions", "next_top", "greedy_ids", "greedy_top"):
        meta["prompts"][1][key] = value
    elif key == "ppl":
        meta["perplexity"]["ppl"] = value
    else:
        meta[key] = value
    (where / "engine.json").write_text(json.dumps(meta))
    result = compare_dirs(where, "engine", where, "reference", ALIGN)
    original = json.loads((CAPTURE / "engine.json").read_text())
    changed = meta != original
    if changed and key not in ("rungs",):
        assert not result["aligned"], (key, value, result["verdict"])


@HYPOTHESIS
@given(entry=JSONS, name=st.sampled_from(["p0.layer.0", "p2.norm", "__metadata__", "p9.layer.9"]))
def test_hostile_safetensors_headers_never_crash(tmp_path, entry, name):
    where = _copy(tmp_path)
    path = where / "engine.safetensors"
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header[name] = entry
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + n:])
    result = compare_dirs(where, "engine", where, "reference", ALIGN)
    assert isinstance(result["aligned"], bool)
    if name in ("p0.layer.0", "p2.norm") and not result["verdict"].startswith("not compared"):
        # Only a header that still describes a tensor of the right shape can be compared at all.
        assert isinstance(entry, dict)


def test_non_finite_values_are_never_aligned(tmp_path):
    where = _copy(tmp_path)
    tensors = read_safetensors(where / "engine.safetensors")
    tensors["p1.layer.1"] = tensors["p1.layer.1"].copy()
    tensors["p1.layer.1"][2, 5] = np.nan
    write_safetensors(where / "engine.safetensors", tensors)
    result = compare_dirs(where, "engine", where, "reference", ALIGN)
    assert result["verdict"] == "diverged at layer 1" and result["first"]["cosine"] is None
    assert "non-finite" in describe({**result, "tolerances": ALIGN["tolerances"]})


def test_captures_of_other_prompts_are_not_compared(tmp_path):
    where = _copy(tmp_path)
    meta = json.loads((where / "reference.json").read_text())
    meta["prompts"][0]["token_ids"][0] += 1
    (where / "reference.json").write_text(json.dumps(meta))
    assert "not captures of the same prompt" in compare_dirs(where, "engine", where, "reference", ALIGN)["verdict"]


# ---- the spec -----------------------------------------------------------------------------------------------------

BASE = {"name": "a", "model": {"path": "m"}, "requests": [{"prompt": "hi"}]}


def test_align_belongs_to_mode_align_and_the_snapshot_carries_its_defaults():
    with pytest.raises(ValueError, match="`align` belongs to mode: align"):
        ExperimentSpec(**BASE, align={})
    spec = ExperimentSpec(**BASE, mode="align")
    assert spec.snapshot()["align"] == ALIGN
    assert "align" not in ExperimentSpec(**BASE).snapshot()
    assert ALIGN["tolerances"] == {"cosine": 0.999, "top1": True, "topk": 5, "topk_overlap": 4,
                                   "perplexity_ratio": 1.05, "attention_cosine": 0.999}
    with pytest.raises(ValueError, match="topk_overlap 6 cannot exceed topk 5"):
        AlignSpec(tolerances={"topk_overlap": 6})
    for bad in ("run:", "file:x", "run:a b"):
        with pytest.raises(ValueError):
            AlignSpec(reference=bad)
    assert AlignSpec(reference="run:J17").reference == "run:J17"


def test_align_rules():
    from dsv4ctl.spec.rules import check_spec

    spec = ExperimentSpec(**{**BASE, "mode": "align", "batch": 2, "sampling": {"temperature": 0.7},
                             "parallel": {"tp": 2}, "platform": "gfx936"})
    found = {(f.severity, f.path) for f in check_spec(spec)}
    assert {("error", "sampling.temperature"), ("error", "batch"), ("warning", "parallel.tp"),
            ("warning", "align.reference")} <= found
    assert not [f for f in check_spec(ExperimentSpec(**BASE, mode="align", platform="cpu"))
                if f.path in ("batch", "align.reference", "sampling.temperature")]


def test_the_cosine_plot_marks_the_layer_out_of_tolerance():
    from dsv4ctl.modes.align.report import svg_cosines

    engine, reference = captures()
    result = compare_captures(perturb_from(engine, 1), reference, ALIGN)
    svg = svg_cosines({"rungs": result["rungs"], "cosine_tolerance": 0.999})
    assert svg.count("<circle") == 3 and svg.count('fill="#c00"><title>') == 2  # layer 1 and the final norm
    assert "<title>layer 0: cosine 1.0000000" in svg or "<title>layer 0: cosine 0.99999999" in svg
    assert "tolerance 0.999" in svg
    assert svg_cosines({"rungs": [], "cosine_tolerance": 0.999}) == ""


def test_a_relative_perplexity_file_is_relative_to_the_spec_file(tmp_path):
    from dsv4ctl.spec.load import load_spec

    (tmp_path / "texts").mkdir()
    spec_file = tmp_path / "align.yaml"
    spec_file.write_text("name: a\nmode: align\nplatform: cpu\nmodel: {path: /m}\nrequests: [{prompt: hi}]\n"
                         "align: {perplexity_file: ./texts/ppl.txt}\n", encoding="utf-8")
    (loaded,) = load_spec(spec_file)
    assert loaded.spec.align.perplexity_file == str(tmp_path / "texts" / "ppl.txt")


@pytest.mark.parametrize("probe_said", ["COHERENT", "DIVERGED"])
def test_verdict_of_a_stored_diverged_run_names_the_layer_and_fails(cli, tmp_path, probe_said):
    """`dsv4ctl verdict RUN` judges the capture too, with the rung as first blocker, whether the log looks coherent
    or the probe already said DIVERGED (regression: that case lost the blocker)."""
    from dsv4ctl.store import open_store

    run_dir = tmp_path / "run"
    (run_dir / "align").mkdir(parents=True)
    for name in FILES:
        shutil.copy(CAPTURE / name, run_dir / "align" / name)
    engine, _ = captures()
    write_safetensors(run_dir / "align" / "engine.safetensors", perturb_from(engine, 1).tensors)
    ids = [100 + 7 * t for t in range(32)]
    log = run_dir / "raw.log"
    log.write_text("### STAGE: generate\nENGINE_READY in 1.0s\nalign layer 0: ok\nalign layer 1: ok\n"
                   f"REQUEST: 0\nTOKEN_IDS: {json.dumps(ids)}\nFINISH_REASON: length\n"
                   f"DSV4_VERDICT: {probe_said}\nPY_EXIT={0 if probe_said == 'COHERENT' else 2}\n")
    db = tmp_path / "r.db"
    store = open_store(db)
    spec = ExperimentSpec(**BASE, mode="align", platform="cpu")
    experiment = store.experiment_id("a", spec.spec_hash(), json.dumps(spec.snapshot()), "a.yaml")
    store.add_run(experiment_id=experiment, backend="local", token="t1", state="COMPLETED", ingested=0,
                  point_json="{}", repeat_index=0, label="A1", run_dir=str(run_dir), log_path=str(log))
    store.close()
    result = cli("verdict", "A1", "--db", str(db), "--json")
    assert result.exit_code == 1, result.output
    verdict = json.loads(result.output)
    assert verdict["status"] == "degenerate" and not verdict["passed"]
    assert verdict["first_blocker"]["kind"] == "align_diverged" and verdict["first_blocker"]["line"] == 4
    assert verdict["first_blocker"]["message"].startswith("diverged at layer 1")
    shown = cli("show", "A1", "--db", str(db), "--json")
    assert json.loads(shown.output)["verdict"]["first_blocker"]["kind"] == "align_diverged"
    text = cli("show", "A1", "--db", str(db)).output  # the alignment drawn by its mode (modes/registry.py)
    assert "alignment against " in text and '"aligned"' not in text, text


# ---- issue 29 S22/S23: layers outside the model, `not compared` as its own outcome, the fault logged -------------


def test_an_empty_layer_list_is_refused_where_it_is_written(cli, tmp_path):
    spec = tmp_path / "a.yaml"
    spec.write_text("name: a\nmode: align\nplatform: cpu\nmodel: {path: /m}\nrequests: [{prompt: hi}]\n"
                    "align: {layers: []}\n", encoding="utf-8")
    done = cli("validate", spec)
    assert done.exit_code == 1 and f"{spec}:6:9: error: align.layers" in done.output


def _model_dir(tmp_path: Path, layers: int = 2) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"],
                                                   "num_hidden_layers": layers}), encoding="utf-8")
    return model


def test_layers_and_a_perturb_fault_outside_the_model_are_refused_at_submit(tmp_path):
    """S22/S23: `layers: [0, 1, 4000]` validated and failed at judge time; `perturb-layer:99` on a 2-layer model
    did nothing and the run passed. Refused before anything is recorded when config.json is readable here."""
    from dsv4ctl.modes.align.result import AlignLayersOutside, check_layers

    base = dict(BASE, model={"path": str(_model_dir(tmp_path))})
    with pytest.raises(AlignLayersOutside, match=r"align.layers \[4000\]: the model at .* has 2 decoder layers "
                                                  r"\(config.json num_hidden_layers\): layers 0..1"):
        check_layers(ExperimentSpec(**base, mode="align", platform="cpu", align={"layers": [0, 1, 4000]}))
    faulty = ExperimentSpec(**base, mode="align", platform="cpu",
                            environment={"env": {"DSV4_TESTING": "1", "DSV4_FAULT": "perturb-layer:99:0.2"}})
    with pytest.raises(AlignLayersOutside, match="DSV4_FAULT=perturb-layer:99:0.2: .* the fault would perturb "
                                                 "nothing"):
        check_layers(faulty)
    check_layers(ExperimentSpec(**base, mode="align", platform="cpu", align={"layers": [1]},
                                environment={"env": {"DSV4_FAULT": "perturb-layer:1:0.2"}}))  # in range: fine
    check_layers(ExperimentSpec(**dict(BASE, model={"path": str(tmp_path / "absent")}), mode="align",
                                platform="cpu", align={"layers": [4000]}))  # unreadable here: the job checks


def test_the_job_refuses_layers_and_a_fault_layer_the_model_does_not_have():
    from dsv4rt import align as job
    from dsv4rt.faults import FaultRefused

    with pytest.raises(ValueError, match=r"align.layers \[4000\]: not decoder layers of this model \(it has "
                                         r"layers 0..1\)"):
        job.check_layers({"layers": [0, 4000]}, [0, 1], None, None)
    with pytest.raises(FaultRefused, match="layer 99 is not a decoder layer of this model .* would do nothing"):
        job.check_layers({"layers": None}, [0, 1], (99, 0.2), "perturb-layer:99:0.2")
    job.check_layers({"layers": [1]}, [0, 1], (1, 0.2), "perturb-layer:1:0.2")


def test_not_compared_is_its_own_outcome_naming_the_layers(tmp_path):
    """S22: every `not compared` was status degenerate with first blocker align_diverged."""
    engine, reference = captures()
    with pytest.raises(Exception) as caught:
        compare_captures(engine, reference, {**ALIGN, "layers": [0, 1, 4000]})
    assert "layers [4000] are not layers of the captured model (both captures hold 0..1)" in str(caught.value)
    result = compare_dirs(CAPTURE, "engine", CAPTURE, "reference", {**ALIGN, "layers": [0, 1, 4000]})
    assert result["compared"] is False and result["verdict"].startswith("not compared: layers [4000]")
    verdict = apply_alignment(COHERENT, {**result, "tolerances": ALIGN["tolerances"]}, None)
    assert verdict["status"] == "incomplete" and not verdict["passed"]
    assert verdict["first_blocker"]["kind"] == "align_not_compared"
    diverged = compare_captures(perturb_from(engine, 1), reference, ALIGN)
    assert apply_alignment(COHERENT, {**diverged, "tolerances": ALIGN["tolerances"]}, None)["status"] == "degenerate"


def test_captures_of_another_model_say_so(tmp_path):
    """S22: a reference of another model read only "shapes (15, 128) and (15, 256)"."""
    engine, reference = captures()
    wider = {name: np.concatenate([value, value], axis=1) for name, value in reference.tensors.items()}
    other = Capture({**reference.meta, "model": "/models/tiny-deepseek"}, wider, "r")
    result = compare_dirs(CAPTURE, "engine", CAPTURE, "reference", ALIGN)  # the real pair: aligned
    assert result["aligned"]
    with pytest.raises(Exception, match=r"shapes .* the captures are of different models \(engine .*tiny-qwen2, "
                                        r"reference /models/tiny-deepseek\)"):
        compare_captures(engine, other, ALIGN)
