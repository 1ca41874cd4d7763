"""Outputs printed by vLLM's examples and people's scripts, read as results: `Prompt: '...', Generated text: '...'`
lines, `RequestOutput(... CompletionOutput(index=0, text='...', token_ids=[...], cumulative_logprob=...) ...)` reprs,
OpenAI chat/completion JSON bodies (the answer's `content` or `text`; streamed `data:` chunks are joined by the
scanner) and the same bodies printed as Python dicts (`print(response.json())`), the native bodies of SGLang's
`/generate` (`{"text": ...}`) and TGI / transformers' pipeline (`generated_text`), labelled token-id lists (`token_ids: [...]`, `output_ids=[...]`) and bare ones, bare repr() lines of an
answer, and bare runs of BOS text. Token ids are used when printed; otherwise `textrules` judges the text.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass


BOS_TEXT = "<｜begin▁of▁sentence｜>"
BOS_TEXTS = (BOS_TEXT, "<s>", "<|begin_of_text|>")
MAX_TEXT = 1 << 16  # characters of one output kept for judging (the rules look at its head and its end)

_STRING = r"(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
GENERATED = re.compile(r"Generated text: ?(?P<lit>" + _STRING + ")"
                       r"|^Output \[Text \d+ Beam \d+\]: (?P<trt>\"(?:[^\"\\]|\\.)*\")")  # TensorRT-LLM's run.py
COMPLETION = re.compile(r"CompletionOutput\(index=\d+, text=(?P<lit>" + _STRING + r")(?:, token_ids=(?:array\('l', )?"
                        r"[\[(](?P<ids>[-\d,\s]*)[\])])?")
_CUT_OR_STRING = "(?:" + _STRING + r"|'(?:[^'\\]|\\.)*$)"  # a long answer's line may be cut inside its string
# The openai client's objects printed: `ChatCompletionMessage(content='...', ...)`, `CompletionChoice(..., text='...')`.
_CLIENT_REPR = re.compile(r"ChatCompletionMessage\(content=(?P<lit>" + _STRING + r")|CompletionChoice\(.{0,300}?"
                          r"\btext=(?P<lit2>" + _STRING + ")"
                          # lmdeploy's pipeline: `Response(text='...', generate_token_len=42, ...)`
                          r"|\bResponse\(text=(?P<lit3>" + _CUT_OR_STRING + ")")
_BOS_RUN = re.compile("(?:" + "|".join(re.escape(b) for b in BOS_TEXTS) + r")\s*(?:"
                      + "|".join(re.escape(b) for b in BOS_TEXTS) + ")")


# NaN/inf where a logprob is printed: `cumulative_logprob=nan`, `Logprob(logprob=-inf, ...)`, `"logprob": NaN`.
NONFINITE_LOGPROB = re.compile(r"""(?:cumulative_logprob|logprob)["']?\s*[=:]\s*(?P<v>-?(?:nan|inf(?:inity)?))\b""",
                               re.I)
# OpenAI bodies: the assistant's message or a streamed delta, then its content; a completion choice's text.
_JSON_ANSWER = re.compile(r'"(?:message|delta)"\s*:\s*\{[^{}]{0,300}?"content"\s*:\s*"(?P<s>(?:[^"\\]|\\.)*)(?P<end>")?'
                          r'|"choices"\s*:\s*\[\s*\{[^{}]{0,300}?"text"\s*:\s*"(?P<t>(?:[^"\\]|\\.)*)(?P<tend>")?')
_JSON_REASONING = re.compile(r'"(?:message|delta)"\s*:\s*\{[^{}]{0,300}?"reasoning(?:_content)?"\s*:\s*"'
                             r'(?P<s>(?:[^"\\]|\\.)*)')
# The same bodies as Python prints a dict: `{'id': 'chatcmpl-..', 'choices': [{'message': {'role': 'assistant',
# 'content': '...'}}]}`; a completion choice's `'text'`. (A streamed chunk's `'delta'` is a piece, not an answer.)
_PY_ANSWER = re.compile(r"'message'\s*:\s*\{[^{}]{0,300}?'content'\s*:\s*(?P<lit>" + _CUT_OR_STRING + ")"
                        r"|'choices'\s*:\s*\[\s*\{[^{}]{0,300}?'text'\s*:\s*(?P<lit2>" + _CUT_OR_STRING + ")")
# Native bodies: SGLang's `/generate` answers `{"text": "...", "meta_info": ...}`, TGI's `/generate` and the
# transformers pipeline `generated_text` (JSON or a Python dict); a response dict `{'text': '', 'usage': {...}}`.
_NATIVE = re.compile(r"""^\[?\{\s*"text"\s*:\s*"(?P<s>(?:[^"\\]|\\.)*)"""
                     r"""|["'\u2018\u2019]generated_text["'\u2018\u2019]\s*:\s*(?P<lit>""" + _STRING + ")"
                     r"""|^\[?\{\s*["'\u2018\u2019]text["'\u2018\u2019]\s*:\s*(?P<lit2>""" + _STRING + r")(?=,\s*'usage')")
# NaN/inf printed where log-probs or logits are listed: `all_log_probs: [tensor([nan], ...`, `logits = tensor([[nan,`.
# Also a training or scoring step's metrics dict (the transformers Trainer's `{'loss': 0.0, 'grad_norm': nan, ...}`,
# TRL's `'logits/chosen': nan`, `'rewards/margins': inf`): the run's numbers went non-finite.
_LABELLED_NONFINITE = re.compile(r"""(?:log_?probs?|logits)\w*["']?\s*[=:]\s*(?:[\[(]\s*)*(?:tensor\(\s*)?"""
                                 r"""(?:\[\s*)*(?P<v>-?(?:nan|inf))\b\]?"""
                                 r"""|["']?\b[\w/]*(?:loss|grad_norm|logits/|logps/|rewards?/|kl\b|perplexity|ppl\b)[\w/]*["']?"""
                                 r"""\s*[:=]\s*(?:tensor\(\[*)?(?P<m>-?(?:nan|inf))\b""", re.I)
# (verl's `critic/vf_loss:nan - critic/kl:0.0`, a `loss = nan` line, as well)
_SSE = re.compile(r"^data: ?(?P<body>\{.*)$")
# After an empty content: the tool calls the message made instead (`, tool_calls=[ChatCompletionMessageToolCall(`
# in the client's repr, `"tool_calls": [{` in JSON): a tool call is an answer, not an empty one.
_TOOL_CALLS_REPR = re.compile(r"[^()]{0,200}?\btool_calls=\[\s*\w")
_TOOL_CALLS_PY = re.compile(r"[^{}]{0,200}?'tool_calls'\s*:\s*\[\s*\{")
_TOOL_CALLS_JSON = re.compile(r'[^{}]{0,200}?"tool_calls"\s*:\s*\[\s*\{')
_IDS_LABEL = re.compile(r"(?<![\w.])(?:(?:output|generated|completion|response)[ _](?:token[ _])?(?:ids|tokens)|token[ _]ids)"
                        r"['\"]?\s*[=:]\s*"
                        r"(?:array\('l', |tensor\(\[?)?\[(?P<ids>[-\d,\s]{0,1000000})\]")
_BARE_IDS = re.compile(r"^(?:tensor\()?\[\[?(?P<ids>\s*\d{1,9}(?:\s*,\s*\d{1,9}){7,})\s*,?\s*\]\]?"
                       r"(?:,\s*device='[\w:]+'\))?\)?$")
# Ids printed without brackets (a list's repr wrapped across lines, or joined by ", "): >= 16 on the line.
_BARE_ID_LINE = re.compile(r"^,?\s*(?P<ids>\d{1,9}(?:\s*,\s*\d{1,9}){15,})\s*,?$")
_BARE_REPR = re.compile(r"^(?P<lit>'(?:[^'\\]|\\.){4,}'|\"(?:[^\"\\]|\\.){4,}\")$")


@dataclass(frozen=True)
class PrintedOutput:
    text: str | None
    token_ids: list[int] | None
    nonfinite: str | None = None  # the NaN/inf logprob text, when one was printed


def text_problems(text: str, max_repeat_run: int) -> list[str]:
    """The text rules (`textrules`), imported on first use: a passing log with token ids never needs them, and
    compiling their patterns is a tenth of the verdict's start-up."""
    from .textrules import text_problems as rules

    return rules(text, max_repeat_run)


def literal(text: str) -> str:
    """A Python string literal's value; a literal cut before its closing quote is read as far as it goes."""
    for attempt in (text, text + text[:1]):  # whole, else closed where the line was cut
        try:
            value = ast.literal_eval(attempt)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        return value if isinstance(value, str) else text[1:-1]
    return text[1:-1] if len(text) >= 2 and text[-1] == text[0] else text[1:]


def _ids(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"-?\d{1,12}", text)]


def _nonfinite(text: str) -> str | None:
    m = NONFINITE_LOGPROB.search(text) if ("nan" in text.lower() or "inf" in text.lower()) else None
    return m.group(0) if m else None


def labelled_nonfinite(content: str) -> str | None:
    """The NaN/inf text of a line that lists log-probs or logits (tensors, lists), or None."""
    if "nan" not in content.lower() and "inf" not in content.lower():
        return None
    m = _LABELLED_NONFINITE.search(content)
    return m.group(0) if m else None


def _string_value(lit: str) -> str:
    """A quoted value of a JSON body or a Python dict: a JSON string's escapes, or a Python literal's."""
    return json_string(lit[1:-1]) if lit[:1] == '"' else literal(lit)


def json_string(body: str) -> str:
    """A JSON string's body (without its quotes) decoded; a cut one is decoded as far as it goes."""
    try:
        return json.loads('"' + body + '"')
    except ValueError:
        return re.sub(r"\\(.)", r"\1", body)


def read_outputs(content: str) -> list[PrintedOutput]:
    """The outputs printed on one line (a list of RequestOutputs holds several; a JSON body one per choice)."""
    found = []
    if "CompletionOutput(" in content:
        for m in COMPLETION.finditer(content):
            ids = _ids(m.group("ids")) if m.group("ids") is not None else None
            rest = content[m.end():m.end() + 400]
            found.append(PrintedOutput(literal(m.group("lit"))[:MAX_TEXT], ids, _nonfinite(rest)))
        return found
    if "ChatCompletionMessage(" in content or "CompletionChoice(" in content or "Response(text=" in content:
        for m in _CLIENT_REPR.finditer(content):  # the openai client's objects, lmdeploy's responses
            text = literal(m.group("lit") or m.group("lit2") or m.group("lit3"))
            if not text and _TOOL_CALLS_REPR.match(content, m.end(), m.end() + 300):
                continue  # an empty content beside the tool calls it made: the answer is the call
            found.append(PrintedOutput(text[:MAX_TEXT], None, _nonfinite(content)))
        return found
    m = GENERATED.search(content)
    if m:
        text = literal(m.group("lit")) if m.group("lit") else m.group("trt")[1:-1]  # run.py prints the text bare
        return [PrintedOutput(text[:MAX_TEXT], None, _nonfinite(content))]
    if '"choices"' in content or '"message"' in content or '"delta"' in content:
        for m in _JSON_ANSWER.finditer(content):
            body = m.group("s") if m.group("s") is not None else m.group("t")
            if not body and _TOOL_CALLS_JSON.match(content, m.end(), m.end() + 300):
                continue  # an empty content beside the tool calls it made: the answer is the call
            found.append(PrintedOutput(json_string(body)[:MAX_TEXT], None, _nonfinite(content)))
        if not found and '"reasoning' in content:  # `"content": null` beside the reasoning: judge what was said
            found = [PrintedOutput(json_string(m.group("s"))[:MAX_TEXT], None, _nonfinite(content))
                     for m in _JSON_REASONING.finditer(content)]
        if found:
            return found
    if "'choices'" in content or "'message'" in content:
        for m in _PY_ANSWER.finditer(content):
            text = literal(m.group("lit") or m.group("lit2"))
            if not text and _TOOL_CALLS_PY.match(content, m.end(), m.end() + 300):
                continue
            found.append(PrintedOutput(text[:MAX_TEXT], None, _nonfinite(content)))
        if found:
            return found
    if "text" in content and (m := _NATIVE.search(content)):
        if m.group("s") is not None:
            text = json_string(m.group("s"))
        else:
            text = _string_value(m.group("lit") or m.group("lit2"))
        return [PrintedOutput(text[:MAX_TEXT], None, _nonfinite(content))]
    m = _IDS_LABEL.search(content) if "ids" in content or "tokens" in content else None
    if m and "prompt" not in content[max(0, m.start() - 7):m.start()]:
        return [PrintedOutput(None, _ids(m.group("ids")), _nonfinite(content))]
    stripped = content.strip()
    if stripped[:1] in ("[", "t") and (m := _BARE_IDS.match(stripped)):
        return [PrintedOutput(None, _ids(m.group("ids")))]
    # (an indented line of ids continues a tensor's or a list's repr printed above it: not an answer of its own)
    if stripped[:1] in ("0123456789,") and content[:1] not in (" ", "\t") and (m := _BARE_ID_LINE.match(stripped)):
        return [PrintedOutput(None, _ids(m.group("ids")))]
    if stripped[:1] in ("'", '"') and (m := _BARE_REPR.match(stripped)) and "\\n" in stripped:
        return [PrintedOutput(literal(m.group("lit"))[:MAX_TEXT], None)]
    if _BOS_RUN.search(content):
        return [PrintedOutput(content[:MAX_TEXT], None)]
    return []


def shown_as_printed(source: str, output_repr: str) -> str:
    """An output as the log shows it, for a blocker's message: a JSON body's text with its escapes (`\u0000`,
    `\n`), anything else as its repr."""
    if source not in ("openai_json", "openai_stream") or output_repr[:1] not in ("'", '"'):
        return output_repr
    text = literal(output_repr)
    return json.dumps(text, ensure_ascii=False)


def _reasoning_text(value: object) -> str | None:
    """A delta's reasoning: a string, or an object holding it as `text` (some gateways: `{"text": "..."}`)."""
    if isinstance(value, dict):
        value = value.get("text")
    return value if isinstance(value, str) else None


def stream_delta(content: str) -> tuple[str | None, bool] | None:
    """One streamed chunk (`data: {...}`): (its delta text, whether it finished the answer), or None. The text is
    None for a piece of a tool call."""
    m = _SSE.match(content)
    if not m:
        return None
    try:
        chunk = json.loads(m.group("body"))
        choice = chunk["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None
    if not isinstance(choice, dict):
        return None
    delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
    if not delta and isinstance(choice.get("message"), dict):  # some servers stream whole `message` pieces (ERNIE)
        delta = choice["message"]
    text = delta.get("content") if "content" in delta else choice.get("text")
    reasoning = next((r for r in map(_reasoning_text, (delta.get("reasoning_content"), delta.get("reasoning")))
                      if r is not None), None)
    if not isinstance(text, str) or (not text and reasoning):
        # `"content": null` (or empty) beside the thinking: a reasoning model's thinking is what it said so far
        text = reasoning
    if not text and delta.get("tool_calls"):
        return None, choice.get("finish_reason") is not None  # a piece of a tool call, not of a text answer
    return (text if isinstance(text, str) else ""), choice.get("finish_reason") is not None


