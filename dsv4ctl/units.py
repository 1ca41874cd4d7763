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


def number(value: float | int) -> str:
    """A measured figure with the digits it means: ints whole, floats to 3 significant digits (`0.0219`, `1.47`,
    `21.7`), and whole past 1000 (`85259`, `1234`) rather than in exponent notation."""
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)  # nan, inf: as the log said, never hidden
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.3g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


SECONDS_NAMES = ("duration", "elapsed")  # vllm bench serve's duration, sacct's Elapsed: seconds, unsuffixed


def quantity(name: str, value: object) -> str:
    """A named figure in the unit its name gives (`ttft_s` 0.0219 -> `21.9 ms`, `gen_s` 21.7 -> `21.70 s`,
    `max_rss_kib` -> `1.2 GiB`, `p95_ttft_ms` -> `41.3 ms`, `tokens_per_s` -> `1.47 tok/s`); a name without a unit:
    the number alone (`number`); not a number: as given. For people only: the JSON keeps the raw value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if name.endswith("_per_s"):
        return f"{number(value)} {'tok/s' if 'token' in name else '/s'}"
    if name.endswith("_s") or name in SECONDS_NAMES:
        return seconds_short(value)
    if name.endswith("_ms"):
        return seconds_short(value / 1000) if value >= 1000 else f"{value:.1f} ms"
    if name.endswith("_kib"):
        return kib(value)
    if name.endswith("_mib"):
        return kib(value * 1024)
    if name.endswith("_gib"):
        return f"{value:.2f} GiB"
    return number(value)


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


def slurm_time_s(text: str | None) -> float | None:
    """A Slurm time limit in seconds (M, M:S, H:M:S, D-H[:M[:S]]); None when unset or unreadable."""
    if not text:
        return None
    try:
        return _slurm_seconds(str(text))
    except ValueError:
        return None


def _slurm_seconds(text: str) -> float:
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        seconds = int(days) * 86400 + sum(v * m for v, m in zip(parts, (3600, 60, 1)))
    elif len(parts) == 1:
        seconds = parts[0] * 60  # Slurm reads a bare number as minutes
    elif len(parts) == 2:
        seconds = parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return float(seconds)
