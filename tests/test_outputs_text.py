"""Outputs in the shapes people print them, and the text rules that judge them (issue 21, point 4): token-id lists,
RequestOutput reprs with NaN logprobs, OpenAI JSON bodies streamed or not, `Generated text:` lines; degenerate for
repeated characters, NUL/U+FFFD runs, empty answers, loops that start mid-answer, word salad and token soup, while
real answers stay coherent."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes
from dsv4ctl.judge.textrules import text_problems


def verdict_of(text: str):
    return judge(parse_bytes(text.encode()))


def chat_body(content: str) -> str:
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}]})


def test_an_openai_chat_body_is_read_and_judged():
    good = verdict_of(chat_body("Paris is the capital of France, and it sits on the Seine.") + "\n")
    assert good.status == "coherent" and good.requests[0].source == "openai_json"
    bad = verdict_of(chat_body("!" * 300) + "\n")
    assert bad.status == "degenerate" and "!!!!!!!!" in bad.first_blocker.message


def test_the_users_own_message_in_a_curl_line_is_not_an_answer():
    v = verdict_of("""curl localhost:8000/v1/chat/completions -d '{"messages": [{"role": "user", "content": "!!!!!!!!!!!!"}]}'\n""")
    assert v.requests == [] and v.status == "incomplete"


def test_a_completion_body_and_a_cut_one():
    body = '{"id":"cmpl-2","object":"text_completion","choices":[{"index":0,"text":" 1. Boil water.\\n2. Add pasta."'
    v = verdict_of(body + "\n")  # cut before its end: the text is read as far as it goes
    assert v.requests[0].output_repr == repr(" 1. Boil water.\n2. Add pasta.") and v.status == "coherent"


def test_streamed_chunks_are_joined_into_one_answer():
    chunks = ["The", " sky", " is", " blue", " because", " air", " scatters", " blue", " light", "."]
    lines = [f'data: {json.dumps({"choices": [{"index": 0, "delta": {"content": c}, "finish_reason": None}]})}'
             for c in chunks] + ["data: [DONE]"]
    v = verdict_of("\n".join(lines) + "\n")
    [request] = v.requests
    assert request.source == "openai_stream" and v.status == "coherent"
    assert request.output_repr == repr("The sky is blue because air scatters blue light.")


def test_nan_logprobs_in_a_request_output_are_nonfinite():
    line = ("RequestOutput(request_id=0, prompt='Hi', outputs=[CompletionOutput(index=0, text=' there friend', "
            "token_ids=[1, 2, 3], cumulative_logprob=nan, logprobs=None, finish_reason=length)])\n")
    v = verdict_of(line)
    assert v.status == "nonfinite" and v.first_blocker.message == "cumulative_logprob=nan"
    fine = verdict_of(line.replace("=nan", "=-4.25"))
    assert fine.status == "coherent"


@pytest.mark.parametrize("line, status", [
    ("output token ids: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]", "degenerate"),
    ("generated_ids = [151643, 151643, 151643, 151643, 151643, 151643, 151643, 151643, 151643]", "degenerate"),
    ("[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]", "degenerate"),
    ("output token ids: []", "degenerate"),
    ("output token ids: [791, 6864, 315, 9822, 374, 12366, 13, 578]", "coherent"),
])
def test_token_id_lists_printed_by_scripts(line, status):
    v = verdict_of(line + "\n")
    assert v.status == status and v.requests[0].source == "printed_ids"


def test_prompt_token_ids_are_not_an_answer():
    assert verdict_of("prompt_token_ids=[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]\n").requests == []


@pytest.mark.parametrize("text, problem", [
    ("", "empty output"),
    ("\x00" * 12, "NUL"),
    ("Sure\x00\x00\x00\x00 here", "NUL"),
    ("caf\ufffd\ufffd\ufffd\ufffd", "replacement characters"),
    ("The answer is 4. The answer is 4. The answer is 4. The answer is 4.", "loop"),
    ("To sum up: <|im_start|>assistant\n<|im_start|>assistant\n<|im_start|>assistant\n<|im_start|>assistant\n",
     "loop"),
    ("!" * 200 + " [cut]", "one character"),
    ("L 1. 0000000000000000\n\n\n7\n", "digit soup"),
    ("harbor violin pencil cactus meteor blanket cobalt ginger tundra falcon marble oyster candle sapphire rocket",
     "word salad"),
    (" 1.es , {. .ae .ae. sae emem,, sa most um,.. ..1.,ae io.ae um op colora.am. ut e_sh. sau.u.a,. ofum.ing p "
     "d ae the sa e e io", "fragments"),
    ("hello мирный 東京 شمس", "token soup"),
    ("obligationsโลก and more", "token soup"),
])
def test_degenerate_text(text, problem):
    problems = text_problems(text, 8)
    assert problems and problem in " ".join(problems)


@pytest.mark.parametrize("text", [
    "Paris is the capital of France. It is known for the Eiffel Tower and its museums.",
    "我是一个AI助手，由深度求索公司开发。我可以回答问题、写代码和翻译文本。",
    "Pythonはとても使いやすいプログラミング言語です。NumPyやpandasも人気があります。",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5\n",
    "- apples\n- oranges\n- pears\n- plums\n- figs\n",
    "| name | value |\n|---|---|\n| a | 1 |\n| b | 2 |\n",
    "The capital of France is Paris.\n----------------------------------------",
    "Hello = Привет (Russian).",
    "The function runs in 50μs on the GPU and 2 ms on the CPU, so the GPU path is the one to use here.",
    "1. Preheat the oven.\n2. Mix the flour and sugar.\n3. Bake for 20 minutes.",
    "42",
    "Keywords: transformers, attention, tokenizer, sampling, decoding",
])
def test_real_answers_stay_coherent(text):
    assert text_problems(text, 8) == []


def test_korean_particles_on_english_words_are_not_token_soup():
    text = ("주어진 Prompt를 읽고 Question에 답하세요. 이 모델은 Transformer를 사용하며, 학습 데이터는 "
            "Wikipedia와 뉴스 기사입니다. 결과는 JSON으로 돌려줍니다.")
    assert text_problems(text, 8) == []
    # Two scripts that never share a word still do.
    assert text_problems("the answer is answerОтвет and theyОтветим fine words here", 8) != []
