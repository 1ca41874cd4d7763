"""Text rules: printed output text (no token ids) -> its problems. Stdlib only, and tuned to keep real answers
coherent: English, Chinese, Japanese, code, lists and Markdown (docs/verdict.md gives the measured false-positive
rate and what it was measured on).

  empty                  nothing but whitespace
  BOS text run           two or more BOS texts in a row
  repeated to the end    one character or one word repeated >= max(max_repeat_run, 8) times to the end
  loop                   the answer ends in >= 3 repetitions of one unit of >= 4 characters holding a letter, over
                         >= 30 characters (`The answer is 4. The answer is 4. ...`, a chat template echoed)
  one char most of it    one character repeated >= 32 times making up half the answer (not a separator line)
  digit soup             one letter or digit repeated >= 12 times in an answer that is < 30% letters
  NUL / U+FFFD           >= 3 NUL characters, or >= 3 replacement characters (undecodable bytes)
  token soup             a word mixing scripts that never share a word, or >= 3 scripts in one short answer
                         (Latin, CJK and kana together are Japanese and allowed)
  word salad             >= 15 Latin words of prose (not code) with almost no function words, or >= 20 words
                         of which many are two-letter fragments that no language writes
  past the end of turn   after the chat template's end-of-turn token (`<|im_end|>`, `<|eot_id|>`, `</s>`...), one
                         special token >= 3 times with little text between: the template echoed in a loop

A cut paste (the last word a prefix of the one before it: `fear fear fea`) is judged as if the cut word were not
there.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

from .textloops import SPECIAL_TOKEN, block_loop, digit_collapse
from .values import quoted

BOS_TEXTS = ("<｜begin▁of▁sentence｜>", "<s>", "<|begin_of_text|>")

_SCRIPTS = (("latin", re.compile(r"[A-Za-z\u00c0-\u024f\u1e00-\u1eff]")), ("cyrillic", re.compile(r"[\u0400-\u04ff]")),
            ("greek", re.compile(r"[\u0370-\u03ff]")), ("arabic", re.compile(r"[\u0600-\u06ff]")),
            ("hebrew", re.compile(r"[\u0590-\u05ff]")), ("thai", re.compile(r"[\u0e00-\u0e7f]")),
            ("devanagari", re.compile(r"[\u0900-\u097f]")), ("hangul", re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")),
            ("kana", re.compile(r"[\u3040-\u30ff]")), ("cjk", re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")))
# Other scripts, named by unicodedata (Armenian, Georgian, the Indic scripts but Devanagari, Tibetan, Myanmar,
# Khmer, Lao, Ethiopic, Cherokee, Mongolian, Syriac, Thaana): a model's token soup draws on every script it knows.
_OTHER_SCRIPT = re.compile(r"[\u0530-\u058f\u0700-\u07bf\u0980-\u0dff\u0e80-\u0fff\u10a0-\u13ff\u1780-\u18af]")
# Scripts that share words in real text: Chinese and Japanese write English words without spaces, Japanese mixes
# kana and kanji in one word, Korean attaches its particles to English words (`Context를`) and writes some Hanja.
_ALLOWED_MIX = (frozenset({"latin", "cjk"}), frozenset({"kana", "cjk"}), frozenset({"latin", "kana"}),
                frozenset({"latin", "kana", "cjk"}), frozenset({"latin", "hangul"}), frozenset({"hangul", "cjk"}),
                frozenset({"latin", "hangul", "cjk"}))
SOUP_SHORT = 600  # ">= 3 scripts" is judged on answers up to this long (a long answer may quote several languages)

# Function words of the Latin-script languages models answer in: prose has them in almost every phrase.
FUNCTION_WORDS = frozenset("""
a an the and or but if of to in on at by for with from as is are was were be been being am it its this that these
those there here he she they we you i me my our your his her their them us not no so do does did have has had will
would can could should may might must shall than then what which who whom whose when where why how all any each
some such only also very just more most other into over under about after before up out between through during
de la le les des du un une et en est que qui dans pour pas par sur au aux ce il elle ils nous vous se sa son ses
el los las y es por con para una del al lo como su se mas pero sus le ya o este esta
der die das und ist zu den von mit sich des auf fur im dem nicht ein eine als auch es an er so dass wie noch nur
il di che e la per un una sono del della non si le da con gli
o os as um uma com nao para do da dos das em no na
""".split())
# Two-letter words any of those languages writes; other two-letter fragments are a sign of token soup.
SHORT_WORDS = FUNCTION_WORDS | frozenset("""
ok vs eg ie id oh hi ah uh yes go ex re mr ms dr st km kg cm mm ml mb gb tb kb ms ns us hz px pt ai ui ux os io
ip db js py ts tv pc uk eu un ad pm bc vi sh cd ls mv cp rm fs qa hr ex nd rd th ll ve
""".split())
_CODE_CHARS = frozenset("{}()[];=<>_/\\|`#$*")
_WORD = re.compile(r"[^\W\d_]+")
_NUL_RUN = re.compile("\x00{3,}")


def text_problems(text: str, max_repeat_run: int) -> list[str]:
    problems = []
    if not text.strip():
        return ["empty output"]
    run = _bos_run(text)
    if run >= 2:
        problems.append(f"a run of {run} BOS texts")
    limit = max(max_repeat_run, 8)
    tail = _tail_run(text)
    body = text.rstrip()
    # A `----` line under an answer (printed by the script, not the model): the run fills its own line.
    separator = body[-1:] in _SEPARATORS and bool(body[:-tail].strip()) and (
        body[:len(body) - tail].endswith("\n") or bool(_BANNER.fullmatch(body.rsplit("\n", 1)[-1])))
    if tail >= limit and not separator:
        problems.append(f"one character repeated {tail} times to the end")
    words = text.split()
    word_tail = _tail_run(words[:-1] if _cut_word(words) else words)
    if word_tail >= limit:
        problems.append(f"one word repeated {word_tail} times to the end")
    if not problems:
        char, longest = _longest_run(text)
        if longest >= 32 and longest * 2 >= len(text.strip()) and char not in _SEPARATORS:
            problems.append(f"one character ({char!r}) repeated {longest} times: most of the answer")
        elif longest >= 12 and char.isalnum() and _letters(text) < 0.3:
            problems.append(f"digit soup: {char!r} repeated {longest} times in an answer of few letters")
    if not problems:
        loop = _tail_loop(text)
        if loop is not None:
            unit, reps = loop
            problems.append(f"a loop to the end: {quoted(unit[:40])} repeated {reps} times")
        else:
            problems += _loop_inside(text)
    nuls = text.count("\x00")
    if nuls >= 3:
        problems.append(f"{nuls} NUL characters" + (" in a run" if _NUL_RUN.search(text) else ""))
    if text.count("\ufffd") >= 3:
        problems.append(f"{text.count(chr(0xfffd))} replacement characters (undecodable bytes)")
    problems += _soup(text, words)
    past_end = _past_end_of_turn(text) or _think_ends(text) or _turns_said_again(text)
    if past_end:
        problems.append(past_end)
    if not problems:
        special = _special_run(text)
        if special:
            problems.append(special)
    return problems


# Special tokens printed as text: `<unk>`, `<pad>`, `<extra_id_0>`, `<0x0A>`, `<|endoftext|>`, `[UNK]`, `⁇`.
_ANY_SPECIAL = re.compile(r"<(?:unk|pad|mask|s|/s|eos|bos|sep|cls|extra_id_\d{1,3}|unused\d{1,3}|0x[0-9A-Fa-f]{2})>"
                          r"|<\|[A-Za-z_]{2,24}\|>"
                          r"|<｜[^｜<>]{2,30}｜>|\[(?:UNK|PAD|MASK|SEP|CLS)\]|⁇")


def _special_run(text: str) -> str | None:
    """One special token said >= 8 times and making up >= 40% of the answer's visible text: the model printing its
    vocabulary's reserved tokens, not words (a prompt printed whole holds a few, between long turns)."""
    sample = text[:LOOP_WINDOW]
    found = _ANY_SPECIAL.findall(sample)
    if len(found) < 8:
        return None
    token = max(set(found), key=found.count)
    said = found.count(token)
    visible = sum(not ch.isspace() for ch in sample)
    if said >= 8 and said * len(token) * 5 >= 2 * visible:
        return f"a special token ({token}) said {said} times: most of the answer"
    # many reserved tokens, none of them words (`<unk><unused17><unused3><bos>...`): >= 12, >= 70% of the text
    if len(found) >= 12 and sum(map(len, found)) * 10 >= 7 * visible and len(set(found)) >= 3:
        return f"{len(found)} special tokens ({', '.join(sorted(set(found))[:3])}, ...): most of the answer"
    return None


def _loop_inside(text: str) -> list[str]:
    """A loop that does not reach the end (textloops): a block said >= 3 times in a row."""
    block = block_loop(text)
    if block is not None:
        unit, reps = block
        return [f"a loop: {quoted(unit[:40])} repeated {reps} times in a row"]
    stretch = digit_collapse(text)
    if stretch is not None:
        return [f"collapsing into digits: {quoted(stretch[:40])}"]
    return []


def _cut_word(words: list[str]) -> bool:
    return len(words) >= 3 and words[-1] != words[-2] and words[-2].startswith(words[-1])


# Chat-template special tokens: `<|im_start|>`, `<|eot_id|>`, DeepSeek's `<｜end▁of▁sentence｜>`, `</s>`.
_SPECIAL = re.compile(SPECIAL_TOKEN)
_SPECIAL_SPLIT = re.compile("(" + _SPECIAL.pattern + ")")
_LEADING_WORD = re.compile(r"[^\W\d_]+")
_ROLES = frozenset("system user assistant human bot gpt tool model ai".split())
_END_OF_TURN = re.compile(r"<\|(?:im_end|endoftext|eot_id|end_of_text|end|eom_id)\|>|<｜end▁of▁sentence｜>|</s>")


def _past_end_of_turn(text: str) -> str | None:
    """The answer goes on past its end-of-turn token: >= 3 times, a start token that names no role (a prompt printed
    whole has `<|im_start|>user ...`), or a special token said again with nothing between."""
    end = _END_OF_TURN.search(text)
    if end is None:
        return None
    after = text[end.start():end.start() + LOOP_WINDOW]
    parts = _SPECIAL_SPLIT.split(after)  # text, token, text, token, ..., text
    loops = 0
    for i in range(1, len(parts), 2):
        token, following = parts[i], parts[i + 1]
        if "start" in token or "begin" in token:
            said = following.replace("\\n", " ").strip()
            role = _LEADING_WORD.match(said)
            # nothing, or words that name no role; quotes and commas are a list of tokens in code (`stop=[...]`)
            loops += not said or (role is not None and role.group(0).lower() not in _ROLES)
        elif not following.strip() and i + 2 < len(parts) and parts[i + 2] == token:
            loops += 1
    if loops >= 3:
        return f"the chat template past the end of turn ({loops} tokens looping): {after[:60]!r}"
    return None


# A turn's start in the common chat templates: the role it opens (ChatML, Zephyr/ChatGLM `<|user|>`, Llama 3).
_TURN = re.compile(r"<\|im_start\|>\s*(?P<a>user|assistant)\b|<\|(?P<b>user|assistant)\|>"
                   r"|<\|start_header_id\|>(?P<c>user|assistant)<\|end_header_id\|>")


def _turns_said_again(text: str) -> str | None:
    """The model writing the conversation on past its own turn: a user turn and an assistant turn each said word
    for word twice or more (a prompt printed whole holds each turn once; people do not ask the same thing twice)."""
    sample = text[:LOOP_WINDOW * 4]
    marks = list(_TURN.finditer(sample))
    if len(marks) < 4:
        return None
    said: dict[tuple[str, str], int] = {}
    for m, after in zip(marks, marks[1:] + [None]):
        role = m.group("a") or m.group("b") or m.group("c")
        body = _SPECIAL.split(sample[m.end():after.start() if after else None], 1)[0].strip()
        if len(body) >= 8:
            said[(role, body)] = said.get((role, body), 0) + 1
    again = {role: body for (role, body), n in said.items() if n >= 2}
    if "user" in again and "assistant" in again:
        return f"the chat template said again: the user's turn {quoted(again['user'][:40])} and the answer " \
               f"{quoted(again['assistant'][:40])} each twice or more"
    return None


def _think_ends(text: str) -> str | None:
    """A reasoning model closes its thinking once per turn (`</think>`); closed >= 3 times with few words between
    (< 40 characters, twice or more), it is stuttering through its own template, not answering turn after turn (a
    chat transcript's thinking blocks are each followed by an answer). Quoted from the first such close."""
    sample = text[:LOOP_WINDOW * 4]
    if sample.count("</think>") < 3:
        return None
    at = [m.start() for m in re.finditer("</think>", sample)]
    close = [a for a, b in zip(at, at[1:]) if b - a - 8 < 40]
    if len(close) < 2:
        return None
    return f"the reasoning's end tag </think> said {len(at)} times, {len(close)} of them a few words apart: " \
           f"{sample[close[0]:close[0] + 60]!r}"


def _soup(text: str, words: list[str]) -> list[str]:
    mixed = [w for w in words[:400] if _mixed_script(w)]
    if mixed:
        return [f"words mixing scripts ({', '.join(repr(w[:24]) for w in mixed[:2])}): token soup"]
    if len(text) <= SOUP_SHORT:
        scripts = _scripts(text)
        # (a line at a time in one script beside Latin is a list of translations, not soup: some line must mix three)
        if len(scripts) >= 3 and scripts not in _ALLOWED_MIX and any(
                len(mix) >= 3 and mix not in _ALLOWED_MIX for mix in map(_scripts, text.splitlines())):
            return [f"{len(scripts)} scripts in one short answer ({', '.join(sorted(scripts))}): token soup"]
    salad = _word_salad(text) or _code_soup(text) or _emoji_soup(text)
    return [salad] if salad else []


_LIST_MARK = re.compile(r"(?m)^\s*(?:\d{1,3}|[A-Za-z]|[ivxIVX]{1,4})\)|[:;]-?\)")  # `1)`, `b)`, a smiley


def _code_soup(text: str) -> str | None:
    """Closing brackets with nothing they close (`*/)`, `')));`, `])`): fragments of code strung together. Code
    balances its brackets; a cut snippet has more openers than closers, never many more closers."""
    sample = _LIST_MARK.sub("", text[:LOOP_WINDOW])
    if len(sample) < 200:
        return None
    opened = sum(sample.count(ch) for ch in "([{")
    closed = sum(sample.count(ch) for ch in ")]}")
    if closed - opened >= 12 and closed >= 3 * opened:
        return f"code soup: {closed} closing brackets for {opened} opening ones"
    return None


_EMOJI = re.compile("[\U0001f000-\U0010ffff\u2600-\u27bf]")
_UNCOUNTED = re.compile("[\\s\ufe0f\u200d]")


def emoji_count(text: str) -> tuple[int, int]:
    """(emoji, visible characters) of a text; variation selectors and joiners are not counted."""
    emoji = len(_EMOJI.findall(text))
    return emoji, (len(text) - len(_UNCOUNTED.findall(text))) if emoji else 0


def _emoji_soup(text: str) -> str | None:
    """An answer made mostly of emoji (few letters between them), or a line of >= 16 that is >= 60% emoji."""
    emoji, visible = emoji_count(text[:LOOP_WINDOW])
    if emoji < 12:
        return None
    if emoji * 5 >= 2 * visible:
        return f"emoji soup: {emoji} of {visible} characters are emoji"
    for line in text[:LOOP_WINDOW].splitlines():
        emoji, visible = emoji_count(line)
        if emoji >= 16 and emoji * 5 >= 3 * visible:
            return f"emoji soup: a line of {visible} characters, {emoji} of them emoji"
    return None


_URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+")
_MARKUP = frozenset('/=<>"@&%')


def _word_salad(text: str) -> str | None:
    sample = _URL.sub(" ", text[:4000])
    visible = [ch for ch in sample if not ch.isspace()]
    if not visible or sum(ch in _CODE_CHARS for ch in visible) > 0.04 * len(visible):
        return None  # code, paths, Markdown tables: their words are names, not prose
    found = _WORD.findall(sample)
    latin = [w for w in found if w.isascii()]
    words = [w.lower() for w in latin]
    if len(words) < 15 or len(words) * 2 < len(found):
        return None  # too short to tell, or not a Latin-script answer
    function = sum(w in FUNCTION_WORDS for w in words) / len(words)
    capitalised = sum(w[:1].isupper() for w in latin) / len(words)
    if function < 0.05 and capitalised >= 0.6:
        return None  # a list of names (provinces, people, products): capitalised words, no sentence to have function words
    lines = [ln for ln in sample.splitlines() if ln.strip()]
    prose = len(words) >= 6 * len(lines)  # not a list of names or `Key: value` lines, which have no function words
    if function < 0.05 and prose:
        return f"word salad: {len(words)} words with {function:.0%} function words"
    if function >= 0.75 and len(words) >= 40 and prose:  # `the the to to which the she the to that ...`
        top_two = sum(n for _, n in Counter(words).most_common(2)) / len(words)
        if top_two >= 0.35:  # a few function words over and over, not a sentence made of many of them
            return f"word salad: {len(words)} words, {function:.0%} of them function words"
    # fragments: one- or two-letter pieces that are no word; a capital letter alone is a letter named or spelled
    # out (`R, A, S, P`, `option B`, initials), not a fragment
    junk = [w.lower() for w in latin if len(w) <= 2 and not (len(w) == 1 and w.isupper())
            and w.lower() not in SHORT_WORDS and w.lower() not in ("a", "i")]
    fragments = len(junk) / len(words)
    if len(words) >= 20 and fragments >= 0.18 and len(set(junk)) >= 6:
        return f"token soup: {fragments:.0%} of {len(words)} words are one- or two-letter fragments"
    return None


_SEPARATORS = frozenset("-=_*#~.+|/\\<>·•─━═")


def _longest_run(text: str) -> tuple[str, int]:
    best, best_char, run, last = 0, "", 0, None
    for ch in text[:LOOP_WINDOW * 4]:
        run = run + 1 if ch == last else 1
        last = ch
        if run > best and not ch.isspace():
            best, best_char = run, ch
    return best_char, best


def _letters(text: str) -> float:
    visible = [ch for ch in text if not ch.isspace()]
    return sum(ch.isalpha() for ch in visible) / len(visible) if visible else 0.0


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


MAX_LOOP_UNIT = 200
LOOP_WINDOW = 4000


def _tail_loop(text: str) -> tuple[str, int] | None:
    """The shortest unit the answer's end repeats >= 3 times (the last repetition may be cut): (unit, repeats)."""
    s = text.rstrip()[-LOOP_WINDOW:]
    s = s[:len(s) - len(_CLOSING.search(s).group(0))] if len(s) > 3 else s  # the quote the answer was printed in
    n = len(s)
    if n < 8:
        return None
    for p in range(4, min(MAX_LOOP_UNIT, n // 3) + 1):
        if s[-1] != s[-1 - p] or s[-2] != s[-2 - p]:
            continue
        i = n - 1 - p
        while i >= 0 and s[i] == s[i + p]:
            i -= 1
        span = n - 1 - i  # characters from the loop's start to the end
        reps = span // p
        unit = s[n - p:]
        if reps >= 3 and span >= 30 and any(ch.isalpha() for ch in unit):
            return s[i + 1:i + 1 + p], reps
    return None


_BANNER = re.compile(r"\s*([-=_*#~+])\1{2,} ?\w[\w ]{0,30}? ?\1{3,}\s*")  # `*****USER*****`, `=== Answer ===`
_CLOSING = re.compile(r"[\"'\u201d\u2019)\]}]{0,3}$")


def _bos_run(text: str) -> int:
    best = 0
    for bos in BOS_TEXTS:
        if bos + bos in text or bos + " " + bos in text:
            runs = re.findall("(?:" + re.escape(bos) + r"\s*)+", text)
            best = max(best, max(r.count(bos) for r in runs))
    return best


def scripts_of(text: str) -> frozenset[str]:
    """The scripts a text's letters are written in (latin, cjk, kana, telugu...)."""
    return _scripts(text)


def _scripts(text: str) -> frozenset[str]:
    found = {name for name, pattern in _SCRIPTS if pattern.search(text)}
    if _OTHER_SCRIPT.search(text):
        found.update(_script_name(ch) for ch in set(_OTHER_SCRIPT.findall(text)))
        found.discard("")
    return frozenset(found)


def _script_name(ch: str) -> str:
    """A letter's script from its Unicode name (`TELUGU LETTER MA` -> telugu); marks and digits name none."""
    if not ch.isalpha():
        return ""
    return unicodedata.name(ch, "").split(" ", 1)[0].lower()


def _mixed_script(word: str) -> bool:
    if len(word) < 4 or word.isascii() or any(ch in _MARKUP for ch in word):
        return False  # a URL or a bit of markup, not a word
    word = word.replace("\u03bc", "").replace("\u00b5", "")  # the micro sign of units (50μs)
    seen = _scripts(word)
    return len(seen) >= 2 and seen not in _ALLOWED_MIX
