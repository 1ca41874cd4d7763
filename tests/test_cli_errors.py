"""The CLI's contract with hostile arguments: one line on stderr, exit 1 (2 for usage, 130 interrupted), a
traceback only with --debug."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from dsv4ctl.cli import main
from dsv4ctl.errors import explain

from .conftest import BASE_SPEC, EXPERIMENTS


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


def dsv4ctl(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsv4ctl.cli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


def test_validate_reports_every_file_and_fails_if_any_did(capsys, write_spec):
    good = write_spec(BASE_SPEC, "a.yaml")
    broken = write_spec("name: x\nmodel: [unclosed\n", "broken.yaml")
    nul = write_spec("name: x\x00\n", "nul.yaml")
    last = write_spec(BASE_SPEC, "c.yaml")
    code, out, err = run_main(capsys, "validate", good, broken, nul, last)
    assert code == 1
    assert f"{good}: ok" in out and f"{last}: ok" in out
    assert f"{broken}: unreadable" in out and f"{nul}: unreadable" in out
    assert f"error: {broken}:" in err and f"error: {nul}:1:" in err and "Traceback" not in err


def test_validate_json_lists_unreadable_files_too(capsys, write_spec):
    import json

    code, out, _ = run_main(capsys, "validate", "--json", write_spec("a: &a [*a]\n", "r.yaml"),
                            write_spec(BASE_SPEC, "ok.yaml"))
    entries = json.loads(out)
    assert code == 1 and [e["valid"] for e in entries] == [False, True]
    assert "recursive alias" in entries[0]["findings"][0]["message"]


@pytest.mark.parametrize("option", [("--alpha", "5"), ("--alpha", "0"), ("--alpha", "nan"), ("--factor", "-1"),
                                    ("--factor", "inf"), ("--direction", "sideways")])
def test_compare_refuses_settings_no_decision_can_use(capsys, tmp_path, option):
    code, _, err = run_main(capsys, "compare", "a", "b", "--db", tmp_path / "r.db", *option)
    assert code == 2 and f"Invalid value for '{option[0]}'" in err


def test_compare_library_refuses_them_too():
    from dsv4ctl.analysis.compare import check_settings
    from dsv4ctl.errors import UsageError

    for alpha, factor, way in ((5, 1.05, None), (0.05, -1, None), (0.05, 1.05, "sideways")):
        with pytest.raises(UsageError):
            check_settings(alpha, factor, way)


@pytest.mark.parametrize("option", [("--bos-id", "-1"), ("--max-repeat-run", "1"), ("--max-tokens", "0"),
                                    ("--requests", "0")])
def test_verdict_refuses_out_of_range_options(capsys, tmp_path, option):
    log = tmp_path / "raw.log"
    log.write_text("PY_EXIT=0\n")
    code, _, err = run_main(capsys, "verdict", "--log", log, *option)
    assert code == 2 and f"Invalid value for '{option[0]}'" in err


def test_render_to_a_missing_directory_is_one_line_naming_the_path(capsys):
    code, _, err = run_main(capsys, "render", EXPERIMENTS / "j17-baseline.yaml", "-o", "/nonexistent/x")
    assert code == 1 and "Traceback" not in err
    assert err.splitlines()[0] == "error: /nonexistent/x: no such file or directory"


def boom(*args, **kwargs):
    raise RuntimeError("boom\nsecond line")


def test_unexpected_exception_is_one_line_and_a_hint(capsys, monkeypatch, write_spec):
    monkeypatch.setattr("dsv4ctl.spec.load.check_files", boom)
    code, _, err = run_main(capsys, "validate", write_spec(BASE_SPEC))
    assert code == 1 and "Traceback" not in err
    assert err.splitlines() == ["error: unexpected RuntimeError: boom",
                                "hint: run again with --debug (or DSV4CTL_DEBUG=1) for the traceback, and report it "
                                "if it is a bug"]


@pytest.mark.parametrize("how", ["option", "env"])
def test_debug_shows_the_traceback(capsys, monkeypatch, write_spec, how):
    monkeypatch.setattr("dsv4ctl.spec.load.check_files", boom)
    monkeypatch.setattr("dsv4ctl.cli._debug", False)
    if how == "env":
        monkeypatch.setenv("DSV4CTL_DEBUG", "1")
    args = ["--debug"] if how == "option" else []
    code, _, err = run_main(capsys, *args, "validate", write_spec(BASE_SPEC))
    assert code == 1 and "Traceback" in err and "RuntimeError: boom" in err


def test_ctrl_c_exits_130_with_one_line(capsys, monkeypatch, write_spec):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("dsv4ctl.spec.load.check_files", interrupted)
    code, _, err = run_main(capsys, "validate", write_spec(BASE_SPEC))
    assert code == 130 and err.strip() == "error: interrupted"


@pytest.mark.parametrize("number, words", [(errno.ENOSPC, "no space left on the device"),
                                           (errno.EROFS, "the file system is read-only"),
                                           (errno.EACCES, "permission denied"),
                                           (errno.ENOENT, "no such file or directory")])
def test_filesystem_errors_name_the_path(number, words):
    explained = explain(OSError(number, os.strerror(number), "/runs/c/job.sh"))
    assert explained.message == f"/runs/c/job.sh: {words}" and explained.exit_code == 1 and explained.hint


def test_a_failure_through_the_real_entry_point_has_no_traceback(write_spec):
    result = dsv4ctl("validate", write_spec("a: &a [*a]\n"))
    assert result.returncode == 1 and "Traceback" not in result.stderr and "recursive alias" in result.stderr


def test_options_checks_refuse_repeats_and_campaign_names():
    import typer

    from dsv4ctl.commands.options import check_campaign, check_repeats

    for value in (-1, 0, 10**8):
        with pytest.raises(typer.BadParameter):
            check_repeats(value)
    for name in ("../x", "a/b", "-x", "a\x00b"):
        with pytest.raises(typer.BadParameter):
            check_campaign(name)
    assert check_repeats(None) is None and check_repeats(5) == 5 and check_campaign("c-1") == "c-1"


@pytest.mark.parametrize("option", [("--repeats", "-1"), ("--repeats", "0"), ("--campaign", "../x"),
                                    ("--campaign", "-x")])
def test_submit_refuses_bad_repeats_and_campaign_names(capsys, tmp_path, option):
    code, _, _ = run_main(capsys, "submit", EXPERIMENTS / "cpu-smoke.yaml", "--dry-run", "--backend", "local",
                          "--db", tmp_path / "r.db", *option)
    assert code == 2
