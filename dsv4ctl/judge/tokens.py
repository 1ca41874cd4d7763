"""Request-level rules: one request's printed tokens (or text) -> its problems.

A request is judged the moment its block is complete, so a log with more requests than the scanner keeps in memory
is still judged request by request (a cap drops detail, never judgement). Token ids are accumulated as they stream
in, with running BOS and repeat runs, so a list longer than what is kept is still judged whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .outputs import BOS_TEXT, text_problems
from .values import quoted

BOS_MARKERS = frozenset({BOS_TEXT, "BOS", "<s>"})
MAX_KEPT_IDS = 1 << 16  # ids of one request kept for comparisons and the verdict; the rest judged as they stream
MAX_ID_DIGITS = 12  # a vocabulary id never has more; longer is garbage (and int() of 4300+ digits raises)
MAX_UNPARSED = 8


@dataclass(frozen=True)
class VerdictOptions:
    bos_id: int = 0
    max_repeat_run: int = 8
    expected_tokens: int | None = None  # max_tokens asked for
    ignore_eos: bool | None = None
    expected_requests: int | None = None
    golden: tuple[tuple[int, ...] | None, ...] = ()  # expected greedy token ids per request
    golden_logprobs: tuple[Any, ...] = ()  # per request: the golden's top-N [token_id, logprob] pairs per position

    def merged_with(self, expect: dict[str, Any]) -> "VerdictOptions":
        """Fill what the caller left unset from the probe's DSV4_EXPECT line (already type-checked by the scan)."""
        return VerdictOptions(
            bos_id=self.bos_id if self.bos_id != 0 or "bos_id" not in expect else expect["bos_id"],
            max_repeat_run=expect.get("max_repeat_run", self.max_repeat_run) if self.max_repeat_run == 8
            else self.max_repeat_run,
            expected_tokens=self.expected_tokens if self.expected_tokens is not None else expect.get("max_tokens"),
            ignore_eos=self.ignore_eos if self.ignore_eos is not None else expect.get("ignore_eos"),
            expected_requests=self.expected_requests if self.expected_requests is not None
            else expect.get("n_requests"),
            golden=self.golden,
            golden_logprobs=self.golden_logprobs,
        )


@dataclass
class RequestBlock:
    line: int
    index: int | None = None
    token_ids: list[int] = field(default_factory=list)  # the first MAX_KEPT_IDS ids
    ids_gaps: list[int] = field(default_factory=list)  # where the log abbreviated the list with `...`
    ids_unparsed: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    token_decode: list[str] | None = None
    output_repr: str | None = None
    output: str | None = None
    logprobs: list[list[list[float]]] | None = None  # per position, the top-N [token_id, logprob] pairs
    source: str = "probe"  # probe | generated_text | request_output: who printed it
    # Running figures over every id, kept ones and the rest alike (filled by IdStream).
    n_ids: int = 0
    stream_max_repeat: int = 0
    stream_bos_run: int = 0
    n_unparsed: int = 0


class IdStream:
    """Token ids arriving piece by piece (a wrapped list, or one line of millions of ids): every id counted and
    checked, the first MAX_KEPT_IDS kept."""

    def __init__(self, request: RequestBlock, bos_id: int) -> None:
        self.request, self.bos_id = request, bos_id
        request.token_ids, request.ids_gaps, request.ids_unparsed = [], [], []
        request.n_ids = request.stream_max_repeat = request.stream_bos_run = request.n_unparsed = 0
        self.partial = ""
        self.last: int | None = None
        self.repeat = self.bos = 0

    def feed(self, text: str) -> None:
        text = self.partial + text
        cut = text.rfind(",")
        self.partial, text = (text[cut + 1:], text[:cut]) if cut >= 0 else (text, "")
        if len(self.partial) > 4 * MAX_ID_DIGITS + 64:  # no comma for a long stretch: garbage, judged as such
            self._item(self.partial)
            self.partial = ""
        for item in text.split(","):
            self._item(item)

    def close(self) -> None:
        self._item(self.partial)
        self.partial = ""

    def _item(self, item: str) -> None:
        item = item.strip().strip("[]()").strip()
        if not item:
            return
        request = self.request
        if item in ("...", "…"):
            request.ids_gaps.append(len(request.token_ids))
            self.last, self.repeat, self.bos = None, 0, 0
            return
        digits = item[1:] if item[:1] == "-" else item
        if not (digits.isascii() and digits.isdigit()) or len(digits) > MAX_ID_DIGITS:
            request.n_unparsed += 1
            if len(request.ids_unparsed) < MAX_UNPARSED:
                request.ids_unparsed.append(item[:40])
            self.last, self.repeat = None, 0
            return
        token = int(item)
        request.n_ids += 1
        if len(request.token_ids) < MAX_KEPT_IDS:
            request.token_ids.append(token)
        self.repeat = self.repeat + 1 if token == self.last else 1
        self.bos = self.bos + 1 if token == self.bos_id else 0
        self.last = token
        request.stream_max_repeat = max(request.stream_max_repeat, self.repeat)
        request.stream_bos_run = max(request.stream_bos_run, self.bos)


def parse_token_ids(text: str, bos_id: int = 0) -> tuple[list[int], list[int], list[str]]:
    """Parse `[1, 2, ..., 0]` leniently: ints kept, where `...` cut the list noted (as the index of the id that
    follows the gap), anything else (log garbling) listed."""
    request = RequestBlock(line=0)
    stream = IdStream(request, bos_id)
    stream.feed(text)
    stream.close()
    return request.token_ids, request.ids_gaps, request.ids_unparsed


@dataclass
class RequestVerdict:
    index: int
    line: int
    token_ids: list[int]
    n_tokens: int
    finish_reason: str | None
    bos_run: int
    max_repeat_run: int
    problems: list[str] = field(default_factory=list)
    ids_elided: bool = False
    output_repr: str | None = None
    source: str = "probe"


def longest_run(flags: list[bool | None]) -> int:
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def bos_flags(request: RequestBlock, bos_id: int) -> list[bool | None]:
    """Per position: BOS or not; None marks a `...` gap, which no run may cross."""
    ids = request.token_ids
    if request.ids_gaps:  # an abbreviated list: positions of the decode list no longer line up
        flags: list[bool | None] = []
        for i, token in enumerate(ids):
            if i in request.ids_gaps:
                flags.append(None)
            flags.append(token == bos_id)
        return flags
    decode = request.token_decode or []
    n = max(len(ids), len(decode))
    return [(i < len(ids) and ids[i] == bos_id) or (i < len(decode) and decode[i] in BOS_MARKERS)
            for i in range(n)]


def max_repeat(ids: list[int], gaps: list[int] = ()) -> int:
    best = run = 0
    for i, token in enumerate(ids):
        run = run + 1 if i and i not in gaps and token == ids[i - 1] else 1
        best = max(best, run)
    return best


def first_divergence(golden: tuple[int, ...] | list[int], ids: list[int]) -> tuple[int, int | None, int | None] | None:
    """The first position where the tokens differ from the golden: (position, expected, got), or None."""
    for position in range(max(len(golden), len(ids))):
        expected = golden[position] if position < len(golden) else None
        got = ids[position] if position < len(ids) else None
        if expected != got:
            return position, expected, got
    return None


def _top_ids(logprobs: Any, position: int) -> set[int] | None:
    if not isinstance(logprobs, list) or position >= len(logprobs) or not isinstance(logprobs[position], list):
        return None
    try:
        return {int(pair[0]) for pair in logprobs[position]}
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def close_by_logprobs(position: int, expected: int | None, got: int | None, run_logprobs: Any,
                      golden_logprobs: Any) -> bool:
    """vLLM's check_logprobs_close: at the first differing position, each side's token must be in the other
    side's top-N logprobs; after that the sequences may legitimately diverge. Without the run's logprobs at that
    position, a difference is a difference."""
    if expected is None or got is None:
        return False
    run_top = _top_ids(run_logprobs, position)
    if run_top is None or expected not in run_top:
        return False
    golden_top = _top_ids(golden_logprobs, position)
    return golden_top is None or got in golden_top


def judge_request(request: RequestBlock, opts: VerdictOptions) -> RequestVerdict:
    ids = request.token_ids
    n_tokens = max(request.n_ids, len(ids))
    bos = max(longest_run(bos_flags(request, opts.bos_id)), request.stream_bos_run)
    repeat = max(max_repeat(ids, request.ids_gaps), request.stream_max_repeat)
    problems = []
    printed_text_only = request.source != "probe" and not ids and not request.ids_gaps
    if bos >= 2:
        problems.append(f"a run of {bos} BOS tokens (id {opts.bos_id})")
    if repeat >= opts.max_repeat_run:
        problems.append(f"one token repeated {repeat} times in a row (limit {opts.max_repeat_run})")
    if not ids and not request.ids_gaps and (not printed_text_only or request.source == "printed_ids"):
        problems.append("no tokens generated")
    if request.ids_unparsed or request.n_unparsed:
        shown = ", ".join(request.ids_unparsed[:3])
        problems.append(f"unreadable token ids ({max(request.n_unparsed, len(request.ids_unparsed))}): {shown}")
    if (opts.ignore_eos and opts.expected_tokens and not request.ids_gaps and 0 < n_tokens < opts.expected_tokens
            and request.source == "probe"):
        problems.append(f"{n_tokens} tokens, {opts.expected_tokens} asked with ignore_eos")
    if request.source != "probe" and request.output is not None:
        problems += [p for p in text_problems(request.output, opts.max_repeat_run)
                     if not (ids and p.startswith(("one character", "one word")))]
    index = request.index if request.index is not None else 0
    golden = opts.golden[index] if index < len(opts.golden) else None
    divergence = first_divergence(golden, ids) if golden is not None and not request.ids_gaps else None
    if divergence is not None:
        position, expected, got = divergence
        golden_top = opts.golden_logprobs[index] if index < len(opts.golden_logprobs) else None
        if not close_by_logprobs(position, expected, got, request.logprobs, golden_top):
            problems.append(f"diverges from the golden at token {position}: expected {expected}, got {got}")
    return RequestVerdict(index=index, line=request.line, token_ids=ids, n_tokens=n_tokens,
                          finish_reason=request.finish_reason, bos_run=bos, max_repeat_run=repeat, problems=problems,
                          ids_elided=bool(request.ids_gaps), source=request.source,
                          output_repr=request.output_repr if request.output_repr is not None or request.output is None
                          else quoted(request.output[:4096]))
