"""Outputs printed over several lines, or under a label, by people's own scripts (issue 21, pass 5):

  pretty JSON     an OpenAI body printed with indentation (`json.dumps(r, indent=2)`, `jq`): the `"content"` of a
                  choice's message (not a user's or system's message of a request body) or a choice's `"text"`,
                  each on its own line inside `"choices": [`
  id lists        a bare token-id list or tensor cut over lines (`tensor([[151643, 151643, ...,` then more rows,
                  `[0, 0, 0, ...,` then ` 0, 0]`), judged once it closes (or when the log ends)
  labelled lines  `Response: ...`, `Output: ...`, `Answer: ...`, `Chat response: ...`, `O/p: ...`,
                  `Assistant: ...`, under a logger's head too; kept aside and used only when the log holds no probe
                  marker and no output in another shape (see `LabelledLines`)

  NaN rows       >= 5 rows of printed numbers in a row, each with >= 2 finite decimals and a `nan` value (a
                  log-prob comparison whose one column is NaN), in a log with no probe marker: `nonfinite`

One-line shapes are `outputs.read_outputs`; this module holds the state the multi-line ones need.
"""

from __future__ import annotations

import re

from . import levels
from .outputs import MAX_TEXT, PrintedOutput, json_string

# A log's first lines are all read, anchors or not, until the engine is ready: a paste into a thread is short, and
# its runtime's words (`TT_THROW`, `| critical |`, an answer printed bare or under a label) are not worth an anchor
# that every byte of a 512 MiB log would pay for.
READ_ALL_LINES = 1024
CHOICES_LINES = 200  # lines of a pretty body after `"choices": [` in which an answer is looked for
MAX_LIST_LINES = 400  # rows of one id list
MAX_LABELLED = 16

_CHOICES = re.compile(r'^\s*"choices"\s*:\s*\[')
_ROLE = re.compile(r'^\s*"role"\s*:\s*"(?P<role>\w+)"')
_ANSWER = re.compile(r'^\s*"(?P<key>content|text)"\s*:\s*"(?P<s>(?:[^"\\]|\\.)*)"\s*,?\s*$')
_LIST_OPEN = re.compile(r"^\s*(?:tensor\()?\[\[?(?P<ids>\s*-?\d{1,9}(?:\s*,\s*(?:-?\d{1,9}|\.\.\.))*)\s*,\s*$")
_LIST_ROW = re.compile(r"^\s*\[?(?P<ids>-?\d{1,9}(?:\s*,\s*(?:-?\d{1,9}|\.\.\.))*)\s*,?\s*(?P<close>\]\]?(?:\s*,\s*"
                       r"device=\S+)?\)?)?\s*$")
_LABEL = re.compile(r"^\s*(?:(?:chat|model|final|llm|assistant|generated|decoded|predicted)[ _])?"
                    r"(?:response|answer|completion|reply|output|generation|generated[ _]text|o/p|assistant)s?"
                    r"(?:\s*\[?\d{1,4}\]?)?\s*[:：]\s*(?P<text>\S.*)$", re.I)
_NOT_AN_ANSWER = re.compile(r"^(?:none|null|nil|\[\]|\{\}|true|false|\d+|<\w+ \[\d+\]>)$|^(?:/|\./|~/|[A-Za-z]:\\)"
                            r"|^\S+://|^\w[\w.]*=\S", re.I)


class PrintedLines:
    """Feed each line the scanner reads; `feed` returns the outputs a multi-line shape finished on it, [] when the
    line belongs to an open shape, None when it is none of this module's business."""

    def __init__(self) -> None:
        self.first_line = 0  # the line where the shape `feed` or `close` last finished began
        self._choices_left = 0  # lines left in which a pretty body's answer is looked for
        self._role: str | None = None
        self._ids: list[int] | None = None  # an id list being read
        self._rows = 0
        self._list_line = 0

    def feed(self, line_no: int, content: str) -> list[PrintedOutput] | None:
        if self._ids is not None:
            return self._list_row(content)
        if content[:1] in ("[", "t", " ") and (m := _LIST_OPEN.match(content)):
            ids = _ints(m.group("ids"))
            if len(ids) >= 4:
                self._ids, self._rows, self._list_line = ids, 1, line_no
                return []
        if self._choices_left:
            self._choices_left -= 1
            if (m := _ROLE.match(content)) is not None:
                self._role = m.group("role")
                return None
            m = _ANSWER.match(content)
            if m is not None and (m.group("key") == "text" or self._role not in ("user", "system", "developer")):
                self.first_line = line_no
                return [PrintedOutput(json_string(m.group("s"))[:MAX_TEXT], None)]
        if '"choices"' in content and _CHOICES.match(content):
            self._choices_left, self._role = CHOICES_LINES, None
        return None

    def close(self) -> list[PrintedOutput]:
        """What an open shape holds when the log ends (a list cut by the paste is judged as far as it goes)."""
        ids, self._ids = self._ids, None
        self.first_line = self._list_line
        return [PrintedOutput(None, ids)] if ids and len(ids) >= 8 else []

    def _list_row(self, content: str) -> list[PrintedOutput] | None:
        m = _LIST_ROW.match(content)
        if m is None or self._rows >= MAX_LIST_LINES:
            return self.close() or None
        self._ids += _ints(m.group("ids"))
        self._rows += 1
        return self.close() if m.group("close") else []


class LabelledLines:
    """`Label: text` lines of a short paste, kept aside (line, text)."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []

    def add(self, line_no: int, content: str) -> bool:
        if len(self.found) >= MAX_LABELLED or content[:1] in (" ", "\t", "{", "[", '"', "'"):
            return False
        m = _LABEL.match(content)
        if m is None:  # under a logger's head: `... - INFO - Output: ...`, `INFO ... file.py:12] Response: ...`
            record = levels.text_level(content)
            message = record[1] if record else content
            at = message.find("] ", 0, 120)
            m = _LABEL.match(message) or (_LABEL.match(message, at + 2) if at >= 0 else None)
            if m is None:
                return False
        text = m.group("text").strip()
        if _NOT_AN_ANSWER.search(text):
            return False
        self.found.append((line_no, text[:MAX_TEXT]))
        return True


_DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?![\w.])")
_NAN_VALUE = re.compile(r"(?:[:=]\s*|\s)(?:nan|NaN)(?![\w.])")
NAN_ROWS = 5


class NanRows:
    """Consecutive rows of printed numbers holding a `nan` value: (first line, its text, rows) of the longest run."""

    def __init__(self) -> None:
        self.best: tuple[int, str, int] | None = None
        self._run: tuple[int, str, int] | None = None
        self._last = 0

    def add(self, line_no: int, content: str) -> None:
        row = "nan" in content.lower() and _NAN_VALUE.search(content) and len(_DECIMAL.findall(content)) >= 2
        if not row:
            return
        if self._run is not None and line_no == self._last + 1:
            self._run = (self._run[0], self._run[1], self._run[2] + 1)
        else:
            self._run = (line_no, content.strip()[:300], 1)
        self._last = line_no
        if self.best is None or self._run[2] > self.best[2]:
            self.best = self._run


def nan_rows(facts, rows: NanRows) -> tuple[int, str, int] | None:
    """The run of NaN rows to report as non-finite numbers, in a log with no probe marker, else None."""
    if rows.best is None or rows.best[2] < NAN_ROWS or facts.py_exit is not None or facts.job_fields:
        return None
    return rows.best


def labelled_outputs(facts, labelled: LabelledLines) -> list[tuple[int, str]]:
    """The labelled answers to judge: only in a log with no probe marker and no output read in another shape."""
    if facts.request_count or facts.py_exit is not None or facts.job_fields or facts.probe_verdict:
        return []
    return labelled.found


def _ints(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"-?\d{1,12}", text)]
