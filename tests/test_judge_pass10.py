"""Shapes of the tenth pass (issue 21): tuned on a second fresh tuning harvest (benchmarks/corpus/tuning5-manifest.json)
and on the four answers of coherent3 it wrongly flagged (coherent3 is spent by that and said so), measured on
heldout3 (frozen). Every log here is written for the test with made-up values."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes
from dsv4ctl.judge.textrules import text_problems


def verdict_of(text: str):
    return judge(parse_bytes(text.encode()))


def sse(delta: dict) -> str:
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}) + "\n"


def test_streamed_reasoning_given_as_an_object_is_what_was_said():
    log = sse({"role": "assistant", "content": ""}) + "".join(
        sse({"reasoning_content": {"text": piece}}) for piece in ("The product of 12 and 11 ", "is 132, since ",
                                                                  "12 times 10 is 120 and 12 more makes 132."))
    assert verdict_of(log + "data: [DONE]\n").status == "coherent"


def test_a_stream_of_whole_message_pieces_is_joined():
    pieces = ["Bonjour, ", "je suis un assistant ", "qui répond en français."]
    log = "".join("data:" + json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": p}}]})
                  + "\n" for p in pieces)
    assert verdict_of(log).status == "coherent"


def test_letters_spelled_out_are_not_token_soup():
    text = ("Let me spell it: B, A, N, A, N, A. So the word banana has three A's and two N's, and the letter B once. "
            "Spelled again: B-A-N-A-N-A. The answer is three, because A appears at positions two, four and six.")
    assert text_problems(text, 16) == []


def test_sse_chunks_of_another_shape_are_log_lines_not_prose():
    log = "".join('data: {"id":"m-1","message_type":"reasoning_message","reasoning":"%s"}\n\n' % w
                  for w in ("The", " user", " wants", " a", " list", " of", " ten", " items", " in", " it"))
    assert verdict_of(log).status == "incomplete"


def test_an_exception_named_in_a_docstring_is_no_crash():
    log = ("class Queue:\n    def pop(self):\n        \"\"\"Take the first item.\n\n        Raises:\n"
           "            IndexError: If the queue is empty.\n        \"\"\"\n        return self.items.pop(0)\n")
    assert verdict_of(log).status == "incomplete"


def test_loguru_records_of_errors_keep_their_level():
    lines = [f"2026-04-0{i % 9 + 1} 10:00:0{i}.100 | ERROR    | app.client:call:{40 + i} - Upstream API error: "
             "Service Unavailable" for i in range(7)]
    v = verdict_of("2026-04-01 09:59:59.000 | INFO     | app.main:run:10 - starting\n" + "\n".join(lines) + "\n")
    assert v.status == "crashed" and "Upstream API error" in v.first_blocker.message


def test_a_device_assert_said_by_every_thread_is_a_device_error():
    line = ("/src/aten/native/cuda/Index.cu:92: gather_kernel: block: [3,0,0], thread: [{0},0,0] "
            "Assertion `idx < size` failed.\n")
    v = verdict_of("".join(line.format(i) for i in range(8)))
    assert v.status == "device_error" and "Assertion `idx < size` failed" in v.first_blocker.message


@pytest.mark.parametrize("log, family", [
    ("Mar 02 10:00:00 box systemd[1]: llm.service: Main process exited, code=dumped, status=11/SEGV\n", "signal"),
    ("Job entrypoint command failed with exit code -11, last available logs:\n", "signal"),
    ("  exitcode  : -6 (pid: 77)\n  traceback : Signal 6 (SIGABRT) received by PID 77\n", "signal"),
    ("Mar 02 10:00:00 box llmd[41]: Error: could not open model file /models/x.gguf: no such file\n", "worker_death"),
    ("llama_model_load: error loading model: unknown model architecture: 'newarch'\n", "config"),
    ("time=2026-01-01T00:00:00Z level=INFO msg=\"load failed\" error=\"llama runner process has terminated: signal: "
     "aborted\"\n", "worker_death"),
    ("NAME                      READY   STATUS             RESTARTS   AGE\nllm-7d9f-x2x   0/1     CrashLoopBackOff   "
     "6 (20s ago)   4m\n", "worker_death"),
    ("llm-7d9f-x2x   0/1     OOMKilled   2 (5s ago)   1m\n", "oom"),
    ("2026-01-01 00:00:00.1: W tensorflow/core/framework/op_kernel.cc:1800] OP_REQUIRES failed at matmul_op.cc:40 : "
     "Internal: blas launch failed\n", "python"),
])
def test_deaths_as_supervisors_and_runtimes_report_them(log, family):
    v = verdict_of(log)
    assert v.status == "crashed" and v.first_blocker.family == family


@pytest.mark.parametrize("log", [
    "[   71.5] habanalabs hl3: Failed to communicate with device CPU (timeout)\n",
    "failed assertion `[MPSNDArray initWithDevice:descriptor:] Error: buffer is too large'\n",
])
def test_other_accelerators_faults(log):
    assert verdict_of(log).status == "device_error"


def test_a_tensorrt_error_record():
    v = verdict_of("[03/01/2026-10:00:00] [TRT] [E] 2: [builder.cpp::build::55] Error Code 2: Internal Error (no "
                   "tactic found for node gemm_0)\n")
    assert v.status == "crashed" and "no tactic found" in v.first_blocker.message


def test_a_wrapped_tensor_of_ids_is_one_output():
    log = "out_ids tensor([[7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,\n" + "         7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,\n" * 4
    v = verdict_of(log)
    assert v.status == "degenerate" and v.first_blocker.line == 1


def test_metrics_lines_gone_nan_and_lmdeploy_responses():
    assert verdict_of("step:3 - actor/pg_loss:0.12 - critic/vf_loss:nan - critic/kl:0.0\n").status == "nonfinite"
    assert verdict_of("step:3 - actor/pg_loss:0.12 - critic/vf_loss:0.4 - critic/kl:0.0\n").status == "incomplete"
    v = verdict_of("[Response(text='" + "la la la la " * 20 + "', generate_token_len=80, finish_reason='length')]\n")
    assert v.status == "degenerate"
    ok = verdict_of("[Response(text='Hello! I am an assistant. How can I help you today?', generate_token_len=14, "
                    "finish_reason='stop')]\n")
    assert ok.status == "coherent"


def test_reserved_tokens_making_up_the_answer():
    text = "<unk><unused4><unused11><bos><unused4><mask><unk><unused9><unused2><unused11><unk><unused7><unused1>"
    assert any("special tokens" in p for p in text_problems(text, 16))


# Pass 11, from coherent4's five flags (coherent4 spent by it): written here with made-up answers.

def test_translations_one_language_a_line_are_not_token_soup():
    text = ("English: Good morning, friends.\nРусский: Доброе утро, друзья.\n日本語: おはようございます、皆さん。\n"
            "हिन्दी: सुप्रभात, दोस्तों।")
    assert text_problems(text, 16) == []
    assert any("scripts" in p for p in text_problems("Goodдоброеおはよう नमस्ते mixed", 16))


def test_a_banner_or_rule_line_after_an_answer_is_not_a_run():
    answer = "The meeting is moved to Thursday at ten, in room four, with the same agenda as before."
    assert text_problems(answer + "\n" + "*" * 20 + "NEXT" + "*" * 20, 16) == []
    assert text_problems(answer + "\n" + "=" * 40, 16) == []


def test_a_list_of_names_is_not_word_salad():
    names = ("Alberta, British Columbia, Manitoba, New Brunswick, Newfoundland, Labrador, Nova Scotia, Ontario, "
             "Prince Edward Island, Quebec, Saskatchewan, Yukon, Nunavut")
    assert text_problems(names, 16) == []


def test_a_rule_line_is_not_the_rest_of_a_wrapped_line():
    para = "Role: planner. Description: " + "plans the week's deliveries and checks each route twice " * 2
    rows = [para.strip()[:120], "-" * 50] * 4
    v = verdict_of("\n".join(rows) + "\n")
    assert v.status != "degenerate"
