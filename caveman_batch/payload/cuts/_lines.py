"""A cut that is only "these lines matter this much": a detect pattern and prioritized greps."""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial

from ..model import Hint, Limits
from ..view import (
    Doc,
    GapLabel,
    GapSize,
    Run,
    census,
    count_between,
    finish,
    line_hits,
    needle_hits,
    pick,
)


@dataclass(frozen=True)
class LineCut:
    """Keep the lines each pattern finds, lowest priority number first.

    `context` keeps that many neighbours of every hit of a pattern at `context_prio`
    (or lower), so a kept error line comes with the line that explains it.
    """

    name: str
    signal: re.Pattern[str]
    keep: tuple[tuple[int, re.Pattern[str]], ...]
    context: int = 0
    context_below: int = 2  # only hits at or above this priority get context
    min_hits: int = 1
    #: what each gap marker counts besides lines, e.g. (("ERROR", pattern),)
    gap_counts: tuple[tuple[str, re.Pattern[str]], ...] = ()
    #: what gap markers count as occurrences of substrings: cheap for frequent lines
    #: (e.g. 24,000 "PASSED"), exact as long as a line holds one marker
    gap_needles: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: pattern text -> substrings one of which a line must hold (searched, not matched)
    needles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: pattern text -> substrings one of which every line the pattern matches (at its start)
    #: holds: its lines are read lazily where these are (`Doc.iled`), not by trying the pattern
    #: at every line (registered for the census: give literals without a newline)
    led_needles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the lead (summary lines on top) is worth less than runs of this priority or lower
    lead_after: int = 0

    #: substrings one of which every match of `signal` holds: without any, no search
    signal_needles: tuple[str, ...] = ()
    #: substrings one of which every match of `signal` holds (behind a newline: "\nRan " for
    #: a line that starts with it), only tested for, by the census of the text (`Doc.has`):
    #: a text with none is not searched line by line
    probes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        census(*self.probes, *self.signal_needles, *(n for _, needles in self.gap_needles for n in needles),
               *(n for needles in self.led_needles.values() for n in needles))

    def detect(self, text: str, hint: Hint) -> bool:
        """`min_hits` lines of the whole text match `signal`: one search from newline to
        newline, linear, that stops at the last hit it needs."""
        if self.signal_needles:  # only the lines holding a needle are matched
            return needle_hits(self.signal, text, self.signal_needles, self.min_hits)
        if self.probes and not Doc.of(text).holds(self.probes):
            return False
        return line_hits(self.signal, text, self.min_hits)

    def runs(self, doc: Doc) -> Iterator[Run]:
        """Every kept line as a run, lazily, lowest priority number first, then in order."""
        return by_priority(self.streams(doc))

    def streams(self, doc: Doc) -> list[Stream]:
        """The kept lines of each pattern (and their context) as runs of one priority."""
        streams: list[Stream] = []
        for prio, pattern, needles in self._keep():
            led = self.led_needles.get(pattern.pattern, ())
            streams.append((prio, partial(_hits, doc, pattern, needles, prio, 0, led)))
            if self.context and prio < self.context_below:
                streams.append((prio + 3, partial(_hits, doc, pattern, needles, prio + 3, self.context, led)))
        return streams

    def _keep(self) -> Iterator[tuple[int, re.Pattern[str], tuple[str, ...]]]:
        for prio, pattern in self.keep:
            yield prio, pattern, self.needles.get(pattern.pattern, ())

    def lead(self, doc: Doc, limits: Limits) -> list[str]:
        return []

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        label, size = self.labeler(doc)
        lead = self.lead(doc, limits)
        view = pick(doc, self.runs(doc), limits, lead=lead, label=label, size=size,
                    presorted=True, lead_after=self.lead_after)
        return finish(view, limits)

    def labeler(self, doc: Doc) -> tuple[GapLabel | None, GapSize | None]:
        """Gap markers that also count the lines of each kind in `gap_counts` they hide,
        and the size each is reserved at."""
        if not self.gap_counts and not self.gap_needles:
            return None, None
        hits = [(name, doc.grep(p, self.needles.get(p.pattern, ()))) for name, p in self.gap_counts]
        # a needle that is nowhere in the text (the census says, without a pass) is not counted
        present = [(name, tuple(n for n in needles if doc.has(n) and doc.count(n)))
                   for name, needles in self.gap_needles]
        present = [(name, needles) for name, needles in present if needles]

        def label(start: int, end: int) -> str:
            counts = [(name, count_between(h, start, end)) for name, h in hits]
            if present and end - start <= _EXACT_GAP:  # no needle holds a newline: line by line
                part = doc.lines[start:end]
                counts += [(name, sum(line.count(n) for line in part for n in needles)) for name, needles in present]
            elif present:
                a, b = doc.offset(start), doc.offset(end)
                counts += [(name, sum(doc.text.count(n, a, b) for n in needles)) for name, needles in present]
            return _marker(end - start, counts)

        if not present:
            return label, None  # every count is a bisection: the true size is cheap
        totals = [(name, sum(map(doc.count, needles))) for name, needles in present]

        def size(start: int, end: int) -> int:
            """The true size of a short gap's marker; a long gap's counts of substrings (a
            scan of the gap each) are bounded by their count in the whole text."""
            if end - start <= _EXACT_GAP:
                return len(label(start, end))
            return len(_marker(end - start, [(name, count_between(h, start, end)) for name, h in hits]
                               + totals))

        return label, size


#: gaps of up to this many lines get their marker's true size even when counting is a scan
_EXACT_GAP = 64


def _marker(lines: int, counts: list[tuple[str, int]]) -> str:
    """A gap marker: the lines it hides, and how many of each kind (those it has)."""
    hidden = [f"{k:,} {name}" for name, k in counts if k]
    extra = f" ({', '.join(hidden)})" if hidden else ""
    return f"[… {lines:,} line{'s' if lines != 1 else ''} omitted{extra} …]"


def _hits(doc: Doc, pattern: re.Pattern[str], needles: tuple[str, ...], prio: int,
          context: int, led: tuple[str, ...] = ()) -> Iterator[Run]:
    """Each line `pattern` finds as a run at `prio`, widened by `context` lines on each side;
    with `led`, the lines are those `pattern` matches at their start, read where `led` is."""
    for i in led_lines(doc, pattern, led) if led else doc.igrep(pattern, needles):
        yield (prio, max(0, i - context), i + context + 1)


def led_lines(doc: Doc, pattern: re.Pattern[str], needles: tuple[str, ...]) -> Iterator[int]:
    """`doc.igrep(pattern)`, lazily, for a pattern every line of which holds one of `needles`:
    where the text holds one of them, the lines it is on (`Doc.iled`: a literal is found fast);
    where it holds more, the pattern's own search (a search per needle, each with its lines
    counted, cost more than it; an alternation of them is tried at every char)."""
    held = tuple(needle for needle in needles if doc.has(needle))  # the census: no pass each
    if len(held) == 1:
        return doc.iled(pattern, held)
    return doc.igrep(pattern) if held else iter(())


#: runs that all have one priority, in line order; or a callable making them when first asked
Stream = tuple[int, Iterator[Run] | Callable[[], Iterator[Run]]]


def by_priority(streams: Iterable[Stream]) -> Iterator[Run]:
    """The runs of every stream, sorted as `heapq.merge` sorts them, lazily.

    Each stream holds one priority, so the streams are taken a priority at a time
    (merged by line only among equals) and a stream is not started, its pattern not
    searched, until the picker gets to its priority: once the budget is full the
    searches for less wanted lines never run."""
    groups: dict[int, list[Stream]] = {}
    for stream in streams:
        groups.setdefault(stream[0], []).append(stream)
    for prio in sorted(groups):
        its = [s() if callable(s) else s for _, s in groups[prio]]
        yield from its[0] if len(its) == 1 else heapq.merge(*its)


def newlines_and_one(doc: Doc) -> int:
    """`doc.text.count("\n") + 1`, from the lines when `reduce` has split them (their count
    is known: no pass over the text), else counted."""
    text = doc.text
    return doc.line_count(split=False) + (not text or text.endswith("\n"))


def rx(pattern: str) -> re.Pattern[str]:
    """A line pattern; `Doc.igrep` matches it at each line's start."""
    return re.compile(pattern, re.MULTILINE)
