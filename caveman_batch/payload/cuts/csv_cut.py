"""CSV/TSV tables: the header, the rows whose field count is not the header's (named by line
up front), the first and last rows, the middle counted.

Only text that is a table by every measure gets here: the same number of
delimited fields on every sampled line, and no line that reads like a compiler
message ("a.ts(3,5): error TS2322: …" has commas but is not a row).
"""

from __future__ import annotations

import csv
import re
from itertools import compress, count, repeat
from operator import ne
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
        delim = _delimiter([line for line in doc.lines[:_SAMPLE_LINES] if line]) or ","
        fields = _fields(doc.lines[0], delim)
        bad = _malformed(doc.lines, delim, fields)
        runs: list[Run] = [(0, 0, 1)]  # the header, then the rows that break the table
        runs += [(1, i, i + 1) for i in bad[:_SHOWN_BAD]]
        for k in range(1, n):  # then rows from both ends, alternating
            runs.append((k + 1, k, k + 1))
            runs.append((k + 1, n - k, n - k + 1))
            if k > 200:
                break

        def label(s: int, e: int) -> str:
            return f"[… {e - s:,} rows omitted …]"

        return finish(pick(doc, runs, limits, lead=_lead(n, fields, bad), label=label, lead_after=1), limits)


_SHOWN_BAD: Final = 50


def _fields(line: str, delim: str) -> int:
    """How many fields a row has, quoted delimiters not splitting (-1: no row csv can read)."""
    try:
        return len(next(csv.reader([line], delimiter=delim), []))
    except csv.Error:  # a field past csv's size limit
        return -1


def _malformed(lines: list[str], delim: str, fields: int) -> list[int]:
    """The rows (line indexes) whose field count is not the header's. The delimiters are
    counted in C; only a line whose count differs is parsed, for quoted delimiters."""
    want = fields - 1
    odd = compress(count(), map(ne, map(str.count, lines, repeat(delim)), repeat(want)))
    return [i for i in odd if i and lines[i] and _fields(lines[i], delim) != fields]


def _lead(n: int, fields: int, bad: list[int]) -> list[str]:
    if not bad:
        return []
    at = ", ".join(f"{i + 1:,}" for i in bad[:10]) + (", …" if len(bad) > 10 else "")
    line = f"[csv cut: {n - 1:,} rows of {fields:,} fields; {len(bad):,} malformed (another field count) at lines {at}]"
    return [line]


CUT = CsvCut()
