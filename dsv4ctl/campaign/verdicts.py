"""Recording a judgement: the verdict and its metrics, what the run's mode adds (an align run's alignment) and the
check of its figures against their performance reference, in one transaction. The one writer of verdicts for the
watch, `status`, `verdict RUN` and `ingest`."""

from __future__ import annotations

from typing import Any

from ..analysis.perf import record_check
from ..modes.align.result import record_alignment
from ..store import Store


def record_verdict(store: Store, run_id: int, verdict: dict[str, Any], versions: dict[str, str] | None = None,
                   alignment: dict[str, Any] | None = None) -> None:
    with store.transaction():
        if alignment is not None:
            record_alignment(store, run_id, alignment)
        store.save_verdict(run_id, verdict, versions)
        record_check(store, run_id, bool(verdict["passed"]), store.metrics(run_id))
