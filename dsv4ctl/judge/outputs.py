"""Outputs printed by vLLM's examples and people's scripts, read as results: `Prompt: '...', Generated text: '...'`
lines, `RequestOutput(... CompletionOutput(index=0, text='...', token_ids=[...]) ...)` reprs, and bare runs of BOS
text. Token ids are used when printed; otherwise the text rules below judge the text.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

BOS_TEXT = "<｜begin▁of▁sentence｜>"
BOS_TEXTS = (BOS_TEXT, "<s>", "<|begin_of_text|>")
MAX_TEXT = 1 << 16  # characters of one output kept for judging (the rules look at its head and its end)

_STRING = r"(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
GENERATED = re.compile(r"Generated text: ?(?P<lit>" + _STRING + ")")
COMPLETION = re.compile(r"CompletionOutput\(index=\d+, text=(?P<lit>" + _STRING + r")(?:, token_ids=(?:array\('l', )?"
                        r"[\[(](?P<ids>[-\d,\s]*)[\])])?")
_BOS_RUN = re.compile("(?:" + "|".join(re.escape(b) for b in BOS_TEXTS) + r")\s*(?:"
                      + "|".join(re.escape(b) for b in BOS_TEXTS) + ")")


@dataclass(frozen=True)
class PrintedOutput:
    text: str
    token_ids: list[int] | None


def literal(text: str) -> str:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text[1:-1]
    return value if isinstance(value, str) else text[1:-1]


def read_outputs(content: str) -> list[PrintedOutput]:
    """The outputs printed on one line (a list of RequestOutputs holds several)."""
    found = []
    if "CompletionOutput(" in content:
        for m in COMPLETION.finditer(content):
            ids = None
            if m.group("ids") is not None:
                ids = [int(t) for t in re.findall(r"-?\d{1,12}", m.group("ids"))]
            found.append(PrintedOutput(literal(m.group("lit"))[:MAX_TEXT], ids))
        return found
    m = GENERATED.search(content)
    if m:
        return [PrintedOutput(literal(m.group("lit"))[:MAX_TEXT], None)]
    if _BOS_RUN.search(content):
        return [PrintedOutput(content[:MAX_TEXT], None)]
    return []


# ---- text rules (when no token ids were printed) ----------------------------------------------------------------

_SCRIPTS = (("latin", re.compile(r"[A-Za-z\u00c0-\u024f\u1e00-\u1eff]")), ("cyrillic", re.compile(r"[\u0400-\u04ff]")),
            ("greek", re.compile(r"[\u0370-\u03ff]")), ("arabic", re.compile(r"[\u0600-\u06ff]")),
            ("hangul", re.compile(r"[\uac00-\ud7af]")), ("cjk", re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")))
# Scripts that never share one word in real text; Latin next to CJK does (Chinese and Japanese write English
# words without spaces), so that pair is allowed.
_ALLOWED_MIX = {frozenset({"latin", "cjk"})}


def text_problems(text: str, max_repeat_run: int) -> list[str]:
    problems = []
    if not text.strip():
        return ["empty output"]
    run = _bos_run(text)
    if run >= 2:
        problems.append(f"a run of {run} BOS texts")
    tail = _tail_run(text)
    if tail >= max(max_repeat_run, 8):
        problems.append(f"one character repeated {tail} times to the end")
    words = text.split()
    word_tail = _tail_run(words)
    if word_tail >= max(max_repeat_run, 8):
        problems.append(f"one word repeated {word_tail} times to the end")
    if text.count("\ufffd") >= 3:
        problems.append(f"{text.count(chr(0xfffd))} replacement characters (undecodable bytes)")
    mixed = [w for w in words[:400] if _mixed_script(w)]
    if mixed:
        problems.append(f"words mixing scripts ({', '.join(repr(w[:24]) for w in mixed[:2])}): token soup")
    return problems


def _tail_run(items) -> int:
    items = list(items.rstrip()) if isinstance(items, str) else items
    if not items:
        return 0
    last, run = items[-1], 0
    for item in reversed(items):
        if item != last:
            break
        run += 1
    return run


def _bos_run(text: str) -> int:
    best = 0
    for bos in BOS_TEXTS:
        if bos + bos in text or bos + " " + bos in text:
            runs = re.findall("(?:" + re.escape(bos) + r"\s*)+", text)
            best = max(best, max(r.count(bos) for r in runs))
    return best


def _mixed_script(word: str) -> bool:
    if len(word) < 4 or word.isascii():
        return False
    seen = frozenset(name for name, pattern in _SCRIPTS if pattern.search(word))
    return len(seen) >= 2 and seen not in _ALLOWED_MIX
