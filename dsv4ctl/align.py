"""Layered alignment, the controller's side (issue 15): the result of an align run, its place in the verdict, and
its rows in the store.

When a run of `mode: align` is judged, its capture files (run directory, `align/`) are compared again here with
the spec's tolerances — against the reference captured in the same job (`reference: hf`) or against a stored
align run (`reference: run:ID`) — whatever the job printed. The verdict then maps as follows:

  aligned                 the verdict is the log's (the greedy tokens judged as any run's); nothing added.
  diverged at <rung>      not passed; a coherent status becomes `degenerate`, and the first blocker (kind
                          `align_diverged`) names the rung: `diverged at layer 3: cosine 0.9873 < 0.999 ...`.
  not compared: <why>     a capture missing, unreadable or not of the same prompts: not passed, the same way.

Standard library at import: numpy is imported by align_compare's functions, only for align runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import Dsv4Error

if TYPE_CHECKING:
    from .campaign import PlannedRun
    from .judge.rules import Verdict
    from .store import Store

ALIGN_DIR = "align"
BLOCKER_KIND = "align_diverged"


class AlignReferenceUnavailable(Dsv4Error):
    """`align.reference: run:ID` names a run that is unknown, not an align run, or has no capture."""


def capture_dir(row) -> Path | None:
    """Where a run's job wrote its capture: `align/` beside its raw.log (the run's or array task's directory)."""
    log = row.data.get("log_path")
    return Path(log).parent / ALIGN_DIR if log else None


def reference_dir(store: Store, reference: str) -> Path:
    """The capture directory of the stored align run `run:ID` names; AlignReferenceUnavailable otherwise."""
    from .store import RunNotFound

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
    return found


def alignment_for(store: Store, run_id: int) -> dict[str, Any] | None:
    """The alignment result of a run (None unless its spec is mode: align), from its capture files."""
    from .align_compare import compare_dirs, not_compared

    row = store.find_run(str(run_id))
    snapshot = json.loads(store.spec_json(row.experiment_id))
    if snapshot.get("mode") != "align" or not isinstance(snapshot.get("align"), dict):
        return None
    align = snapshot["align"]
    here = capture_dir(row)
    try:
        if here is None:
            result = not_compared("the run has no log path, so no capture directory")
        elif align["reference"] == "hf":
            result = compare_dirs(here, "engine", here, "reference", align)
        else:
            result = compare_dirs(here, "engine", reference_dir(store, align["reference"]), "engine", align)
    except AlignReferenceUnavailable as exc:
        result = not_compared(str(exc))
    result["reference"] = align["reference"]
    result["tolerances"] = align["tolerances"]
    return result


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
        verdict["status"] = "degenerate"
        line = _line_of(log, verdict, (result.get("first") or {}).get("name"))
        verdict["first_blocker"] = {"line": line, "kind": BLOCKER_KIND, "message": message, "exc_type": None,
                                    "process": None, "family": None, "evidence": [], "wrapper": False}
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
    from .store import bindable, now

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


def judged(store: Store, run_id: int, verdict: Verdict) -> tuple[Verdict, dict[str, Any] | None]:
    """For watch.judge_run: the verdict with the run's alignment folded in (what `verdict`, `show` and the store all
    see), and the alignment to record (None when the run is not an align run)."""
    from dataclasses import replace

    from .judge.rules import Blocker

    row = store.find_run(str(run_id))
    result = alignment_for(store, run_id)
    if result is None or result.get("aligned"):
        return verdict, result
    # Even when the probe already said DIVERGED (not passed), the reason and the rung as first blocker are added.
    folded = apply_alignment(verdict.to_json(), result, row.data.get("log_path"))
    blocker = folded.get("first_blocker")
    return replace(verdict, status=folded["status"], passed=folded["passed"], reasons=folded["reasons"],
                   first_blocker=Blocker(**blocker) if blocker else None), result


def stored_alignment(store: Store, run_id: int) -> dict[str, Any] | None:
    """The alignment recorded for a run when it was judged, or None."""
    row = store.db.execute("SELECT result_json FROM alignments WHERE run_id = ?", [run_id]).fetchone()
    return json.loads(row[0]) if row else None


def check_references(store: Store, planned: list[PlannedRun]) -> None:
    """Refuse a submission (nothing recorded yet) whose `reference: run:ID` cannot be compared with."""
    for run in planned:
        align = run.spec.align
        if run.spec.mode == "align" and align is not None and align.reference.startswith("run:"):
            reference_dir(store, align.reference)
