"""Logs: counts per level up front, then every error line with a line of context each
side, then warnings, then the first and last lines."""

from __future__ import annotations

import re
from collections import Counter
from typing import Final

from ..model import Hint
from ..view import Doc, Run, count_lines, sample
from ._lines import LineCut, rx

_LEVEL: Final = re.compile(r"\b(ERROR|ERR|FATAL|CRITICAL|PANIC|SEVERE|WARN|WARNING|INFO|DEBUG|TRACE|NOTICE)\b")
_ERRORS: Final = rx(r"\b(?:ERROR|ERR|FATAL|CRITICAL|PANIC|SEVERE|Traceback|Exception)\b")
_WARNS: Final = rx(r"\b(?:WARN|WARNING)\b")


class LogCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        part = sample(text)
        return len(_LEVEL.findall(part)) * 3 >= count_lines(part)

    def lead(self, doc: Doc) -> list[str]:
        counts = Counter(m.group(1) for m in _LEVEL.finditer(doc.text))
        levels = ", ".join(f"{k} {v:,}" for k, v in counts.most_common())
        return [f"[log cut: {len(doc):,} lines; level words seen: {levels}]"]

    def runs(self, doc: Doc) -> list[Run]:
        runs = super().runs(doc)
        n = len(doc)
        runs += [(5, 0, min(n, 3)), (5, max(0, n - 3), n)]
        return runs


CUT = LogCut(name="log", signal=_LEVEL, keep=((0, _ERRORS), (1, _WARNS)), context=1,
             gap_counts=(("error", _ERRORS), ("warning", _WARNS)))
