"""The sacct parser on literal text, as sacct really prints it (shared/notes/slurm.md) and as the report shows it."""

from __future__ import annotations

import pytest

from dsv4ctl.judge.states import is_final, normalise
from dsv4ctl.judge.sacct import FINAL_STATES, SacctParseError, parse_elapsed, parse_rss, parse_sacct, summarise

LIVE = """\
1|a_echo|COMPLETED|0:0|00:00:00||2026-11-29T15:02:38|2026-11-29T15:02:38|vm
1.batch|batch|COMPLETED|0:0|00:00:00|1080K|2026-11-29T15:02:38|2026-11-29T15:02:38|vm
3|b_exit3|FAILED|3:0|00:00:00||2026-11-29T15:02:40|2026-11-29T15:02:40|vm
10|c_cancel|CANCELLED by 0|0:0|00:00:02||2026-11-29T15:03:00|2026-11-29T15:03:02|vm
10.batch|batch|CANCELLED|0:15|00:00:03|3192K|2026-11-29T15:03:00|2026-11-29T15:03:03|vm
6|d_timeout|TIMEOUT|0:0|00:01:17||2026-11-29T15:04:00|2026-11-29T15:05:17|vm
6.batch|batch|CANCELLED|0:15|00:01:18|4776K|2026-11-29T15:04:00|2026-11-29T15:05:18|vm
7_0|f_array|COMPLETED|0:0|00:00:02||2026-11-29T15:06:00|2026-11-29T15:06:02|vm
7_1|f_array|COMPLETED|0:0|00:00:02||2026-11-29T15:06:00|2026-11-29T15:06:02|vm
14|oom|OUT_OF_MEMORY|0:125|00:00:31||2026-11-29T15:07:00|2026-11-29T15:07:31|vm
14.batch|batch|OUT_OF_MEMORY|0:125|00:00:31|599M|2026-11-29T15:07:00|2026-11-29T15:07:31|vm
"""

REPORT = """\
JobID|State|ExitCode|Elapsed|MaxRSS
J17|COMPLETED|0:0|00:05:15|
J17.batch|COMPLETED|0:0|00:05:15|65899600K
J17.extern|COMPLETED|0:0|00:05:15|0
"""


def test_headerless_default_columns():
    records = parse_sacct(LIVE)
    assert len(records) == 11
    first = records[0]
    assert (first.job_id, first.step, first.job_name, first.state, first.exit_code, first.signal) == \
        ("1", None, "a_echo", "COMPLETED", 0, 0)
    assert records[1].step == "batch" and records[1].max_rss_kib == 1080


def test_cancelled_by_keeps_state_and_detail():
    cancel = summarise(parse_sacct(LIVE), "10")
    assert cancel.state == "CANCELLED" and cancel.state_detail == "by 0"
    assert cancel.steps[0].signal == 15 and not cancel.completed_ok


def test_exit_code_and_signal_are_both_kept():
    failed = summarise(parse_sacct(LIVE), "3")
    assert (failed.exit_code, failed.signal) == (3, 0)
    oom = summarise(parse_sacct(LIVE), "14")
    assert (oom.state, oom.exit_code, oom.signal, oom.max_rss_kib) == ("OUT_OF_MEMORY", 0, 125, 599 * 1024)


def test_array_tasks():
    records = parse_sacct(LIVE)
    tasks = [r for r in records if r.job_id == "7"]
    assert [r.array_task for r in tasks] == ["0", "1"]
    assert summarise(records, "7", "1").job_id == "7_1"
    pending = parse_sacct("20956421_[2-4%25]|arr|PENDING|0:0|00:00:00||Unknown|Unknown|None assigned\n")[0]
    assert pending.array_task == "2-4%25" and pending.state == "PENDING" and not pending.is_final


def test_report_format_with_header():
    summary = summarise(parse_sacct(REPORT), "J17")
    assert summary.completed_ok and summary.elapsed_s == 315 and summary.max_rss_kib == 65899600
    assert {s.step for s in summary.steps} == {"batch", "extern"}


def test_any_column_order_with_a_header():
    text = "State|ExitCode|JobID|MaxRSS\nFAILED|2:0|J08|\nFAILED|2:0|J08.batch|1.5G\n"
    summary = summarise(parse_sacct(text), "J08")
    assert (summary.state, summary.exit_code, summary.max_rss_kib) == ("FAILED", 2, 1572864)


def test_parsable_with_trailing_bar_and_crlf():
    text = "JobID|State|ExitCode|\r\n5|COMPLETED|0:0|\r\n"
    assert summarise(parse_sacct(text), "5").completed_ok


def test_completed_with_a_failed_step_is_not_ok():
    text = "JobID|State|ExitCode\n9|COMPLETED|0:0\n9.batch|FAILED|1:0\n"
    assert not summarise(parse_sacct(text), "9").completed_ok


def test_garbage_is_refused_with_a_reason():
    with pytest.raises(SacctParseError, match="fields"):
        parse_sacct("JobID|State\n1|COMPLETED|extra\n")
    with pytest.raises(SacctParseError, match="JobID"):
        parse_sacct("Foo|State\nx|y\n", columns=("Foo", "State"))


@pytest.mark.parametrize("text, seconds", [("00:05:15", 315), ("1-02:00:00", 93600), ("05:15", 315),
                                           ("00:01.500", 1), ("", None), ("INVALID", None)])
def test_elapsed(text, seconds):
    assert parse_elapsed(text) == seconds


@pytest.mark.parametrize("text, kib", [("65899600K", 65899600), ("599M", 613376), ("2G", 2097152),
                                       ("0", 0), ("", None)])
def test_rss(text, kib):
    assert parse_rss(text) == kib


def test_state_sets_are_explicit():
    assert {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "DEADLINE",
            "BOOT_FAIL", "PREEMPTED", "REVOKED"} == FINAL_STATES


@pytest.mark.parametrize("word", ["STOPPED", "REQUEUE_HOLD", "SPECIAL_EXIT", "SIGNALING", "SUSPENDED", "RESV_DEL_HOLD",
                                  "REQUEUE_FED", "STAGE_OUT", "PENDING", "SOMETHING_NEW_IN_SLURM_25"])
def test_every_non_final_state_is_followed(word):
    from dsv4ctl.judge.states import is_waiting
    assert is_waiting(word) and not is_final(word)


def test_state_words_are_normalised():
    assert [normalise(w) for w in ("CANCELLED by 0", "cd", "ST", "", "RUNNING+")] == \
        ["CANCELLED", "COMPLETED", "STOPPED", "UNKNOWN", "RUNNING"]
