"""Logs: counts per level up front, then every error line with a line of context each
side, then warnings, then the first and last lines."""

from __future__ import annotations

import re
from functools import cache
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, census
from ._lines import LineCut, Stream, rx

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
    """_LEVEL without its leading \b, and only with `words`: led by a few letters (or one
    literal), which the regex engine skips to, where _LEVEL, led by \b, is tried at every
    position. A candidate it finds is then checked by _LEVEL."""
    return re.compile(r"(" + "|".join(words) + r")\b")


def _level_lines(part: str, enough: int) -> int:
    """How many lines of `part` hold a level word, counted up to `enough`: searched over the
    whole part, and on from the next line after each hit (a line counts once). Every match
    of _LEVEL is one of the words `part` holds, so the first candidate of those that _LEVEL
    matches at is its first match."""
    words = tuple(filter(Doc.of(part).has, _LEVELS))
    if not words:
        return 0
    hits, pos, search, match, find = 0, 0, _level_words(words).search, _LEVEL.match, part.find
    while hits < enough and (m := search(part, pos)) is not None:
        if match(part, m.start()) is None:  # inside a word: not a level word
            pos = m.start() + 1
            continue
        hits += 1
        pos = find("\n", m.end()) + 1
        if not pos:
            break
    return hits


class LogCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """A third of the whole text's lines carry a level word (none without one of the words
        in it at all); the count stops once it is reached."""
        if not Doc.of(text).holds(_WORDS):  # every level word holds one of these
            return False
        need = -(-(text.count("\n") + 1) // 3)
        return _level_lines(text, need) >= need

    def lead(self, doc: Doc, limits: Limits) -> list[str]:
        errors = len(doc.grep(_ERRORS, _ERROR_WORDS))
        warnings = len(doc.grep(_WARNS, _WARN_WORDS))
        return [(f"[log cut: {len(doc):,} lines: {errors:,} with an error word, "
                 f"{warnings:,} with a warning word]")]

    def streams(self, doc: Doc) -> list[Stream]:
        n = len(doc)
        return [*super().streams(doc), (5, iter([(5, 0, min(n, 3)), (5, max(0, n - 3), n)]))]


CUT = LogCut(name="log", signal=_LEVEL, keep=((0, _ERRORS), (1, _WARNS)), context=1,
             gap_counts=(("error", _ERRORS), ("warning", _WARNS)),
             needles={_ERRORS.pattern: _ERROR_WORDS, _WARNS.pattern: _WARN_WORDS})
