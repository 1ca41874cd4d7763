"""Line prefixes: what the tools people run jobs through put before each line, and vLLM's own heads.

Three layers, outermost first:
  outer     added by the transport: docker compose (`svc-1  | `), CI viewers (`  | `, GitHub Actions' timestamps),
            kubectl/k9s frames, `srun --label` (`3: `), journald. Learned per log from its first lines: the longest
            shape (digits as wildcards) shared by most of them, plus a short list of known shapes.
  process   vLLM's `(EngineCore_DP0 pid=2817) `, `(VllmWorker rank=0 pid=9) `, Ray's `(RayWorkerWrapper pid=1,
            ip=10.0.0.1) `, torch.distributed's `[rank3]: `.
  logger    vLLM's `ERROR 11-02 07:41:55 [core.py:1098] ` (older: `core.py:1098] `), SGLang's `[2025-03-04 10:11:12
            TP3] `, glog/c10's `[E210 02:06:33.321 ProcessGroupNCCL.cpp:616] ` and `I0612 03:18:40.55 77 x.py:9] `.

Also learned: terminal hard-wrapping at a fixed column (a token split over two lines is joined back).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

SAMPLE_LINES = 64
MIN_SAMPLE = 5
SHARE = 0.6  # a learned prefix must start at least this share of the sample's lines
MAX_PREFIX = 96

_DIGITS = re.compile(r"\d+")
_LEVEL_WORD = re.compile(r"\b(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\b")
_TWO_WORDS = re.compile(r"\b[a-z]{2,} [a-z]{2,} ")  # `segfault at `: prose, where transports write tags and times
# Known outer shapes, tried when the log's lines do not share one literal shape (several services, pods...).
KNOWN_OUTER: tuple[re.Pattern[str], ...] = (
    re.compile(r"^(?!(?:TRACE|DEBUG|INFO|SUCCESS|WARNING|WARN|ERROR|CRITICAL)\s)[\w.\-]+\s+\| "),  # docker compose,
    # several services (not loguru's `ERROR    | ` level column)
    re.compile(r"^\s*\| "),  # CI log viewers
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? "),  # GitHub Actions, kubectl
    re.compile(r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\] "),  # Buildkite
    re.compile(r"^\d{1,5}: "),  # srun --label
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.\-/@]+(?:\[\d+\])?: "),  # journald / syslog
    re.compile(r"^\[pod/[^\]]+\] "),  # kubectl logs --prefix
    re.compile(r"^\[(?:[Ii]nfo|[Ee]rror|[Ww]arn(?:ing)?|[Dd]ebug|[Tt]race|[Cc]ritical|[Ff]atal|INFO|ERROR|WARN"
               r"|WARNING|DEBUG)\] "),  # a log shipper's own level in brackets
    re.compile(r"^│ ?"),  # k9s / boxed terminal frames
)
_FRAME_END = re.compile(r"\s*│\s*$")
_REPEATED = re.compile(r" \[repeated \d+x across cluster\]$")  # Ray's de-duplication suffix

PROCESS = re.compile(r"^(?:\((?P<proc>[A-Za-z_][\w.\-]*(?: (?:rank=\d+|TP\d+|DP\d+|PP\d+|EP\d+))?)"
                     r"(?: pid=\d+)?(?:, ip=[\w.:\-]+)?\) ?|\[(?P<rank>rank\d+)\]: ?)")
LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL")
_LOGGER = re.compile(
    r"^(?:(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?(?P<where>[\w./\-]+"
    r"(?::\d+)?)\](?: |$)"  # vLLM (new: [file.py:N]; old: file.py:N]); an empty record ends at the bracket
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?(?P<sg_rank>(?: (?:TP|DP|EP|PP)\d+)*)\] "  # SGLang
    r"|\[?(?P<glevel>[IWEF])\d{3,4} \d\d:\d\d:\d\d\.\d+ +(?:\d+ )?(?P<gwhere>[\w.\-]+:\d+)\] ?)")  # glog / c10
_GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}


@dataclass(frozen=True)
class Heads:
    """One line taken apart."""

    process: str | None
    level: str | None  # the logger level when the line has a logger head
    where: str | None  # the logger's file:line, which a multi-line record repeats on every line
    content: str


@dataclass
class LinePrefixes:
    """Outer prefixes learned from a log's first lines, and the column it was hard-wrapped at (if any)."""

    outer: list[re.Pattern[str]] = field(default_factory=list)
    framed: bool = False
    wrap_width: int | None = None

    def strip(self, text: str) -> str:
        for pattern in self.outer:
            m = pattern.match(text)
            if m:
                text = text[m.end():]
        if self.framed:
            text = _FRAME_END.sub("", text)
        if text.endswith("cluster]"):
            text = _REPEATED.sub("", text)
        return text


def split_heads(text: str) -> Heads:
    """Process tag and logger head off a line (outer prefixes already stripped)."""
    proc = None
    m = PROCESS.match(text)
    if m:
        proc, text = m.group("proc") or m.group("rank"), text[m.end():]
        m = PROCESS.match(text)  # `[rank0]: (Worker pid=3) ` and `[vllm]: [rank0]: ` stack
        if m:
            proc, text = m.group("proc") or m.group("rank") or proc, text[m.end():]
    level = where = None
    if text[:1] in "DIWECF[":
        m = _LOGGER.match(text)
        if m:
            if m.group("level"):
                level, where = m.group("level"), m.group("where")
            elif m.group("glevel"):
                level, where = _GLOG_LEVELS[m.group("glevel")], m.group("gwhere")
            else:
                where = "sglang" + (m.group("sg_rank") or "")
            text = text[m.end():]
    return Heads(proc, level, where, text)


def learn(lines: list[str]) -> LinePrefixes:
    """Learn the outer prefixes from a log's first lines (ANSI and CR already removed)."""
    sample = [ln for ln in lines[:SAMPLE_LINES * 4] if ln.strip()][:SAMPLE_LINES]
    learned = LinePrefixes()
    for depth in range(3):  # prefixes stack: a shipper's timestamp, then its level, then...
        if len(sample) < MIN_SAMPLE:
            break
        shared = _shared_shape(sample, first=depth == 0)
        if shared is not None and _said_again(shared, sample):
            shared = None
        layer = [shared] if shared is not None else [p for p in KNOWN_OUTER if _share(p, sample) >= SHARE]
        if not layer:
            break
        learned.outer += layer
        for pattern in layer:
            sample = [pattern.sub("", ln, count=1) for ln in sample]
    learned.framed = any(p.pattern.startswith("^│") for p in learned.outer)
    if not learned.framed:
        learned.wrap_width = _wrap_width(lines)
    return learned


def _said_again(pattern: re.Pattern[str], sample: list[str]) -> bool:
    """Whether what follows a shape is mostly one line said again (digits aside): then the shape is the start of a
    message repeated (a fault on every thread, rank or retry), not a transport's prefix on lines saying different
    things."""
    rest = [_DIGITS.sub("0", pattern.sub("", ln, count=1)) for ln in sample if pattern.match(ln)]
    if not rest:
        return False
    return Counter(rest).most_common(1)[0][1] >= SHARE * len(sample)


def _share(pattern: re.Pattern[str], sample: list[str]) -> float:
    return sum(1 for ln in sample if pattern.match(ln)) / len(sample)


def _shared_shape(sample: list[str], first: bool = True) -> re.Pattern[str] | None:
    """The longest prefix shape (digit runs as wildcards) that most lines start with, cut back to end at a space
    and before anything that is a process tag or a logger head of vLLM itself."""
    shapes = [_DIGITS.sub("0", ln[:MAX_PREFIX * 2]) for ln in sample]
    need = max(MIN_SAMPLE, int(SHARE * len(shapes) + 0.999))
    best = ""
    # The common prefix of the `need` most similar lines: try each line as the reference.
    for ref in shapes[:8]:
        lengths = sorted((_common(ref, s) for s in shapes), reverse=True)
        length = lengths[need - 1]
        if length > len(best):
            best = ref[:length]
    best = best[:MAX_PREFIX]
    cut = best.find("(")
    if cut >= 0:
        best = best[:cut]
    words = _TWO_WORDS.search(best)  # a message's words, said on every line (a fault repeated), are not a prefix
    if words:
        best = best[:words.start()]
    # nor is a record's level after its time (loguru's `0-0-0 0:0:0.0 | ERROR    | `); a shipper's severity at the
    # very start of the line (`INFO 2025-...Z [labels] `, GKE) is
    level = _LEVEL_WORD.search(best, 1 if first else 0)
    if level:
        best = best[:level.start()]
    if " " not in best:
        return None
    best = best[:best.rfind(" ") + 1]
    if (len(best.strip()) < 1 or best.count("[") != best.count("]") or best.count("(") != best.count(")")
            or "DSV4_" in best or "###" in best or "Traceback" in best
            or best.startswith("data:")  # a stream's `data: {...}` chunks: content, not a transport's prefix
            or '"' in best  # a quote is content (an access log's request line), never a transport's prefix
            or re.match(r"\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) 0-0 0:0:0", best)
            or re.match(r"\[0-0-0 0:0:0", best) or re.match(r"\s+$", best)):
        return None
    pattern = "^" + "".join(r"\d+" if ch == "0" else re.escape(ch) for ch in best)
    return re.compile(pattern)


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _wrap_width(lines: list[str]) -> int | None:
    """The column a terminal hard-wrapped the log at: several lines exactly that long, none longer, cut mid-text
    (padding spaces end a wrapped line's last row) and followed by a line that does not start like a log line."""
    sample = lines[:4000]
    if len(sample) < MIN_SAMPLE:
        return None
    width = max((len(ln) for ln in sample), default=0)
    if width < 60:
        return None
    cut = [i for i, ln in enumerate(sample[:-1]) if len(ln) == width and not ln.endswith(" ")]
    carried = [i for i in cut if _continuation(sample[i + 1], sample[i])]
    return width if len(carried) >= 2 and len(carried) * 2 >= len(cut) else None


_RULE_LINE = re.compile(r"^\s*([-=_*#~+])\1{2,}\s*$")
_LINE_START = re.compile(r"^(?:\s+File |Traceback|###|TOKEN_IDS|PY_EXIT=|DSV4_|\[DSV4_|FINISH_REASON|REQUEST)")


def _continuation(line: str, previous: str = "") -> bool:
    """Whether `line` can be the rest of a longer line cut before it: not a line that starts like a log line, nor
    one that starts like the line before it (an access log's lines all have the same length and the same head)."""
    return bool(line.strip()) and not (PROCESS.match(line) or _LOGGER.match(line) or _LINE_START.match(line)
                                       or _RULE_LINE.match(line)  # a `-----` rule under a paragraph is its own line
                                       or any(p.match(line) for p in KNOWN_OUTER)
                                       or (len(previous) >= 12 and line[:12] == previous[:12]))


def continues(line: str, following: str, width: int | None) -> bool:
    """Whether a physical line was cut by hard-wrapping and goes on in the following one."""
    return (width is not None and len(line) == width and not line.endswith(" ") and _continuation(following, line))
