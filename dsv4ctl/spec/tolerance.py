"""The tolerance of a performance reference (`expect.perf.METRIC.tolerance`): read once, the same way by the spec's
validation, `reference set` and the check of a run against its reference."""

from __future__ import annotations

import math

from ..errors import UsageError


class PerfReferenceError(UsageError, ValueError):
    """A performance reference that cannot be read (no bound, a tolerance that is not a number or a percentage)."""


def parse_tolerance(value: str | float | int | None) -> float:
    """`'5%'` -> 0.05, `0.05` -> 0.05: a percentage up to 1000%, or a bare fraction below 1. A bare number of 1 or
    more is refused (issue 29): `5` would mean 500%, and whoever writes it almost always means 5%."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        raise PerfReferenceError(f"tolerance {value!r} is not a number")
    text = value.strip() if isinstance(value, str) else None
    try:
        if text is not None and text.endswith("%"):
            fraction, percent = float(text[:-1]) / 100, True
        else:
            fraction, percent = float(value if text is None else text), False
    except (TypeError, ValueError):
        raise PerfReferenceError(f"tolerance {value!r}: write a fraction (0.05) or a percentage (5%)") from None
    if not percent and math.isfinite(fraction) and fraction >= 1:
        fraction_meant = f" or {fraction / 100:g}" if fraction < 100 else ""  # a bare 1 or more is what we refuse
        raise PerfReferenceError(f"tolerance {value!r}: {fraction:g} would mean {fraction:.0%}: "
                                 f"write {fraction:g}%{fraction_meant}")
    if not 0 <= fraction <= 10:  # also refuses nan (every comparison with it is false)
        raise PerfReferenceError(f"tolerance {value!r} out of range (0 to 1000%)")
    return fraction


def is_duration(metric: str) -> bool:
    """A metric that is a time (`gen_s`, `p95_ttft_ms`): it cannot be negative."""
    return metric.endswith(("_s", "_ms")) or metric == "duration"
