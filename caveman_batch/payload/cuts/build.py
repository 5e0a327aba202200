"""Compiler and bundler output (gcc/clang, tsc, rustc/cargo, esbuild, webpack).

The closing summary first (it is one line and says how bad it is), then every
error, then the code frames of errors, then warnings
with theirs. A code frame is the run of indented / gutter lines after a message.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Final

from ..model import Limits
from ..view import Doc, Run
from ._lines import LineCut, Stream, _hits, rx

_ERROR = rx(
    r"^(?:[^ \t\n:(][^\n:(]*:\d+:\d+: (?:fatal )?error:"  # gcc/clang
    r"|[^ \t\n(][^\n(]*\(\d+,\d+\): error TS\d+:"  # tsc
    r"|[^ \t\n:][^\n:]*:\d+:\d+ - error TS\d+:"  # tsc --pretty
    r"|error(?:\[E\d+\])?: "  # rustc
    r"|✘ \[ERROR\]|ERROR in |[^ \t\n:][^\n:]*:\d+: error:)"
)
_WARNING = rx(
    r"^(?:[^ \t\n:(][^\n:(]*:\d+:\d+: warning:|warning(?:\[\w+\])?: |▲ \[WARNING\]|WARNING in "
    r"|[^ \t\n:(][^\n:(]*:\d+:\d+: note:)"
)
_SUMMARY = rx(
    r"^(?:\d+ (?:errors?|warnings?)(?: and \d+ warnings?)? generated|Found \d+ errors?"
    r"|error: could not compile|make(?:\[\d+\])?: \*\*\*|webpack [\d.]+ compiled"
    r"|[ \t]*Finished |\d+ errors?\r?$|Build failed|error: aborting)"
)
_FRAME = re.compile(r"[ \t]|\d+ *\||~|\^|\|")
_FRAME_MAX: Final = 12
#: repeated messages the lead groups, and the locations it names for each
_GROUPS: Final = 8
_PLACES: Final = 4


def _frame_runs(doc: Doc, heads: Iterator[int], prio: int) -> Iterator[Run]:
    """The code frame under each message: following indented or gutter lines (lazily), across
    one blank line when indented lines follow it (esbuild puts the location and frame there)."""
    lines, n = doc.lines, len(doc)
    for i in heads:
        end = i + 1
        while end < n and end - i <= _FRAME_MAX:
            line = lines[end]
            if not line and end + 1 < n and lines[end + 1][:1] in (" ", "\t") and end == i + 1:
                end += 1  # the blank line esbuild writes between a message and its location
            elif line and _FRAME.match(line):
                end += 1
            else:
                break
        yield (prio, i, end)


def _message(line: str) -> str:
    """An error line without its location: identical messages at different places match."""
    at = line.find("error")
    if at < 0:
        at = line.find("ERROR")
    return line[at:] if at > 0 else line


def _place(doc: Doc, i: int) -> str:
    """Where error line `i` points: its own `file:line:col` prefix, else rustc's `-->` line
    under it, else the location esbuild writes after a blank line."""
    line, lines = doc.lines[i], doc.lines
    at = line.find("error")
    if at > 0:
        return line[:at].rstrip(" :-(").removesuffix(": fatal").rstrip(" :")
    for j in (i + 1, i + 2):
        near = lines[j].strip() if j < len(lines) else ""
        if near.startswith("--> "):
            return near[4:]
        if _is_location(near):
            return near[:-1]
    return f"line {i + 1:,}"


def _is_location(text: str) -> bool:
    """esbuild's location line, stripped: `src/app.tsx:3:22:`."""
    return text.endswith(":") and text.count(":") >= 3 and " " not in text


class _Errors:
    """The error lines, each marked first of its message or a repeat of one seen above."""

    def __init__(self, doc: Doc) -> None:
        self.doc = doc
        self.lines = doc.grep(_ERROR)
        self.messages = list(map(_message, map(doc.lines.__getitem__, self.lines)))
        seen: set[str] = set()
        # a message's first line, in order: what a user fixes first; its repeats count
        self.first = [i for i, m in zip(self.lines, self.messages) if not (m in seen or seen.add(m))]  # type: ignore[func-returns-value]
        self.repeats = sorted(set(self.lines) - set(self.first)) if len(self.first) < len(self.lines) else []

    def runs(self, which: list[int], prio: int) -> Iterator[Run]:
        """Each error line with its location when that is under it: rustc's `-->` line, or
        esbuild's `file:line:col:` after a blank line."""
        lines, n = self.doc.lines, len(self.doc)
        for i in which:
            end = i + 1
            if end < n and lines[end].lstrip().startswith("--> "):
                end += 1
            elif end + 1 < n and not lines[end] and _is_location(lines[end + 1].strip()):
                end += 2
            yield (prio, i, end)

    def lead(self) -> list[str]:
        """One line per message repeated, most repeated first: its count and where it is."""
        if not self.repeats:
            return []
        counts = Counter(self.messages)
        top = [m for m, k in counts.most_common(_GROUPS) if k > 1]
        places: dict[str, list[str]] = {m: [] for m in top}
        for i, m in zip(self.lines, self.messages):
            found = places.get(m)
            if found is not None and len(found) < _PLACES:
                found.append(_place(self.doc, i))
        return [f"[×{counts[m]:,} {m}; at {', '.join(places[m])}"
                f"{f' and {counts[m] - len(places[m]):,} more' if counts[m] > len(places[m]) else ''}]"
                for m in top]


class BuildCut(LineCut):
    def streams(self, doc: Doc) -> list[Stream]:
        errors = _Errors(doc)
        # the first error's code frame too: the first error is the one to fix first
        first = [(1, lambda: _frame_runs(doc, iter(errors.first[:1]), 1))] if errors.first else []
        return [(0, partial(_hits, doc, _SUMMARY, (), 0, 0)), (1, lambda: errors.runs(errors.first, 1)), *first,
                (2, lambda: _frame_runs(doc, iter(errors.first), 2)),
                (3, partial(_hits, doc, _WARNING, (), 3, 0)),
                (4, lambda: _frame_runs(doc, doc.igrep(_WARNING), 4)),
                (5, lambda: errors.runs(errors.repeats, 5)),
                (6, lambda: _frame_runs(doc, iter(errors.repeats), 6))]

    def lead(self, doc: Doc, limits: Limits) -> list[str]:
        return _Errors(doc).lead()


# every alternative of _ERROR holds "error" or "ERROR": a sample with neither is not searched
CUT = BuildCut(name="build", signal=_ERROR, keep=(), min_hits=1, signal_needles=("error", "ERROR"),
               lead_after=1)
