"""Logs: counts per level and the repeated error messages (each with its count and lines)
up front, then each distinct error line, the repeats, warnings, a line of context each
side of them, then the first and last lines."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from functools import cache
from itertools import islice
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, Run, census, finish, pick
from ._lines import LineCut, Stream, by_priority, newlines_and_one, rx

_ERROR_WORDS: Final = ("ERR", "FATAL", "CRITICAL", "PANIC", "SEVERE", "Traceback", "Exception")
_WARN_WORDS: Final = ("WARN",)
_WORDS: Final = census(*_ERROR_WORDS, *_WARN_WORDS, "INFO", "DEBUG", "TRACE", "NOTICE")
_LEVEL: Final = re.compile(r"\b(ERROR|ERR|FATAL|CRITICAL|PANIC|SEVERE|WARN|WARNING|INFO|DEBUG|TRACE|NOTICE)\b")
_ERRORS: Final = rx(r"\b(?:ERROR|ERR|FATAL|CRITICAL|PANIC|SEVERE|Traceback|Exception)\b")
_WARNS: Final = rx(r"\b(?:WARN|WARNING)\b")


_LEVELS: Final = census("ERROR", "ERR", "FATAL", "CRITICAL", "PANIC", "SEVERE", "WARN", "WARNING", "INFO", "DEBUG",
                        "TRACE", "NOTICE")
assert _LEVEL.pattern == r"\b(" + "|".join(_LEVELS) + r")\b"


@cache
def _level_words(words: tuple[str, ...]) -> re.Pattern[str]:
    """_LEVEL's first match among `words` in a line, and the rest of that line: led by the
    words themselves, which the regex engine skips to, where _LEVEL, led by \b, is tried at
    every position (the \b before a word, which starts with a letter, is a look behind it
    for a letter before it). The next search starts on the next line."""
    return re.compile(r"(?:" + "|".join(rf"{w}(?<!\w{w})" for w in words) + r")\b[^\n]*")


def _level_lines(part: str, enough: int) -> int:
    """How many lines of `part` hold a level word, counted up to `enough`: each match is one
    line (it runs to the line's end), taken in C up to `enough`."""
    words = tuple(filter(Doc.of(part).has, _LEVELS))
    if not words:
        return 0
    return len(list(islice(_level_words(words).finditer(part), enough)))


_GROUPED: Final = re.compile(r"\b(?:ERROR|ERR|FATAL|CRITICAL|PANIC|SEVERE)\b")
_NUMBER: Final = re.compile(r"\d+")
_GROUPS: Final = 5
_PLACES: Final = 4


class _Errors:
    """The error lines, split into each message's first line and its repeats: a message is
    what follows the level word, its digits (ids, counts, times) not telling lines apart."""

    def __init__(self, doc: Doc) -> None:
        self.lines = doc.grep(_ERRORS, _ERROR_WORDS)
        search, number, text = _GROUPED.search, _NUMBER.sub, doc.lines
        self.keys: list[str | None] = []
        for i in self.lines:
            m = search(text[i])
            self.keys.append(m.group(0) + number("#", text[i][m.end():]) if m else None)
        seen: set[str] = set()
        self.first = [i for i, k in zip(self.lines, self.keys)
                      if k is None or not (k in seen or seen.add(k))]  # type: ignore[func-returns-value]
        kept = set(self.first)
        self.repeats = [i for i in self.lines if i not in kept] if len(kept) < len(self.lines) else []

    def groups(self) -> list[str]:
        """One line per repeated message, most repeated first: its count and its lines."""
        if not self.repeats:
            return []
        counts = Counter(k for k in self.keys if k is not None)
        top = [(k, n) for k, n in counts.most_common(_GROUPS) if n > 1]
        places: dict[str, list[int]] = {k: [] for k, _ in top}
        for i, k in zip(self.lines, self.keys):
            found = places.get(k) if k is not None else None
            if found is not None and len(found) < _PLACES:
                found.append(i + 1)
        return [f"[×{n:,} {k}; at lines {', '.join(f'{i:,}' for i in places[k])}"
                f"{f' and {n - len(places[k]):,} more' if n > len(places[k]) else ''}]" for k, n in top]


def _runs(lines: list[int], prio: int, context: int = 0) -> Iterator[Run]:
    return ((prio, max(0, i - context), i + context + 1) for i in lines)


class LogCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """A third of the whole text's lines carry a level word (none without one of the words
        in it at all); the count stops once it is reached."""
        if not Doc.of(text).holds(_WORDS):  # every level word holds one of these
            return False
        need = -(-newlines_and_one(Doc.of(text)) // 3)
        return _level_lines(text, need) >= need

    def lead(self, doc: Doc, limits: Limits) -> list[str]:
        errors = len(doc.grep(_ERRORS, _ERROR_WORDS))
        warnings = len(doc.grep(_WARNS, _WARN_WORDS))
        return [(f"[log cut: {len(doc):,} lines: {errors:,} with an error word, "
                 f"{warnings:,} with a warning word]")]

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        label, size = self.labeler(doc)
        errors = _Errors(doc)  # once, for the lead and the runs
        view = pick(doc, by_priority(self._streams(doc, errors)), limits,
                    lead=self.lead(doc, limits) + errors.groups(), label=label, size=size,
                    presorted=True, lead_after=self.lead_after)
        return finish(view, limits)

    def _streams(self, doc: Doc, errors: _Errors) -> list[Stream]:
        """Each error message's first line (and each traceback's exception line), then the
        repeats, warnings, a line of context each side of them, the first and last lines."""
        n = len(doc)
        warns = doc.grep(_WARNS, _WARN_WORDS)
        return [(0, _runs(errors.first, 0)), (0, lambda: _exceptions(doc)),
                (1, _runs(errors.repeats, 1)), (2, _runs(warns, 2)),
                (3, lambda: _runs(errors.lines, 3, 1)), (4, lambda: _runs(warns, 4, 1)),
                (5, iter([(5, 0, min(n, 3)), (5, max(0, n - 3), n)]))]


_TRACEBACK = rx(r"Traceback \(most recent call last\):")
_FRAMES_MAX: Final = 400


def _exceptions(doc: Doc) -> Iterator[Run]:
    """The exception line that ends each Python traceback (the first unindented line after
    its frames): it says what went wrong, where "Traceback …" only says that something did."""
    if not doc.has("Traceback"):  # the census knows: no pass for the whole phrase
        return
    lines, n = doc.lines, len(doc)
    for i in doc.grep(_TRACEBACK, ("Traceback (most recent call last):",)):
        for j in range(i + 1, min(n, i + _FRAMES_MAX)):
            if lines[j] and lines[j][0] not in " \t":
                yield (0, j, j + 1)
                break


CUT = LogCut(name="log", signal=_LEVEL, keep=((0, _ERRORS), (1, _WARNS)), context=1,
             gap_counts=(("error", _ERRORS), ("warning", _WARNS)),
             needles={_ERRORS.pattern: _ERROR_WORDS, _WARNS.pattern: _WARN_WORDS})
