"""Performance references (issue 17): bounds with tolerances, checked when a run is judged or ingested; a correct
run outside its reference stays passed, is shown, and makes `dsv4ctl verdict` exit 4."""

from __future__ import annotations

import hashlib
import json

import pytest

from .conftest import BASE_SPEC, FIXTURES
from dsv4ctl.campaign.verdicts import record_verdict
from dsv4ctl.analysis.perf import (
    PerfReferenceError,
    check_perf,
    parse_tolerance,
    perf_yaml,
    reference_from,
    write_into_spec,
)


def test_tolerances_read_as_fractions_or_percentages():
    assert parse_tolerance("5%") == pytest.approx(0.05)
    assert parse_tolerance(0.1) == 0.1 and parse_tolerance(None) == 0.0
    for bad in ("fast", -0.1, True):
        with pytest.raises(PerfReferenceError):
            parse_tolerance(bad)


def test_check_perf_widens_each_bound_by_its_tolerance():
    perf = {"gen_s": {"max": 70.0, "tolerance": "5%"}, "tokens_per_s": {"min": 0.45}}
    assert check_perf(perf, {"gen_s": 73.4, "tokens_per_s": 0.45}) == []
    [slow] = check_perf(perf, {"gen_s": 101.3, "tokens_per_s": 0.5})
    assert (slow.metric, slow.kind, slow.limit) == ("gen_s", "max", pytest.approx(73.5))
    assert "101.3 above its reference max 70 +5%" in slow.message
    [low, missing] = check_perf({"tokens_per_s": {"min": 0.45}, "ttft_s": {"max": 1}}, {"tokens_per_s": 0.4})
    assert low.kind == "min" and missing.value is None and "not measured" in missing.message


def test_a_reference_from_medians_prints_and_writes_into_a_spec(tmp_path):
    block = reference_from({"gen_s": [67.5, 68.1, 67.9], "tokens_per_s": [0.47, 0.46, 0.48]}, 0.05)
    assert block == {"gen_s": {"max": 67.9, "tolerance": "5%"}, "tokens_per_s": {"min": 0.47, "tolerance": "5%"}}
    assert perf_yaml({"gen_s": block["gen_s"]}) == 'expect:\n  perf:\n    gen_s: {max: 67.9, tolerance: "5%"}\n'
    written = write_into_spec(BASE_SPEC + "expect:\n  bos_id: 0\n  perf: {ttft_s: {max: 1}}\n", block)
    import yaml

    assert yaml.safe_load(written)["expect"] == {"bos_id": 0, "perf": block}


def _spec(path):
    from dsv4ctl.spec.load import load_spec

    [point] = load_spec(path)
    assert point.spec is not None, point.errors
    return point.spec


def test_the_spec_accepts_perf_and_keeps_its_hash(write_spec):
    plain = _spec(write_spec(BASE_SPEC, "a.yaml"))
    with_ref = _spec(write_spec(BASE_SPEC + "expect:\n  perf: {gen_s: {max: 70, tolerance: 5%}}\n", "b.yaml"))
    assert with_ref.expect.perf["gen_s"].max == 70
    assert with_ref.spec_hash() == plain.spec_hash()  # a reference judges the experiment, it is not part of it
    assert "perf" not in plain.snapshot()["expect"]
    assert with_ref.snapshot()["expect"]["perf"]["gen_s"] == {"max": 70.0, "min": None, "tolerance": "5%"}


@pytest.mark.parametrize("bad", ["{gen_s: {tolerance: 5%}}", "{gen_s: {max: 1, min: 0}}",
                                 "{gen_s: {max: 1, tolerance: lots}}"])
def test_the_spec_refuses_a_reference_without_one_bound_or_with_a_bad_tolerance(write_spec, bad):
    from dsv4ctl.spec.load import load_spec

    [point] = load_spec(write_spec(BASE_SPEC + f"expect:\n  perf: {bad}\n"))
    assert point.spec is None and any("perf" in str(e) for e in point.errors)


def _log(tmp_path, name: str, gen_s: float):
    text = (FIXTURES / "logs" / "J17.log").read_text(encoding="utf-8")
    assert '"gen_s": 21.7' in text
    path = tmp_path / f"{name}.log"
    path.write_text(text.replace('"gen_s": 21.7', f'"gen_s": {gen_s}'), encoding="utf-8")
    return path


def _ingest(cli, tmp_path, db, name, gen_s, sha=None):
    args = ["ingest", "--log", _log(tmp_path, name, gen_s), "--sacct", FIXTURES / "logs" / "J17.sacct",
            "--experiment", "j17", "--label", name, "--db", db]
    result = cli(*args, *(["--git-sha", sha] if sha else []))
    assert result.exit_code == 0, result.output
    return result


def test_reference_set_from_ingested_runs_then_a_slower_correct_run_exits_4(cli, tmp_path, write_spec):
    db = tmp_path / "r.db"
    for name, gen_s in (("A1", 67.5), ("A2", 68.1), ("A3", 67.9)):
        _ingest(cli, tmp_path, db, name, gen_s)
    spec = write_spec(BASE_SPEC)
    done = cli("reference", "set", "j17", "--from", "A1", "--from", "A2", "--from", "A3", "--tolerance", "5%",
               "--spec", spec, "--db", db)
    assert done.exit_code == 0, done.output
    assert 'gen_s: {max: 67.9, tolerance: "5%"}' in done.output
    assert _spec(spec).expect.perf["gen_s"].max == 67.9  # the written spec still loads

    assert cli("verdict", "A2", "--db", db).exit_code == 0  # 68.1 is inside 67.9 + 5%
    slow = _ingest(cli, tmp_path, db, "SLOW", 101.3)
    assert "passed" in slow.output and "OUTSIDE ITS PERFORMANCE REFERENCE" in slow.output
    assert cli("verdict", "SLOW", "--db", db).exit_code == 4
    shown = json.loads(cli("verdict", "SLOW", "--db", db, "--json").output)
    assert shown["passed"] is True and shown["perf"]["within"] is False
    assert shown["perf"]["failures"][0]["metric"] == "gen_s" and shown["perf"]["source"] == "reference set"
    assert "OUTSIDE REFERENCE" in cli("runs", "--db", db).output
    assert "gen_s 101.3 above its reference max 67.9" in cli("show", "SLOW", "--db", db).output


def test_a_failed_run_is_never_checked_nor_used_for_a_reference(cli, tmp_path):
    db = tmp_path / "r.db"
    bad = tmp_path / "bad.log"
    bad.write_text((FIXTURES / "logs" / "oom.log").read_text(encoding="utf-8"), encoding="utf-8")
    assert cli("ingest", "--log", bad, "--experiment", "j17", "--label", "BAD", "--db", db).exit_code == 0
    from dsv4ctl.analysis.reference_source import NoReferenceRuns

    with pytest.raises(NoReferenceRuns, match="no passed run"):
        cli("reference", "set", "j17", "--from", "BAD", "--db", db)
    _ingest(cli, tmp_path, db, "OK", 21.7)
    assert cli("reference", "set", "j17", "--from", "OK", "--db", db).exit_code == 0
    bad.write_text((FIXTURES / "logs" / "oom.log").read_text(encoding="utf-8"), encoding="utf-8")
    assert cli("ingest", "--log", bad, "--experiment", "j17", "--label", "BAD2", "--db", db,
               "--again").exit_code == 0  # the same content twice needs --again since issue 29 (S11)
    assert cli("verdict", "BAD2", "--db", db).exit_code == 1  # the gate first: a failed run is never "outside"
    assert json.loads(cli("show", "BAD2", "--db", db, "--json").output)["perf"] is None


def test_history_through_ingest_shows_the_commit_where_gen_s_stepped_up(cli, tmp_path):
    db = tmp_path / "r.db"
    values = [67.5, 68.1, 67.9, 68.3, 67.7, 68.0, 101.0, 101.5, 100.9, 101.3, 101.8, 100.7]
    shas = [hashlib.sha1(f"commit {c}".encode()).hexdigest() for c in range(4)]
    for i, gen_s in enumerate(values):
        _ingest(cli, tmp_path, db, f"H{i}", gen_s, sha=shas[i // 3])
    data = json.loads(cli("history", "j17", "--db", db, "--json").output)
    assert [p["median"] for p in data["points"]] == [67.9, 68.0, 101.0, 101.3]
    [step] = data["steps"]
    assert (step["before"], step["after"]) == (shas[1], shas[2])
    assert step["ratio"] == pytest.approx(101.15 / 67.95) and step["p_value"] < 0.01
    text = cli("history", "j17", "--db", db).output
    assert f"step {shas[1][:12]} -> {shas[2][:12]}: 67.95 -> 101.15 (+48.9%" in text


def test_the_store_migrates_to_the_perf_tables(tmp_path):
    from dsv4ctl.store import open_store

    store = open_store(tmp_path / "r.db")
    assert {"perf_checks", "perf_references"} <= set(store.db.table_names())


def _judged(store, experiment_id, campaign_id, gen_s, tmp_path, name):
    from dsv4ctl.judge.files import judge_files

    run_id = store.add_run(experiment_id=experiment_id, campaign_id=campaign_id, backend="local", token=name,
                           state="COMPLETED", ingested=0, point_json="{}", repeat_index=0)
    verdict = judge_files(_log(tmp_path, name, gen_s), FIXTURES / "logs" / "J17.sacct")
    record_verdict(store, run_id, verdict.to_json())
    return run_id


def test_a_reference_from_a_campaign_checks_later_runs_and_a_spec_reference_wins(cli, tmp_path):
    from dsv4ctl.analysis.perf import stored_check
    from dsv4ctl.store import open_store

    db = tmp_path / "r.db"
    store = open_store(db)
    plain = store.experiment_id("j17", "h1", json.dumps({"expect": {}}), "s.yaml")
    today = store.create_campaign("today", "local", "dsv4ctl submit s.yaml")
    for i, gen_s in enumerate((67.5, 68.1, 67.9, 68.3, 67.7)):
        _judged(store, plain, today, gen_s, tmp_path, f"t{i}")
    done = cli("reference", "set", "j17", "--from", "today", "--metric", "gen_s", "--metric", "tokens_per_s",
               "--tolerance", "0.05", "--db", db, "--json")
    assert json.loads(done.output)["perf"] == {"gen_s": {"max": 67.9, "tolerance": "5%"},
                                               "tokens_per_s": {"min": 1.47, "tolerance": "5%"}}
    assert json.loads(done.output)["from"] == "campaign today"
    slow = _judged(store, plain, None, 101.3, tmp_path, "slow")
    assert stored_check(store, slow)["within"] is False
    assert "OUTSIDE REFERENCE" in cli("runs", "--db", db).output
    # the spec's own expect.perf comes first: here it allows 110 s
    spec = {"expect": {"perf": {"gen_s": {"max": 110.0, "tolerance": "0%"}}}}
    loose = store.experiment_id("j17", "h2", json.dumps(spec), "s.yaml")
    check = stored_check(store, _judged(store, loose, None, 101.3, tmp_path, "loose"))
    assert check == {"within": True, "source": "spec", "reference": spec["expect"]["perf"], "failures": []}


def test_the_suite_matrix_shows_the_reference_check_beside_the_result(tmp_path):
    from dsv4ctl.store import open_store
    from dsv4ctl.campaign.suite import suite_matrix

    store = open_store(tmp_path / "r.db")
    spec = {"expect": {"perf": {"gen_s": {"max": 70.0, "tolerance": "5%"}}}}
    case = store.experiment_id("a-good", "h", json.dumps(spec), "a-good.yaml")
    other = store.experiment_id("b-unreferenced", "h", json.dumps({"expect": {}}), "b.yaml")
    campaign = store.create_campaign("nightly", "local", "dsv4ctl suite s")
    for i, gen_s in enumerate((68.0, 101.3, 69.0)):
        _judged(store, case, campaign, gen_s, tmp_path, f"a{i}")
    _judged(store, other, campaign, 101.3, tmp_path, "b0")
    cases = {c.case: c for c in suite_matrix(store, "nightly", [])}
    assert cases["a-good"].ok and cases["a-good"].reference == "1/3 outside"  # correct, so still PASS
    assert cases["b-unreferenced"].reference == "-"


# ---- issue 29 point 6 / S10: a tolerance means what it says ------------------------------------------------------


@pytest.mark.parametrize("bare", [5, "5", 5.0, " 5 ", 1, "1", 1.5, 99])
def test_a_bare_tolerance_of_1_or_more_is_refused_as_a_hidden_percentage(bare):
    with pytest.raises(PerfReferenceError, match=r"would mean \d+%: write \S+% or 0\.\d+$"):
        parse_tolerance(bare)
    with pytest.raises(PerfReferenceError, match=r"100 would mean 10000%: write 100%$"):  # never "or 1"
        parse_tolerance(100)


def test_a_bare_fraction_below_1_and_any_percentage_stay_accepted():
    assert parse_tolerance(0.05) == parse_tolerance("0.05") == pytest.approx(parse_tolerance("5%"))
    assert parse_tolerance(0) == parse_tolerance("0%") == 0.0 and parse_tolerance(0.999) == 0.999
    assert parse_tolerance("150%") == pytest.approx(1.5) and parse_tolerance("1000%") == pytest.approx(10)
    for bad in ("1000.1%", "nan", "nan%", "inf%", "-5%", "1e400%"):
        with pytest.raises(PerfReferenceError, match="out of range"):
            parse_tolerance(bad)


def test_the_message_says_what_5_would_mean_and_what_to_write():
    with pytest.raises(PerfReferenceError) as refused:
        parse_tolerance(5)
    assert str(refused.value).endswith("5 would mean 500%: write 5% or 0.05")


@pytest.mark.parametrize("bare", ["5", '"5"', "2.5"])
def test_the_spec_refuses_a_bare_tolerance_with_its_location(write_spec, bare):
    from dsv4ctl.spec.load import load_spec

    path = write_spec(BASE_SPEC + f"expect:\n  perf:\n    gen_s: {{max: 30, tolerance: {bare}}}\n")
    [point] = load_spec(path)
    assert point.spec is None
    [error] = point.errors
    assert "would mean" in error.message and "%: write" in error.message
    assert error.location is not None and error.location.file == str(path)


def run_main(capsys, *args) -> tuple[int, str, str]:
    """The CLI as a shell runs it: errors become one line on stderr and an exit code."""
    from dsv4ctl.cli import main

    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


def test_reference_set_refuses_a_bare_tolerance_and_stores_nothing(cli, tmp_path, capsys):
    db = tmp_path / "r.db"
    _ingest(cli, tmp_path, db, "P1", 60)
    for bare in ("5", "1"):
        code, _, err = run_main(capsys, "reference", "set", "j17", "--from", "P1", "--tolerance", bare, "--db", db)
        assert code == 2 and "would mean" in err and len(err.strip().splitlines()) <= 2, err
    from dsv4ctl.store import open_store

    assert open_store(db).db.execute("SELECT COUNT(*) FROM perf_references").fetchone()[0] == 0
    done = cli("reference", "set", "j17", "--from", "P1", "--tolerance", "0.05", "--db", db, "--json")
    assert json.loads(done.output)["perf"]["gen_s"]["tolerance"] == "5%"


def test_the_spec_refuses_a_boolean_tolerance_rather_than_reading_it_as_100_percent(write_spec):
    from dsv4ctl.spec.load import load_spec

    [point] = load_spec(write_spec(BASE_SPEC + "expect:\n  perf:\n    gen_s: {max: 30, tolerance: true}\n"))
    assert point.spec is None and "not a number" in point.errors[0].message


# ---- issue 29 S31: reference set --spec writes only into the experiment's own YAML spec, keeping its layout -------


def _stored_references(db) -> int:
    from dsv4ctl.store import open_store

    return open_store(db).db.execute("SELECT COUNT(*) FROM perf_references").fetchone()[0]


def test_reference_set_into_a_file_that_is_not_yaml_is_an_ordinary_error(cli, tmp_path, capsys):
    db = tmp_path / "r.db"
    _ingest(cli, tmp_path, db, "P1", 60)
    log = tmp_path / "notaspec.log"
    log.write_text((FIXTURES / "logs" / "J17.log").read_text(encoding="utf-8"), encoding="utf-8")
    before = log.read_bytes()
    code, _, err = run_main(capsys, "reference", "set", "j17", "--from", "P1", "--spec", log, "--db", db)
    assert code == 1 and "not a YAML spec" in err and "unexpected" not in err, err
    assert log.read_bytes() == before and _stored_references(db) == 0


def test_reference_set_warns_when_the_spec_names_another_experiment(cli, tmp_path, capsys):
    """A warning, not a refusal: ingested runs are named by --experiment (j17's spec is j17-baseline.yaml)."""
    db = tmp_path / "r.db"
    _ingest(cli, tmp_path, db, "P1", 60)
    other = tmp_path / "other.yaml"
    other.write_text(BASE_SPEC.replace("name: t", "name: other-exp", 1), encoding="utf-8")
    code, _, err = run_main(capsys, "reference", "set", "j17", "--from", "P1", "--spec", other, "--db", db)
    assert code == 0 and "is the spec of experiment 'other-exp', not 'j17'" in err, err
    assert "warning" in err.lower() and _spec(other).expect.perf["gen_s"].max == 60.0
    code, _, err = run_main(capsys, "reference", "set", "j17", "--from", "P1", "--spec",
                            write_spec_named(tmp_path, "j17"), "--db", db)
    assert code == 0 and "is the spec of" not in err, err


def write_spec_named(tmp_path, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(BASE_SPEC.replace("name: t", f"name: {name}", 1), encoding="utf-8")
    return path


def test_reference_set_keeps_the_specs_comments_and_flow_style(cli, tmp_path):
    db = tmp_path / "r.db"
    _ingest(cli, tmp_path, db, "P1", 60)
    spec = tmp_path / "j17.yaml"
    text = ("name: j17   # the experiment\nplatform: cpu\nmodel: {path: /m}\nrequests:\n"
            "  - messages: [{role: user, content: hi}]  # keep\nexpect:\n  bos_id: 0  # BOS\n"
            "  perf:\n    gen_s: {max: 1}\n  # after perf\nsampling: {max_tokens: 4}   # flow\n")
    spec.write_text(text, encoding="utf-8")
    done = cli("reference", "set", "j17", "--from", "P1", "--spec", spec, "--db", db)
    assert done.exit_code == 0, done.output
    written = spec.read_text(encoding="utf-8")
    assert written == text.replace("    gen_s: {max: 1}\n", '    gen_s: {max: 60.0, tolerance: "5%"}\n')
    assert _spec(spec).expect.perf["gen_s"].max == 60.0


def test_a_spec_whose_layout_cannot_be_edited_is_left_alone_and_the_block_printed(cli, tmp_path, capsys):
    db = tmp_path / "r.db"
    _ingest(cli, tmp_path, db, "P1", 60)
    spec = tmp_path / "j17.yaml"
    spec.write_text(BASE_SPEC.replace("name: t", "name: j17", 1) + "expect: {bos_id: 0}\n", encoding="utf-8")
    before = spec.read_text(encoding="utf-8")
    code, out, err = run_main(capsys, "reference", "set", "j17", "--from", "P1", "--spec", spec, "--db", db)
    assert code == 2 and "flow style" in err and "paste the block above" in err, err
    assert 'gen_s: {max: 60.0, tolerance: "5%"}' in out
    assert spec.read_text(encoding="utf-8") == before and _stored_references(db) == 0


@pytest.mark.parametrize("text", [
    "name: x\n",
    "name: x\nexpect:\n  bos_id: 0\n",
    "name: x\nexpect:\n  perf:\n    ttft_s:\n      max: 2\n  bos_id: 0\nlast: 1\n",
    "name: x\nexpect:\n  bos_id: 0\n  perf: {ttft_s: {max: 1}}\n",
    "name: x\n...\n",
])
def test_write_into_spec_changes_expect_perf_only(text):
    import yaml

    block = {"gen_s": {"max": 67.9, "tolerance": "5%"}}
    written = write_into_spec(text, block)
    data = yaml.safe_load(text)
    assert yaml.safe_load(written) == {**data, "expect": {**(data.get("expect") or {}), "perf": block}}
    kept = [line for line in text.splitlines() if "perf" not in line and "ttft_s" not in line and "max: " not in line
            and line != "..."]
    assert all(line in written.splitlines() for line in kept)


# ---- issue 29 S32: validate knows which metrics a run records, and that a duration is never negative -------------


def _findings(write_spec, body: str, base: str = BASE_SPEC):
    from dsv4ctl.spec.load import load_spec

    [point] = load_spec(write_spec(base + body))
    return point


def test_validate_warns_about_a_reference_on_a_metric_the_probe_never_records(write_spec):
    point = _findings(write_spec, "expect:\n  perf:\n    nosuch_metric: {max: 1}\n    tokens_per_S: {min: 1}\n")
    assert point.spec is not None  # a warning: ingested runs may carry other metrics
    nosuch, typo = sorted(point.warnings, key=lambda f: f.path)
    assert nosuch.path == "expect.perf.nosuch_metric" and "records no metric 'nosuch_metric'" in nosuch.message
    assert "not measured" in nosuch.message and "gen_s" in nosuch.why
    assert nosuch.location is not None and nosuch.location.line == BASE_SPEC.count("\n") + 3
    assert "did you mean 'tokens_per_s'?" in typo.message


def test_validate_refuses_a_negative_max_for_a_duration(write_spec):
    point = _findings(write_spec, "expect:\n  perf:\n    gen_s: {max: -1}\n")
    assert point.spec is None
    [error] = point.errors
    assert error.path == "expect.perf.gen_s.max" and "-1 is negative" in error.message
    assert not _findings(write_spec, "expect:\n  perf:\n    gen_s: {max: 30}\n    ttft_s: {max: 0.5}\n").findings


def test_a_serve_specs_reference_is_checked_against_the_serve_metrics(write_spec):
    from .conftest import EXPERIMENTS

    base = f"extends: {EXPERIMENTS / 'cpu-serve.yaml'}\nname: s32\n"
    point = _findings(write_spec, "expect:\n  perf:\n    p95_ttft_ms: {max: 900}\n    output_throughput: {min: 1}\n",
                      base)
    assert point.spec is not None and not point.findings
    point = _findings(write_spec, "expect:\n  perf:\n    gen_s: {max: 30}\n    p99_e2el_ms: {max: -5}\n", base)
    assert [w.path for w in point.warnings] == ["expect.perf.gen_s"]
    assert [e.path for e in point.errors] == ["expect.perf.p99_e2el_ms.max"]


def test_the_offline_metric_list_holds_what_the_probe_prints():
    import re

    from dsv4ctl.analysis.perf import OFFLINE_METRICS

    from .conftest import ROOT

    text = (ROOT / "runtime" / "dsv4rt" / "offline.py").read_text(encoding="utf-8")  # the offline job
    written = text[text.index('metrics = {"gen_s"'):text.index('say(markers.dsv4_line("DSV4_METRICS"')]
    printed = set(re.findall(r'"([a-z_0-9]+)":', written)) - {"gen_s_all"}  # a list, never a stored number
    assert printed == set(OFFLINE_METRICS)


def test_reference_set_of_an_unknown_metric_exits_2_with_the_metrics_present(cli, tmp_path, capsys):
    """Issue 26 m14: the same check as compare, history and report."""
    db = tmp_path / "r.db"
    _ingest(cli, tmp_path, db, "P1", 60)
    code, _, err = run_main(capsys, "reference", "set", "j17", "--from", "P1", "--metric", "gen_S", "--db", db)
    assert code == 2 and "no measured 'gen_S'" in err and "did you mean 'gen_s'?" in err and "tokens_per_s" in err
    assert _stored_references(db) == 0


def test_reference_set_warns_below_six_samples_says_what_it_replaces_and_show_unset(cli, tmp_path, capsys):
    """Issue 26 m21: a reference from one run is warned about, the store is said (and what it replaces), and
    `reference show` / `reference unset` list and remove it; an experiment with none exits 2."""
    db = tmp_path / "r.db"
    for i, gen_s in enumerate((67.5, 68.1, 67.9, 68.0, 67.7, 68.3)):
        _ingest(cli, tmp_path, db, f"R{i}", gen_s)
    capsys.readouterr()
    code, out, err = run_main(capsys, "reference", "set", "j17", "--from", "R0", "--db", db)
    assert code == 0 and "gen_s: {max: 67.5" in out
    assert "gen_s from 1 passed run" in err and "below 6" in err
    assert "stored for j17;" in err and "replaces" not in err
    code, out, err = run_main(capsys, "reference", "set", "j17", "--from", "R0", "--db", db, "--json")
    assert json.loads(out)["warnings"][0].startswith("a reference from few samples (gen_s from 1 passed run)")
    sources = [a for i in range(6) for a in ("--from", f"R{i}")]
    code, out, err = run_main(capsys, "reference", "set", "j17", *sources, "--db", db, "--json")
    data = json.loads(out)
    assert data["samples"] == {"gen_s": 6} and data["replaces"]["perf"]["gen_s"]["max"] == 67.5
    assert data["warnings"] == [] and err == ""
    code, out, err = run_main(capsys, "reference", "set", "j17", *sources, "--db", db)
    assert code == 0 and "few samples" not in err
    assert "stored for j17 (replaces gen_s max 67.95 (5%) from run 1 (R0), run 2 (R1)" in err, err

    code, out, _ = run_main(capsys, "reference", "show", "--db", db, "--json")
    shown = json.loads(out)
    assert [r["experiment"] for r in shown] == ["j17"] and shown[0]["perf"]["gen_s"]["max"] == 67.95
    code, out, _ = run_main(capsys, "reference", "show", "--db", db)
    assert "1 stored reference(s)" in out and "j17" in out and "gen_s max 67.95" in out
    code, out, _ = run_main(capsys, "reference", "show", "j17", "--db", db)
    assert code == 0 and "max: 67.95" in out

    code, out, _ = run_main(capsys, "reference", "unset", "j17", "--db", db)
    assert code == 0 and "removed the reference of j17: gen_s max 67.95" in out
    assert json.loads(run_main(capsys, "reference", "show", "--db", db, "--json")[1]) == []
    for args in (("unset", "j17"), ("show", "j18")):
        code, out, err = run_main(capsys, "reference", *args, "--db", db)
        assert code == 2 and out == "" and "no reference stored for" in err, err
    # a run judged after the unset is not checked: a slow one passes with no reference (exit 0, not 4)
    _ingest(cli, tmp_path, db, "SLOW", 101.3)
    assert cli("verdict", "SLOW", "--db", db).exit_code == 0
