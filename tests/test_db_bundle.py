"""Issue 25: two engineers' databases merged in either order, bundles refused when cut or edited, all or nothing."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsv4ctl.store import StoreError, open_store
from dsv4ctl.store.bundle import BundleError, read_bundle, write_bundle
from dsv4ctl.store.check import check
from dsv4ctl.store.merge import export, import_path


def engineer(path, who, runs=3, label=None):
    store = open_store(path)
    experiment = store.experiment_id("dsv4", "h1", "{}", "x")
    campaign = store.create_campaign("smoke", "local", "dsv4ctl submit")
    for i in range(runs):
        run = store.add_run(experiment_id=experiment, campaign_id=campaign, token=f"{who}-{i}", state="COMPLETED",
                            ingested=0, point_json="{}", label=label if i == 0 else None)
        store.save_verdict(run, {"status": "coherent", "passed": True, "false_green": False,
                                 "metrics": {"gen_s": 1.0 + i}})
    return store


def tokens(store):
    return sorted(r[0] for r in store.db.execute("SELECT token FROM runs"))


def facts(store):
    return sorted(store.db.execute("SELECT r.token, v.status, m.name, m.value FROM runs r JOIN verdicts v ON "
                                   "v.run_id = r.id JOIN metrics m ON m.run_id = r.id").fetchall())


def test_either_order_gives_the_same_runs_and_a_repeat_is_a_no_op(tmp_path):
    a, b = engineer(tmp_path / "a.db", "alice", label="J18"), engineer(tmp_path / "b.db", "bob", label="J18")
    # a campaign is its name and creation time: Bob's "smoke" is another one
    b.db.execute("UPDATE campaigns SET created_at = '2026-12-01T09:00:00+00:00'")
    export(a, tmp_path / "a.bundle")
    export(b, tmp_path / "b.bundle")
    into_b = import_path(b, tmp_path / "a.bundle")
    assert (into_b.added, into_b.present) == (3, 0)
    assert any("'J18' is taken here" in n for n in into_b.notes)
    assert any("campaign 'smoke' exists here" in n for n in into_b.notes)
    again = import_path(b, tmp_path / "a.bundle")
    assert (again.added, again.present) == (0, 3)
    into_a = import_path(a, tmp_path / "b.bundle")
    assert tokens(a) == tokens(b) and facts(a) == facts(b) and len(tokens(a)) == 6
    assert check(a).ok and check(b).ok
    origin = json.loads(b.db.execute("SELECT origin_json FROM runs WHERE token = 'alice-0'").fetchone()[0])
    assert origin["database"] == str((tmp_path / "a.db").resolve()) and origin["host"]
    assert b.db.execute("SELECT origin_json FROM runs WHERE token = 'bob-0'").fetchone()[0] is None
    assert into_a.added == 3


def test_another_database_is_read_never_written(tmp_path):
    a, b = engineer(tmp_path / "a.db", "alice"), engineer(tmp_path / "b.db", "bob")
    a.close()
    before = (tmp_path / "a.db").read_bytes()
    assert import_path(b, tmp_path / "a.db").added == 3
    assert (tmp_path / "a.db").read_bytes() == before and tokens(b) == ["alice-0", "alice-1", "alice-2",
                                                                         "bob-0", "bob-1", "bob-2"]


def test_a_newer_database_is_refused_with_its_version(tmp_path):
    a, b = engineer(tmp_path / "a.db", "alice"), engineer(tmp_path / "b.db", "bob")
    a.db.execute("INSERT INTO _dsv4ctl_migrations VALUES ('m099_future', 'x')")
    a.close()
    with pytest.raises(StoreError, match="newer dsv4ctl.*m099_future"):
        import_path(b, tmp_path / "a.db")
    assert tokens(b) == ["bob-0", "bob-1", "bob-2"]


@pytest.mark.parametrize("damage", ["cut", "edited", "appended"])
def test_a_damaged_bundle_is_refused_and_nothing_is_imported(tmp_path, damage):
    a, b = engineer(tmp_path / "a.db", "alice", runs=30), engineer(tmp_path / "b.db", "bob")
    export(a, tmp_path / "a.bundle")
    text = gzip.decompress((tmp_path / "a.bundle").read_bytes())
    if damage == "cut":
        text = text[:len(text) // 2]
    elif damage == "edited":
        text = text.replace(b'"coherent"', b'"crashed"', 1)
    else:
        text += b'{"table": "runs", "row": {}}\n'
    (tmp_path / "bad.bundle").write_bytes(gzip.compress(text))
    with pytest.raises(BundleError):
        import_path(b, tmp_path / "bad.bundle")
    raw = (tmp_path / "a.bundle").read_bytes()
    (tmp_path / "cut.bundle").write_bytes(raw[:len(raw) // 2])  # the gzip stream itself cut
    with pytest.raises(BundleError):
        import_path(b, tmp_path / "cut.bundle")
    assert tokens(b) == ["bob-0", "bob-1", "bob-2"] and b.db.execute("SELECT count(*) FROM imports").fetchone()[0] == 0


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400) | st.lists(st.text(max_size=40), max_size=5).map(
    lambda xs: gzip.compress("\n".join(xs).encode())))
def test_fuzz_the_bundle_reader_refuses_or_reads(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "x.bundle"
    path.write_bytes(data)
    try:
        list(read_bundle(path))
    except BundleError:
        pass


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["table", "row", "end", "rows"]),
                                st.none() | st.integers() | st.text(max_size=5) | st.just({}), max_size=4),
                max_size=6))
def test_fuzz_well_sealed_nonsense_is_refused_by_the_merge(tmp_path_factory, lines):
    """A bundle whose check holds but whose rows are nonsense (edited and re-sealed): a BundleError, never a
    traceback, and nothing written."""
    folder = tmp_path_factory.mktemp("sealed")
    header = {"format": "dsv4ctl-bundle", "version": 1, "source": {"migrations": ["m001_initial"]}}
    buffer = io.BytesIO()
    write_bundle(iter([header, *lines]), buffer)
    (folder / "x.bundle").write_bytes(buffer.getvalue())
    store = open_store(folder / "r.db")
    try:
        import_path(store, folder / "x.bundle")
    except BundleError:
        assert store.db.execute("SELECT count(*) FROM imports").fetchone()[0] == 0


def test_an_import_killed_midway_leaves_nothing(tmp_path):
    big = engineer(tmp_path / "a.db", "alice", runs=3000)
    export(big, tmp_path / "a.bundle")
    engineer(tmp_path / "b.db", "bob").close()
    script = ("import sys, time; from pathlib import Path; from dsv4ctl.store import open_store; "
              "from dsv4ctl.store import merge; s = open_store(sys.argv[1]); real = merge._Merge.run\n"
              "def slow(self, row):\n    real(self, row)\n    if self.result.added == 500: "
              "print('half', flush=True); time.sleep(60)\n"
              "merge._Merge.run = slow; merge.import_path(s, Path(sys.argv[2]))")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "b.db"), str(tmp_path / "a.bundle")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "half"  # 500 runs written inside the transaction
    proc.kill()
    proc.wait()
    b = open_store(tmp_path / "b.db")
    assert tokens(b) == ["bob-0", "bob-1", "bob-2"] and check(b).ok


def test_a_full_disk_while_importing_leaves_the_database_intact(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        big = engineer(tmp_path / "a.db", "alice", runs=4000)
        export(big, tmp_path / "a.bundle")
        small = engineer(mount / "b.db", "bob")
        with pytest.raises(StoreError, match="full"):
            import_path(small, tmp_path / "a.bundle")
        assert tokens(small) == ["bob-0", "bob-1", "bob-2"] and check(small).ok
        with pytest.raises(StoreError, match="nothing was left"):
            export(big, mount / "x.bundle")
        assert not list(mount.glob("*.bundle*"))
        small.close()
    finally:
        subprocess.run(["umount", str(mount)])


def test_db_commands(tmp_path):
    engineer(tmp_path / "a.db", "alice").close()
    run = lambda *a: subprocess.run([sys.executable, "-c", "from dsv4ctl.cli import main; main()", *a],
                                    capture_output=True, text=True)
    assert run("db", "export", "-o", str(tmp_path / "a.bundle"), "--db", str(tmp_path / "a.db")).returncode == 0
    done = run("db", "import", str(tmp_path / "a.bundle"), "--db", str(tmp_path / "b.db"), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["added"] == 3
    assert run("db", "check", "--db", str(tmp_path / "b.db")).returncode == 0
    (tmp_path / "junk").write_bytes(b"not a bundle")
    bad = run("db", "import", str(tmp_path / "junk"), "--db", str(tmp_path / "b.db"))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "neither a dsv4ctl bundle" in bad.stderr
    assert run("db", "vacuum", "--db", str(tmp_path / "b.db")).returncode == 0
