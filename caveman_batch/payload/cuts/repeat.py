"""Repeated lines: every run of identical consecutive lines becomes the line once and a count."""

from __future__ import annotations

from itertools import groupby, islice
from operator import eq

from ..model import Hint, Limits
from ..view import Doc, finish


def _repeats(lines: list[str]) -> int:
    """How many lines equal the one before (compared in C)."""
    return sum(map(eq, lines, islice(lines, 1, None)))


class RepeatCut:
    name = "repeat"

    def detect(self, text: str, hint: Hint) -> bool:
        lines = Doc.of(text).lines  # the lines reduce split: the whole text, no new split
        return len(lines) >= 10 and _repeats(lines) * 4 >= len(lines)

    def cut(self, text: str, limits: Limits) -> str | None:
        out: list[str] = []
        for line, group in groupby(text.split("\n")):
            out.append(line)
            n = sum(1 for _ in group) - 1
            if n:
                out.append(f"[… previous line repeated {n:,} more time{'s' if n != 1 else ''} …]")
        return finish("\n".join(out), limits)


CUT = RepeatCut()
