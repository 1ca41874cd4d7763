"""Human units for what a person reads (issue 26 m11): elapsed time as sacct prints it (HH:MM:SS, D-HH:MM:SS past a
day), memory in KiB/MiB/GiB, short durations in ms, and timestamps in UTC. The JSON keeps the raw numbers."""

from __future__ import annotations

from datetime import datetime, timezone


def clock(seconds: float | int | None) -> str:
    """362 -> `00:06:02`, 90061 -> `1-01:01:01` (sacct's Elapsed); None -> `-`."""
    if seconds is None:
        return "-"
    total = max(0, int(round(seconds)))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{text}" if days else text


def kib(value: int | float | None) -> str:
    """1259892 (KiB, sacct's MaxRSS) -> `1.2 GiB`; None -> `-`."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "KiB" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # unreachable: the loop returns at TiB


def seconds_short(value: float | None) -> str:
    """0.0219 -> `21.9 ms`, 8.04564 -> `8.05 s`, 75 -> `00:01:15`; None -> `-`."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    if value < 60:
        return f"{value:.2f} s"
    return clock(value)


def utc(stamp: str | None) -> str | None:
    """An ISO timestamp as UTC with its offset (`2026-12-01T22:30:00+00:00`); a naive one is the scheduler's local
    time (sacct prints local time without a zone) and gets this machine's offset first. None stays None."""
    if not stamp:
        return stamp
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp  # not a timestamp (a placeholder such as Unknown): shown as given
    if when.tzinfo is None:
        when = when.astimezone()  # naive: local time of this machine, as sacct and squeue print it
    return when.astimezone(timezone.utc).isoformat(timespec="seconds")


def since_cutoff(value: str) -> datetime:
    """`--since`: an age (90m, 6h, 2d, 45s) before now, or an ISO date or time (UTC unless it names a zone);
    UsageError otherwise."""
    import re
    from datetime import timedelta

    from .errors import UsageError

    text = value.strip()
    age = re.fullmatch(r"(\d+)\s*([smhdw])", text)
    if age:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[age.group(2)]
        return datetime.now(timezone.utc) - timedelta(**{unit: int(age.group(1))})
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {value!r}: give a date or time (2026-12-01, 2026-12-01T09:00) or an age "
                         "(90m, 6h, 2d)") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
