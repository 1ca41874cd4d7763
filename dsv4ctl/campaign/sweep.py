"""Sweeps: failure rate per matrix point with a Wilson 95% interval, and where failures start.

A fault that shows only as a rate over many runs (the report's batch=8: nondeterministic BOS, template collapse or
NaN after long decodes, §0.3) is found by repeating each point and reading the rates, not single runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..store import Store

Z95 = 1.959963984540054


def wilson(failures: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well-behaved at 0/n and n/n, unlike the normal one)."""
    if n == 0:
        return (0.0, 1.0)
    p = failures / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # Exactly 0 (or 1) at the ends, where the formula only gets there up to rounding.
    return (0.0 if failures == 0 else max(0.0, centre - half), 1.0 if failures == n else min(1.0, centre + half))


@dataclass
class PointRate:
    experiment: str
    point: dict
    label: str
    runs: int
    judged: int
    failures: int
    rate: float | None
    interval: tuple[float, float]
    statuses: dict[str, int] = field(default_factory=dict)
    first_blocker: str | None = None


@dataclass
class SweepSummary:
    campaign: str
    points: list[PointRate]
    boundary: PointRate | None  # the first point (in matrix order) where failures appear
    clean_below: PointRate | None  # the last point before it, with its upper bound on the failure rate
    pending: int


def summarise_campaign(store: Store, campaign: str) -> SweepSummary:
    rows = store.runs(campaign=campaign)
    verdicts = store.verdict_summaries([r.id for r in rows])
    order: list[str] = []
    grouped: dict[str, list] = {}
    for row in rows:
        if row.experiment not in grouped:
            order.append(row.experiment)
        grouped.setdefault(row.experiment, []).append(row)
    points = []
    pending = 0
    for name in order:
        group = grouped[name]
        judged = [verdicts[r.id] for r in group if r.id in verdicts]
        pending += len(group) - len(judged)
        failures = sum(1 for v in judged if not v["passed"])
        statuses: dict[str, int] = {}
        for v in judged:
            statuses[v["status"]] = statuses.get(v["status"], 0) + 1
        blocker = next((v["first_blocker_kind"] or v["status"] for v in judged if not v["passed"]), None)
        points.append(PointRate(experiment=name, point=json.loads(group[0].point_json or "{}"),
                                label=name, runs=len(group), judged=len(judged),
                                failures=failures, rate=failures / len(judged) if judged else None,
                                interval=wilson(failures, len(judged)), statuses=statuses, first_blocker=blocker))
    first_bad = next((i for i, p in enumerate(points) if p.failures), None)
    return SweepSummary(campaign=campaign, points=points,
                        boundary=points[first_bad] if first_bad is not None else None,
                        clean_below=points[first_bad - 1] if first_bad else None, pending=pending)
