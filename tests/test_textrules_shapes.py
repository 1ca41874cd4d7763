"""Text rules for shapes the verdict missed on logs nobody here wrote (issue 21, pass 5): token soup in scripts the
rules did not list (Telugu, Tamil, Armenian, Georgian...), while real answers in those scripts stay coherent."""

from __future__ import annotations

from dsv4ctl.judge.textrules import scripts_of, text_problems


def test_unlisted_scripts_are_named():
    assert scripts_of("ఇది ఒక వాక్యం") == frozenset({"telugu"})
    assert scripts_of("Բարև, աշխարհ") == frozenset({"armenian"})
    assert scripts_of("გამარჯობა and 你好") == frozenset({"georgian", "latin", "cjk"})
    assert scripts_of("২০২৪") == frozenset()  # Bengali digits name no script: they are not letters


def test_a_short_answer_mixing_cjk_latin_and_telugu_is_token_soup():
    problems = text_problems("特点在于(from ab的方面 మ nameSuggest physiolog……", 16)
    assert any("3 scripts" in p and "telugu" in p for p in problems)


def test_a_latin_word_glued_to_an_armenian_letter_is_token_soup():
    problems = text_problems("The keeper walked along the wall, and then later.ղ, it was a. He would see it.", 16)
    assert any("mixing scripts" in p for p in problems)


def test_real_answers_in_those_scripts_stay_coherent():
    for answer in ("తెలుగు భారతదేశంలో ఎక్కువగా మాట్లాడే భాషలలో ఒకటి. ఇది ఆంధ్రప్రదేశ్ అధికార భాష.",
                   "Հայաստանի մայրաքաղաքը Երևանն է, որը գտնվում է Արարատյան դաշտում:",
                   "தமிழ் ஒரு பழமையான மொழி. The word 'Tamil' itself is written தமிழ்.",
                   "In Georgian, hello is გამარჯობა (gamarjoba) and thank you is მადლობა (madloba)."):
        assert text_problems(answer, 16) == [], answer


def test_closing_brackets_with_nothing_they_close_are_code_soup():
    soup = "\n".join([" wittyafi Serif*/) cdr])", "')));", " Leone;\"", "])", ")>", " SEEK*/)", "*/)')));"] * 5)
    assert any("code soup" in p for p in text_problems(soup, 16))


def test_code_and_lists_keep_their_brackets_balanced():
    code = "def f(x):\n    return [g(y) for y in x if y]\n\nclass A:\n    items = {'a': (1, 2), 'b': [3]}\n" * 6
    listed = "\n".join(f"{i}) Step {i}: mix the flour (about {i} cups) and stir well :)" for i in range(1, 20))
    assert not any("code soup" in p for p in text_problems(code, 16))
    assert not any("code soup" in p for p in text_problems(listed, 16))


def test_an_answer_of_emoji_is_emoji_soup_and_a_few_emoji_are_not():
    assert any("emoji soup" in p for p in text_problems("🎈🎈 🥳 🎁🎁🎁 🎂 🎈 🥳 🎁 🎂🎂 🎈🎈🎈 🥳🥳 🎁 🎂", 16))
    chat = "Great news! 🎉 The build passed on every platform ✅ and the release notes are ready to publish. 🚀"
    assert text_problems(chat, 16) == []


def test_shell_job_control_and_macos_signal_lines_are_fatal_signals():
    from dsv4ctl.judge.classify import line_error

    assert line_error("[1]    48213 killed     python3 -m tools.merge_shards --ckpt ./shards") == ("signal", "killed")
    assert line_error("zsh: killed     python run.py") == ("signal", "killed")
    for line in ("zsh: segmentation fault  python run.py", "[2]  7001 abort      python serve.py",
                 "Abort trap: 6", '"indicator":"Abort trap: 6","byProc":"Python"', "Segmentation fault: 11"):
        assert line_error(line) is not None and line_error(line)[0] == "signal", line
    assert line_error("the process was killed politely by the user") is None


def test_a_special_token_said_over_and_over_is_degenerate_even_when_the_run_does_not_reach_the_end():
    answer = "<pad><extra_id_0> " + "<unk> " * 12 + "<unk>..<unk>..<extra_id_1>..</s>"
    assert any("special token (<unk>)" in p for p in text_problems(answer, 16))
    prompt = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nName three rivers in "
              "Europe and one fact about each.<|im_end|>\n<|im_start|>assistant\nThe Danube, the Rhine and the Seine.")
    assert text_problems(prompt, 16) == []
    explained = "Padding uses <pad>, unknown words map to <unk>, and T5 marks spans with <extra_id_0>, <extra_id_1>."
    assert text_problems(explained, 16) == []


def test_a_loop_that_ends_differently_is_still_a_loop():
    said = "The answer is 4. " * 4 + "I hope this helps you with the sum!"
    assert any(p.startswith("a loop:") for p in text_problems(said, 16))
    block = "Step one: open the valve.\nStep two: wait for the hiss.\n" * 3 + "Finally, close it again."
    assert any(p.startswith("a loop:") for p in text_problems(block, 16))


def test_code_and_frames_said_again_are_not_loops():
    code = "x = f(\n    self._backend._ffi.NULL,\n    self._backend._ffi.NULL,\n    self._backend._ffi.NULL,\n)\n"
    frames = "==4174==    by 0x12F68A3: ??? (in /usr/bin/node)\n" * 6 + "==4174== LEAK SUMMARY:"
    short = "Yes. Yes. Yes. I agree with that plan entirely, it is a good one."
    for text in (code, frames, short):
        assert not any(p.startswith("a loop:") for p in text_problems(text, 16)), text


def test_an_answer_collapsing_into_digits():
    for answer in ("Sure! 1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1",
                   "The result is 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 and then.",
                   "If you want to!0,. The1.1.1\n0 2,1,1,1, and5.1.The1a1.... (0,1,1,0,1,0,1,2,0,4,0,0,0,1,1,8,1,1,1,0,1,0"):
        assert any("collapsing into digits" in p for p in text_problems(answer, 8)), answer


def test_digits_an_answer_means_are_not_a_collapse():
    for answer in ("np.zeros(12) gives [0. 0. 0. 0. 0. 0. 0. 0. 0. 0. 0. 0.] as expected.",
                   "The bits are 0 1 1 0 1 0 0 1 1 0 1 0 1 1 0 0 1 0 1 0 in that order.",
                   "The digits of pi are 3.1 4 1 5 9 2 6 5 3 5 8 9 7 9 3, and so on.",
                   "table = (0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 12)  # closed on its line",
                   "Version 1.0.0.0 and IP 10.0.0.1 are fine; 2024-01-01 00:00:00 too."):
        assert not any("collapsing" in p for p in text_problems(answer, 8)), answer


def test_digits_the_answer_goes_on_to_explain_and_lists_of_values_are_not_a_collapse():
    """Stress texts written here (issue 21, pass 6): the collapse rule fired on digits a fluent sentence goes on
    from, and on one-decimal scores."""
    for answer in ("The dice rolls were 6, 6, 6, 1, 6, 6, 2, 6, 6, 6, 6, 3 and six came up most often.",
                   "Row by row: 5 3 0 0 7 0 0 0 0 6 0 0 1 9 5 0 0 0, where 0 marks an empty cell.",
                   "The first terms: 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, and the sum is twelve.",
                   "Scores per epoch: 0.8 0.9 0.9 0.9 0.8 0.9 0.9 0.9 0.9 0.9 0.9 0.9. It converged early."):
        assert not any("collapsing" in p for p in text_problems(answer, 8)), answer
    # ...but digits the answer does not recover from still are: two words after, or more digits
    for answer in ("The result is 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 and then.",
                   "Sure: 1.1.1.1.1.1.1.1.1.1.1.1.1 1 the 1.1.1.1"):
        assert any("collapsing" in p for p in text_problems(answer, 8)), answer


def test_a_program_output_quoted_in_a_fence_is_not_a_loop_but_an_unclosed_fence_looping_is():
    output = "Run it and you get:\n```\n" + "worker 0 finished its share of the batch\n" * 4 + "```\nThat is all."
    assert not any(p.startswith("a loop") for p in text_problems(output, 16))
    looping = "Here you go:\n```\n" + "the model keeps saying this same line\n" * 5 + "the model keeps"
    assert any(p.startswith("a loop") for p in text_problems(looping, 16))


def test_function_words_with_nothing_between_them_are_word_salad():
    salad = ("the the to and the that to the. to to the which the she the to that and the the to which is the and "
             "to to to to to. to to to to which to to to would in to that and to to to. the to would. the she she")
    assert any("function words" in p for p in text_problems(salad, 16))
    prose = ("It is in the nature of all of us to want to be the one who is right, and to say so; but it is not "
             "always the case that we are, and it may be that we are not at all, for all of this is what it is to be.")
    assert not any("function words" in p for p in text_problems(prose, 16))


def test_a_null_content_is_judged_by_its_reasoning():
    import json

    from dsv4ctl.judge.rules import judge
    from dsv4ctl.judge.scan import parse_bytes

    body = {"choices": [{"message": {"role": "assistant", "content": None, "reasoning_content": "%s"}}]}
    line = json.dumps(body)
    assert judge(parse_bytes((line % ("~" * 40) + "\n").encode())).status == "degenerate"
    good = line % "The user asks what Git is; I should explain version control briefly."
    assert judge(parse_bytes((good + "\n").encode())).status == "coherent"


# ---- pass 7 (from the coherent answers of the old held-out set, spent on it: see docs/verdict.md) ----------------

def judged(tmp_path, text: str) -> dict:
    from dsv4ctl.judge.files import judge_files

    log = tmp_path / "raw.log"
    log.write_text(text, encoding="utf-8")
    return judge_files(log).to_json()


def chunk(delta: str, finish: str = "null") -> str:
    return ('data: {"id":"cmpl-7","object":"chat.completion.chunk","choices":[{"index":0,"delta":' + delta
            + ',"finish_reason":' + finish + '}]}\n\n')


def test_a_stream_of_reasoning_deltas_is_judged_by_what_it_reasoned(tmp_path):
    stream = "".join(chunk('{"content":null,"reasoning_content":"' + piece + '"}')
                     for piece in ("The user asks ", "for the boiling point ", "of water at sea level: ", "100 C."))
    v = judged(tmp_path, stream)
    assert v["status"] != "degenerate" and not any("empty" in r for r in v["reasons"]), v["reasons"]
    loop = "".join(chunk('{"content":null,"reasoning_content":"!"}') for _ in range(40))
    assert judged(tmp_path, loop)["status"] == "degenerate"  # still read: one character to the end


def test_an_empty_content_beside_the_tool_calls_it_made_is_an_answer(tmp_path):
    called = ("ChatCompletion(id='9', choices=[Choice(finish_reason='tool_calls', index=0, logprobs=None, "
              "message=ChatCompletionMessage(content='', role='assistant', function_call=None, "
              "tool_calls=[ChatCompletionMessageToolCall(id='c1', function=Function(arguments='{\"city\": \"Oslo\"}', "
              "name='weather'), type='function')]))], created=1, model='m', object='chat.completion')\n")
    v = judged(tmp_path, called)
    assert not any("empty" in r for r in v["reasons"]), v["reasons"]
    nothing = called.replace("tool_calls=[ChatCompletionMessageToolCall(id='c1', function=Function(arguments="
                             "'{\"city\": \"Oslo\"}', name='weather'), type='function')]", "tool_calls=None")
    assert any("empty" in r for r in judged(tmp_path, nothing)["reasons"])
    body = ('{"choices": [{"index": 0, "message": {"role": "assistant", "content": "", "tool_calls": '
            '[{"id": "c2", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}}]}\n')
    assert not any("empty" in r for r in judged(tmp_path, body)["reasons"])
    assert any("empty" in r for r in judged(tmp_path, body.replace(', "tool_calls": [{"id": "c2", "type": '
                                                                  '"function", "function": {"name": "add", '
                                                                  '"arguments": "{}"}}]', ""))["reasons"])


def test_a_stream_that_only_called_a_tool_is_not_an_empty_answer(tmp_path):
    stream = (chunk('{"role":"assistant","content":""}')
              + chunk('{"tool_calls":[{"index":0,"id":"c3","type":"function","function":{"name":"add","arguments":""}}]}')
              + chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\": 1}"}}]}')
              + chunk("{}", '"tool_calls"') + "data: [DONE]\n")
    v = judged(tmp_path, stream)
    assert not any("empty" in r for r in v["reasons"]), v["reasons"]
    empty = chunk('{"role":"assistant","content":""}') + chunk("{}", '"stop"') + "data: [DONE]\n"
    assert any("empty" in r for r in judged(tmp_path, empty)["reasons"])


def test_a_stream_of_many_tiny_chunks_is_read_in_one_pass(tmp_path):
    """Regression (found in review): the stream's length was summed over every delta kept at each new chunk, so a
    stream of 300k one-character chunks did not finish in 10 minutes. A hang guard, not a benchmark."""
    import subprocess
    import sys

    log = tmp_path / "raw.log"
    log.write_text(chunk('{"content":"a"}') * 200_000, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "verdict", "--log", str(log), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert '"status": "degenerate"' in done.stdout, done.stderr[-500:]
    assert "repeated 65536 times to the end" in done.stdout  # judged on the first MAX_TEXT characters kept
