"""Answers pasted as plain text, with no marker: the bare lines of a short paste, read as one block of text.

A thread's paste often holds only a command and what the model printed (`hello@ ⁇  ⁇  ⁇ ...`, `And fear fear fear`,
word soup across many short lines, a chat template's special token on line after line). Such a block has no shape
the scanner can name, so it is kept aside while the log is read line by line (a short paste, before the engine is
ready) and judged only at the end, and only when the log holds nothing else: no output read in a known shape, no
error of any kind. Then the text rules judge each block and each of its paragraphs; the first degenerate one is a
result (source `plain_text`) whose shown text starts at the line where the problem begins, the line an engineer
quotes.

A bare line is one the scanner read and found nothing in: no logger level, no marker, no error, no traceback frame.
Any other line ends the block, and so does a bare line that reads as a log's, not a model's (`log_line`): a
timestamp, a hex id or address, a `file:line`, a command with its flags, `key=value` fields, an aligned `Key:  value`
table, Python's `^^^^` markers, a `=== banner ===`. A bare line that names an error (`... failed`, `Error ...`)
means the log is a failure the scanner has no name for: then no block is judged at all (a log is not an answer). Blocks that hold no letters, or less than MIN_CHARS of text, are not kept. A line of
several words equal to the one before it is kept once: a log repeats whole lines by design (each rank prints the
same debug line, a poll prints its wait), while a model's loop is judged inside the text it printed (or one token
per line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_BLOCKS = 16
MAX_BLOCK_CHARS = 1 << 14
MIN_CHARS = 24
PROGRESS = re.compile(r"\d%\s*\||\d+/\d+ \[|\bit/s\]|\bs/it\]")  # tqdm bars: their lines repeat by design


@dataclass
class PlainBlock:
    line: int  # the 1-based line of the block's first line
    lines: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # each kept line's distance from the block's first line
    chars: int = 0

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


# What a log's lines have and a model's prose does not.
_LOG_LINE = re.compile(
    r"\b\d{1,2}:\d{2}:\d{2}\b|\b\d{4}[-/]\d{2}[-/]\d{2}\b"  # a time of day, a date
    r"|^\s*(?:data: ?)?\{\"\w+\":|\b\d{1,3}(?:\.\d{1,3}){3}\b"  # a JSON record (or an SSE chunk of one), an IP address
    r"|\b0x[0-9a-fA-F]{4,}|\b(?=[a-f]*\d)(?=\d*[a-f])[0-9a-f]{12,}\b"  # an address, a hash or id
    r"|\w\.[A-Za-z]{1,4}:\d+\b"  # file.py:123
    r"|(?:^|\s)--?[A-Za-z][\w-]*(?:[= ]\S+)?\s+--?[A-Za-z]"  # a command with two flags
    r"|^\s*(?:\$|\+{1,3}|#) \S|^\(\w+\) \S+@\S+[:$]|^\S+@[\w.-]+:\S*[$#]"  # a shell prompt or its trace
    r"|(?:\b[A-Za-z_][\w.]*=\S+.*){2}"  # key=value fields
    r"|^\s*[A-Za-z][\w .()/-]{0,40}:(?:\s{2,}|\t)\S"  # an aligned `Key:   value` table (lscpu, env dumps)
    r"|^\t\w[\w ]{0,30}: \S"  # Ray's tab-indented `\tkey: value`
    r"|^\s*[~^]{3,}\s*$"  # Python's markers under the code of a frame
    r"|^\s*[=*#-]{3,} ?\S.*?\S ?[=*#-]{3,}\s*$"  # a `=== 1 failed in 2.0s ===`, `----Latency----` banner
    r"|(?:[A-Za-z][\w /()-]{0,40}:\s*-?\d[\d.]*%?(?:\s*[A-Za-z/]+)?,\s*){3}")  # `Name: 0.0 tokens/s, ...` fields
_ERROR_WORDS = re.compile(r"\b(?:error|exception|fatal|failed|failure|panic|panicked|aborted|traceback|segfault"
                          r"|core dumped|denied|refused)\b", re.I)


def log_line(content: str) -> bool:
    """Whether a bare line reads as a log's line (a record, a command, a table row), not a model's words."""
    return bool(_LOG_LINE.search(content))


class PlainBlocks:
    """Collects runs of bare lines; `add` one per bare line, `end` at any other line."""

    def __init__(self) -> None:
        self.blocks: list[PlainBlock] = []
        self._open: PlainBlock | None = None
        self.names_error = False  # a bare line said an error the scanner has no name for: the log is a log

    def add(self, line_no: int, content: str) -> None:
        if log_line(content) or _ERROR_WORDS.search(content):
            self.names_error = self.names_error or bool(_ERROR_WORDS.search(content))
            self.end()
            return
        block = self._open
        if block is None:
            if len(self.blocks) >= MAX_BLOCKS or not content.strip():
                return
            block = self._open = PlainBlock(line_no)
        if block.lines and content == block.lines[-1] and len(content.split()) >= 2:
            return  # a record-like line said again (one token per line is how a model's loop prints)
        if block.chars < MAX_BLOCK_CHARS:
            block.lines.append(content[:MAX_BLOCK_CHARS])
            block.offsets.append(line_no - block.line)
            block.chars += len(content) + 1

    def end(self) -> None:
        block, self._open = self._open, None
        if block is None:
            return
        while block.lines and not block.lines[-1].strip():
            block.lines.pop()
            block.offsets.pop()
        text = block.text
        if len(text.strip()) >= MIN_CHARS and any(ch.isalpha() for ch in text):
            self.blocks.append(block)


@dataclass(frozen=True)
class PlainAnswer:
    line: int  # where the shown text starts
    text: str  # the block or paragraph judged degenerate
    shown: str  # from the line where the problem begins


def degenerate_answer(blocks: list[PlainBlock], problems_of) -> PlainAnswer | None:
    """The first block (or paragraph of one) the text rules call degenerate, or None. `problems_of(text)` is the
    text rules with the run's repeat limit."""
    for block in blocks:
        for first, lines in _pieces(block):
            text = "\n".join(lines)
            problems = problems_of(text)
            if problems:
                at = first + _problem_line(lines, problems[0])
                return PlainAnswer(block.line + block.offsets[at], text, "\n".join(block.lines[at:first + len(lines)]))
    return None


def _pieces(block: PlainBlock):
    """(index of the first line, lines): the whole block, then each paragraph (lines between blank lines) when
    there are several."""
    yield 0, block.lines
    start, para = None, []
    paragraphs = []
    for offset, text in enumerate(block.lines):
        if text.strip():
            if start is None:
                start = offset
            para.append(text)
        elif para:
            paragraphs.append((start, para))
            start, para = None, []
    if para:
        paragraphs.append((start, para))
    if len(paragraphs) > 1:
        yield from paragraphs


_QUOTED = re.compile(r"\(?'(.{1,24}?)'")
_SPECIAL_SAID = re.compile(r"special token \((.{1,40}?)\) said")
_DIGITS_FROM = re.compile(r"collapsing into digits: '(.{1,16})")


def _problem_line(lines: list[str], problem: str) -> int:
    """Index of the line where the problem begins: the start of a run or loop that goes to the end, the line of the
    first word the problem quotes, else the first line with text."""
    if "to the end" in problem:
        return _tail_start(lines)
    if "scripts in one short answer" in problem or "emoji soup" in problem:  # where the scripts meet, the emoji
        from .textrules import emoji_count, scripts_of

        def weight(i: int):
            return emoji_count(lines[i])[0] if "emoji" in problem else len(scripts_of(lines[i]))

        return max(range(len(lines)), key=lambda i: (weight(i), -i))
    m = _SPECIAL_SAID.search(problem) or _DIGITS_FROM.search(problem) or _QUOTED.search(problem)
    if m:
        needle = m.group(1)
        for i, text in enumerate(lines):
            if needle in text:
                return i
    return next((i for i, text in enumerate(lines) if text.strip()), 0)


def _tail_start(lines: list[str]) -> int:
    """The first line of the repetition that ends the text: the earliest line whose words all occur in the last
    line (a repeated word, or the unit of a loop)."""
    last = next((t for t in reversed(lines) if t.strip()), "")
    vocab = set(last.split())
    at = len(lines) - 1
    for i in range(len(lines) - 1, -1, -1):
        words = lines[i].split()
        if not words:
            continue
        if any(w in vocab for w in words):
            at = i
        if not all(w in vocab for w in words):
            break
    return at


def plain_result(facts, plain: PlainBlocks, max_repeat_run: int) -> PlainAnswer | None:
    """The plain-text answer to judge, when the log holds no output in a known shape and no error of any kind."""
    blocks = plain.blocks
    if not blocks or plain.names_error or facts.request_count or facts.nonfinite or facts.http_500_count:
        return None
    if (facts.tracebacks or facts.line_errors or facts.orphan_exceptions or facts.logged_errors
            or facts.scheduler_events or facts.setup_errors or facts.unreadable):
        return None
    from .textrules import text_problems

    return degenerate_answer(blocks, lambda text: text_problems(text, max_repeat_run))
