"""Shared machinery of the cuts: lines, clipping, markers, and picking lines by priority.

Most cuts only say which source lines matter and how much (a priority per run of
lines); `pick` keeps the most important runs that fit, in source order, and marks
every gap with its exact line count. The budget is checked here, once, so every cut
gets the laws (budget held, whole lines, counted omissions) for free.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache, cached_property
from itertools import accumulate, compress, count, islice, repeat
from operator import add, and_, ne
from typing import Any, Final

from .. import _accel
from .model import Limits

#: (priority, first line, end line exclusive): lower priority numbers are kept first.
Run = tuple[int, int, int]
GapLabel = Callable[[int, int], str]
#: the chars a gap's marker is reserved at (its label's length, or a bound on it)
GapSize = Callable[[int, int], int]

# CSI (colours, cursor moves), OSC (titles, links) and the two-char escapes: what terminals
# eat and a reader never sees
# an OSC (ESC ]) ends at BEL, ESC \ or the end of its line: one left open must not eat
# the lines after it
_ANSI: Final = re.compile(r"\x1b\[[0-9;:?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")


def plain(text: str) -> str:
    """`text` without ANSI escape codes (`text` itself when it has none): what detection and
    the cuts read, so `gcc -fdiagnostics-color` is the build output it is."""
    if "\x1b" not in text:
        return text
    fast = _accel.fastscan
    return fast.plain(text) if fast is not None else _ANSI.sub("", text)


def count_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def fits(text: str, limits: Limits) -> bool:
    if len(text) > limits.chars:
        return False
    if limits.lines is not None and count_lines(text) > limits.lines:
        return False
    if limits.line_chars is not None and len(text) > limits.line_chars:
        return max(map(len, text.split("\n"))) <= limits.line_chars
    return True


def lines_marker(n: int) -> str:
    return f"[… {n:,} line{'s' if n != 1 else ''} omitted …]"


def clip(line: str, width: int) -> str:
    """`line` cut at a character boundary to at most `width` chars, the cut marked."""
    if len(line) <= width:
        return line
    keep = width - len(f" [… {len(line):,} chars omitted]")
    keep = max(keep, 0)
    if keep and "\ud800" <= line[keep - 1] <= "\udbff":  # never split a surrogate pair
        keep -= 1
    return f"{line[:keep]} [… {len(line) - keep:,} chars omitted]"


#: every literal a detection asks `Doc.has` about, registered (by `census`) where it is
#: declared: the first question of a reduce has all of them answered in one pass (C)
_CENSUS: dict[str, None] = {}


def census(*needles: str) -> tuple[str, ...]:
    """`needles`, registered for the one-pass census of each text (`Doc.has`)."""
    for needle in needles:
        _CENSUS.setdefault(needle)
    return needles


def present(text: str, needles: tuple[str, ...]) -> tuple[bool, ...]:
    """`tuple(needle in text for needle in needles)` (the definition), in one pass in C."""
    fast = _accel.fastscan
    if fast is not None:
        return fast.present(text, needles)
    return tuple(needle in text for needle in needles)


class Doc:
    """A text split into lines once, and searched as a whole.

    Line patterns are run as `\\n(?:pattern)` over the text with a newline in front:
    the regex engine then jumps from newline to newline in C, several times faster
    than a `^` pattern (tried at every position) or a Python loop over the lines.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self._greps: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        self._ends: list[int] | None = None
        self._cursor = (0, 0)  # (line, its offset): where the last `offset` call left off
        self._counts: dict[str, int] = {}
        self._has: dict[str, bool] = {}
        self._census = False  # whether the registered needles are answered yet
        self._led: dict[tuple[str, ...], list[int]] = {}

    @cached_property
    def lines(self) -> list[str]:
        """The lines, split on first use."""
        lines = self.text.split("\n")
        if lines and lines[-1] == "" and len(lines) > 1:
            lines.pop()  # a final newline ends the last line, it does not start one
        return lines

    @cached_property
    def nl_text(self) -> str:
        """The text behind a newline, so every line, the first too, follows one."""
        return "\n" + self.text

    @classmethod
    def of(cls, text: str) -> Doc:
        """The Doc `reduce` made of `text` (see `shared`), else a new one."""
        doc = _SHARED.get()
        return doc if doc is not None and doc.text is text else cls(text)

    def __len__(self) -> int:
        return len(self.lines)

    def line_count(self, split: bool = True) -> int:
        """`count_lines(text)`: from the lines, split now if `split` and not yet split."""
        if split or "lines" in self.__dict__:
            return len(self.lines) if self.text else 0
        return count_lines(self.text)

    def _starts(self) -> list[int]:
        """Where each line starts in `text`, and one past the end (built once, in C)."""
        if self._ends is None:
            self._ends = [0, *map(add, accumulate(map(len, self.lines)), range(1, len(self.lines) + 1))]
        return self._ends

    def offset(self, line: int) -> int:
        """Where `line` starts in `text`.

        Asked in increasing order (gap markers are rendered top down), it walks on from
        the last answer, summing line lengths in C, instead of building every offset."""
        line = min(line, len(self.lines))
        at, pos = self._cursor
        if self._ends is not None or line < at:  # asked out of order: build the table once
            return self._starts()[line]
        pos += sum(map(len, self.lines[at:line])) + (line - at)
        self._cursor = (line, pos)
        return pos

    def line_index(self, offsets: Iterable[int]) -> list[int]:
        """The line each of the sorted `offsets` in `text` falls in."""
        return _newlines_before(list(offsets), self.text)

    def ending_with(self, suffixes: tuple[str, ...]) -> list[int]:
        """`[i for i, line in enumerate(lines) if line.endswith(suffixes)]` for suffixes without a
        newline, from searches of the whole text (`suffix + "\n"`, which never overlap themselves):
        a method called line by line cost ten times more."""
        if "" in suffixes:  # every string ends with the empty one
            return list(range(len(self.lines)))
        text = self.text
        found: list[int] = []
        for suffix in suffixes:
            found += map(re.Match.start, re.finditer(re.escape(suffix + "\n"), text))
        lines = self.line_index(sorted(found))
        last = len(self.lines) - 1
        if not text.endswith("\n") and self.lines[last].endswith(suffixes):  # no newline ends it
            lines.append(last)
        return sorted(set(lines))

    def blank(self) -> list[int]:
        """The indexes of the empty lines, from one search of the text (C)."""
        if not self.text:
            return [0]
        # the newline before each line sits at the line's own offset in nl_text
        return _newlines_before(list(map(re.Match.start, _BLANK.finditer(self.nl_text))), self.nl_text)

    def count(self, needle: str) -> int:
        """How often `needle` occurs in the whole text (remembered)."""
        found = self._counts.get(needle)
        if found is None:
            found = self._counts[needle] = self.text.count(needle)
        return found

    def has(self, needle: str) -> bool:
        """Whether `needle` occurs in `nl_text` (the text behind a newline: "\\nRan " is "a line
        starts with Ran "), remembered. With the C scanner, the first needle asked that is
        registered (`census`) has every registered needle answered in the same one pass:
        most detections ask for literals the text does not hold, each a pass of its own."""
        found = self._has.get(needle)
        if found is None:
            if _accel.fastscan is not None and needle in _CENSUS and not self._census:
                self._census = True
                asked = tuple(_CENSUS)
                self._has.update(zip(asked, present(self.nl_text, asked)))
                return self._has[needle]
            found = self._has[needle] = needle in self.nl_text
        return found

    def led(self, words: tuple[str, ...]) -> list[int]:
        """The indexes of the lines that a blank or tab leads and whose rest starts with one of
        `words` (`led_lines`), remembered: one pass in C with the C scanner (a trace's detection
        counts its frame lines, and its cut lists them)."""
        found = self._led.get(words)
        if found is None:
            fast = _accel.fastscan
            found = fast.led_lines(self.text, words) if fast is not None else led_lines(self.lines, words)
            self._led[words] = found
        return found

    def holds(self, needles: Iterable[str]) -> bool:
        """Whether any of `needles` occurs (`has`)."""
        return any(map(self.has, needles))

    def positions(self, pattern: re.Pattern[str]) -> Iterator[int]:
        """Offsets in `nl_text` of the newline before each line `pattern` matches."""
        return map(re.Match.start, _at_line_start(pattern).finditer(self.nl_text))  # no Python step a match

    def igrep(self, pattern: re.Pattern[str], needles: tuple[str, ...] = ()) -> Iterator[int]:
        """Indexes of the lines that `pattern` matches at their start, lazily, in order.

        With `needles`, only lines holding one of those substrings are looked at, and
        the pattern is searched anywhere in them (for words that are not at the start)."""
        if needles:
            return iter(self.grep(pattern, needles))
        return self._lines_at(self.positions(pattern))

    def iled(self, pattern: re.Pattern[str], needles: tuple[str, ...]) -> Iterator[int]:
        """`igrep(pattern)`, lazily, for a pattern every line of which holds one of `needles`
        (substrings without a newline): only the lines a needle is on are matched, found by one
        search for the needles (C), so a pattern that reads every char of every line costs
        the needles' occurrences, as far as the caller reads. Needles on many lines that do not
        match (a Python step each) hand the rest to the plain search."""
        present = tuple(n for n in needles if self.has(n))  # the census: an absent needle is no search
        if not present:
            return
        text, locate = self.text, _alternation(present).search
        line = counted = misses = 0
        dense = max(_DENSE, len(text) // _DENSE_CHARS)
        hit = locate(text)
        while hit is not None:
            start = text.rfind("\n", 0, hit.start()) + 1
            end = text.find("\n", hit.end())
            line += text.count("\n", counted, start)
            counted = start
            if pattern.match(text, start, len(text) if end < 0 else end):
                yield line
            else:
                misses += 1
                if misses > dense:  # the newline before this line is at its own offset in nl_text
                    yield from self._lines_from(_at_line_start(pattern).finditer(self.nl_text, start), line, start)
                    return
            if end < 0:
                return
            hit = locate(text, end)

    def _lines_from(self, found: Iterator[re.Match[str]], line: int, start: int) -> Iterator[int]:
        """The line of each match in `nl_text` at or past `start`, the newline before `line`."""
        count, last, n = self.nl_text.count, start, len(self.lines)
        for pos in map(re.Match.start, found):
            line += count("\n", last, pos)
            last = pos
            if line < n:
                yield line

    def _lines_at(self, offsets: Iterable[int]) -> Iterator[int]:
        line, last, count, nl, n = 0, -1, self.nl_text.count, "\n", len(self.lines)
        for pos in offsets:
            line += count(nl, last + 1, pos + 1)
            last = pos
            if line - 1 < n:
                yield line - 1

    def _search(self, pattern: re.Pattern[str], needles: tuple[str, ...]) -> list[int]:
        found: set[int] = set()  # offsets in nl_text of the newline before each line holding a needle
        text = self.nl_text
        for needle in filter(self.has, needles):  # the census: a needle it says is absent costs no pass
            pos = text.find(needle)
            while pos >= 0:
                found.add(text.rfind("\n", 0, pos + 1))
                pos = text.find("\n", pos + len(needle))
                if pos < 0:
                    break
                pos = text.find(needle, pos)
        lines = _newlines_before(sorted(found), text)
        if lines and lines[-1] >= len(self.lines):  # the text's last newline starts no line
            lines.pop()
        search, rows = pattern.search, self.lines
        return [i for i in lines if search(rows[i])]

    def _grep_all(self, pattern: re.Pattern[str]) -> list[int]:
        """`list(self.igrep(pattern))`, each line's number counted in C (`_newlines_before`)."""
        found = _newlines_before(list(self.positions(pattern)), self.nl_text)
        if found and found[-1] >= len(self.lines):  # the text's last newline starts no line
            found.pop()
        return found

    def grep(self, pattern: re.Pattern[str], needles: tuple[str, ...] = ()) -> list[int]:
        """`igrep` as a list, remembered (a lead line and gap markers may ask twice)."""
        key = (pattern.pattern, needles)
        found = self._greps.get(key)
        if found is None:
            found = self._search(pattern, needles) if needles else self._grep_all(pattern)
            self._greps[key] = found
        return found


class _NumberedLines(Sequence[str]):
    """`lines`, each led by its number right-aligned ("  12| line"), made when asked."""

    def __init__(self, lines: list[str]) -> None:
        self._lines, self._width = lines, len(str(len(lines)))

    def __len__(self) -> int:
        return len(self._lines)

    def __getitem__(self, at: int | slice) -> Any:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self._lines)))]
        i = range(len(self._lines))[at]  # a negative index counts from the end, as a list's
        return f"{i + 1:>{self._width}}| {self._lines[i]}"


class NumberedDoc(Doc):
    """The Doc of `doc`'s lines each led by its number, right-aligned ("  12| line"): a line
    is numbered when `pick` asks for it (a view of a 40k-line file shows a few dozen; numbering
    them all cost more than the rest of the cut), the whole text only if asked for."""

    def __init__(self, doc: Doc) -> None:
        super().__init__("")
        del self.text  # made by the property below when asked
        self._source = doc

    @cached_property
    def lines(self) -> list[str]:
        return _NumberedLines(self._source.lines)  # type: ignore[return-value]  # a list's reads

    @cached_property
    def text(self) -> str:  # type: ignore[override]
        return "\n".join(self.lines[:])


#: the newline before an empty line (itself followed by one; the popped last line is never empty)
_BLANK: Final = re.compile(r"\n(?=\n)")


@cache
def _alternation(needles: tuple[str, ...]) -> re.Pattern[str]:
    """A search for any of `needles` (literals)."""
    return re.compile("|".join(map(re.escape, needles)))


def led_lines(lines: list[str], words: tuple[str, ...]) -> list[int]:
    """The indexes of the `lines` that a blank or tab leads and whose rest starts with one of
    `words`, each line looked at in C (map), no Python step per line."""
    bare = list(map(str.lstrip, lines, repeat(" \t")))
    led = map(ne, map(len, lines), map(len, bare))
    return list(compress(count(), map(and_, led, map(str.startswith, bare, repeat(words)))))


def _newlines_before(offsets: list[int], within: str) -> list[int]:
    """How many newlines precede each of the sorted `offsets` in `within`: the counts between
    neighbours, summed, each in C (a map: no Python step an offset, where a loop over thousands
    of hits cost more than the search that found them)."""
    return list(accumulate(map(within.count, repeat("\n"), [0, *offsets], offsets)))


_SHARED: ContextVar[Doc | None] = ContextVar("caveman_batch_payload_doc", default=None)


@contextmanager
def shared(text: str) -> Iterator[Doc]:
    """A Doc of `text` that `Doc.of(text)` hands every cut while the block runs: the text
    is split into lines once per reduce, and its line count comes with the split."""
    doc = Doc(text)
    token = _SHARED.set(doc)
    try:
        yield doc
    finally:
        _SHARED.reset(token)


_NL_CACHE: dict[str, re.Pattern[str]] = {}


def _at_line_start(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """`pattern` (written for one line, maybe with ^) behind a newline, compiled once."""
    found = _NL_CACHE.get(pattern.pattern)
    if found is None:
        body = pattern.pattern.removeprefix("^")
        found = _NL_CACHE[pattern.pattern] = re.compile(r"\n(?:" + body + ")", pattern.flags | re.MULTILINE)
    return found


@cache
def _anchored(source: str) -> bool:
    """Whether a pattern's every alternative starts with `^`: it opens with `^` and has
    no `|` outside a group or a character class."""
    if not source.startswith("^"):
        return False
    depth, i, n = 0, 1, len(source)
    while i < n:
        c = source[i]
        if c == "\\":
            i += 1
        elif c == "[":
            i += 2 if source.startswith("[^", i) else 1
            i += 1 if i < n and source[i] == "]" else 0  # a leading ] is a member
            while i < n and source[i] != "]":
                i += 2 if source[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return False
        i += 1
    return True


def hit_count(pattern: re.Pattern[str], part: str, most: int) -> int:
    """How many times `pattern` matches in `part` (as `line_hits` counts), counted up to `most`:
    below `most`, the whole count."""
    if _anchored(pattern.pattern) and pattern.flags & re.MULTILINE:
        found = _at_line_start(pattern).finditer(Doc.of(part).nl_text)
    else:
        found = pattern.finditer(part)
    return len(list(islice(found, most)))  # consumed in C, no Python step a match


def line_hits(pattern: re.Pattern[str], part: str, least: int) -> bool:
    """Whether `pattern` (MULTILINE) matches at least `least` times in `part` (findall's count).

    A pattern anchored at line starts (whose matches stay within a line, as every line
    pattern here does) is searched as `\\n(?:pattern)`: the engine then jumps from
    newline to newline instead of trying every position, and stops at the `least`-th
    line that matches. Any other pattern is counted as findall would."""
    if _anchored(pattern.pattern) and pattern.flags & re.MULTILINE:
        found = _at_line_start(pattern).finditer(Doc.of(part).nl_text)  # the reduce's copy, made once
    else:
        found = pattern.finditer(part)
    return next(islice(found, least - 1, None), None) is not None


Needle = str | re.Pattern[str]


def needle_hits(pattern: re.Pattern[str], text: str, needles: tuple[Needle, ...], least: int) -> bool:
    """Whether at least `least` lines of `text` that hold one of `needles` (a substring, or a
    pattern led by a literal) match `pattern` (a line pattern, matched at the line's start).
    Every line the pattern can match must hold a needle: then this is `line_hits`, but the
    lines are found by `str.find` or a literal-led search (C, fast) and only those are
    matched, so a pattern that reads every char of every line (`path:12:3: error:`) costs the
    needles' occurrences, not the text. Needles on most lines (every line of a build holds
    "error") would cost a Python step each: past `_DENSE` misses (more in a long text, where
    that search costs more) the lines are searched as `line_hits` does, in C."""
    return len(needle_lines(pattern, text, needles, least)) >= least


def needle_lines(pattern: re.Pattern[str], text: str, needles: tuple[Needle, ...], least: int) -> set[int]:
    """Where (offsets in `text`) `least` of the lines that `needle_hits` counts start, or all of
    them when there are fewer."""
    doc = Doc.of(text)
    needles = tuple(n for n in needles if not isinstance(n, str) or doc.has(n))  # absent: no find
    seen: set[int] = set()
    misses, dense = 0, max(_DENSE, len(text) // _DENSE_CHARS)
    match, find, rfind = pattern.match, text.find, text.rfind
    first = find("\n")
    if match(text, 0, len(text) if first < 0 else first):  # a "\n"-led needle misses line one
        seen.add(0)
        if least <= 1:
            return seen
    for needle in needles:
        locate = (lambda at, n=needle: find(n, at)) if isinstance(needle, str) else _locator(needle, text)
        pos = locate(0)
        while pos >= 0:
            start = rfind("\n", 0, pos) + 1
            end = find("\n", pos)
            end = len(text) if end < 0 else end
            if start not in seen and match(text, start, end):
                seen.add(start)
                if len(seen) >= least:
                    return seen
            else:
                misses += 1
                if misses > dense:  # the newline before a line is at the line's own offset in nl_text
                    return set(islice(doc.positions(pattern), least))
            pos = locate(end)
    return seen


_DENSE: Final = 64
#: a miss (a Python step) costs about what the regex engine takes for this many chars
_DENSE_CHARS: Final = 2_048


def _locator(needle: re.Pattern[str], text: str) -> Callable[[int], int]:
    """Where `needle` next ends (its last char, inside the line it found: a needle may start
    with the newline before it)."""
    def locate(at: int) -> int:
        found = needle.search(text, at)
        return -1 if found is None else found.end() - 1
    return locate


def first_hit(pattern: re.Pattern[str], text: str) -> int:
    """Where the first line `pattern` matches at its start begins in `text` (-1: none)."""
    found = _at_line_start(pattern).search(Doc.of(text).nl_text)
    return -1 if found is None else found.start()


def count_between(hits: list[int], start: int, end: int) -> int:
    """How many of the sorted line indexes `hits` lie in [start, end)."""
    return bisect_left(hits, end) - bisect_left(hits, start)


class _Picker:
    """Greedy selection of runs with exact accounting of gap markers.

    Every gap is reserved at its own marker's size (`size`), not at the longest one a
    marker could take, and a gap that costs no more to show than its marker is shown:
    a blank or one-char line is never replaced by a 20-char marker."""

    def __init__(self, doc: Doc, limits: Limits, size: GapSize) -> None:
        self.doc = doc
        self.n = len(doc)
        self._size = size
        self._sizes: dict[tuple[int, int], int] = {}  # a gap is costed when made and when split
        self.whole = whole = size(0, self.n)  # the longest marker there is
        self.width = min(limits.line_chars or limits.chars, limits.chars - whole - 2)
        self.kept: list[int] = []  # the chosen lines, in order
        self.widths: dict[int, int] = {}  # kept lines cut narrower than `width` to fit the room left
        self.chars = whole + 1  # one gap covers everything at the start
        self.lines = 1
        self.lead: list[str] = []
        self.limits = limits

    def size(self, start: int, end: int) -> int:
        key = (start, end)
        found = self._sizes.get(key)
        if found is None:
            found = self._sizes[key] = self._size(start, end)
        return found

    def _shown(self, start: int, end: int) -> int:
        """What lines [start, end) cost shown, each with its newline."""
        lines, width = self.doc.lines, self.width
        if end - start == 1:
            return min(len(lines[start]), width) + 1
        return sum(min(len(line), width) for line in lines[start:end]) + end - start

    def _cheap(self, start: int, end: int) -> bool:
        """Whether the gap [start, end) costs no more shown than marked (in lines too, when
        lines are budgeted). No marker is longer than the whole text's: a gap that costs
        more shown is ruled out before its own marker is made."""
        if end - start > 1 and self.limits.lines is not None or end - start > self.whole + 1:
            return False
        shown = self._shown(start, end)
        return shown <= self.whole + 1 and shown <= self.size(start, end) + 1

    def _gap_cost(self, gaps: Iterable[tuple[int, int]]) -> tuple[int, int]:
        chars = count = 0
        for s, e in gaps:
            if s < e:
                chars += self.size(s, e) + 1
                count += 1
        return chars, count

    def offer(self, start: int, end: int) -> bool | None:
        """Whether the run was taken (None: it had nothing new)."""
        end = min(end, self.n)
        kept = self.kept
        a, b = bisect_left(kept, start), bisect_left(kept, end)
        if b - a >= end - start:
            return None
        lo = kept[a - 1] if a else -1  # the kept lines around the run: the gaps it touches
        hi = kept[b] if b < len(kept) else self.n
        inside = kept[a:b]
        if inside:
            old_chars, old_gaps = self._gap_cost((p + 1, q) for p, q in zip([lo, *inside], [*inside, hi]))
        else:  # the usual case: the run lies in one gap
            old_chars, old_gaps = self.size(lo + 1, hi) + 1, 1
        if lo + 1 < start and self._cheap(lo + 1, start):
            start = lo + 1
        if end < hi and self._cheap(end, hi):
            end = hi
        new_chars, new_gaps = self._gap_cost(((lo + 1, start), (end, hi)))
        shown = self._shown(start, end)
        if inside:
            shown -= sum(min(len(self.doc.lines[i]), self.widths.get(i, self.width)) + 1 for i in inside)
        chars = shown + new_chars - old_chars
        lines = end - start - len(inside) + new_gaps - old_gaps
        if self.chars + chars > self.limits.chars:
            return False
        if self.limits.lines is not None and self.lines + lines > self.limits.lines:
            return False
        kept[a:b] = range(start, end)
        self.chars += chars
        self.lines += lines
        return True

    def offer_clipped(self, i: int) -> bool:
        """Line `i`, too long to fit whole, cut to the room left (its marker counting what it
        omits) rather than dropped: a minified bundle or pip's one long line of versions."""
        line = self.doc.lines[i] if i < self.n else ""
        if min(len(line), self.width) < _LONG_LINE:
            return False
        kept = self.kept
        a = bisect_left(kept, i)
        if a < len(kept) and kept[a] == i:
            return False
        lo = kept[a - 1] if a else -1
        hi = kept[a] if a < len(kept) else self.n
        new_chars, new_gaps = self._gap_cost(((lo + 1, i), (i + 1, hi)))
        gaps = new_chars - self.size(lo + 1, hi) - 1
        width = min(self.width, self.limits.chars - self.chars - gaps - 1)
        lines = new_gaps  # the line, less the one gap it splits, plus the gaps around it
        if width < _MIN_CLIP or self.limits.lines is not None and self.lines + lines > self.limits.lines:
            return False
        kept.insert(a, i)
        self.widths[i] = width
        self.chars += width + 1 + gaps
        self.lines += lines
        return True

    def offer_lead(self, lead: list[str]) -> None:
        lead = [clip(line, self.width) for line in lead]
        chars = sum(len(x) + 1 for x in lead)
        if self.chars + chars > self.limits.chars:
            return
        if self.limits.lines is not None and self.lines + len(lead) > self.limits.lines:
            return
        self.lead, self.chars, self.lines = lead, self.chars + chars, self.lines + len(lead)

    def room(self) -> int:
        return self.limits.chars - self.chars

    def full(self) -> bool:
        """Whether nothing of size fits: room for no line with a marker as long as the longest
        (a line beside a kept one may still fit, but looking for it costs searches)."""
        return self.room() < self.whole + 2


#: a line at least this wide is cut to the room left when it does not fit whole, to no
#: fewer than _MIN_CLIP chars (its omission marker included)
_LONG_LINE: Final = 200
_MIN_CLIP: Final = 80
_MAX_MISSES: Final = 64
_LOW_ROOM: Final = 64


def pick(doc: Doc, runs: Iterable[Run], limits: Limits, lead: list[str] | None = None,
         label: GapLabel | None = None, size: GapSize | None = None,
         presorted: bool = False, lead_after: int = -1) -> str | None:
    """The lines of the best runs that fit, in source order, every gap marked.

    With `presorted`, `runs` is consumed lazily in the order given (most wanted first)
    and only as far as the budget reaches: a cut can offer every line of a huge
    output without materializing them. `lead` (summary lines a cut writes) is placed
    on top, but competes for room after the runs of priority <= `lead_after`.
    `size` is what a gap's marker is reserved at: at least `len(label(start, end))`
    (the default is that length, so pass it only when a label is costly to make)."""
    lead = lead or []
    label = label or (lambda s, e: lines_marker(e - s))
    size = size or (lambda s, e: len(label(s, e)))
    picker = _Picker(doc, limits, size)
    if picker.chars > limits.chars:
        return None
    misses = 0
    long_lines: list[tuple[int, int]] = []  # (priority, line) too long to fit whole: cut later
    for prio, start, end in (runs if presorted else sorted(runs)):
        if long_lines and prio > long_lines[0][0]:  # the shorter lines of their priority went first
            _clip_long(picker, long_lines)
        if lead and prio > lead_after:
            picker.offer_lead(lead)
            lead = []
        taken = picker.offer(start, end)
        if taken is False and end - start == 1 and start < picker.n and len(doc.lines[start]) >= _LONG_LINE:
            long_lines.append((prio, start))
        if taken is False:  # nearly full, only a few more tries: each may start a search of the text
            misses += 1 if picker.room() > max(_LOW_ROOM, limits.chars // 20) else _MAX_MISSES // 2
        elif taken:
            misses = 0
        if picker.full() or misses > _MAX_MISSES:  # nothing more of size will fit
            break
    _clip_long(picker, long_lines)
    if lead:
        picker.offer_lead(lead)
    if not picker.kept:
        return None
    return render(doc, picker.kept, picker.lead, label, picker.width, picker.widths)


def _clip_long(picker: _Picker, long_lines: list[tuple[int, int]]) -> None:
    """Offer the over-long lines that did not fit whole, cut to the room left, and forget them."""
    for _, line in long_lines:
        if picker.room() >= _MIN_CLIP:
            picker.offer_clipped(line)
    long_lines.clear()


def render(doc: Doc, keep: list[int], lead: list[str], label: GapLabel, width: int,
           widths: dict[int, int] | None = None) -> str:
    out = list(lead)
    prev = -1
    narrower = widths or {}
    for i in keep:
        if i > prev + 1:
            out.append(label(prev + 1, i))
        out.append(clip(doc.lines[i], narrower.get(i, width)))
        prev = i
    if prev < len(doc) - 1:
        out.append(label(prev + 1, len(doc)))
    return "\n".join(out)


def finish(view: str | None, limits: Limits) -> str | None:
    """`view` if it keeps the budget, else None (the next cut gets its turn)."""
    return view if view is not None and fits(view, limits) else None
