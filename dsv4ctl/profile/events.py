"""The few fields of a trace event that a breakdown reads, and the two ways of decoding a run of events into them.

`Event` holds ph, cat, name, pid, tid, ts, dur and four of the args (`correlation`, `External id`, `Collective
name`, and `name`, a process_name metadata event's label); every other field is skipped. With msgspec installed
(a dependency of dsv4ctl; measured in docs/profiles.md: the typed decode skips unread fields in C, and a whole
breakdown is ~3x faster than with the standard library) a slice of `traceEvents` is decoded straight into Events
with strict types; a slice it refuses (a `ts` written as a string, a name that is a number, an element that is
not an object) is decoded again by the standard library and each event converted by `record_of`, which is as
lenient as the reader always was. Without msgspec the standard library does every slice that way. Either way an
event comes out the same (the tests check it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; the standard library still reads every trace
    msgspec = None

Key = int | str | float | None

if msgspec is not None:
    class Args(msgspec.Struct, gc=False):
        correlation: int | str | None = None
        external: int | str | None = msgspec.field(name="External id", default=None)
        collective: str | None = msgspec.field(name="Collective name", default=None)
        label: str | None = msgspec.field(name="name", default=None)  # a process_name metadata event's

    class Event(msgspec.Struct, gc=False):
        ph: str | None = None
        cat: str | None = None
        name: str = ""
        pid: int | str | None = None
        tid: int | str | None = None
        ts: float | None = None
        dur: float = 0.0
        args: Args | None = None

    DECODE_ERRORS: tuple[type[BaseException], ...] = (ValueError, RecursionError, msgspec.DecodeError)
    _TYPED = msgspec.json.Decoder(list[Event])
    _ANY = msgspec.json.Decoder()
else:  # pragma: no cover
    @dataclass(slots=True)
    class Args:  # type: ignore[no-redef]
        correlation: Any = None
        external: Any = None
        collective: str | None = None
        label: str | None = None

    @dataclass(slots=True)
    class Event:  # type: ignore[no-redef]
        ph: str | None = None
        cat: str | None = None
        name: str = ""
        pid: Any = None
        tid: Any = None
        ts: float | None = None
        dur: float = 0.0
        args: Args | None = None

    DECODE_ERRORS = (ValueError, RecursionError)
    _TYPED = _ANY = None


def _key(value: Any) -> Key:
    """An id or a thread as the join can use it (a dict key); anything else (a list, an object) is no id."""
    return value if isinstance(value, (int, str, float)) else None


def record_of(e: Any) -> Event | None:
    """An Event from one decoded event, as leniently as the reader always took them: a time written as a string
    is a time, a name that is not a string is its text, an `args` that is not an object is none; an element of
    traceEvents that is not an object is no event (None)."""
    if not isinstance(e, dict):
        return None
    ph, cat, name = e.get("ph"), e.get("cat"), e.get("name", "")
    try:
        ts = float(e["ts"])
        dur = float(e.get("dur") or 0.0)
    except (KeyError, TypeError, ValueError):
        ts, dur = None, 0.0
    a = e.get("args")
    args = None
    if isinstance(a, dict):
        collective, label = a.get("Collective name"), a.get("name")
        args = Args(correlation=_key(a.get("correlation")), external=_key(a.get("External id")),
                    collective=collective if isinstance(collective, str) else None,
                    label=label if isinstance(label, str) else None)
    return Event(ph=ph if isinstance(ph, str) else None, cat=cat if isinstance(cat, str) else None,
                 name=name if isinstance(name, str) else str(name), pid=_key(e.get("pid")), tid=_key(e.get("tid")),
                 ts=ts, dur=dur, args=args)


def _records(piece: bytes) -> list[Event]:
    decoded = json.loads(piece)
    return [r for r in map(record_of, decoded) if r is not None]


def records_decoder() -> Callable[[bytes], list[Event]]:
    """bytes of a JSON array of events -> their Events (DECODE_ERRORS when it is not one)."""
    if _TYPED is None:  # pragma: no cover
        return _records

    def decode(piece: bytes) -> list[Event]:
        try:
            return _TYPED.decode(piece)
        except msgspec.ValidationError:  # JSON, but a field of another type: the lenient way
            return _records(piece)

    return decode


def dicts_decoder() -> Callable[[bytes], list[Any]]:
    """bytes of a JSON array -> its elements as the standard library decodes them (msgspec's untyped decode
    gives the same values; what it refuses, NaN or an integer past 64 bits, is left to the standard library)."""
    if _ANY is None:  # pragma: no cover
        return json.loads

    def decode(piece: bytes) -> list[Any]:
        try:
            return _ANY.decode(piece)
        except msgspec.DecodeError:
            return json.loads(piece)

    return decode
