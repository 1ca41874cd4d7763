"""Loops and collapses that need not run to the end of an answer (issue 21, pass 5), for `textrules`. Stdlib only.

  block loop    one line, sentence or block of lines said >= 3 times in a row, over >= 60 characters holding
                letters, anywhere in the answer: a loop that then ends differently (a last line of its own, a cut
                sentence, the template's end) is still a loop
  (the block must read as words: letters are >= half of it and code signs `_()[]{}=/;` <= 5%, so a table of
  code lines or a debugger's frames said again is not a loop.) Tried and left out: lines going round in circles
  (<= 40% different lines) flags 17 of 5852 chunks of real docs and code (node's API pages, asyncio).
  digit collapse  >= 12 single digits strung together by separators only (`1.1.1.1`, `0 0 0 0`, `0,1,1,0,1,0,...`)
                where one digit is >= 60% of them, or (>= 20 digits, >= 3 different) two digits >= 80%: the
                answer falling apart into digits. A vector or array printed whole (`[0. 0. 0. ...]`, closed by its
                bracket on its line) is spared, and so is code (> 3% code signs: lookup tables, reverse-DNS names)
                and a text of numbers (< 10% letters); so are a list of one-decimal values (`0.8 0.9 0.9 ...`:
                scores, probabilities) and a stretch after which the sentence goes on in >= 3 words (`6, 6, 1, 6,
                ... and six came up most`: dice rolls, a sudoku row, a bit string the answer then explains).
                Found on stress texts written here (tests/test_textrules_shapes.py), not on the held-out set.
"""

from __future__ import annotations

import re

MAX_UNITS = 240  # lines or sentences looked at
MAX_BLOCK = 16  # lines (or sentences) in one repeated block
MIN_LOOP_CHARS = 60
_CODE_SIGNS = frozenset("_()[]{}=/;<>|\\`$#")

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")


_FENCED = re.compile(r"(?ms)^[ \t]*(```|~~~)[^\n]*\n.*?^[ \t]*\1[ \t]*$")


def block_loop(text: str) -> tuple[str, int] | None:
    """(the repeated block, how many times) of the longest block said >= 3 times in a row, or None."""
    text = _FENCED.sub("", text)  # a fenced block quotes code or a program's output: what it repeats is its own
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()][:MAX_UNITS]
    found = _repeated_block(lines, "\n")
    if found is None:
        sentences = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()][:MAX_UNITS]
        found = _repeated_block(sentences, " ")
    return found


def _repeated_block(units: list[str], joiner: str) -> tuple[str, int] | None:
    n = len(units)
    if n < 3 or len(set(units)) == n:
        return None  # nothing is said twice: no loop (most answers end here)
    best: tuple[int, str, int] | None = None
    for k in range(1, min(MAX_BLOCK, n // 2) + 1):
        run = 0
        for i in range(n - k):
            last = i + k == n - 1  # the answer's last unit, maybe cut: a start of the one it repeats counts
            if units[i] != units[i + k] and not (last and len(units[-1]) >= 4 and units[i].startswith(units[-1])):
                run = 0
                continue
            run += 1
            # three times in a row; a chat template's turns said twice and going round again to the end
            if run >= 2 * k or (last and k >= 2 and run >= k + max(2, k // 2)
                                and any(_TEMPLATE_TOKEN.search(u) for u in units[i - run + 1:i + 1])):
                start = i - run + 1
                reps = run // k + 1
                block = units[start:start + k]
                chars = sum(map(len, units[start:i + k + 1]))
                if chars >= MIN_LOOP_CHARS and _words(block):
                    if best is None or chars > best[0]:
                        best = (chars, joiner.join(block), reps)
    return (best[1], best[2]) if best else None


# A chat template's special tokens (`<|user|>`, `<｜Assistant｜>`, `</s>`) read as words in a loop, not as code signs:
# an answer that echoes its template over and over is a loop.
SPECIAL_TOKEN = r"<\|[A-Za-z_]{2,24}\|>|<｜[^｜<>]{2,30}｜>|</s>"  # `<|im_end|>`, `<｜end▁of▁sentence｜>`, `</s>`
_TEMPLATE_TOKEN = re.compile(SPECIAL_TOKEN + r"|<s>|</?think>")


def _words(block: list[str]) -> bool:
    visible = [ch for unit in block for ch in _TEMPLATE_TOKEN.sub("w", unit) if not ch.isspace()]
    letters = sum(ch.isalpha() for ch in visible)
    signs = sum(ch in _CODE_SIGNS for ch in visible)
    return bool(visible) and letters * 2 >= len(visible) and signs * 20 <= len(visible)


_DIGIT_STRETCH = re.compile(r"(?<![\w.])\d(?:[ ,.;:]{1,3}\d(?![\d\w])){11,}")
_DECIMALS = re.compile(r"\d\.\d(?:[ ,;]{1,3}\d\.\d)+")  # one-decimal values in a list: `0.8, 0.9, 0.9`
_WORD = re.compile(r"[^\W\d_]{2,}")
_CLOSERS = {"[": "]", "(": ")", "{": "}"}


def digit_collapse(text: str) -> str | None:
    """The first stretch of single digits the answer collapses into (quoted from its opening bracket), or None."""
    sample = text[:16384]
    visible = len(sample) - sample.count(" ") - sample.count("\n")
    if sum(sample.count(ch) for ch in _CODE_SIGNS) * 100 > 3 * visible:
        return None  # code: its tables and addresses are digits strung together by design
    if sum(ch.isalpha() for ch in sample) * 10 < visible:
        return None  # a table of numbers, not words falling apart (a run to the end is textrules' own rule)
    for m in _DIGIT_STRETCH.finditer(sample):
        digits = [ch for ch in m.group(0) if ch.isdigit()]
        counts = sorted((digits.count(d) for d in set(digits)), reverse=True)
        n = len(digits)
        collapsed = counts[0] * 5 >= 3 * n or (n >= 20 and len(counts) >= 3 and (counts[0] + counts[1]) * 5 >= 4 * n)
        opener = sample[m.start() - 1:m.start()]
        line_end = sample.find("\n", m.end())
        closed = opener in _CLOSERS and _CLOSERS[opener] in sample[m.end():line_end if line_end >= 0 else None]
        after = sample[m.end():m.end() + 40].split("\n", 1)[0]
        if _DECIMALS.fullmatch(m.group(0)) or len(_WORD.findall(after)) >= 3:
            continue  # values listed, or digits the answer goes on to explain: not falling apart
        if collapsed and not closed:
            return sample[m.start() - (opener in _CLOSERS):m.end()]
    return None
