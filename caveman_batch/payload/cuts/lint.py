"""Linters (eslint, ruff, clippy): totals and the top rules with example locations first,
then the problems themselves, errors before warnings, as far as they fit."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Final

from ..view import Doc
from ._lines import LineCut, rx

_ESLINT = rx(r"^[ \t]+(\d+:\d+)[ \t]+(error|warning)[ \t]")
_RUFF = rx(r"^([^ \t\n:][^:\n]*:\d+:\d+): ([A-Z]{1,4}\d{2,4})\b")
_CLIPPY = rx(r"#\[(?:warn|deny)\((clippy::\w+)\)\]|rust-clippy/master/index\.html#(\w+)")
_ESLINT_FILE = rx(r"^(?:/|\.{0,2}[\w@.-]*/|[A-Za-z]:\\)[^ \t\n]*\.\w+\r?$")
_TOP: Final = 8


def _rules(doc: Doc) -> tuple[Counter[str], dict[str, list[str]]]:
    counts: Counter[str] = Counter()
    where: dict[str, list[str]] = defaultdict(list)
    current = ""
    for i, line in enumerate(doc.lines):
        if _ESLINT_FILE.match(line):
            current = line.strip()
        elif m := _ESLINT.match(line):
            _note(counts, where, line.split()[-1], f"{current}:{m.group(1)}")
        elif m := _RUFF.match(line):
            _note(counts, where, m.group(2), m.group(1))
        elif m := _CLIPPY.search(line):
            _note(counts, where, m.group(1) or f"clippy::{m.group(2)}", f"line {i + 1}")
    return counts, where


def _note(counts: Counter[str], where: dict[str, list[str]], rule: str, loc: str) -> None:
    counts[rule] += 1
    if len(where[rule]) < 2:
        where[rule].append(loc)


class LintCut(LineCut):
    def lead(self, doc: Doc) -> list[str]:
        counts, where = _rules(doc)
        if not counts:
            return []
        head = [f"[lint cut: {sum(counts.values()):,} problems, {len(counts):,} rules; top rules:]"]
        for rule, n in counts.most_common(_TOP):
            head.append(f"  {rule} ×{n:,} (e.g. {', '.join(where[rule])})")
        if len(counts) > _TOP:
            head.append(f"  (… {len(counts) - _TOP:,} more rules)")
        return head


CUT = LintCut(
    name="lint",
    signal=re.compile(r"^[ \t]+\d+:\d+[ \t]+(?:error|warning)[ \t]+[^ \t\n]|^[^ \t\n:][^:\n]*:\d+:\d+: [A-Z]{1,4}\d{2,4} "
                      r"|clippy::\w+|^✖ \d+ problems?", re.M),
    keep=((0, rx(r"^(?:✖ \d+ problems?|Found \d+ errors?|warning: .* generated \d+ warnings?"
                 r"|error: could not compile|\d+ errors?|All checks passed)")),
          (1, rx(r"^[ \t]+\d+:\d+[ \t]+error[ \t]|^[^ \t\n:][^:\n]*:\d+:\d+: [EF]\d|^error(?:\[\w+\])?: ")),
          (2, _ESLINT_FILE),
          (3, rx(r"^[ \t]+\d+:\d+[ \t]+warning[ \t]|^[^ \t\n:][^:\n]*:\d+:\d+: [A-Z]{1,4}\d|^warning: |^[ \t]+--> "))),
    min_hits=2,
)
