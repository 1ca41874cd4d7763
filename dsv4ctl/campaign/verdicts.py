"""Recording a judgement: the verdict and its metrics, what the run's mode adds (an align run's alignment: the
mode's `record`) and the check of its figures against their performance reference, in one transaction. The one
writer of verdicts for the watch, `status`, `verdict RUN` and `ingest`."""

from __future__ import annotations

from typing import Any

from ..analysis.perf import record_check
from ..modes.registry import mode_of
from ..store import Store


def record_verdict(store: Store, run_id: int, verdict: dict[str, Any], versions: dict[str, str] | None = None,
                   mode: str | None = None, record: dict[str, Any] | None = None) -> None:
    with store.transaction():
        writer = mode_of(mode).record
        if record is not None and writer is not None:
            writer(store, run_id, record)
        store.save_verdict(run_id, verdict, versions)
        record_check(store, run_id, bool(verdict["passed"]), store.metrics(run_id))
