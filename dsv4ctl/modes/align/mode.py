"""mode: align as a plug-in (issue 15): its run is judged by the verdict's rules, then compared layer by layer
from the capture beside its log (the comparison folded into the verdict, the alignment stored with it); an ingested
align log brings its capture and spec.json along."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import Mode
from ..offline.mode import judge

if TYPE_CHECKING:
    from ...judge.rules import Verdict
    from ...judge.scan import LogFacts
    from ...store import Store

ALIGN_FILES = ("engine.json", "engine.safetensors", "reference.json", "reference.safetensors", "align.json")
REFERENCE_LINE = b"align reference run:"  # `align reference run:J17: compared when dsv4ctl judges the run`
MAX_REFERENCE_SCAN_LINES = 1 << 22


def markers(facts: LogFacts) -> bool:
    """The align job's `align ...` stages."""
    names = [name for _, name in facts.stages] + ([facts.last_stage[1]] if facts.last_stage else [])
    return any(name.startswith("align ") for name in names)


def settle_stored(store: Store, run_id: int, verdict: Verdict) -> tuple[Verdict, dict[str, Any] | None]:
    """Compared again from its capture files, whatever the log says."""
    from .result import judged

    return judged(store, run_id, verdict)


def settle_log(log: Path, facts: LogFacts, verdict: Verdict) -> tuple[Verdict, dict[str, Any] | None]:
    """A log without a spec: compared with the capture beside it, under the settings it was captured with (kept in
    the record's `settings`)."""
    from .result import ALIGN_DIR, alignment_in, fold

    settings = align_settings(log, facts)
    alignment = alignment_in(log.parent / ALIGN_DIR, settings)
    verdict = fold(verdict, alignment, str(log))
    alignment["settings"] = settings
    return verdict, alignment


def record(store: Store, run_id: int, alignment: dict[str, Any]) -> None:
    from .result import record_alignment

    record_alignment(store, run_id, alignment)


def prepare(store: Store, planned: list[Any]) -> None:
    from .result import check_references

    check_references(store, planned)


def stored(store: Store, run_id: int) -> dict[str, Any] | None:
    from .result import stored_alignment

    return stored_alignment(store, run_id)


def show(alignment: dict[str, Any]) -> None:
    from .view import show_alignment

    show_alignment(alignment)


def evidence(facts: LogFacts) -> list[str]:
    from ...spec.render import SNAPSHOT_NAME

    return [SNAPSHOT_NAME] + [f"align/{name}" for name in ALIGN_FILES]


def align_settings(log: Path, facts: LogFacts) -> dict[str, Any]:
    """The align settings a log without a spec was captured with: its spec.json beside it (a run directory) when
    that is an align spec, else the defaults; the reference the log itself names (a `hf` capture lies beside it,
    `run:X` was a run of the database it was submitted to)."""
    from ...spec.models import AlignSpec
    from ...spec.render import SNAPSHOT_NAME

    settings = AlignSpec().model_dump(mode="json")
    try:
        beside = json.loads((log.parent / SNAPSHOT_NAME).read_text(encoding="utf-8"))
        if isinstance(beside, dict) and beside.get("mode") == MODE.name and isinstance(beside.get("align"), dict):
            settings = AlignSpec.model_validate(beside["align"]).model_dump(mode="json")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        pass  # no spec beside the log, or not one: the defaults
    if any(name.startswith("align reference (") for _, name in facts.stages):
        settings["reference"] = "hf"  # the job captured transformers' side beside its own
    elif named := _reference_named(log):
        settings["reference"] = named
    return settings


def _reference_named(log: Path) -> str | None:
    """`run:X` of the log's `align reference run:X: compared when ...` line, or None."""
    try:
        with open(log, "rb") as stream:
            for number, raw in enumerate(stream):
                if number > MAX_REFERENCE_SCAN_LINES:
                    break
                if raw.startswith(REFERENCE_LINE):
                    name = raw[len(b"align reference "):].split(b":", 2)
                    return "run:" + name[1].decode("utf-8", "replace")[:128] if len(name) > 1 else None
    except OSError:
        return None
    return None


MODE = Mode(name="align", judge=judge, markers=markers, settle_stored=settle_stored, settle_log=settle_log,
            evidence=evidence, record=record, prepare=prepare, tag="align", settings_section="align",
            record_key="align", stored=stored, show=show)
