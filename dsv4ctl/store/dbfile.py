"""The database file under the store: connections whose every SQLite failure (a damaged page, a full disk, a
read-only or immutable file) is a StoreError naming the file, and read-only opening when writing is impossible."""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import Dsv4Error

BUSY_TIMEOUT_S = 60


class StoreError(Dsv4Error):
    """The results database cannot be opened or used, or is not a dsv4ctl store."""


_HINTS = (("malformed", "the database file is damaged; restore a backup or salvage it with `sqlite3 FILE .recover`"),
          ("not a database", "not a usable SQLite database"),
          ("disk is full", "the disk holding it is full; free space and run the command again"),
          ("readonly", "it is read-only here; reading commands work, recording needs write access"),
          ("disk i/o error", "the disk could not read or write it"),
          ("unable to open", "it cannot be opened (missing folder or no permission)"))


def store_error(path: Path, exc: sqlite3.Error) -> StoreError:
    text = str(exc)
    hint = next((h for key, h in _HINTS if key in text.lower()), None)
    return StoreError(f"{path}: {hint} ({text})" if hint else f"{path}: {text}")


def _guard(call: Callable[..., Any], path: Path) -> Any:
    try:
        return call()
    except sqlite3.IntegrityError:
        raise  # a constraint the code relies on (unique names, tokens), not a broken file
    except sqlite3.DatabaseError as exc:
        raise store_error(path, exc) from None


class _GuardedCursor(sqlite3.Cursor):
    path = Path("?")

    def execute(self, *args: Any) -> "_GuardedCursor":
        return _guard(lambda: super(_GuardedCursor, self).execute(*args), self.path)

    def executemany(self, *args: Any) -> "_GuardedCursor":
        return _guard(lambda: super(_GuardedCursor, self).executemany(*args), self.path)

    def fetchone(self) -> Any:
        return _guard(super().fetchone, self.path)

    def fetchmany(self, *args: Any) -> list[Any]:
        return _guard(lambda: super(_GuardedCursor, self).fetchmany(*args), self.path)

    def fetchall(self) -> list[Any]:
        return _guard(super().fetchall, self.path)

    def __next__(self) -> Any:
        return _guard(super().__next__, self.path)


class _GuardedConnection(sqlite3.Connection):
    """A connection whose failures (a damaged page, a full disk, a read-only file) are StoreErrors naming the file."""

    path = Path("?")

    def cursor(self, factory: Any = None) -> _GuardedCursor:
        cursor = super().cursor(factory or _GuardedCursor)
        cursor.path = self.path
        return cursor

    def execute(self, sql: str, parameters: Any = ()) -> _GuardedCursor:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any) -> _GuardedCursor:
        return self.cursor().executemany(sql, parameters)

    def executescript(self, script: str) -> _GuardedCursor:
        return _guard(lambda: super(_GuardedConnection, self).executescript(script), self.path)

    def commit(self) -> None:
        _guard(super().commit, self.path)


class Database:
    """The store's handle on its connection: `execute` and `table_names` straight on sqlite3 (every read path), the
    rest of sqlite-utils' Database (tables, insert, upsert, columns) built on first use. Importing sqlite-utils
    imports numpy when it is installed (~0.1 s): a command that only reads never pays for it."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._utils: Any = None
        conn.execute("PRAGMA recursive_triggers = on")  # as sqlite_utils.Database sets it, so writes behave alike

    def execute(self, sql: str, parameters: Any = None) -> sqlite3.Cursor:
        # sqlite-utils' execute on an autocommit connection (isolation_level=None) is exactly this
        return self.conn.execute(sql) if parameters is None else self.conn.execute(sql, parameters)

    def table_names(self) -> list[str]:
        return [row[0] for row in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]

    @property
    def utils(self) -> Any:
        if self._utils is None:
            import sqlite_utils

            self._utils = sqlite_utils.Database(self.conn)
        return self._utils

    def __getitem__(self, table: str) -> Any:
        return self.utils[table]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.utils, name)


def writable(path: Path) -> bool:
    """Whether this process can write the database (and the -wal/-shm files WAL keeps beside it)."""
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    return True  # a new database: creating it says whether we can


def check_path(path: Path) -> None:
    """A database is a regular file: a folder or a device (`--db runs/`, `--db /dev/null`) is said plainly, before
    SQLite answers with something stranger ("cannot rollback - no transaction is active")."""
    if path.is_dir():
        raise StoreError(f"{path}: is a folder, not a database file (give the file, e.g. {path / 'results.db'})")
    if path.exists() and not path.is_file():
        raise StoreError(f"{path}: is not a regular file (a device or a pipe), so it cannot hold a database")


def connect(path: Path, read_only: bool, shared: bool = False) -> _GuardedConnection:
    """A connection; on a shared filesystem (`shared`) through SQLite's dot-file locking (store/filesystem.py)."""
    check_path(path)
    if read_only:
        # mode=ro needs the -shm file or a writable folder; immutable=1 reads a WAL file in a read-only folder.
        uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
        try:
            conn = _open(uri, path)
            _guard(lambda: conn.execute("SELECT count(*) FROM sqlite_master").fetchone(), path)
            return conn
        except StoreError:
            uri += "&immutable=1"
    if not read_only and shared:
        uri = f"file:{urllib.parse.quote(str(path.absolute()))}?vfs=unix-dotfile"
    conn = _open(uri if read_only or shared else str(path), path)
    if shared and not read_only:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")  # a file left in WAL mode opens only so (set_journal)
    _guard(lambda: conn.execute("SELECT count(*) FROM sqlite_master").fetchone(), path)
    return conn


def _open(target: str, path: Path) -> _GuardedConnection:
    try:
        conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, factory=_GuardedConnection,
                               uri=target.startswith("file:"))
    except sqlite3.DatabaseError as exc:
        raise store_error(path, exc) from None
    conn.path = path
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000:d}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def set_journal(conn: _GuardedConnection, shared: bool) -> None:
    """WAL, or on a shared filesystem a rollback journal. A database left in WAL mode cannot be opened without
    shared memory, which dot-file locking has none of: it is taken in exclusive locking mode (WAL then lives in
    this process's memory) for the switch, then given back."""
    if not shared:
        set_wal(conn)
        return
    _retry_locked(lambda: conn.execute("PRAGMA journal_mode = DELETE").fetchone())
    conn.execute("PRAGMA locking_mode = NORMAL")
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the next read lets the exclusive lock go


def _retry_locked(call: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return call()
        except StoreError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def set_wal(conn: _GuardedConnection) -> None:
    """WAL journaling. Another process creating or migrating the same new file holds a lock SQLite does not wait on
    here (it answers "database is locked" at once), so that is retried up to the busy timeout: a lock is not a
    read-only file, and must never turn a writer into a reader."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except StoreError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
