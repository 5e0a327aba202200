"""A cut that is only "these lines matter this much": a detect pattern and prioritized greps."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

from ..model import Hint, Limits
from ..view import Doc, GapLabel, Run, finish, lines_marker, pick, sample


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

    def detect(self, text: str, hint: Hint) -> bool:
        hits = self.signal.findall(sample(text))
        return len(hits) >= self.min_hits

    def runs(self, doc: Doc) -> list[Run]:
        runs: list[Run] = []
        for prio, pattern in self.keep:
            for i in doc.grep(pattern):
                runs.append((prio, i, i + 1))
                if self.context and prio < self.context_below:
                    runs.append((prio + 3, max(0, i - self.context), i + self.context + 1))
        return runs

    def lead(self, doc: Doc) -> list[str]:
        return []

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc(text)
        runs = self.runs(doc)
        if not runs:
            return None
        label, room = self.labeler(doc)
        lead = self.lead(doc)
        view = pick(doc, runs, limits, lead=lead, label=label, label_room=room)
        if view is None and lead:  # the summary up front is worth less than the lines it sums
            view = pick(doc, runs, limits, label=label, label_room=room)
        return finish(view, limits)

    def labeler(self, doc: Doc) -> tuple[GapLabel | None, int | None]:
        """Gap markers that also count the lines of each kind in `gap_counts` they hide."""
        if not self.gap_counts:
            return None, None
        sums = [(name, _prefix_sums(doc.grep(p), len(doc))) for name, p in self.gap_counts]

        def label(start: int, end: int) -> str:
            hidden = [f"{s[end] - s[start]:,} {name}" for name, s in sums if s[end] > s[start]]
            extra = f" ({', '.join(hidden)})" if hidden else ""
            return f"[… {end - start:,} line{'s' if end - start != 1 else ''} omitted{extra} …]"

        digits = len(f"{len(doc):,}")
        room = len(lines_marker(len(doc))) + sum(len(n) + digits + 2 for n, _ in sums) + 3
        return label, room


def _prefix_sums(hits: list[int], n: int) -> list[int]:
    """sums[i] = how many hits lie before line i."""
    sums = [0] * (n + 1)
    for i in hits:
        sums[i + 1] = 1
    return list(accumulate(sums))


def rx(pattern: str) -> re.Pattern[str]:
    """A multi-line pattern (every pattern here is anchored per line)."""
    return re.compile(pattern, re.M)
