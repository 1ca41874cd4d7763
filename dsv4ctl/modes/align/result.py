"""Layered alignment, the controller's side (issue 15): the result of an align run, its place in the verdict, and
its rows in the store.

When a run of `mode: align` is judged, its capture files (run directory, `align/`) are compared again here with
the spec's tolerances — against the reference captured in the same job (`reference: hf`) or against a stored
align run (`reference: run:ID`) — whatever the job printed. The verdict then maps as follows:

  aligned                 the verdict is the log's (the greedy tokens judged as any run's); nothing added.
  diverged at <rung>      not passed; a coherent status becomes `degenerate`, and the first blocker (kind
                          `align_diverged`) names the rung: `diverged at layer 3: cosine 0.9873 < 0.999 ...`.
  not compared: <why>     a capture missing, unreadable, not of the same prompts or layers, or a reference of
                          another model: not passed, its own outcome: a coherent status becomes `incomplete`
                          (nothing was compared, so nothing diverged), first blocker `align_not_compared`.

Standard library at import: numpy is imported by align_compare's functions, only for align runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import Dsv4Error

if TYPE_CHECKING:
    from ...judge.rules import Verdict
    from ...store import RunRow, Store

ALIGN_DIR = "align"
BLOCKER_KIND = "align_diverged"
NOT_COMPARED_KIND = "align_not_compared"  # its own outcome: nothing was compared, so nothing diverged either


class AlignReferenceUnavailable(Dsv4Error):
    """`align.reference: run:ID` names a run that is unknown, not an align run, or has no capture."""


class AlignLayersOutside(Dsv4Error):
    """`align.layers` or a `perturb-layer:K` fault names a layer the model's config.json does not have."""

    exit_code = 2


MAX_CONFIG_BYTES = 4 << 20


def capture_dir(row) -> Path | None:
    """Where a run's job wrote its capture: `align/` beside its raw.log (the run's or array task's directory)."""
    log = row.data.get("log_path")
    return Path(log).parent / ALIGN_DIR if log else None


REFERENCE_ID = re.compile(r"run:([0-9]{1,18})")  # what a submitted spec holds: the run id fixed at submit


def _reference_row(store: Store, reference: str) -> RunRow:
    """The stored align run `run:ID` names, with a capture; AlignReferenceUnavailable otherwise."""
    from ...store import RunNotFound

    ref = reference.removeprefix("run:")
    try:
        row = store.find_run(ref)
    except RunNotFound:
        raise AlignReferenceUnavailable(f"align.reference {reference}: no run {ref!r} in {store.path} "
                                        "(see `dsv4ctl runs`)") from None
    if json.loads(store.spec_json(row.experiment_id)).get("mode") != "align":
        raise AlignReferenceUnavailable(f"align.reference {reference}: run {row.id} ({row.data.get('label')}) is "
                                        "not an align run (mode: align)")
    found = capture_dir(row)
    if found is None or not (found / "engine.json").exists():
        raise AlignReferenceUnavailable(f"align.reference {reference}: run {row.id} ({row.data.get('label')}) has "
                                        f"no capture at {found}")
    return row


def reference_dir(store: Store, reference: str) -> Path:
    """The capture directory of the stored align run `run:ID` names; AlignReferenceUnavailable otherwise."""
    return capture_dir(_reference_row(store, reference))  # type: ignore[return-value]


def model_of(snapshot: dict[str, Any]) -> tuple[str | None, str | None]:
    """(model path, architecture) of a stored spec: what `the same model` means for a reference."""
    model = snapshot.get("model") if isinstance(snapshot.get("model"), dict) else {}
    return model.get("path"), model.get("arch")


def model_difference(here: tuple[str | None, str | None], there: tuple[str | None, str | None]) -> str | None:
    """`model /m/a (Qwen2ForCausalLM), the reference's /m/b (DeepseekV3ForCausalLM)`, or None when the same."""
    if here == there:
        return None
    return (f"this spec's model is {here[0]} ({here[1]}), the reference run's is {there[0]} ({there[1]}): a "
            "reference must be an align run of the same model")


def fixed_reference(store: Store, reference: str, model: tuple[str | None, str | None]) -> str:
    """`run:latest`, `run:J17`, `run:4711` -> `run:<run id>`, resolved once (at submit): the stored spec names a fixed
    run, never a moving alias. Refused: an unknown run, not an align run, no capture, another model."""
    row = _reference_row(store, reference)
    difference = model_difference(model, model_of(json.loads(store.spec_json(row.experiment_id))))
    if difference:
        raise AlignReferenceUnavailable(f"align.reference {reference} (run {row.id}, {row.data.get('label')}): "
                                        f"{difference}")
    return f"run:{row.id}"


def _stored_reference(store: Store, row: RunRow, snapshot: dict[str, Any], reference: str) -> Path:
    """The capture directory of the reference a judged run's stored spec names, checked again: the run id fixed at
    submit (a spec stored before that, naming a label, is taken only for a run older than this one; `latest`
    never), never the run itself or a later run, and a run of the same model."""
    matched = REFERENCE_ID.fullmatch(reference)
    if matched is None and reference == "run:latest":
        raise AlignReferenceUnavailable(f"align.reference {reference} was stored unresolved (a dsv4ctl before "
                                        "issue 29): `latest` moves, so nothing is compared; resubmit the spec")
    ref_row = _reference_row(store, f"run:{matched.group(1)}" if matched else reference)
    if ref_row.id >= row.id:
        raise AlignReferenceUnavailable(
            f"align.reference {reference} is run {ref_row.id}, " + ("the run itself" if ref_row.id == row.id else
                                                                    "a run recorded after this one")
            + ": a run is never compared with its own capture or a later one")
    difference = model_difference(model_of(snapshot), model_of(json.loads(store.spec_json(ref_row.experiment_id))))
    if difference:
        raise AlignReferenceUnavailable(f"align.reference {reference} (run {ref_row.id}): {difference}")
    return capture_dir(ref_row)  # type: ignore[return-value]


def alignment_in(capture: Path | None, align: dict[str, Any]) -> dict[str, Any]:
    """The alignment of a capture directory judged without its database (an ingested run, `verdict --log`): against
    the `hf` capture beside it; a stored run named as the reference is of the database the job was submitted to,
    so nothing is compared (never passed)."""
    from .compare import compare_dirs, not_compared

    if capture is None:
        result = not_compared("the run has no log path, so no capture directory")
    elif align["reference"] == "hf":
        result = compare_dirs(capture, "engine", capture, "reference", align)
    else:
        result = not_compared(f"the log names the reference {align['reference']}, a run of the database it was "
                              "submitted to: a log judged on its own is compared only with a capture beside it")
    return {**result, "reference": align["reference"], "tolerances": align["tolerances"]}


def alignment_for(store: Store, run_id: int) -> dict[str, Any] | None:
    """The alignment result of a run (None unless its spec is mode: align), from its capture files."""
    from .compare import compare_dirs, not_compared

    row = store.find_run(str(run_id))
    snapshot = json.loads(store.spec_json(row.experiment_id))
    if snapshot.get("mode") != "align" or not isinstance(snapshot.get("align"), dict):
        return None
    align = snapshot["align"]
    here = capture_dir(row)
    if here is None or align["reference"] == "hf" or row.data.get("ingested"):
        return alignment_in(here, align)
    try:
        result = compare_dirs(here, "engine", _stored_reference(store, row, snapshot, align["reference"]), "engine",
                              align)
    except AlignReferenceUnavailable as exc:
        result = not_compared(str(exc))
    return {**result, "reference": align["reference"], "tolerances": align["tolerances"]}


def describe(result: dict[str, Any]) -> str:
    """`diverged at layer 3: cosine 0.98731 < 0.999 (prompt 0, kept position 9); max abs 1.5, relative L2 0.2`."""
    first = result.get("first")
    if not first:
        return result["verdict"]
    tol = result.get("tolerances") or {}
    kind = first.get("kind")
    if kind in ("layer", "norm"):
        worst = first.get("worst") or [None, None]
        detail = (f"cosine {_num(first.get('cosine'))} < {tol.get('cosine')} (prompt {worst[0]}, kept position "
                  f"{worst[1]}); max abs {_num(first.get('max_abs'))}, relative L2 {_num(first.get('rel_l2'))}")
    elif kind == "cache":
        detail = (f"reader {first.get('reader')} does not read back what was written "
                  f"(max abs {_num(first.get('max_abs'))})")
    elif kind == "attention":
        detail = (f"one-token attention through reader {first.get('reader')}: cosine {_num(first.get('cosine'))} "
                  f"< {tol.get('attention_cosine')} vs bf16")
    elif kind == "logits":
        detail = f"top-1 equal: {first.get('top1_equal')}, smallest top-k overlap {first.get('min_overlap')}"
    elif kind == "greedy":
        bad = [d for d in first.get("divergences") or [] if not d.get("accepted")]
        detail = (f"prompt {bad[0]['prompt']} token {bad[0]['position']}: expected {bad[0]['expected']}, got "
                  f"{bad[0]['got']}, outside the other side's top-k" if bad else
                  f"smallest top-k overlap {first.get('min_overlap')} before the tokens differ")
    else:
        detail = (f"engine {_num(first.get('engine'))}, reference {_num(first.get('reference'))}, ratio "
                  f"{_num(first.get('ratio'))} > {tol.get('perplexity_ratio')}")
    return f"{result['verdict']}: {detail}"


def _num(value: Any) -> str:
    return "non-finite" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def apply_alignment(verdict: dict[str, Any], result: dict[str, Any] | None, log: str | None) -> dict[str, Any]:
    """The verdict with an alignment that is not `aligned` folded in: not passed, and named as the first blocker
    unless the run already failed for a reason of its own (a crash stays the crash)."""
    if result is None or result.get("aligned"):
        return verdict
    verdict = dict(verdict)
    message = describe(result)
    verdict["passed"] = False
    verdict["reasons"] = [*(verdict.get("reasons") or []), f"alignment: {message}"]
    if verdict.get("status") in ("coherent", "degenerate") and not verdict.get("first_blocker"):
        compared = result.get("compared", True)
        verdict["status"] = "degenerate" if compared else "incomplete"
        line = _line_of(log, verdict, (result.get("first") or {}).get("name"))
        verdict["first_blocker"] = {"line": line, "kind": BLOCKER_KIND if compared else NOT_COMPARED_KIND,
                                    "message": message, "exc_type": None, "process": None, "family": None,
                                    "evidence": [], "wrapper": False}
    return verdict


def _line_of(log: str | None, verdict: dict[str, Any], rung: str | None) -> int:
    """The log line the job printed the first failing rung on (else DSV4_VERDICT's, else the log's last line)."""
    wanted = f"align {rung}: ".encode() if rung else b"align verdict:"
    rung_line = verdict_line = None
    if log:
        try:
            with open(log, "rb") as stream:
                for number, raw in enumerate(stream, 1):
                    if rung_line is None and raw.startswith(wanted):
                        rung_line = number
                    elif verdict_line is None and raw.startswith(b"DSV4_VERDICT:"):
                        verdict_line = number
        except OSError:
            pass
    return rung_line or verdict_line or int((verdict.get("evidence") or {}).get("lines") or 0)


def record_alignment(store: Store, run_id: int, result: dict[str, Any]) -> None:
    """The result and its rungs, replacing what an earlier judgement recorded (inside the caller's transaction)."""
    from ...store import bindable, now

    first = result.get("first") or {}
    store.db["alignments"].upsert({
        "run_id": run_id, "aligned": int(bool(result.get("aligned"))), "verdict": result["verdict"],
        "first_rung": first.get("name"), "first_layer": first.get("layer"), "reference": result.get("reference"),
        "result_json": json.dumps(result), "judged_at": now()}, pk="run_id")
    store.db.execute("DELETE FROM align_rungs WHERE run_id = ?", [run_id])
    rows = [{"run_id": run_id, "position": i, "name": r["name"], "kind": r["kind"], "layer": r.get("layer"),
             "ok": int(bool(r["ok"])), **{k: bindable(r.get(k)) for k in ("cosine", "max_abs", "rel_l2")}}
            for i, r in enumerate(result.get("rungs") or [])]
    if rows:
        store.db["align_rungs"].insert_all(rows, pk=("run_id", "position"))


def fold(verdict: Verdict, result: dict[str, Any] | None, log: str | None) -> Verdict:
    """The verdict with an alignment that is not `aligned` folded in (apply_alignment on the Verdict object)."""
    from dataclasses import replace

    from ...judge.rules import Blocker

    if result is None or result.get("aligned"):
        return verdict
    # Even when the probe already said DIVERGED (not passed), the reason and the rung as first blocker are added.
    folded = apply_alignment(verdict.to_json(), result, log)
    blocker = folded.get("first_blocker")
    return replace(verdict, status=folded["status"], passed=folded["passed"], reasons=folded["reasons"],
                   first_blocker=Blocker(**blocker) if blocker else None)


def judged(store: Store, run_id: int, verdict: Verdict) -> tuple[Verdict, dict[str, Any] | None]:
    """For watch.judge_run: the verdict with the run's alignment folded in (what `verdict`, `show` and the store all
    see), and the alignment to record (None when the run is not an align run)."""
    row = store.find_run(str(run_id))
    result = alignment_for(store, run_id)
    return fold(verdict, result, row.data.get("log_path")), result


def stored_alignment(store: Store, run_id: int) -> dict[str, Any] | None:
    """The alignment recorded for a run when it was judged, or None."""
    row = store.db.execute("SELECT result_json FROM alignments WHERE run_id = ?", [run_id]).fetchone()
    return json.loads(row[0]) if row else None


def model_layers(model_path: str) -> int | None:
    """num_hidden_layers of the model's config.json when this machine can read it (else None: the job checks)."""
    path = Path(model_path) / "config.json"
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    config = config.get("text_config", config) if isinstance(config, dict) else {}
    n = config.get("num_hidden_layers") if isinstance(config, dict) else None
    return n if type(n) is int and n > 0 else None


def check_layers(spec) -> None:
    """Refuse at submit `align.layers` and a `perturb-layer:K` fault (environment.env DSV4_FAULT) outside the
    model, when its config.json is readable here (issue 29 S22/S23); the job checks them again on the node."""
    n = model_layers(spec.model.path)
    if n is None:
        return
    outside = sorted(i for i in (spec.align.layers if spec.align else None) or [] if i >= n)
    if outside:
        raise AlignLayersOutside(f"align.layers {outside}: the model at {spec.model.path} has {n} decoder layers "
                                 f"(config.json num_hidden_layers): layers 0..{n - 1}")
    fault = str(spec.environment.env.get("DSV4_FAULT", ""))
    name, _, rest = fault.partition(":")
    layer = rest.partition(":")[0]
    if name == "perturb-layer" and layer.isdigit() and int(layer) >= n:
        raise AlignLayersOutside(f"environment.env DSV4_FAULT={fault}: the model at {spec.model.path} has {n} "
                                 f"decoder layers (0..{n - 1}): the fault would perturb nothing")


def check_references(store: Store, planned: list[Any]) -> None:
    """`planned`: campaign.plan's PlannedRun objects (their `spec` is read and replaced).

    Fix every planned run's `reference: run:...` to the run id it names now (issue 29: `run:latest` resolved
    again when judging was the run itself), refusing the submission (nothing recorded yet) when it cannot be
    compared with: unknown, not an align run, no capture, another model."""
    fixed: dict[tuple[str, Any], str] = {}
    for run in planned:  # the align runs of a submission (modes/align/mode.py prepare)
        align = run.spec.align
        check_layers(run.spec)
        if align is not None and align.reference.startswith("run:"):
            model = (run.spec.model.path, run.spec.model.arch)
            key = (align.reference, model)
            if key not in fixed:
                fixed[key] = fixed_reference(store, align.reference, model)
            run.spec = run.spec.model_copy(update={"align": align.model_copy(update={"reference": fixed[key]})})
