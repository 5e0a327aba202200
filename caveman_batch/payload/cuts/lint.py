"""Linters (eslint, ruff, clippy): totals and the top rules with example locations first,
then the problems themselves, errors before warnings, as far as they fit."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, line_hits, sample
from ._lines import LineCut, rx

_ESLINT_FILE = rx(r"^(?:/|\.{0,2}[\w@.-]*/|[A-Za-z]:\\)[^ \t\n]*\.\w+\r?$")
_TOP: Final = 8


# a rule code, or what ruff reports a file it cannot parse as (no code: invalid-syntax now,
# SyntaxError before 0.5)
_RUFF_RULE: Final = r"([A-Z]{1,4}\d{2,4}\b|invalid-syntax(?=:)|SyntaxError(?=:))"
_RUFF_ALL = re.compile(r"\n([^ \t\n:][^:\n]*:\d+:\d+): " + _RUFF_RULE)
_RUFF_RULES = re.compile(r"\n[^ \t\n:][^:\n]*:\d+:\d+: " + _RUFF_RULE)
_ESLINT_ALL = re.compile(r"\n[ \t]+(\d+:\d+)[ \t]+(?:error|warning)[ \t]([^\n]*)")
_ESLINT_REST = re.compile(r"\n[ \t]+\d+:\d+[ \t]+(?:error|warning)[ \t]([^\n]*)")  # _ESLINT_ALL's rest
_CLIPPY_ALL = re.compile(r"#\[(?:warn|deny)\((clippy::\w+)\)\]|rust-clippy/master/index\.html#(\w+)")


def _problems(doc: Doc, found: tuple[bool, bool, bool] = (True, True, True)) -> Iterator[tuple[str, str, int]]:
    """(rule, location, offset) of every problem, lazily; `found` says which of the ruff,
    eslint and clippy forms `_counts` saw at all (a form it did not is not searched again)."""
    text = doc.nl_text
    for m in _RUFF_ALL.finditer(text) if found[0] else ():
        yield m.group(2), m.group(1), m.start()
    for m in _ESLINT_ALL.finditer(text) if found[1] else ():
        yield _eslint_rule(m.group(2)), m.group(1), m.start()
    for m in _CLIPPY_ALL.finditer(text) if found[2] and "clippy" in text else ():
        yield m.group(1) or f"clippy::{m.group(2)}", "", m.start()


def _eslint_rule(rest: str) -> str:
    return rest.rsplit(None, 1)[-1] if rest.strip() else "?"


def _counts(doc: Doc) -> tuple[Counter[str], tuple[bool, bool, bool]]:
    """Problems per rule, and which forms (ruff, eslint, clippy) had any; `findall` builds
    the matches in C (most of the cost here)."""
    text = doc.nl_text
    ruff = _RUFF_RULES.findall(text) if ": " in text else []  # a list of strings: counted in C
    counts = Counter(ruff)
    eslint = Counter(_ESLINT_REST.findall(text))
    for rest, n in eslint.items():  # each distinct message once
        counts[_eslint_rule(rest)] += n
    clippy = []
    if "clippy" in text:  # the clippy pattern has no literal to jump to: search only if worth it
        clippy = _CLIPPY_ALL.findall(text)
        counts.update(a or f"clippy::{b}" for a, b in clippy)
    return counts, (bool(ruff), bool(eslint), bool(clippy))


def _where(doc: Doc, loc: str, offset: int) -> str:
    """A problem's location; an eslint one gets the file its block starts with."""
    if loc and ":" in loc and not loc.split(":")[0].isdigit():
        return loc
    text = doc.nl_text
    block = max(text.rfind("\n\n", 0, offset) + 2, 1)
    head = text[block:text.find("\n", block)].strip()
    line = text.count("\n", 0, offset + 1)
    return f"{head}:{loc}" if loc else f"line {line}"


def _rules(doc: Doc) -> tuple[Counter[str], dict[str, list[str]]]:
    counts, found = _counts(doc)
    top = {rule for rule, _ in counts.most_common(_TOP)}
    where: dict[str, list[str]] = defaultdict(list)
    for rule, loc, offset in _problems(doc, found):  # two examples of each top rule, then stop
        if rule in top and len(where[rule]) < 2:
            where[rule].append(_where(doc, loc, offset))
            if all(len(where[r]) >= 2 or counts[r] < 2 for r in top) and len(where) == len(top):
                break
    return counts, where


# the signal's alternatives that start a line, and clippy's lint names anywhere
_SIGNAL_LINES: Final = (r"[ \t]+\d+:\d+[ \t]+(?:error|warning)[ \t]+[^ \t\n]",
                        r"[^ \t\n:][^:\n]*:\d+:\d+: [A-Z]{1,4}\d{2,4} ", r"✖ \d+ problems?")
_SIGNAL: Final = re.compile(f"^{_SIGNAL_LINES[0]}|^{_SIGNAL_LINES[1]}|clippy::\\w+|^{_SIGNAL_LINES[2]}", re.MULTILINE)
_SIGNAL_AT_LINES: Final = rx("^(?:" + "|".join(_SIGNAL_LINES) + ")")


class LintCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """Two signal hits; without "clippy::" in the sample every hit starts a line (one per
        line), so the lines are searched alone, newline to newline."""
        part = sample(text)
        if "clippy::" in part:
            return len(self.signal.findall(part)) >= self.min_hits
        return line_hits(_SIGNAL_AT_LINES, part, self.min_hits)

    def lead(self, doc: Doc, limits: Limits) -> list[str]:
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
    signal=_SIGNAL,
    keep=((0, rx(r"^(?:✖ \d+ problems?|Found \d+ errors?|warning: .* generated \d+ warnings?"
                 r"|error: could not compile|\d+ errors?|All checks passed)")),
          (1, rx(r"^[ \t]+\d+:\d+[ \t]+error[ \t]|^[^ \t\n:][^:\n]*:\d+:\d+: (?:[EF]\d|invalid-syntax:|SyntaxError:)"
                 r"|^error(?:\[\w+\])?: ")),
          (2, _ESLINT_FILE),
          (3, rx(r"^[ \t]+\d+:\d+[ \t]+warning[ \t]|^[^ \t\n:][^:\n]*:\d+:\d+: [A-Z]{1,4}\d|^warning: |^[ \t]+--> "))),
    min_hits=2,
)
