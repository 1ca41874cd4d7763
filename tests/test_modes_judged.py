"""Issue 29, points 1 and 2 (hostile-modes S1, S2, S3): a reference is a fixed run, and every path that judges a run
(submit's watch, `verdict RUN`, `verdict --log`, `ingest`, re-judging) goes through the same mode's judge. Real
SQLite, real capture files (tests/fixtures/align), serve run directories shaped as the job writes them."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from dsv4ctl.modes.align.result import AlignReferenceUnavailable, check_references, stored_alignment
from dsv4ctl.campaign.plan import plan
from dsv4ctl.spec.models import ExperimentSpec
from dsv4ctl.store import open_store

from .conftest import ROOT
from .serving_runs import load_records, write_run
from .test_align import CAPTURE, FILES, captures, perturb_from, write_safetensors

IDS = [100 + 7 * t for t in range(16)]


def align_log(path: Path, reference: str = "hf", probe_said: str = "COHERENT", gen_s: float = 1.5) -> Path:
    """raw.log as runtime/dsv4rt/align.py prints it (stages, one block per prompt, the reference line)."""
    lines = ["### STAGE: env", "### STAGE: align rungs", "### STAGE: engine init (the real test)",
             "ENGINE_READY in 1.0s", 'DSV4_EXPECT: {"max_tokens": 16, "ignore_eos": true, "n_requests": 1}',
             "### STAGE: align capture", "REQUEST: 0", f"TOKEN_IDS: {json.dumps(IDS)}", "FINISH_REASON: length"]
    if reference == "hf":
        lines += ["### STAGE: align reference (transformers, float32, cpu)", "### STAGE: align compare",
                  "align layer 0: ok", "align layer 1: ok", "align verdict: aligned"]
    else:
        lines.append(f"align reference {reference}: compared when dsv4ctl judges the run")
    lines += [f'DSV4_METRICS: {{"gen_s": {gen_s}}}', f"DSV4_VERDICT: {probe_said}", "PY_EXIT=0"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def capture_into(run_dir: Path, perturb_layer: int | None = None, sides=("engine", "reference")) -> None:
    (run_dir / "align").mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if name.split(".")[0] in sides:
            shutil.copy(CAPTURE / name, run_dir / "align" / name)
    if perturb_layer is not None:
        engine, _ = captures()
        write_safetensors(run_dir / "align" / "engine.safetensors", perturb_from(engine, perturb_layer).tensors)


def align_spec(tmp_path: Path, name: str, reference: str, model: str = "/models/tiny-qwen2",
               arch: str = "Qwen2ForCausalLM") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        platform: cpu
        mode: align
        model: {{path: {model}, arch: {arch}, kv_cache_dtype: auto}}
        requests: [{{prompt: hi}}]
        sampling: {{max_tokens: 16}}
        align: {{reference: "{reference}"}}
        """), encoding="utf-8")
    return path


def record(store, spec: ExperimentSpec, run_dir: Path, label: str, log: Path) -> int:
    experiment = store.experiment_id(spec.name, spec.spec_hash(), json.dumps(spec.snapshot()), "x.yaml")
    return store.add_run(experiment_id=experiment, backend="local", token=f"t-{label}", state="COMPLETED",
                         ingested=0, point_json="{}", repeat_index=0, label=label, run_dir=str(run_dir),
                         log_path=str(log))


@pytest.fixture
def reference_store(tmp_path):
    """A store holding REF: an aligned align run of /models/tiny-qwen2 with its capture (the engine side)."""
    store = open_store(tmp_path / "r.db")
    (ref,) = plan([align_spec(tmp_path, "ref", "hf")])
    run_dir = tmp_path / "ref-run"
    capture_into(run_dir)
    record(store, ref.spec, run_dir, "REF", align_log(run_dir / "raw.log"))
    return store


# ---- S1: a reference is a fixed run ------------------------------------------------------------------------------


def test_run_latest_is_fixed_to_a_run_id_at_submit_and_the_perturbed_run_is_compared_with_it(cli, tmp_path,
                                                                                             reference_store):
    """S1: `reference: run:latest` passed the submit check and was looked up again when judging, when `latest` was
    the run itself: a perturbed layer came out coherent PASSED. Now the stored spec holds run:<id> of REF."""
    store = reference_store
    ref_id = store.find_run("REF").id
    planned = plan([align_spec(tmp_path, "perturbed", "run:latest")])
    check_references(store, planned)
    assert planned[0].spec.align.reference == f"run:{ref_id}"
    assert planned[0].spec.snapshot()["align"]["reference"] == f"run:{ref_id}"
    run_dir = tmp_path / "perturbed-run"
    capture_into(run_dir, perturb_layer=1, sides=("engine",))
    record(store, planned[0].spec, run_dir, "P1", align_log(run_dir / "raw.log", reference=f"run:{ref_id}"))
    store.close()
    done = cli("verdict", "P1", "--db", tmp_path / "r.db", "--json")
    verdict = json.loads(done.output)
    assert done.exit_code == 1 and not verdict["passed"] and verdict["status"] == "degenerate"
    assert verdict["first_blocker"]["message"].startswith("diverged at layer 1: cosine")
    store = open_store(tmp_path / "r.db")
    assert stored_alignment(store, store.find_run("P1").id)["reference"] == f"run:{ref_id}"


def test_a_stored_moving_alias_or_the_run_itself_is_never_compared(cli, tmp_path, reference_store):
    """A spec stored before the fix (`run:latest`), or one naming the run itself or a later run, is `not compared`:
    never aligned with its own capture, never passed."""
    store = reference_store
    spec = plan([align_spec(tmp_path, "legacy", "hf")])[0].spec
    own_dir = tmp_path / "own"
    capture_into(own_dir, sides=("engine",))
    cases = {"L1": "run:latest", "L2": "run:4", "L3": "run:4"}  # runs 2, 3, 4: L2 names a later run, L3 itself
    for label, reference in cases.items():
        stored = spec.model_copy(update={"align": spec.align.model_copy(update={"reference": reference}),
                                         "name": f"legacy-{label.lower()}"})
        record(store, stored, own_dir, label, align_log(own_dir / f"{label}.log", reference=reference))
    store.close()
    messages = {}
    for label in cases:
        verdict = json.loads(cli("verdict", label, "--db", tmp_path / "r.db", "--json").output)
        assert not verdict["passed"] and verdict["status"] == "incomplete", (label, verdict["status"])
        assert verdict["first_blocker"]["kind"] == "align_not_compared"
        messages[label] = verdict["first_blocker"]["message"]
    assert "stored unresolved" in messages["L1"] and "`latest` moves" in messages["L1"]
    assert "is run 4, a run recorded after this one" in messages["L2"]
    assert "is run 4, the run itself" in messages["L3"]


def test_a_reference_of_another_model_is_refused_at_submit_with_the_reason(cli, tmp_path, reference_store):
    store = reference_store
    planned = plan([align_spec(tmp_path, "ds", "run:REF", model="/models/tiny-deepseek",
                               arch="DeepseekV3ForCausalLM")])
    with pytest.raises(AlignReferenceUnavailable, match=r"this spec's model is /models/tiny-deepseek "
                                                        r"\(DeepseekV3ForCausalLM\), the reference run's is "
                                                        r"/models/tiny-qwen2 \(Qwen2ForCausalLM\)"):
        check_references(store, planned)
    before = len(store.runs())
    store.close()
    spec = align_spec(tmp_path, "ds", "run:REF", model="/models/tiny-deepseek", arch="DeepseekV3ForCausalLM")
    with pytest.raises(AlignReferenceUnavailable, match="a reference must be an align run of the same model"):
        cli("submit", spec, "--backend", "local", "--db", tmp_path / "r.db", "--runs-dir", tmp_path / "runs")
    assert len(open_store(tmp_path / "r.db").runs()) == before  # nothing recorded


def test_every_submit_path_fixes_the_reference(tmp_path, reference_store):
    """campaign.submit itself (sweep, suite, bisect submit through it) fixes the reference before recording."""
    from dsv4ctl.campaign.plan import record_plan, submit

    store = reference_store
    planned = plan([align_spec(tmp_path, "via-campaign", "run:latest")])
    import dsv4ctl.campaign.plan as campaign

    seen = {}
    original = campaign.record_plan

    def spy(store_, name, backend, command, runs, root, **kw):
        seen["reference"] = runs[0].spec.align.reference
        raise SystemExit(0)  # stop before a job is started: what was about to be recorded is what matters

    campaign.record_plan = spy
    try:
        with pytest.raises(SystemExit):
            submit(store, [], "local", planned=planned, runs_root=tmp_path / "runs")
    finally:
        campaign.record_plan = original
    assert seen["reference"] == f"run:{store.find_run('REF').id}" and record_plan is original


# ---- S2: re-judging an ingested serve log keeps the serve judgement ------------------------------------------------


def test_an_ingested_serve_log_without_its_records_is_never_passed_on_any_path(cli, tmp_path):
    """S2: raw.log of a serve run without serve-requests.jsonl was `incomplete` at ingest, then `verdict SL1` said
    COHERENT — PASSED and stored it. Ingest, `verdict RUN`, `verdict --log` and `runs` now agree."""
    full = write_run(tmp_path / "serve-run", load_records())
    lone = tmp_path / "lone" / "raw.log"
    lone.parent.mkdir()
    shutil.copy(full, lone)
    db = tmp_path / "r.db"
    ingested = cli("ingest", "--log", lone, "--experiment", "servelone", "--label", "SL1", "--db", db, "--json")
    at_ingest = json.loads(ingested.output)["verdict"]
    assert at_ingest["status"] == "incomplete" and not at_ingest["passed"]
    rejudged = cli("verdict", "SL1", "--db", db, "--json")
    again = json.loads(rejudged.output)
    assert rejudged.exit_code == 1 and again["status"] == "incomplete" and not again["passed"]
    assert again["reasons"] == at_ingest["reasons"]
    by_log = json.loads(cli("verdict", "--log", lone, "--json").output)
    assert by_log["status"] == "incomplete" and by_log["reasons"] == at_ingest["reasons"]
    assert "PASSED" not in cli("runs", "--experiment", "servelone", "--db", db).output
    # The whole run directory ingested passes, and re-judging it still reads the serve files (copied at ingest).
    # (another database: in this one the same raw.log is run SL1 already)
    other = tmp_path / "other.db"
    whole = json.loads(cli("ingest", "--log", full, "--experiment", "servefull", "--db", other, "--json").output)
    assert whole["verdict"]["passed"], whole["verdict"]["reasons"]
    shutil.rmtree(tmp_path / "serve-run")
    assert json.loads(cli("verdict", whole["label"], "--db", other, "--json").output)["passed"]


def test_the_mode_comes_from_the_log_or_mode_and_disagreement_is_refused(cli, tmp_path):
    full = write_run(tmp_path / "serve-run", load_records())
    db = tmp_path / "r.db"
    from dsv4ctl.errors import UsageError

    with pytest.raises(UsageError, match="has the markers of a serve run") as refused:
        cli("ingest", "--log", full, "--experiment", "x", "--mode", "align", "--db", db)
    assert refused.value.exit_code == 2 and not list((tmp_path / "runs" / "ingested").iterdir())
    offline = tmp_path / "plain.log"
    offline.write_text((ROOT / "tests" / "fixtures" / "logs" / "J17.log").read_text(encoding="utf-8"))
    as_serve = json.loads(cli("ingest", "--log", offline, "--experiment", "y", "--mode", "serve", "--db", db,
                              "--json").output)
    assert not as_serve["verdict"]["passed"]  # a serve run whose serve files are missing is never passed
    assert not json.loads(cli("verdict", as_serve["label"], "--db", db, "--json").output)["passed"]


# ---- S3: ingested align logs are compared exactly as submitted ones -------------------------------------------------


def test_an_ingested_align_log_with_a_stored_reference_is_not_compared_never_passed(cli, tmp_path):
    """S3: an align run against `run:DS` was `not compared` when submitted; the same raw.log ingested came out
    coherent (passed): the comparison never ran for ingested logs."""
    run_dir = tmp_path / "othermodel"
    capture_into(run_dir, sides=("engine",))
    log = align_log(run_dir / "raw.log", reference="run:DS")
    db = tmp_path / "r.db"
    done = json.loads(cli("ingest", "--log", log, "--experiment", "ing-align", "--label", "IA", "--db", db,
                          "--json").output)
    for verdict in (done["verdict"], json.loads(cli("verdict", "IA", "--db", db, "--json").output),
                    json.loads(cli("verdict", "--log", log, "--json").output)):
        assert not verdict["passed"] and verdict["status"] == "incomplete"
        assert verdict["first_blocker"]["kind"] == "align_not_compared"
        assert "run:DS" in verdict["first_blocker"]["message"]


def test_an_ingested_align_log_is_compared_with_the_capture_beside_it(cli, tmp_path):
    """reference: hf: the capture beside the log is compared at ingest, on re-judge (from the copy, after the
    original is gone) and by `verdict --log`: a perturbed layer is named on every path."""
    run_dir = tmp_path / "perturbed"
    capture_into(run_dir, perturb_layer=1)
    log = align_log(run_dir / "raw.log", reference="hf")  # the job's own line says aligned: the files say not
    db = tmp_path / "r.db"
    by_log = json.loads(cli("verdict", "--log", log, "--json").output)
    done = json.loads(cli("ingest", "--log", log, "--experiment", "ing-hf", "--label", "IH", "--db", db,
                          "--json").output)
    shutil.rmtree(run_dir)
    rejudged = json.loads(cli("verdict", "IH", "--db", db, "--json").output)
    for verdict in (by_log, done["verdict"], rejudged):
        assert not verdict["passed"] and verdict["status"] == "degenerate"
        assert verdict["first_blocker"]["message"].startswith("diverged at layer 1: cosine")
    store = open_store(db)
    assert stored_alignment(store, store.find_run("IH").id)["verdict"] == "diverged at layer 1"
    clean = tmp_path / "clean"
    capture_into(clean)
    ok = json.loads(cli("ingest", "--log", align_log(clean / "raw.log", gen_s=1.6), "--experiment", "ing-hf",
                        "--db", db, "--json").output)
    assert ok["verdict"]["passed"] and ok["verdict"]["status"] == "coherent"
