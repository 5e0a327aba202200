"""CSV/TSV tables: the header, the first and last rows, the middle counted.

Only text that is a table by every measure gets here: the same number of
delimited fields on every sampled line, and no line that reads like a compiler
message ("a.ts(3,5): error TS2322: …" has commas but is not a row).
"""

from __future__ import annotations

import re
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, Run, finish, pick

_DIAGNOSTIC: Final = re.compile(r"\(\d+,\d+\): |:\d+:\d+[: ]|\berror\b|\bwarning\b|^[ \t]")
#: a log record, not a row: a level word (Python logging's "…09:46:34,789 ERROR …" has one
#: comma a line) or a JSON object a line (NDJSON: its commas separate keys)
_RECORD: Final = re.compile(r"\b(?:ERROR|WARN|WARNING|INFO|DEBUG|TRACE|CRITICAL|FATAL)\b|^\{.*\}\r?$")
_SAMPLE_LINES: Final = 30


def _delimiter(lines: list[str]) -> str | None:
    for delim in ("\t", ",", ";", "|"):
        counts = {line.count(delim) for line in lines}
        if len(counts) == 1 and counts.pop() >= 1:
            return delim
    return None


class CsvCut:
    name = "csv"

    def detect(self, text: str, hint: Hint) -> bool:
        lines = text[:16_384].split("\n")[:_SAMPLE_LINES]
        if len(lines) > 3 and len(text) > 16_384:
            lines = lines[:-1]  # the sample may end mid-line
        lines = [line for line in lines if line]
        if len(lines) < 3 or any(_DIAGNOSTIC.search(line) for line in lines):
            return False
        if sum(1 for line in lines if _RECORD.search(line)) * 2 >= len(lines):
            return False
        return _delimiter(lines) is not None

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        n = len(doc)
        runs: list[Run] = [(0, 0, 1)]  # the header
        for k in range(1, n):  # then rows from both ends, alternating
            runs.append((k, k, k + 1))
            runs.append((k, n - k, n - k + 1))
            if k > 200:
                break
        label = lambda s, e: f"[… {e - s:,} rows omitted …]"
        return finish(pick(doc, runs, limits, label=label), limits)


CUT = CsvCut()
