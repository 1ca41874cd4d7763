"""`dsv4ctl db check` and `db vacuum`: SQLite's own integrity check, the foreign keys, rows whose run is gone (in
every table keyed by run, declared or not), runs whose verdict mark (m013) is wrong, and compaction."""

from __future__ import annotations

from dataclasses import dataclass, field

from .bundle import run_tables
from .core import Store


@dataclass
class CheckReport:
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def check(store: Store) -> CheckReport:
    report = CheckReport()
    db = store.db
    integrity = [row[0] for row in db.execute("PRAGMA integrity_check(20)")]
    if integrity != ["ok"]:
        report.problems += [f"integrity: {line}" for line in integrity]
    for table, rowid, parent, _ in db.execute("PRAGMA foreign_key_check").fetchall()[:50]:
        report.problems.append(f"foreign key: {table} row {rowid} names a missing {parent} row")
    for table in run_tables(db):
        orphans = db.execute(f"SELECT count(*) FROM [{table}] WHERE run_id NOT IN (SELECT id FROM runs)").fetchone()[0]
        if orphans:
            report.problems.append(f"orphans: {orphans} row(s) of {table} name a run that is not there")
    orphans = db.execute("SELECT count(*) FROM runs WHERE experiment_id NOT IN (SELECT id FROM experiments) OR "
                         "(campaign_id IS NOT NULL AND campaign_id NOT IN (SELECT id FROM campaigns))").fetchone()[0]
    if orphans:
        report.problems.append(f"orphans: {orphans} run(s) name a missing experiment or campaign")
    stale = db.execute("SELECT count(*) FROM runs WHERE has_verdict != "
                       "EXISTS (SELECT 1 FROM verdicts WHERE verdicts.run_id = runs.id)").fetchone()[0]
    if stale:  # m013's mark, which status reads to find the finished runs not judged yet
        report.problems.append(f"verdict marks: {stale} run(s) whose runs.has_verdict disagrees with the verdicts")
    for table in ("experiments", "campaigns", "runs", "verdicts", "metrics"):
        report.counts[table] = db.execute(f"SELECT count(*) FROM [{table}]").fetchone()[0]
    return report


def vacuum(store: Store) -> tuple[int, int]:
    """Compact the file (VACUUM needs free space about its size); return its size before and after."""
    before = store.path.stat().st_size
    if store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.db.execute("VACUUM")
    return before, store.path.stat().st_size
