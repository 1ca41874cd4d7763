"""Issue 25: the database's filesystem from the mount table, and never WAL on a shared one (the pragma in force)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4ctl.store import filesystem, open_store
from dsv4ctl.store.filesystem import is_shared, journal_for, mount_of, parse_mountinfo

MOUNTS = Path(__file__).parent / "fixtures" / "mounts"


@pytest.mark.parametrize("table, path, fstype, shared", [
    ("nfs_login", "/home/alice/proj/results.db", "nfs4", True),
    ("nfs_login", "/projects/dsv4/results.db", "nfs", True),
    ("nfs_login", "/scratch/my team/results.db", "nfs4", True),
    ("nfs_login", "/tmp/results.db", "tmpfs", False),
    ("nfs_login", "/homework/results.db", "xfs", False),  # /home is a prefix of the text, not of the path
    ("lustre_login", "/lustre/scratch/u/results.db", "lustre", True),
    ("lustre_login", "/lustre/project/results.db", "lustre", True),
    ("lustre_login", "/home/u/results.db", "ext4", False),
    ("gpfs_login", "/gpfs/fs1/team/results.db", "gpfs", True),
    ("gpfs_login", "/u/bob/results.db", "gpfs", True),
    ("gpfs_login", "/gpfs/archive/results.db", "fuse.sshfs", True),
    ("gpfs_login", "/run/results.db", "tmpfs", False),
])
def test_recorded_cluster_mount_tables(table, path, fstype, shared):
    mounts = parse_mountinfo((MOUNTS / f"{table}.mountinfo").read_text())
    found = mount_of(Path(path), mounts)
    assert found.fstype == fstype and is_shared(found.fstype) is shared


def test_this_machines_mount_table(tmp_path):
    mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    assert mounts and any(m.point == "/" for m in mounts)
    expected = mount_of(tmp_path.resolve(), mounts)
    journal = journal_for(tmp_path / "r.db")
    assert journal.fstype == expected.fstype and journal.shared is is_shared(expected.fstype)
    df = subprocess.run(["df", "--output=fstype", str(tmp_path)], capture_output=True, text=True)
    if df.returncode == 0:  # coreutils reads the same table: both name one filesystem
        assert df.stdout.split()[-1] == journal.fstype


def test_a_garbled_mount_table_is_skipped_line_by_line():
    assert parse_mountinfo("garbage\n\n1 2 3\n36 1 0:1 / /x rw - nfs4 h:/e rw\n") == [
        filesystem.Mount("/x", "nfs4", "h:/e")]


def shared_table(tmp_path, fstype="nfs4"):
    table = tmp_path / "mountinfo"
    table.write_text(f"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
                     f"90 1 0:50 / {tmp_path.resolve()} rw,relatime - {fstype} filer:/export rw,vers=4.2\n")
    return table


@pytest.mark.parametrize("fstype", ["nfs4", "lustre", "gpfs"])
def test_a_shared_filesystem_gets_a_rollback_journal_and_dotfile_locks(tmp_path, monkeypatch, fstype):
    monkeypatch.setattr(filesystem, "MOUNTINFO", shared_table(tmp_path, fstype))
    store = open_store(tmp_path / "r.db")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not (tmp_path / "r.db-wal").exists() and not (tmp_path / "r.db-shm").exists()
    with store.transaction():  # the write lock is the lock directory, made by mkdir
        assert (tmp_path / "r.db.lock").is_dir()
    assert not (tmp_path / "r.db.lock").exists()
    store.close()
    assert sqlite3.connect(tmp_path / "r.db").execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_wal_database_moved_to_a_shared_filesystem_leaves_wal(tmp_path, monkeypatch):
    local = open_store(tmp_path / "r.db")
    local.experiment_id("e", "h", "{}", "x")
    assert local.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    local.close()
    monkeypatch.setattr(filesystem, "MOUNTINFO", shared_table(tmp_path))
    store = open_store(tmp_path / "r.db")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert store.db.execute("SELECT name FROM experiments").fetchall() == [("e",)]


def test_two_writers_take_turns_on_a_shared_filesystem(tmp_path, monkeypatch):
    """Two processes writing at once through the lock directory: every write lands, none is refused."""
    table = shared_table(tmp_path)
    script = (f"import sys; from dsv4ctl.store import filesystem, open_store; "
              f"filesystem.MOUNTINFO = __import__('pathlib').Path({str(table)!r}); "
              f"s = open_store({str(tmp_path / 'r.db')!r}); e = s.experiment_id('e', 'h', '{{}}', 'x'); "
              f"[s.add_run(experiment_id=e, token=sys.argv[1] + str(i), state='PLANNED', ingested=0) "
              f"for i in range(40)]")
    monkeypatch.setattr(filesystem, "MOUNTINFO", table)
    open_store(tmp_path / "r.db").close()
    procs = [subprocess.Popen([sys.executable, "-c", script, name]) for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = open_store(tmp_path / "r.db")
    assert store.db.execute("SELECT count(*) FROM runs").fetchone()[0] == 80
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_the_note_and_init_name_the_mode(tmp_path, monkeypatch):
    monkeypatch.setattr(filesystem, "MOUNTINFO", shared_table(tmp_path))
    from typer.testing import CliRunner

    from dsv4ctl.cli import app

    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["init"])
    assert done.exit_code == 0 and "journal: rollback, not WAL (nfs4 at" in done.output
    CliRunner().invoke(app, ["campaigns"])
    open_store(tmp_path / "results.db").close()
    runs = CliRunner().invoke(app, ["runs"])
    assert runs.exit_code == 0 and "not WAL" in runs.stderr and "r.db" not in runs.stderr
    assert "results.db.lock" in runs.stderr


def test_forced_by_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(filesystem.FORCE_ENV, "1")
    store = open_store(tmp_path / "r.db")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert "DSV4CTL_SHARED_FS=1" in store.journal.describe(store.path)
