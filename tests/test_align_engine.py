"""Layered alignment end to end on the real vLLM CPU engine (issue 15): experiments/cpu-align.yaml passes with every
rung aligned, a perturbed layer is named exactly, the tiny DeepSeek V3 (MoE + MLA, float32 through CPU_MLA) shows the
engine's rope bug at layer 0 and is aligned with DSV4_NATIVE_ROPE=1, and a stored run serves as the reference of
another (`reference: run:ID`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4ctl.modes.align.result import AlignReferenceUnavailable, stored_alignment
from dsv4ctl.campaign.plan import submit
from dsv4ctl.store import open_store
from dsv4ctl.campaign.watch import watch

from .conftest import EXPERIMENTS, ROOT
from .test_engine import engine  # noqa: F401 - the fixture that skips without the CPU engine

pytestmark = pytest.mark.engine
ALIGN_SPEC = EXPERIMENTS / "cpu-align.yaml"
FAULT = "environment:\n  env:\n    DSV4_TESTING: '1'\n    DSV4_FAULT: {fault}\n"
# The tiny DeepSeek V3 in float32 (CPU_MLA backend) at the default tolerance. Stock, vLLM CPU's C++ rotary_embedding
# op misreads MLA's 3-D q_pe/k_pe (most left unrotated or rotated by wrong positions, docs/alignment.md): positions > 0
# differ from transformers at about 1e-3 and the tool must name layer 0. DSV4_NATIVE_ROPE=1 (the shim routes the rope
# through vLLM's PyTorch forward_native, in the engine process too) makes the same model aligned.
DEEPSEEK = """model:
  path: {root}/models/tiny-deepseek
  arch: DeepseekV3ForCausalLM
  dtype: float32
  extra:
    kv_cache_memory_bytes: 67108864
    attention_config: {{backend: CPU_MLA}}
"""
NATIVE_ROPE = "switches:\n  DSV4_NATIVE_ROPE: 1\n"


def variant(directory, name: str, body: str):
    path = directory / f"{name}.yaml"
    path.write_text(f"extends: {ALIGN_SPEC}\nname: {name}\n{body}", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def align_campaign(engine, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("align")
    perturbed = variant(d, "align-perturb-0", FAULT.format(fault="perturb-layer:0:0.2"))
    # The aligned run last: `run:latest` after this campaign is a tiny-Qwen2 align run (issue 29 S1's setting).
    specs = {"perturbed": perturbed, "deepseek": variant(d, "align-deepseek", DEEPSEEK.format(root=ROOT)),
             "deepseek-native-rope": variant(d, "align-deepseek-native-rope", DEEPSEEK.format(root=ROOT) + NATIVE_ROPE),
             "aligned": ALIGN_SPEC}
    store = open_store(d / "r.db")
    outcome = submit(store, list(specs.values()), "local", runs_root=d / "runs", campaign="align")
    watch(store, interval_s=2, max_interval_s=5, timeout_s=900)
    runs = dict(zip(specs, (store.find_run(str(i)) for i in outcome.run_ids)))
    return {"store": store, "runs": runs, "dir": d}


def test_cpu_align_passes_with_every_rung_aligned(align_campaign):
    store, row = align_campaign["store"], align_campaign["runs"]["aligned"]
    verdict = store.verdict(row.id)
    assert verdict["status"] == "coherent" and verdict["passed"], verdict["reasons"]
    result = stored_alignment(store, row.id)
    assert result["verdict"] == "aligned"
    names = [r["name"] for r in result["rungs"]]
    assert names == ["cache round trip", "attention", "layer 0", "layer 1", "final norm", "next-token logits",
                     "greedy tokens", "perplexity"]
    rows = store.db.execute("SELECT name, ok, cosine FROM align_rungs WHERE run_id = ? ORDER BY position",
                            [row.id]).fetchall()
    assert [r[0] for r in rows] == names and all(r[1] == 1 for r in rows)
    assert min(r[2] for r in rows if r[0].startswith("layer")) > 0.99999
    assert store.metrics(row.id)["ppl_ratio"] < 1.001


def test_a_perturbed_layer_is_named_exactly(align_campaign):
    store, row = align_campaign["store"], align_campaign["runs"]["perturbed"]
    verdict = store.verdict(row.id)
    assert verdict["status"] == "degenerate" and not verdict["passed"] and not verdict["false_green"]
    assert verdict["first_blocker"]["kind"] == "align_diverged"
    assert verdict["first_blocker"]["message"].startswith("diverged at layer 0: cosine 0.9")
    assert stored_alignment(store, row.id)["verdict"] == "diverged at layer 0"
    # Lines as the log viewer counts them (newlines only: a progress bar's carriage returns stay inside a line).
    line = open(row.log_path, "rb").read().split(b"\n")[verdict["first_blocker"]["line"] - 1]
    assert line.startswith(b"align layer 0: BELOW TOLERANCE")
    # issue 29 S23: the fault says in raw.log that it was applied (it printed nothing before)
    assert b"DSV4_FAULT: perturb-layer:0:0.2: applied to decoder layer 0 in " in open(row.log_path, "rb").read()


def test_the_engine_rope_bug_names_layer_0_of_the_tiny_deepseek(align_campaign):
    store, row = align_campaign["store"], align_campaign["runs"]["deepseek"]
    assert stored_alignment(store, row.id)["verdict"] == "diverged at layer 0"
    verdict = store.verdict(row.id)
    assert verdict["status"] == "degenerate" and not verdict["passed"] and not verdict["false_green"]
    log = open(row.log_path, "rb").read()
    assert b"align layer 0: BELOW TOLERANCE" in log and b"DSV4_NATIVE_ROPE" not in log


def test_native_rope_switch_aligns_the_tiny_deepseek_at_the_default_tolerance(align_campaign):
    store, row = align_campaign["store"], align_campaign["runs"]["deepseek-native-rope"]
    result = stored_alignment(store, row.id)
    assert result["verdict"] == "aligned", result["verdict"]
    layers = [r["cosine"] for r in result["rungs"] if r["kind"] == "layer"]
    assert len(layers) == 2 and min(layers) > 0.99999
    assert store.verdict(row.id)["passed"]
    # The shim said so in the job's log (the engine process's line included when it loads the model).
    assert b"[dsv4 shim] DSV4_NATIVE_ROPE=1: " in open(row.log_path, "rb").read()


def test_a_stored_run_is_the_reference_of_another(align_campaign):
    store, d = align_campaign["store"], align_campaign["dir"]
    label = align_campaign["runs"]["aligned"].label
    spec = variant(d, "align-vs-run", f"align:\n  reference: run:{label}\n")
    outcome = submit(store, [spec], "local", runs_root=d / "runs", campaign="align-vs-run")
    watch(store, interval_s=2, max_interval_s=5, timeout_s=300)
    run_id = outcome.run_ids[0]
    result = stored_alignment(store, run_id)
    reference_id = align_campaign["runs"]["aligned"].id  # fixed at submit (issue 29 S1): the run id, not the label
    assert result["reference"] == f"run:{reference_id}" and result["verdict"] == "aligned"
    assert store.verdict(run_id)["passed"]
    from dsv4ctl.modes.align.result import reference_dir

    with pytest.raises(AlignReferenceUnavailable, match="no run 'J999'"):
        reference_dir(store, "run:J999")
    snapshot = json.loads(store.spec_json(store.find_run(str(run_id)).experiment_id))
    assert snapshot["align"]["reference"] == f"run:{reference_id}"


def test_the_report_shows_each_align_run_with_its_plot(align_campaign):
    from dsv4ctl.report.campaign import render_html, render_markdown, report_data

    data = report_data(align_campaign["store"], "align")
    verdicts = {a["experiment"]: a["verdict"] for a in data.alignments}
    assert verdicts["cpu-align"] == "aligned" and verdicts["align-deepseek-native-rope"] == "aligned"
    assert verdicts["align-deepseek"].startswith("diverged at layer 0: cosine")
    assert verdicts["align-perturb-0"].startswith("diverged at layer 0: cosine")
    page = render_html(data)
    assert page.count('aria-label="1 - cosine by layer"') == 4
    assert "diverged at layer 0" in render_markdown(data)
    assert data.to_json()["alignments"][0]["rungs"]


def test_run_latest_is_fixed_at_submit_and_a_perturbed_run_is_compared_with_it(align_campaign):
    """Issue 29 S1: `reference: run:latest` was resolved again when the run was judged, when `latest` was the run
    itself: a perturbed layer 1 came out coherent PASSED, every layer aligned with its own capture."""
    store, d = align_campaign["store"], align_campaign["dir"]
    latest = store.find_run("latest")
    assert json.loads(store.spec_json(latest.experiment_id))["model"]["path"].endswith("tiny-qwen2")
    spec = variant(d, "align-perturb-latest", 'align:\n  reference: "run:latest"\n'
                   + FAULT.format(fault="perturb-layer:1:0.2"))
    outcome = submit(store, [spec], "local", runs_root=d / "runs", campaign="align-latest")
    watch(store, interval_s=2, max_interval_s=5, timeout_s=300)
    row = store.find_run(str(outcome.run_ids[0]))
    assert json.loads(store.spec_json(row.experiment_id))["align"]["reference"] == f"run:{latest.id}"
    verdict = store.verdict(row.id)
    assert not verdict["passed"] and verdict["status"] == "degenerate", verdict["reasons"]
    assert verdict["first_blocker"]["message"].startswith("diverged at layer 1: cosine 0.9")
    result = stored_alignment(store, row.id)
    assert result["reference"] == f"run:{latest.id}"
    ppl = next(r for r in result["rungs"] if r["kind"] == "perplexity")
    assert ppl["engine"] != ppl["reference"]  # compared with the reference's capture, not its own
    # judged again once other runs are newer: still run `latest.id`, still diverged
    from dsv4ctl.campaign.watch import rejudge

    again, _ = rejudge(str(row.id), store)
    assert not again.passed and again.first_blocker.message.startswith("diverged at layer 1")
    align_campaign["latest_run"] = row


def test_a_reference_of_another_model_is_refused_at_submit(align_campaign):
    """Issue 29 S3: a Qwen2 run against the tiny DeepSeek's capture got as far as "shapes (15, 128) and (15, 256)"."""
    store, d = align_campaign["store"], align_campaign["dir"]
    deepseek = align_campaign["runs"]["deepseek"]
    spec = variant(d, "align-vs-deepseek", f"align:\n  reference: run:{deepseek.label}\n")
    before = len(store.runs())
    with pytest.raises(AlignReferenceUnavailable, match=r"the reference run's is .*tiny-deepseek "
                                                        r"\(DeepseekV3ForCausalLM\): a reference must be an align "
                                                        r"run of the same model"):
        submit(store, [spec], "local", runs_root=d / "runs", campaign="align-vs-deepseek")
    assert len(store.runs()) == before


def test_real_align_logs_ingested_are_judged_as_when_submitted(align_campaign, tmp_path):
    """Issue 29 S3: the raw.log of an align run ingested came out coherent (passed) whatever its capture said."""
    from dsv4ctl.campaign.ingest import ingest_log

    store = open_store(tmp_path / "ingest.db")
    submitted = align_campaign["runs"]["perturbed"]
    done = ingest_log(store, Path(submitted.log_path), "ing-perturbed", None, [], [], runs_root=tmp_path / "runs")
    stored = align_campaign["store"].verdict(submitted.id)
    assert done.mode == "align" and done.verdict.status == stored["status"] == "degenerate"
    assert done.verdict.first_blocker.message == stored["first_blocker"]["message"]
    latest_run = align_campaign.get("latest_run")
    if latest_run is not None:  # a log whose reference was a stored run: never passed on its own
        other = ingest_log(store, Path(latest_run.log_path), "ing-latest", None, [], [], runs_root=tmp_path / "runs")
        assert not other.verdict.passed and other.verdict.first_blocker.kind == "align_not_compared"
