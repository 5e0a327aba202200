"""The description reducer: fewer words, every rule sentence kept word for word.

A description is first folded (runs of white space become one space; a blank line
or a line break before a list item is kept, as the break that carries structure).
Up to SHORT_BYTES of UTF-8 it then stays whole. A longer one is split into
sentences and keeps, in their original order:

* every sentence that states a rule (see `rules`), verbatim, never cut;
* the lead: the first sentence that states no rule, cut on a word boundary to at
  most LEAD_BYTES bytes, ending in "…" when cut.

Markup (see `markup`) is kept as written: a fenced code block is one unit, never
folded, split or cut, kept or dropped whole with the sentence that leads into it (and
kept if either states a rule); a heading line keeps the breaks around it; a pair of
tags alone on their lines is kept when anything inside is, dropped with it otherwise,
and a pair inside running text holds what it spans together as one unit.

`reduce(reduce(x)) == reduce(x)`: every boundary decision looks only at the
sentence before it and the character after it, and kept sentences are joined by the
separator that preceded them, so the reduced text splits into exactly the kept
sentences. Quoted and code spans are the one non-local thing (their pairing can
shift when a sentence goes), so texts holding them are re-split and checked.

`reduce` asks the C reducer `_fastreduce` first when it is built (see `_accel`). It
mirrors `explain(...).text` exactly, with the rule fragments of `rules` and the
abbreviations below compiled into it on import, and answers None for input it
does not mirror (any text `markup.may_hold` accepts, a lone surrogate, a limit under 0, a lead limit under 3 bytes, a
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

from . import _accel, markup, rules
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
    """Collapse white space; keep a blank line as "\\n\\n", a break before a list item as "\\n".

    Where the text holds markup (see `markup`), a fenced block is copied as written
    on lines of its own, and a heading or a lone tag keeps the breaks around it.
    """
    if not markup.may_hold(text):
        return _fold_prose(text, False)
    blocks = markup.fenced_blocks(text)
    if not blocks:
        return _fold_prose(text, True)
    return _fold_around(text, blocks)


def _fold_prose(text: str, lines: bool) -> str:
    if _FOLDABLE.search(text) is None:
        return text.strip(" ")
    return _FOLDABLE.sub(lambda m: _fold_run(m, text, lines), text).strip()


def _fold_run(m: re.Match[str], text: str, lines: bool) -> str:
    run = m.group()
    if "\n" not in run or m.start() == 0 or m.end() == len(text):
        return " "
    if run.count("\n") >= 2:
        return "\n\n"
    if _LIST_MARKER.match(text, m.end()) is not None:
        return "\n"
    if lines and (markup.stands_alone_at(text, m.start() + run.rfind("\n") + 1)
                  or markup.stands_alone_at(text, text.rfind("\n", 0, m.start()) + 1)):
        return "\n"  # the break before or after a heading or a lone tag
    return " "


def _fold_around(text: str, blocks: list[tuple[int, int]]) -> str:
    """fold() of a text holding fenced blocks: the prose between them folded, each block
    copied as written, and a break ("\\n\\n" where the text had a blank line) on each side."""
    out: list[str] = []
    gap = ""  # the white space since the last piece written
    pos = 0
    for start, end in [*blocks, (len(text), len(text))]:
        prose = text[pos:start]
        core = prose.strip()
        if core:
            _break(out, gap + prose[:len(prose) - len(prose.lstrip())])
            out.append(_fold_prose(core, True))
            gap = prose[len(prose.rstrip()):]
        else:
            gap += prose
        if start < end:
            _break(out, gap)
            out.append(text[start:end])
            gap = ""
        pos = end
    return "".join(out)


def _break(out: list[str], gap: str) -> None:
    if out:
        out.append("\n\n" if gap.count("\n") >= 2 else "\n")


@dataclass(frozen=True, slots=True)
class Sentence:
    start: int
    end: int  # exclusive; text[start:end] has no leading or trailing white space (but an indented block's)


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
    """Sentences of folded `text`, in order; boundaries a careful reader agrees with.

    A fenced block is one sentence: nothing inside it ends one.
    """
    return _split(text, markup.of(text))


def _split(text: str, marks: markup.Markup | None) -> list[Sentence]:
    spans = _protected(text)
    out: list[Sentence] = []
    begin = 0
    size = len(text)
    for start, end, is_break in _ends(text):
        if marks is not None and marks.blocks and marks.in_block(start):
            continue  # a fenced block is one sentence, line breaks and all
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
            if marks is not None and marks.blocks and marks.block_at(begin):
                break  # an indented block starts with its indentation
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
        # never end on half a word, unless all before it is a list marker ("- https://…"
        # cut to "…" alone: no lead, and a second pass folded it into the text before)
        if space > 0 and head[:space].rstrip(_LEAD_TRAILERS).lstrip(_BULLETS):
            head = head[:space]
    return head.rstrip(_LEAD_TRAILERS) + ELLIPSIS


_LEAD_TRAILERS: Final = " ,;:–—-("  # what a cut lead never ends with
_BULLETS: Final = "-*+•▪‣◦ "  # a list item's marker, for cut_lead


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
    a rule is never separated from the lines that complete it. Markup adds units
    of its own (see _marked_units).
    """
    return _units(text, markup.of(text))


def _units(text: str, marks: markup.Markup | None) -> list[Sentence]:
    sentences = _split(text, marks)
    if marks is not None:
        return _marked_units(text, sentences, marks)
    glued: list[Sentence] = []
    in_item = False  # the current unit is a list item: its sentences stay together
    for s in sentences:
        same_line = text[s.start - 1] != "\n"
        if glued and ((not same_line and not _ends_sentence(text, glued[-1]))
                      or (same_line and in_item)):
            glued[-1] = Sentence(glued[-1].start, s.end)
            if not same_line and _LIST_MARKER.match(text, s.start):
                # an item the unit runs into ("Signals:\n- A: confirm! Ask first"): its
                # sentences stay with it, none hangs on to the next item's head
                in_item = True
            continue
        glued.append(s)
        in_item = _LIST_MARKER.match(text, s.start) is not None
    return glued


def _marked_units(text: str, sentences: list[Sentence], marks: markup.Markup) -> list[Sentence]:
    """units() of a text holding markup.

    A fenced block hangs under the unit before it (the sentence it follows on the
    next line, or a unit that runs on into it, "Example:") and ends its unit. A tag
    of a pair that stand alone on their lines is a unit of its own, kept by what the
    pair encloses. A heading's sentences stay together, as a list item's do. A pair
    of tags that do not stand alone keeps the units it spans together.
    """
    lone = marks.lone_tags
    glued: list[Sentence] = []
    in_item = on_heading = closed = False  # closed: the unit ends with a block or is a lone tag
    for s in sentences:
        block = marks.block_at(s.start)
        tag = lone.get(s.start) == s.end
        new_line = s.start == 0 or text[s.start - 1] == "\n"
        if new_line:
            on_heading = s.start in marks.alone_lines  # the heading's line, not its paragraph
        together = in_item or on_heading
        if glued and not (closed or tag) and _runs_on(text, glued[-1], s.start, together, block):
            glued[-1] = Sentence(glued[-1].start, s.end)
            closed = block
            if new_line and _LIST_MARKER.match(text, s.start):
                in_item = True  # an item the unit runs into: its sentences stay with it
            continue
        glued.append(s)
        in_item = _LIST_MARKER.match(text, s.start) is not None
        closed = block or tag
    return _enclose_pairs(glued, marks)


def _runs_on(text: str, unit: Sentence, start: int, in_item: bool, block: bool) -> bool:
    """Does the sentence at `start` join `unit`?"""
    if text[start - 1] != "\n":
        return in_item
    if block and text[start - 2] != "\n":
        return True  # a block on the line under a sentence is that sentence's example
    return not _ends_sentence(text, unit)


def _enclose_pairs(glued: list[Sentence], marks: markup.Markup) -> list[Sentence]:
    """Each pair of tags that do not stand alone, with the units between, as one unit."""
    starts = [u.start for u in glued]
    reach: dict[int, int] = {}  # a unit's index -> the last unit merged into it
    for pair in marks.pairs:
        if not pair.alone:
            first = bisect_right(starts, pair.open_start) - 1
            reach[first] = max(reach.get(first, first), bisect_right(starts, pair.close_start) - 1)
    if all(last == first for first, last in reach.items()):
        return glued
    out: list[Sentence] = []
    i = 0
    while i < len(glued):
        j, last = i, reach.get(i, i)
        while j < last:  # a unit merged in may reach further
            j += 1
            last = max(last, reach.get(j, j))
        out.append(Sentence(glued[i].start, glued[last].end))
        i = last + 1
    return out


def _reduce_once(folded: str, lead_bytes: int) -> Reduction:
    marks = markup.of(folded)
    spans = _units(folded, marks)
    chosen, lead = _choose(folded, spans, lead_bytes, marks)
    parts: list[str] = []
    kept: list[str] = []
    dropped: list[str] = []
    ending = ""  # what the last piece kept ends with: "block", "line" (one that stands alone) or ""
    for s, piece in zip(spans, chosen):
        if piece is None:
            dropped.append(folded[s.start:s.end])
            continue
        if parts:
            separator = _separator(folded, s.start)
            if marks is not None and separator != "\n\n":
                separator = _line_break(piece, s, marks, ending, separator)
                if (separator == " " and ending == "line" and len(parts) >= 2 and parts[-2] == "\n"
                        and markup.lone_tag_line(parts[-1])):
                    parts[-2] = " "  # a tag this piece runs on from no longer stands alone
            parts.append(separator)
        parts.append(piece)
        kept.append(piece)
        starts_line = len(parts) == 1 or parts[-2].endswith("\n")
        ending = _ending(piece, s, marks, starts_line) if marks is not None else ""
    text = "".join(parts)
    return Reduction(text, kept, dropped if text != folded else [], lead)


def _choose(folded: str, spans: list[Sentence], lead_bytes: int,
            marks: markup.Markup | None) -> tuple[list[str | None], str | None]:
    """What each unit keeps (None: it is dropped), and the lead.

    Every rule unit is kept whole and the first other one as the lead; a lone tag
    is kept when anything its pair encloses is.
    """
    scan = RuleScan(folded)
    lone = marks.lone_tags if marks is not None else {}
    chosen: list[str | None] = []
    lead: str | None = None
    list_kept = False  # the last unit kept runs into a list: the list's later items are kept
    for s in spans:
        body = folded[s.start:s.end]
        if list_kept and folded[s.start - 1] == "\n" and _LIST_MARKER.match(folded, s.start):
            chosen.append(body)  # ("Valid values:\n- hourly.\n- daily."): its values too
            continue
        list_kept = False
        if lone and lone.get(s.start) == s.end:
            chosen.append(None)  # decided by what it encloses, below
        elif scan.states_rule(s.start, s.end) or opens_with_instruction(body):
            chosen.append(body)
            list_kept = _runs_into_list(folded, s)
        elif lead is None and (piece := _lead(folded, s, body, lead_bytes, marks)) is not None:
            chosen.append(piece)
            lead = piece
        else:
            chosen.append(None)
    if marks is not None:
        _keep_fences_mid_line(folded, spans, chosen, marks)
    if marks is not None and lone:
        _balance(folded, spans, chosen, marks)
    return chosen, lead


def _keep_fences_mid_line(folded: str, spans: list[Sentence], chosen: list[str | None],
                          marks: markup.Markup) -> None:
    """A kept unit that opens mid-line with a fence (```, ~~~) keeps the unit before it
    where that one is dropped: without it, the fence would start a line (after a block,
    whose closing fence must end its line) and open a block the text never had, and the
    next pass would read the rest as that block's or not (not a fixed point)."""
    for i in range(len(spans) - 1, 0, -1):  # (from the end: a unit kept so may need its own)
        piece = chosen[i]
        if (piece is not None and chosen[i - 1] is None and folded[spans[i].start - 1] != "\n"
                and markup.opens_block(piece) and _starts_line_if_run_on(spans, chosen, i, marks)):
            chosen[i - 1] = folded[spans[i - 1].start:spans[i - 1].end]


def _starts_line_if_run_on(spans: list[Sentence], chosen: list[str | None], i: int,
                           marks: markup.Markup) -> bool:
    """Whether kept unit i, the unit before it dropped, would start a line of the text made:
    only as its first piece, or after a piece that ends a block (see _line_break; its
    separator is a space, the unit opening mid-line). Otherwise it stays mid-line, and
    keeping the unit before only changes what the next pass, which may see no markup at
    all, keeps (not a fixed point)."""
    for j in range(i - 2, -1, -1):
        kept = chosen[j]
        if kept is not None:
            return _ends_block(kept, spans[j], marks)
    return True


def _runs_into_list(text: str, unit: Sentence) -> bool:
    """Whether a line of the unit (not its first) opens with a list marker."""
    at = text.find("\n", unit.start, unit.end)
    while at >= 0:
        if _LIST_MARKER.match(text, at + 1):
            return True
        at = text.find("\n", at + 1, unit.end)
    return False


def _lead(folded: str, unit: Sentence, body: str, lead_bytes: int,
          marks: markup.Markup | None) -> str | None:
    """The unit as the lead, or None where it cannot be one: a block never leads, and
    the cut (to the first line) is not made where it would part a pair of tags."""
    if marks is not None and marks.block_at(unit.start):
        return None
    cut = cut_lead(body, lead_bytes)
    if cut.startswith(("```", "~~~")) and cut != body and markup.fenced_blocks(cut):
        return None  # "``` a `b`" cut before its second backtick would open a block
    if marks is not None and cut != body:
        line_end = folded.find("\n", unit.start, unit.end)
        if marks.tag_between(unit.start, unit.end if line_end < 0 else line_end):
            return None
    return cut


def _balance(folded: str, spans: list[Sentence], chosen: list[str | None], marks: markup.Markup) -> None:
    """Keep both lone tags of a pair where anything between them is kept, else neither."""
    lone = marks.lone_tags
    index = {s.start: i for i, s in enumerate(spans) if lone.get(s.start) == s.end}
    kept_before = [0]  # units kept before each index (lone tags are all None still)
    for piece in chosen:
        kept_before.append(kept_before[-1] + (piece is not None))
    for pair in marks.pairs:
        first, last = index.get(pair.open_start), index.get(pair.close_start)
        if first is not None and last is not None and kept_before[last] > kept_before[first + 1]:
            chosen[first] = folded[pair.open_start:pair.open_end]
            chosen[last] = folded[pair.close_start:pair.close_end]


def _line_break(piece: str, unit: Sentence, marks: markup.Markup, ending: str, separator: str) -> str:
    """The separator before `piece` where the text had one break (`separator`) or
    none: a break where fold() keeps one, else a space.

    A break before a list item, a block or a line that stands alone stays. One that
    was kept for a line now dropped goes. A piece that now follows a block (whose
    closing fence must end its line), a heading or a lone tag starts a line of its
    own, after a heading or a tag unless it opens a block (a piece that would stand
    alone too does: run on, it would lengthen the heading's line, which the next pass
    reads as one heading)."""
    if separator == "\n" and (_LIST_MARKER.match(piece) is not None or markup.stands_alone_at(piece, 0)
                              or (marks.block_at(unit.start) and len(piece) == unit.end - unit.start)):
        return "\n"
    if ending == "block" or (ending == "line" and not markup.opens_block(piece)):
        return "\n"
    return " "


def _ending(piece: str, unit: Sentence, marks: markup.Markup, starts_line: bool) -> str:
    """What `piece` (all of `unit`, or its lead cut) ends with: "block", "line" (a
    heading or a lone tag), or "". Its last line is one only where it starts a line of
    the text made (`starts_line`, for its first): a piece run on after another is none."""
    if _ends_block(piece, unit, marks):
        return "block"
    last = piece.rfind("\n") + 1
    if last == 0 and not starts_line:
        return ""
    return "line" if markup.stands_alone_at(piece, last) else ""


def _ends_block(piece: str, unit: Sentence, marks: markup.Markup) -> bool:
    """Whether `piece` (all of `unit`, or its lead cut) ends with a block's closing fence."""
    return len(piece) == unit.end - unit.start and marks.block_ends_at(unit.end)


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
        if result.text == current:
            break
        # the next pass is what reduce() does to the text made: fold it first (a lone tag's
        # line may now have a fence run on after it, which fold joins to the line before)
        folded = fold(result.text)
        if folded == result.text and _SPAN_CHARS.search(folded) is None:
            break  # a fixed point by construction (see the module docstring)
        current = folded
        if _is_short(current, short_bytes):  # (reduce keeps a short text as folded)
            result = Reduction(current, result.kept, dropped, result.lead)
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
