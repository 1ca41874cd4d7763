"""Hostile spec files: each is refused in one line naming the file and line, quickly, without running out of memory."""

from __future__ import annotations

import time

import pytest

from dsv4ctl import limits
from dsv4ctl.errors import SpecError, UsageError
from dsv4ctl.names import NameRefused, check_campaign_name
from dsv4ctl.spec.load import load_spec

from .conftest import BASE_SPEC

BILLION_LAUGHS = "\n".join(
    [f'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]) + "\n"


def refusal(write_spec, text: str) -> str:
    path = write_spec(text)
    started = time.monotonic()
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert message.startswith(f"{path}:") and "\n" not in message
    return message


def test_billion_laughs_is_refused_within_the_alias_budget(write_spec):
    assert len(BILLION_LAUGHS) < 700
    message = refusal(write_spec, BILLION_LAUGHS)
    assert f"more than {limits.MAX_ALIAS_NODES} nodes" in message


def test_recursive_alias_is_refused(write_spec):
    assert "recursive alias" in refusal(write_spec, "name: t\na: &a [*a]\n")


def test_deep_nesting_is_refused_before_python_runs_out_of_stack(write_spec):
    message = refusal(write_spec, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert f"nested deeper than {limits.MAX_YAML_DEPTH} levels" in message


def test_aliases_cannot_nest_deeper_than_the_limit_either(write_spec):
    chain = ["x0: &x0 [1]"] + [f"x{i}: &x{i} [*x{i - 1}]" for i in range(1, 80)]
    assert "nested deeper" in refusal(write_spec, "\n".join(chain) + "\n")


def test_nul_byte_names_its_line_and_column(write_spec):
    message = refusal(write_spec, "name: t\nmodel: x\x00y\n")
    assert ":2:9:" in message and "#x0000" in message


def test_complex_mapping_key_is_refused(write_spec):
    assert "a key must be a plain name, not a list" in refusal(write_spec, "? [a, b]\n: 1\n")


@pytest.mark.parametrize("value, reason", [("2001-13-45", "month must be in 1..12"), ("1" * 5000, "4300 digits")])
def test_scalars_python_cannot_build_are_refused(write_spec, value, reason):
    message = refusal(write_spec, f"name: t\nrepeats: {value}\n")
    assert ":2:10: cannot read the value" in message and reason in message


def test_spec_larger_than_the_limit_is_not_read(write_spec, monkeypatch):
    monkeypatch.setattr("dsv4ctl.spec.load.MAX_SPEC_BYTES", 1000)
    assert "larger than" in refusal(write_spec, BASE_SPEC + "#" * 2000 + "\n")


def errors_of(write_spec, extra: str = "", replace: tuple[str, str] = ("", "")) -> list[str]:
    text = BASE_SPEC.replace(*replace) + extra
    return [str(f) for point in load_spec(write_spec(text)) for f in point.errors]


@pytest.mark.parametrize("extra, expected", [
    ("repeats: 100000000\n", f"repeats: 100000000 is above the maximum {limits.MAX_REPEATS}"),
    ("batch: 1000000000000\n", f"batch: 1000000000000 is above the maximum {limits.MAX_BATCH}"),
    ("batch: 1.0e+12\n", "batch: expected a whole number, got 1000000000000.0"),
    ("repeats: '3'\n", "repeats: expected a whole number, got '3'"),
    ("repeats: 0\n", "repeats: 0 is below the minimum 1"),
    ("throughput: {iterations: 99999999, warmup: 99999999}\n", "throughput.iterations: 99999999 is above the maximum"),
])
def test_numbers_past_their_maximum_are_named_with_the_bound(write_spec, extra, expected):
    assert any(expected in e for e in errors_of(write_spec, extra))


@pytest.mark.parametrize("replace, expected", [
    (("path: /models/m", "path: /m\n  max_model_len: 99999999999"), "model.max_model_len: 99999999999 is above"),
    (('gres: "dcu:8"', 'gres: "dcu:8"\n  nodes: 100000'), "slurm.nodes: 100000 is above the maximum"),
    (("max_tokens: 32", "max_tokens: 99999999999"), "sampling.max_tokens: 99999999999 is above the maximum"),
    (("tp: 8", "tp: 65"), "parallel.tp: 65 is above the maximum 64"),
])
def test_nested_numbers_past_their_maximum_are_named_with_the_bound(write_spec, replace, expected):
    assert any(expected in e for e in errors_of(write_spec, replace=replace))


def test_infinity_and_nan_are_refused(write_spec):
    errors = errors_of(write_spec, replace=("path: /models/m", "path: /m\n  gpu_memory_utilization: .nan"))
    assert any("gpu_memory_utilization: expected a finite number" in e for e in errors)


def test_matrix_is_counted_before_a_point_is_built(write_spec, monkeypatch):
    def never(matrix):
        raise AssertionError("the matrix was expanded")

    monkeypatch.setattr("dsv4ctl.spec.load.matrix_points", never)
    axes = "\n".join(f"  a{i}: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" for i in range(12))
    errors = errors_of(write_spec, f"matrix:\n{axes}\n")
    assert any(f"matrix: {10 ** 12} points is above the maximum {limits.MAX_MATRIX_POINTS}" in e for e in errors)


def test_points_times_repeats_are_bounded(write_spec):
    errors = errors_of(write_spec, "repeats: 10000\nmatrix:\n  batch: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n")
    assert any(f"110000 runs, above the maximum {limits.MAX_RUNS_PER_SPEC}" in e for e in errors)


def test_nul_in_an_env_value_is_refused_at_validation(write_spec):
    errors = errors_of(write_spec, 'environment:\n  env: {FOO: "a\\0b"}\n')
    assert any("environment.env.FOO" in e and "NUL" in e for e in errors)


def test_nul_in_a_relative_path_is_a_finding_not_a_crash(write_spec):
    text = BASE_SPEC.replace("path: /models/m", 'path: "./m\\0"')
    errors = [str(f) for p in load_spec(write_spec(text)) for f in p.errors]
    assert any("model.path" in e and "NUL" in e for e in errors)


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "-rf", "a\x00b", "a\nb", "", "x" * 200, "a b"])
def test_campaign_names_that_could_escape_or_mislead_are_refused(name):
    with pytest.raises(NameRefused) as err:
        check_campaign_name(name)
    assert isinstance(err.value, UsageError) and err.value.exit_code == 2 and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["j17-baseline-20261129-162253-cdc9", "suite-regression-cpu-1", "a.b_c+d=e,f@g"])
def test_ordinary_campaign_names_are_accepted(name):
    assert check_campaign_name(name) == name


def test_markdown_report_escapes_html_from_data():
    from dsv4ctl.report.campaign import ReportData, render_markdown
    from dsv4ctl.campaign.sweep import PointRate, SweepSummary

    evil = "<img src=x onerror=alert(1)>"
    point = PointRate(evil, {}, f"{evil}.batch=8", 1, 1, 1, 1.0, (0.2, 1.0))
    data = ReportData({"name": f"c{evil}", "backend": "local"},
                      [{"run": 1, "experiment": evil, "job": "-", "state": "FAILED", "exit": "1:0", "elapsed": "-",
                        "verdict": "crash", "passed": False, "false_green": False, "blocker": f"line 3: {evil} | x"}],
                      SweepSummary("c", [point], point, None, 0), "gen_s", [])
    text = render_markdown(data)
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text and "\\| x" in text


# ---- issue 29 S34, issue 26 m3: a matrix point's error is located at the matrix value, and said once --------------


def test_an_unknown_matrix_axis_is_located_at_the_axis_in_the_users_file_once(tmp_path, capsys):
    from dsv4ctl.cli import main

    from .conftest import EXPERIMENTS

    mx = tmp_path / "mx.yaml"
    mx.write_text(f"extends: {EXPERIMENTS / 'cpu-smoke.yaml'}\nmatrix:\n  sampling.max_tokn: [16, 32]\n",
                  encoding="utf-8")
    points = load_spec(mx)
    for point in points:
        [error] = point.errors
        assert str(error).startswith(f"{mx}:3:3: error: matrix.sampling.max_tokn: unknown key"), str(error)
    with pytest.raises(SystemExit):
        main(["validate", str(mx)])
    printed = capsys.readouterr().out
    assert printed.count("unknown key") == 1 and "cpu-smoke.yaml" not in printed
    with pytest.raises(SystemExit):
        main(["sweep", str(mx), "--backend", "local", "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert err.count("unknown key") == 1 and "1 error(s) in the spec" in err, err


def test_matrix_values_that_break_a_rule_are_located_at_each_value(tmp_path):
    from .conftest import EXPERIMENTS

    spec = tmp_path / "h-sweepbad.yaml"
    spec.write_text(f"extends: {EXPERIMENTS / 'cpu-serve.yaml'}\nname: h-sweepbad\nmatrix:\n"
                    "  load.request_rate: [0, -1, .nan, inf]\n", encoding="utf-8")
    zero, negative, nan, inf = load_spec(spec)
    assert inf.spec is not None and not inf.errors
    for point, column in ((zero, 23), (negative, 26), (nan, 30)):
        [error] = point.errors
        assert (error.location.file, error.location.line, error.location.column) == (str(spec), 4, column)
        assert error.path == "load.request_rate", error
    assert nan.errors[0].message == "expected a finite number, got nan (or 'inf')"  # one finding, not per type


def test_a_field_written_in_the_users_file_is_still_located_there(write_spec):
    [point] = load_spec(write_spec(BASE_SPEC.replace("max_tokens: 32", "max_tokens: 0")))
    [error] = point.errors
    assert error.path == "sampling.max_tokens" and error.location.line == BASE_SPEC.count("\n", 0,
                                                                                         BASE_SPEC.index("max_tokens")) + 1
