"""Shared machinery of the cuts: lines, clipping, markers, and picking lines by priority.

Most cuts only say which source lines matter and how much (a priority per run of
lines); `pick` keeps the most important runs that fit, in source order, and marks
every gap with its exact line count. The budget is checked here, once, so every cut
gets the laws (budget held, whole lines, counted omissions) for free.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable
from itertools import accumulate
from typing import Final

from .model import Limits

SAMPLE_HEAD: Final = 32_768
SAMPLE_TAIL: Final = 8_192

#: (priority, first line, end line exclusive): lower priority numbers are kept first.
Run = tuple[int, int, int]
GapLabel = Callable[[int, int], str]


def sample(text: str) -> str:
    """The part of `text` detection looks at: detecting must not cost a full scan."""
    if len(text) <= SAMPLE_HEAD + SAMPLE_TAIL:
        return text
    return text[:SAMPLE_HEAD] + "\n" + text[-SAMPLE_TAIL:]


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


class Doc:
    """A text split into lines once, with the offsets that map regex hits to lines."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.split("\n")
        if self.lines and self.lines[-1] == "" and len(self.lines) > 1:
            self.lines.pop()  # a final newline ends the last line, it does not start one
        self._starts: list[int] | None = None

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def starts(self) -> list[int]:
        if self._starts is None:
            self._starts = [0, *accumulate(len(line) + 1 for line in self.lines)]
        return self._starts

    def line_of(self, pos: int) -> int:
        return bisect_right(self.starts, pos) - 1

    def grep(self, pattern: re.Pattern[str]) -> list[int]:
        """Indexes of the lines where `pattern` matches (once per line, in order)."""
        found: list[int] = []
        last = -1
        for m in pattern.finditer(self.text):
            i = self.line_of(m.start())
            if i != last and i < len(self.lines):
                found.append(i)
                last = i
        return found


class _Picker:
    """Greedy selection of runs with exact accounting of gap markers."""

    def __init__(self, doc: Doc, limits: Limits, lead: list[str], label_room: int) -> None:
        self.doc = doc
        self.n = len(doc)
        self.width = min(limits.line_chars or limits.chars, limits.chars - label_room - 2)
        self.chosen: set[int] = set()
        self.chars = sum(len(x) + 1 for x in lead) + label_room + 1  # one gap at the start
        self.lines = len(lead) + 1
        self.limits = limits
        self.label_room = label_room

    def line_cost(self, i: int, taken: set[int]) -> tuple[int, int]:
        left = i > 0 and (i - 1) not in self.chosen and (i - 1) not in taken
        right = i < self.n - 1 and (i + 1) not in self.chosen and (i + 1) not in taken
        gaps = left + right - 1  # splitting a gap adds one; closing one removes one
        return min(len(self.doc.lines[i]), self.width) + 1 + gaps * (self.label_room + 1), 1 + gaps

    def offer(self, start: int, end: int) -> bool:
        taken: set[int] = set()
        chars, lines = 0, 0
        for i in range(start, min(end, self.n)):
            if i in self.chosen:
                continue
            c, n = self.line_cost(i, taken)
            taken.add(i)
            chars, lines = chars + c, lines + n
        if self.chars + chars > self.limits.chars:
            return False
        if self.limits.lines is not None and self.lines + lines > self.limits.lines:
            return False
        self.chosen |= taken
        self.chars += chars
        self.lines += lines
        return True

    def full(self) -> bool:
        return self.limits.chars - self.chars < 2 + self.label_room


def pick(doc: Doc, runs: Iterable[Run], limits: Limits, lead: list[str] | None = None,
         label: GapLabel | None = None, label_room: int | None = None,
         presorted: bool = False) -> str | None:
    """The lines of the best runs that fit, in source order, every gap marked."""
    lead = lead or []
    label = label or (lambda s, e: lines_marker(e - s))
    room = label_room if label_room is not None else len(lines_marker(max(len(doc), 10)))
    picker = _Picker(doc, limits, lead, room)
    if picker.chars > limits.chars:
        return None
    for _prio, start, end in (runs if presorted else sorted(runs)):
        picker.offer(start, end)
        if picker.full():
            break
    if not picker.chosen:
        return None
    out = render(doc, sorted(picker.chosen), lead, label, picker.width)
    return out


def render(doc: Doc, keep: list[int], lead: list[str], label: GapLabel, width: int) -> str:
    out = list(lead)
    prev = -1
    for i in keep:
        if i > prev + 1:
            out.append(label(prev + 1, i))
        out.append(clip(doc.lines[i], width))
        prev = i
    if prev < len(doc) - 1:
        out.append(label(prev + 1, len(doc)))
    return "\n".join(out)


def finish(view: str | None, limits: Limits) -> str | None:
    """`view` if it keeps the budget, else None (the next cut gets its turn)."""
    return view if view is not None and fits(view, limits) else None
