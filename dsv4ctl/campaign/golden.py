"""`expect.golden_from: J17`: a golden taken from a stored run, resolved when a spec is submitted.

The stored run's verdict holds the token ids each request produced; they become the spec's `golden_token_ids`
before the snapshot is written, so the job, its verdict and the experiment's hash all see the ids themselves
(a run with another golden is another experiment), and re-judging never needs the source run again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Dsv4Error
from ..store import RunNotFound, Store

if TYPE_CHECKING:
    from .plan import PlannedRun
    from ..spec.models import ExperimentSpec


class GoldenUnavailable(Dsv4Error):
    """`expect.golden_from` names a run that is unknown, not judged, or has no token ids."""


def golden_ids(store: Store, ref: str) -> list[list[int]]:
    """The token ids per request of a stored run's verdict; GoldenUnavailable when there are none."""
    try:
        row = store.find_run(ref)
    except RunNotFound:
        raise GoldenUnavailable(f"expect.golden_from: no run {ref!r} in {store.path} (see `dsv4ctl runs`)") from None
    verdict = store.verdict(row.id)
    if verdict is None:
        raise GoldenUnavailable(f"expect.golden_from: run {ref!r} (run {row.id}) has no verdict yet: judge it first "
                                f"(`dsv4ctl verdict {ref}`)")
    ids = [list(r.get("token_ids") or []) for r in verdict.get("requests") or []]
    if not ids or not all(ids):
        raise GoldenUnavailable(f"expect.golden_from: the verdict of run {ref!r} (run {row.id}) has no token ids "
                                "for every request: it cannot serve as a golden")
    return ids


def with_golden(store: Store, spec: ExperimentSpec, cache: dict[str, list[list[int]]]) -> ExperimentSpec:
    """`spec` with `golden_from` resolved into `golden_token_ids` (unchanged when it has no golden_from)."""
    ref = spec.expect.golden_from
    if ref is None:
        return spec
    if spec.expect.golden_token_ids:
        raise GoldenUnavailable(f"spec {spec.name}: give expect.golden_from or expect.golden_token_ids, not both")
    if ref not in cache:
        cache[ref] = golden_ids(store, ref)
    expect = spec.expect.model_copy(update={"golden_token_ids": cache[ref]})
    return spec.model_copy(update={"expect": expect})


def resolve_goldens(store: Store, planned: list[PlannedRun]) -> list[PlannedRun]:
    """Every planned run's spec with its golden taken from the stored run it names; the lot refused (nothing
    recorded yet) when one cannot be."""
    cache: dict[str, list[list[int]]] = {}
    for run in planned:
        run.spec = with_golden(store, run.spec, cache)
    return planned


def needs_store(planned: list[PlannedRun]) -> bool:
    return any(run.spec.expect.golden_from for run in planned)
