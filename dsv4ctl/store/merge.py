"""The merge of a bundle into a store (store/bundle.py says what a bundle holds): one transaction, so a bundle
imported is all there or, after any failure (a full disk, a kill), not there at all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .bundle import ImportResult, run_tables
from .core import Store
from .values import AUTO_LABEL, bindable, now


class _Merge:
    def __init__(self, store: Store, source: dict[str, Any]) -> None:
        self.store, self.db = store, store.db
        self.result = ImportResult(source)
        self.columns = {t: {c.name for c in self.db[t].columns} for t in self.db.table_names()}
        self.keyed = set(run_tables(self.db))
        self.experiments: dict[int, int] = {}
        self.campaigns: dict[int, int] = {}
        self.runs: dict[int, int] = {}  # bundle run id -> new run id here (runs already here are absent)

    def _fields(self, table: str, row: dict[str, Any], drop: tuple[str, ...] = ()) -> dict[str, Any]:
        known = self.columns.get(table, set())
        return {k: bindable(v) for k, v in row.items() if k in known and k not in drop}

    def experiment(self, row: dict[str, Any]) -> None:
        found = self.db.execute("SELECT id FROM experiments WHERE name = ? AND spec_hash = ?",
                                [row.get("name"), row.get("spec_hash")]).fetchone()
        self.experiments[row["id"]] = found[0] if found else self.db["experiments"].insert(
            self._fields("experiments", row, ("id",))).last_pk

    def campaign(self, row: dict[str, Any]) -> None:
        name = row.get("name")
        found = self.db.execute("SELECT id, created_at FROM campaigns WHERE name = ?", [name]).fetchone()
        if found and found[1] == row.get("created_at"):
            self.campaigns[row["id"]] = found[0]
            return
        if found:
            wanted, n = f"{name}-{self.result.source.get('host') or 'imported'}", 1
            new = wanted
            while self.db.execute("SELECT 1 FROM campaigns WHERE name = ?", [new]).fetchone():
                n += 1
                new = f"{wanted}-{n}"
            self.result.notes.append(f"campaign {name!r} exists here already (another one): imported as {new!r}")
            row = {**row, "name": new}
        self.campaigns[row["id"]] = self.db["campaigns"].insert(self._fields("campaigns", row, ("id",))).last_pk

    def reference(self, row: dict[str, Any]) -> None:
        here = self.db.execute("SELECT perf_json FROM perf_references WHERE experiment = ?",
                               [row.get("experiment")]).fetchone()
        if here is None:
            self.db["perf_references"].insert(self._fields("perf_references", row))
        elif here[0] != row.get("perf_json"):
            self.result.notes.append(f"performance reference of {row.get('experiment')!r} differs; kept this "
                                     "database's (`dsv4ctl reference set` to change it)")

    def run(self, row: dict[str, Any]) -> None:
        if self.db.execute("SELECT 1 FROM runs WHERE token = ?", [row.get("token")]).fetchone():
            self.result.present += 1
            return
        fields = self._fields("runs", row, ("id", "label", "has_verdict"))  # the mark follows its verdict (m013)
        fields["experiment_id"] = self.experiments.get(row.get("experiment_id"))
        fields["campaign_id"] = self.campaigns.get(row.get("campaign_id"))
        if fields["experiment_id"] is None:
            from .bundle import BundleError

            raise BundleError(f"run {row.get('label')!r} of the bundle names no experiment of it")
        new_id = self.db["runs"].insert(fields).last_pk
        label = row.get("label")
        if not label or AUTO_LABEL.fullmatch(label):
            label = self.store.free_label(f"r{new_id}")
        elif not self.store.label_free(label):
            taken, label = label, self.store.free_label(label)
            self.result.notes.append(f"label {taken!r} is taken here: the imported run is {label!r}")
        self.db.execute("UPDATE runs SET label = ? WHERE id = ?", [label, new_id])
        self.runs[row["id"]] = new_id
        self.result.added += 1

    def keyed_row(self, table: str, row: dict[str, Any]) -> None:
        new_id = self.runs.get(row.get("run_id"))
        if new_id is None or table not in self.keyed:
            return  # a run already here keeps its own verdict and the rest
        pk = self.db[table].pks
        drop = tuple(pk) if pk == ["id"] else ()  # a table's own row id is this database's to give
        self.db[table].insert({**self._fields(table, row, drop), "run_id": new_id})


def merge(store: Store, lines: Iterator[dict]) -> ImportResult:
    """Import a bundle's lines (header first) in one transaction; rows of the wrong shape are a BundleError and
    nothing is written."""
    import sqlite3

    from .bundle import BundleError

    try:
        return _merge(store, lines)
    except (KeyError, TypeError, ValueError, AttributeError, sqlite3.IntegrityError) as exc:
        raise BundleError(f"a row of the bundle does not fit this database ({type(exc).__name__}: {exc}): "
                          "nothing was imported") from None


def _merge(store: Store, lines: Iterator[dict]) -> ImportResult:
    header = next(lines)
    with store.transaction():
        merge = _Merge(store, header["source"])
        handlers = {"experiments": merge.experiment, "campaigns": merge.campaign, "runs": merge.run,
                    "perf_references": merge.reference}
        skipped: set[str] = set()
        for line in lines:
            table, row = line["table"], line["row"]
            if table in handlers:
                handlers[table](row)
            elif table in merge.columns:
                merge.keyed_row(table, row)
            else:
                skipped.add(table)
        if skipped:
            merge.result.notes.append(f"tables this database does not have were left out: {', '.join(sorted(skipped))}")
        store.db["imports"].insert({"source_json": json.dumps(header["source"]), "runs_added": merge.result.added,
                                    "runs_present": merge.result.present,
                                    "notes_json": json.dumps(merge.result.notes), "imported_at": now()})
    return merge.result


def export(store: Store, out: Path, campaign: str | None = None, since: Any = None) -> int:
    """Write the bundle of every run (or a campaign's, or those recorded since a time) to `out`, through a
    temporary file beside it: a full disk leaves no half bundle. Returns the number of rows."""
    import os
    from datetime import timedelta

    from .bundle import bundle_lines, write_bundle
    from .queries import RECORDED_AT, recorded_at

    where, params = "1", []
    if campaign:
        where, params = "runs.campaign_id = ?", [store.campaign(campaign)["id"]]
    if since is not None:
        ids = [r[0] for r in store.db.execute(f"SELECT id, submitted_at, updated_at FROM runs WHERE {RECORDED_AT} "
                                              ">= ?", [(since - timedelta(days=1)).strftime("%Y-%m-%d")])
               if recorded_at({"submitted_at": r[1], "updated_at": r[2]}) >= since]
        store.db.execute("CREATE TEMP TABLE IF NOT EXISTS _export_ids (id INTEGER PRIMARY KEY)")
        store.db.execute("DELETE FROM _export_ids")
        store.db.executemany("INSERT INTO _export_ids VALUES (?)", [(i,) for i in ids])
        where = f"({where}) AND runs.id IN (SELECT id FROM _export_ids)"
    temporary = out.with_name(f".{out.name}.part")
    try:
        with open(temporary, "wb") as handle:
            rows = write_bundle(bundle_lines(store.db, store.path, where, params), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, out)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        from .dbfile import StoreError

        raise StoreError(f"{out}: the bundle could not be written ({exc.strerror or exc}); nothing was left "
                         "there") from None
    return rows


def import_path(store: Store, path: Path) -> ImportResult:
    """Import a bundle, or another results database (read, never written: a newer one is refused)."""
    from .bundle import BundleError, read_bundle

    if not path.is_file():
        raise BundleError(f"{path}: no such file")
    with open(path, "rb") as handle:
        magic = handle.read(16)
    if magic.startswith(b"SQLite format 3"):
        return _import_database(store, path)
    if not magic.startswith(b"\x1f\x8b"):
        raise BundleError(f"{path}: neither a dsv4ctl bundle (gzip) nor a results database")
    return merge(store, read_bundle(path))


def _import_database(store: Store, path: Path) -> ImportResult:
    import sqlite_utils
    import tempfile

    from .bundle import bundle_lines, read_bundle, write_bundle
    from .dbfile import connect
    from .migrations import check_version

    if path.resolve() == store.path.resolve():
        from .bundle import BundleError

        raise BundleError(f"{path} is the database being imported into")
    other = sqlite_utils.Database(connect(path, read_only=True))
    try:
        check_version(other, path)  # a newer dsv4ctl's database is refused, and nothing is written
        with tempfile.TemporaryDirectory(prefix="dsv4ctl-import-") as folder:
            bundle = Path(folder) / "bundle.jsonl.gz"
            with open(bundle, "wb") as handle:
                write_bundle(bundle_lines(other, path), handle)
            return merge(store, read_bundle(bundle))
    finally:
        other.conn.close()
