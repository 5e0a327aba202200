"""Linters (eslint, ruff, clippy): totals and the top rules with example locations first,
then the problems themselves, errors before warnings, as far as they fit."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, Needle, census, line_hits, needle_lines
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
# ruff's default (full) format: the rule on its own line, the location on the `-->` under it
_RUFF_FULL_ALL = re.compile(r"\n([A-Z]{1,4}\d{2,4})(?: \[\*\])? [^\n]*\n[ \t]*--> ([^\n]+)")
#: _RUFF_FULL_ALL's rules alone, its match ending past the `--> ` (the rest of the line is no
#: other match's): counted from a list of strings, no tuple a problem
_RUFF_FULL_RULES = re.compile(r"\n([A-Z]{1,4}\d{2,4})(?: \[\*\])? [^\n]*\n[ \t]*--> [^\n]")
_CLIPPY_ALL = re.compile(r"#\[(?:warn|deny)\((clippy::\w+)\)\]|rust-clippy/master/index\.html#(\w+)")


Found = tuple[bool, bool, bool, bool]


def _problems(doc: Doc, found: Found = (True, True, True, True)) -> Iterator[tuple[str, str, int]]:
    """(rule, location, offset) of every problem, lazily; `found` says which of the ruff,
    eslint, clippy and ruff full forms `_counts` saw at all (a form it did not is not searched
    again)."""
    text = doc.nl_text
    for m in _RUFF_ALL.finditer(text) if found[0] else ():
        yield m.group(2), m.group(1), m.start()
    for m in _RUFF_FULL_ALL.finditer(text) if found[3] else ():
        yield m.group(1), m.group(2).strip(), m.start()
    for m in _ESLINT_ALL.finditer(text) if found[1] else ():
        yield _eslint_rule(m.group(2)), m.group(1), m.start()
    for m in _CLIPPY_ALL.finditer(text) if found[2] and "clippy" in text else ():
        yield m.group(1) or f"clippy::{m.group(2)}", "", m.start()


def _eslint_rule(rest: str) -> str:
    return rest.rsplit(None, 1)[-1] if rest.strip() else "?"


def _counts(doc: Doc) -> tuple[Counter[str], Found]:
    """Problems per rule, and which forms (ruff, eslint, clippy) had any; `findall` builds
    the matches in C (most of the cost here)."""
    text = doc.nl_text
    # each form searched only where the census says the text holds what its every line does
    # (a digit then ": "; "--> "; a blank, then eslint's severity, then a blank)
    ruff = _RUFF_RULES.findall(text) if doc.holds(_RUFF_LITERALS) else []  # a list of strings: counted in C
    counts = Counter(ruff)
    full = _RUFF_FULL_RULES.findall(text) if doc.has("--> ") else []
    counts.update(full)
    eslint = Counter(_ESLINT_REST.findall(text)) if doc.holds(_SEVERITIES) else Counter()
    for rest, n in eslint.items():  # each distinct message once
        counts[_eslint_rule(rest)] += n
    clippy = []
    if "clippy" in text:  # the clippy pattern has no literal to jump to: search only if worth it
        clippy = _CLIPPY_ALL.findall(text)
        counts.update(a or f"clippy::{b}" for a, b in clippy)
    return counts, (bool(ruff), bool(eslint), bool(clippy), bool(full))


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
                        r"[^ \t\n:][^:\n]*:\d+:\d+: [A-Z]{1,4}\d{2,4} ", r"✖ \d+ problems?",
                        r"[A-Z]{1,4}\d{2,4} (?:\[\*\] )?[^ \t\n]", r"invalid-syntax: ")  # ruff full
_SIGNAL: Final = re.compile("|".join(f"^{line}" for line in _SIGNAL_LINES) + "|clippy::\\w+", re.MULTILINE)
#: ruff's full format: a rule line is a problem only with a `-->` location line under it
_ARROW = rx(r"^[ \t]*--> [^ \t\n]")
_SIGNAL_AT_LINES: Final = rx("^(?:" + "|".join(_SIGNAL_LINES) + ")")
_SIGNAL_AT_LINES_SHORT: Final = rx("^(?:" + "|".join(_SIGNAL_LINES[:3]) + ")")
_FULL_FORM: Final = rx("^(?:" + "|".join(_SIGNAL_LINES[3:]) + ")")
#: what every line of the short forms holds: eslint's severity, ruff's `: F401 ` (of `:1:2: F401 `:
#: led by a literal, which the regex engine jumps to, where `:\d` stopped at every time stamp), ✖
_SHORT_NEEDLES: Final = (" error ", " error\t", " warning ", " warning\t", "\terror", "\twarning",
                         re.compile(r": [A-Z]{1,4}\d{2,4} "), "✖ ")
census(*(n for n in _SHORT_NEEDLES if isinstance(n, str)), "clippy::", "--> ")
#: what every eslint problem line holds: its severity between blanks
_SEVERITIES: Final = _SHORT_NEEDLES[:6]
#: what a ruff concise line (`a.py:1:2: F401 `) holds, a digit then ": ": a text with none is
#: not searched for its needle (the one that is a pattern, not a literal)
_RUFF_LITERALS: Final = census(*(f"{d}: " for d in "0123456789"))
#: the needles of each short form (typed: mypy's inferred join of the three slices depended on
#: the hash seed of its run)
_FORM_NEEDLES: Final[tuple[tuple[Needle, ...], ...]] = (_SHORT_NEEDLES[:6], _SHORT_NEEDLES[6:7],
                                                         _SHORT_NEEDLES[7:])
#: each short form alone, with the needles its lines hold and literals one of which the text
#: must hold (none: its needles are literals): eslint's severity words are on most lines of
#: an npm log, whose lines the ruff form would then be read through
_SHORT_FORMS: Final = tuple((rx(f"^(?:{line})"), needles, literals) for line, needles, literals in zip(
    _SIGNAL_LINES[:3], _FORM_NEEDLES, ((), _RUFF_LITERALS, ()),
    strict=True))


def _short_lines(text: str, least: int) -> set[int]:
    """Where (offsets in `text`) `least` of the lines `_SIGNAL_AT_LINES_SHORT` matches start, a
    form at a time, or all of them when there are fewer: the first `least` lines of each form
    together are `least` lines if the text has them."""
    found: set[int] = set()
    doc = Doc.of(text)
    for pattern, needles, literals in _SHORT_FORMS:
        if literals and not doc.holds(literals):
            continue
        found |= needle_lines(pattern, text, needles, least)
        if len(found) >= least:
            break
    return found


def _with_full_form(text: str, short: set[int], least: int) -> bool:
    """Whether `least` lines match `_SIGNAL_AT_LINES`, given every line its short forms match
    (`short`, fewer than `least`): those and the lines of ruff's full form (a rule code at the
    line's start: cheap to search, where the short forms read every char of every line)."""
    found = set(short)
    for at in Doc.of(text).positions(_FULL_FORM):  # the newline before a line: the line's offset
        found.add(at)
        if len(found) >= least:
            return True
    return False


class LintCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """Two signal hits in the whole text; without "clippy::" every hit starts a line (one
        per line), so the lines are searched alone, newline to newline. A rule at a line's
        start counts only with ruff's `-->` location lines."""
        doc = Doc.of(text)
        if doc.has("clippy::"):
            return len(self.signal.findall(text)) >= self.min_hits
        short = _short_lines(text, self.min_hits)
        if len(short) >= self.min_hits:
            return True
        return (doc.has("--> ") and line_hits(_ARROW, text, self.min_hits)
                and _with_full_form(text, short, self.min_hits))

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


_SUMMARY = rx(r"^(?:✖ \d+ problems?|Found \d+ errors?|warning: .* generated \d+ warnings?"
             r"|error: could not compile|\d+ errors?|All checks passed)")
#: what every _SUMMARY line holds: the few summary lines are read where these are, not by
#: trying six alternatives at each of a long output's lines (a count's last digit before
#: " error": " error" alone is on every eslint problem line, each a miss)
_SUMMARY_NEEDLES: Final = ("✖ ", "warning: ", "error: could not compile", *(f"{d} error" for d in "0123456789"),
                           "All checks passed")

CUT = LintCut(
    name="lint",
    signal=_SIGNAL,
    keep=((0, _SUMMARY),
          (1, rx(r"^[ \t]+\d+:\d+[ \t]+error[ \t]|^[^ \t\n:][^:\n]*:\d+:\d+: (?:[EF]\d|invalid-syntax:|SyntaxError:)"
                 r"|^error(?:\[\w+\])?: |^[EF]\d{3} |^invalid-syntax: ")),
          (2, _ESLINT_FILE),
          (3, rx(r"^[ \t]+\d+:\d+[ \t]+warning[ \t]|^[^ \t\n:][^:\n]*:\d+:\d+: [A-Z]{1,4}\d|^warning: |^[ \t]+--> |^[A-Z]{1,4}\d{2,4} "))),
    min_hits=2,
    led_needles={_SUMMARY.pattern: _SUMMARY_NEEDLES},
)
