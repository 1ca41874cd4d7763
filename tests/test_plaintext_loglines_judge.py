"""The plain-text rule knows a log's lines from a model's words (issue 21, fourth pass): bare lines that read as a
log's (timestamps, ids, commands, tables, markers) are never judged as an answer, and a bare line naming a failure
no rule knows keeps the whole log from being judged as one. Literal text in our own words."""

from __future__ import annotations

import pytest

from dsv4ctl.judge.plaintext import PlainBlocks, log_line
from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes


def verdict(text: str):
    return judge(parse_bytes(text.encode("utf-8")))


@pytest.mark.parametrize("line", [
    "Apr 02 11:20:33 host svc[991]: unit stopped",
    "3c9d0e4f1a2b: Pull complete",
    "  frame at 0x7f3a2c10 in libshim.so",
    "see loader.py:88 for details",
    "tool run /data/m --port 80 --dtype half",
    "$ ./chat -m tiny",
    "+ /usr/bin/git status",
    "user@box:~/work$ ls",
    "mode=fast retries=3 backoff=2",
    "CPU(s):                64",
    "\tactor_id: 9f8e7d6c5b4a39281706f5e4",
    "             ^^^^^^^^^^^^^^",
    "==================== 2 passed in 4.10s ====================",
    '{"ts":1700000000,"level":"INFO","msg":"ready"}',
    "listening on 10.1.2.3",
])
def test_a_log_line_is_known(line):
    assert log_line(line)


@pytest.mark.parametrize("line", [
    "The capital of Peru is Lima, founded in 1535.",
    "Note: the answer is 4, since 2 + 2 = 4.",
    "1. Preheat the oven to 180 degrees.",
    "Hello! How can I help you today?",
    "这是一个关于天空颜色的回答。",
])
def test_a_model_sentence_is_not_a_log_line(line):
    assert not log_line(line)


def test_a_failure_in_unknown_words_among_bare_lines_is_not_an_answer():
    log = ("$ run-job --n 4 --seed 7\n"
           "the shim reported an unexpected failure, code 42\n"
           "    out = step_function(x)\n"
           "          ^^^^^^^^^^^^^^^^\n")
    v = verdict(log)  # the markers' run to the end was called a degenerate answer
    assert v.status == "incomplete" and v.first_blocker is None


def test_a_command_and_its_aligned_table_are_not_word_salad():
    log = ("serve-model /models/tiny-7b --port 9000 --max-len 4096 --dtype half --tp 1 --seed 3 --name tiny "
           "--cache /tmp/c --quant none --kv auto --host any\n"
           "Architecture:          x86_64\nModel name:            Example CPU 9000\n")
    assert verdict(log).status == "incomplete"


def test_a_degenerate_answer_after_a_command_line_is_still_judged():
    v = verdict("$ ./gen --n 8 --seed 1\nOnce there was a cat cat cat cat cat cat cat cat cat cat cat cat\n")
    assert v.status == "degenerate" and v.first_blocker.line == 2


def test_log_lines_end_a_block():
    blocks = PlainBlocks()
    for n, line in enumerate(["some words of a first answer here", "2025-01-01 10:00:00 tick",
                              "and the words of a second answer"], start=1):
        blocks.add(n, line)
    blocks.end()
    assert [b.line for b in blocks.blocks] == [1, 3] and not blocks.names_error


def test_dashed_banners_and_comma_separated_metrics_are_log_lines():
    from dsv4ctl.judge.plaintext import log_line

    assert log_line("----------------End-to-End Latency----------------")
    assert log_line("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, "
                    "Pending: 0 reqs, GPU KV cache usage: 0.0%")
    assert not log_line("The answer is: 42, and the second one is: 7, as the table shows.")


def test_a_blocker_quotes_an_apostrophe_beside_json_as_printed():
    from dsv4ctl.judge.values import quoted

    assert quoted("I'll output {\"a\": 1}") == "'I'll output {\"a\": 1}'"
    assert quoted("it's") == '"it\'s"' and quoted("plain") == "'plain'"
