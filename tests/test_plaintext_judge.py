"""Answers pasted as plain text (no marker), the chat template past its end of turn, and fatal signals reported by
MPI launchers (issue 21, third pass). Literal text in our own words."""

from __future__ import annotations

from dsv4ctl.judge.plaintext import PlainBlocks, degenerate_answer
from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes
from dsv4ctl.judge.textrules import text_problems


def verdict(text: str):
    return judge(parse_bytes(text.encode("utf-8")))


def test_a_bare_answer_that_repeats_one_word_to_the_end_is_degenerate_and_quotes_its_line():
    v = verdict("python gen.py --prompt hi\nloading...\nThe sea sea sea sea sea sea sea sea sea sea sea sea\n")
    assert v.status == "degenerate" and not v.passed
    assert v.first_blocker.line == 3 and "sea sea sea" in v.first_blocker.message
    assert v.requests[0].source == "plain_text"


def test_the_cut_last_word_of_a_paste_does_not_hide_the_repeat():
    assert any("repeated" in p for p in text_problems("and then rain rain rain rain rain rain rain rain rain ra", 8))
    assert not text_problems("He said: go, go on, go home, then we will see.", 8)


def test_a_log_line_every_rank_prints_is_not_a_loop():
    log = "".join(f"[2025-01-01 00:00:0{i} TP{i}] Init begin.\n" for i in range(4)) + "Shape torch.Size([64, 8])\n" * 8
    assert verdict(log).status == "incomplete"


def test_plain_text_is_not_judged_when_the_log_holds_an_error():
    v = verdict("fear fear fear fear fear fear fear fear fear fear\nRuntimeError: CUDA error: out of memory\n")
    assert v.status == "crashed"


def test_a_coherent_plain_answer_stays_incomplete():
    v = verdict("$ ./chat -p 'capital of Peru?'\nThe capital of Peru is Lima, on the Pacific coast.\n"
                "It was founded in 1535.\n")
    assert v.status == "incomplete" and v.first_blocker is None


def test_progress_bars_are_not_an_answer():
    bar = "Processed prompts: 100%|██████████| 4/4 [00:01<00:00,  3.1it/s]\n"
    assert verdict(bar * 5).status == "incomplete"


def test_blocks_end_at_other_lines_and_paragraphs_are_judged_apart():
    blocks = PlainBlocks()
    for n, line in enumerate(["intro words here to pass the length", "", "x@ ⁇  ⁇  ⁇  ⁇  ⁇  ⁇  ⁇  ⁇  ⁇  ⁇", "",
                              " -- done in 3.1 seconds, 96 tokens"], start=5):
        blocks.add(n, line)
    blocks.end()
    answer = degenerate_answer(blocks.blocks, lambda text: text_problems(text, 8))
    assert answer is not None and answer.line == 7 and answer.shown.startswith("x@")


def test_special_tokens_past_the_end_of_turn():
    looped = "Fine, thanks.<|im_end|>\n<|im_start|>ok<|im_end|>\n<|im_start|><|im_start|>\n<|im_start|>ok"
    assert any("past the end of turn" in p for p in text_problems(looped, 8))
    # one end token at the end, or a multi-turn prompt with sentences between its tokens: coherent
    assert not text_problems("Fine, thanks.<|im_end|>", 8)
    prompt = ("<|im_start|>user\nWhat is the tallest mountain in Africa?<|im_end|>\n<|im_start|>assistant\n"
              "Kilimanjaro, at about 5,895 metres above sea level.<|im_end|>\n<|im_start|>user\nAnd in Europe, "
              "if the Caucasus counts?<|im_end|>\n<|im_start|>assistant\nMount Elbrus, at 5,642 metres.<|im_end|>")
    assert not text_problems(prompt, 8)


def test_a_json_body_blocker_quotes_its_escapes_as_printed():
    body = '{"choices":[{"index":0,"message":{"role":"assistant","content":"' + "\\u0000" * 40 + '"}}]}\n'
    v = verdict(body)
    assert v.status == "degenerate" and "\\u0000\\u0000" in v.first_blocker.message


def test_a_generated_tokens_key_is_a_token_list():
    v = verdict("{'generated_tokens': [5" + ", 0" * 40 + "]}\n")
    assert v.status == "degenerate" and v.requests[0].source == "printed_ids"
    assert "[5, 0, 0" in v.first_blocker.message


def test_mpi_launchers_report_fatal_signals():
    openmpi = "[n1:00012] *** Process received signal ***\n[n1:00012] Signal: Segmentation fault (11)\n"
    v = verdict(openmpi)
    assert v.status == "crashed" and v.first_blocker.family == "signal" and v.first_blocker.line == 1
    mpich = "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   EXIT CODE: 9\n"
    v = verdict(mpich)
    assert v.status == "crashed" and v.first_blocker.family == "signal"
    assert verdict("=   EXIT CODE: 9\n").first_blocker.kind == "killed"


def test_a_logged_prompt_and_its_stop_list_are_not_a_template_loop():
    # a request record's prompt repr (roles after `\n` escapes) and `stop=[...]` of special tokens: a first version
    # of the rule counted both as a loop
    line = ("prompt: '<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nhola<|im_end|>\\n<|im_start|>"
            "assistant\\n', stop=['</s>', '<|im_start|>', '<|im_end|>', '<|im_sep|>'], max_tokens=64")
    assert not text_problems(line, 8)
