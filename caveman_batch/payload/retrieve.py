"""Getting an original back, whole or as a byte-exact range of its lines."""

from __future__ import annotations

import re
from typing import Final

from .. import ccr
from ..errors import UsageError
from ..store import Store

_RANGE: Final = re.compile(r"([0-9]*):([0-9]*)|([0-9]+)")  # (ASCII digits: \d takes any script's)
_MOST_DIGITS: Final = 18  # a line number longer is past any original's end (and int() of
# over 4,300 digits raises): read as the largest such


def parse_lines(spec: str) -> tuple[int, int | None]:
    """"A:B" (1-based, inclusive), "A:", ":B" or "A" -> (first, last or None for the end)."""
    m = _RANGE.fullmatch(spec.strip())
    if m is None:
        raise UsageError(f"invalid line range {spec!r}: use A:B (1-based, inclusive), A: or :B")
    last: int | None
    if m.group(3):
        first = last = _number(m.group(3))
    else:
        first = _number(m.group(1)) if m.group(1) else 1
        last = _number(m.group(2)) if m.group(2) else None
    if first < 1 or (last is not None and last < first):
        raise UsageError(f"invalid line range {spec!r}: need 1 <= A <= B")
    return first, last


def _number(digits: str) -> int:
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= _MOST_DIGITS else 10**_MOST_DIGITS


def slice_lines(original: bytes, first: int, last: int | None) -> bytes:
    """Lines first..last of `original`, each with its own line ending (\\n, \\r\\n, none)."""
    total = original.count(b"\n") + (0 if original.endswith(b"\n") or not original else 1)
    if first > total:
        raise UsageError(f"line {first:,} is past the end: the original has {total:,} "
                         f"line{'' if total == 1 else 's'}")
    start = _offset_of_line(original, first)
    if last is None or last >= total:
        return original[start:]
    return original[start:_offset_of_line(original, last + 1)]


def _offset_of_line(data: bytes, line: int) -> int:
    """Byte offset where 1-based `line` starts (found by newline search, no full split)."""
    pos = 0
    for _ in range(line - 1):
        pos = data.index(b"\n", pos) + 1
    return pos


def retrieve(store: Store, handle: str, lines: str | None = None) -> bytes:
    original = ccr.recover(store, handle)
    if lines is None:
        return original
    first, last = parse_lines(lines)
    return slice_lines(original, first, last)
