"""Several engineers, one history (issue 25): a portable bundle of runs and everything keyed by them, and its
merge into another database.

A bundle is gzip'd JSON lines: a header (format, the migrations of the database it came from, who, which host,
which database, when), one line per row (`{"table": ..., "row": {...}}`: experiments and campaigns first, then the
runs, then every table keyed by run found in the schema: verdicts, metrics, perf checks, alignments, profiles, ...,
and the performance references of its experiments), and a last line with the row count and the SHA-256 of every
line before it. A bundle cut short or edited by hand fails that check and is refused before anything is written.

An import is one transaction: a run is its token (one already here is left as it is), experiments are their
(name, spec hash), a campaign is its name and creation time (another campaign of the same name is renamed), a
chosen label already taken here is renamed (`J18` -> `J18-2`), automatic labels are this database's r<id>. Each
imported run keeps where it was first recorded (`runs.origin_json`)."""

from __future__ import annotations

import getpass
import gzip
import hashlib
import json
import os
import socket
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import Dsv4Error
from .values import AUTO_LABEL, now

FORMAT = "dsv4ctl-bundle"
VERSION = 1
MAX_LINE = 64 * 2**20  # one row's line; a longer one is not a bundle this code wrote


class BundleError(Dsv4Error):
    """A bundle cannot be read: cut short, edited, not a bundle, or from a newer dsv4ctl. Nothing was imported."""


def run_tables(db: Any) -> list[str]:
    """Tables keyed by run (a `run_id` column), other than the runs themselves, in a fixed order."""
    names = sorted(t for t in db.table_names() if not t.startswith(("_", "sqlite_")) and t != "runs")
    return [t for t in names if "run_id" in {c.name for c in db[t].columns}]


def source_of(path: Path, migrations: list[str]) -> dict[str, Any]:
    from .. import __version__

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"user": user, "host": socket.gethostname(), "database": str(path.resolve()), "exported_at": now(),
            "dsv4ctl_version": __version__, "migrations": migrations}


def _rows(db: Any, sql: str, params: list[Any]) -> Iterator[dict[str, Any]]:
    cursor = db.execute(sql, params)
    names = [d[0] for d in cursor.description]
    while True:
        chunk = cursor.fetchmany(500)
        if not chunk:
            return
        yield from (dict(zip(names, row)) for row in chunk)


def bundle_lines(db: Any, path: Path, where: str = "1", params: list[Any] | None = None) -> Iterator[dict]:
    """The bundle of the runs matching `where` (SQL on `runs`, with `params`), line by line."""
    params = params or []
    migrations = [r[0] for r in db.execute("SELECT name FROM _dsv4ctl_migrations ORDER BY name")]
    source = source_of(path, migrations)
    yield {"format": FORMAT, "version": VERSION, "source": source}
    ids = [r[0] for r in db.execute(f"SELECT id FROM runs WHERE {where} ORDER BY id", params)]
    chosen = f"SELECT id FROM runs WHERE {where}"
    yield from ({"table": "experiments", "row": r} for r in _rows(
        db, f"SELECT * FROM experiments WHERE id IN (SELECT experiment_id FROM runs WHERE {where})", params))
    yield from ({"table": "campaigns", "row": r} for r in _rows(
        db, f"SELECT * FROM campaigns WHERE id IN (SELECT campaign_id FROM runs WHERE {where})", params))
    if "perf_references" in db.table_names():
        yield from ({"table": "perf_references", "row": r} for r in _rows(
            db, "SELECT * FROM perf_references WHERE experiment IN (SELECT name FROM experiments WHERE id IN "
                f"(SELECT experiment_id FROM runs WHERE {where}))", params))
    origin = json.dumps({k: source[k] for k in ("user", "host", "database", "exported_at")})
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for row in _rows(db, f"SELECT * FROM runs WHERE id IN ({marks}) ORDER BY id", chunk):
            row["origin_json"] = row.get("origin_json") or origin
            yield {"table": "runs", "row": row}
    for table in run_tables(db):
        yield from ({"table": table, "row": r} for r in _rows(
            db, f"SELECT * FROM [{table}] WHERE run_id IN ({chosen}) ORDER BY run_id", params))


def write_bundle(lines: Iterator[dict], out: IO[bytes]) -> int:
    """Write the lines and the closing check; return the number of rows."""
    digest, rows = hashlib.sha256(), 0
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        for line in lines:
            data = (json.dumps(line, ensure_ascii=False, allow_nan=False, default=str) + "\n").encode()
            digest.update(data)
            gz.write(data)
            rows += "table" in line
        gz.write((json.dumps({"end": True, "rows": rows, "sha256": digest.hexdigest()}) + "\n").encode())
    return rows


def read_bundle(path: Path) -> Iterator[dict]:
    """The header, then each row line, of a bundle whose closing check holds; BundleError otherwise. The check
    is made on a first full read, so a bad bundle is refused before anything is written."""
    for _ in _lines(path):
        pass
    lines = _lines(path)
    yield from lines


def _lines(path: Path) -> Iterator[dict]:
    digest, rows, header, ended = hashlib.sha256(), 0, None, False
    try:
        with gzip.open(path, "rb") as gz:
            for raw in iter(lambda: gz.readline(MAX_LINE), b""):
                if ended:
                    raise BundleError(f"{path}: lines after the end of the bundle (edited by hand?)")
                line = _parse(path, raw)
                if header is None:
                    header = _check_header(path, line)
                    digest.update(raw)
                    yield line
                    continue
                if line.get("end") is True:
                    if line.get("rows") != rows or line.get("sha256") != digest.hexdigest():
                        raise BundleError(f"{path}: its check does not hold (cut, or edited by hand): refused")
                    ended = True
                    continue
                if not isinstance(line.get("table"), str) or not isinstance(line.get("row"), dict):
                    raise BundleError(f"{path}: a line is not a row of a table")
                digest.update(raw)
                rows += 1
                yield line
    except (OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{path}: not a complete dsv4ctl bundle (gzip: {exc})") from None
    if not ended:
        raise BundleError(f"{path}: the bundle ends before its last line (cut short?): refused")


def _parse(path: Path, raw: bytes) -> dict:
    if not raw.endswith(b"\n"):
        raise BundleError(f"{path}: a line longer than {MAX_LINE // 2**20} MiB or cut short")
    try:
        line = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BundleError(f"{path}: a line is not JSON (edited by hand, or not a bundle)") from None
    if not isinstance(line, dict):
        raise BundleError(f"{path}: a line is not a JSON object")
    return line


def _check_header(path: Path, line: dict) -> dict:
    if line.get("format") != FORMAT or not isinstance(line.get("source"), dict):
        raise BundleError(f"{path}: not a dsv4ctl bundle (`dsv4ctl db export` writes one)")
    if line.get("version") != VERSION:
        raise BundleError(f"{path}: bundle version {line.get('version')!r}; this dsv4ctl reads version {VERSION}: "
                          "upgrade dsv4ctl")
    migrations = line["source"].get("migrations")
    if not isinstance(migrations, list) or not all(isinstance(m, str) for m in migrations):
        raise BundleError(f"{path}: its header names no migrations")
    from .migrations import MIGRATIONS

    unknown = sorted(set(migrations) - {m.__name__ for m in MIGRATIONS})
    if unknown:
        raise BundleError(f"{path}: written by a newer dsv4ctl (migrations {', '.join(unknown)}; this one knows "
                          f"{len(MIGRATIONS)}): upgrade dsv4ctl to import it")
    return line


@dataclass
class ImportResult:
    source: dict[str, Any]
    added: int = 0
    present: int = 0
    notes: list[str] = field(default_factory=list)
