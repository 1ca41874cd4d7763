"""Long-running records that a command resumes (a bisection, a promotion): one row read back with its JSON columns
decoded, and the lock beside the database that lets one process at a time run it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .core import Store


def load_record(store: Store, table: str, record_id: int, json_columns: tuple[str, ...],
                not_found: Callable[[str], Exception]) -> dict[str, Any]:
    """Row `record_id` of `table` (a name from the code, never from users) as a dict, each `x_json` column decoded
    under the name `x`; `not_found(message)` raised, naming the newest ids, when there is no such row."""
    row = store.db.execute(f"SELECT * FROM {table} WHERE id = ?", [record_id]).fetchone()
    if row is None:
        known = [str(r[0]) for r in store.db.execute(f"SELECT id FROM {table} ORDER BY id DESC LIMIT 10")]
        kind = table.removesuffix("s")
        raise not_found(f"no {kind} {record_id}" + (f"; known: {', '.join(known)}" if known
                                                     else " (none stored in this database)"))
    names = [d[0] for d in store.db.execute(f"SELECT * FROM {table} LIMIT 0").description]
    data = dict(zip(names, row))
    for key in json_columns:
        data[key.removesuffix("_json")] = json.loads(data.pop(key)) if data.get(key) else None
    return data


@contextmanager
def held(path: Path, busy: Callable[[str], Exception]) -> Iterator[None]:
    """Hold an flock on `path` (released however the process ends); a second process gets `busy(holder)`, the
    holder being what the first one wrote there (its pid and host)."""
    import fcntl
    import os
    import socket

    with open(path, "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise busy(lock.read().strip() or "another process") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}")
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
