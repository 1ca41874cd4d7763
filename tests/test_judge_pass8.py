"""Shapes of the eighth pass (issue 21, tuned on the first held-out set, spent by it): answers printed as Python
dicts and as SGLang/TGI/transformers bodies, NaN log-probs in tensor lists, ids without brackets, the amdgpu
driver's page faults, a shell's word for a signal, a logger record above a headless traceback, a chat template
echoed round again, a reasoning tag said over and over, a loop inside the quotes it was printed in. Every log
here is written for the test (its values are made up); the shapes are those of the threads in
benchmarks/corpus/manifest.json that the cases h006, h013, h020, h032, h060, h076, h082, h093, h096, h123, h127,
h132, h142 name."""

from __future__ import annotations

import pytest

from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes
from dsv4ctl.judge.textrules import text_problems


def verdict_of(text: str):
    return judge(parse_bytes(text.encode()))


SOUP = "ฟ้าสวย\")).knotwork Halifax’app stem漂亮以及很多的ting� ))\\n\\n-tariff Ruby Jwt一时的ของ"


def test_a_chat_completion_printed_as_a_python_dict_is_read():
    good = ("{'id': 'chatcmpl-5d1', 'object': 'chat.completion', 'created': 1700000001, 'model': 'm', 'choices': "
            "[{'index': 0, 'message': {'role': 'assistant', 'content': 'Water boils at 100 degrees Celsius at sea "
            "level, and at a lower temperature on a mountain.'}, 'finish_reason': 'stop'}]}\n")
    v = verdict_of(good)
    assert v.status == "coherent" and v.requests[0].source == "openai_dict"
    cut = ("{'id': 'chatcmpl-5d2', 'object': 'chat.completion', 'choices': [{'index': 0, 'message': {'role': "
           "'assistant', 'content': '" + SOUP + " vendredi" * 3 + "\n")
    bad = verdict_of(cut)  # the line is cut inside the answer's string: read as far as it goes
    assert bad.status == "degenerate" and "token soup" in bad.first_blocker.message


def test_stream_chunks_printed_as_dicts_are_pieces_not_empty_answers():
    log = "".join(f"2026-01-05 10:00:0{i} router.py:88 INFO] chunk: {{'id': 'c1', 'object': 'chat.completion.chunk', "
                  f"'choices': [{{'index': 0, 'delta': {{'role': 'assistant', 'content': ''}}, 'finish_reason': None}}]}}\n"
                  for i in range(3))
    assert verdict_of(log).status == "incomplete"


def test_native_bodies_of_sglang_tgi_and_the_pipeline():
    sglang = '{"text":" Rome is the capital of Italy, on the river Tiber.","meta_info":{"id":"a1","finish_reason":{"type":"stop"}}}\n'
    v = verdict_of(sglang)
    assert v.status == "coherent" and "Rome is the capital" in (v.requests[0].output_repr or "")
    pipeline = "[{'generated_text': 'Once upon a time the cat sat on the mat. the mat. the mat. the mat. the mat. the mat. the mat. the mat.'}]\n"
    assert verdict_of(pipeline).status == "degenerate"
    tgi = '{"generated_text":" Lisbon is the capital of Portugal.","details":null}\n'
    assert verdict_of(tgi).status == "coherent"


def test_an_empty_text_beside_its_usage_is_an_empty_answer():
    v = verdict_of("{'text': '', 'usage': {'prompt_tokens': 21, 'completion_tokens': 1, 'total_tokens': 22}}\n")
    assert v.status == "degenerate" and "empty output" in v.first_blocker.message


def test_nan_log_probs_listed_as_tensors_are_nonfinite():
    v = verdict_of("step 12 rollout_log_probs:  [tensor([nan], device='cuda:3'), tensor([nan], device='cuda:3')]\n")
    assert v.status == "nonfinite" and "tensor([nan]" in v.first_blocker.message
    assert verdict_of("step 12 rollout_log_probs:  [tensor([-0.25], device='cuda:3')]\n").status == "incomplete"


def test_ids_printed_without_brackets():
    line = ", ".join(["7"] * 40)
    v = verdict_of(line + "\n" + ", " + ", ".join(["7"] * 30) + "\n")
    assert v.status == "degenerate"
    assert verdict_of("12, 40, 7\n").status == "incomplete"  # three numbers are not an answer


@pytest.mark.parametrize("lines, want", [
    (["[Mon Mar  3 09:12:40 2026] amdgpu 0000:0c:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:3 "
      "pasid:32771)", "[Mon Mar  3 09:12:40 2026] amdgpu 0000:0c:00.0: amdgpu:  in page starting at address "
      "0x00007f11aa000000 from client 10"], "page fault"),
    (["[ 22.10] amdgpu 0000:83:00.0: amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x00800932"], "VM_L2_PROTECTION_FAULT"),
    (["[ 9120.4] NVRM: The NVIDIA GPU 0000:41:00.0", "           NVRM: (PCI ID: 10de:2330) installed in this "
      "system has", "           NVRM: fallen off the bus and is not responding to commands."], "fallen off the bus"),
])
def test_kernel_driver_faults_are_device_errors(lines, want):
    v = verdict_of("\n".join(lines) + "\n")
    assert v.status == "device_error" and want in v.first_blocker.message


def test_a_shells_word_for_a_signal_is_a_crash():
    v = verdict_of("user@node7:~$ python serve.py --model /models/tiny --port 9000\nIllegal instruction (core dumped)\n")
    assert v.status == "crashed" and v.first_blocker.family == "signal"
    assert verdict_of("The run was Aborted by the user, see notes.\n").status == "incomplete"


def test_a_record_above_a_headless_traceback_says_what_happened():
    log = ("2026-02-01 08:00:01,102 myserve.api.launcher 4411 ERROR    [pid=4412] Start-up timed out after 300 "
           "seconds: 3/4 workers joined.\nTraceback (most recent call last):\n  File \"/srv/launcher.py\", line 90, "
           "in launch\n    await self.pool.start()\n  File \"pool.pyx\", line 12, in start\n    raise err\n")
    v = verdict_of(log)
    assert v.status == "crashed" and "timed out after 300" in v.first_blocker.message


def test_the_asgi_header_does_not_hide_the_engine_error_above_it():
    log = ("Traceback (most recent call last):\n  File \"/srv/engine.py\", line 10, in run\n    raise EngineFault(\n"
           "myengine.EngineFault: the background loop stopped (shape mismatch in layer 3)\n"
           "INFO:     10.0.0.9:5111 - \"POST /v1/completions HTTP/1.1\" 500 Internal Server Error\n"
           "ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n"
           "  File \"/srv/app.py\", line 4, in call\n    return await self.app(scope)\n")
    v = verdict_of(log)
    assert "shape mismatch in layer 3" in v.first_blocker.message


def test_a_chat_template_said_twice_and_going_round_again_is_a_loop():
    turn = ["The tallest mountain in Japan is Mount Fuji, at 3,776 metres.", "<|system|>",
            "You are a helpful assistant who answers in one sentence.", "<|user|>", "What is the tallest mountain in Japan?",
            "<|assistant|>"]
    text = "\n".join(turn * 2 + turn[:2] + ["You are a helpful"])  # cut inside the third system turn
    assert any("a loop" in p for p in text_problems(text, 16))
    two_turns = "\n".join(["<|system|>", "You are terse.", "<|user|>", "Name a prime.", "<|assistant|>", "Seven.",
                           "<|user|>", "Name another prime.", "<|assistant|>", "Eleven."])
    assert text_problems(two_turns, 16) == []


def test_reasoning_tags_said_over_and_over_few_words_apart():
    stutter = "1 of7\\nb::3]2 The user has4 </think></think>{ 1[0]} </think>Let me check9 the </think>Let</think>I will look"
    assert any("</think>" in p for p in text_problems(stutter, 16))
    transcript = "\n".join(f"<think>The user asks question {i}; answer briefly and politely.</think>\n"
                           f"Here is my answer to question number {i}, with a short explanation of why it holds."
                           for i in range(4))
    assert text_problems(transcript, 16) == []


def test_a_loop_to_the_end_inside_the_quotes_it_was_printed_in():
    text = "Answer: \"the plan is | ready. |" + " ready. |" * 12 + "\""
    assert any("a loop to the end" in p for p in text_problems(text, 16))
