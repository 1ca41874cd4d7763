"""Outputs printed over several lines or under a label by people's own scripts (issue 21, pass 5): an indented
OpenAI body, a token-id list or tensor wrapped over rows, the openai client's objects, `Output: ...` lines under a
logger's head; a request's user message is never the answer, and a label is read only in a log with no marker."""

from __future__ import annotations

from dsv4ctl.judge.printed import LabelledLines
from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes


def verdict_of(text: str):
    return judge(parse_bytes(text.encode()))


def test_an_indented_body_is_read_but_not_a_users_message():
    body = '{\n  "choices": [\n    {\n      "message": {\n        "role": "assistant",\n' \
           '        "content": "%s"\n      }\n    }\n  ]\n}\n'
    assert verdict_of(body % ("~" * 60)).status == "degenerate"
    assert verdict_of(body % "The capital of France is Paris.").status == "coherent"
    request = '{\n  "messages": [\n    {\n      "role": "user",\n      "content": "%s"\n    }\n  ]\n}\n' % ("!" * 40)
    v = verdict_of(request)
    assert v.requests == [] and v.status == "incomplete"


def test_a_wrapped_id_list_is_joined_and_a_cut_one_is_judged_as_far_as_it_goes():
    rows = "[7, 7, 7, 7, 7, 7, 7, 7,\n 7, 7, 7, 7, 7, 7, 7, 7,\n 7, 7, 7, 7, 7, 7, 7, 7]\n"
    v = verdict_of(rows)
    assert v.status == "degenerate" and v.requests[0].n_tokens == 24
    cut = verdict_of("tensor([[5, 5, 5, 5, 5, 5, 5, 5,\n         5, 5, 5, 5, 5, 5, 5, 5,\n")
    assert cut.status == "degenerate" and cut.requests[0].n_tokens == 16
    varied = verdict_of("[11, 52, 903, 17, 4, 88, 1203, 9,\n 61, 70, 2, 3301, 45, 8, 19, 27]\n")
    assert varied.status == "coherent"


def test_the_openai_clients_objects_are_read():
    chat = ("ChatCompletion(id='c1', choices=[Choice(finish_reason='stop', index=0, logprobs=None, message="
            "ChatCompletionMessage(content='%s', role='assistant', tool_calls=None))], model='m')\n")
    assert verdict_of(chat % ("?" * 50)).status == "degenerate"
    assert verdict_of(chat % "Two plus two is four.").status == "coherent"


def test_a_labelled_answer_under_a_logger_head():
    v = verdict_of("2025-01-01 10:00:05,123 - app - INFO - Response: tok tok tok tok tok tok tok tok tok tok tok\n")
    assert v.status == "degenerate" and v.first_blocker.line == 1
    ok = verdict_of("INFO 01-01 10:00:00 demo.py:12] Answer: The sky looks blue because air scatters blue light.\n")
    assert ok.status == "coherent" and ok.requests[0].source == "labelled_text"


def test_labels_that_hold_no_answer_are_not_outputs():
    labelled = LabelledLines()
    for line in ("Output: /tmp/run-3/out.json", "Response: None", "Output: 200", "output_dir=/tmp/x",
                 "Response: <Response [200]>", "Output: s3://bucket/key", "    Output: indented code"):
        assert not labelled.add(1, line), line
    assert labelled.add(1, "Chat response: 你好，我是一个助手。")


def test_a_label_is_not_read_in_a_log_with_the_probes_markers():
    v = verdict_of("PY_EXIT=0\nOutput: tok tok tok tok tok tok tok tok tok tok tok tok\n")
    assert all(r.source != "labelled_text" for r in v.requests)


def test_a_degenerate_plain_block_wins_over_a_fluent_label():
    v = verdict_of("Response: Here is the story you asked for.\nAnd fear fear fear fear fear fear fear fear fear fear\n")
    assert v.status == "degenerate"


def test_rows_of_numbers_with_a_nan_column_are_nonfinite_and_a_few_are_not():
    rows = "".join(f"ref: -{i}.5{i}1 fused: nan eager: -{i}.5{i}1 tok={'x' * i}\n" for i in range(1, 7))
    v = verdict_of(rows)
    assert v.status == "nonfinite" and v.first_blocker.line == 1
    bench = "Mean TTFT (ms): 12.50\nMean TPOT (ms): nan\nMedian TPOT (ms): nan\nP99 ITL (ms): 3.25\n"
    assert verdict_of(bench).status != "nonfinite"
    assert [e.kind for e in parse_bytes(rows.encode()).nonfinite] == ["printed_nan"]
    assert parse_bytes((rows + "PY_EXIT=0\n").encode()).nonfinite == []  # the probe's own log: its rules judge it
