"""The stable file and the gates' decisions (issue 24), without a cluster: parsing (and its fuzz), writing,
`stable`, `stable diff`, `promote --dry-run`, refusals. The gates on real jobs are tests/test_promote_slurm.py."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4ctl.errors import UsageError
from dsv4ctl.promote import gates
from dsv4ctl.promote.run import demotion, parse_changes, prepare
from dsv4ctl.promote.stable import StableError, load_stable, parse_stable, render_stable, write_stable

GATE_SPEC = """\
name: gate
platform: cpu
model: {path: /models/none}
requests:
  - messages: [{role: user, content: hi}]
sampling: {max_tokens: 16}
slurm: {time: "00:30:00"}
"""


def stable_file(tmp_path: Path, body: str = "", gates_text: str | None = None) -> Path:
    (tmp_path / "g.yaml").write_text(GATE_SPEC, encoding="utf-8")
    gates_text = gates_text if gates_text is not None else """\
        gates:
          numerics: {command: "true"}
          e2e: {spec: g.yaml, repeats: 8, max_failure_rate: 0.35}
          throughput: {spec: g.yaml, repeats: 6, factor: 1.03}
        """
    path = tmp_path / "stable.yaml"
    path.write_text(textwrap.dedent("""\
        switches: {DSV4_USE_TRITON_SPARSE: "1", DSV4_MOE_ROUTING_Q1: 1, DSV4_MOE_BACKEND: emulation}
        """) + textwrap.dedent(body) + textwrap.dedent(gates_text), encoding="utf-8")
    return path


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    from dsv4ctl.cli import main

    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exited.value.code, out, err


# ---- the file -----------------------------------------------------------------------------------------------------


def test_a_stable_file_reads_with_values_as_the_job_gets_them(tmp_path):
    stable = load_stable(stable_file(tmp_path))
    assert stable.switches == {"DSV4_USE_TRITON_SPARSE": "1", "DSV4_MOE_ROUTING_Q1": "1",
                               "DSV4_MOE_BACKEND": "emulation"}
    assert list(stable.gates) == ["numerics", "e2e", "throughput"]
    assert stable.gates["e2e"].spec == tmp_path / "g.yaml" and stable.gates["throughput"].metric == "gen_s"


@pytest.mark.parametrize(("text", "said"), [
    ("switches: {DSV4_MOE_ROUTNG_Q1: 1}", "did you mean DSV4_MOE_ROUTING_Q1?"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 2}", "is a flag: use 0 or 1"),
    ("switches: {DSV4_MOE_BACKEND: fast}", "must be one of"),
    ("switches: {}", "at least one"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\ncolour: red", "unknown key 'colour'"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\nprovenance: {DSV4_MOE_ROUTING_Q1: {runs: [a]}}", "list of run ids"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\ngates: {speed: {spec: a.yaml}}", "unknown gate 'speed'"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\ngates: {e2e: {spec: a.yaml, repeats: 8, max_failure_rate: 0.05}}",
     "give repeats >= 73"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\ngates: {e2e: {spec: a.yaml}}", "give max_failure_rate"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\ngates: {throughput: {spec: a.yaml, repeats: 3}}", ">= 6 pairs"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\ngates: {throughput: {spec: a.yaml, repeats: 3, require: not_slower}}",
     ">= 4 pairs are needed for a slowdown to be significant"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\ngates: {numerics: {spec: a.yaml, command: x}}", "not both"),
    ("switches: {DSV4_MOE_ROUTING_Q1: 1}\ngates: {throughput: {spec: a.yaml, require: luck}}", "faster, not_slower"),
    ("[1, 2]", "a stable set is a mapping"),
    ("switches: [unclosed", "stable.yaml"),
])
def test_a_bad_stable_file_is_one_line_naming_the_key(text, said):
    with pytest.raises(UsageError) as refused:
        parse_stable(text, Path("stable.yaml"))
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_no_stable_file_says_where_it_looked_and_what_to_do(tmp_path, capsys):
    code, _, err = run_cli(capsys, "stable", "--stable", tmp_path / "none.yaml")
    assert code == 2 and "no stable set here" in err and "Traceback" not in err


SWITCH_VALUES = st.sampled_from([("DSV4_MOE_ROUTING_Q1", "1"), ("DSV4_MOE_ROUTING_Q1", "0"),
                                 ("DSV4_FP8_TRITON_GEMM", "1"), ("DSV4_MOE_BACKEND", "emulation"),
                                 ("DSV4_MOE_BACKEND", "triton_w4a16"), ("DSV4_SPARSE_KERNEL", None)])
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_fuzz_any_text_is_a_stable_set_or_one_line_refusal(text):
    try:
        parse_stable(text, Path("stable.yaml"))
    except UsageError as exc:
        assert "\n" not in str(exc).strip()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=12))
def test_fuzz_any_yaml_value_under_each_key_is_refused_in_one_line_or_read(value):
    import yaml

    for key in ("switches", "provenance", "gates"):
        text = yaml.safe_dump({"switches": {"DSV4_MOE_ROUTING_Q1": 1}, key: value})
        try:
            parse_stable(text, Path("stable.yaml"))
        except UsageError as exc:
            assert "\n" not in str(exc).strip()


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["DSV4_MOE_ROUTING_Q1", "DSV4_FP8_TRITON_GEMM", "DSV4_MOE_Q1_PREPARE"]),
                       st.sampled_from(["0", "1"]), min_size=1),
       st.dictionaries(st.sampled_from(["DSV4_MOE_ROUTING_Q1", "DSV4_FP8_TRITON_GEMM"]),
                       st.fixed_dictionaries({"promotion": st.integers(1, 10**6), "note": TEXT,
                                              "runs": st.lists(st.integers(1, 10**9), max_size=5),
                                              "figures": st.dictionaries(TEXT, TEXT | st.floats(allow_nan=False),
                                                                         max_size=3)})))
def test_fuzz_what_is_written_reads_back_the_same(switches, provenance):
    base = parse_stable("switches: {DSV4_MOE_ROUTING_Q1: 1}", Path("stable.yaml"))
    kept = {k: v for k, v in provenance.items() if k in switches}
    again = parse_stable(render_stable(base, switches, kept), Path("stable.yaml"))
    assert again.switches == switches and again.provenance == kept


def test_the_file_is_written_only_if_it_did_not_change_meanwhile(tmp_path):
    path = stable_file(tmp_path)
    stable = load_stable(path)
    path.write_text(path.read_text() + "# edited by hand\n")
    with pytest.raises(StableError, match="changed while the gates ran"):
        write_stable(stable, {**stable.switches, "DSV4_MOE_Q1_PREPARE": "1"}, {})
    assert "edited by hand" in path.read_text()


# ---- the gates' decisions -----------------------------------------------------------------------------------------


def test_e2e_is_judged_by_the_wilson_upper_bound():
    assert gates.decide_e2e(0, 8, 0, 0.35)[0] == gates.PASSED  # 0/8: at most 32.4%
    assert gates.decide_e2e(1, 8, 0, 0.35)[0] == gates.FAILED  # a 1-in-8 fault: up to 47%
    assert gates.decide_e2e(2, 8, 0, 0.35)[0] == gates.FAILED
    assert gates.decide_e2e(0, 6, 2, 0.35)[0] == gates.UNDECIDED  # two lost: 0/6 bounds only 39%
    assert gates.decide_e2e(2, 4, 4, 0.35)[0] == gates.FAILED  # failing whatever the lost ones did
    assert gates.decide_e2e(0, 0, 8, 0.35)[0] == gates.UNDECIDED  # all lost
    assert gates.clean_runs_to_bound(0.05) == 73 and gates.clean_runs_to_bound(0.35) == 8


def test_a_numerics_command_decides_by_its_exit_code():
    assert [gates.decide_command(c, "x")[0] for c in (0, 1, 2, 125, 124, 137, -9)] == [
        gates.PASSED, gates.FAILED, gates.FAILED, gates.UNDECIDED, gates.UNDECIDED, gates.UNDECIDED, gates.UNDECIDED]


def test_numerics_runs_fail_on_any_failure_and_cannot_decide_on_a_lost_one():
    assert gates.decide_numerics_runs(["passed"])[0] == gates.PASSED
    assert gates.decide_numerics_runs(["passed", "failed"])[0] == gates.FAILED
    assert gates.decide_numerics_runs(["untestable"])[0] == gates.UNDECIDED


# ---- the change and the plan --------------------------------------------------------------------------------------


def test_a_change_is_switch_equals_value_checked_against_the_registry():
    assert parse_changes(["DSV4_MOE_Q1_PREPARE=1"]) == {"DSV4_MOE_Q1_PREPARE": "1"}
    for bad, said in (("DSV4_MOE_Q1_PREPAR=1", "did you mean"), ("DSV4_MOE_Q1_PREPARE", "SWITCH=VALUE"),
                      ("DSV4_MOE_Q1_PREPARE=yes", "flag")):
        with pytest.raises(UsageError, match=said):
            parse_changes([bad])


def test_promoting_what_the_stable_set_has_already_is_a_usage_error(tmp_path):
    stable = load_stable(stable_file(tmp_path))
    with pytest.raises(UsageError, match="has this already"):
        prepare(stable, "promote", {"DSV4_MOE_ROUTING_Q1": "1"})


def test_a_promotion_needs_all_three_gates(tmp_path):
    stable = load_stable(stable_file(tmp_path, gates_text="gates: {numerics: {command: 'true'}}\n"))
    with pytest.raises(UsageError, match="gates.e2e is not declared"):
        prepare(stable, "promote", {"DSV4_MOE_Q1_PREPARE": "1"})


def test_demoting_a_flag_turns_it_off_and_a_choice_goes_back_to_its_default(tmp_path):
    stable = load_stable(stable_file(tmp_path))
    assert demotion(stable, "DSV4_MOE_ROUTING_Q1") == {"DSV4_MOE_ROUTING_Q1": "0"}
    assert demotion(stable, "DSV4_MOE_BACKEND") == {"DSV4_MOE_BACKEND": None}
    with pytest.raises(UsageError, match="not in the stable set"):
        demotion(stable, "DSV4_FP8_TRITON_GEMM")


def test_dry_run_prints_the_plan_jobs_and_node_hours_and_submits_nothing(tmp_path, capsys):
    path = stable_file(tmp_path)
    code, out, _ = run_cli(capsys, "promote", "DSV4_MOE_Q1_PREPARE=1", "--dry-run", "--json", "--stable", path,
                           "--db", tmp_path / "r.db")
    plan = json.loads(out)
    assert code == 0 and [p["jobs"] for p in plan["plan"]] == [0, 8, 12]
    assert plan["plan"][2]["node_hours"] == pytest.approx(6.0)  # 12 jobs x 30 min
    assert plan["diff"] == [{"name": "DSV4_MOE_Q1_PREPARE", "before": None, "after": "1"}]
    assert not (tmp_path / "r.db").exists()


def test_promote_usage_errors_exit_2(tmp_path, capsys):
    path = stable_file(tmp_path)
    assert run_cli(capsys, "promote", "--stable", path)[0] == 2
    code, _, err = run_cli(capsys, "promote", "DSV4_MOE_Q1_PREPARE=1", "--demote", "DSV4_MOE_ROUTING_Q1",
                           "--stable", path)
    assert code == 2 and "not both" in err
    code, _, err = run_cli(capsys, "promote", "DSV4_MOE_Q1_PREPARE=1", "--stable", path, "--db", tmp_path / "r.db")
    assert code == 2 and "--yes" in err  # no terminal to confirm on


def test_stable_shows_each_switch_with_who_set_it(tmp_path, capsys):
    path = stable_file(tmp_path, body="""\
        provenance:
          DSV4_MOE_ROUTING_Q1: {promotion: 4, date: "2026-08-26", runs: [41, 42], figures: {gen_s: "101.3 -> 67.9"}}
          DSV4_USE_TRITON_SPARSE: {note: "report 0.1"}
        """)
    code, out, _ = run_cli(capsys, "stable", "--json", "--stable", path)
    rows = {r["name"]: r for r in json.loads(out)["switches"]}
    assert code == 0 and rows["DSV4_MOE_ROUTING_Q1"]["set_by"] == "promotion 4"
    assert rows["DSV4_USE_TRITON_SPARSE"]["set_by"] == "hand-written: report 0.1"
    assert rows["DSV4_MOE_BACKEND"]["set_by"] == "hand-written"


def test_stable_diff_names_what_a_spec_changes(tmp_path, capsys):
    path = stable_file(tmp_path)
    spec = tmp_path / "q1-off.yaml"
    spec.write_text(GATE_SPEC + "switches: {DSV4_MOE_ROUTING_Q1: 0, DSV4_FP8_TRITON_GEMM: 1}\n")
    code, out, _ = run_cli(capsys, "stable", "diff", spec, "--json", "--stable", path)
    changes = {c["name"]: (c["stable"], c["spec"]) for c in json.loads(out)["changes"]}
    assert code == 1 and changes == {"DSV4_MOE_ROUTING_Q1": ("1", "0"), "DSV4_FP8_TRITON_GEMM": ("0", "1")}
    same = tmp_path / "same.yaml"
    same.write_text(GATE_SPEC)
    assert run_cli(capsys, "stable", "diff", same, "--stable", path)[0] == 0


def test_the_migration_makes_the_promotion_tables(tmp_path):
    from dsv4ctl.store import open_store

    store = open_store(tmp_path / "r.db")
    assert {"promotions", "promotion_gates", "promotion_campaigns"} <= set(store.db.table_names())


def test_the_sample_stable_file_builds_a_valid_spec_for_every_gate_and_side():
    from dsv4ctl.promote.gate_runs import GateRunner

    from .conftest import FIXTURES

    stable = load_stable(FIXTURES / "promote" / "report-stable.yaml")
    prepared = prepare(stable, "promote", {"DSV4_FP8_TRITON_GEMM": "1"})
    runner = GateRunner(None, 7, prepared, None, lambda line: None)
    for name, gate in stable.gates.items():
        for side in ("base", "cand"):
            spec = runner.spec(gate, side)
            assert spec.resolved_switches()["DSV4_FP8_TRITON_GEMM"] == ("1" if side == "cand" else "0")
            assert spec.name.endswith(f".p7{name[0]}-{side}") and spec.model.moe_backend == "emulation"
    assert runner.spec(stable.gates["e2e"], "cand").batch == 8  # the gate's overrides


def test_history_without_a_database_lists_the_file_record_and_creates_nothing(tmp_path, capsys):
    path = stable_file(tmp_path, body="provenance: {DSV4_MOE_ROUTING_Q1: {note: 'off: 67.9 s -> 101.3 s'}}\n")
    code, out, _ = run_cli(capsys, "stable", "history", "--stable", path, "--db", tmp_path / "r.db")
    assert code == 0 and "DSV4_MOE_ROUTING_Q1: in the file: off: 67.9 s -> 101.3 s" in out
    assert not (tmp_path / "r.db").exists()


def test_a_promotion_report_of_an_unknown_id_is_exit_2(tmp_path, capsys):
    from dsv4ctl.store import open_store

    open_store(tmp_path / "r.db").close()
    code, _, err = run_cli(capsys, "promotion-report", "9", "--db", tmp_path / "r.db")
    assert code == 2 and "no promotion 9 (none stored in this database)" in err


def test_a_spec_that_extends_stable_starts_from_the_projects_stable_set(tmp_path, monkeypatch):
    from dsv4ctl.errors import SpecError
    from dsv4ctl.spec.load import load_spec

    monkeypatch.delenv("DSV4CTL_CONFIG", raising=False)
    monkeypatch.delenv("DSV4CTL_STABLE", raising=False)
    (tmp_path / "dsv4ctl.toml").write_text("")
    spec = tmp_path / "experiments" / "x.yaml"
    spec.parent.mkdir()
    spec.write_text("extends: stable\n" + GATE_SPEC.replace("platform: cpu", "platform: gfx936")
                    + "switches: {DSV4_FP8_TRITON_GEMM: 1}\n")
    with pytest.raises(SpecError, match="`extends: stable`, but .*stable.yaml cannot be read"):
        load_spec(spec)
    (tmp_path / "stable.yaml").write_text("switches: {DSV4_MOE_ROUTING_Q1: 0, DSV4_MOE_BACKEND: emulation}\n")
    [point] = load_spec(spec)
    assert point.spec is not None, point.findings
    switches = point.spec.resolved_switches()
    assert (switches["DSV4_MOE_ROUTING_Q1"], switches["DSV4_FP8_TRITON_GEMM"]) == ("0", "1")  # the spec's own win
    assert point.spec.model.moe_backend == "emulation"
    (tmp_path / "stable.yaml").write_text("switches: {DSV4_MOE_ROUTNG_Q1: 0}\n")
    with pytest.raises(SpecError, match="did you mean DSV4_MOE_ROUTING_Q1"):
        load_spec(spec)
