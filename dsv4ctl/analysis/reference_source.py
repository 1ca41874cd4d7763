"""Where a performance reference's figures come from: one stored run, or the passed runs of a campaign."""

from __future__ import annotations

from typing import Any

from ..errors import Dsv4Error


class NoReferenceRuns(Dsv4Error):
    """No passed run of the experiment among the runs named for a reference."""


def samples_from(store: Any, experiment: str, sources: list[str]) -> tuple[dict[str, list[float]], str]:
    """Each metric's values over the passed runs of `experiment` that `sources` name (each a campaign name, else a
    run), and a description of them. Failed runs never set a reference."""
    from ..store import RunNotFound

    rows, names = [], []
    for source in sources:
        try:
            rows += store.runs(experiment=experiment, campaign=source)
            names.append(f"campaign {store.campaign_name(source)}")
        except RunNotFound:
            row = store.find_run(source)
            if row.experiment != experiment:
                raise NoReferenceRuns(f"run {source} belongs to experiment {row.experiment!r}, not {experiment!r}") \
                    from None
            rows.append(row)
            names.append(f"run {row.id} ({row.data.get('label')})")
    described = ", ".join(names)
    verdicts = store.verdict_summaries([r.id for r in rows])
    passed = [r for r in rows if (verdicts.get(r.id) or {}).get("passed")]
    if not passed:
        raise NoReferenceRuns(f"no passed run of {experiment!r} in {described}: a reference comes from correct runs")
    found: dict[str, list[float]] = {}
    for row in passed:
        for name, value in store.metrics(row.id).items():
            found.setdefault(name, []).append(value)
    return found, described
