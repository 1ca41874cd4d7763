"""`dsv4ctl db`: export, import, check, vacuum (issue 25; docs/database.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import DbOpt, JsonOpt, check_campaign, open_store

db_app = typer.Typer(help="The results database: export, import (merge), check, vacuum.", no_args_is_help=True)


@db_app.command("export")
def export(out: Annotated[Path, typer.Option("-o", "--output", help="The bundle to write (gzip'd JSON lines).",
                                             dir_okay=False)],
           campaign: Annotated[Optional[str], typer.Option(callback=check_campaign,
                                                           help="Only this campaign's runs.")] = None,
           since: Annotated[Optional[str], typer.Option(help="Only runs recorded since then (2026-12-01, 7d).")]
           = None,
           db: DbOpt = None, json: JsonOpt = False) -> None:
    """Write a portable bundle of runs with their experiments, campaigns, verdicts, metrics and everything keyed
    by run, for `dsv4ctl db import` on another engineer's database."""
    from ..store.merge import export as export_bundle
    from ..units import since_cutoff

    store = open_store(db, must_exist=True)
    rows = export_bundle(store, out, campaign, since_cutoff(since) if since else None)
    if json:
        output.emit_json({"bundle": str(out), "rows": rows})
    else:
        output.text(f"wrote {out}: {rows} row(s); next: dsv4ctl db import {out.name} --db OTHER.db")


@db_app.command("import")
def import_(source: Annotated[Path, typer.Argument(help="A bundle (db export) or another results database.")],
            db: DbOpt = None, json: JsonOpt = False) -> None:
    """Merge runs into this database: a run already here (its token) is left alone, a taken label or campaign
    name is renamed and said so; all or nothing. Exit 1 if the bundle is refused."""
    from ..store.merge import import_path

    store = open_store(db)
    result = import_path(store, source)
    if json:
        output.emit_json({"added": result.added, "present": result.present, "notes": result.notes,
                          "source": result.source})
        return
    who = result.source
    output.text(f"{result.added} run(s) added, {result.present} already here; from {who.get('user')}@"
                f"{who.get('host')}:{who.get('database')}")
    for note in result.notes:
        output.warn(note)


@db_app.command("check")
def check(db: DbOpt = None, json: JsonOpt = False) -> None:
    """Integrity check, foreign keys and orphan rows. Exit 1 if anything is wrong."""
    from ..store.check import check as check_store

    report = check_store(open_store(db, must_exist=True))
    if json:
        output.emit_json({"ok": report.ok, "problems": report.problems, "counts": report.counts})
    else:
        for problem in report.problems:
            output.error(problem)
        output.text(("ok: " if report.ok else "NOT ok: ") + ", ".join(f"{v} {k}" for k, v in report.counts.items()))
    raise typer.Exit(0 if report.ok else 1)


@db_app.command("vacuum")
def vacuum(db: DbOpt = None) -> None:
    """Compact the database file (needs free space about its size)."""
    from ..store.check import vacuum as vacuum_store

    before, after = vacuum_store(open_store(db, must_exist=True))
    output.text(f"{before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
