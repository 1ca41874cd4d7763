"""The first hour, third batch (issue 26 M4, m11): every table fits the terminal width it is given (rich's own width
arithmetic counts cell padding: an 80-column table was drawn 82 wide), wide characters counted as the two columns
they take, and `verdict` in human units while its JSON keeps the raw numbers."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from dsv4ctl.report.output import elide, elide_message, fitted_table, squeeze_widths
from dsv4ctl.units import number, quantity

from .conftest import FIXTURES

LOGS = FIXTURES / "logs"
WIDTHS = (60, 80, 100, 120)
BOX = set("┏┓┗┛┃━┳┻╋┡┩╇│─┬┴┼└┘┌┐├┤")


def dsv4(*args, columns: int = 100, wide: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("DSV4CTL_WIDE", None)
    if wide:
        env["DSV4CTL_WIDE"] = "1"
    return subprocess.run([sys.executable, "-m", "dsv4ctl.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def body_ids(lines: list[str]) -> list[str]:
    """The first cell of each line under the table's last header line (rules left out): a row folded onto a second
    line shows up as a line that does not start with a run id."""
    plain = ["".join(" " if ch in BOX else ch for ch in line) for line in lines]
    header = max(i for i, line in enumerate(plain) if line.split()[:2] == ["run", "label"])
    return [line.split()[0] for line in plain[header + 1:] if line.strip()]


def rendered(table, width: int) -> list[str]:
    """The lines a table prints on a console `width` wide that, as dsv4ctl's own (output._console), soft-wraps:
    nothing is cropped at the edge, so a line too long shows as too long (a cropping console hid issue 26 M4)."""
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None, soft_wrap=True)
    console.print(table)
    return console.file.getvalue().splitlines()


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory):
    """Real rows: an ingested run under a long experiment name and a long label of the user's, a FALSE GREEN with
    its sacct record, a degenerate run whose first blocker holds CJK text, and one run of the local backend
    (a campaign name, a local job id), the table that `submit --wait` ends with."""
    d = tmp_path_factory.mktemp("widths")
    db = d / "r.db"
    long_name = "a-very-long-experiment-name-that-would-fold-every-cell-of-the-table"
    for args in (("--log", LOGS / "J17.log", "--sacct", LOGS / "J17.sacct", "--experiment", long_name,
                  "--label", "my-own-rather-long-label-for-the-baseline-run"),
                 ("--log", LOGS / "J08.log", "--sacct", LOGS / "J08.sacct", "--experiment", "report"),
                 ("--log", LOGS / "J09.log", "--experiment", "degenerate-with-cjk-in-its-blocker")):
        done = dsv4("ingest", *args, "--db", db, "--runs-dir", d / "runs")
        assert done.returncode == 0, done.stderr
    spec = d / "tmux-wait.yaml"
    spec.write_text(f"""\
name: tmux-wait
platform: cpu
model: {{path: /models/none}}
requests:
  - messages: [{{role: user, content: hi}}]
sampling: {{max_tokens: 32}}
environment:
  python: {sys.executable}
  runtime_dir: {FIXTURES / "runtime"}
  env: {{REPLAY_LOG: {str(LOGS / "J17.log")!r}}}
""", encoding="utf-8")
    done = dsv4("submit", spec, "--backend", "local", "--wait", "--db", db, "--runs-dir", d / "runs", columns=80)
    assert done.returncode == 0, done.stderr[-600:]
    return db


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_fits_every_width_one_line_per_run(runs_db, width):
    done = dsv4("runs", "--db", runs_db, columns=width)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= width, "\n".join(lines)
    assert body_ids(lines) == ["1", "2", "3", "4"], "\n".join(lines)  # no cell folded onto a second line
    assert "…" in done.stdout  # the long names were elided, not folded


def test_submit_wait_final_table_fits_80_columns(runs_db):
    """The table `submit --wait` prints at the end (issue 26 M4: 82 wide at 80): the local run's row on one line."""
    lines = dsv4("runs", "--db", runs_db, "--campaign", "latest", columns=80).stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 80, "\n".join(lines)
    assert body_ids(lines) == ["4"], "\n".join(lines)


def test_wide_shows_every_cell_whole(runs_db):
    whole = dsv4("runs", "--db", runs_db, wide=True, columns=300).stdout
    assert "my-own-rather-long-label-for-the-baseline-run" in whole
    assert "a-very-long-experiment-name-that-would-fold-every-cell-of-the-table" in whole


WAIT_COLUMNS = ("run", "label", "job", "state", "elapsed", "verdict", "stage or first blocker")
WAIT_ROWS = [
    (1, "r1", "4711", "RUNNING", "00:00:12", "…", "generate"),
    (2, "cpu-smoke-64-20261201-1201-2116-with-a-label-of-my-own", "4712", "COMPLETED", "00:06:02", "incomplete",
     "line 40: FileNotFoundError: /models/tiny-qwen3/config.json: no such file, while loading the tokenizer"),
    (3, "r3", "4713", "FAILED", "1-01:01:01", "degenerate",
     "line 45: a run of 31 BOS tokens (id 0) after '你好你好你好你好你好你好你好你好你好你好'"),
]


@pytest.mark.parametrize("width", WIDTHS + (140,))
def test_the_live_wait_table_fits_every_width(width):
    lines = rendered(fitted_table(None, WAIT_COLUMNS, WAIT_ROWS, None, width, elisions=[None] * 6 + [elide_message]),
                     width)
    assert max(cell_len(line) for line in lines) <= width, "\n".join(lines)
    assert body_ids(lines) == ["1", "2", "3"], "\n".join(lines)
    row = next(line for line in lines if line.split()[:1] == ["2"] or line.split()[:2] == ["│", "2"])
    if width >= 80:
        assert "line 40: " in row and "tokenizer" in row, row  # both ends of the message
    if width >= 140:
        assert "line 40: FileNotFoundError: …" in row, row  # room enough: the head kept whole, the middle elided


def test_a_table_whose_minimums_do_not_fit_still_fits():
    """Ten columns at 40: below their minimums (a header then wraps), but no line past the edge."""
    columns = [f"column{i}" for i in range(10)]
    rows = [[f"value-{i}-{'x' * 20}" for i in range(10)]]
    title = "campaign rp-slow-20261202-015634-bd70: 0 resubmitted, 0 failed to submit, 1 left as they are"
    lines = rendered(fitted_table(title, columns, rows, None, 40), 40)
    assert max(cell_len(line) for line in lines) <= 40
    assert " ".join(" ".join(lines).split()).startswith(title)  # a title is a sentence: wrapped whole, not elided
    assert squeeze_widths([10, 10], [8, 8], 4) == [2, 2]
    assert squeeze_widths([3, 40, 9], [3, 6, 6], 30) == [3, 18, 9]  # as fit_widths while the minimums fit


RUN_COLUMNS = ("run", "label", "campaign", "experiment", "job", "state", "exit", "elapsed", "verdict", "first blocker")


def test_the_row_that_drew_82_columns_at_80():
    """The final table of the tmux test's `submit --wait`, as `runs` drew it 82 wide at 80 (issue 26 M4)."""
    row = (1, "r1", "tmux-wait-20261202-013828-1984", "tmux-wait", "local-20673", "COMPLETED", "0:0", "00:00:00",
           "coherent PASSED", "")
    for width in WIDTHS:
        lines = rendered(fitted_table("1 run(s)", RUN_COLUMNS, [row], None, width), width)
        assert max(cell_len(line) for line in lines) <= width, (width, lines)
        assert body_ids(lines) == ["1"], lines


CELL = st.text(st.sampled_from("abcdefghij-_:0123456789 你好…[]/"), max_size=50)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_table_fits_its_width(data):
    n = data.draw(st.integers(1, 10))
    columns = data.draw(st.lists(st.from_regex(r"[a-h]{1,6}( [a-h]{1,6})?", fullmatch=True), min_size=n, max_size=n))
    rows = data.draw(st.lists(st.lists(CELL, min_size=n, max_size=n), min_size=1, max_size=4))
    width = data.draw(st.integers(max(4 * n, 20), 160))
    lines = rendered(fitted_table(None, columns, rows, None, width), width)
    assert max(cell_len(line) for line in lines) <= width, "\n".join(lines)
    if width >= 4 * n + sum(max([len(c)] + [cell_len(row[i]) for row in rows]) for i, c in enumerate(columns)):
        assert len(lines) == len(rows) + (1 if width < 120 else 4), lines  # room for all: one line each, header too


def test_elide_counts_wide_characters_as_two_columns():
    cut = elide("你好你好你好你好", 9)
    assert cell_len(cut) <= 9 and cut.startswith("你好") and cut.endswith("你好") and "…" in cut
    assert elide("abcdef", 6) == "abcdef" and cell_len(elide("你好", 3)) <= 3
    cut = elide_message("line 45: ValueError: " + "好" * 40, 30)
    assert cut.startswith("line 45: ValueError: …") and cell_len(cut) <= 30


# ---- m11: verdict in human units, its JSON raw --------------------------------------------------------------------


def test_quantities_in_the_unit_their_name_gives():
    assert quantity("ttft_s", 0.021918058395385742) == "21.9 ms"
    assert quantity("gen_s", 21.7) == "21.70 s"
    assert quantity("engine_ready_s", 362) == "00:06:02"
    assert quantity("max_rss_kib", 1259892) == "1.2 GiB"
    assert quantity("rss_mib", 1536) == "1.5 GiB"
    assert quantity("model_load_gib", 19.99) == "19.99 GiB"
    assert quantity("p95_ttft_ms", 41.27) == "41.3 ms" and quantity("e2el_ms", 1500.0) == "1.50 s"
    assert quantity("tokens_per_s", 1.4712) == "1.47 tok/s"
    assert quantity("kv_cache_tokens", 85259) == "85259" and quantity("output_tokens", 32) == "32"
    assert quantity("duration", 8.04564) == "8.05 s"
    assert quantity("expert_dtype", "fp4") == "fp4" and quantity("x_s", float("nan")) == "nan"
    assert number(8.04564) == "8.05" and number(1234.5) == "1234" and number(0.0) == "0"


def test_verdict_prints_human_units_and_its_json_keeps_the_raw_numbers():
    text = dsv4("verdict", "--log", LOGS / "J17.log").stdout
    assert "engine ready: 00:03:49" in text and "228.9 s" not in text  # ENGINE_READY in 228.9 s
    evidence = next(line for line in text.splitlines() if line.startswith("evidence: "))
    assert "model_load_gib=19.99 GiB" in evidence and "gen_s=21.70 s" in evidence and "ttft_s=3.90 s" in evidence
    assert "tokens_per_s=1.47 tok/s" in evidence and "kv_cache_tokens=85259" in evidence
    raw = json.loads(dsv4("verdict", "--log", LOGS / "J17.log", "--json").stdout)
    assert raw["engine_ready_s"] == 228.9 and raw["metrics"]["ttft_s"] == 3.9 and raw["metrics"]["gen_s"] == 21.7
    assert raw["evidence"]["model_load_gib"] == 19.99


def test_verdict_without_an_engine_ready_line_says_dash_not_dash_seconds():
    text = dsv4("verdict", "--log", LOGS / "cut-mid-load.log").stdout
    assert "engine ready: -" in text and "- s" not in text


def test_metrics_of_show_in_human_units(capsys):
    from dsv4ctl.report.verdict_view import show_metrics

    show_metrics({"ttft_s": 0.021918058395385742, "duration": 8.04564, "output_tokens": 32})
    out = capsys.readouterr().out
    assert "ttft_s=21.9 ms" in out and "duration=8.05 s" in out and "output_tokens=32" in out
    assert "0.0219180" not in out
