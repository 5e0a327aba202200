"""The description reducer: fewer words, every rule sentence kept word for word.

A description is first folded (runs of white space become one space; a blank line
or a line break before a list item is kept, as the break that carries structure).
Up to SHORT_BYTES of UTF-8 it then stays whole. A longer one is split into
sentences and keeps, in their original order:

* every sentence that states a rule (see `rules`), verbatim, never cut;
* the lead: the first sentence that states no rule, cut on a word boundary to at
  most LEAD_BYTES bytes, ending in "…" when cut.

`reduce(reduce(x)) == reduce(x)`: every boundary decision looks only at the
sentence before it and the character after it, and kept sentences are joined by the
separator that preceded them, so the reduced text splits into exactly the kept
sentences. Quoted and code spans are the one non-local thing (their pairing can
shift when a sentence goes), so texts holding them are re-split and checked.

`reduce` asks the C reducer `_fastreduce` first when it is built (see `_accel`). It
mirrors `explain(...).text` exactly, with the rule fragments of `rules` and the
abbreviations below compiled into it on import, and answers None for input it
does not mirror (a lone surrogate, a limit under 0, a lead limit under 3 bytes, a
capital sigma when a rule fragment holds a Greek letter - none does today);
that input takes the Python path. `explain` (what `lint` shows) is always the
Python path, which defines the output; tests/test_fastreduce.py compares the two.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import Final

from . import _accel, rules
from .rules import RuleScan, opens_with_instruction

SHORT_BYTES: Final = 160
LEAD_BYTES: Final = 80
ELLIPSIS: Final = "…"
_MAX_PASSES: Final = 4

# White space that folding changes: a run of two or more, or any one that is not " "
# (both open with a character class: the engine skips ahead at C speed).
_FOLDABLE = re.compile(r"[^\S ]\s*| \s+")
# A list item marker at the start of a line: -, *, +, •, 1. 2) a) (i)
_LIST_MARKER = re.compile(r"(?:[-*+•▪‣◦]|\(?(?:\d{1,3}|[a-z]|[ivx]{1,4})[.)])(?=\s|\Z)")
# Abbreviations after which a period does not end a sentence (lower-cased, no final dot).
_ABBREVIATIONS: Final = frozenset(
    """e.g i.e etc vs v cf approx incl excl esp ca resp fig no nos vol pp p
    mr mrs ms dr prof st jr sr inc ltd co corp dept est min max sec hr hrs
    jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun
    a.m p.m u.s u.k e.u n.b al""".split()
)


_SPAN_CHARS = re.compile(r"[`\"“]")
_SPANS = re.compile(r"`[^`\n]{1,400}`|\"[^\"\n]{1,300}\"|“[^”\n]{1,300}”")


def _is_folded(text: str) -> bool:
    # isprintable() is False for every white space character but " " (Unicode Zs
    # included): three C-speed checks instead of a regex scan
    return text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " "


def fold(text: str) -> str:
    """Collapse white space; keep a blank line as "\\n\\n", a break before a list item as "\\n"."""
    if _FOLDABLE.search(text) is None:
        return text.strip(" ")
    return _FOLDABLE.sub(lambda m: _fold_run(m, text), text).strip()


def _fold_run(m: re.Match[str], text: str) -> str:
    run = m.group()
    if "\n" not in run or m.start() == 0 or m.end() == len(text):
        return " "
    if run.count("\n") >= 2:
        return "\n\n"
    return "\n" if _LIST_MARKER.match(text, m.end()) else " "


@dataclass(frozen=True, slots=True)
class Sentence:
    start: int
    end: int  # exclusive; text[start:end] has no leading or trailing white space


def _protected(text: str) -> list[tuple[int, int]]:
    if _SPAN_CHARS.search(text) is None:
        return []
    return [m.span() for m in _SPANS.finditer(text)]


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    i = bisect_right(spans, (pos, 1 << 62)) - 1
    return i >= 0 and spans[i][0] < pos < spans[i][1]


# The last terminal character of a run, then up to two closers and " X". One
# character per match: a run of 100k dots must not be re-read from every dot.
_END_ASCII = re.compile(r"[.!?](?=[\"'”’)\]]{0,2} \S)")
_END_ELLIPSIS = re.compile(r"…(?=[\"'”’)\]]{0,2} \S)")
_OPENERS: Final = "(\"'“‘["


def _ends(text: str) -> list[tuple[int, int, bool]]:
    """(start, end, is_break) of every candidate sentence end, in order.

    The scans are a plain ASCII class, "…" only when present, and str.find for line
    breaks: a class with non-ASCII members, or lookbehinds at every candidate, made
    this the slowest step of the reducer.
    """
    found = [(m.start(), _past_closers(text, m.end()), False) for m in _END_ASCII.finditer(text)]
    if "…" in text:
        found += [(m.start(), _past_closers(text, m.end()), False)
                  for m in _END_ELLIPSIS.finditer(text)]
    at = text.find("\n")
    while at >= 0:
        found.append((at, at, True))
        while at < len(text) and text[at] == "\n":
            at += 1
        at = text.find("\n", at)
    if len(found) > 1:
        found.sort()
    return found


def _past_closers(text: str, end: int) -> int:
    while text[end] in _CLOSERS:  # at most two: the pattern's lookahead saw " X" after them
        end += 1
    return end


def _is_abbreviation(text: str, dot: int) -> bool:
    """A period that closes "e.g", "etc", "Mr", an initial ("J."), or a list number ("1.")."""
    window = max(0, dot - 16)  # abbreviations are short; a bounded look keeps this linear
    start = max(text.rfind(" ", window, dot), text.rfind("\n", window, dot), window - 1) + 1
    word = text[start:dot].lstrip(_OPENERS)
    if len(word) == 1:
        return word.isalpha() or word.isdigit()
    if word.isdigit():
        return len(word) == 2
    return word in _ABBREVIATIONS or (word[:1].isupper() and word[:1].lower() + word[1:] in _ABBREVIATIONS)


def split_sentences(text: str) -> list[Sentence]:
    """Sentences of folded `text`, in order; boundaries a careful reader agrees with."""
    spans = _protected(text)
    out: list[Sentence] = []
    begin = 0
    size = len(text)
    for start, end, is_break in _ends(text):
        if is_break:
            cut = start  # fold() kept a break only where it carries structure
        elif end < begin or text[end + 1].islower():
            continue  # "approx. five", "fast. slow"
        elif text[start] == "." and _is_abbreviation(text, start):
            continue  # merging only over-keeps
        elif spans and _inside(start, spans):
            continue  # inside `code. Span` or "a. B"
        else:
            cut = end
        if cut > begin:
            out.append(Sentence(begin, cut))
        begin = cut
        while begin < size and text[begin] in " \n":
            begin += 1
    if begin < size:
        out.append(Sentence(begin, size))
    return out


def cut_lead(sentence: str, limit: int = LEAD_BYTES) -> str:
    """`sentence` if it fits in `limit` bytes, else its longest word-boundary prefix + "…"."""
    encoded = sentence.encode("utf-8")
    if len(encoded) <= limit:
        return sentence
    sentence = sentence.split("\n", 1)[0]  # a lead is one line: a cut never ends on a break
    head = sentence.encode("utf-8")[:limit - len(ELLIPSIS.encode("utf-8"))].decode("utf-8", "ignore")
    if len(head) < len(sentence) and not sentence[len(head)].isspace():
        space = head.rfind(" ")
        head = head[:space] if space > 0 else head  # never end on half a word
    return head.rstrip(" ,;:–—-(") + ELLIPSIS


@dataclass(frozen=True, slots=True)
class Reduction:
    """What one pass kept and dropped (lint shows it)."""

    text: str
    kept: list[str]
    dropped: list[str]
    lead: str | None  # the lead as kept (cut or whole), if there was one


_TERMINAL: Final = tuple(".!?…")
_CLOSERS: Final = "\"'”’)]"


def _ends_sentence(text: str, unit: Sentence) -> bool:
    # only the last few characters: closers are short, and a glued unit may be huge
    tail = text[max(unit.start, unit.end - 16):unit.end]
    return tail.rstrip(_CLOSERS).endswith(_TERMINAL)


def units(text: str) -> list[Sentence]:
    """Sentences glued into the units that are kept or dropped together.

    A sentence that ends without terminal punctuation and is followed by a line
    break runs on into the next one: "Valid values:" and the list items under it,
    a heading and its paragraph. The sentences of one list item stay together, so
    a kept rule is never re-attached to the item before it. Deciding per unit means
    a rule is never separated from the lines that complete it.
    """
    glued: list[Sentence] = []
    in_item = False  # the current unit is a list item: its sentences stay together
    for s in split_sentences(text):
        same_line = text[s.start - 1] != "\n"
        if glued and ((not same_line and not _ends_sentence(text, glued[-1]))
                      or (same_line and in_item)):
            glued[-1] = Sentence(glued[-1].start, s.end)
            continue
        glued.append(s)
        in_item = _LIST_MARKER.match(text, s.start) is not None
    return glued


def _reduce_once(folded: str, lead_bytes: int) -> Reduction:
    parts: list[str] = []
    kept: list[str] = []
    dropped: list[str] = []
    lead: str | None = None
    scan = RuleScan(folded)
    for s in units(folded):
        body = folded[s.start:s.end]
        if not (scan.states_rule(s.start, s.end) or opens_with_instruction(body)):
            if lead is not None:
                dropped.append(body)
                continue
            body = lead = cut_lead(body, lead_bytes)
        if parts:
            parts.append(_separator(folded, s.start))
        parts.append(body)
        kept.append(body)
    text = "".join(parts)
    return Reduction(text, kept, dropped if text != folded else [], lead)


def _separator(folded: str, start: int) -> str:
    if folded[start - 1] != "\n":
        return " "
    return "\n\n" if folded[start - 2:start] == "\n\n" else "\n"


def _is_short(text: str, short_bytes: int) -> bool:
    return len(text) <= short_bytes // 4 or len(text.encode("utf-8")) <= short_bytes


def explain(text: str, *, short_bytes: int = SHORT_BYTES, lead_bytes: int = LEAD_BYTES) -> Reduction:
    """The reduction of `text` with what was kept and dropped."""
    current = fold(text)
    if _is_short(current, short_bytes):
        return Reduction(current, [current], [], None)
    result = _reduce_once(current, lead_bytes)
    dropped = list(result.dropped)
    for _ in range(_MAX_PASSES):
        if result.text == current or _SPAN_CHARS.search(result.text) is None:
            break  # a fixed point by construction (see the module docstring)
        current = result.text
        if _is_short(current, short_bytes):
            break
        result = _reduce_once(current, lead_bytes)
        dropped += result.dropped
    return Reduction(result.text, result.kept, dropped, result.lead)


def reduce(text: str, *, short_bytes: int = SHORT_BYTES, lead_bytes: int = LEAD_BYTES) -> str:
    """The reduced description (see the module docstring)."""
    if len(text) <= short_bytes and _is_folded(text) and (
            text.isascii() or len(text.encode("utf-8")) <= short_bytes):
        return text  # short and already folded: the common case, decided by str methods
    if (short_bytes, lead_bytes) == (SHORT_BYTES, LEAD_BYTES):
        return _reduce_cached(text)
    return _reduced(text, short_bytes, lead_bytes)


@lru_cache(maxsize=8192)
def _reduce_cached(text: str) -> str:
    # Registries repeat themselves (shared parameters, servers in several versions).
    return _reduced(text, SHORT_BYTES, LEAD_BYTES)


def _reduced(text: str, short_bytes: int, lead_bytes: int) -> str:
    """The C reducer's answer when it has one, else the reference path's."""
    if _FAST is not None and (fast := _FAST.reduce(text, short_bytes, lead_bytes)) is not None:
        return fast
    return explain(text, short_bytes=short_bytes, lead_bytes=lead_bytes).text


def _fast_reducer() -> ModuleType | None:
    """The C reducer configured with this module's rule fragments and abbreviations, or None."""
    fast = _accel.fastreduce
    if fast is None:
        return None
    try:
        fast.configure(rules._ALL, _ABBREVIATIONS)
    except (ValueError, TypeError):  # a fragment outside the regex subset it compiles (tests/test_fastreduce.py fails)
        return None
    return fast


_FAST: ModuleType | None = _fast_reducer()
