"""Logs: counts per level up front, then every error line with a line of context each
side, then warnings, then the first and last lines."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, Run, sample
from ._lines import LineCut, Stream, rx

_ERROR_WORDS: Final = ("ERR", "FATAL", "CRITICAL", "PANIC", "SEVERE", "Traceback", "Exception")
_WARN_WORDS: Final = ("WARN",)
_WORDS: Final = (*_ERROR_WORDS, *_WARN_WORDS, "INFO", "DEBUG", "TRACE", "NOTICE")
_LEVEL: Final = re.compile(r"\b(ERROR|ERR|FATAL|CRITICAL|PANIC|SEVERE|WARN|WARNING|INFO|DEBUG|TRACE|NOTICE)\b")
_ERRORS: Final = rx(r"\b(?:ERROR|ERR|FATAL|CRITICAL|PANIC|SEVERE|Traceback|Exception)\b")
_WARNS: Final = rx(r"\b(?:WARN|WARNING)\b")


def _level_lines(part: str) -> int:
    """How many lines of `part` hold a level word: searched over the whole part, and on
    from the next line after each hit (a line counts once)."""
    hits, pos, search, find = 0, 0, _LEVEL.search, part.find
    while (m := search(part, pos)) is not None:
        hits += 1
        pos = find("\n", m.end()) + 1
        if not pos:
            break
    return hits


class LogCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """Most lines carry a level word (none without one of the words in it at all)."""
        part = sample(text)
        if not any(w in part for w in _WORDS):  # every level word holds one of these
            return False
        return _level_lines(part) * 3 >= part.count("\n") + 1

    def lead(self, doc: Doc, limits: Limits) -> list[str]:
        errors = len(doc.grep(_ERRORS, _ERROR_WORDS))
        warnings = len(doc.grep(_WARNS, _WARN_WORDS))
        return [(f"[log cut: {len(doc):,} lines: {errors:,} with an error word, "
                 f"{warnings:,} with a warning word]")]

    def streams(self, doc: Doc) -> list[Stream]:
        n = len(doc)
        return [*super().streams(doc), (0, lambda: _exceptions(doc)),
                (5, iter([(5, 0, min(n, 3)), (5, max(0, n - 3), n)]))]


_TRACEBACK = rx(r"Traceback \(most recent call last\):")
_FRAMES_MAX: Final = 400


def _exceptions(doc: Doc) -> Iterator[Run]:
    """The exception line that ends each Python traceback (the first unindented line after
    its frames): it says what went wrong, where "Traceback …" only says that something did."""
    lines, n = doc.lines, len(doc)
    for i in doc.grep(_TRACEBACK, ("Traceback (most recent call last):",)):
        for j in range(i + 1, min(n, i + _FRAMES_MAX)):
            if lines[j] and lines[j][0] not in " \t":
                yield (0, j, j + 1)
                break


CUT = LogCut(name="log", signal=_LEVEL, keep=((0, _ERRORS), (1, _WARNS)), context=1,
             gap_counts=(("error", _ERRORS), ("warning", _WARNS)),
             needles={_ERRORS.pattern: _ERROR_WORDS, _WARNS.pattern: _WARN_WORDS})
